/* plugin.c -- the Graphcore plugin's ABI 1.0 table, its query entry point
 * and plugin info. Clients and devices are in client.c; the Poplar work
 * itself happens in the backend (backend.h), loaded only when it was built. */
#include <string.h>

#include "internal.h"

/* --- Plugin ------------------------------------------------------------- */

nxhal_status_t* gc_plugin_info(nxhal_plugin_info_t* out) {
  nxhal_plugin_info_t info;
  nxhal_status_t* status = nxhal_check_struct(out, NXHAL_PLUGIN_INFO_1_0_SIZE, "plugin info");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.name = "graphcore";
  info.vendor = "Graphcore";
  info.plugin_version = NXHAL_GRAPHCORE_PLUGIN_VERSION;
  info.sdk_version = NXHAL_GRAPHCORE_SDK_VERSION;
  info.abi_major = NXHAL_ABI_VERSION_MAJOR;
  info.abi_minor = NXHAL_ABI_VERSION_MINOR;
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
}

/* --- The table ----------------------------------------------------------- */

/* Filled from the entry list in nx_hal.h: gc_<entry> for each entry. */
static const nxhal_api_t gc_api = {sizeof(nxhal_api_t), NXHAL_ABI_VERSION_MAJOR,
                                   NXHAL_ABI_VERSION_MINOR,
                                   NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_PLUGIN_TABLE_ENTRIES(gc_)};

/* The one exported symbol (nx_hal.h, nxhal_query_fn). Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api);
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api) {
  return nxhal_negotiate(args, &gc_api, out_api);
}
