/*
 * nxhal_driver.c -- one C host for the plugins' tests: opens a plugin through
 * the loader (nx_hal_loader.h) and runs one named scenario against its
 * table, with no Python in the process. Built by tests/cbuild.py
 * (build_driver) with the loader compiled in; run by the plugins' tests and
 * by .ci/sanitize.
 *
 *   nxhal_driver PLUGIN [-o name=T:value]... COMMAND [args]
 *     PLUGIN: a library path (has a '/') or a plugin name on the search path
 *     -o: a client option; T is i int64, d double, b bool, s string,
 *         l int64 list (comma separated)
 *
 * Scenarios over any plugin. Those marked [S] create the client from the -o
 * options first and stop at the first unexpected status with
 * "STATUS <CODE>: <message>" and exit 2; those marked [K] print every status
 * as "<label>.status=<CODE>" and "<label>.message=..." and go on.
 *   devices                      [S] devices, attributes and diagnostics
 *   run PROGRAM [flags] INPUT... [S] compile (or --load) and execute
 *       --format F (default from the extension: .mlir/.mlirbc stablehlo,
 *       .onnx onnx)  --device N  --async  --zero-copy  --save BLOB
 *       --load BLOB  --copt name=T:value  --outdir DIR  --repeat N
 *       INPUT = dtype:dims:file, dims like 4x4, or "scalar"
 *   memory                       [S] accounting and the limit
 *   dlpack                       [S] export and import on device 0
 *   dlpack-outlive [PROGRAM]     [S] exports (a copy, a zero-copy host buffer,
 *                                a re-exported DLPack import, PROGRAM's
 *                                output for an x+y program of two f32[4]),
 *                                client_destroy, then reads and deletes them
 *   threads PROGRAM T N          [S] T threads run an x+y program of two
 *                                f32[4] N times each
 *   info                         [K] the negotiated table and plugin_info
 *   create                       [K] client_create, then its devices
 *   nulls                        [K] every entry with NULL arguments
 * Plugin-specific scenarios, named for the plugin whose programs or
 * serialized layout they know:
 *   graphcore-run TEXT [--copt name=T:value]...
 *                                [K] the fake backend's program TEXT on an
 *                                ipu_model client: compile, execute, DLPack,
 *                                error paths, the NXHALGC2 blob round trip
 *   graphcore-threads N ITERS    [K] N threads: own client and a shared one
 *   npu-capi MODEL INPUT OUTPUT  the raw ABI end to end on OpenVINO's CPU
 *                                device (INPUT f32 in the model's static
 *                                input shape); prints "OK" last, else
 *                                "FAIL: ..." on stderr and exit 1
 *
 * A plugin the loader refuses prints "STATUS <CODE>: <message>", exit 3.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, clock_gettime */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nx_hal/nx_hal_loader.h"

static const nxhal_api_t* api;
static nxhal_plugin_t* plugin;

/* ------------------------------------------------------------------------ */
/* Shared helpers                                                           */
/* ------------------------------------------------------------------------ */

static const char* code_name(nxhal_status_code_t code) {
  return nxhal_status_code_name(code);
}

/* [S] scenarios: prints and exits on a non-NULL status. */
static void check(nxhal_status_t* status) {
  if (status == NULL) return;
  printf("STATUS %s: %s\n", code_name(api->status_code(status)), api->status_message(status));
  api->status_free(status);
  fflush(stdout);
  exit(2);
}

/* [K] scenarios: prints "<label>.status=CODE" and the message; frees the
 * status; returns its code. */
static nxhal_status_code_t report(const char* label, nxhal_status_t* status) {
  nxhal_status_code_t code = api->status_code(status);
  printf("%s.status=%s\n", label, code_name(code));
  if (status != NULL) {
    printf("%s.message=%s\n", label, api->status_message(status));
    api->status_free(status);
  }
  return code;
}

static const char* const dtype_names[] = {"invalid", "f16", "bf16", "f32",  "f64", "i8",  "i16",
                                          "i32",     "i64", "u8",   "bool", "u16", "u32", "u64"};

static nxhal_dtype_t dtype_of(const char* s) {
  int i;
  for (i = 1; i < 14; ++i) {
    if (strcmp(dtype_names[i], s) == 0) return (nxhal_dtype_t)i;
  }
  return NXHAL_DTYPE_INVALID;
}

static const char* dtype_name(nxhal_dtype_t d) {
  return (unsigned)d < 14 ? dtype_names[d] : "?";
}

