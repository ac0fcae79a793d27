/*
 * _binding.h -- the C helpers of the cffi extension nx_hal._nxhal_cffi that
 * Python calls (defined in nx_hal/_binding.c).
 *
 * nx_hal/_ffi_build.py runs this header through the C preprocessor with the
 * public headers and hands the declarations to cffi's cdef, so only plain
 * C99 declarations that cffi parses belong here: nothing that names a Python
 * type (the capsule destructor stays private to _binding.c).
 */
#ifndef NX_HAL_BINDING_H_
#define NX_HAL_BINDING_H_

#include <stdint.h>

#include "nx_hal/nx_hal.h"

/* Hot-path helpers: descriptor structs built on the C stack instead of being
 * allocated by cffi on every call (see bench/dispatch.py). */
nxhal_status_t* nxhal_py_memory_stats(const nxhal_api_t* api, nxhal_device_t* device,
                                      uint64_t* out3);
nxhal_status_t* nxhal_py_buffer_from_host(const nxhal_api_t* api, nxhal_device_t* device,
                                          int32_t dtype, int64_t rank, const int64_t* dims,
                                          const void* data, size_t size, uint32_t flags,
                                          uintptr_t* out);

/* The address of the destructor nx_hal gives the DLPack capsules it hands out. */
uintptr_t nxhal_py_capsule_destructor_address(void);

#endif /* NX_HAL_BINDING_H_ */
