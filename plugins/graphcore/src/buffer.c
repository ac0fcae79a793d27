/* buffer.c -- buffers as host staging memory. Poplar moves data
 * to and from the IPU through a compiled program's streams; these buffers
 * are what those streams read and write at execute. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

nxhal_status_t* nxhal_gc_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                      const int64_t* dims, nxhal_buffer_t** out) {
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t* buffer;
  uint64_t size = 0;
  nxhal_status_t* status;
  desc.struct_size = sizeof(desc);
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  status = nxhal_tensor_desc_check(&desc, "buffer", &size);
  if (status != NULL) return status;
  if (size > (uint64_t)SIZE_MAX) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: buffer of %llu bytes too large",
                             (unsigned long long)size);
  }
  status = nxhal_gc_device_reserve(device, size);
  if (status != NULL) return status;
  buffer = (nxhal_buffer_t*)calloc(1, sizeof(*buffer));
  if (buffer != NULL && rank > 0) {
    buffer->dims = (int64_t*)malloc((size_t)rank * sizeof(int64_t));
    if (buffer->dims != NULL) memcpy(buffer->dims, dims, (size_t)rank * sizeof(int64_t));
  }
  /* malloc(0) may return NULL: allocate at least one byte. */
  if (buffer != NULL) buffer->data = malloc(size > 0 ? (size_t)size : 1);
  if (buffer == NULL || buffer->data == NULL || (rank > 0 && buffer->dims == NULL)) {
    if (buffer != NULL) {
      free(buffer->dims);
      free(buffer->data);
      free(buffer);
    }
    nxhal_gc_device_release(device, size);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED,
                             "graphcore: out of host memory for a %llu-byte staging buffer",
                             (unsigned long long)size);
  }
  buffer->device = device;
  buffer->dtype = dtype;
  buffer->rank = rank;
  buffer->size_bytes = size;
  *out = buffer;
  return NULL;
}

nxhal_status_t* gc_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                 nxhal_buffer_t** out_buffer) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(desc);
  NXHAL_REQUIRE_ARG(out_buffer);
  *out_buffer = NULL;
  /* Not emulated: an uninitialised buffer "on the IPU" would be host memory
   * pretending otherwise. */
  return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                           "graphcore: allocating IPU memory outside a program is not supported: "
                           "Poplar places tensors when it compiles a program; make buffers with "
                           "buffer_from_host (host staging memory bound to a program at execute)");
}

nxhal_status_t* gc_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                    const void* data, size_t size_bytes, uint32_t flags,
                                    nxhal_buffer_t** out_buffer) {
  uint64_t expected = 0;
  nxhal_status_t* status;
  nxhal_buffer_t* buffer;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_buffer);
  *out_buffer = NULL;
  status = nxhal_tensor_desc_check(desc, "desc", &expected);
  if (status != NULL) return status;
  if ((uint64_t)size_bytes != expected) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: size_bytes is %zu but desc describes %llu bytes",
                             size_bytes, (unsigned long long)expected);
  }
  if (size_bytes != 0) NXHAL_REQUIRE_ARG(data);
  if ((flags & ~NXHAL_HOST_ZERO_COPY) != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "graphcore: unknown flags 0x%x",
                             (unsigned)flags);
  }
  if ((flags & NXHAL_HOST_ZERO_COPY) != 0) {
    /* Staging memory is host memory, so aliasing the caller's is exact. */
    buffer = (nxhal_buffer_t*)calloc(1, sizeof(*buffer));
    if (buffer == NULL) {
      return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
    }
    if (desc->rank > 0) {
      buffer->dims = (int64_t*)malloc((size_t)desc->rank * sizeof(int64_t));
      if (buffer->dims == NULL) {
        free(buffer);
        return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
      }
      memcpy(buffer->dims, desc->dims, (size_t)desc->rank * sizeof(int64_t));
    }
    buffer->device = device;
    buffer->dtype = desc->dtype;
    buffer->rank = desc->rank;
    buffer->size_bytes = expected;
    buffer->data = (void*)(uintptr_t)data;
    buffer->zero_copy = 1;
    *out_buffer = buffer;
    return NULL;
  }
  status = nxhal_gc_buffer_alloc(device, desc->dtype, desc->rank, desc->dims, &buffer);
  if (status != NULL) return status;
  if (size_bytes > 0) memcpy(buffer->data, data, size_bytes);
  *out_buffer = buffer;
  return NULL;
}

nxhal_status_t* gc_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                  nxhal_event_t** out_event) {
  NXHAL_REQUIRE_ARG(buffer);
  if (out_event != NULL) *out_event = NULL;
  if ((uint64_t)size_bytes != buffer->size_bytes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: size_bytes is %zu but the buffer holds %llu bytes",
                             size_bytes, (unsigned long long)buffer->size_bytes);
  }
  if (size_bytes != 0) NXHAL_REQUIRE_ARG(dst);
  if (size_bytes > 0) memcpy(dst, buffer->data, size_bytes);
  /* The copy is already done: a completed event, if one was asked for. */
  return nxhal_event_done(out_event);
}

