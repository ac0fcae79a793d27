/* buffer.c -- host-memory buffers, memory accounting and DLPack.
 * OpenVINO's CPU, and the NPU through its host-visible tensors, read host
 * memory directly, so a buffer is plain host memory that execute wraps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Alignment OpenVINO's CPU kernels prefer for input tensors. */
#define NPU_ALIGNMENT 64

static nxhal_status_t* charge(nxhal_device_t* dev, uint64_t size) {
  /* The device's name goes into the message only when there is one to
   * give: formatting it for every output was a tenth of a tiny run's cost. */
  nxhal_status_t* st = nxhal_memory_reserve(&dev->memory, size, "a buffer");
  if (st == NULL) return NULL;
  nxhal_status_free(st);
  char what[160];
  snprintf(what, sizeof what, "a buffer on %s", dev->ov_name);
  return nxhal_memory_reserve(&dev->memory, size, what);
}

static void uncharge(nxhal_device_t* dev, uint64_t size) {
  nxhal_memory_release(&dev->memory, size);
}

void npu_storage_retain(npu_storage_t* s) {
  atomic_fetch_add(&s->refs, 1);
}

void npu_storage_release(npu_storage_t* s) {
  if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (s->accounted != NULL) uncharge(s->accounted, s->size);
  if (s->owned) free(s->data);
  if (s->dlpack != NULL && s->dlpack->deleter != NULL) s->dlpack->deleter(s->dlpack);
  free(s);
}

/* One lock and condition for every pending storage, static so that they
 * outlive any storage, client or run: waits are rare (a read racing its own
 * run), so a waiter woken for another storage's run just checks again. */
static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pending_cv = PTHREAD_COND_INITIALIZER;

int npu_storage_wait(npu_storage_t* s) {
  /* Acquire: pairs with the settling store, so the run's writes are seen. */
  int state = atomic_load_explicit(&s->state, memory_order_acquire);
  if (state != NPU_STORAGE_PENDING) return state;
  pthread_mutex_lock(&pending_mu);
  /* Checked under the lock the settler broadcasts under: no lost wakeup. */
  while ((state = atomic_load_explicit(&s->state, memory_order_acquire)) == NPU_STORAGE_PENDING) {
    pthread_cond_wait(&pending_cv, &pending_mu);
  }
  pthread_mutex_unlock(&pending_mu);
  return state;
}

/* Waits for `b`'s bytes; an error when the run that was to write them failed. */
static nxhal_status_t* await_data(nxhal_buffer_t* b) {
  if (npu_storage_wait(b->storage) == NPU_STORAGE_READY) return NULL;
  return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                           "the buffer was never written: the run that was to write it failed "
                           "(its event has the error)");
}

void npu_storage_settle(npu_storage_t* s, int failed) {
  atomic_store_explicit(&s->state, failed ? NPU_STORAGE_FAILED : NPU_STORAGE_READY,
                        memory_order_release);
  pthread_mutex_lock(&pending_mu);
  pthread_cond_broadcast(&pending_cv);
  pthread_mutex_unlock(&pending_mu);
}

static nxhal_buffer_t* buffer_new(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                  const int64_t* dims) {
  nxhal_buffer_t* b = calloc(1, sizeof *b);
  if (b == NULL) return NULL;
  b->dims = malloc(sizeof(int64_t) * (size_t)(rank > 0 ? rank : 1));
  if (b->dims == NULL) {
    free(b);
    return NULL;
  }
  if (rank > 0) memcpy(b->dims, dims, sizeof(int64_t) * (size_t)rank);
  b->device = device;
  b->dtype = dtype;
  b->rank = rank;
  return b;
}

/* A zero-copy buffer over memory it does not own (`data`, `size` bytes),
 * with the DLPack tensor to release with it, if any. */
