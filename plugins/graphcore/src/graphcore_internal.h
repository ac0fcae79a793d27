/*
 * graphcore_internal.h -- the objects behind the opaque handles of the
 * Graphcore plugin, shared by its C files. Not installed.
 */
#ifndef NX_HAL_GRAPHCORE_INTERNAL_H_
#define NX_HAL_GRAPHCORE_INTERNAL_H_

#include <pthread.h>

#include "graphcore_backend.h"
#include "nx_hal/nx_hal_plugin.h"

/* Free-form device attributes: num_ipus, tiles_per_ipu, bytes_per_tile,
 * arch, device_id, ipu_model, compile_only, precision. */
#define NXHAL_GC_NUM_ATTRIBUTES 8

/* One device of a client. Owned by the client; lives as long as it. */
struct nxhal_device {
  nxhal_client_t* client;
  size_t index;                          /* index in the backend client */
  nxhal_graphcore_device_desc_t desc;    /* strings owned by the backend client */
  const char* formats[2];
  nxhal_attribute_t attributes[NXHAL_GC_NUM_ATTRIBUTES];
  nxhal_memory_t memory;                 /* host staging memory of live buffers, and the limit */
};

/* A client: the backend's client plus our device objects. Caller-owned. */
struct nxhal_client {
  const nxhal_graphcore_backend_t* backend;
  nxhal_graphcore_bclient_t* bclient;
  nxhal_graphcore_config_t config;
  char* diagnostics;                     /* owned */
  size_t num_devices;
  struct nxhal_device* devices;          /* owned array */
};

/* A buffer is host staging memory, bound to a program's inputs and outputs
 * when it executes: Poplar streams data to and from the IPU itself, and has
 * no API to allocate IPU memory outside a compiled program. */
struct nxhal_buffer {
  nxhal_device_t* device;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t* dims;       /* owned; NULL when rank is 0 */
  uint64_t size_bytes;
  void* data;          /* owned unless zero_copy */
  int zero_copy;       /* 1: data is the caller's memory */
};

/* An executable: the backend's, with the device it was compiled for. */
struct nxhal_executable {
  nxhal_device_t* device;
  nxhal_graphcore_bexe_t* bexe; /* owned */
};

/* INVALID_ARGUMENT naming `what` when `ptr` is NULL. */
#define NXHAL_GC_REQUIRE(ptr, what)                                               \
  do {                                                                            \
    if ((ptr) == NULL)                                                            \
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "graphcore: %s is NULL", what); \
  } while (0)

/* Copies the first min(out->struct_size, size) bytes of `filled` to `out`,
 * keeping out->struct_size: older callers get the fields they know. */
void nxhal_gc_fill_out(void* out, const void* filled, size_t size);

/* Reserves `bytes` of the device's staging memory (RESOURCE_EXHAUSTED past
 * its limit) or releases them (reserve 0). Thread-safe. */
nxhal_status_t* nxhal_gc_device_reserve(nxhal_device_t* device, uint64_t bytes);
void nxhal_gc_device_release(nxhal_device_t* device, uint64_t bytes);

/* Makes an owned buffer of `desc`'s shape with uninitialised staging memory.
 * Caller owns *out. Thread-safe. */
nxhal_status_t* nxhal_gc_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                      const int64_t* dims, nxhal_buffer_t** out);

/* A completed event carrying `status` (taken), or NULL on out of memory
 * (then `status` is freed). */
nxhal_event_t* nxhal_gc_completed_event(nxhal_status_t* status);

/* The table entries, split by file: graphcore_buffer.c and
 * graphcore_executable.c. Semantics as in nx_hal.h. */
nxhal_status_t* nxhal_gc_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                       nxhal_buffer_t** out_buffer);
nxhal_status_t* nxhal_gc_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                          const void* data, size_t size_bytes, uint32_t flags,
                                          nxhal_buffer_t** out_buffer);
nxhal_status_t* nxhal_gc_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                        nxhal_event_t** out_event);
nxhal_status_t* nxhal_gc_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out);
void nxhal_gc_buffer_destroy(nxhal_buffer_t* buffer);
nxhal_status_t* nxhal_gc_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                          nxhal_dlpack_managed_tensor_t** out_tensor);
nxhal_status_t* nxhal_gc_buffer_from_dlpack(nxhal_device_t* device,
                                            nxhal_dlpack_managed_tensor_t* tensor,
                                            nxhal_buffer_t** out_buffer);

nxhal_status_t* nxhal_gc_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                            const nxhal_option_t* options, size_t num_options,
                                            nxhal_executable_t** out_executable);
void nxhal_gc_executable_destroy(nxhal_executable_t* executable);
nxhal_status_t* nxhal_gc_executable_io_count(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                             size_t* out_count);
nxhal_status_t* nxhal_gc_executable_io_info(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                            size_t index, nxhal_io_info_t* out);
nxhal_status_t* nxhal_gc_executable_execute(nxhal_executable_t* executable,
                                            nxhal_buffer_t* const* inputs, size_t num_inputs,
                                            nxhal_buffer_t** out_outputs, size_t num_outputs,
                                            nxhal_event_t** out_event);
nxhal_status_t* nxhal_gc_executable_serialize(nxhal_executable_t* executable,
                                              nxhal_blob_t** out_blob);
nxhal_status_t* nxhal_gc_executable_deserialize(nxhal_device_t* device, const void* data,
                                                size_t size, const nxhal_option_t* options,
                                                size_t num_options,
                                                nxhal_executable_t** out_executable);
void nxhal_gc_blob_free(nxhal_blob_t* blob);

#endif /* NX_HAL_GRAPHCORE_INTERNAL_H_ */
