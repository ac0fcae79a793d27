/* dlpack.c -- the checks every plugin applies to a DLPack tensor it imports.
 * Written once so that a malformed tensor (found by fuzzing: NULL data,
 * overflowing shapes, strides outside the allocation) is refused the same
 * way everywhere, before a plugin reads a byte of it. */
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"

/* DLPack's DLDeviceType names, for messages; NULL past the table. */
static const char* nxhal_dlpack_device_name(int32_t type) {
  static const char* const names[] = {
      NULL,  "CPU",  "CUDA",     "CUDAHost", "OpenCL",      NULL,     NULL,     "Vulkan",  "Metal",
      "VPI", "ROCM", "ROCMHost", "ExtDev",   "CUDAManaged", "OneAPI", "WebGPU", "Hexagon", "MAIA",
  };
  if (type < 0 || (size_t)type >= sizeof(names) / sizeof(names[0])) return NULL;
  return names[type];
}

/* |value| as an unsigned number; exact for INT64_MIN too. */
static uint64_t nxhal_magnitude(int64_t value) {
  return value >= 0 ? (uint64_t)value : (uint64_t)(-(value + 1)) + 1u;
}

/* Checks the strides of a tensor with at least one element, whose dims and
 * size are already checked, and fills out->compact and out->byte_strides. */
static nxhal_status_t* nxhal_dlpack_check_strides(const nxhal_dlpack_tensor_t* dl, uint32_t accept,
                                                  uint64_t item, const char* what,
                                                  nxhal_dlpack_layout_t* out) {
  uint64_t above = 0; /* bytes the furthest element lies past element 0 */
  uint64_t below = 0; /* bytes the nearest element lies before element 0 */
  uint64_t end;
  int64_t expect = 1, first_expect = 0;
  int32_t i, first = -1; /* the innermost axis breaking compact row-major order */
  out->compact = 1;
  if (dl->strides == NULL) return NULL;
  for (i = dl->ndim - 1; i >= 0; --i) {
    /* An axis of length 1 is never stepped along: its stride does not matter. */
    if (first < 0 && dl->shape[i] != 1 && dl->strides[i] != expect) {
      first = i;
      first_expect = expect;
    }
    expect *= dl->shape[i]; /* bounded by the element count, already checked */
  }
  if (first < 0) return NULL;
  out->compact = 0;
  if (!(accept & NXHAL_DLPACK_ACCEPT_STRIDED)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s is strided (stride %lld at axis %d, where compact row-major "
                             "needs %lld); this plugin imports only compact row-major tensors",
                             what, (long long)dl->strides[first], (int)first,
                             (long long)first_expect);
  }
  for (i = 0; i < dl->ndim; ++i) {
    int64_t stride = dl->strides[i];
    uint64_t step, span;
    if (stride < 0 && !(accept & NXHAL_DLPACK_ACCEPT_NEGATIVE_STRIDES)) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "%s has negative stride %lld at axis %d, which this plugin cannot "
                               "import",
                               what, (long long)stride, (int)i);
    }
    /* Plugins hand byte strides to their runtime as int64. */
    if (!nxhal_mul_u64(nxhal_magnitude(stride), item, &step) || step > (uint64_t)INT64_MAX) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "%s has stride %lld at axis %d, whose byte stride overflows", what,
                               (long long)stride, (int)i);
    }
    out->byte_strides[i] = stride < 0 ? -(int64_t)step : (int64_t)step;
    if (!nxhal_mul_u64(step, (uint64_t)(dl->shape[i] - 1), &span) ||
        !nxhal_add_u64(stride < 0 ? below : above, span, stride < 0 ? &below : &above)) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "%s has strides whose extent overflows (axis %d, stride %lld)", what,
                               (int)i, (long long)stride);
    }
  }
  /* DLPack does not say how large the allocation is: the only bytes a
   * consumer can count on are those the elements occupy compactly. A view
   * with gaps (a slice of a larger array) may well be valid, but so is a
   * fuzzed stride that walks into unmapped memory, and the two cannot be told
   * apart here: both are refused, and the producer can pass a compact copy. */
  if (!nxhal_add_u64(below, above, &end) || !nxhal_add_u64(end, item, &end) ||
      end > out->size_bytes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s has strides spanning more than the %llu bytes its elements "
                             "occupy, so they may leave the allocation (DLPack does not give its "
                             "size); pass a compact or transposed tensor",
                             what, (unsigned long long)out->size_bytes);
  }
  /* DLPack's data is the start of the allocation: negative strides may only
   * walk back over byte_offset. */
  if (below > dl->byte_offset) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s has negative strides reaching %llu bytes before element 0 but a "
                             "byte_offset of only %llu: they leave the allocation",
                             what, (unsigned long long)below, (unsigned long long)dl->byte_offset);
  }
  if (!nxhal_add_u64(dl->byte_offset, above, &end) || !nxhal_add_u64(end, item, &end) ||
      end > (uint64_t)(UINTPTR_MAX - (uintptr_t)dl->data)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s has strides reaching past the end of the address space", what);
  }
  return NULL;
}

