/* dispatch_driver.c -- the C baseline for bench/dispatch.py: the cost of one
 * call through a plugin's table, measured from C with the same plugin.
 * Usage: dispatch_driver PLUGIN.so ITERATIONS
 * Prints "name ns_per_call" lines. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nx_hal/nx_hal_loader.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int fail(const char* what, const nxhal_api_t* api, nxhal_status_t* st) {
  fprintf(stderr, "%s: %s\n", what,
          api ? api->status_message(st) : nxhal_loader_status_message(st));
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so ITERATIONS\n", argv[0]);
    return 2;
  }
  long iters = atol(argv[2]);
  nxhal_plugin_t* plugin = NULL;
  nxhal_status_t* st = nxhal_plugin_open(argv[1], &plugin);
  if (st) return fail("open", NULL, st);
  const nxhal_api_t* api = nxhal_plugin_api(plugin);
  nxhal_client_t* client = NULL;
  if ((st = api->client_create(NULL, 0, &client))) return fail("client_create", api, st);
  nxhal_device_t* device = NULL;
  if ((st = api->client_device(client, 0, &device))) return fail("client_device", api, st);

  nxhal_memory_stats_t stats;
  double t0 = now_ns();
  for (long i = 0; i < iters; ++i) {
    stats.struct_size = sizeof stats;
    if ((st = api->device_memory_stats(device, &stats))) return fail("memory_stats", api, st);
  }
  printf("memory_stats %.1f\n", (now_ns() - t0) / (double)iters);

  float host[4] = {1, 2, 3, 4}, back[4];
  int64_t dims[1] = {4};
  nxhal_tensor_desc_t desc = {sizeof desc, NXHAL_DTYPE_F32, 1, dims};
  t0 = now_ns();
  for (long i = 0; i < iters; ++i) {
    nxhal_buffer_t* buf = NULL;
    if ((st = api->buffer_from_host(device, &desc, host, sizeof host, NXHAL_HOST_COPY, &buf)))
      return fail("from_host", api, st);
    if ((st = api->buffer_to_host(buf, back, sizeof back, NULL))) return fail("to_host", api, st);
    api->buffer_destroy(buf);
  }
  printf("round_trip_f32x4 %.1f\n", (now_ns() - t0) / (double)iters);
  api->client_destroy(client);
  nxhal_plugin_close(plugin);
  return 0;
}