/* Parses name=T:value into an option; strings point into `spec`. */
static int64_t list_storage[16][64];
static int num_lists = 0;
static void parse_option(char* spec, nxhal_option_t* o) {
  char* eq = strchr(spec, '=');
  memset(o, 0, sizeof(*o));
  o->struct_size = NXHAL_NAMED_VALUE_1_0_SIZE;
  if (eq == NULL || eq[1] == '\0' || eq[2] != ':') {
    fprintf(stderr, "bad option %s\n", spec);
    exit(64);
  }
  *eq = '\0';
  o->name = spec;
  switch (eq[1]) {
    case 'i':
      o->type = NXHAL_VALUE_INT64;
      o->int64_value = strtoll(eq + 3, NULL, 10);
      break;
    case 'd':
      o->type = NXHAL_VALUE_DOUBLE;
      o->double_value = strtod(eq + 3, NULL);
      break;
    case 'b':
      o->type = NXHAL_VALUE_BOOL;
      o->bool_value = atoi(eq + 3);
      break;
    case 's':
      o->type = NXHAL_VALUE_STRING;
      o->string_value = eq + 3;
      break;
    case 'l': {
      char* p = eq + 3;
      size_t n = 0;
      int64_t* list;
      if (num_lists == 16) {
        fprintf(stderr, "too many list options\n");
        exit(64);
      }
      list = list_storage[num_lists++];
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The program format a file's extension names; NULL when it names none. */
static const char* format_of(const char* path) {
  const char* dot = strrchr(path, '.');
  if (dot == NULL) return NULL;
  if (strcmp(dot, ".mlir") == 0 || strcmp(dot, ".mlirbc") == 0) return "stablehlo";
  if (strcmp(dot, ".onnx") == 0) return "onnx";
  return NULL;
}

static nxhal_program_t program_of(const char* format, const void* data, size_t size) {
  nxhal_program_t program;
  memset(&program, 0, sizeof(program));
  program.struct_size = NXHAL_PROGRAM_1_0_SIZE;
  program.format = format;
  program.data = data;
  program.size = size;
  return program;
}

/* Compiles the program file at `path` ([S]: exits on failure). */
static nxhal_executable_t* compile_file(nxhal_device_t* device, const char* path,
                                        const char* format, const nxhal_option_t* options,
                                        size_t num_options) {
  size_t size;
  void* text;
  nxhal_program_t program;
  nxhal_executable_t* exe;
  if (format == NULL) format = format_of(path);
  if (format == NULL) {
    fprintf(stderr, "no program format for %s: give --format\n", path);
    exit(64);
  }
  text = read_file(path, &size);
  program = program_of(format, text, size);
  check(api->executable_compile(device, &program, options, num_options, &exe));
  free(text);
  return exe;
}

static nxhal_tensor_desc_t desc_of(nxhal_dtype_t dtype, int64_t rank, const int64_t* dims) {
  nxhal_tensor_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = NXHAL_TENSOR_DESC_1_0_SIZE;
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  return desc;
}

static nxhal_device_t* device_at(nxhal_client_t* client, size_t index) {
  nxhal_device_t* device;
  check(api->client_device(client, index, &device));
  return device;
}

static int deleter_calls = 0;
static void count_deleter(nxhal_dlpack_managed_tensor_t* self) {
  ++deleter_calls;
  (void)self;
}

/* A caller-owned, compact f32 DLPack tensor over `data`. */
static void dlpack_f32(nxhal_dlpack_managed_tensor_t* t, float* data, int32_t ndim,
                       int64_t* shape) {
  memset(t, 0, sizeof(*t));
  t->version.major = NXHAL_DLPACK_MAJOR_VERSION;
  t->deleter = count_deleter;
  t->dl_tensor.data = data;
  t->dl_tensor.device.device_type = NXHAL_DLPACK_DEVICE_CPU;
  t->dl_tensor.ndim = ndim;
  t->dl_tensor.dtype.code = NXHAL_DLPACK_CODE_FLOAT;
  t->dl_tensor.dtype.bits = 32;
  t->dl_tensor.dtype.lanes = 1;
  t->dl_tensor.shape = shape;
}

/* ------------------------------------------------------------------------ */
/* [S] scenarios over any plugin                                            */
/* ------------------------------------------------------------------------ */

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
      if (attr.type == NXHAL_VALUE_STRING)
        printf("%s\n", attr.string_value);
      else if (attr.type == NXHAL_VALUE_INT64)
        printf("%lld\n", (long long)attr.int64_value);
      else if (attr.type == NXHAL_VALUE_BOOL)
        printf("%d\n", attr.bool_value);
      else if (attr.type == NXHAL_VALUE_DOUBLE)
        printf("%g\n", attr.double_value);
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

static int cmd_run(nxhal_client_t* client, int argc, char** argv) {
  const char* program_path = argv[0];
  const char* format = NULL;
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
  double start;
  int k;
  if (argc < 1) {
    fprintf(stderr, "run: no PROGRAM\n");
    return 64;
  }
  for (k = 1; k < argc; ++k) {
    int has_value = k + 1 < argc;
    if (strcmp(argv[k], "--async") == 0)
      async = 1;
    else if (strcmp(argv[k], "--zero-copy") == 0)
      zero_copy = 1;
    else if (has_value && strcmp(argv[k], "--device") == 0)
      device_index = (size_t)atoi(argv[++k]);
    else if (has_value && strcmp(argv[k], "--format") == 0)
      format = argv[++k];
    else if (has_value && strcmp(argv[k], "--save") == 0)
      save = argv[++k];
    else if (has_value && strcmp(argv[k], "--load") == 0)
      load = argv[++k];
    else if (has_value && strcmp(argv[k], "--outdir") == 0)
      outdir = argv[++k];
    else if (has_value && strcmp(argv[k], "--repeat") == 0)
      repeat = (size_t)atoi(argv[++k]);
    else if (has_value && strcmp(argv[k], "--copt") == 0 && num_copts < 8) {
      parse_option(argv[++k], &copts[num_copts++]);
    } else if (num_inputs < 32) {
      /* dtype:dims:file */
      char* spec = argv[k];
      char* c1 = strchr(spec, ':');
      char* c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      int64_t dims[16];
      int64_t rank = 0;
      nxhal_tensor_desc_t desc;
      nxhal_buffer_info_t binfo;
      size_t size;
      if (c2 == NULL) {
        fprintf(stderr, "bad input %s\n", spec);
        return 64;
      }
      *c1 = *c2 = '\0';
      if (strcmp(c1 + 1, "scalar") != 0) {
        char* p = c1 + 1;
        while (*p && rank < 16) {
          dims[rank++] = strtoll(p, &p, 10);
          if (*p == 'x') ++p;
        }
      }
      desc = desc_of(dtype_of(spec), rank, dims);
      input_data[num_inputs] = read_file(c2 + 1, &size);
      device = device_at(client, device_index);
      check(api->buffer_from_host(device, &desc, input_data[num_inputs], size,
                                  zero_copy ? NXHAL_HOST_ZERO_COPY : NXHAL_HOST_COPY,
                                  &inputs[num_inputs]));
      memset(&binfo, 0, sizeof(binfo));
      binfo.struct_size = sizeof(binfo);
      check(api->buffer_info(inputs[num_inputs], &binfo));
      printf("BUFFER %zu zero_copy=%d size=%llu\n", num_inputs, binfo.is_zero_copy,
             (unsigned long long)binfo.size_bytes);
      ++num_inputs;
    } else {
      fprintf(stderr, "too many inputs\n");
      return 64;
    }
  }
  device = device_at(client, device_index);
  if (load != NULL) {
    size_t size;
    void* blob = read_file(load, &size);
    check(api->executable_deserialize(device, blob, size, NULL, 0, &exe));
    free(blob);
  } else {
    double t0 = now_s();
    exe = compile_file(device, program_path, format, copts, num_copts);
    printf("COMPILE_SECONDS %.6f\n", now_s() - t0);
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
  if (num_outputs > 32) {
    fprintf(stderr, "too many outputs: %zu\n", num_outputs);
    return 64;
  }
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
  start = now_s();
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
  nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, 1, dims);
  nxhal_buffer_t *a, *b, *c;
  nxhal_status_t* status;
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

static int cmd_dlpack(nxhal_client_t* client) {
  nxhal_device_t* device = device_at(client, 0);
  static float source[64] __attribute__((aligned(64)));
  int64_t dims[2] = {4, 16};
  int64_t strides[2] = {1, 4}; /* column-major view of source as 4x16 */
  nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, 2, dims);
  nxhal_buffer_t *buffer, *imported;
  nxhal_dlpack_managed_tensor_t* tensor;
  nxhal_dlpack_managed_tensor_t mine;
  nxhal_buffer_info_t binfo;
  float back[64];
  int i, ok = 1;
  for (i = 0; i < 64; ++i) source[i] = (float)i * 0.5f;
  check(api->buffer_from_host(device, &desc, source, sizeof(source), NXHAL_HOST_COPY, &buffer));
  check(api->buffer_to_dlpack(buffer, &tensor));
  api->buffer_destroy(buffer); /* the export must outlive the buffer */
  for (i = 0; i < 64; ++i) ok &= ((float*)tensor->dl_tensor.data)[i] == source[i];
  printf("EXPORT ok=%d ndim=%d shape=%lld,%lld bits=%u aliased=%d\n", ok, tensor->dl_tensor.ndim,
         (long long)tensor->dl_tensor.shape[0], (long long)tensor->dl_tensor.shape[1],
         tensor->dl_tensor.dtype.bits, tensor->dl_tensor.data != (void*)source);
  tensor->deleter(tensor);
  /* Import a compact tensor (zero-copy on CPU) and a strided one (copied). */
  dlpack_f32(&mine, source, 2, dims);
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
 * cannot make client_destroy wait): their data and shape must stay readable
 * and their deleters must not touch a destroyed client. Destroys *client
 * itself (sets it to NULL). */
static int cmd_dlpack_outlive(nxhal_client_t** client, const char* program_path) {
  nxhal_device_t* device = device_at(*client, 0);
  static float copied[64] __attribute__((aligned(64)));
  static float aliased[64] __attribute__((aligned(64)));
  static float viewed[64] __attribute__((aligned(64)));
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, y[4] = {10.0f, 20.0f, 30.0f, 40.0f};
  int64_t dims[2] = {4, 16};
  int64_t dims4[1] = {4};
  nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, 2, dims);
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
  check(api->buffer_from_host(device, &desc, copied, sizeof(copied), NXHAL_HOST_COPY, &buffer));
  check(api->buffer_to_dlpack(buffer, &tensors[n++]));
  api->buffer_destroy(buffer);
  check(api->buffer_from_host(device, &desc, aliased, sizeof(aliased), NXHAL_HOST_ZERO_COPY,
                              &buffer));
  check(api->buffer_to_dlpack(buffer, &tensors[n++]));
  api->buffer_destroy(buffer);
  dlpack_f32(&mine, viewed, 2, dims);
  check(api->buffer_from_dlpack(device, &mine, &buffer));
  check(api->buffer_to_dlpack(buffer, &tensors[n++]));
  api->buffer_destroy(buffer);
  if (program_path != NULL) {
    nxhal_executable_t* exe = compile_file(device, program_path, NULL, NULL, 0);
    nxhal_buffer_t* in[2];
    nxhal_buffer_t* out[1];
    desc = desc_of(NXHAL_DTYPE_F32, 1, dims4);
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
  for (t = 0; t < 3; ++t) {
    const nxhal_dlpack_tensor_t* dl = &tensors[t]->dl_tensor;
    ok &= dl->ndim == 2 && dl->shape[0] == 4 && dl->shape[1] == 16;
  }
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
    __atomic_add_fetch(&job->failures, 1, __ATOMIC_RELAXED);
    api->status_free(status);
  }
  __atomic_add_fetch(&job->callbacks, 1, __ATOMIC_RELAXED);
}

static void* thread_main(void* arg) {
  thread_job_t* job = (thread_job_t*)arg;
  int64_t dims[1] = {4};
  nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, 1, dims);
  int it, i;
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
        __atomic_add_fetch(&job->failures, 1, __ATOMIC_RELAXED);
        api->status_free(status);
      }
      api->event_destroy(event);
    }
    check(api->buffer_to_host(out[0], z, sizeof(z), NULL));
    for (i = 0; i < 4; ++i) {
      if (z[i] != x[i] + y[i]) __atomic_add_fetch(&job->failures, 1, __ATOMIC_RELAXED);
    }
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
  int t, failures = 0, callbacks = 0;
  nxhal_memory_stats_t stats;
  nxhal_device_t* device = device_at(client, 0);
  exe = compile_file(device, program_path, NULL, NULL, 0);
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
    failures += __atomic_load_n(&jobs[t].failures, __ATOMIC_RELAXED);
    callbacks += __atomic_load_n(&jobs[t].callbacks, __ATOMIC_RELAXED);
  }
  api->executable_destroy(exe);
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  check(api->device_memory_stats(device, &stats));
  printf("THREADS runs=%d failures=%d callbacks=%d in_use_after=%llu\n", threads * iterations,
         failures, callbacks, (unsigned long long)stats.bytes_in_use);
  return failures != 0;
}