/* The tensor's kind: DLPack version, CPU memory, one lane, a dtype we
 * know (written to out->dtype). */
static nxhal_status_t* nxhal_dlpack_check_kind(const nxhal_dlpack_managed_tensor_t* tensor,
                                               const char* what, nxhal_dlpack_layout_t* out) {
  const nxhal_dlpack_tensor_t* dl = &tensor->dl_tensor;
  if (tensor->version.major != NXHAL_DLPACK_MAJOR_VERSION) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has DLPack major version %u, expected %d",
                             what, (unsigned)tensor->version.major, NXHAL_DLPACK_MAJOR_VERSION);
  }
  if (dl->device.device_type != NXHAL_DLPACK_DEVICE_CPU) {
    const char* device_name = nxhal_dlpack_device_name(dl->device.device_type);
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s is on device type %d (%s); only CPU memory (device type %d) "
                             "can be imported",
                             what, (int)dl->device.device_type,
                             device_name != NULL ? device_name : "unknown",
                             NXHAL_DLPACK_DEVICE_CPU);
  }
  if (dl->dtype.lanes != 1) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s has %u lanes per element; only 1 (no vector types) is supported",
                             what, (unsigned)dl->dtype.lanes);
  }
  out->dtype = nxhal_dtype_from_dlpack(dl->dtype);
  if (out->dtype == NXHAL_DTYPE_INVALID) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has unsupported dtype (code %u, %u bits)",
                             what, (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits);
  }
  return NULL;
}

/* The shape: rank, dimensions, and a byte size that fits (written to
 * out->size_bytes, out->rank, out->dims). */
static nxhal_status_t* nxhal_dlpack_check_shape(const nxhal_dlpack_tensor_t* dl, uint64_t item,
                                                const char* what, nxhal_dlpack_layout_t* out) {
  uint64_t extent = item;
  int empty = 0;
  int32_t i;
  if (dl->ndim < 0 || dl->ndim > NXHAL_DLPACK_MAX_NDIM) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has ndim %d, expected 0..%d", what,
                             (int)dl->ndim, NXHAL_DLPACK_MAX_NDIM);
  }
  if (dl->ndim > 0 && dl->shape == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has ndim %d but a NULL shape", what,
                             (int)dl->ndim);
  }
  for (i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] < 0) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has dimension %d = %lld, expected >= 0",
                               what, (int)i, (long long)dl->shape[i]);
    }
  }
  /* The other dims of an empty tensor still go to the vendor as a shape
   * (XLA multiplies them and aborts on overflow): their product times the
   * item size must fit as if the zero were one. */
  for (i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] == 0) {
      empty = 1;
    } else if (!nxhal_mul_u64(extent, (uint64_t)dl->shape[i], &extent) ||
               extent > (uint64_t)INT64_MAX) {
      break;
    }
  }
  out->size_bytes = empty ? 0 : extent;
  /* INT64_MAX: plugins keep sizes and byte strides in int64 too. */
  if (i < dl->ndim || out->size_bytes > (uint64_t)SIZE_MAX) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s is too large: its shape times its %llu-byte elements overflows",
                             what, (unsigned long long)item);
  }
  out->rank = dl->ndim;
  out->dims = dl->shape;
  return NULL;
}

nxhal_status_t* nxhal_dlpack_check(const nxhal_dlpack_managed_tensor_t* tensor, uint32_t accept,
                                   const char* what, nxhal_dlpack_layout_t* out) {
  const nxhal_dlpack_tensor_t* dl;
  nxhal_status_t* status;
  uint64_t item;
  if (what == NULL) what = "DLPack tensor";
  if (tensor == NULL || out == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s or its layout output is NULL", what);
  }
  memset(out, 0, sizeof(*out));
  dl = &tensor->dl_tensor;
  status = nxhal_dlpack_check_kind(tensor, what, out);
  if (status != NULL) return status;
  item = nxhal_dtype_size(out->dtype);
  status = nxhal_dlpack_check_shape(dl, item, what, out);
  if (status != NULL) return status;
  out->compact = 1;
  if (out->size_bytes == 0) {
    /* Nothing is read: data and strides do not matter, and NULL + offset is undefined. */
    out->data = dl->data == NULL ? NULL : (const char*)dl->data + dl->byte_offset;
    return NULL;
  }
  if (dl->data == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has NULL data but holds %llu bytes", what,
                             (unsigned long long)out->size_bytes);
  }
  status = nxhal_dlpack_check_strides(dl, accept, item, what, out);
  if (status != NULL) return status;
  /* Compact: the bytes read are [byte_offset, byte_offset + size) past data.
   * INT64_MAX again: an offset past it is no real allocation, and plugins
   * hand offsets on as signed values. */
  if (out->compact &&
      (dl->byte_offset > (uint64_t)INT64_MAX - out->size_bytes ||
       dl->byte_offset + out->size_bytes > (uint64_t)(UINTPTR_MAX - (uintptr_t)dl->data))) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s has byte_offset %llu reaching past the end of the address space",
                             what, (unsigned long long)dl->byte_offset);
  }
  out->data = (const char*)dl->data + dl->byte_offset;
  return NULL;
}
