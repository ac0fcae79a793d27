/*
 * gc_driver.c -- drives libnxhal_graphcore*.so through its ABI table for
 * the pytest suite (tests/test_*.py build and run it). Prints key=value
 * lines the tests parse.
 *
 *   gc_driver LIB info
 *   gc_driver LIB create [OPT...]        OPT: i:name=1 d:name=0.5 b:name=1 s:name=text
 *   gc_driver LIB run PROGRAM [OPT...]   ipu_model client; OPT prefixed C compiles
 *   gc_driver LIB nulls                  every entry with NULL arguments
 *   gc_driver LIB threads N ITERS        N threads: create, compile, execute ITERS times
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal.h"

static const nxhal_api_t* api;

static const char* code_name(nxhal_status_code_t code) {
  static const char* names[] = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "UNIMPLEMENTED",
                                "UNAVAILABLE", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                "DEADLINE_EXCEEDED", "INTERNAL", "ABI_MISMATCH", "CANCELLED"};
  if ((int)code < 0 || (int)code > 10) return "UNKNOWN";
  return names[code];
}

/* Prints "<label>.status=CODE" and the message; frees the status; returns code. */
static nxhal_status_code_t report(const char* label, nxhal_status_t* status) {
  nxhal_status_code_t code = api->status_code(status);
  printf("%s.status=%s\n", label, code_name(code));
  if (status != NULL) {
    printf("%s.message=%s\n", label, api->status_message(status));
    api->status_free(status);
  }
  return code;
}

/* Parses OPT arguments into options (at most 16). Returns the count. */
static size_t parse_options(int argc, char** argv, int compile, nxhal_option_t* out) {
  size_t n = 0;
  int i;
  for (i = 0; i < argc && n < 16; ++i) {
    char* arg = argv[i];
    char* eq;
    nxhal_option_t* o = &out[n];
    if ((arg[0] == 'C') != (compile != 0)) continue;
    if (compile) arg++;
    eq = strchr(arg, '=');
    if (eq == NULL || arg[1] != ':') continue;
    memset(o, 0, sizeof(*o));
    o->struct_size = sizeof(*o);
    *eq = '\0';
    o->name = arg + 2;
    switch (arg[0]) {
      case 'i': o->type = NXHAL_VALUE_INT64; o->int64_value = atoll(eq + 1); break;
      case 'd': o->type = NXHAL_VALUE_DOUBLE; o->double_value = atof(eq + 1); break;
      case 'b': o->type = NXHAL_VALUE_BOOL; o->bool_value = atoi(eq + 1); break;
      default: o->type = NXHAL_VALUE_STRING; o->string_value = eq + 1; break;
    }
    n++;
  }
  return n;
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
  for (i = 0; i < info.num_formats; ++i) printf("device%zu.format%zu=%s\n", index, i, info.formats[i]);
  api->device_attribute_count(dev, &count);
  for (i = 0; i < count; ++i) {
    nxhal_attribute_t a;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    if (api->device_attribute(dev, i, &a) != NULL) continue;
    switch (a.type) {
      case NXHAL_VALUE_INT64: printf("device%zu.attr.%s=%lld\n", index, a.name, (long long)a.int64_value); break;
      case NXHAL_VALUE_BOOL: printf("device%zu.attr.%s=%d\n", index, a.name, (int)a.bool_value); break;
      case NXHAL_VALUE_STRING: printf("device%zu.attr.%s=%s\n", index, a.name, a.string_value); break;
      default: break;
    }
  }
}

static int cmd_create(int argc, char** argv) {
  nxhal_option_t options[16];
  size_t n = parse_options(argc, argv, 0, options);
  nxhal_client_t* client = NULL;
  size_t count = 0, i;
  const char* diag = NULL;
  if (report("create", api->client_create(n > 0 ? options : NULL, n, &client)) != NXHAL_OK) {
    printf("client=%s\n", client == NULL ? "NULL" : "SET");
    return 0;
  }
  report("diagnostics", api->client_diagnostics(client, &diag));
  printf("diagnostics=%s\n", diag);
  report("device_count", api->client_device_count(client, &count));
  printf("devices=%zu\n", count);
  for (i = 0; i < count; ++i) {
    nxhal_device_t* dev = NULL;
    if (report("client_device", api->client_device(client, i, &dev)) == NXHAL_OK) print_device(i, dev);
  }
  {
    nxhal_device_t* dev = NULL;
    report("device_out_of_range", api->client_device(client, count, &dev));
  }
  api->client_destroy(client);
  return 0;
}

