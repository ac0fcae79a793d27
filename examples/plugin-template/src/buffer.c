/*
 * buffer.c -- buffers of the nx_hal plugin template: host memory
 * standing in for device memory.
 *
 * A real backend allocates on its device where this file calls malloc, and
 * turns the memcpy calls into its SDK's host-to-device and device-to-host
 * transfers. The argument checks stay as they are.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

nxhal_status_t* template_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                      const int64_t* dims, uint64_t size_bytes,
                                      nxhal_buffer_t** out_buffer) {
  nxhal_buffer_t* buffer;
  /* Counted first: past the device's limit nothing is allocated. */
  nxhal_status_t* status = nxhal_memory_reserve(&device->memory, size_bytes, "buffer");
  if (status != NULL) return status;
  buffer = (nxhal_buffer_t*)calloc(1, sizeof(*buffer));
  /* A real backend allocates device memory here. size 0 still gets a block,
   * so that data is never NULL. */
  if (buffer != NULL) buffer->data = malloc(size_bytes > 0 ? (size_t)size_bytes : 1);
  if (buffer == NULL || buffer->data == NULL) {
    free(buffer);
    nxhal_memory_release(&device->memory, size_bytes);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "cannot allocate %llu bytes",
                             (unsigned long long)size_bytes);
  }
  buffer->device = device;
  buffer->dtype = dtype;
  buffer->rank = rank;
  if (rank > 0) memcpy(buffer->dims, dims, (size_t)rank * sizeof(*dims));
  buffer->size_bytes = size_bytes;
  *out_buffer = buffer;
  return NULL;
}

nxhal_status_t* template_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                       nxhal_buffer_t** out_buffer) {
  uint64_t size_bytes = 0;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_buffer);
  /* Struct size, dtype, rank, dims and overflow, in one helper. */
  status = nxhal_tensor_desc_check(desc, "buffer desc", &size_bytes);
  if (status != NULL) return status;
  return template_buffer_alloc(device, desc->dtype, desc->rank, desc->dims, size_bytes, out_buffer);
}

nxhal_status_t* template_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                          const void* data, size_t size_bytes, uint32_t flags,
                                          nxhal_buffer_t** out_buffer) {
  uint64_t expected = 0;
  nxhal_buffer_t* buffer;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_buffer);
  status = nxhal_tensor_desc_check(desc, "buffer desc", &expected);
  if (status != NULL) return status;
  if ((flags & ~NXHAL_HOST_ZERO_COPY) != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "unknown flags 0x%x", (unsigned)flags);
  }
  if (size_bytes != expected) {
    return nxhal_status_make(
        NXHAL_INVALID_ARGUMENT, "size_bytes is %zu but a %s tensor of that shape holds %llu bytes",
        size_bytes, nxhal_dtype_name(desc->dtype), (unsigned long long)expected);
  }
  if (size_bytes > 0) NXHAL_REQUIRE_ARG(data);
  /* NXHAL_HOST_ZERO_COPY is a request, not a promise: like most devices the
   * template cannot address the caller's memory, so it copies and
   * buffer_info reports is_zero_copy = 0. A device that can alias host
   * memory keeps `data` here instead (the caller keeps it alive). */
  status = template_buffer_alloc(device, desc->dtype, desc->rank, desc->dims, expected, &buffer);
  if (status != NULL) return status;
  /* A real backend starts its host-to-device transfer here, and returns
   * only once `data` may be reused (the entry's contract). */
  if (size_bytes > 0) memcpy(buffer->data, data, size_bytes);
  *out_buffer = buffer;
  return NULL;
}

nxhal_status_t* template_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                        nxhal_event_t** out_event) {
  NXHAL_REQUIRE_ARG(buffer);
  if (size_bytes != buffer->size_bytes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "size_bytes is %zu but the buffer holds %llu bytes", size_bytes,
                             (unsigned long long)buffer->size_bytes);
  }
  if (size_bytes > 0) NXHAL_REQUIRE_ARG(dst);
  /* A real backend enqueues a device-to-host transfer and, when the caller
   * asked for an event, returns at once and calls nxhal_event_complete from
   * the transfer's completion callback. The template copies now and hands
   * back an event that is already complete, which the contract allows. */
  if (size_bytes > 0) memcpy(dst, buffer->data, size_bytes);
  return nxhal_event_done(out_event);
}

nxhal_status_t* template_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(buffer);
  status = nxhal_check_struct(out, NXHAL_BUFFER_INFO_1_0_SIZE, "buffer info");
  if (status != NULL) return status;
  out->dtype = buffer->dtype;
  out->rank = buffer->rank;
  out->dims = buffer->dims;
  out->size_bytes = buffer->size_bytes;
  out->is_zero_copy = 0;
  out->device = buffer->device;
  return NULL;
}

void template_buffer_destroy(nxhal_buffer_t* buffer) {
  if (buffer == NULL) return;
  free(buffer->data); /* A real backend frees its device allocation. */
  nxhal_memory_release(&buffer->device->memory, buffer->size_bytes);
  free(buffer);
}

/* DLPack needs memory the host can address. Most accelerators' cannot, and
 * UNIMPLEMENTED is the honest answer there: nx_hal's Python DLPack path then
 * goes through a host copy. A backend whose device memory the CPU (or a
 * DLPack consumer on the device) can read fills a
 * nxhal_dlpack_managed_tensor_t here instead. */
nxhal_status_t* template_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                          nxhal_dlpack_managed_tensor_t** out_tensor) {
  (void)buffer;
  (void)out_tensor;
  return nxhal_status_make(NXHAL_UNIMPLEMENTED, "template: DLPack export is not supported");
}

nxhal_status_t* template_buffer_from_dlpack(nxhal_device_t* device,
                                            nxhal_dlpack_managed_tensor_t* tensor,
                                            nxhal_buffer_t** out_buffer) {
  (void)device;
  (void)tensor;
  (void)out_buffer;
  return nxhal_status_make(NXHAL_UNIMPLEMENTED, "template: DLPack import is not supported");
}
