/* buffer.c -- device buffers over PJRT buffers: host transfers, zero-copy on
 * CPU devices, DLPack both ways, and the memory accounting behind the
 * per-device limit. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Minimum alignment XLA CPU needs to alias host memory instead of copying
 * (measured: the XLA CPU PJRT plugin here copies 16-byte aligned memory, as
 * numpy's allocator gives, even when asked for kImmutableZeroCopy). */
#define TPU_ZERO_COPY_ALIGN 64u

/* --- accounting ---------------------------------------------------------- */

nxhal_status_t* tpu_device_memory_stats(nxhal_device_t* device, nxhal_memory_stats_t* out) {
  nxhal_memory_stats_t stats;
  nxhal_status_t* status;
  const PJRT_Api* api;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_MEMORY_STATS_1_0_SIZE, "memory_stats output");
  if (status != NULL) return status;
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  nxhal_memory_stats(&device->memory, &stats);
  /* The allocator's own numbers, where the backend has them (GPU, TPU), see
   * memory our accounting cannot (scratch, executables). */
  api = device->backend->api;
  if (TPU_HAS_FN(api, PJRT_Device_MemoryStats)) {
    PJRT_Device_MemoryStats_Args margs;
    PJRT_Error* error;
    memset(&margs, 0, sizeof(margs));
    margs.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
    margs.device = device->pjrt;
    error = api->PJRT_Device_MemoryStats(&margs);
    if (error == NULL) {
      if (margs.bytes_in_use > 0) stats.bytes_in_use = (uint64_t)margs.bytes_in_use;
      if (margs.peak_bytes_in_use_is_set && margs.peak_bytes_in_use > 0) {
        stats.peak_bytes_in_use = (uint64_t)margs.peak_bytes_in_use;
      }
    } else {
      free(tpu_take_error_message(api, error));
    }
  }
  nxhal_struct_fill(out, &stats, sizeof(stats));
  return NULL;
}

nxhal_status_t* tpu_device_set_memory_limit(nxhal_device_t* device, uint64_t limit_bytes) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_memory_set_limit(&device->memory, limit_bytes);
  return NULL;
}

/* --- storage ------------------------------------------------------------- */

static tpu_storage_t* tpu_storage_new(const PJRT_Api* api, PJRT_Buffer* buffer,
                                      nxhal_memory_t* memory, uint64_t accounted) {
  tpu_storage_t* s = (tpu_storage_t*)calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->refcount = 1;
  s->api = api;
  s->buffer = buffer;
  s->memory = memory;
  s->accounted = accounted;
  return s;
}

void tpu_pjrt_buffer_destroy(const PJRT_Api* api, PJRT_Buffer* buffer) {
  PJRT_Buffer_Destroy_Args args;
  if (buffer == NULL) return;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = buffer;
  free(tpu_take_error_message(api, api->PJRT_Buffer_Destroy(&args)));
}

static void tpu_storage_retain(tpu_storage_t* s) {
  __atomic_add_fetch(&s->refcount, 1, __ATOMIC_RELAXED);
}