static nxhal_status_t* buffer_alias(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                    const int64_t* dims, void* data, uint64_t size,
                                    nxhal_dlpack_managed_tensor_t* dlpack, nxhal_buffer_t** out) {
  nxhal_buffer_t* b = buffer_new(device, dtype, rank, dims);
  npu_storage_t* s = calloc(1, sizeof *s);
  if (b == NULL || s == NULL) {
    if (b != NULL) free(b->dims);
    free(b);
    free(s);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  atomic_init(&s->refs, 1);
  atomic_init(&s->state, NPU_STORAGE_READY);
  s->data = data;
  s->size = size;
  s->dlpack = dlpack;
  b->storage = s;
  b->is_zero_copy = 1;
  *out = b;
  return NULL;
}

nxhal_status_t* npu_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                 const int64_t* dims, uint64_t size, nxhal_buffer_t** out) {
  *out = NULL;
  /* Rounding up to the alignment below must not wrap to a small allocation. */
  if (size > (uint64_t)SIZE_MAX - NPU_ALIGNMENT) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "a buffer of %llu bytes cannot be allocated",
                             (unsigned long long)size);
  }
  nxhal_status_t* st = charge(device, size);
  if (st != NULL) return st;
  nxhal_buffer_t* b = buffer_new(device, dtype, rank, dims);
  npu_storage_t* s = calloc(1, sizeof *s);
  /* aligned_alloc needs a size that is a multiple of the alignment. */
  size_t rounded = (size_t)((size + NPU_ALIGNMENT - 1) / NPU_ALIGNMENT * NPU_ALIGNMENT);
  void* data = aligned_alloc(NPU_ALIGNMENT, rounded > 0 ? rounded : NPU_ALIGNMENT);
  if (b == NULL || s == NULL || data == NULL) {
    if (b != NULL) free(b->dims);
    free(b);
    free(s);
    free(data);
    uncharge(device, size);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of host memory for %llu bytes",
                             (unsigned long long)size);
  }
  atomic_init(&s->refs, 1);
  atomic_init(&s->state, NPU_STORAGE_READY);
  s->data = data;
  s->size = size;
  s->accounted = device;
  s->owned = 1;
  b->storage = s;
  *out = b;
  return NULL;
}

nxhal_status_t* npu_device_memory_stats(nxhal_device_t* device, nxhal_memory_stats_t* out) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_status_t* st = nxhal_check_struct(out, NXHAL_MEMORY_STATS_1_0_SIZE, "nxhal_memory_stats_t");
  if (st != NULL) return st;
  nxhal_memory_stats(&device->memory, out);
  return NULL;
}

nxhal_status_t* npu_device_set_memory_limit(nxhal_device_t* device, uint64_t limit_bytes) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_memory_set_limit(&device->memory, limit_bytes);
  return NULL;
}

nxhal_status_t* npu_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                  nxhal_buffer_t** out_buffer) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_buffer);
  uint64_t size = 0;
  nxhal_status_t* st = nxhal_tensor_desc_check(desc, "buffer description", &size);
  if (st != NULL) return st;
  return npu_buffer_alloc(device, desc->dtype, desc->rank, desc->dims, size, out_buffer);
}

nxhal_status_t* npu_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                     const void* data, size_t size_bytes, uint32_t flags,
                                     nxhal_buffer_t** out_buffer) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_buffer);
  if (size_bytes > 0) NXHAL_REQUIRE_ARG(data);
  *out_buffer = NULL;
  uint64_t size = 0;
  nxhal_status_t* st = nxhal_tensor_desc_check(desc, "buffer description", &size);
  if (st != NULL) return st;
  if (size != size_bytes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "host data is %zu bytes but the description needs %llu", size_bytes,
                             (unsigned long long)size);
  }
  if (flags & ~NXHAL_HOST_ZERO_COPY) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "unknown flags 0x%x", flags);
  }
  if (flags & NXHAL_HOST_ZERO_COPY) {
    /* OpenVINO only reads inputs; the caller keeps the memory alive. */
    return buffer_alias(device, desc->dtype, desc->rank, desc->dims, (void*)data, size, NULL,
                        out_buffer);
  }
  st = npu_buffer_alloc(device, desc->dtype, desc->rank, desc->dims, size, out_buffer);
  if (st != NULL) return st;
  if (size > 0) memcpy((*out_buffer)->storage->data, data, size);
  return NULL;
}

nxhal_status_t* npu_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                   nxhal_event_t** out_event) {
  NXHAL_REQUIRE_ARG(buffer);
  if (size_bytes > 0) NXHAL_REQUIRE_ARG(dst);
  if (size_bytes != buffer->storage->size) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "dst is %zu bytes but the buffer holds %llu",
                             size_bytes, (unsigned long long)buffer->storage->size);
  }
  /* An async run's output is read once the run has written it. The async
   * form waits too rather than deferring the copy to the run's completion:
   * the copy is one memcpy, and the run's callback stays free of `dst`. */
  nxhal_status_t* st = await_data(buffer);
  if (st != NULL) return st;
  if (size_bytes > 0) memcpy(dst, buffer->storage->data, size_bytes);
  /* Host memory: the copy is already done, the event completes at once. */
  return nxhal_event_done(out_event);
}

