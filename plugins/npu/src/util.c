/* util.c -- OpenVINO error text, element types and small helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

char* npu_strdup(const char* s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s) + 1;
  char* d = malloc(n);
  if (d != NULL) memcpy(d, s, n);
  return d;
}

char* npu_ov_last_error(void) {
  /* Each call returns a fresh copy the caller frees with ov_free. */
  const char* msg = npu_ov.ov_get_last_err_msg();
  char* text = npu_strdup(msg != NULL ? msg : "");
  if (msg != NULL) npu_ov.ov_free(msg);
  if (text == NULL) return NULL;
  /* OpenVINO ends its messages with blank lines; they only add noise. */
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
    text[--n] = '\0';
  return text;
}

nxhal_status_t* npu_ov_error(nxhal_status_code_t code, ov_status_e st, const char* what) {
  /* The C wrapper's own parameter checks leave the last message as it was,
   * which would be some earlier, unrelated error. */
  char* detail = st == INVALID_C_PARAM ? NULL : npu_ov_last_error();
  const char* info = npu_ov.ov_get_error_info(st);
  nxhal_status_t* status =
      nxhal_status_make(code, "%s failed (OpenVINO %s): %s", what, info != NULL ? info : "error",
                        detail != NULL && detail[0] != '\0' ? detail : "no detail");
  free(detail);
  return status;
}

/* nx_hal dtype -> OpenVINO element type, indexed by nxhal_dtype_t. */
static const ov_element_type_e kToOv[] = {
    [NXHAL_DTYPE_INVALID] = DYNAMIC, [NXHAL_DTYPE_F16] = F16,      [NXHAL_DTYPE_BF16] = BF16,
    [NXHAL_DTYPE_F32] = F32,         [NXHAL_DTYPE_F64] = F64,      [NXHAL_DTYPE_I8] = I8,
    [NXHAL_DTYPE_I16] = I16,         [NXHAL_DTYPE_I32] = I32,      [NXHAL_DTYPE_I64] = I64,
    [NXHAL_DTYPE_U8] = U8,           [NXHAL_DTYPE_BOOL] = BOOLEAN, [NXHAL_DTYPE_U16] = U16,
    [NXHAL_DTYPE_U32] = U32,         [NXHAL_DTYPE_U64] = U64,
};

ov_element_type_e npu_dtype_to_ov(nxhal_dtype_t dtype) {
  if ((int)dtype <= 0 || (size_t)dtype >= sizeof(kToOv) / sizeof(kToOv[0])) return DYNAMIC;
  return kToOv[dtype];
}

nxhal_dtype_t npu_dtype_from_ov(ov_element_type_e type) {
  for (size_t i = 1; i < sizeof(kToOv) / sizeof(kToOv[0]); i++) {
    if (kToOv[i] == type) return (nxhal_dtype_t)i;
  }
  return NXHAL_DTYPE_INVALID;
}

void npu_format_dims(const int64_t* dims, int64_t rank, char* buf, size_t n) {
  size_t used = 0;
  if (n == 0) return;
  buf[0] = '\0';
  if (rank < 0) {
    snprintf(buf, n, "[?]");
    return;
  }
  used += (size_t)snprintf(buf + used, n - used, "[");
  for (int64_t i = 0; i < rank && used < n; i++) {
    used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)dims[i]);
  }
  if (used < n) snprintf(buf + used, n - used, "]");
}