static void tpu_storage_release(tpu_storage_t* s) {
  if (s == NULL || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  tpu_pjrt_buffer_destroy(s->api, s->buffer);
  /* Fires now that PJRT dropped its alias of the caller's host memory. */
  if (s->staged != NULL) {
    /* The block may be reused once PJRT is done with it: after any run
     * still reading it. If that cannot be known, it is leaked, never
     * handed out while PJRT may read it. */
    nxhal_status_t* status = tpu_event_await_destroy(s->api, s->host_done, "staged input");
    s->host_done = NULL;
    if (status == NULL)
      tpu_staging_give(s->staging, s->staged, s->staged_size);
    else
      nxhal_status_free(status);
  }
  if (s->host_done != NULL) tpu_pjrt_event_destroy(s->api, s->host_done);
  if (s->imported != NULL && s->imported->deleter != NULL) s->imported->deleter(s->imported);
  tpu_storage_forget_memory(s);
  free(s);
}

void tpu_storage_forget_memory(tpu_storage_t* storage) {
  uint64_t accounted = __atomic_exchange_n(&storage->accounted, 0, __ATOMIC_ACQ_REL);
  if (storage->memory != NULL && accounted > 0) nxhal_memory_release(storage->memory, accounted);
}

/* The buffer holds one reference; each zero-copy DLPack export holds one
 * more (tpu_dlpack_zero_copy), so a count above one is a live export. */
int tpu_storage_exposed(tpu_storage_t* storage) {
  return storage->host_done != NULL || storage->imported != NULL ||
         __atomic_load_n(&storage->refcount, __ATOMIC_ACQUIRE) > 1;
}

/* PJRT's own words for a donated buffer ("GetReadyFuture() called on
 * deleted or donated buffer") say neither which call took it nor what to use
 * instead. Called on an error path only: a check on every call would cost
 * the read path a PJRT call. */
int tpu_buffer_is_gone(const nxhal_buffer_t* buffer) {
  const PJRT_Api* api = buffer->storage->api;
  PJRT_Buffer_IsDeleted_Args args;
  PJRT_Error* error;
  if (!TPU_HAS_FN(api, PJRT_Buffer_IsDeleted)) return 0;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE;
  args.buffer = buffer->storage->buffer;
  error = api->PJRT_Buffer_IsDeleted(&args);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return 0;
  }
  return args.is_deleted;
}

nxhal_status_t* tpu_buffer_explain_gone(const nxhal_buffer_t* buffer, nxhal_status_t* status,
                                        const char* what) {
  if (status == NULL || !tpu_buffer_is_gone(buffer)) return status;
  nxhal_status_free(status);
  return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                           "%s: the buffer was donated to an earlier execute (a program's "
                           "donated input: its memory now holds that call's output, which is "
                           "the value to use) or deleted",
                           what);
}

/* --- buffers ------------------------------------------------------------- */

nxhal_status_t* tpu_buffer_wrap(nxhal_device_t* device, PJRT_Buffer* pjrt, uint64_t accounted,
                                nxhal_dtype_t dtype, int64_t rank, const int64_t* dims,
                                nxhal_buffer_t** out_buffer) {
  const PJRT_Api* api = device->backend->api;
  PJRT_Buffer_Dimensions_Args dargs;
  PJRT_Error* error;
  nxhal_buffer_t* b;
  uint64_t size;
  int64_t i;
  /* Shape unknown to the caller: ask PJRT (two calls; execute avoids them). */
  if (dtype == NXHAL_DTYPE_INVALID || rank < 0) {
    PJRT_Buffer_ElementType_Args targs;
    memset(&targs, 0, sizeof(targs));
    targs.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
    targs.buffer = pjrt;
    error = api->PJRT_Buffer_ElementType(&targs);
    if (error == NULL) {
      memset(&dargs, 0, sizeof(dargs));
      dargs.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
      dargs.buffer = pjrt;
      error = api->PJRT_Buffer_Dimensions(&dargs);
    }
    if (error != NULL) {
      tpu_pjrt_buffer_destroy(api, pjrt);
      nxhal_memory_release(&device->memory, accounted);
      return tpu_status_from_pjrt(api, error, NXHAL_OK, "reading a PJRT buffer's shape");
    }
    dtype = tpu_dtype_from_pjrt(targs.type);
    rank = (int64_t)dargs.num_dims;
    dims = dargs.dims;
  }
  size = nxhal_dtype_size(dtype);
  for (i = 0; i < rank; ++i) size *= (uint64_t)dims[i];
  if (accounted == 0 && size > 0) {
    /* The caller could not know the size (an old PJRT without output
     * shapes): count it now, past any limit rather than lose the buffer. */
    nxhal_memory_charge(&device->memory, size);
    accounted = size;
  }
  /* The buffer and its dims in one allocation. */
  b = (nxhal_buffer_t*)calloc(1, sizeof(*b) + sizeof(int64_t) * (size_t)rank);
  if (b != NULL) b->storage = tpu_storage_new(api, pjrt, &device->memory, accounted);
  if (b == NULL || b->storage == NULL) {
    free(b);
    tpu_pjrt_buffer_destroy(api, pjrt);
    nxhal_memory_release(&device->memory, accounted);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory wrapping a buffer");
  }
  b->device = device;
  b->dtype = dtype;
  b->rank = rank;
  b->dims = (int64_t*)(b + 1);
  for (i = 0; i < rank; ++i) b->dims[i] = dims[i];
  b->size_bytes = size;
  *out_buffer = b;
  return NULL;
}

