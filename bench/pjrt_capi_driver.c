/*
 * pjrt_capi_driver.c -- the raw PJRT C API baseline for bench/pjrt_overhead.py:
 * the same programs executed straight through a PJRT plugin, no nx_hal.
 *
 *   pjrt_capi_driver PJRT_PLUGIN.so PROGRAM.mlir N DIM [DIM...] -- ITERATIONS
 *
 * Inputs: N f32 tensors of the given shape (all inputs share it), filled
 * with 1.0. Prints "compile_ms X", "execute_us X" (execute and wait for
 * completion, outputs freed) and "roundtrip_us X" (host-to-device of every
 * input, execute, device-to-host of output 0), each the best of 5 batches.
 * Built by the benchmark with -I<xla_cpu_pjrt>/include; exits 1 on error.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pjrt_c_api.h"

static const PJRT_Api* api;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void check(PJRT_Error* error, const char* what) {
  PJRT_Error_Message_Args m;
  if (error == NULL) return;
  memset(&m, 0, sizeof(m));
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = error;
  api->PJRT_Error_Message(&m);
  fprintf(stderr, "%s: %.*s\n", what, (int)m.message_size, m.message);
  exit(1);
}

static void await_destroy(PJRT_Event* event) {
  PJRT_Event_Await_Args a;
  PJRT_Event_Destroy_Args d;
  if (event == NULL) return;
  memset(&a, 0, sizeof(a));
  a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  a.event = event;
  check(api->PJRT_Event_Await(&a), "await");
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  d.event = event;
  check(api->PJRT_Event_Destroy(&d), "event destroy");
}

static void buffer_destroy(PJRT_Buffer* buffer) {
  PJRT_Buffer_Destroy_Args d;
  memset(&d, 0, sizeof(d));
  d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  d.buffer = buffer;
  check(api->PJRT_Buffer_Destroy(&d), "buffer destroy");
}

static PJRT_Client* client;
static PJRT_Device* device;
static PJRT_LoadedExecutable* exe;
static size_t num_outputs;
static const int64_t* dims;
static size_t rank;
static float* host;
static size_t host_bytes;

static PJRT_Buffer* to_device(void) {
  PJRT_Client_BufferFromHostBuffer_Args b;
  memset(&b, 0, sizeof(b));
  b.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  b.client = client;
  b.data = host;
  b.type = PJRT_Buffer_Type_F32;
  b.dims = dims;
  b.num_dims = rank;
  b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  b.device = device;
  check(api->PJRT_Client_BufferFromHostBuffer(&b), "to device");
  await_destroy(b.done_with_host_buffer);
  return b.buffer;
}

/* One execute on `device`, waiting for completion; outputs left in `outs`. */
static void execute(PJRT_Buffer** inputs, size_t n, PJRT_Buffer** outs) {
  PJRT_ExecuteOptions opts;
  PJRT_LoadedExecutable_Execute_Args x;
  PJRT_Buffer* const* arg_lists[1] = {inputs};
  PJRT_Buffer** out_lists[1] = {outs};
  PJRT_Event* done = NULL;
  memset(&opts, 0, sizeof(opts));
  opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  memset(&x, 0, sizeof(x));
  x.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  x.executable = exe;
  x.options = &opts;
  x.argument_lists = arg_lists;
  x.num_devices = 1;
  x.num_args = n;
  x.output_lists = out_lists;
  x.device_complete_events = &done;
  x.execute_device = device;
  check(api->PJRT_LoadedExecutable_Execute(&x), "execute");
  await_destroy(done);
}

