/*
 * pjrt_capi_driver.c -- the raw PJRT C API baseline for bench/pjrt_overhead.py:
 * the same programs executed straight through a PJRT plugin, no nx_hal.
 *
 *   pjrt_capi_driver PJRT_PLUGIN.so PROGRAM.mlir N DIM [DIM...] -- ITERATIONS
 *
 * Inputs: N f32 tensors of the given shape (all inputs share it), filled
 * with 1.0. Prints, each the best of 5 batches:
 *   compile_ms X            PJRT_Client_Compile of the program;
 *   execute_us X            execute, wait for completion, free the outputs;
 *   roundtrip_us X          host-to-device of every input, execute,
 *                           device-to-host of output 0 into a host array,
 *                           through the fastest correct path (below);
 *   roundtrip_tohost_us X   the same, device-to-host always through
 *                           PJRT_Buffer_ToHostBuffer (for reference).
 * Host-to-device uses kImmutableOnlyDuringCall: PJRT copies during the call,
 * so the done-with-host event is already ready (awaiting it costs nothing).
 * Device-to-host, on a CPU buffer (PJRT_Buffer_IsOnCpu) with a dense
 * row-major layout: await the buffer's ready event, then memcpy from
 * PJRT_Buffer_UnsafePointer -- what jax does on CPU, minus its zero-copy
 * view -- because XLA CPU's ToHostBuffer hands the copy to a worker thread.
 * Other buffers: PJRT_Buffer_ToHostBuffer and await its event. The same
 * semantics as nx_hal's tpu plugin: the host array is filled on return.
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

/* Whether `buffer` is host memory laid out dense row-major (rank `rank`). */
static int host_readable(PJRT_Buffer* buffer) {
  PJRT_Buffer_IsOnCpu_Args oc;
  PJRT_Buffer_GetMemoryLayout_Args gl;
  size_t i;
  memset(&oc, 0, sizeof(oc));
  oc.struct_size = PJRT_Buffer_IsOnCpu_Args_STRUCT_SIZE;
  oc.buffer = buffer;
  check(api->PJRT_Buffer_IsOnCpu(&oc), "is on cpu");
  if (!oc.is_on_cpu) return 0;
  memset(&gl, 0, sizeof(gl));
  gl.struct_size = PJRT_Buffer_GetMemoryLayout_Args_STRUCT_SIZE;
  gl.buffer = buffer;
  check(api->PJRT_Buffer_GetMemoryLayout(&gl), "layout");
  if (gl.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || gl.layout.tiled.num_tiles != 0 ||
      gl.layout.tiled.minor_to_major_size != rank) {
    return 0;
  }
  for (i = 0; i < rank; ++i) {
    if (gl.layout.tiled.minor_to_major[i] != (int64_t)(rank - 1 - i)) return 0;
  }
  return 1;
}

/* Copies `buffer` into `dst` (host_bytes), filled on return. */
static void to_host(PJRT_Buffer* buffer, void* dst, int use_to_host_buffer) {
  PJRT_Buffer_ToHostBuffer_Args th;
  if (!use_to_host_buffer && host_readable(buffer)) {
    PJRT_Buffer_ReadyEvent_Args re;
    PJRT_Buffer_UnsafePointer_Args up;
    memset(&re, 0, sizeof(re));
    re.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
    re.buffer = buffer;
    check(api->PJRT_Buffer_ReadyEvent(&re), "ready event");
    await_destroy(re.event);
    memset(&up, 0, sizeof(up));
    up.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
    up.buffer = buffer;
    check(api->PJRT_Buffer_UnsafePointer(&up), "unsafe pointer");
    memcpy(dst, (const void*)up.buffer_pointer, host_bytes);
    return;
  }
  memset(&th, 0, sizeof(th));
  th.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  th.src = buffer;
  th.dst = dst;
  th.dst_size = host_bytes;
  check(api->PJRT_Buffer_ToHostBuffer(&th), "to host");
  await_destroy(th.event);
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
  double t0, best_exec = 1e300, best_round[2] = {1e300, 1e300}, compile_ms;
  int mode;
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
    if ((now_us() - t0) / (double)iterations < best_exec)
      best_exec = (now_us() - t0) / (double)iterations;
  }
  /* mode 0: the fastest correct path; mode 1: always ToHostBuffer. */
  for (mode = 0; mode < 2; ++mode) {
    for (a = 0; a < 5; ++a) {
      long it;
      float* back = (float*)malloc(host_bytes);
      t0 = now_us();
      for (it = 0; it < iterations; ++it) {
        PJRT_Buffer* fresh[16];
        for (i = 0; i < n; ++i) fresh[i] = to_device();
        execute(fresh, n, outs);
        to_host(outs[0], back, mode);
        for (k = 0; k < num_outputs; ++k) buffer_destroy(outs[k]);
        for (i = 0; i < n; ++i) buffer_destroy(fresh[i]);
      }
      if ((now_us() - t0) / (double)iterations < best_round[mode]) {
        best_round[mode] = (now_us() - t0) / (double)iterations;
      }
      if (back[0] != (float)n) { /* every input is 1.0: add gives 2, matmul 1024 */
        if (!(rank == 2 && back[0] == (float)shape[1])) {
          fprintf(stderr, "wrong result %f\n", (double)back[0]);
          return 1;
        }
      }
      free(back);
    }
  }
  printf("compile_ms %.3f\nexecute_us %.3f\nroundtrip_us %.3f\nroundtrip_tohost_us %.3f\n",
         compile_ms, best_exec, best_round[0], best_round[1]);
  return 0;
}