/* Copies (or on CPU with zero_copy, aliases) host data into a new buffer.
 * `byte_strides` may be NULL (dense row-major). */
static nxhal_status_t* tpu_buffer_from_host_impl(nxhal_device_t* device,
                                                 const nxhal_tensor_desc_t* desc, const void* data,
                                                 const int64_t* byte_strides, int zero_copy,
                                                 nxhal_buffer_t** out_buffer) {
  const PJRT_Api* api = device->backend->api;
  PJRT_Client_BufferFromHostBuffer_Args args;
  PJRT_Error* error;
  nxhal_status_t* status;
  uint64_t size;
  nxhal_buffer_t* buffer = NULL;
  status = nxhal_tensor_desc_check(desc, "buffer", &size);
  if (status != NULL) return status;
  if (tpu_dtype_to_pjrt(desc->dtype) == PJRT_Buffer_Type_INVALID) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "dtype %s is not supported by PJRT here",
                             nxhal_dtype_name(desc->dtype));
  }
  status = nxhal_memory_reserve(&device->memory, size, "buffer");
  if (status != NULL) return status;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = device->backend->client;
  args.data = data;
  args.type = tpu_dtype_to_pjrt(desc->dtype);
  args.dims = desc->dims;
  args.num_dims = (size_t)desc->rank;
  args.byte_strides = byte_strides;
  args.num_byte_strides = byte_strides ? (size_t)desc->rank : 0;
  args.host_buffer_semantics = zero_copy ? PJRT_HostBufferSemantics_kImmutableZeroCopy
                                         : PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  args.device = device->pjrt;
  error = api->PJRT_Client_BufferFromHostBuffer(&args);
  if (error != NULL) {
    nxhal_memory_release(&device->memory, size);
    return tpu_status_from_pjrt(api, error, NXHAL_OK, "PJRT_Client_BufferFromHostBuffer");
  }
  if (!zero_copy) {
    /* The contract says the copy is complete on return. With
     * kImmutableOnlyDuringCall PJRT copies inside the call, so this event is
     * already ready and awaiting it costs ~0.1 us (measured on XLA CPU), no
     * thread hand-off: nothing to gain from checking PJRT_Event_IsReady. */
    status = tpu_event_await_destroy(api, args.done_with_host_buffer, "host-to-device copy");
    args.done_with_host_buffer = NULL;
    if (status != NULL) {
      tpu_pjrt_buffer_destroy(api, args.buffer);
      nxhal_memory_release(&device->memory, size);
      return status;
    }
  }
  status = tpu_buffer_wrap(device, args.buffer, size, desc->dtype, desc->rank, desc->dims, &buffer);
  if (status != NULL) {
    tpu_pjrt_event_destroy(api, args.done_with_host_buffer);
    return status;
  }
  /* Zero-copy: this event fires when PJRT lets go of the host memory, i.e.
   * when the buffer is destroyed; it is destroyed with the storage. */
  buffer->storage->host_done = args.done_with_host_buffer;
  if (zero_copy && TPU_HAS_FN(api, PJRT_Buffer_UnsafePointer)) {
    PJRT_Buffer_UnsafePointer_Args pargs;
    memset(&pargs, 0, sizeof(pargs));
    pargs.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
    pargs.buffer = args.buffer;
    error = api->PJRT_Buffer_UnsafePointer(&pargs);
    if (error == NULL)
      buffer->is_zero_copy = pargs.buffer_pointer == (uintptr_t)data;
    else
      free(tpu_take_error_message(api, error));
  }
  *out_buffer = buffer;
  return NULL;
}

/* A misaligned zero-copy input on a CPU device: copied into a block of the
 * device's staging pool (staging.c), which PJRT aliases. The buffer is not
 * zero-copy to the caller (their memory is free to change at once). */
