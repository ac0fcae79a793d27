/*
 * plugin.c -- the exported entry point, the function table and plugin
 * info of the nx_hal plugin template (clients and devices: client.c).
 *
 * Copy this plugin to start a backend: keep the shape (one exported symbol,
 * a static table, every entry checking its arguments and returning a status)
 * and replace what the comments marked "A real backend" point at.
 */
#include "internal.h"

#ifndef TEMPLATE_PLUGIN_VERSION
#define TEMPLATE_PLUGIN_VERSION "0.0.0" /* CMakeLists.txt passes pyproject's version */
#endif

/* The ABI version this file implements. Built against newer headers that
 * add entries, NXHAL_PLUGIN_DECLARE_ENTRIES (internal.h) declares them and
 * the link fails until someone writes them; the table's size and version
 * below still say what this file implements, so a host never sees more
 * than was written, and never a NULL entry. */
#define TEMPLATE_ABI_MAJOR 1
#define TEMPLATE_ABI_MINOR 1
#define TEMPLATE_API_SIZE NXHAL_STRUCT_SIZE(nxhal_api_t, event_destroy)
#if NXHAL_ABI_VERSION_MAJOR != TEMPLATE_ABI_MAJOR || NXHAL_ABI_VERSION_MINOR < TEMPLATE_ABI_MINOR
#error "the nx_hal headers are not ABI 1.x with x >= 1: use an nx-hal core of the 0.1 series"
#endif

/* A real backend derives its key from what decides whether a compiled
 * program still runs: the SDK version, the chip generation, the compiler's
 * flags. Deserialization refuses bytes made under another key. */
const char* const template_compat_key = "nx-hal-plugin-template-1";

/* --- Plugin -------------------------------------------------------------- */

/* Table entry plugin_info. Thread-safe. */
nxhal_status_t* template_plugin_info(nxhal_plugin_info_t* out) {
  nxhal_status_t* status = nxhal_check_struct(out, NXHAL_PLUGIN_INFO_1_0_SIZE, "plugin info");
  if (status != NULL) return status;
  out->name = "template";
  out->vendor = "Example Vendor";
  out->plugin_version = TEMPLATE_PLUGIN_VERSION;
  out->sdk_version = ""; /* A real backend reports its vendor SDK's version. */
  out->abi_major = TEMPLATE_ABI_MAJOR;
  out->abi_minor = TEMPLATE_ABI_MINOR;
  return NULL;
}

/* --- The table ----------------------------------------------------------- */

/* Every entry is set: what the template does not support (DLPack) answers
 * UNIMPLEMENTED through its entry. Statuses and events come from the helpers
 * library (linked statically, so this library frees what it made). */
static const nxhal_api_t template_api = {
    TEMPLATE_API_SIZE, TEMPLATE_ABI_MAJOR, TEMPLATE_ABI_MINOR,
    NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_PLUGIN_TABLE_ENTRIES(template_)};

/* The one exported symbol: negotiation is the helpers' (same major, any
 * minor; else ABI_MISMATCH naming both versions). Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api) {
  return nxhal_negotiate(args, &template_api, out_api);
}
