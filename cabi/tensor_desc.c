/* tensor_desc.c -- validating tensor descriptions and computing their size. */
#include "nx_hal/nx_hal_plugin.h"

/* Ranks above this are refused: no backend we drive supports more. */
#define NXHAL_MAX_RANK 32

nxhal_status_t* nxhal_tensor_desc_check(const nxhal_tensor_desc_t* desc, const char* what,
                                        uint64_t* out_size_bytes) {
  nxhal_status_t* status;
  uint64_t size;
  int64_t i;
  if (what == NULL) what = "tensor";
  status = nxhal_check_struct(desc, NXHAL_TENSOR_DESC_1_0_SIZE, what);
  if (status != NULL) return status;
  size = nxhal_dtype_size(desc->dtype);
  if (size == 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has unknown dtype %d", what,
                             (int)desc->dtype);
  }
  if (desc->rank < 0 || desc->rank > NXHAL_MAX_RANK) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has rank %lld, expected 0..%d", what,
                             (long long)desc->rank, NXHAL_MAX_RANK);
  }
  if (desc->rank > 0 && desc->dims == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s has rank %lld but NULL dims", what,
                             (long long)desc->rank);
  }
  for (i = 0; i < desc->rank; ++i) {
    int64_t dim = desc->dims[i];
    if (dim < 0) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "%s has dimension %lld = %lld, expected >= 0", what, (long long)i,
                               (long long)dim);
    }
    if (dim != 0 && size > UINT64_MAX / (uint64_t)dim) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s is too large: its byte size overflows",
                               what);
    }
    size *= (uint64_t)dim;
  }
  if (out_size_bytes != NULL) *out_size_bytes = size;
  return NULL;
}
