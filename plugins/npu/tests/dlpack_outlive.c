/*
 * dlpack_outlive.c -- a DLPack export outlives its client (issue #11): the
 * consumer owns the tensor, so the ABI cannot make client_destroy wait for
 * it. Exports a buffer, destroys the buffer and the client, reads the
 * tensor's data, then deletes it. Built and run by test_lifetimes.py; under
 * AddressSanitizer a deleter that touches the destroyed client is reported.
 *
 * usage: dlpack_outlive LIB   (exit 0 and "OK" on success)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal.h"

static const nxhal_api_t* api;

/* Exits on an unexpected status. */
static void ok(nxhal_status_t* st, const char* what) {
  if (st == NULL) return;
  fprintf(stderr, "FAIL: %s: %s\n", what, api->status_message(st));
  exit(1);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIB\n", argv[0]);
    return 64;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  nxhal_query_fn query;
  *(void**)&query = dlsym(lib, NXHAL_QUERY_SYMBOL);
  nxhal_query_args_t args;
  memset(&args, 0, sizeof args);
  args.struct_size = NXHAL_QUERY_ARGS_STRUCT_SIZE;
  args.host_abi_major = NXHAL_ABI_VERSION_MAJOR;
  args.host_abi_minor = NXHAL_ABI_VERSION_MINOR;
  if (query(&args, &api) != NULL) {
    fprintf(stderr, "FAIL: ABI negotiation\n");
    return 1;
  }
  nxhal_client_t* client = NULL;
  nxhal_device_t* dev = NULL;
  ok(api->client_create(NULL, 0, &client), "client_create");
  ok(api->client_device(client, 0, &dev), "client_device");
  float data[24];
  for (int i = 0; i < 24; i++) data[i] = (float)i * 0.25f - 1.0f;
  int64_t dims[2] = {4, 6};
  nxhal_tensor_desc_t desc = {NXHAL_TENSOR_DESC_STRUCT_SIZE, NXHAL_DTYPE_F32, 2, dims};
  nxhal_buffer_t* buf = NULL;
  ok(api->buffer_from_host(dev, &desc, data, sizeof data, NXHAL_HOST_COPY, &buf), "from_host");
  nxhal_dlpack_managed_tensor_t* t = NULL;
  ok(api->buffer_to_dlpack(buf, &t), "to_dlpack");
  api->buffer_destroy(buf);
  api->client_destroy(client); /* the export is still alive */
  const float* seen = (const float*)t->dl_tensor.data;
  int same = t->dl_tensor.ndim == 2 && t->dl_tensor.shape[0] == 4 && t->dl_tensor.shape[1] == 6;
  for (int i = 0; i < 24; i++) same &= seen[i] == data[i];
  printf("read ok=%d\n", same);
  t->deleter(t); /* releases the client's last reference */
  if (!same) return 1;
  printf("OK\n");
  return 0;
}
