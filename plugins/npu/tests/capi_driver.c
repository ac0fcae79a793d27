/*
 * capi_driver.c -- drives libnxhal_npu.so through the raw ABI, as a C program
 * would: negotiate, create a client, compile an ONNX file, run it sync and
 * async, serialize round trip, and the error paths. Built and run by
 * test_capi_driver.py, which checks the numbers against onnxruntime.
 *
 * usage: capi_driver LIB MODEL.onnx INPUT.raw OUTPUT.raw
 * (INPUT is f32 in the model's static input shape.) Exit 0 and "OK" on success.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal.h"

static const nxhal_api_t* api;

#define FAIL(...)                     \
  do {                                \
    fprintf(stderr, "FAIL: ");        \
    fprintf(stderr, __VA_ARGS__);     \
    fprintf(stderr, "\n");            \
    exit(1);                          \
  } while (0)

/* Aborts the driver (not the plugin) on an unexpected status. */
static void ok(nxhal_status_t* st, const char* what) {
  if (st != NULL) FAIL("%s: %s", what, api->status_message(st));
}

/* Expects a status of `code` whose message contains `needle`. */
static void expect(nxhal_status_t* st, nxhal_status_code_t code, const char* needle, const char* what) {
  if (st == NULL) FAIL("%s: succeeded, expected code %d", what, code);
  const char* msg = api->status_message(st);
  if (api->status_code(st) != code || strstr(msg, needle) == NULL) {
    FAIL("%s: code %d message \"%s\", expected code %d containing \"%s\"", what,
         api->status_code(st), msg, code, needle);
  }
  printf("expected error (%s): %.120s\n", what, msg);
  api->status_free(st);
}

static void* read_all(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) FAIL("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = malloc((size_t)n);
  if (fread(data, 1, (size_t)n, f) != (size_t)n) FAIL("cannot read %s", path);
  fclose(f);
  *size = (size_t)n;
  return data;
}

static nxhal_option_t opt_str(const char* name, const char* value) {
  nxhal_option_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.name = name;
  o.type = NXHAL_VALUE_STRING;
  o.string_value = value;
  return o;
}

static nxhal_option_t opt_int(const char* name, int64_t value) {
  nxhal_option_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.name = name;
  o.type = NXHAL_VALUE_INT64;
  o.int64_value = value;
  return o;
}