static nxhal_status_t* tpu_buffer_from_host_staged(nxhal_device_t* device,
                                                   const nxhal_tensor_desc_t* desc,
                                                   const void* data, uint64_t size,
                                                   nxhal_buffer_t** out_buffer) {
  nxhal_status_t* status;
  tpu_storage_t* storage;
  void* block = tpu_staging_take(&device->staging, (size_t)size);
  if (block == NULL) return tpu_buffer_from_host_impl(device, desc, data, NULL, 0, out_buffer);
  memcpy(block, data, (size_t)size);
  status = tpu_buffer_from_host_impl(device, desc, block, NULL, 1, out_buffer);
  if (status != NULL) {
    tpu_staging_give(&device->staging, block, (size_t)size);
    return status;
  }
  storage = (*out_buffer)->storage;
  storage->staging = &device->staging;
  storage->staged = block;
  storage->staged_size = (size_t)size;
  (*out_buffer)->is_zero_copy = 0;
  return NULL;
}

nxhal_status_t* tpu_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                     const void* data, size_t size_bytes, uint32_t flags,
                                     nxhal_buffer_t** out_buffer) {
  nxhal_status_t* status;
  uint64_t size;
  int zero_copy;
  if (device == NULL || out_buffer == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "buffer_from_host: NULL device or out_buffer");
  }
  *out_buffer = NULL;
  status = nxhal_tensor_desc_check(desc, "buffer", &size);
  if (status != NULL) return status;
  if (size != size_bytes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "buffer_from_host: %zu bytes given, the description needs %llu",
                             size_bytes, (unsigned long long)size);
  }
  if (size > 0) NXHAL_REQUIRE_ARG(data);
  if ((flags & ~NXHAL_HOST_ZERO_COPY) != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "buffer_from_host: unknown flags 0x%x",
                             (unsigned)flags);
  }
  /* Only CPU devices can alias host memory, and XLA CPU only aligned
   * memory; otherwise copy (buffer_info's is_zero_copy tells). */
  zero_copy = (flags & NXHAL_HOST_ZERO_COPY) && device->is_cpu;
  if (zero_copy && ((uintptr_t)data % TPU_ZERO_COPY_ALIGN) != 0) {
    if (size >= TPU_STAGING_MIN_BYTES)
      return tpu_buffer_from_host_staged(device, desc, data, size, out_buffer);
    zero_copy = 0;
  }
  return tpu_buffer_from_host_impl(device, desc, data, NULL, zero_copy, out_buffer);
}

nxhal_status_t* tpu_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                  nxhal_buffer_t** out_buffer) {
  nxhal_status_t* status;
  uint64_t size;
  void* zeros;
  if (device == NULL || out_buffer == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "buffer_create: NULL device or out_buffer");
  }
  *out_buffer = NULL;
  status = nxhal_tensor_desc_check(desc, "buffer", &size);
  if (status != NULL) return status;
  /* Zero-filled through the host: works on every PJRT version, while
   * PJRT_Client_CreateUninitializedBuffer is recent. */
  zeros = calloc(1, size ? (size_t)size : 1);
  if (zeros == NULL) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of host memory staging %llu bytes",
                             (unsigned long long)size);
  }
  status = tpu_buffer_from_host_impl(device, desc, zeros, NULL, 0, out_buffer);
  free(zeros);
  return status;
}

/* Whether the buffer's bytes are dense row-major, the order `dst` wants.
 * Without PJRT_Buffer_GetMemoryLayout only rank <= 1 is known to be. */
