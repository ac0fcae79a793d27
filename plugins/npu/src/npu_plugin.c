/* npu_plugin.c -- the function table and the one exported symbol. */
#include <stdio.h>
#include <stdlib.h>

#include "npu_internal.h"

/* OpenVINO's version, read once; a static string for plugin_info, empty
 * when the library could not be loaded (client_create then says why). */
static char g_sdk_version[128];
static pthread_once_t g_sdk_once = PTHREAD_ONCE_INIT;

static void read_sdk_version(void) {
  nxhal_status_t* st = npu_ov_load();
  if (st != NULL) {
    nxhal_status_free(st);
    return;
  }
  ov_version_t v = {0};
  if (npu_ov.ov_get_openvino_version(&v) == OK) {
    snprintf(g_sdk_version, sizeof g_sdk_version, "%s", v.buildNumber != NULL ? v.buildNumber : "");
    npu_ov.ov_version_free(&v);
  }
}

static nxhal_status_t* plugin_info(nxhal_plugin_info_t* out) {
  nxhal_status_t* st = nxhal_check_struct(out, NXHAL_PLUGIN_INFO_STRUCT_SIZE, "nxhal_plugin_info_t");
  if (st != NULL) return st;
  pthread_once(&g_sdk_once, read_sdk_version);
  out->name = "npu";
  out->vendor = "Intel OpenVINO";
  out->plugin_version = NXHAL_NPU_VERSION;
  out->sdk_version = g_sdk_version;
  out->abi_major = NXHAL_ABI_VERSION_MAJOR;
  out->abi_minor = NXHAL_ABI_VERSION_MINOR;
  return NULL;
}

static const nxhal_api_t kApi = {
    .struct_size = NXHAL_API_1_0_SIZE,
    .abi_major = NXHAL_ABI_VERSION_MAJOR,
    .abi_minor = NXHAL_ABI_VERSION_MINOR,
    .status_free = nxhal_status_free,
    .status_code = nxhal_status_code,
    .status_message = nxhal_status_message,
    .plugin_info = plugin_info,
    .client_create = npu_client_create,
    .client_destroy = npu_client_destroy,
    .client_diagnostics = npu_client_diagnostics,
    .client_device_count = npu_client_device_count,
    .client_device = npu_client_device,
    .device_info = npu_device_info,
    .device_attribute_count = npu_device_attribute_count,
    .device_attribute = npu_device_attribute,
    .device_memory_stats = npu_device_memory_stats,
    .device_set_memory_limit = npu_device_set_memory_limit,
    .buffer_create = npu_buffer_create,
    .buffer_from_host = npu_buffer_from_host,
    .buffer_to_host = npu_buffer_to_host,
    .buffer_info = npu_buffer_info,
    .buffer_destroy = npu_buffer_destroy,
    .buffer_to_dlpack = npu_buffer_to_dlpack,
    .buffer_from_dlpack = npu_buffer_from_dlpack,
    .executable_compile = npu_executable_compile,
    .executable_destroy = npu_executable_destroy,
    .executable_io_count = npu_executable_io_count,
    .executable_io_info = npu_executable_io_info,
    .executable_execute = npu_executable_execute,
    .executable_serialize = npu_executable_serialize,
    .executable_deserialize = npu_executable_deserialize,
    .blob_free = npu_blob_free,
    .event_is_ready = nxhal_event_is_ready,
    .event_await = nxhal_event_await,
    .event_on_ready = nxhal_event_on_ready,
    .event_destroy = nxhal_event_destroy,
};

/* The one exported symbol (see nxhal_query_fn). Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args, const nxhal_api_t** out_api) {
  if (out_api == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_api is NULL");
  return nxhal_negotiate(args, &kApi, out_api);
}