/* Runs `exe` on `in`; returns the first output's bytes (malloc'd). */
static void* run(nxhal_executable_t* exe, nxhal_buffer_t* in, size_t* out_size, int async) {
  nxhal_buffer_t* out = NULL;
  nxhal_event_t* event = NULL;
  ok(api->executable_execute(exe, &in, 1, &out, 1, async ? &event : NULL), "execute");
  if (async) {
    ok(api->event_await(event, NXHAL_WAIT_FOREVER), "await");
    api->event_destroy(event);
  }
  nxhal_buffer_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ok(api->buffer_info(out, &info), "buffer_info");
  void* host = malloc(info.size_bytes);
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

static void on_ready(nxhal_status_t* status, void* user_data) {
  callback_state_t* s = user_data;
  pthread_mutex_lock(&s->mu);
  s->failed = status != NULL;
  s->done = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  api->status_free(status);
}

int main(int argc, char** argv) {
  if (argc != 5) FAIL("usage: %s LIB MODEL INPUT OUTPUT", argv[0]);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) FAIL("dlopen: %s", dlerror());
  nxhal_query_fn query = (nxhal_query_fn)dlsym(lib, NXHAL_QUERY_SYMBOL);
  if (query == NULL) FAIL("no %s", NXHAL_QUERY_SYMBOL);
  nxhal_query_args_t args = {NXHAL_QUERY_ARGS_STRUCT_SIZE, NXHAL_ABI_VERSION_MAJOR,
                             NXHAL_ABI_VERSION_MINOR};
  nxhal_status_t* st = query(&args, &api);
  if (st != NULL || api == NULL) FAIL("negotiation refused");
  nxhal_query_args_t future = {NXHAL_QUERY_ARGS_STRUCT_SIZE, NXHAL_ABI_VERSION_MAJOR + 1, 0};
  const nxhal_api_t* api2 = NULL;
  expect(query(&future, &api2), NXHAL_ABI_MISMATCH, "", "ABI 2.0 host");

  nxhal_plugin_info_t pinfo;
  memset(&pinfo, 0, sizeof pinfo);
  pinfo.struct_size = sizeof pinfo;
  ok(api->plugin_info(&pinfo), "plugin_info");
  printf("plugin %s %s over OpenVINO %s\n", pinfo.name, pinfo.plugin_version, pinfo.sdk_version);

  nxhal_client_t* client = NULL;
  nxhal_option_t bad[1] = {opt_int("cache_size", 1)};
  expect(api->client_create(bad, 1, &client), NXHAL_INVALID_ARGUMENT, "cache_size", "unknown client option");
  nxhal_option_t mistyped[1] = {opt_str("memory_limit", "1GB")};
  expect(api->client_create(mistyped, 1, &client), NXHAL_INVALID_ARGUMENT, "memory_limit",
         "mistyped client option");
  nxhal_option_t copts[2] = {opt_int("memory_limit", 1 << 30), opt_str("precision", "f32")};
  ok(api->client_create(copts, 2, &client), "client_create");
  const char* diag = NULL;
  ok(api->client_diagnostics(client, &diag), "diagnostics");
  printf("diagnostics: %s\n", diag);

  size_t count = 0;
  ok(api->client_device_count(client, &count), "device_count");
  nxhal_device_t* dev = NULL;
  for (size_t i = 0; i < count; i++) {
    nxhal_device_t* d = NULL;
    nxhal_device_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ok(api->client_device(client, i, &d), "client_device");
    ok(api->device_info(d, &info), "device_info");
    printf("device %zu: kind %d name %s formats %zu key %s\n", i, info.kind, info.name,
           info.num_formats, info.compat_key);
    if (info.kind == NXHAL_DEVICE_CPU) dev = d;
  }
  if (dev == NULL) FAIL("no CPU device");
  expect(api->client_device(client, count, &dev), NXHAL_INVALID_ARGUMENT, "out of range", "device index");

  size_t model_size = 0, in_size = 0;
  void* model = read_all(argv[2], &model_size);
  void* input = read_all(argv[3], &in_size);
  nxhal_program_t prog = {NXHAL_PROGRAM_STRUCT_SIZE, "onnx", model, model_size, NULL, 0};
  nxhal_executable_t* exe = NULL;
  nxhal_option_t bad_compile[1] = {opt_int("stream", 2)};
  expect(api->executable_compile(dev, &prog, bad_compile, 1, &exe), NXHAL_INVALID_ARGUMENT, "stream",
         "unknown compile option");
  nxhal_program_t garbage = {NXHAL_PROGRAM_STRUCT_SIZE, "onnx", "\x08\x01garbage", 9, NULL, 0};
  expect(api->executable_compile(dev, &garbage, NULL, 0, &exe), NXHAL_INVALID_ARGUMENT,
         "reading the ONNX model failed", "garbage model");
  nxhal_option_t npu[1] = {opt_str("target", "NPU")};
  st = api->executable_compile(dev, &prog, npu, 1, &exe);
  if (st != NULL) {
    if (api->status_code(st) != NXHAL_UNAVAILABLE) FAIL("NPU target: %s", api->status_message(st));
    printf("NPU target: UNAVAILABLE: %.160s\n", api->status_message(st));
    api->status_free(st);
  } else {
    api->executable_destroy(exe);
  }
  nxhal_option_t perf[2] = {opt_str("performance", "latency"), opt_int("streams", 1)};
  ok(api->executable_compile(dev, &prog, perf, 2, &exe), "compile");

  nxhal_io_info_t io;
  memset(&io, 0, sizeof io);
  io.struct_size = sizeof io;
  ok(api->executable_io_info(exe, NXHAL_IO_INPUT, 0, &io), "io_info");
  nxhal_tensor_desc_t desc = {NXHAL_TENSOR_DESC_STRUCT_SIZE, NXHAL_DTYPE_F32, io.desc.rank, io.desc.dims};
  nxhal_buffer_t* in = NULL;
  ok(api->buffer_from_host(dev, &desc, input, in_size, NXHAL_HOST_ZERO_COPY, &in), "from_host");

  size_t out_size = 0, async_size = 0, loaded_size = 0;
  void* out = run(exe, in, &out_size, 0);
  void* out_async = run(exe, in, &async_size, 1);
  if (async_size != out_size || memcmp(out, out_async, out_size) != 0) FAIL("async differs from sync");

  /* on_ready callback path. */
  callback_state_t cs = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  nxhal_buffer_t* cb_out = NULL;
  nxhal_event_t* event = NULL;
  ok(api->executable_execute(exe, &in, 1, &cb_out, 1, &event), "execute async");
  ok(api->event_on_ready(event, on_ready, &cs), "on_ready");
  pthread_mutex_lock(&cs.mu);
  while (!cs.done) pthread_cond_wait(&cs.cv, &cs.mu);
  pthread_mutex_unlock(&cs.mu);
  if (cs.failed) FAIL("callback saw an error");
  api->event_destroy(event);
  api->buffer_destroy(cb_out);

  /* Serialize, load, run again. */
  nxhal_blob_t* blob = NULL;
  ok(api->executable_serialize(exe, &blob), "serialize");
  nxhal_executable_t* loaded = NULL;
  expect(api->executable_deserialize(dev, blob->data, blob->size / 2, NULL, 0, &loaded),
         NXHAL_INVALID_ARGUMENT, "truncated", "truncated blob");
  ok(api->executable_deserialize(dev, blob->data, blob->size, NULL, 0, &loaded), "deserialize");
  void* out_loaded = run(loaded, in, &loaded_size, 0);
  if (loaded_size != out_size || memcmp(out, out_loaded, out_size) != 0) FAIL("loaded differs");
  printf("serialized %zu bytes\n", blob->size);
  api->blob_free(blob);

  /* Wrong shape: one fewer row. */
  int64_t dims[8];
  memcpy(dims, io.desc.dims, sizeof(int64_t) * (size_t)io.desc.rank);
  dims[0] = dims[0] > 1 ? dims[0] - 1 : 2;
  nxhal_tensor_desc_t wrong = {NXHAL_TENSOR_DESC_STRUCT_SIZE, NXHAL_DTYPE_F32, io.desc.rank, dims};
  nxhal_buffer_t* wrong_in = NULL;
  ok(api->buffer_create(dev, &wrong, &wrong_in), "buffer_create");
  nxhal_buffer_t* wrong_out = NULL;
  expect(api->executable_execute(exe, &wrong_in, 1, &wrong_out, 1, NULL), NXHAL_INVALID_ARGUMENT,
         io.name, "wrong input shape");
  api->buffer_destroy(wrong_in);

  FILE* f = fopen(argv[4], "wb");
  if (f == NULL || fwrite(out, 1, out_size, f) != out_size) FAIL("cannot write %s", argv[4]);
  fclose(f);
  api->buffer_destroy(in);
  api->executable_destroy(loaded);
  api->executable_destroy(exe);
  nxhal_memory_stats_t stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  ok(api->device_memory_stats(dev, &stats), "memory_stats");
  if (stats.bytes_in_use != 0) FAIL("%llu bytes still in use", (unsigned long long)stats.bytes_in_use);
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