/* Fills a buffer of `rank`/`dims` f32 with 0, 1, 2, ... */
static nxhal_buffer_t* make_input(nxhal_device_t* dev, const nxhal_io_info_t* io, const char* label) {
  nxhal_tensor_desc_t desc = io->desc;
  size_t n = 1, i;
  float* data;
  nxhal_buffer_t* buf = NULL;
  int64_t r;
  for (r = 0; r < desc.rank; ++r) n *= (size_t)desc.dims[r];
  data = (float*)malloc(n * sizeof(float) + 1);
  for (i = 0; i < n; ++i) data[i] = (float)i;
  desc.struct_size = sizeof(desc);
  report(label, api->buffer_from_host(dev, &desc, data, n * sizeof(float), NXHAL_HOST_COPY, &buf));
  free(data);
  return buf;
}

static void print_output(const char* label, nxhal_buffer_t* out) {
  nxhal_buffer_info_t info;
  float values[64];
  size_t i, n;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  if (report("buffer_info", api->buffer_info(out, &info)) != NXHAL_OK) return;
  n = (size_t)info.size_bytes / sizeof(float);
  if (n > 64) n = 64;
  if (report("to_host", api->buffer_to_host(out, values, n * sizeof(float), NULL)) != NXHAL_OK) return;
  printf("%s=", label);
  for (i = 0; i < n; ++i) printf("%s%g", i == 0 ? "" : ",", values[i]);
  printf("\n");
}

