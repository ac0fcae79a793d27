/* plugin.c -- the plugin's nx_hal function table and its one exported symbol. */
#include <string.h>

#include "internal.h"

/* Plugin identity; the strings are static. Thread-safe. */
nxhal_status_t* tpu_plugin_info(nxhal_plugin_info_t* out) {
  nxhal_plugin_info_t info;
  nxhal_status_t* status =
      nxhal_check_struct(out, NXHAL_PLUGIN_INFO_1_0_SIZE, "plugin_info output");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
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
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
}

/* Every entry is non-NULL: the table is static and complete for ABI 1.0,
 * filled from the entry list in nx_hal.h (tpu_<entry> for each entry). */
static const nxhal_api_t tpu_api = {NXHAL_API_1_0_SIZE, NXHAL_ABI_VERSION_MAJOR,
                                    NXHAL_ABI_VERSION_MINOR,
                                    NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_PLUGIN_TABLE_ENTRIES(tpu_)};

/* The one exported symbol. Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api) {
  return nxhal_negotiate(args, &tpu_api, out_api);
}
