/* negotiate.c -- the body of a plugin's nxhal_query. */
#include <stdarg.h>

#include "nx_hal/nx_hal_plugin.h"

/* The oldest ABI minor a host of this major negotiated with this plugin (one
 * copy per plugin: the helpers are linked into each). Several hosts may load
 * one plugin in a process (Python and a C loader); the oldest decides what
 * every caller can be told. Before any host negotiates, minor 0 is assumed. */
static uint32_t nxhal_host_minor = UINT32_MAX;

static uint32_t nxhal_negotiated_minor(void) {
  uint32_t minor = __atomic_load_n(&nxhal_host_minor, __ATOMIC_RELAXED);
  return minor == UINT32_MAX ? 0 : minor;
}

static void nxhal_note_host_minor(uint32_t minor) {
  uint32_t seen = __atomic_load_n(&nxhal_host_minor, __ATOMIC_RELAXED);
  while (minor < seen && !__atomic_compare_exchange_n(&nxhal_host_minor, &seen, minor, 0,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

nxhal_status_code_t nxhal_invalid_program_code(void) {
  return nxhal_negotiated_minor() >= 2 ? NXHAL_INVALID_PROGRAM : NXHAL_INVALID_ARGUMENT;
}

nxhal_status_t* nxhal_status_invalid_program(const char* format, ...) {
  nxhal_status_t* status;
  va_list args;
  va_start(args, format);
  status = nxhal_status_makev(nxhal_invalid_program_code(), format, args);
  va_end(args);
  return status;
}

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
  status = nxhal_check_struct(args, NXHAL_QUERY_ARGS_1_0_SIZE, "query args");
  if (status != NULL) return status;
  if (args->host_abi_major != api->abi_major) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin speaks nx_hal ABI %u.%u, host speaks ABI %u.%u "
                             "(major versions differ)",
                             (unsigned)api->abi_major, (unsigned)api->abi_minor,
                             (unsigned)args->host_abi_major, (unsigned)args->host_abi_minor);
  }
  nxhal_note_host_minor(args->host_abi_minor);
  return NULL;
}