/* ------------------------------------------------------------------------ */
/* [K] scenarios over any plugin                                            */
/* ------------------------------------------------------------------------ */

static int cmd_info(void) {
  nxhal_plugin_info_t info;
  printf("api.struct_size=%zu\napi.abi=%u.%u\nnegotiated.abi=%u.%u\n", api->struct_size,
         (unsigned)api->abi_major, (unsigned)api->abi_minor,
         (unsigned)nxhal_plugin_abi_major(plugin), (unsigned)nxhal_plugin_abi_minor(plugin));
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  if (report("plugin_info", api->plugin_info(&info)) != NXHAL_OK) return 0;
  printf("name=%s\nvendor=%s\nplugin_version=%s\nsdk_version=%s\nabi=%u.%u\n", info.name,
         info.vendor, info.plugin_version, info.sdk_version, (unsigned)info.abi_major,
         (unsigned)info.abi_minor);
  return 0;
}

static void print_device(size_t index, nxhal_device_t* dev) {
  nxhal_device_info_t info;
  size_t count = 0, i;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  if (report("device_info", api->device_info(dev, &info)) != NXHAL_OK) return;
  printf("device%zu.name=%s\ndevice%zu.kind=%d\ndevice%zu.vendor=%s\n", index, info.name, index,
         (int)info.kind, index, info.vendor);
  printf("device%zu.memory_bytes=%llu\ndevice%zu.compute_units=%lld\ndevice%zu.compat_key=%s\n",
         index, (unsigned long long)info.memory_bytes, index, (long long)info.compute_units, index,
         info.compat_key);
  for (i = 0; i < info.num_formats; ++i) {
    printf("device%zu.format%zu=%s\n", index, i, info.formats[i]);
  }
  report("attribute_count", api->device_attribute_count(dev, &count));
  for (i = 0; i < count; ++i) {
    nxhal_attribute_t a;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    if (report("attribute", api->device_attribute(dev, i, &a)) != NXHAL_OK) continue;
    switch (a.type) {
      case NXHAL_VALUE_INT64:
        printf("device%zu.attr.%s=%lld\n", index, a.name, (long long)a.int64_value);
        break;
      case NXHAL_VALUE_BOOL:
        printf("device%zu.attr.%s=%d\n", index, a.name, (int)a.bool_value);
        break;
      case NXHAL_VALUE_STRING:
        printf("device%zu.attr.%s=%s\n", index, a.name, a.string_value);
        break;
      case NXHAL_VALUE_DOUBLE:
        printf("device%zu.attr.%s=%g\n", index, a.name, a.double_value);
        break;
      default: break;
    }
  }
}

