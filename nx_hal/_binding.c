/*
 * _binding.c -- the hand-written C of the cffi extension nx_hal._nxhal_cffi.
 *
 * Not compiled on its own: nx_hal/_ffi_build.py includes it in the
 * extension's source, after cffi has included <Python.h> under the limited
 * API (Py_LIMITED_API), so only limited-API calls belong here. The functions
 * Python calls are declared in _binding.h, which is also the cdef's source
 * for them.
 */
#include <Python.h>
#include <stdint.h>

#include "_binding.h"

/* Caller owns the returned status; out3 gets in-use, peak, limit. Thread-safe like the entry. */
nxhal_status_t* nxhal_py_memory_stats(const nxhal_api_t* api, nxhal_device_t* device,
                                      uint64_t* out3) {
  nxhal_memory_stats_t stats;
  nxhal_status_t* status;
  stats.struct_size = sizeof stats;
  status = api->device_memory_stats(device, &stats);
  if (status == NULL) {
    out3[0] = stats.bytes_in_use;
    out3[1] = stats.peak_bytes_in_use;
    out3[2] = stats.bytes_limit;
  }
  return status;
}

/* Caller owns the status and the buffer at *out (dims, data: borrowed). Thread-safe like entry. */
nxhal_status_t* nxhal_py_buffer_from_host(const nxhal_api_t* api, nxhal_device_t* device,
                                          int32_t dtype, int64_t rank, const int64_t* dims,
                                          const void* data, size_t size, uint32_t flags,
                                          uintptr_t* out) {
  /* The handle comes back as an address: what nx_hal._fastpath's buffers
   * take, without a cffi pointer made and converted on every put. */
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t* buffer = NULL;
  nxhal_status_t* status;
  desc.struct_size = sizeof desc;
  desc.dtype = (nxhal_dtype_t)dtype;
  desc.rank = rank;
  desc.dims = dims;
  status = api->buffer_from_host(device, &desc, data, size, flags, &buffer);
  *out = (uintptr_t)buffer;
  return status;
}

/* Frees the tensor of a capsule no consumer took (it owns it until renamed); runs with the GIL. */
static void nxhal_py_capsule_destructor(PyObject* capsule) {
  /* The destructor of a DLPack capsule we hand out: a consumer that takes
   * the tensor renames the capsule ("used_dltensor_versioned") and owns it;
   * one that never did leaves the name, and the tensor is released here.
   * Only limited-API calls, and none that can set an exception. */
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    nxhal_dlpack_managed_tensor_t* tensor =
        (nxhal_dlpack_managed_tensor_t*)PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (tensor != NULL && tensor->deleter != NULL) tensor->deleter(tensor);
  }
}

/* A code address, owned by nobody (static for the module's life). Thread-safe. */
uintptr_t nxhal_py_capsule_destructor_address(void) {
  return (uintptr_t)&nxhal_py_capsule_destructor;
}
