/* negotiate.c -- the body of a plugin's nxhal_query. */
#include "nx_hal/nx_hal_plugin.h"

nxhal_status_t* nxhal_negotiate(const nxhal_query_args_t* args, const nxhal_api_t* api,
                                const nxhal_api_t** out_api) {
  nxhal_status_t* status;
  if (out_api == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_api is NULL");
  if (api == NULL) {
    *out_api = NULL;
    return nxhal_status_make(NXHAL_INTERNAL, "plugin passed no table to nxhal_negotiate");
  }
  /* Set first, so a refusal can still be read and freed through the prefix. */
  *out_api = api;
  status = nxhal_check_struct(args, NXHAL_QUERY_ARGS_STRUCT_SIZE, "query args");
  if (status != NULL) return status;
  if (args->host_abi_major != api->abi_major) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin speaks nx_hal ABI %u.%u, host speaks ABI %u.%u "
                             "(major versions differ)",
                             (unsigned)api->abi_major, (unsigned)api->abi_minor,
                             (unsigned)args->host_abi_major, (unsigned)args->host_abi_minor);
  }
  return NULL;
}
