/*
 * nx_hal_loader.h -- loading nx_hal plugins from C and C++ programs.
 *
 * The loader opens a plugin library, negotiates the ABI version and checks
 * the function table before handing it out. Statuses returned by the
 * functions here are loader statuses: free them with nxhal_loader_status_free.
 * Statuses returned through a plugin's table are freed with that table's
 * status_free.
 */
#ifndef NX_HAL_NX_HAL_LOADER_H_
#define NX_HAL_NX_HAL_LOADER_H_

#include "nx_hal/nx_hal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Environment variable: directories searched for plugins, ':'-separated. */
#define NXHAL_PLUGIN_PATH_ENV "NX_HAL_PLUGIN_PATH"

/* A loaded, negotiated plugin. Opaque; owned by the caller. */
typedef struct nxhal_plugin nxhal_plugin_t;

/* Opens the library at `path`, calls its nxhal_query with this header's
 * version, and checks the answer: a dlopen failure is UNAVAILABLE carrying
 * the dlerror text (which names a missing dependency); a missing query
 * symbol is NOT_FOUND; a refused or incompatible version, or a table smaller
 * than ABI 1.0's, is ABI_MISMATCH naming both versions. Caller owns
 * *out_plugin. Thread-safe. */
nxhal_status_t* nxhal_plugin_open(const char* path, nxhal_plugin_t** out_plugin);

/* Like nxhal_plugin_open, for the first "libnxhal_<name>.so" found in the
 * directories of NX_HAL_PLUGIN_PATH; NOT_FOUND listing the directories
 * searched when there is none. Thread-safe. */
nxhal_status_t* nxhal_plugin_open_by_name(const char* name, nxhal_plugin_t** out_plugin);

/* Called for each plugin library found; return nonzero to stop. `name` and
 * `path` are borrowed for the duration of the call. */
typedef int (*nxhal_plugin_visit_fn)(const char* name, const char* path, void* user_data);

/* Visits every "libnxhal_<name>.so" in NX_HAL_PLUGIN_PATH, in path order,
 * without loading them. Thread-safe. */
nxhal_status_t* nxhal_plugin_enumerate(nxhal_plugin_visit_fn visit, void* user_data);

/* The negotiated table, owned by the plugin handle. Thread-safe. */
const nxhal_api_t* nxhal_plugin_api(const nxhal_plugin_t* plugin);

/* The negotiated version: min(host, plugin) minor within the same major. */
uint32_t nxhal_plugin_abi_major(const nxhal_plugin_t* plugin);
uint32_t nxhal_plugin_abi_minor(const nxhal_plugin_t* plugin);

/* The path it was opened from, owned by the handle. Thread-safe. */
const char* nxhal_plugin_path(const nxhal_plugin_t* plugin);

/* Frees the handle. The library itself stays loaded for the life of the
 * process: unloading vendor SDKs is a known source of crashes at exit, and
 * objects made through the table may outlive the handle. NULL is a no-op. */
void nxhal_plugin_close(nxhal_plugin_t* plugin);

/* Loader statuses. Thread-safe; NULL is success. */
nxhal_status_code_t nxhal_loader_status_code(const nxhal_status_t* status);
const char* nxhal_loader_status_message(const nxhal_status_t* status);
void nxhal_loader_status_free(nxhal_status_t* status);

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" outside the enum. Static string. */
const char* nxhal_status_code_name(nxhal_status_code_t code);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_NX_HAL_LOADER_H_ */
