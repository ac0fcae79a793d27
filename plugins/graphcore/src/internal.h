/*
 * internal.h -- the objects behind the opaque handles of the
 * Graphcore plugin, shared by its C files. Not installed.
 */
#ifndef NX_HAL_GRAPHCORE_INTERNAL_H_
#define NX_HAL_GRAPHCORE_INTERNAL_H_

#include <pthread.h>

#include "backend.h"
#include "nx_hal/nx_hal_plugin.h"

/* Written by CMake: whether the Poplar backend was built, and if not, why
 * (client.c's probe), and the versions plugin info reports (plugin.c). */
#ifdef NXHAL_GRAPHCORE_HAVE_BUILD_CONFIG
#include "graphcore_build_config.h"
#endif
#ifndef NXHAL_GRAPHCORE_BACKEND_BUILT
#define NXHAL_GRAPHCORE_BACKEND_BUILT 0
#endif
#ifndef NXHAL_GRAPHCORE_BUILD_REASON
#define NXHAL_GRAPHCORE_BUILD_REASON "no Poplar SDK: the build recorded no reason"
#endif
#ifndef NXHAL_GRAPHCORE_SDK_VERSION
#define NXHAL_GRAPHCORE_SDK_VERSION ""
#endif
#ifndef NXHAL_GRAPHCORE_PLUGIN_VERSION
#define NXHAL_GRAPHCORE_PLUGIN_VERSION "0.1.0"
#endif

/* Free-form device attributes: num_ipus, tiles_per_ipu, bytes_per_tile,
 * arch, device_id, ipu_model, compile_only, precision. */
#define NXHAL_GC_NUM_ATTRIBUTES 8

/* One device of a client. Owned by the client; lives as long as it. */
struct nxhal_device {
  nxhal_client_t* client;
  size_t index;                       /* index in the backend client */
  nxhal_graphcore_device_desc_t desc; /* strings owned by the backend client */
  const char* formats[2];
  nxhal_attribute_t attributes[NXHAL_GC_NUM_ATTRIBUTES];
  nxhal_memory_t memory; /* host staging memory of live buffers, and the limit */
};

/* A client: the backend's client plus our device objects. Caller-owned. */
struct nxhal_client {
  const nxhal_graphcore_backend_t* backend;
  nxhal_graphcore_bclient_t* bclient;
  nxhal_graphcore_config_t config;
  char* diagnostics; /* owned */
  size_t num_devices;
  struct nxhal_device* devices; /* owned array */
};

/* A buffer is host staging memory, bound to a program's inputs and outputs
 * when it executes: Poplar streams data to and from the IPU itself, and has
 * no API to allocate IPU memory outside a compiled program. */
struct nxhal_buffer {
  nxhal_device_t* device;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t* dims; /* owned; NULL when rank is 0 */
  uint64_t size_bytes;
  void* data;    /* owned unless zero_copy */
  int zero_copy; /* 1: data is the caller's memory */
};

/* An executable: the backend's, with the device it was compiled for. */
struct nxhal_executable {
  nxhal_device_t* device;
  nxhal_graphcore_bexe_t* bexe; /* owned */
};

/* Reserves `bytes` of the device's staging memory (RESOURCE_EXHAUSTED past
 * its limit) or releases them (reserve 0). Thread-safe. */
nxhal_status_t* nxhal_gc_device_reserve(nxhal_device_t* device, uint64_t bytes);
void nxhal_gc_device_release(nxhal_device_t* device, uint64_t bytes);

/* Makes an owned buffer of `desc`'s shape with uninitialised staging memory.
 * Caller owns *out. Thread-safe. */
nxhal_status_t* nxhal_gc_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                      const int64_t* dims, nxhal_buffer_t** out);

/* The table's entries, gc_<entry> (semantics as in nx_hal.h): plugin info
 * in plugin.c, clients and devices in client.c, buffers in buffer.c,
 * executables in executable.c. Events are the helper library's: every
 * operation completes before its entry returns. */
#define gc_event_is_ready nxhal_event_is_ready
#define gc_event_await nxhal_event_await
#define gc_event_on_ready nxhal_event_on_ready
#define gc_event_destroy nxhal_event_destroy
NXHAL_PLUGIN_DECLARE_ENTRIES(gc_)

#endif /* NX_HAL_GRAPHCORE_INTERNAL_H_ */