static int cmd_create(const nxhal_option_t* options, size_t num_options) {
  nxhal_client_t* client = NULL;
  size_t count = 0, i;
  const char* diag = NULL;
  nxhal_device_t* dev = NULL;
  if (report("create", api->client_create(num_options > 0 ? options : NULL, num_options,
                                          &client)) != NXHAL_OK) {
    printf("client=%s\n", client == NULL ? "NULL" : "SET");
    return 0;
  }
  report("diagnostics", api->client_diagnostics(client, &diag));
  printf("diagnostics=%s\n", diag);
  report("device_count", api->client_device_count(client, &count));
  printf("devices=%zu\n", count);
  for (i = 0; i < count; ++i) {
    if (report("client_device", api->client_device(client, i, &dev)) == NXHAL_OK) {
      print_device(i, dev);
    }
  }
  report("device_out_of_range", api->client_device(client, count, &dev));
  api->client_destroy(client);
  return 0;
}

static int cmd_nulls(void) {
  nxhal_client_t* client = NULL;
  nxhal_tensor_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  report("plugin_info", api->plugin_info(NULL));
  report("client_create", api->client_create(NULL, 0, NULL));
  report("client_create_null_options", api->client_create(NULL, 2, &client));
  api->client_destroy(NULL);
  report("client_diagnostics", api->client_diagnostics(NULL, NULL));
  report("client_device_count", api->client_device_count(NULL, NULL));
  report("client_device", api->client_device(NULL, 0, NULL));
  report("device_info", api->device_info(NULL, NULL));
  report("device_attribute_count", api->device_attribute_count(NULL, NULL));
  report("device_attribute", api->device_attribute(NULL, 0, NULL));
  report("device_memory_stats", api->device_memory_stats(NULL, NULL));
  report("device_set_memory_limit", api->device_set_memory_limit(NULL, 0));
  report("buffer_create", api->buffer_create(NULL, NULL, NULL));
  report("buffer_from_host", api->buffer_from_host(NULL, &desc, NULL, 0, 0, NULL));
  report("buffer_to_host", api->buffer_to_host(NULL, NULL, 0, NULL));
  report("buffer_info", api->buffer_info(NULL, NULL));
  api->buffer_destroy(NULL);
  report("buffer_to_dlpack", api->buffer_to_dlpack(NULL, NULL));
  report("buffer_from_dlpack", api->buffer_from_dlpack(NULL, NULL, NULL));
  report("executable_compile", api->executable_compile(NULL, NULL, NULL, 0, NULL));
  api->executable_destroy(NULL);
  report("executable_io_count", api->executable_io_count(NULL, NXHAL_IO_INPUT, NULL));
  report("executable_io_info", api->executable_io_info(NULL, NXHAL_IO_INPUT, 0, NULL));
  report("executable_execute", api->executable_execute(NULL, NULL, 0, NULL, 0, NULL));
  report("executable_serialize", api->executable_serialize(NULL, NULL));
  report("executable_deserialize", api->executable_deserialize(NULL, NULL, 0, NULL, 0, NULL));
  api->blob_free(NULL);
  report("event_is_ready", api->event_is_ready(NULL, NULL));
  report("event_await", api->event_await(NULL, 0));
  report("event_on_ready", api->event_on_ready(NULL, NULL, NULL));
  printf("survived=1\n");
  return 0;
}

/* ------------------------------------------------------------------------ */
/* graphcore: its fake backend's program text and its serialized layout     */
/* ------------------------------------------------------------------------ */

/* The graphcore plugin's own simulator: what its fake backend runs on. */
static nxhal_option_t ipu_model_option(void) {
  nxhal_option_t model;
  memset(&model, 0, sizeof(model));
  model.struct_size = NXHAL_NAMED_VALUE_1_0_SIZE;
  model.name = "ipu_model";
  model.type = NXHAL_VALUE_BOOL;
  model.bool_value = 1;
  return model;
}

/* An f32 buffer shaped as input `io`, holding 0, 1, 2, ... */
static nxhal_buffer_t* make_counting_input(nxhal_device_t* dev, const nxhal_io_info_t* io,
                                           const char* label) {
  nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, io->desc.rank, io->desc.dims);
  size_t n = 1, i;
  float* data;
  nxhal_buffer_t* buf = NULL;
  int64_t r;
  for (r = 0; r < desc.rank; ++r) n *= (size_t)desc.dims[r];
  data = (float*)malloc(n * sizeof(float) + 1);
  for (i = 0; i < n; ++i) data[i] = (float)i;
  report(label, api->buffer_from_host(dev, &desc, data, n * sizeof(float), NXHAL_HOST_COPY, &buf));
  free(data);
  return buf;
}

static void print_f32_output(const char* label, nxhal_buffer_t* out) {
  nxhal_buffer_info_t info;
  float values[64];
  size_t i, n;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  if (report("buffer_info", api->buffer_info(out, &info)) != NXHAL_OK) return;
  n = (size_t)info.size_bytes / sizeof(float);
  if (n > 64) n = 64;
  if (report("to_host", api->buffer_to_host(out, values, n * sizeof(float), NULL)) != NXHAL_OK) {
    return;
  }
  printf("%s=", label);
  for (i = 0; i < n; ++i) printf("%s%g", i == 0 ? "" : ",", values[i]);
  printf("\n");
}