nxhal_status_t* npu_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out) {
  NXHAL_REQUIRE_ARG(buffer);
  nxhal_status_t* st = nxhal_check_struct(out, NXHAL_BUFFER_INFO_1_0_SIZE, "nxhal_buffer_info_t");
  if (st != NULL) return st;
  out->dtype = buffer->dtype;
  out->rank = buffer->rank;
  out->dims = buffer->dims;
  out->size_bytes = buffer->storage->size;
  out->is_zero_copy = buffer->is_zero_copy;
  out->device = buffer->device;
  return NULL;
}

void npu_buffer_destroy(nxhal_buffer_t* buffer) {
  if (buffer == NULL) return;
  /* No wait: a pending run holds its own reference on the storage. */
  npu_storage_release(buffer->storage);
  free(buffer->dims);
  free(buffer);
}

/* What an exported DLPack tensor keeps alive: its shape, the storage, and
 * the client whose device accounting the storage credits on release (the
 * consumer may keep the tensor past client_destroy). */
typedef struct dlpack_ctx {
  npu_storage_t* storage;
  nxhal_client_t* client; /* a reference */
  int64_t* shape;
} dlpack_ctx_t;

static void dlpack_deleter(nxhal_dlpack_managed_tensor_t* self) {
  if (self == NULL) return;
  dlpack_ctx_t* ctx = self->manager_ctx;
  npu_storage_release(ctx->storage); /* before the client: it uncharges a device */
  npu_client_release(ctx->client);
  free(ctx->shape);
  free(ctx);
  free(self);
}

nxhal_status_t* npu_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                     nxhal_dlpack_managed_tensor_t** out_tensor) {
  NXHAL_REQUIRE_ARG(buffer);
  NXHAL_REQUIRE_ARG(out_tensor);
  nxhal_dlpack_dtype_t dt;
  if (!nxhal_dtype_to_dlpack(buffer->dtype, &dt)) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED, "dtype %d has no DLPack equivalent",
                             buffer->dtype);
  }
  /* The export is zero-copy: its consumer reads the bytes without asking us. */
  nxhal_status_t* st = await_data(buffer);
  if (st != NULL) return st;
  nxhal_dlpack_managed_tensor_t* t = calloc(1, sizeof *t);
  dlpack_ctx_t* ctx = calloc(1, sizeof *ctx);
  int64_t* shape = malloc(sizeof(int64_t) * (size_t)(buffer->rank > 0 ? buffer->rank : 1));
  if (t == NULL || ctx == NULL || shape == NULL) {
    free(t);
    free(ctx);
    free(shape);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (buffer->rank > 0) memcpy(shape, buffer->dims, sizeof(int64_t) * (size_t)buffer->rank);
  npu_storage_retain(buffer->storage);
  ctx->storage = buffer->storage;
  npu_client_retain(buffer->device->client);
  ctx->client = buffer->device->client;
  ctx->shape = shape;
  t->version.major = NXHAL_DLPACK_MAJOR_VERSION;
  t->version.minor = NXHAL_DLPACK_MINOR_VERSION;
  t->manager_ctx = ctx;
  t->deleter = dlpack_deleter;
  /* Aliased caller memory must not be written through the export. */
  t->flags = buffer->is_zero_copy ? NXHAL_DLPACK_FLAG_READ_ONLY : 0;
  t->dl_tensor.data = buffer->storage->data;
  t->dl_tensor.device.device_type = NXHAL_DLPACK_DEVICE_CPU;
  t->dl_tensor.device.device_id = 0;
  t->dl_tensor.ndim = (int32_t)buffer->rank;
  t->dl_tensor.dtype = dt;
  t->dl_tensor.shape = shape;
  t->dl_tensor.strides = NULL;
  t->dl_tensor.byte_offset = 0;
  *out_tensor = t;
  return NULL;
}

nxhal_status_t* npu_buffer_from_dlpack(nxhal_device_t* device,
                                       nxhal_dlpack_managed_tensor_t* tensor,
                                       nxhal_buffer_t** out_buffer) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(tensor);
  NXHAL_REQUIRE_ARG(out_buffer);
  *out_buffer = NULL;
  nxhal_dlpack_layout_t layout;
  /* Only compact row-major memory can be handed to OpenVINO as it is. */
  nxhal_status_t* st = nxhal_dlpack_check(tensor, 0, "DLPack tensor", &layout);
  if (st != NULL) return st;
  return buffer_alias(device, layout.dtype, layout.rank, layout.dims, (void*)layout.data,
                      layout.size_bytes, tensor, out_buffer);
}
