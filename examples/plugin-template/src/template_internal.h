/*
 * template_internal.h -- the handles of the template plugin and the calls
 * its source files share. Not installed; nothing here crosses the ABI.
 *
 * The template keeps every "device" in host memory so it runs anywhere. A
 * real backend keeps the same shapes and swaps what is inside them: the
 * client holds the vendor SDK's context, a device wraps the SDK's device, a
 * buffer holds a device allocation, an executable holds what the vendor
 * compiler produced.
 */
#ifndef NXHAL_TEMPLATE_INTERNAL_H_
#define NXHAL_TEMPLATE_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "nx_hal/nx_hal.h"
#include "nx_hal/nx_hal_plugin.h"

#define TEMPLATE_FORMAT "template-elementwise"
#define TEMPLATE_MAX_DEVICES 8
#define TEMPLATE_MAX_RANK 32 /* nxhal_tensor_desc_check allows rank 0..32 */

/* Owned by its client; lives as long as the client. Its memory counters are
 * thread-safe (nxhal_memory_t has its own mutex); the rest is immutable. */
struct nxhal_device {
  nxhal_client_t* client;
  size_t index;
  nxhal_memory_t memory; /* what device_memory_stats reports and the limit caps */
};

/* Owned by the caller of client_create. Immutable after creation. */
struct nxhal_client {
  size_t num_devices;
  nxhal_device_t devices[TEMPLATE_MAX_DEVICES];
};

/* Owned by the caller. Immutable after creation except the bytes in `data`. */
struct nxhal_buffer {
  nxhal_device_t* device;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t dims[TEMPLATE_MAX_RANK];
  uint64_t size_bytes;
  void* data; /* owned; a real backend holds a device allocation here */
};

/* The elementwise operations the template "compiles". */
typedef enum template_op { TEMPLATE_OP_ADD, TEMPLATE_OP_MUL } template_op_t;

/* Owned by the caller. Immutable after creation, so several threads may
 * execute it at once. */
struct nxhal_executable {
  nxhal_device_t* device;
  template_op_t op;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t dims[TEMPLATE_MAX_RANK];
  uint64_t size_bytes; /* of each input and of the output */
  char* text;          /* owned; the program, kept for serialize */
};

/* The compatibility key serialized executables carry (see
 * template_executable.c). Static string. */
extern const char* const template_compat_key;

/* INVALID_ARGUMENT "<what> is NULL" when `ptr` is NULL, else NULL.
 * Caller owns the result. Thread-safe. */
nxhal_status_t* template_check_not_null(const void* ptr, const char* what);

/* A new buffer of `dtype`/`rank`/`dims` (already checked) on `device`, its
 * `size_bytes` counted against the device's memory limit. Caller owns
 * *out_buffer. Thread-safe. */
nxhal_status_t* template_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                      const int64_t* dims, uint64_t size_bytes,
                                      nxhal_buffer_t** out_buffer);

/* The table entries, one per nxhal_api_t field; ownership and thread safety
 * are as nx_hal.h states on that field. */
nxhal_status_t* template_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                       nxhal_buffer_t** out_buffer);
nxhal_status_t* template_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                          const void* data, size_t size_bytes, uint32_t flags,
                                          nxhal_buffer_t** out_buffer);
nxhal_status_t* template_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                        nxhal_event_t** out_event);
nxhal_status_t* template_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out);
void template_buffer_destroy(nxhal_buffer_t* buffer);
nxhal_status_t* template_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                          nxhal_dlpack_managed_tensor_t** out_tensor);
nxhal_status_t* template_buffer_from_dlpack(nxhal_device_t* device,
                                            nxhal_dlpack_managed_tensor_t* tensor,
                                            nxhal_buffer_t** out_buffer);

nxhal_status_t* template_executable_compile(nxhal_device_t* device,
                                            const nxhal_program_t* program,
                                            const nxhal_option_t* options, size_t num_options,
                                            nxhal_executable_t** out_executable);
void template_executable_destroy(nxhal_executable_t* executable);
nxhal_status_t* template_executable_io_count(nxhal_executable_t* executable,
                                             nxhal_io_kind_t kind, size_t* out_count);
nxhal_status_t* template_executable_io_info(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                            size_t index, nxhal_io_info_t* out);
nxhal_status_t* template_executable_execute(nxhal_executable_t* executable,
                                            nxhal_buffer_t* const* inputs, size_t num_inputs,
                                            nxhal_buffer_t** out_outputs, size_t num_outputs,
                                            nxhal_event_t** out_event);
nxhal_status_t* template_executable_serialize(nxhal_executable_t* executable,
                                              nxhal_blob_t** out_blob);
nxhal_status_t* template_executable_deserialize(nxhal_device_t* device, const void* data,
                                                size_t size, const nxhal_option_t* options,
                                                size_t num_options,
                                                nxhal_executable_t** out_executable);
void template_blob_free(nxhal_blob_t* blob);

#endif /* NXHAL_TEMPLATE_INTERNAL_H_ */
