/*
 * nxhal_tpu_driver.c -- a small C host for testing libnxhal_tpu.so through
 * the nx_hal ABI alone (no core Python package needed). Built by the tests.
 *
 *   driver PLUGIN [-o name=T:value]... COMMAND [args]
 *     T: i int64, d double, b bool, s string, l int64 list (comma separated)
 *   commands:
 *     devices                      devices, attributes and diagnostics
 *     run PROGRAM [flags] INPUT... compile (or --load) and execute
 *         --device N  --async  --zero-copy  --save BLOB  --load BLOB
 *         --copt name=T:value  --outdir DIR  --repeat N
 *         INPUT = dtype:dims:file, dims like 4x4, or "scalar"
 *     memory                       accounting and the limit
 *     dlpack                       export and import on device 0
 *     dlpack-outlive [PROGRAM]     exports (a copy, a zero-copy host buffer,
 *                                  a re-exported DLPack import, PROGRAM's
 *                                  output for add.mlir), client_destroy, then
 *                                  reads and deletes them
 *     threads PROGRAM T N          T threads run add.mlir N times each
 *
 * Failures print "STATUS <CODE>: <message>" and exit 2.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nx_hal/nx_hal.h"

static const nxhal_api_t* api;

static const char* code_name(nxhal_status_code_t code) {
  static const char* names[] = {"OK",          "INVALID_ARGUMENT",    "NOT_FOUND",
                                "UNIMPLEMENTED", "UNAVAILABLE",       "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION", "DEADLINE_EXCEEDED", "INTERNAL",
                                "ABI_MISMATCH", "CANCELLED"};
  return (unsigned)code <= 10 ? names[code] : "UNKNOWN";
}

/* Prints and exits on a non-NULL status. */
static void check(nxhal_status_t* status) {
  if (status == NULL) return;
  printf("STATUS %s: %s\n", code_name(api->status_code(status)), api->status_message(status));
  api->status_free(status);
  fflush(stdout);
  exit(2);
}

static nxhal_dtype_t dtype_of(const char* s) {
  static const char* names[] = {"invalid", "f16", "bf16", "f32", "f64", "i8",  "i16",
                                "i32",     "i64", "u8",   "bool", "u16", "u32", "u64"};
  int i;
  for (i = 1; i < 14; ++i) {
    if (strcmp(names[i], s) == 0) return (nxhal_dtype_t)i;
  }
  return NXHAL_DTYPE_INVALID;
}

static const char* dtype_name(nxhal_dtype_t d) {
  static const char* names[] = {"invalid", "f16", "bf16", "f32", "f64", "i8",  "i16",
                                "i32",     "i64", "u8",   "bool", "u16", "u32", "u64"};
  return (unsigned)d < 14 ? names[d] : "?";
}

static size_t dtype_size(nxhal_dtype_t d) {
  static const size_t sizes[] = {0, 2, 2, 4, 8, 1, 2, 4, 8, 1, 1, 2, 4, 8};
  return (unsigned)d < 14 ? sizes[d] : 0;
}

/* Parses name=T:value into an option; strings point into `spec`. */
static int64_t list_storage[16][64];
static int num_lists = 0;
static void parse_option(char* spec, nxhal_option_t* o) {
  char* eq = strchr(spec, '=');
  memset(o, 0, sizeof(*o));
  o->struct_size = NXHAL_NAMED_VALUE_STRUCT_SIZE;
  if (eq == NULL || eq[1] == '\0' || eq[2] != ':') {
    fprintf(stderr, "bad option %s\n", spec);
    exit(64);
  }
  *eq = '\0';
  o->name = spec;
  switch (eq[1]) {
    case 'i': o->type = NXHAL_VALUE_INT64; o->int64_value = strtoll(eq + 3, NULL, 10); break;
    case 'd': o->type = NXHAL_VALUE_DOUBLE; o->double_value = strtod(eq + 3, NULL); break;
    case 'b': o->type = NXHAL_VALUE_BOOL; o->bool_value = atoi(eq + 3); break;
    case 's': o->type = NXHAL_VALUE_STRING; o->string_value = eq + 3; break;
    case 'l': {
      char* p = eq + 3;
      size_t n = 0;
      int64_t* list = list_storage[num_lists++];
      while (*p && n < 64) {
        list[n++] = strtoll(p, &p, 10);
        if (*p == ',') ++p;
      }
      o->type = NXHAL_VALUE_INT64_LIST;
      o->int64_list = list;
      o->int64_list_size = n;
      break;
    }
    default: fprintf(stderr, "bad option type in %s\n", spec); exit(64);
  }
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  char* data;
  long n;
  if (f == NULL) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(64);
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  /* 64-byte aligned so zero-copy can alias it. */
  if (posix_memalign((void**)&data, 64, (size_t)n + 64) != 0) exit(64);
  if (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n) exit(64);
  fclose(f);
  *size = (size_t)n;
  return data;
}