static int tpu_buffer_is_dense(nxhal_buffer_t* buffer) {
  const PJRT_Api* api = buffer->storage->api;
  PJRT_Buffer_GetMemoryLayout_Args largs;
  PJRT_Error* error;
  int64_t i, rank = buffer->rank;
  if (!TPU_HAS_FN(api, PJRT_Buffer_GetMemoryLayout)) return rank <= 1;
  memset(&largs, 0, sizeof(largs));
  largs.struct_size = PJRT_Buffer_GetMemoryLayout_Args_STRUCT_SIZE;
  largs.buffer = buffer->storage->buffer;
  error = api->PJRT_Buffer_GetMemoryLayout(&largs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return 0;
  }
  if (largs.layout.type == PJRT_Buffer_MemoryLayout_Type_Tiled) {
    const PJRT_Buffer_MemoryLayout_Tiled* t = &largs.layout.tiled;
    if (t->num_tiles != 0 || t->minor_to_major_size != (size_t)rank) return 0;
    for (i = 0; i < rank; ++i) {
      if (t->minor_to_major[i] != rank - 1 - i) return 0;
    }
    return 1;
  }
  if (largs.layout.type == PJRT_Buffer_MemoryLayout_Type_Strides) {
    const PJRT_Buffer_MemoryLayout_Strides* st = &largs.layout.strides;
    int64_t expect = (int64_t)nxhal_dtype_size(buffer->dtype);
    if (st->num_byte_strides != (size_t)rank) return 0;
    for (i = rank - 1; i >= 0; --i) {
      if (buffer->dims[i] != 1 && st->byte_strides[i] != expect) return 0;
      expect *= buffer->dims[i];
    }
    return 1;
  }
  return 0;
}

/* CPU devices: a buffer's bytes are host memory, so once its ready event has
 * fired they are read with one memcpy on the calling thread. Measured on
 * XLA CPU, PJRT_Buffer_ToHostBuffer hands even a 16-byte copy to a worker
 * thread and the wait for it costs ~30-40 us; this path costs ~1 us. With
 * `wait` 0 a buffer still being computed is left to the general path.
 * Returns 1 when done (dst filled, or *status holds the buffer's error), 0
 * when the caller must use PJRT_Buffer_ToHostBuffer. */
static int tpu_buffer_read_direct(nxhal_buffer_t* buffer, void* dst, size_t size_bytes, int wait,
                                  nxhal_status_t** status) {
  const PJRT_Api* api = buffer->storage->api;
  PJRT_Buffer_ReadyEvent_Args rargs;
  PJRT_Buffer_UnsafePointer_Args pargs;
  PJRT_Error* error;
  *status = NULL;
  /* struct_size guards every entry newer than the oldest PJRT we load. */
  if (!buffer->device->is_cpu || !TPU_HAS_FN(api, PJRT_Buffer_UnsafePointer) ||
      !TPU_HAS_FN(api, PJRT_Buffer_ReadyEvent) || (!wait && !TPU_HAS_FN(api, PJRT_Event_IsReady)) ||
      !tpu_buffer_is_dense(buffer)) {
    return 0;
  }
  memset(&rargs, 0, sizeof(rargs));
  rargs.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  rargs.buffer = buffer->storage->buffer;
  error = api->PJRT_Buffer_ReadyEvent(&rargs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error)); /* the general path reports it */
    return 0;
  }
  if (!wait && rargs.event != NULL) {
    PJRT_Event_IsReady_Args iargs;
    memset(&iargs, 0, sizeof(iargs));
    iargs.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
    iargs.event = rargs.event;
    error = api->PJRT_Event_IsReady(&iargs);
    if (error != NULL || !iargs.is_ready) {
      free(tpu_take_error_message(api, error));
      tpu_pjrt_event_destroy(api, rargs.event);
      return 0;
    }
  }
  /* Ready: a failed computation's error comes back here, as ToHostBuffer
   * would report it; a ready event costs no thread hand-off to await. */
  *status = tpu_event_await_destroy(api, rargs.event, "device-to-host copy");
  if (*status != NULL || size_bytes == 0) return 1;
  memset(&pargs, 0, sizeof(pargs));
  pargs.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
  pargs.buffer = buffer->storage->buffer;
  error = api->PJRT_Buffer_UnsafePointer(&pargs);
  if (error != NULL || pargs.buffer_pointer == 0) {
    free(tpu_take_error_message(api, error));
    return 0;
  }
  /* The storage (held by `buffer`) keeps the PJRT buffer alive meanwhile. */
  memcpy(dst, (const void*)pargs.buffer_pointer, size_bytes);
  return 1;
}

