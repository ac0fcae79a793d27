/*
 * npu_capi_driver.c -- the baseline for bench/npu_overhead.py: one OpenVINO
 * inference through the OpenVINO C API directly, no nx_hal in between.
 *
 * usage: npu_capi_driver MODEL.onnx ROWS COLS ITERS [PLUGIN.so]
 * Compiles MODEL for CPU in f32, binds a ROWS x COLS f32 input from host
 * memory once, runs ITERS synchronous inferences and prints the mean
 * microseconds per inference on stdout. With PLUGIN (libnxhal_npu.so) the
 * same runs go through the nx_hal ABI instead (execute + output free per
 * run): the plugin's own overhead, without any Python.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nx_hal/nx_hal.h"
#include "openvino/c/openvino.h"

#define CHECK(call)                                                     \
  do {                                                                  \
    ov_status_e st_ = (call);                                           \
    if (st_ != OK) {                                                    \
      fprintf(stderr, "%s failed: %s\n", #call, ov_get_last_err_msg()); \
      return 1;                                                         \
    }                                                                   \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The nx_hal path: same model, input and loop through the plugin's table. */
static int run_plugin(const char* plugin, const char* model_path, int64_t dims[2], long iters) {
  void* lib = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  nxhal_query_fn query = lib != NULL ? (nxhal_query_fn)dlsym(lib, NXHAL_QUERY_SYMBOL) : NULL;
  if (query == NULL) {
    fprintf(stderr, "cannot load %s: %s\n", plugin, dlerror());
    return 1;
  }
  const nxhal_api_t* api = NULL;
  nxhal_query_args_t args = {NXHAL_QUERY_ARGS_1_0_SIZE, NXHAL_ABI_VERSION_MAJOR,
                             NXHAL_ABI_VERSION_MINOR};
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  nxhal_executable_t* exe = NULL;
  nxhal_buffer_t* in = NULL;
  FILE* f = fopen(model_path, "rb");
  if (f == NULL) return 1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* bytes = malloc((size_t)n);
  size_t got = fread(bytes, 1, (size_t)n, f);
  fclose(f);
  nxhal_program_t prog = {NXHAL_PROGRAM_1_0_SIZE, "onnx", bytes, got, NULL, 0};
  size_t count = (size_t)(dims[0] * dims[1]);
  float* data = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) data[i] = (float)(i % 7) * 0.1f;
  nxhal_tensor_desc_t desc = {NXHAL_TENSOR_DESC_1_0_SIZE, NXHAL_DTYPE_F32, 2, dims};
  nxhal_status_t* st = query(&args, &api);
  if (st == NULL) st = api->client_create(NULL, 0, &client);
  if (st == NULL) st = api->client_device(client, 0, &dev);
  if (st == NULL) st = api->executable_compile(dev, &prog, NULL, 0, &exe);
  if (st == NULL) st = api->buffer_from_host(dev, &desc, data, count * sizeof(float), 0, &in);
  for (long i = -20; st == NULL && i < iters; i++) {
    static double start;
    if (i == 0) start = now_us();
    nxhal_buffer_t* out = NULL;
    st = api->executable_execute(exe, &in, 1, &out, 1, NULL);
    api->buffer_destroy(out);
    if (i == iters - 1) printf("%.3f\n", (now_us() - start) / (double)iters);
  }
  if (st != NULL) {
    fprintf(stderr, "nx_hal: %s\n", api->status_message(st));
    return 1;
  }
  api->buffer_destroy(in);
  api->executable_destroy(exe);
  api->client_destroy(client);
  free(bytes);
  free(data);
  return 0;
}

static volatile float sink; /* keeps the output read from being optimised away */

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s MODEL ROWS COLS ITERS [PLUGIN.so]\n", argv[0]);
    return 2;
  }
  int64_t dims[2] = {atoll(argv[2]), atoll(argv[3])};
  long iters = atol(argv[4]);
  if (argc == 6) return run_plugin(argv[5], argv[1], dims, iters);
  ov_core_t* core = NULL;
  ov_model_t* model = NULL;
  ov_compiled_model_t* compiled = NULL;
  ov_infer_request_t* req = NULL;
  ov_tensor_t* input = NULL;
  ov_shape_t shape;
  CHECK(ov_core_create(&core));
  CHECK(ov_core_read_model(core, argv[1], NULL, &model));
  ov_property_t props[1] = {{ov_property_key_hint_inference_precision, "f32"}};
  CHECK(ov_core_compile_model_props(core, model, "CPU", 1, props, &compiled));
  CHECK(ov_compiled_model_create_infer_request(compiled, &req));
  float* data = aligned_alloc(64, (size_t)(dims[0] * dims[1]) * sizeof(float) + 64);
  for (int64_t i = 0; i < dims[0] * dims[1]; i++) data[i] = (float)(i % 7) * 0.1f;
  CHECK(ov_shape_create(2, dims, &shape));
  CHECK(ov_tensor_create_from_host_ptr(F32, shape, data, &input));
  CHECK(ov_infer_request_set_input_tensor(req, input));
  /* Each iteration does what any program must to use a result: run, then
   * take the output tensor and its data (a program that never reads its
   * output is not a baseline anyone can match). */
  double start = 0;
  for (long i = -20; i < iters; i++) {
    if (i == 0) start = now_us();
    ov_tensor_t* output = NULL;
    void* out_data = NULL;
    CHECK(ov_infer_request_infer(req));
    CHECK(ov_infer_request_get_output_tensor_by_index(req, 0, &output));
    CHECK(ov_tensor_data(output, &out_data));
    sink += ((volatile float*)out_data)[0];
    ov_tensor_free(output);
  }
  double elapsed = now_us() - start;
  printf("%.3f\n", elapsed / (double)iters);
  ov_tensor_free(input);
  ov_shape_free(&shape);
  ov_infer_request_free(req);
  ov_compiled_model_free(compiled);
  ov_model_free(model);
  ov_core_free(core);
  free(data);
  return 0;
}