static void write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, size, f) != size) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(64);
  }
  fclose(f);
}

static void print_dims(const int64_t* dims, int64_t rank) {
  int64_t i;
  if (rank < 0) {
    printf("?");
    return;
  }
  for (i = 0; i < rank; ++i) printf("%s%lld", i ? "," : "", (long long)dims[i]);
}

static nxhal_device_t* device_at(nxhal_client_t* client, size_t index) {
  nxhal_device_t* device;
  check(api->client_device(client, index, &device));
  return device;
}

static int cmd_devices(nxhal_client_t* client) {
  size_t count, i, a, n;
  const char* diag;
  check(api->client_device_count(client, &count));
  printf("COUNT %zu\n", count);
  for (i = 0; i < count; ++i) {
    nxhal_device_t* device = device_at(client, i);
    nxhal_device_info_t info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    check(api->device_info(device, &info));
    printf("DEVICE %zu kind=%d name=%s vendor=%s formats=%s memory=%llu compat_key=%s\n", i,
           (int)info.kind, info.name, info.vendor, info.num_formats ? info.formats[0] : "",
           (unsigned long long)info.memory_bytes, info.compat_key);
    check(api->device_attribute_count(device, &n));
    for (a = 0; a < n; ++a) {
      nxhal_attribute_t attr;
      memset(&attr, 0, sizeof(attr));
      attr.struct_size = sizeof(attr);
      check(api->device_attribute(device, a, &attr));
      printf("ATTR %zu %s=", i, attr.name);
      if (attr.type == NXHAL_VALUE_STRING) printf("%s\n", attr.string_value);
      else if (attr.type == NXHAL_VALUE_INT64) printf("%lld\n", (long long)attr.int64_value);
      else if (attr.type == NXHAL_VALUE_BOOL) printf("%d\n", attr.bool_value);
      else if (attr.type == NXHAL_VALUE_DOUBLE) printf("%g\n", attr.double_value);
      else {
        print_dims(attr.int64_list, (int64_t)attr.int64_list_size);
        printf("\n");
      }
    }
  }
  check(api->client_diagnostics(client, &diag));
  printf("DIAG %s\n", diag);
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmd_run(nxhal_client_t* client, int argc, char** argv) {
  const char* program_path = argv[0];
  const char* save = NULL;
  const char* load = NULL;
  const char* outdir = ".";
  size_t device_index = 0, num_inputs = 0, num_outputs, i, repeat = 1, r;
  int async = 0, zero_copy = 0;
  nxhal_option_t copts[8];
  size_t num_copts = 0;
  nxhal_buffer_t* inputs[32];
  nxhal_buffer_t* outputs[32];
  void* input_data[32];
  nxhal_executable_t* exe;
  nxhal_device_t* device;
  int k;
  for (k = 1; k < argc; ++k) {
    if (strcmp(argv[k], "--device") == 0) device_index = (size_t)atoi(argv[++k]);
    else if (strcmp(argv[k], "--async") == 0) async = 1;
    else if (strcmp(argv[k], "--zero-copy") == 0) zero_copy = 1;
    else if (strcmp(argv[k], "--save") == 0) save = argv[++k];
    else if (strcmp(argv[k], "--load") == 0) load = argv[++k];
    else if (strcmp(argv[k], "--outdir") == 0) outdir = argv[++k];
    else if (strcmp(argv[k], "--repeat") == 0) repeat = (size_t)atoi(argv[++k]);
    else if (strcmp(argv[k], "--copt") == 0) parse_option(argv[++k], &copts[num_copts++]);
    else {
      /* dtype:dims:file */
      char* spec = argv[k];
      char* c1 = strchr(spec, ':');
      char* c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      int64_t dims[16];
      int64_t rank = 0;
      nxhal_tensor_desc_t desc;
      size_t size;
      if (c2 == NULL) {
        fprintf(stderr, "bad input %s\n", spec);
        return 64;
      }
      *c1 = *c2 = '\0';
      if (strcmp(c1 + 1, "scalar") != 0) {
        char* p = c1 + 1;
        while (*p) {
          dims[rank++] = strtoll(p, &p, 10);
          if (*p == 'x') ++p;
        }
      }
      memset(&desc, 0, sizeof(desc));
      desc.struct_size = NXHAL_TENSOR_DESC_STRUCT_SIZE;
      desc.dtype = dtype_of(spec);
      desc.rank = rank;
      desc.dims = dims;
      input_data[num_inputs] = read_file(c2 + 1, &size);
      device = device_at(client, device_index);
      check(api->buffer_from_host(device, &desc, input_data[num_inputs], size,
                                  zero_copy ? NXHAL_HOST_ZERO_COPY : NXHAL_HOST_COPY,
                                  &inputs[num_inputs]));
      {
        nxhal_buffer_info_t binfo;
        memset(&binfo, 0, sizeof(binfo));
        binfo.struct_size = sizeof(binfo);
        check(api->buffer_info(inputs[num_inputs], &binfo));
        printf("BUFFER %zu zero_copy=%d size=%llu\n", num_inputs, binfo.is_zero_copy,
               (unsigned long long)binfo.size_bytes);
      }
      ++num_inputs;
    }
  }
  device = device_at(client, device_index);
  if (load != NULL) {
    size_t size;
    void* blob = read_file(load, &size);
    check(api->executable_deserialize(device, blob, size, NULL, 0, &exe));
    free(blob);
  } else {
    size_t size;
    void* text = read_file(program_path, &size);
    nxhal_program_t program;
    double t0 = now_s();
    memset(&program, 0, sizeof(program));
    program.struct_size = NXHAL_PROGRAM_STRUCT_SIZE;
    program.format = "stablehlo";
    program.data = text;
    program.size = size;
    check(api->executable_compile(device, &program, copts, num_copts, &exe));
    printf("COMPILE_SECONDS %.6f\n", now_s() - t0);
    free(text);
  }
  {
    size_t n, j;
    nxhal_status_t* status = api->executable_io_count(exe, NXHAL_IO_INPUT, &n);
    if (status == NULL) {
      for (j = 0; j < n; ++j) {
        nxhal_io_info_t io;
        memset(&io, 0, sizeof(io));
        io.struct_size = sizeof(io);
        check(api->executable_io_info(exe, NXHAL_IO_INPUT, j, &io));
        printf("IN %zu %s %s ", j, io.name, dtype_name(io.desc.dtype));
        print_dims(io.desc.dims, io.desc.rank);
        printf("\n");
      }
    } else {
      printf("IN_UNKNOWN %s\n", api->status_message(status));
      api->status_free(status);
    }
  }
  check(api->executable_io_count(exe, NXHAL_IO_OUTPUT, &num_outputs));
  for (i = 0; i < num_outputs; ++i) {
    nxhal_io_info_t io;
    memset(&io, 0, sizeof(io));
    io.struct_size = sizeof(io);
    check(api->executable_io_info(exe, NXHAL_IO_OUTPUT, i, &io));
    printf("OUT %zu %s %s ", i, io.name, dtype_name(io.desc.dtype));
    print_dims(io.desc.dims, io.desc.rank);
    printf("\n");
  }
  if (save != NULL) {
    nxhal_blob_t* blob;
    check(api->executable_serialize(exe, &blob));
    write_file(save, blob->data, blob->size);
    printf("SAVED %zu\n", blob->size);
    api->blob_free(blob);
  }
  fflush(stdout);
  double start = now_s();
  for (r = 0; r < repeat; ++r) {
    double t0 = now_s();
    if (async) {
      nxhal_event_t* event;
      int32_t ready = 0;
      check(api->executable_execute(exe, inputs, num_inputs, outputs, num_outputs, &event));
      check(api->event_await(event, NXHAL_WAIT_FOREVER));
      check(api->event_is_ready(event, &ready));
      if (!ready) printf("EVENT_NOT_READY\n");
      api->event_destroy(event);
    } else {
      check(api->executable_execute(exe, inputs, num_inputs, outputs, num_outputs, NULL));
    }
    if (r == 0) printf("EXECUTE_SECONDS %.6f\n", now_s() - t0);
    if (r + 1 < repeat) {
      for (i = 0; i < num_outputs; ++i) api->buffer_destroy(outputs[i]);
    }
  }
  if (repeat > 1) printf("EXECUTE_MEAN_US %.3f\n", (now_s() - start) / (double)repeat * 1e6);
  for (i = 0; i < num_outputs; ++i) {
    nxhal_buffer_info_t binfo;
    char path[4096];
    void* host;
    memset(&binfo, 0, sizeof(binfo));
    binfo.struct_size = sizeof(binfo);
    check(api->buffer_info(outputs[i], &binfo));
    host = malloc(binfo.size_bytes ? binfo.size_bytes : 1);
    if (async) {
      nxhal_event_t* event;
      check(api->buffer_to_host(outputs[i], host, binfo.size_bytes, &event));
      check(api->event_await(event, 10LL * 1000 * 1000 * 1000));
      api->event_destroy(event);
    } else {
      check(api->buffer_to_host(outputs[i], host, binfo.size_bytes, NULL));
    }
    snprintf(path, sizeof(path), "%s/out%zu.bin", outdir, i);
    write_file(path, host, binfo.size_bytes);
    printf("RESULT %zu %s ", i, dtype_name(binfo.dtype));
    print_dims(binfo.dims, binfo.rank);
    printf(" %s\n", path);
    free(host);
    api->buffer_destroy(outputs[i]);
  }
  api->executable_destroy(exe);
  for (i = 0; i < num_inputs; ++i) {
    api->buffer_destroy(inputs[i]);
    free(input_data[i]);
  }
  return 0;
}

static void print_stats(const char* label, nxhal_device_t* device) {
  nxhal_memory_stats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  check(api->device_memory_stats(device, &stats));
  printf("%s in_use=%llu peak=%llu limit=%llu\n", label, (unsigned long long)stats.bytes_in_use,
         (unsigned long long)stats.peak_bytes_in_use, (unsigned long long)stats.bytes_limit);
}

static int cmd_memory(nxhal_client_t* client) {
  nxhal_device_t* device = device_at(client, 0);
  int64_t dims[1] = {1024};
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t *a, *b, *c;
  nxhal_status_t* status;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = NXHAL_TENSOR_DESC_STRUCT_SIZE;
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 1;
  desc.dims = dims;
  print_stats("START", device);
  check(api->buffer_create(device, &desc, &a));
  check(api->buffer_create(device, &desc, &b));
  print_stats("TWO", device);
  api->buffer_destroy(a);
  print_stats("ONE", device);
  check(api->device_set_memory_limit(device, 6000));
  print_stats("LIMITED", device);
  status = api->buffer_create(device, &desc, &c);
  printf("OVER %s: %s\n", code_name(api->status_code(status)), api->status_message(status));
  api->status_free(status);
  check(api->device_set_memory_limit(device, 0));
  check(api->buffer_create(device, &desc, &c));
  print_stats("UNLIMITED", device);
  api->buffer_destroy(b);
  api->buffer_destroy(c);
  print_stats("END", device);
  return 0;
}

static int deleter_calls = 0;
static void count_deleter(nxhal_dlpack_managed_tensor_t* self) {
  ++deleter_calls;
  (void)self;
}

static int cmd_dlpack(nxhal_client_t* client) {
  nxhal_device_t* device = device_at(client, 0);
  static float source[64] __attribute__((aligned(64)));
  int64_t dims[2] = {4, 16};
  int64_t strides[2] = {1, 4}; /* column-major view of source as 4x16 */
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t *buffer, *imported;
  nxhal_dlpack_managed_tensor_t* tensor;
  nxhal_dlpack_managed_tensor_t mine;
  nxhal_buffer_info_t binfo;
  float back[64];
  int i, ok = 1;
  for (i = 0; i < 64; ++i) source[i] = (float)i * 0.5f;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = NXHAL_TENSOR_DESC_STRUCT_SIZE;
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 2;
  desc.dims = dims;
  check(api->buffer_from_host(device, &desc, source, sizeof(source), NXHAL_HOST_COPY, &buffer));
  check(api->buffer_to_dlpack(buffer, &tensor));
  api->buffer_destroy(buffer); /* the export must outlive the buffer */
  for (i = 0; i < 64; ++i) ok &= ((float*)tensor->dl_tensor.data)[i] == source[i];
  printf("EXPORT ok=%d ndim=%d shape=%lld,%lld bits=%u aliased=%d\n", ok,
         tensor->dl_tensor.ndim, (long long)tensor->dl_tensor.shape[0],
         (long long)tensor->dl_tensor.shape[1], tensor->dl_tensor.dtype.bits,
         tensor->dl_tensor.data != (void*)source);
  tensor->deleter(tensor);
  /* Import a compact tensor (zero-copy on CPU) and a strided one (copied). */
  memset(&mine, 0, sizeof(mine));
  mine.version.major = 1;
  mine.deleter = count_deleter;
  mine.dl_tensor.data = source;
  mine.dl_tensor.device.device_type = NXHAL_DLPACK_DEVICE_CPU;
  mine.dl_tensor.ndim = 2;
  mine.dl_tensor.dtype.code = NXHAL_DLPACK_CODE_FLOAT;
  mine.dl_tensor.dtype.bits = 32;
  mine.dl_tensor.dtype.lanes = 1;
  mine.dl_tensor.shape = dims;
  check(api->buffer_from_dlpack(device, &mine, &imported));
  memset(&binfo, 0, sizeof(binfo));
  binfo.struct_size = sizeof(binfo);
  check(api->buffer_info(imported, &binfo));
  check(api->buffer_to_host(imported, back, sizeof(back), NULL));
  ok = memcmp(back, source, sizeof(back)) == 0;
  printf("IMPORT ok=%d zero_copy=%d deleter_before_destroy=%d\n", ok, binfo.is_zero_copy,
         deleter_calls);
  api->buffer_destroy(imported);
  printf("IMPORT deleter_after_destroy=%d\n", deleter_calls);
  mine.dl_tensor.strides = strides;
  check(api->buffer_from_dlpack(device, &mine, &imported));
  check(api->buffer_to_host(imported, back, sizeof(back), NULL));
  ok = 1;
  for (i = 0; i < 64; ++i) ok &= back[i] == source[(i % 16) * 4 + i / 16];
  printf("STRIDED ok=%d deleter=%d\n", ok, deleter_calls);
  api->buffer_destroy(imported);
  return 0;
}

/* DLPack exports outlive the client (the consumer owns them, so the ABI
 * cannot make client_destroy wait): their data must stay readable and their
 * deleters must not touch a destroyed PJRT client. Destroys *client itself
 * (sets it to NULL). */
static int cmd_dlpack_outlive(nxhal_client_t** client, const char* program_path) {
  nxhal_device_t* device = device_at(*client, 0);
  static float copied[64] __attribute__((aligned(64)));
  static float aliased[64] __attribute__((aligned(64)));
  static float viewed[64] __attribute__((aligned(64)));
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, y[4] = {10.0f, 20.0f, 30.0f, 40.0f};
  int64_t dims[2] = {4, 16};
  int64_t dims4[1] = {4};
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t* buffer;
  nxhal_dlpack_managed_tensor_t* tensors[4];
  nxhal_dlpack_managed_tensor_t mine;
  size_t n = 0, t;
  int i, ok = 1;
  deleter_calls = 0;
  for (i = 0; i < 64; ++i) {
    copied[i] = (float)i * 0.5f;
    aliased[i] = (float)i + 100.0f;
    viewed[i] = (float)i * -2.0f;
  }
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = NXHAL_TENSOR_DESC_STRUCT_SIZE;
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 2;
  desc.dims = dims;
  check(api->buffer_from_host(device, &desc, copied, sizeof(copied), NXHAL_HOST_COPY, &buffer));
  check(api->buffer_to_dlpack(buffer, &tensors[n++]));
  api->buffer_destroy(buffer);
  check(api->buffer_from_host(device, &desc, aliased, sizeof(aliased), NXHAL_HOST_ZERO_COPY,
                              &buffer));
  check(api->buffer_to_dlpack(buffer, &tensors[n++]));
  api->buffer_destroy(buffer);
  memset(&mine, 0, sizeof(mine));
  mine.version.major = 1;
  mine.deleter = count_deleter;
  mine.dl_tensor.data = viewed;
  mine.dl_tensor.device.device_type = NXHAL_DLPACK_DEVICE_CPU;
  mine.dl_tensor.ndim = 2;
  mine.dl_tensor.dtype.code = NXHAL_DLPACK_CODE_FLOAT;
  mine.dl_tensor.dtype.bits = 32;
  mine.dl_tensor.dtype.lanes = 1;
  mine.dl_tensor.shape = dims;
  check(api->buffer_from_dlpack(device, &mine, &buffer));
  check(api->buffer_to_dlpack(buffer, &tensors[n++]));
  api->buffer_destroy(buffer);
  if (program_path != NULL) {
    nxhal_program_t program;
    nxhal_executable_t* exe;
    nxhal_buffer_t* in[2];
    nxhal_buffer_t* out[1];
    size_t size;
    void* text = read_file(program_path, &size);
    memset(&program, 0, sizeof(program));
    program.struct_size = NXHAL_PROGRAM_STRUCT_SIZE;
    program.format = "stablehlo";
    program.data = text;
    program.size = size;
    check(api->executable_compile(device, &program, NULL, 0, &exe));
    free(text);
    desc.rank = 1;
    desc.dims = dims4;
    check(api->buffer_from_host(device, &desc, x, sizeof(x), NXHAL_HOST_COPY, &in[0]));
    check(api->buffer_from_host(device, &desc, y, sizeof(y), NXHAL_HOST_COPY, &in[1]));
    check(api->executable_execute(exe, in, 2, out, 1, NULL));
    check(api->buffer_to_dlpack(out[0], &tensors[n++]));
    api->buffer_destroy(out[0]);
    api->buffer_destroy(in[0]);
    api->buffer_destroy(in[1]);
    api->executable_destroy(exe);
  }
  /* Everything the ABI asks to destroy first is gone; the exports are not. */
  printf("OUTLIVE exported=%zu\n", n);
  fflush(stdout);
  api->client_destroy(*client);
  *client = NULL;
  printf("OUTLIVE client_destroyed\n");
  fflush(stdout);
  for (i = 0; i < 64; ++i) {
    ok &= ((const float*)tensors[0]->dl_tensor.data)[i] == (float)i * 0.5f;
    ok &= ((const float*)tensors[1]->dl_tensor.data)[i] == (float)i + 100.0f;
    ok &= ((const float*)tensors[2]->dl_tensor.data)[i] == (float)i * -2.0f;
  }
  for (i = 0; n > 3 && i < 4; ++i) {
    ok &= ((const float*)tensors[3]->dl_tensor.data)[i] == x[i] + y[i];
  }
  printf("OUTLIVE read ok=%d import_deleter=%d\n", ok, deleter_calls);
  fflush(stdout);
  for (t = 0; t < n; ++t) tensors[t]->deleter(tensors[t]);
  printf("OUTLIVE deleted import_deleter=%d\n", deleter_calls);
  return !ok;
}

/* Several threads run one executable at once (the ABI says it is
 * thread-safe), each checking its own results; async runs use on_ready. */
typedef struct thread_job {
  nxhal_executable_t* exe;
  nxhal_device_t* device;
  int index, iterations, failures, callbacks;
} thread_job_t;

static void on_ready_count(nxhal_status_t* status, void* user_data) {
  thread_job_t* job = (thread_job_t*)user_data;
  if (status != NULL) {
    ++job->failures;
    api->status_free(status);
  }
  __atomic_add_fetch(&job->callbacks, 1, __ATOMIC_RELAXED);
}

static void* thread_main(void* arg) {
  thread_job_t* job = (thread_job_t*)arg;
  int64_t dims[1] = {4};
  nxhal_tensor_desc_t desc;
  int it, i;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = NXHAL_TENSOR_DESC_STRUCT_SIZE;
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 1;
  desc.dims = dims;
  for (it = 0; it < job->iterations; ++it) {
    float x[4], y[4], z[4];
    nxhal_buffer_t* in[2];
    nxhal_buffer_t* out[1];
    nxhal_event_t* event = NULL;
    nxhal_status_t* status;
    for (i = 0; i < 4; ++i) {
      x[i] = (float)(job->index * 1000 + it);
      y[i] = (float)i;
    }
    check(api->buffer_from_host(job->device, &desc, x, sizeof(x), 0, &in[0]));
    check(api->buffer_from_host(job->device, &desc, y, sizeof(y), 0, &in[1]));
    check(api->executable_execute(job->exe, in, 2, out, 1, (it & 1) ? &event : NULL));
    if (event != NULL) {
      check(api->event_on_ready(event, on_ready_count, job));
      status = api->event_await(event, NXHAL_WAIT_FOREVER);
      if (status != NULL) {
        ++job->failures;
        api->status_free(status);
      }
      api->event_destroy(event);
    }
    check(api->buffer_to_host(out[0], z, sizeof(z), NULL));
    for (i = 0; i < 4; ++i) job->failures += z[i] != x[i] + y[i];
    api->buffer_destroy(out[0]);
    api->buffer_destroy(in[0]);
    api->buffer_destroy(in[1]);
  }
  return NULL;
}

static int cmd_threads(nxhal_client_t* client, const char* program_path, int threads,
                       int iterations) {
  pthread_t ids[16];
  thread_job_t jobs[16];
  nxhal_executable_t* exe;
  nxhal_program_t program;
  size_t size;
  void* text = read_file(program_path, &size);
  int t, failures = 0, callbacks = 0;
  nxhal_memory_stats_t stats;
  nxhal_device_t* device = device_at(client, 0);
  memset(&program, 0, sizeof(program));
  program.struct_size = NXHAL_PROGRAM_STRUCT_SIZE;
  program.format = "stablehlo";
  program.data = text;
  program.size = size;
  check(api->executable_compile(device, &program, NULL, 0, &exe));
  free(text);
  if (threads > 16) threads = 16;
  for (t = 0; t < threads; ++t) {
    jobs[t].exe = exe;
    jobs[t].device = device;
    jobs[t].index = t;
    jobs[t].iterations = iterations;
    jobs[t].failures = 0;
    jobs[t].callbacks = 0;
    pthread_create(&ids[t], NULL, thread_main, &jobs[t]);
  }
  for (t = 0; t < threads; ++t) {
    pthread_join(ids[t], NULL);
    failures += jobs[t].failures;
    callbacks += jobs[t].callbacks;
  }
  api->executable_destroy(exe);
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  check(api->device_memory_stats(device, &stats));
  printf("THREADS runs=%d failures=%d callbacks=%d in_use_after=%llu\n", threads * iterations,
         failures, callbacks, (unsigned long long)stats.bytes_in_use);
  return failures != 0;
}

int main(int argc, char** argv) {
  void* lib;
  nxhal_query_fn query;
  nxhal_query_args_t args;
  nxhal_client_t* client;
  nxhal_option_t options[16];
  size_t num_options = 0;
  int k = 2, rc;
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN [-o name=T:value]... COMMAND [args]\n", argv[0]);
    return 64;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("STATUS DLOPEN: %s\n", dlerror());
    return 3;
  }
  query = (nxhal_query_fn)dlsym(lib, NXHAL_QUERY_SYMBOL);
  memset(&args, 0, sizeof(args));
  args.struct_size = NXHAL_QUERY_ARGS_STRUCT_SIZE;
  args.host_abi_major = NXHAL_ABI_VERSION_MAJOR;
  args.host_abi_minor = NXHAL_ABI_VERSION_MINOR;
  {
    nxhal_status_t* status = query(&args, &api);
    check(status);
  }
  while (k < argc && strcmp(argv[k], "-o") == 0) {
    parse_option(argv[k + 1], &options[num_options++]);
    k += 2;
  }
  {
    double t0 = now_s();
    nxhal_status_t* status = api->client_create(options, num_options, &client);
    printf("CREATE_SECONDS %.3f\n", now_s() - t0);
    check(status);
  }
  if (strcmp(argv[k], "devices") == 0) rc = cmd_devices(client);
  else if (strcmp(argv[k], "run") == 0) rc = cmd_run(client, argc - k - 1, argv + k + 1);
  else if (strcmp(argv[k], "memory") == 0) rc = cmd_memory(client);
  else if (strcmp(argv[k], "dlpack") == 0) rc = cmd_dlpack(client);
  else if (strcmp(argv[k], "dlpack-outlive") == 0) {
    rc = cmd_dlpack_outlive(&client, k + 1 < argc ? argv[k + 1] : NULL);
  }
  else if (strcmp(argv[k], "threads") == 0 && k + 3 < argc) {
    rc = cmd_threads(client, argv[k + 1], atoi(argv[k + 2]), atoi(argv[k + 3]));
  }
  else {
    fprintf(stderr, "unknown command %s\n", argv[k]);
    rc = 64;
  }
  if (client != NULL) api->client_destroy(client);
  return rc;
}