/* Synchronous or evented copy to host. */
nxhal_status_t* tpu_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                   nxhal_event_t** out_event) {
  const PJRT_Api* api;
  PJRT_Buffer_ToHostBuffer_Args args;
  PJRT_Error* error;
  nxhal_status_t* status;
  if (out_event != NULL) *out_event = NULL;
  NXHAL_REQUIRE_ARG(buffer);
  if (size_bytes != buffer->size_bytes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "buffer_to_host: %zu bytes given, the buffer holds %llu", size_bytes,
                             (unsigned long long)buffer->size_bytes);
  }
  if (size_bytes > 0) NXHAL_REQUIRE_ARG(dst);
  if (tpu_buffer_read_direct(buffer, dst, size_bytes, out_event == NULL, &status)) {
    if (out_event == NULL) return tpu_buffer_explain_gone(buffer, status, "buffer_to_host");
    /* Done already: the event is born complete, carrying any error. */
    return nxhal_event_done_with(out_event, status);
  }
  api = buffer->storage->api;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = buffer->storage->buffer;
  args.dst = dst;
  args.dst_size = size_bytes;
  error = api->PJRT_Buffer_ToHostBuffer(&args);
  if (error != NULL) {
    return tpu_buffer_explain_gone(
        buffer, tpu_status_from_pjrt(api, error, NXHAL_OK, "PJRT_Buffer_ToHostBuffer"),
        "buffer_to_host");
  }
  if (out_event == NULL) {
    return tpu_buffer_explain_gone(
        buffer, tpu_event_await_destroy(api, args.event, "device-to-host copy"), "buffer_to_host");
  }
  if (args.event == NULL) return nxhal_event_done(out_event);
  return tpu_event_bridge(api, args.event, NULL, NULL, out_event);
}

nxhal_status_t* tpu_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out) {
  nxhal_buffer_info_t info;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(buffer);
  status = nxhal_check_struct(out, NXHAL_BUFFER_INFO_1_0_SIZE, "buffer_info output");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.dtype = buffer->dtype;
  info.rank = buffer->rank;
  info.dims = buffer->dims;
  info.size_bytes = buffer->size_bytes;
  info.is_zero_copy = buffer->is_zero_copy;
  info.device = buffer->device;
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
}

void tpu_buffer_destroy(nxhal_buffer_t* buffer) {
  if (buffer == NULL) return;
  tpu_storage_release(buffer->storage);
  free(buffer); /* dims share its allocation */
}

/* --- DLPack -------------------------------------------------------------- */

/* An exported tensor and what keeps its memory alive. */
typedef struct tpu_dlpack_export {
  nxhal_dlpack_managed_tensor_t tensor;
  tpu_storage_t* storage; /* zero-copy: the PJRT buffer; NULL for a copy */
  nxhal_client_t* client; /* zero-copy: a reference keeping the PJRT client
                             (and the storage's device) past client_destroy */
  void* copy;             /* copy: the host bytes */
  int64_t shape[1];       /* rank entries follow */
} tpu_dlpack_export_t;

static void tpu_dlpack_export_delete(nxhal_dlpack_managed_tensor_t* self) {
  tpu_dlpack_export_t* e = (tpu_dlpack_export_t*)self->manager_ctx;
  if (e == NULL) return;
  /* The PJRT buffer first: PJRT must not see it outlive its client. */
  if (e->storage != NULL) tpu_storage_release(e->storage);
  tpu_client_release(e->client);
  free(e->copy);
  free(e);
}

/* A new export of `buffer`'s shape and dtype, its data not yet set; NULL on
 * OOM. */
static tpu_dlpack_export_t* tpu_dlpack_export_new(const nxhal_buffer_t* buffer,
                                                  nxhal_dlpack_dtype_t dl_dtype) {
  size_t rank = (size_t)buffer->rank;
  tpu_dlpack_export_t* e = (tpu_dlpack_export_t*)calloc(1, sizeof(*e) + sizeof(int64_t) * rank);
  if (e == NULL) return NULL;
  memcpy(e->shape, buffer->dims, sizeof(int64_t) * rank);
  e->tensor.version.major = NXHAL_DLPACK_MAJOR_VERSION;
  e->tensor.version.minor = NXHAL_DLPACK_MINOR_VERSION;
  e->tensor.manager_ctx = e;
  e->tensor.deleter = tpu_dlpack_export_delete;
  e->tensor.dl_tensor.device.device_type = NXHAL_DLPACK_DEVICE_CPU;
  e->tensor.dl_tensor.ndim = (int32_t)rank;
  e->tensor.dl_tensor.dtype = dl_dtype;
  e->tensor.dl_tensor.shape = e->shape;
  return e;
}

