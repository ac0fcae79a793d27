/* struct_check.c -- struct_size checks for structs crossing the ABI. */
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"

nxhal_status_t* nxhal_check_struct(const void* ptr, size_t min_size, const char* what) {
  size_t struct_size;
  if (what == NULL) what = "argument";
  if (ptr == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s is NULL", what);
  /* memcpy: the caller's struct type is unknown here; struct_size is its first field. */
  memcpy(&struct_size, ptr, sizeof(struct_size));
  if (struct_size < min_size) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s has struct_size %zu, below the required %zu bytes", what,
                             struct_size, min_size);
  }
  return NULL;
}

void nxhal_struct_fill(void* out, const void* ours, size_t our_size) {
  size_t caller_size;
  size_t n;
  if (out == NULL || ours == NULL) return;
  memcpy(&caller_size, out, sizeof(caller_size));
  n = caller_size < our_size ? caller_size : our_size;
  /* struct_size stays the caller's: it says what the caller allocated. */
  if (n > sizeof(size_t)) {
    memcpy((char*)out + sizeof(size_t), (const char*)ours + sizeof(size_t), n - sizeof(size_t));
  }
}