int main(int argc, char** argv) {
  void* lib;
  const PJRT_Api* (*get_api)(void);
  PJRT_Plugin_Initialize_Args init;
  PJRT_Client_Create_Args c;
  PJRT_Client_AddressableDevices_Args ad;
  PJRT_Program program;
  PJRT_Client_Compile_Args cc;
  PJRT_LoadedExecutable_GetExecutable_Args ge;
  PJRT_Executable_NumOutputs_Args no;
  /* num_replicas=1, num_partitions=1, compile_portable_executable: what nx_hal sends. */
  static const char copts[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  PJRT_Buffer* inputs[16];
  PJRT_Buffer* outs[16];
  int64_t shape[8];
  size_t n, i, k, elements = 1;
  long iterations;
  int a;
  FILE* f;
  char* code;
  long code_size;
  double t0, best_exec = 1e300, best_round = 1e300, compile_ms;
  if (argc < 6) {
    fprintf(stderr, "usage: %s PJRT.so PROGRAM N DIM... -- ITERATIONS\n", argv[0]);
    return 2;
  }
  n = (size_t)atoi(argv[3]);
  for (a = 4, rank = 0; a < argc && strcmp(argv[a], "--") != 0; ++a) shape[rank++] = atoll(argv[a]);
  iterations = atol(argv[a + 1]);
  dims = shape;
  for (i = 0; i < rank; ++i) elements *= (size_t)shape[i];
  host_bytes = elements * sizeof(float);
  host = (float*)malloc(host_bytes);
  for (i = 0; i < elements; ++i) host[i] = 1.0f;

  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  *(void**)&get_api = dlsym(lib, "GetPjrtApi");
  api = get_api();
  memset(&init, 0, sizeof(init));
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  check(api->PJRT_Plugin_Initialize(&init), "initialize");
  memset(&c, 0, sizeof(c));
  c.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  check(api->PJRT_Client_Create(&c), "client");
  client = c.client;
  memset(&ad, 0, sizeof(ad));
  ad.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  ad.client = client;
  check(api->PJRT_Client_AddressableDevices(&ad), "devices");
  device = ad.addressable_devices[0];

  f = fopen(argv[2], "rb");
  fseek(f, 0, SEEK_END);
  code_size = ftell(f);
  fseek(f, 0, SEEK_SET);
  code = (char*)malloc((size_t)code_size);
  if (fread(code, 1, (size_t)code_size, f) != (size_t)code_size) return 1;
  fclose(f);
  memset(&program, 0, sizeof(program));
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = code;
  program.code_size = (size_t)code_size;
  program.format = "mlir";
  program.format_size = 4;
  memset(&cc, 0, sizeof(cc));
  cc.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  cc.client = client;
  cc.program = &program;
  cc.compile_options = copts;
  cc.compile_options_size = sizeof(copts);
  t0 = now_us();
  check(api->PJRT_Client_Compile(&cc), "compile");
  compile_ms = (now_us() - t0) / 1e3;
  exe = cc.executable;
  memset(&ge, 0, sizeof(ge));
  ge.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  ge.loaded_executable = exe;
  check(api->PJRT_LoadedExecutable_GetExecutable(&ge), "get executable");
  memset(&no, 0, sizeof(no));
  no.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  no.executable = ge.executable;
  check(api->PJRT_Executable_NumOutputs(&no), "num outputs");
  num_outputs = no.num_outputs;

  for (i = 0; i < n; ++i) inputs[i] = to_device();
  for (a = 0; a < 5; ++a) {
    long it;
    t0 = now_us();
    for (it = 0; it < iterations; ++it) {
      execute(inputs, n, outs);
      for (k = 0; k < num_outputs; ++k) buffer_destroy(outs[k]);
    }
    if ((now_us() - t0) / (double)iterations < best_exec) best_exec = (now_us() - t0) / (double)iterations;
  }
  for (a = 0; a < 5; ++a) {
    long it;
    float* back = (float*)malloc(host_bytes);
    t0 = now_us();
    for (it = 0; it < iterations; ++it) {
      PJRT_Buffer* fresh[16];
      PJRT_Buffer_ToHostBuffer_Args th;
      for (i = 0; i < n; ++i) fresh[i] = to_device();
      execute(fresh, n, outs);
      memset(&th, 0, sizeof(th));
      th.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
      th.src = outs[0];
      th.dst = back;
      th.dst_size = host_bytes;
      check(api->PJRT_Buffer_ToHostBuffer(&th), "to host");
      await_destroy(th.event);
      for (k = 0; k < num_outputs; ++k) buffer_destroy(outs[k]);
      for (i = 0; i < n; ++i) buffer_destroy(fresh[i]);
    }
    if ((now_us() - t0) / (double)iterations < best_round) best_round = (now_us() - t0) / (double)iterations;
    free(back);
  }
  printf("compile_ms %.3f\nexecute_us %.3f\nroundtrip_us %.3f\n", compile_ms, best_exec, best_round);
  return 0;
}
