/*
 * validate.h -- the loader's validation layer (private to the loader).
 *
 * With NX_HAL_VALIDATE set (to anything but "" or "0"), nxhal_plugin_open
 * hands out a wrapped function table that records every handle the plugin
 * makes, and which client made it, and turns double destroys, uses after
 * free, handles of another client, handles this plugin never made and leaks
 * at client_destroy into a report ("nx_hal validation: ...") on stderr and an
 * INVALID_ARGUMENT status, instead of calling the plugin with them.
 * NX_HAL_VALIDATE=abort also aborts after each report.
 */
#ifndef NX_HAL_CABI_VALIDATE_H_
#define NX_HAL_CABI_VALIDATE_H_

#include "nx_hal/nx_hal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The environment variable, and what its values mean. */
#define NXHAL_VALIDATE_ENV "NX_HAL_VALIDATE"

typedef enum nxhal_validate_mode {
  NXHAL_VALIDATE_OFF = 0,    /* unset, "" or "0": the plugin's own table */
  NXHAL_VALIDATE_REPORT = 1, /* any other value: report and refuse the bad call */
  NXHAL_VALIDATE_ABORT = 2   /* "abort": report, then abort() (for CI) */
} nxhal_validate_mode_t;

/* The mode NX_HAL_VALIDATE asks for now; read on each call so a process can
 * open plugins with and without it. Thread-safe as getenv is. */
nxhal_validate_mode_t nxhal_validate_mode(void);

/* The wrapped table for `api`, a table the loader has checked (ABI 1.x, every
 * 1.0 entry set). One per plugin table for the life of the process, never
 * freed: handles made through one nxhal_plugin_t of a library stay known to
 * every other, and objects outlive plugin handles (see nxhal_plugin_close).
 * Returns `api` itself, after a warning on stderr, when no wrapper can be
 * made (out of memory, or more distinct plugin tables than the layer has
 * slots for). Thread-safe. */
const nxhal_api_t* nxhal_validate_wrap(const nxhal_api_t* api, const char* path);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_CABI_VALIDATE_H_ */