/* Waits until the buffer's contents are written (when the table can say),
 * so a zero-copy consumer reads finished data. */
static nxhal_status_t* tpu_buffer_await_ready(const PJRT_Api* api, PJRT_Buffer* buffer) {
  PJRT_Buffer_ReadyEvent_Args rargs;
  PJRT_Error* error;
  if (!TPU_HAS_FN(api, PJRT_Buffer_ReadyEvent)) return NULL;
  memset(&rargs, 0, sizeof(rargs));
  rargs.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  rargs.buffer = buffer;
  error = api->PJRT_Buffer_ReadyEvent(&rargs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return NULL;
  }
  return tpu_event_await_destroy(api, rargs.event, "buffer ready");
}

/* XLA CPU buffers are host memory: points the export at the PJRT buffer,
 * kept alive through the storage's reference count, once it is written.
 * *out_done is 0 when PJRT gives no pointer or the layout is not dense
 * row-major, and the caller falls back to a copy. */
static nxhal_status_t* tpu_dlpack_zero_copy(nxhal_buffer_t* buffer, tpu_dlpack_export_t* e,
                                            int* out_done) {
  const PJRT_Api* api = buffer->storage->api;
  PJRT_Buffer_UnsafePointer_Args pargs;
  PJRT_Error* error;
  nxhal_status_t* status = tpu_buffer_await_ready(api, buffer->storage->buffer);
  *out_done = 0;
  /* The export says compact row-major (no strides): any other layout (a
   * program's own result layout) is exported as a copy, which reorders. */
  if (status != NULL || !tpu_buffer_is_dense(buffer)) return status;
  memset(&pargs, 0, sizeof(pargs));
  pargs.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
  pargs.buffer = buffer->storage->buffer;
  error = api->PJRT_Buffer_UnsafePointer(&pargs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return NULL;
  }
  e->tensor.dl_tensor.data = (void*)pargs.buffer_pointer;
  e->storage = buffer->storage;
  /* This reference also marks the memory as seen from outside PJRT while the
   * export lives, so it is never donated (tpu_storage_exposed). */
  tpu_storage_retain(e->storage);
  /* The consumer may hold the tensor past client_destroy (the ABI cannot
   * forbid it), so the export holds the client too. */
  e->client = buffer->device->client;
  tpu_client_retain(e->client);
  *out_done = 1;
  return NULL;
}

/* Not host-addressable (TPU/GPU) or no pointer: the export holds a host
 * copy, as the device attribute "dlpack_export" states. */
static nxhal_status_t* tpu_dlpack_copy(nxhal_buffer_t* buffer, tpu_dlpack_export_t* e) {
  nxhal_status_t* status;
  e->copy = malloc(buffer->size_bytes ? (size_t)buffer->size_bytes : 1);
  if (e->copy == NULL) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory copying for DLPack");
  }
  status = tpu_buffer_to_host(buffer, e->copy, (size_t)buffer->size_bytes, NULL);
  if (status != NULL) {
    free(e->copy);
    e->copy = NULL;
    return status;
  }
  e->tensor.dl_tensor.data = e->copy;
  return NULL;
}