static int cmd_graphcore_run(const nxhal_option_t* options, size_t num_options,
                             const char* program_text, int argc, char** argv) {
  nxhal_option_t copts[16];
  nxhal_option_t clopts[17];
  size_t nc = 0, i;
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  nxhal_program_t program;
  nxhal_executable_t* exe = NULL;
  nxhal_executable_t* exe2 = NULL;
  nxhal_io_info_t io;
  nxhal_buffer_t* x;
  nxhal_buffer_t* y = NULL;
  nxhal_blob_t* blob = NULL;
  nxhal_memory_stats_t stats;
  nxhal_event_t* event = NULL;
  size_t count = 0;
  int k;
  for (k = 0; k < argc; ++k) {
    if (strcmp(argv[k], "--copt") == 0 && k + 1 < argc && nc < 16) {
      parse_option(argv[++k], &copts[nc++]);
    } else {
      fprintf(stderr, "graphcore-run: unexpected %s\n", argv[k]);
      return 64;
    }
  }
  clopts[0] = ipu_model_option();
  for (i = 0; i < num_options && i < 16; ++i) clopts[i + 1] = options[i];
  if (report("create", api->client_create(clopts, i + 1, &client)) != NXHAL_OK) return 0;
  report("client_device", api->client_device(client, 0, &dev));

  program = program_of("tflite", program_text, strlen(program_text));
  report("compile_bad_format", api->executable_compile(dev, &program, NULL, 0, &exe));
  program.format = "onnx";
  if (report("compile", api->executable_compile(dev, &program, nc > 0 ? copts : NULL, nc, &exe)) !=
      NXHAL_OK) {
    api->client_destroy(client);
    return 0;
  }
  report("io_count", api->executable_io_count(exe, NXHAL_IO_INPUT, &count));
  printf("inputs=%zu\n", count);
  memset(&io, 0, sizeof(io));
  io.struct_size = sizeof(io);
  report("io_info", api->executable_io_info(exe, NXHAL_IO_INPUT, 0, &io));
  printf("input0.name=%s\ninput0.rank=%lld\n", io.name, (long long)io.desc.rank);
  {
    nxhal_io_info_t beyond;
    memset(&beyond, 0, sizeof(beyond));
    beyond.struct_size = sizeof(beyond);
    report("io_info_out_of_range", api->executable_io_info(exe, NXHAL_IO_INPUT, 5, &beyond));
  }

  x = make_counting_input(dev, &io, "put");
  report("execute", api->executable_execute(exe, &x, 1, &y, 1, &event));
  if (event != NULL) {
    report("await", api->event_await(event, NXHAL_WAIT_FOREVER));
    api->event_destroy(event);
  }
  if (y != NULL) print_f32_output("y", y);
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  report("memory_stats", api->device_memory_stats(dev, &stats));
  printf("bytes_in_use=%llu\n", (unsigned long long)stats.bytes_in_use);
  if (y != NULL) {
    /* DLPack out and back in; then a strided tensor, which must be refused. */
    nxhal_dlpack_managed_tensor_t* t = NULL;
    nxhal_buffer_t* back = NULL;
    float data[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[2] = {2, 3};
    int64_t strides[2] = {1, 2}; /* column-major: not compact row-major */
    nxhal_dlpack_managed_tensor_t strided;
    if (report("to_dlpack", api->buffer_to_dlpack(y, &t)) == NXHAL_OK) {
      printf("dlpack.ndim=%d\ndlpack.code=%u\ndlpack.bits=%u\ndlpack.device=%d\n",
             (int)t->dl_tensor.ndim, (unsigned)t->dl_tensor.dtype.code,
             (unsigned)t->dl_tensor.dtype.bits, (int)t->dl_tensor.device.device_type);
      report("from_dlpack", api->buffer_from_dlpack(dev, t, &back)); /* takes t */
      if (back != NULL) print_f32_output("dlpack_back", back);
      api->buffer_destroy(back);
      back = NULL;
    }
    dlpack_f32(&strided, data, 2, shape);
    strided.deleter = NULL; /* refused: the caller keeps it */
    strided.dl_tensor.strides = strides;
    report("from_dlpack_strided", api->buffer_from_dlpack(dev, &strided, &back));
  }
  api->buffer_destroy(y);
  y = NULL;

  report("execute_wrong_count", api->executable_execute(exe, &x, 0, &y, 1, NULL));
  {
    /* An input of the wrong shape must be refused by name. */
    int64_t dims[1] = {3};
    nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, 1, dims);
    float data[3] = {0, 0, 0};
    nxhal_buffer_t* wrong = NULL;
    report("put_wrong",
           api->buffer_from_host(dev, &desc, data, sizeof(data), NXHAL_HOST_COPY, &wrong));
    report("execute_wrong_shape", api->executable_execute(exe, &wrong, 1, &y, 1, NULL));
    api->buffer_destroy(wrong);
    wrong = NULL;
    report("buffer_create", api->buffer_create(dev, &desc, &wrong));
    api->buffer_destroy(wrong);
    wrong = NULL;
    report("set_limit", api->device_set_memory_limit(dev, 4));
    report("over_limit",
           api->buffer_from_host(dev, &desc, data, sizeof(data), NXHAL_HOST_COPY, &wrong));
    api->buffer_destroy(wrong);
    report("unset_limit", api->device_set_memory_limit(dev, 0));
  }

  if (report("serialize", api->executable_serialize(exe, &blob)) == NXHAL_OK) {
    /* NXHALGC2 layout: magic[8], u32 key length, key, u64 payload length,
     * 32-byte digest, payload. */
    unsigned char* copy = (unsigned char*)malloc(blob->size);
    const unsigned char* bytes = (const unsigned char*)blob->data;
    unsigned key_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | ((unsigned)bytes[11] << 24);
    printf("blob.magic=%.8s\nblob.key=%.*s\nblob.payload=%.*s\n", (const char*)bytes, (int)key_len,
           (const char*)bytes + 12, (int)(blob->size - 52 - key_len),
           (const char*)bytes + 52 + key_len);
    report("deserialize", api->executable_deserialize(dev, blob->data, blob->size, NULL, 0, &exe2));
    if (exe2 != NULL) {
      report("execute2", api->executable_execute(exe2, &x, 1, &y, 1, NULL));
      if (y != NULL) print_f32_output("y2", y);
      api->buffer_destroy(y);
      api->executable_destroy(exe2);
      exe2 = NULL;
    }
    memcpy(copy, blob->data, blob->size);
    copy[12] ^= 0x20; /* first byte of the compat key */
    report("deserialize_other_key",
           api->executable_deserialize(dev, copy, blob->size, NULL, 0, &exe2));
    report("deserialize_truncated",
           api->executable_deserialize(dev, blob->data, blob->size - 1, NULL, 0, &exe2));
    report("deserialize_foreign",
           api->executable_deserialize(dev, "hello world, not ours", 21, NULL, 0, &exe2));
    free(copy);
    api->blob_free(blob);
  }
  api->buffer_destroy(x);
  api->executable_destroy(exe);
  api->client_destroy(client);
  return 0;
}