static int cmd_run(const char* program_text, int argc, char** argv) {
  nxhal_option_t copts[16];
  nxhal_option_t clopts[17];
  size_t nc = parse_options(argc, argv, 1, copts);
  size_t ncl = parse_options(argc, argv, 0, clopts + 1);
  nxhal_option_t* model = &clopts[0];
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

  memset(model, 0, sizeof(*model));
  model->struct_size = sizeof(*model);
  model->name = "ipu_model";
  model->type = NXHAL_VALUE_BOOL;
  model->bool_value = 1;
  if (report("create", api->client_create(clopts, ncl + 1, &client)) != NXHAL_OK) return 0;
  report("client_device", api->client_device(client, 0, &dev));

  memset(&program, 0, sizeof(program));
  program.struct_size = sizeof(program);
  program.format = "tflite";
  program.data = program_text;
  program.size = strlen(program_text);
  report("compile_bad_format", api->executable_compile(dev, &program, NULL, 0, &exe));
  program.format = "onnx";
  if (report("compile", api->executable_compile(dev, &program, nc > 0 ? copts : NULL, nc, &exe)) !=
      NXHAL_OK) {
    api->client_destroy(client);
    return 0;
  }
  api->executable_io_count(exe, NXHAL_IO_INPUT, &count);
  printf("inputs=%zu\n", count);
  memset(&io, 0, sizeof(io));
  io.struct_size = sizeof(io);
  report("io_info", api->executable_io_info(exe, NXHAL_IO_INPUT, 0, &io));
  printf("input0.name=%s\ninput0.rank=%lld\n", io.name, (long long)io.desc.rank);
  report("io_info_out_of_range", api->executable_io_info(exe, NXHAL_IO_INPUT, 5, &io));

  x = make_input(dev, &io, "put");
  report("execute", api->executable_execute(exe, &x, 1, &y, 1, &event));
  if (event != NULL) {
    report("await", api->event_await(event, NXHAL_WAIT_FOREVER));
    api->event_destroy(event);
  }
  if (y != NULL) print_output("y", y);
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  api->device_memory_stats(dev, &stats);
  printf("bytes_in_use=%llu\n", (unsigned long long)stats.bytes_in_use);
  if (y != NULL) {
    /* DLPack out and back in; then a strided tensor, which must be refused. */
    nxhal_dlpack_managed_tensor_t* t = NULL;
    nxhal_buffer_t* back = NULL;
    if (report("to_dlpack", api->buffer_to_dlpack(y, &t)) == NXHAL_OK) {
      printf("dlpack.ndim=%d\ndlpack.code=%u\ndlpack.bits=%u\ndlpack.device=%d\n",
             (int)t->dl_tensor.ndim, (unsigned)t->dl_tensor.dtype.code,
             (unsigned)t->dl_tensor.dtype.bits, (int)t->dl_tensor.device.device_type);
      report("from_dlpack", api->buffer_from_dlpack(dev, t, &back)); /* takes t */
      if (back != NULL) print_output("dlpack_back", back);
      api->buffer_destroy(back);
    }
    {
      float data[6] = {0, 1, 2, 3, 4, 5};
      int64_t shape[2] = {2, 3};
      int64_t strides[2] = {1, 2}; /* column-major: not compact row-major */
      nxhal_dlpack_managed_tensor_t strided;
      memset(&strided, 0, sizeof(strided));
      strided.version.major = 1;
      strided.dl_tensor.data = data;
      strided.dl_tensor.device.device_type = 1;
      strided.dl_tensor.ndim = 2;
      strided.dl_tensor.dtype.code = 2;
      strided.dl_tensor.dtype.bits = 32;
      strided.dl_tensor.dtype.lanes = 1;
      strided.dl_tensor.shape = shape;
      strided.dl_tensor.strides = strides;
      report("from_dlpack_strided", api->buffer_from_dlpack(dev, &strided, &back));
    }
  }
  api->buffer_destroy(y);
  y = NULL;

  report("execute_wrong_count", api->executable_execute(exe, &x, 0, &y, 1, NULL));
  {
    /* An input of the wrong shape must be refused by name. */
    nxhal_tensor_desc_t desc;
    int64_t dims[1] = {3};
    float data[3] = {0, 0, 0};
    nxhal_buffer_t* wrong = NULL;
    desc.struct_size = sizeof(desc);
    desc.dtype = NXHAL_DTYPE_F32;
    desc.rank = 1;
    desc.dims = dims;
    api->buffer_from_host(dev, &desc, data, sizeof(data), NXHAL_HOST_COPY, &wrong);
    report("execute_wrong_shape", api->executable_execute(exe, &wrong, 1, &y, 1, NULL));
    api->buffer_destroy(wrong);
    report("buffer_create", api->buffer_create(dev, &desc, &wrong));
    api->device_set_memory_limit(dev, 4);
    report("over_limit", api->buffer_from_host(dev, &desc, data, sizeof(data), NXHAL_HOST_COPY, &wrong));
    api->device_set_memory_limit(dev, 0);
  }

  if (report("serialize", api->executable_serialize(exe, &blob)) == NXHAL_OK) {
    unsigned char* copy = (unsigned char*)malloc(blob->size);
    const unsigned char* bytes = (const unsigned char*)blob->data;
    unsigned key_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | ((unsigned)bytes[11] << 24);
    printf("blob.magic=%.8s\nblob.key=%.*s\nblob.payload=%.*s\n", (const char*)bytes,
           (int)key_len, (const char*)bytes + 12, (int)(blob->size - 52 - key_len),
           (const char*)bytes + 52 + key_len); /* after the u64 length and the 32-byte digest */
    report("deserialize", api->executable_deserialize(dev, blob->data, blob->size, NULL, 0, &exe2));
    if (exe2 != NULL) {
      report("execute2", api->executable_execute(exe2, &x, 1, &y, 1, NULL));
      if (y != NULL) print_output("y2", y);
      api->buffer_destroy(y);
      api->executable_destroy(exe2);
    }
    memcpy(copy, blob->data, blob->size);
    copy[12] ^= 0x20; /* first byte of the compat key */
    report("deserialize_other_key", api->executable_deserialize(dev, copy, blob->size, NULL, 0, &exe2));
    report("deserialize_truncated", api->executable_deserialize(dev, blob->data, blob->size - 1, NULL, 0, &exe2));
    report("deserialize_foreign", api->executable_deserialize(dev, "hello world, not ours", 21, NULL, 0, &exe2));
    free(copy);
    api->blob_free(blob);
  }
  api->buffer_destroy(x);
  api->executable_destroy(exe);
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

/* One thread's work for `threads`: its own client; its own and a shared
 * executable run ITERS times each. Returns the number of wrong results. */
typedef struct thread_job {
  int iterations;
  nxhal_executable_t* shared;
  nxhal_device_t* shared_device;
  long failures;
} thread_job_t;

static long run_checked(nxhal_executable_t* exe, nxhal_device_t* dev, float addend) {
  float x[4] = {1, 2, 3, 4};
  float y[4];
  int64_t dims[1] = {4};
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t* in = NULL;
  nxhal_buffer_t* out = NULL;
  nxhal_status_t* status;
  long bad = 0;
  int i;
  desc.struct_size = sizeof(desc);
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 1;
  desc.dims = dims;
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

static void* thread_main(void* arg) {
  thread_job_t* job = (thread_job_t*)arg;
  nxhal_option_t model;
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  nxhal_executable_t* exe = NULL;
  nxhal_program_t program;
  int i;
  memset(&model, 0, sizeof(model));
  model.struct_size = sizeof(model);
  model.name = "ipu_model";
  model.type = NXHAL_VALUE_BOOL;
  model.bool_value = 1;
  memset(&program, 0, sizeof(program));
  program.struct_size = sizeof(program);
  program.format = "onnx";
  program.data = "add 2 f32 4";
  program.size = strlen("add 2 f32 4");
  if (api->client_create(&model, 1, &client) != NULL ||
      api->client_device(client, 0, &dev) != NULL ||
      api->executable_compile(dev, &program, NULL, 0, &exe) != NULL) {
    job->failures += 1000000; /* leaks the status on purpose: a failed test exits */
    return NULL;
  }
  for (i = 0; i < job->iterations; ++i) {
    job->failures += run_checked(exe, dev, 2.0f);
    job->failures += run_checked(job->shared, job->shared_device, 1.0f);
  }
  api->executable_destroy(exe);
  api->client_destroy(client);
  return NULL;
}

static int cmd_threads(int n, int iterations) {
  pthread_t threads[64];
  thread_job_t jobs[64];
  nxhal_option_t model;
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  nxhal_executable_t* shared = NULL;
  nxhal_program_t program;
  long failures = 0;
  int i;
  if (n < 1 || n > 64) return 2;
  memset(&model, 0, sizeof(model));
  model.struct_size = sizeof(model);
  model.name = "ipu_model";
  model.type = NXHAL_VALUE_BOOL;
  model.bool_value = 1;
  memset(&program, 0, sizeof(program));
  program.struct_size = sizeof(program);
  program.format = "onnx";
  program.data = "add 1 f32 4";
  program.size = strlen("add 1 f32 4");
  if (report("create", api->client_create(&model, 1, &client)) != NXHAL_OK) return 0;
  api->client_device(client, 0, &dev);
  if (report("compile", api->executable_compile(dev, &program, NULL, 0, &shared)) != NXHAL_OK) return 0;
  for (i = 0; i < n; ++i) {
    jobs[i].iterations = iterations;
    jobs[i].shared = shared;
    jobs[i].shared_device = dev;
    jobs[i].failures = 0;
    pthread_create(&threads[i], NULL, thread_main, &jobs[i]);
  }
  for (i = 0; i < n; ++i) {
    pthread_join(threads[i], NULL);
    failures += jobs[i].failures;
  }
  {
    nxhal_memory_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    stats.struct_size = sizeof(stats);
    api->device_memory_stats(dev, &stats);
    printf("shared.bytes_in_use=%llu\n", (unsigned long long)stats.bytes_in_use);
  }
  api->executable_destroy(shared);
  api->client_destroy(client);
  printf("threads=%d\nfailures=%ld\n", n, failures);
  return 0;
}

int main(int argc, char** argv) {
  void* lib;
  nxhal_query_fn query;
  nxhal_query_args_t args;
  nxhal_status_t* status;
  void* sym;
  if (argc < 3) {
    fprintf(stderr, "usage: gc_driver LIB info|create|run|nulls ...\n");
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("dlopen.error=%s\n", dlerror());
    return 3;
  }
  sym = dlsym(lib, NXHAL_QUERY_SYMBOL);
  if (sym == NULL) {
    printf("dlsym.error=%s\n", dlerror());
    return 3;
  }
  memcpy(&query, &sym, sizeof(query));
  args.struct_size = sizeof(args);
  args.host_abi_major = NXHAL_ABI_VERSION_MAJOR;
  args.host_abi_minor = NXHAL_ABI_VERSION_MINOR;
  status = query(&args, &api);
  if (api == NULL) {
    printf("query.error=no table\n");
    return 3;
  }
  if (report("query", status) != NXHAL_OK) return 3;
  printf("api.struct_size=%zu\napi.abi=%u.%u\n", api->struct_size, (unsigned)api->abi_major,
         (unsigned)api->abi_minor);
  if (strcmp(argv[2], "info") == 0) {
    nxhal_plugin_info_t info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    report("plugin_info", api->plugin_info(&info));
    printf("name=%s\nvendor=%s\nplugin_version=%s\nsdk_version=%s\nabi=%u.%u\n", info.name,
           info.vendor, info.plugin_version, info.sdk_version, (unsigned)info.abi_major,
           (unsigned)info.abi_minor);
    return 0;
  }
  if (strcmp(argv[2], "create") == 0) return cmd_create(argc - 3, argv + 3);
  if (strcmp(argv[2], "run") == 0 && argc >= 4) return cmd_run(argv[3], argc - 4, argv + 4);
  if (strcmp(argv[2], "nulls") == 0) return cmd_nulls();
  if (strcmp(argv[2], "threads") == 0 && argc >= 5) return cmd_threads(atoi(argv[3]), atoi(argv[4]));
  fprintf(stderr, "unknown command %s\n", argv[2]);
  return 2;
}
