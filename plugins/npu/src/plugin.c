/* plugin.c -- the function table and the one exported symbol. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

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

nxhal_status_t* npu_plugin_info(nxhal_plugin_info_t* out) {
  nxhal_status_t* st = nxhal_check_struct(out, NXHAL_PLUGIN_INFO_1_0_SIZE, "nxhal_plugin_info_t");
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

/* Filled from the entry list in nx_hal.h: npu_<entry> for each entry. */
static const nxhal_api_t kApi = {NXHAL_API_1_0_SIZE, NXHAL_ABI_VERSION_MAJOR,
                                 NXHAL_ABI_VERSION_MINOR,
                                 NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_PLUGIN_TABLE_ENTRIES(npu_)};

/* The one exported symbol (see nxhal_query_fn). Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api) {
  if (out_api == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_api is NULL");
  return nxhal_negotiate(args, &kApi, out_api);
}