nxhal_status_t* tpu_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                     nxhal_dlpack_managed_tensor_t** out_tensor) {
  tpu_dlpack_export_t* e;
  nxhal_dlpack_dtype_t dl_dtype;
  nxhal_status_t* status = NULL;
  int done = 0;
  NXHAL_REQUIRE_ARG(buffer);
  NXHAL_REQUIRE_ARG(out_tensor);
  *out_tensor = NULL;
  if (!nxhal_dtype_to_dlpack(buffer->dtype, &dl_dtype)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "dtype %s has no DLPack equivalent",
                             nxhal_dtype_name(buffer->dtype));
  }
  e = tpu_dlpack_export_new(buffer, dl_dtype);
  if (e == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  if (buffer->device->is_cpu && TPU_HAS_FN(buffer->storage->api, PJRT_Buffer_UnsafePointer)) {
    status = tpu_dlpack_zero_copy(buffer, e, &done);
  }
  if (status == NULL && !done) status = tpu_dlpack_copy(buffer, e);
  if (status != NULL) {
    free(e);
    return tpu_buffer_explain_gone(buffer, status, "buffer_to_dlpack");
  }
  *out_tensor = &e->tensor;
  return NULL;
}

/* Called by PJRT when a view of imported memory is dropped: nothing to do,
 * the storage calls the DLPack deleter once the buffer is gone. */
static void tpu_view_deleted(void* device_buffer_ptr, void* user_arg) {
  (void)device_buffer_ptr;
  (void)user_arg;
}

nxhal_status_t* tpu_buffer_from_dlpack(nxhal_device_t* device,
                                       nxhal_dlpack_managed_tensor_t* tensor,
                                       nxhal_buffer_t** out_buffer) {
  nxhal_dlpack_layout_t layout;
  nxhal_tensor_desc_t desc;
  nxhal_status_t* status;
  nxhal_dtype_t dtype;
  uint64_t size;
  const char* data;
  int compact;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(tensor);
  NXHAL_REQUIRE_ARG(out_buffer);
  *out_buffer = NULL;
  /* PJRT copies positive byte strides (BufferFromHostBuffer); it has no way
   * to express negative ones. */
  status = nxhal_dlpack_check(tensor, NXHAL_DLPACK_ACCEPT_STRIDED, "DLPack tensor", &layout);
  if (status != NULL) return status;
  dtype = layout.dtype;
  size = layout.size_bytes;
  data = layout.data;
  compact = layout.compact;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = NXHAL_TENSOR_DESC_1_0_SIZE;
  desc.dtype = dtype;
  desc.rank = layout.rank;
  desc.dims = layout.dims;
  if (compact && device->is_cpu &&
      TPU_HAS_FN(device->backend->api, PJRT_Client_CreateViewOfDeviceBuffer) &&
      ((uintptr_t)data % TPU_ZERO_COPY_ALIGN) == 0) {
    const PJRT_Api* api = device->backend->api;
    PJRT_Client_CreateViewOfDeviceBuffer_Args vargs;
    PJRT_Error* error;
    status = nxhal_memory_reserve(&device->memory, size, "DLPack import");
    if (status != NULL) return status;
    memset(&vargs, 0, sizeof(vargs));
    vargs.struct_size = PJRT_Client_CreateViewOfDeviceBuffer_Args_STRUCT_SIZE;
    vargs.client = device->backend->client;
    vargs.device_buffer_ptr = (void*)data;
    vargs.dims = layout.dims;
    vargs.num_dims = (size_t)layout.rank;
    vargs.element_type = tpu_dtype_to_pjrt(dtype);
    vargs.device = device->pjrt;
    vargs.on_delete_callback = tpu_view_deleted;
    error = api->PJRT_Client_CreateViewOfDeviceBuffer(&vargs);
    if (error == NULL) {
      status = tpu_buffer_wrap(device, vargs.buffer, size, dtype, desc.rank, desc.dims, out_buffer);
      if (status != NULL) return status;
      (*out_buffer)->storage->imported = tensor;
      (*out_buffer)->is_zero_copy = 1;
      return NULL;
    }
    nxhal_memory_release(&device->memory, size);
    free(tpu_take_error_message(api, error)); /* fall back to a copy */
  }
  status = tpu_buffer_from_host_impl(device, &desc, data, compact ? NULL : layout.byte_strides, 0,
                                     out_buffer);
  if (status != NULL) return status;
  /* Copied: the producer's memory is no longer needed. */
  if (tensor->deleter != NULL) tensor->deleter(tensor);
  return NULL;
}
