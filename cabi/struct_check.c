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