nxhal_status_t* gc_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out) {
  nxhal_buffer_info_t info;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(buffer);
  status = nxhal_check_struct(out, NXHAL_BUFFER_INFO_1_0_SIZE, "buffer info");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.dtype = buffer->dtype;
  info.rank = buffer->rank;
  info.dims = buffer->dims;
  info.size_bytes = buffer->size_bytes;
  info.is_zero_copy = buffer->zero_copy;
  info.device = buffer->device;
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
}

void gc_buffer_destroy(nxhal_buffer_t* buffer) {
  if (buffer == NULL) return;
  if (!buffer->zero_copy) {
    nxhal_gc_device_release(buffer->device, buffer->size_bytes);
    free(buffer->data);
  }
  free(buffer->dims);
  free(buffer);
}

/* A DLPack tensor that owns one allocation: struct, shape and data. */
typedef struct gc_dlpack_block {
  nxhal_dlpack_managed_tensor_t managed;
  int64_t shape[1]; /* `rank` entries follow; data after them */
} gc_dlpack_block_t;

static void gc_dlpack_deleter(nxhal_dlpack_managed_tensor_t* self) {
  free(self);
}

nxhal_status_t* gc_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                    nxhal_dlpack_managed_tensor_t** out_tensor) {
  size_t header;
  size_t rank;
  gc_dlpack_block_t* block;
  nxhal_dlpack_dtype_t dtype;
  NXHAL_REQUIRE_ARG(buffer);
  NXHAL_REQUIRE_ARG(out_tensor);
  *out_tensor = NULL;
  if (!nxhal_dtype_to_dlpack(buffer->dtype, &dtype)) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED, "graphcore: dtype %s has no DLPack code",
                             nxhal_dtype_name(buffer->dtype));
  }
  rank = (size_t)buffer->rank;
  /* A copy: the ABI wants the tensor to outlive the buffer, and a copy of
   * host staging memory costs what an alias with refcounting would save. */
  header = sizeof(gc_dlpack_block_t) + (rank > 0 ? rank - 1 : 0) * sizeof(int64_t);
  header = (header + 63) & ~(size_t)63; /* DLPack consumers expect aligned data */
  block = (gc_dlpack_block_t*)malloc(header + (size_t)buffer->size_bytes + 1);
  if (block == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  memset(&block->managed, 0, sizeof(block->managed));
  if (rank > 0) memcpy(block->shape, buffer->dims, rank * sizeof(int64_t));
  memcpy((char*)block + header, buffer->data, (size_t)buffer->size_bytes);
  block->managed.version.major = NXHAL_DLPACK_MAJOR_VERSION;
  block->managed.version.minor = NXHAL_DLPACK_MINOR_VERSION;
  block->managed.manager_ctx = NULL;
  block->managed.deleter = gc_dlpack_deleter;
  block->managed.flags = 0;
  block->managed.dl_tensor.data = (char*)block + header;
  block->managed.dl_tensor.device.device_type = NXHAL_DLPACK_DEVICE_CPU;
  block->managed.dl_tensor.device.device_id = 0;
  block->managed.dl_tensor.ndim = (int32_t)rank;
  block->managed.dl_tensor.dtype = dtype;
  block->managed.dl_tensor.shape = block->shape;
  block->managed.dl_tensor.strides = NULL;
  block->managed.dl_tensor.byte_offset = 0;
  *out_tensor = &block->managed;
  return NULL;
}

nxhal_status_t* gc_buffer_from_dlpack(nxhal_device_t* device, nxhal_dlpack_managed_tensor_t* tensor,
                                      nxhal_buffer_t** out_buffer) {
  nxhal_dlpack_layout_t layout;
  nxhal_buffer_t* buffer;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(tensor);
  NXHAL_REQUIRE_ARG(out_buffer);
  *out_buffer = NULL;
  /* Staging is one memcpy, so only compact row-major tensors are taken. */
  status = nxhal_dlpack_check(tensor, 0, "graphcore: DLPack tensor", &layout);
  if (status != NULL) return status;
  status = nxhal_gc_buffer_alloc(device, layout.dtype, layout.rank, layout.dims, &buffer);
  if (status != NULL) return status;
  if (layout.size_bytes > 0) memcpy(buffer->data, layout.data, (size_t)layout.size_bytes);
  /* The buffer owns the tensor now; having copied it, it is done with it. */
  if (tensor->deleter != NULL) tensor->deleter(tensor);
  *out_buffer = buffer;
  return NULL;
}