/* One graphcore-threads thread: its own ipu_model client running x+2, and
 * the shared executable (x+1), ITERS times each. */
typedef struct gc_thread_job {
  int iterations;
  nxhal_executable_t* shared;
  nxhal_device_t* shared_device;
  long failures;
} gc_thread_job_t;

/* Runs x+addend on {1,2,3,4}; returns the number of wrong results. */
static long gc_run_checked(nxhal_executable_t* exe, nxhal_device_t* dev, float addend) {
  float x[4] = {1, 2, 3, 4};
  float y[4];
  int64_t dims[1] = {4};
  nxhal_tensor_desc_t desc = desc_of(NXHAL_DTYPE_F32, 1, dims);
  nxhal_buffer_t* in = NULL;
  nxhal_buffer_t* out = NULL;
  nxhal_status_t* status;
  long bad = 0;
  int i;
  status = api->buffer_from_host(dev, &desc, x, sizeof(x), NXHAL_HOST_COPY, &in);
  if (status == NULL) status = api->executable_execute(exe, &in, 1, &out, 1, NULL);
  if (status == NULL) status = api->buffer_to_host(out, y, sizeof(y), NULL);
  if (status != NULL) {
    api->status_free(status);
    bad = 1;
  } else {
    for (i = 0; i < 4; ++i) bad += y[i] != x[i] + addend;
  }
  api->buffer_destroy(in);
  api->buffer_destroy(out);
  return bad;
}

static void* gc_thread_main(void* arg) {
  gc_thread_job_t* job = (gc_thread_job_t*)arg;
  nxhal_option_t model = ipu_model_option();
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  nxhal_executable_t* exe = NULL;
  nxhal_program_t program = program_of("onnx", "add 2 f32 4", strlen("add 2 f32 4"));
  nxhal_status_t* status;
  int i;
  status = api->client_create(&model, 1, &client);
  if (status == NULL) status = api->client_device(client, 0, &dev);
  if (status == NULL) status = api->executable_compile(dev, &program, NULL, 0, &exe);
  if (status != NULL) {
    api->status_free(status);
    api->client_destroy(client);
    job->failures += 1000000;
    return NULL;
  }
  for (i = 0; i < job->iterations; ++i) {
    job->failures += gc_run_checked(exe, dev, 2.0f);
    job->failures += gc_run_checked(job->shared, job->shared_device, 1.0f);
  }
  api->executable_destroy(exe);
  api->client_destroy(client);
  return NULL;
}

static int cmd_graphcore_threads(int n, int iterations) {
  pthread_t threads[64];
  gc_thread_job_t jobs[64];
  nxhal_option_t model = ipu_model_option();
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  nxhal_executable_t* shared = NULL;
  nxhal_program_t program = program_of("onnx", "add 1 f32 4", strlen("add 1 f32 4"));
  nxhal_memory_stats_t stats;
  long failures = 0;
  int i;
  if (n < 1 || n > 64) return 64;
  if (report("create", api->client_create(&model, 1, &client)) != NXHAL_OK) return 0;
  report("client_device", api->client_device(client, 0, &dev));
  if (report("compile", api->executable_compile(dev, &program, NULL, 0, &shared)) != NXHAL_OK) {
    api->client_destroy(client);
    return 0;
  }
  for (i = 0; i < n; ++i) {
    jobs[i].iterations = iterations;
    jobs[i].shared = shared;
    jobs[i].shared_device = dev;
    jobs[i].failures = 0;
    pthread_create(&threads[i], NULL, gc_thread_main, &jobs[i]);
  }
  for (i = 0; i < n; ++i) {
    pthread_join(threads[i], NULL);
    failures += jobs[i].failures;
  }
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  report("memory_stats", api->device_memory_stats(dev, &stats));
  printf("shared.bytes_in_use=%llu\n", (unsigned long long)stats.bytes_in_use);
  api->executable_destroy(shared);
  api->client_destroy(client);
  printf("threads=%d\nfailures=%ld\n", n, failures);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* npu: the raw ABI end to end on OpenVINO's CPU device                     */
/* ------------------------------------------------------------------------ */

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, "FAIL: ");    \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n");        \
    exit(1);                      \
  } while (0)

/* Exits on an unexpected status. */
static void ok(nxhal_status_t* st, const char* what) {
  if (st != NULL) FAIL("%s: %s", what, api->status_message(st));
}

/* Expects a status of `code` whose message contains `needle`. */
static void expect(nxhal_status_t* st, nxhal_status_code_t code, const char* needle,
                   const char* what) {
  const char* msg;
  if (st == NULL) FAIL("%s: succeeded, expected %s", what, code_name(code));
  msg = api->status_message(st);
  if (api->status_code(st) != code || strstr(msg, needle) == NULL) {
    FAIL("%s: %s \"%s\", expected %s containing \"%s\"", what, code_name(api->status_code(st)), msg,
         code_name(code), needle);
  }
  printf("expected error (%s): %.120s\n", what, msg);
  api->status_free(st);
}

static nxhal_option_t opt_str(const char* name, const char* value) {
  nxhal_option_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = NXHAL_NAMED_VALUE_1_0_SIZE;
  o.name = name;
  o.type = NXHAL_VALUE_STRING;
  o.string_value = value;
  return o;
}

static nxhal_option_t opt_int(const char* name, int64_t value) {
  nxhal_option_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = NXHAL_NAMED_VALUE_1_0_SIZE;
  o.name = name;
  o.type = NXHAL_VALUE_INT64;
  o.int64_value = value;
  return o;
}

/* Runs `exe` on `in`; returns the first output's bytes (malloc'd). */
static void* npu_run(nxhal_executable_t* exe, nxhal_buffer_t* in, size_t* out_size, int async) {
  nxhal_buffer_t* out = NULL;
  nxhal_event_t* event = NULL;
  nxhal_buffer_info_t info;
  void* host;
  ok(api->executable_execute(exe, &in, 1, &out, 1, async ? &event : NULL), "execute");
  if (async) {
    ok(api->event_await(event, NXHAL_WAIT_FOREVER), "await");
    api->event_destroy(event);
  }
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ok(api->buffer_info(out, &info), "buffer_info");
  host = malloc(info.size_bytes);
  ok(api->buffer_to_host(out, host, info.size_bytes, NULL), "to_host");
  *out_size = info.size_bytes;
  api->buffer_destroy(out);
  return host;
}

