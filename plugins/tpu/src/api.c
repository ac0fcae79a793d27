/* api.c -- the plugin's nx_hal function table and its one exported symbol. */
#include <string.h>

#include "tpu_internal.h"

/* Plugin identity; the strings are static. Thread-safe. */
static nxhal_status_t* tpu_plugin_info(nxhal_plugin_info_t* out) {
  nxhal_plugin_info_t info;
  nxhal_status_t* status = nxhal_check_struct(out, NXHAL_PLUGIN_INFO_STRUCT_SIZE, "plugin_info output");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = out->struct_size < sizeof(info) ? out->struct_size : sizeof(info);
  info.name = "tpu";
  info.vendor = "nx_hal over OpenXLA PJRT (libtpu, CUDA, XLA CPU)";
  info.plugin_version = TPU_PLUGIN_VERSION;
  /* The PJRT C API header this build speaks; each backend's own version is
   * in the client diagnostics and device attributes. */
#define TPU_STR2(x) #x
#define TPU_STR(x) TPU_STR2(x)
  info.sdk_version = "PJRT C API " TPU_STR(PJRT_API_MAJOR) "." TPU_STR(PJRT_API_MINOR);
  info.abi_major = NXHAL_ABI_VERSION_MAJOR;
  info.abi_minor = NXHAL_ABI_VERSION_MINOR;
  memcpy(out, &info, info.struct_size);
  return NULL;
}

/* Every entry is non-NULL: the table is static and complete for ABI 1.0. */
static const nxhal_api_t tpu_api = {
    .struct_size = NXHAL_API_1_0_SIZE,
    .abi_major = NXHAL_ABI_VERSION_MAJOR,
    .abi_minor = NXHAL_ABI_VERSION_MINOR,
    .status_free = nxhal_status_free,
    .status_code = nxhal_status_code,
    .status_message = nxhal_status_message,
    .plugin_info = tpu_plugin_info,
    .client_create = tpu_client_create,
    .client_destroy = tpu_client_destroy,
    .client_diagnostics = tpu_client_diagnostics,
    .client_device_count = tpu_client_device_count,
    .client_device = tpu_client_device,
    .device_info = tpu_device_info,
    .device_attribute_count = tpu_device_attribute_count,
    .device_attribute = tpu_device_attribute,
    .device_memory_stats = tpu_device_memory_stats,
    .device_set_memory_limit = tpu_device_set_memory_limit,
    .buffer_create = tpu_buffer_create,
    .buffer_from_host = tpu_buffer_from_host,
    .buffer_to_host = tpu_buffer_to_host,
    .buffer_info = tpu_buffer_info,
    .buffer_destroy = tpu_buffer_destroy,
    .buffer_to_dlpack = tpu_buffer_to_dlpack,
    .buffer_from_dlpack = tpu_buffer_from_dlpack,
    .executable_compile = tpu_executable_compile,
    .executable_destroy = tpu_executable_destroy,
    .executable_io_count = tpu_executable_io_count,
    .executable_io_info = tpu_executable_io_info,
    .executable_execute = tpu_executable_execute,
    .executable_serialize = tpu_executable_serialize,
    .executable_deserialize = tpu_executable_deserialize,
    .blob_free = tpu_blob_free,
    .event_is_ready = nxhal_event_is_ready,
    .event_await = nxhal_event_await,
    .event_on_ready = nxhal_event_on_ready,
    .event_destroy = nxhal_event_destroy,
};

/* The one exported symbol. Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api) {
  return nxhal_negotiate(args, &tpu_api, out_api);
}