typedef struct callback_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int failed;
} callback_state_t;

static void on_ready_signal(nxhal_status_t* status, void* user_data) {
  callback_state_t* s = (callback_state_t*)user_data;
  pthread_mutex_lock(&s->mu);
  s->failed = status != NULL;
  s->done = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  api->status_free(status);
}

/* The plugin's own refusal of a host of the next ABI major. The loader only
 * ever asks at this header's version, so the query is called directly on the
 * library the loader already loaded (RTLD_NOLOAD: no second load). */
static void npu_refuses_next_major(void) {
  void* lib = dlopen(nxhal_plugin_path(plugin), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  void* sym = lib != NULL ? dlsym(lib, NXHAL_QUERY_SYMBOL) : NULL;
  nxhal_query_fn query;
  nxhal_query_args_t future;
  const nxhal_api_t* other = NULL;
  if (sym == NULL) FAIL("the loaded library has no %s", NXHAL_QUERY_SYMBOL);
  memcpy(&query, &sym, sizeof(query));
  memset(&future, 0, sizeof future);
  future.struct_size = NXHAL_QUERY_ARGS_1_0_SIZE;
  future.host_abi_major = NXHAL_ABI_VERSION_MAJOR + 1;
  future.host_abi_minor = 0;
  expect(query(&future, &other), NXHAL_ABI_MISMATCH, "", "ABI 2.0 host");
  dlclose(lib);
}

static int cmd_npu_capi(const char* model_path, const char* input_path, const char* output_path) {
  nxhal_plugin_info_t pinfo;
  nxhal_client_t* client = NULL;
  nxhal_option_t bad[1], mistyped[1], copts[2], bad_compile[1], npu[1], perf[2];
  const char* diag = NULL;
  size_t count = 0, i, model_size = 0, in_size = 0, out_size = 0, async_size = 0, loaded_size = 0;
  nxhal_device_t* dev = NULL;
  void *model, *input, *out, *out_async, *out_loaded;
  nxhal_program_t prog, garbage;
  nxhal_executable_t* exe = NULL;
  nxhal_executable_t* loaded = NULL;
  nxhal_status_t* st;
  nxhal_io_info_t io;
  nxhal_tensor_desc_t desc, wrong;
  nxhal_buffer_t* in = NULL;
  nxhal_buffer_t* cb_out = NULL;
  nxhal_buffer_t* wrong_in = NULL;
  nxhal_buffer_t* wrong_out = NULL;
  nxhal_event_t* event = NULL;
  nxhal_blob_t* blob = NULL;
  nxhal_memory_stats_t stats;
  callback_state_t cs;
  int64_t dims[8];

  npu_refuses_next_major();
  memset(&pinfo, 0, sizeof pinfo);
  pinfo.struct_size = sizeof pinfo;
  ok(api->plugin_info(&pinfo), "plugin_info");
  printf("plugin %s %s over OpenVINO %s\n", pinfo.name, pinfo.plugin_version, pinfo.sdk_version);

  bad[0] = opt_int("cache_size", 1);
  expect(api->client_create(bad, 1, &client), NXHAL_INVALID_ARGUMENT, "cache_size",
         "unknown client option");
  mistyped[0] = opt_str("memory_limit", "1GB");
  expect(api->client_create(mistyped, 1, &client), NXHAL_INVALID_ARGUMENT, "memory_limit",
         "mistyped client option");
  copts[0] = opt_int("memory_limit", 1 << 30);
  copts[1] = opt_str("precision", "f32");
  ok(api->client_create(copts, 2, &client), "client_create");
  ok(api->client_diagnostics(client, &diag), "diagnostics");
  printf("diagnostics: %s\n", diag);

  ok(api->client_device_count(client, &count), "device_count");
  for (i = 0; i < count; i++) {
    nxhal_device_t* d = NULL;
    nxhal_device_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ok(api->client_device(client, i, &d), "client_device");
    ok(api->device_info(d, &info), "device_info");
    printf("device %zu: kind %d name %s formats %zu key %s\n", i, (int)info.kind, info.name,
           info.num_formats, info.compat_key);
    if (info.kind == NXHAL_DEVICE_CPU) dev = d;
  }
  if (dev == NULL) FAIL("no CPU device");
  {
    nxhal_device_t* beyond = NULL;
    expect(api->client_device(client, count, &beyond), NXHAL_INVALID_ARGUMENT, "out of range",
           "device index");
  }

  model = read_file(model_path, &model_size);
  input = read_file(input_path, &in_size);
  prog = program_of("onnx", model, model_size);
  bad_compile[0] = opt_int("stream", 2);
  expect(api->executable_compile(dev, &prog, bad_compile, 1, &exe), NXHAL_INVALID_ARGUMENT,
         "stream", "unknown compile option");
  garbage = program_of("onnx", "\x08\x01garbage", 9);
  /* The driver negotiated this header's ABI (1.2): a model OpenVINO's reader
   * refuses is INVALID_PROGRAM. */
  expect(api->executable_compile(dev, &garbage, NULL, 0, &exe), NXHAL_INVALID_PROGRAM,
         "reading the ONNX model failed", "garbage model");
  npu[0] = opt_str("target", "NPU");
  st = api->executable_compile(dev, &prog, npu, 1, &exe);
  if (st != NULL) {
    if (api->status_code(st) != NXHAL_UNAVAILABLE) FAIL("NPU target: %s", api->status_message(st));
    printf("NPU target: UNAVAILABLE: %.160s\n", api->status_message(st));
    api->status_free(st);
  } else {
    api->executable_destroy(exe);
  }
  perf[0] = opt_str("performance", "latency");
  perf[1] = opt_int("streams", 1);
  ok(api->executable_compile(dev, &prog, perf, 2, &exe), "compile");

  memset(&io, 0, sizeof io);
  io.struct_size = sizeof io;
  ok(api->executable_io_info(exe, NXHAL_IO_INPUT, 0, &io), "io_info");
  if (io.desc.rank < 1 || io.desc.rank > 8) FAIL("input rank %lld", (long long)io.desc.rank);
  desc = desc_of(NXHAL_DTYPE_F32, io.desc.rank, io.desc.dims);
  ok(api->buffer_from_host(dev, &desc, input, in_size, NXHAL_HOST_ZERO_COPY, &in), "from_host");

  out = npu_run(exe, in, &out_size, 0);
  out_async = npu_run(exe, in, &async_size, 1);
  if (async_size != out_size || memcmp(out, out_async, out_size) != 0) {
    FAIL("async differs from sync");
  }

  /* on_ready callback path. */
  pthread_mutex_init(&cs.mu, NULL);
  pthread_cond_init(&cs.cv, NULL);
  cs.done = 0;
  cs.failed = 0;
  ok(api->executable_execute(exe, &in, 1, &cb_out, 1, &event), "execute async");
  ok(api->event_on_ready(event, on_ready_signal, &cs), "on_ready");
  pthread_mutex_lock(&cs.mu);
  while (!cs.done) pthread_cond_wait(&cs.cv, &cs.mu);
  pthread_mutex_unlock(&cs.mu);
  if (cs.failed) FAIL("callback saw an error");
  api->event_destroy(event);
  api->buffer_destroy(cb_out);
  pthread_cond_destroy(&cs.cv);
  pthread_mutex_destroy(&cs.mu);

  /* Serialize, load, run again. */
  ok(api->executable_serialize(exe, &blob), "serialize");
  expect(api->executable_deserialize(dev, blob->data, blob->size / 2, NULL, 0, &loaded),
         NXHAL_INVALID_ARGUMENT, "truncated", "truncated blob");
  ok(api->executable_deserialize(dev, blob->data, blob->size, NULL, 0, &loaded), "deserialize");
  out_loaded = npu_run(loaded, in, &loaded_size, 0);
  if (loaded_size != out_size || memcmp(out, out_loaded, out_size) != 0) FAIL("loaded differs");
  printf("serialized %zu bytes\n", blob->size);
  api->blob_free(blob);

  /* Wrong shape: one fewer row. */
  memcpy(dims, io.desc.dims, sizeof(int64_t) * (size_t)io.desc.rank);
  dims[0] = dims[0] > 1 ? dims[0] - 1 : 2;
  wrong = desc_of(NXHAL_DTYPE_F32, io.desc.rank, dims);
  ok(api->buffer_create(dev, &wrong, &wrong_in), "buffer_create");
  expect(api->executable_execute(exe, &wrong_in, 1, &wrong_out, 1, NULL), NXHAL_INVALID_ARGUMENT,
         io.name, "wrong input shape");
  api->buffer_destroy(wrong_in);

  write_file(output_path, out, out_size);
  api->buffer_destroy(in);
  api->executable_destroy(loaded);
  api->executable_destroy(exe);
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  ok(api->device_memory_stats(dev, &stats), "memory_stats");
  if (stats.bytes_in_use != 0) {
    FAIL("%llu bytes still in use", (unsigned long long)stats.bytes_in_use);
  }
  if (stats.bytes_limit != (1u << 30)) FAIL("limit %llu", (unsigned long long)stats.bytes_limit);
  api->client_destroy(client);
  free(model);
  free(input);
  free(out);
  free(out_async);
  free(out_loaded);
  printf("OK\n");
  return 0;
}

/* ------------------------------------------------------------------------ */

static int usage(const char* self) {
  fprintf(stderr, "usage: %s PLUGIN [-o name=T:value]... COMMAND [args] (see nxhal_driver.c)\n",
          self);
  return 64;
}

/* Creates the client of the [S] scenarios from the -o options. */
static nxhal_client_t* create_client(const nxhal_option_t* options, size_t num_options) {
  nxhal_client_t* client = NULL;
  double t0 = now_s();
  nxhal_status_t* status = api->client_create(options, num_options, &client);
  printf("CREATE_SECONDS %.3f\n", now_s() - t0);
  check(status);
  return client;
}

static int run_command(const char* command, int argc, char** argv, const nxhal_option_t* options,
                       size_t num_options) {
  nxhal_client_t* client;
  int rc;
  /* Scenarios that make their own clients, or none. */
  if (strcmp(command, "info") == 0) return cmd_info();
  if (strcmp(command, "create") == 0) return cmd_create(options, num_options);
  if (strcmp(command, "nulls") == 0) return cmd_nulls();
  if (strcmp(command, "graphcore-run") == 0 && argc >= 1) {
    return cmd_graphcore_run(options, num_options, argv[0], argc - 1, argv + 1);
  }
  if (strcmp(command, "graphcore-threads") == 0 && argc >= 2) {
    return cmd_graphcore_threads(atoi(argv[0]), atoi(argv[1]));
  }
  if (strcmp(command, "npu-capi") == 0 && argc == 3) return cmd_npu_capi(argv[0], argv[1], argv[2]);
  /* [S] scenarios on a client made from the -o options. */
  if (strcmp(command, "devices") != 0 && strcmp(command, "run") != 0 &&
      strcmp(command, "memory") != 0 && strcmp(command, "dlpack") != 0 &&
      strcmp(command, "dlpack-outlive") != 0 && !(strcmp(command, "threads") == 0 && argc >= 3)) {
    fprintf(stderr, "unknown command or missing arguments: %s\n", command);
    return 64;
  }
  client = create_client(options, num_options);
  if (strcmp(command, "devices") == 0)
    rc = cmd_devices(client);
  else if (strcmp(command, "run") == 0)
    rc = cmd_run(client, argc, argv);
  else if (strcmp(command, "memory") == 0)
    rc = cmd_memory(client);
  else if (strcmp(command, "dlpack") == 0)
    rc = cmd_dlpack(client);
  else if (strcmp(command, "dlpack-outlive") == 0) {
    rc = cmd_dlpack_outlive(&client, argc >= 1 ? argv[0] : NULL);
  } else {
    rc = cmd_threads(client, argv[0], atoi(argv[1]), atoi(argv[2]));
  }
  if (client != NULL) api->client_destroy(client);
  return rc;
}

int main(int argc, char** argv) {
  nxhal_option_t options[16];
  size_t num_options = 0;
  nxhal_status_t* status;
  int k = 2, rc;
  if (argc < 3) return usage(argv[0]);
  status = strchr(argv[1], '/') != NULL ? nxhal_plugin_open(argv[1], &plugin)
                                        : nxhal_plugin_open_by_name(argv[1], &plugin);
  if (status != NULL) {
    printf("STATUS %s: %s\n", code_name(nxhal_loader_status_code(status)),
           nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
    return 3;
  }
  api = nxhal_plugin_api(plugin);
  while (k + 1 < argc && strcmp(argv[k], "-o") == 0 && num_options < 16) {
    parse_option(argv[k + 1], &options[num_options++]);
    k += 2;
  }
  if (k >= argc) {
    nxhal_plugin_close(plugin);
    return usage(argv[0]);
  }
  rc = run_command(argv[k], argc - k - 1, argv + k + 1, options, num_options);
  nxhal_plugin_close(plugin);
  return rc;
}
