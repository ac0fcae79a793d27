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

/* Environment variable: directories searched first for plugins, ':'-separated. */
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

/* Like nxhal_plugin_open, for the first plugin called `name` on the search
 * path (see nxhal_plugin_search_path): a "libnxhal_<name>.so" in a directory
 * of NX_HAL_PLUGIN_PATH, or the library a "<name>.json" manifest names.
 * NOT_FOUND lists the directories searched and each file skipped with why.
 * Caller owns *out_plugin. Thread-safe. */
nxhal_status_t* nxhal_plugin_open_by_name(const char* name, nxhal_plugin_t** out_plugin);

/* Called for each plugin library found; return nonzero to stop. `name` and
 * `path` are borrowed for the duration of the call. */
typedef int (*nxhal_plugin_visit_fn)(const char* name, const char* path, void* user_data);

/* Visits each plugin name once, the first found in search order, with its
 * resolved library path, without loading it; skipped files are not visited
 * (nxhal_plugin_scan shows them). Thread-safe. */
nxhal_status_t* nxhal_plugin_enumerate(nxhal_plugin_visit_fn visit, void* user_data);

/* NX_HAL_VALIDATE, an environment variable read by nxhal_plugin_open: the
 * validation layer.
 * Unset, "" or "0": nxhal_plugin_api returns the plugin's own table, and
 * validation costs nothing. Any other value: it returns a wrapping table (one
 * per plugin table for the life of the process, shared by every handle of
 * that library) that records the handles the plugin makes and which client
 * made each. A destroyed handle passed to any entry (double destroy, use
 * after free), a handle of another client than the other arguments', a
 * handle of the wrong kind and an address the plugin never made (looked up,
 * never dereferenced) are reported instead of passed on: the entry returns
 * INVALID_ARGUMENT, freed through the same table's status_free, and the same
 * line goes to stderr, both "nx_hal validation: <entry>: <kind> <address> ...";
 * void entries report on stderr only. client_destroy reports the buffers,
 * executables and events of that client still alive, then destroys it.
 * "abort" also aborts after each report. Each call then takes a mutex and a
 * hash lookup per handle argument. */

/* The negotiated table, owned by the plugin handle: the plugin's own, or its
 * validating wrapper under NX_HAL_VALIDATE (see above). Thread-safe. */
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

/* --- The search path (added with manifests; appended) -------------------
 *
 * Directories, in order (the first plugin of a name wins; within one
 * directory, by name, a bare library before a manifest): each directory of
 * NX_HAL_PLUGIN_PATH (bare "libnxhal_<name>.so" files and "<name>.json"
 * manifests); then manifests only in $VIRTUAL_ENV/share/nx_hal/plugins,
 * $CONDA_PREFIX/share/nx_hal/plugins, the environment the loader is installed
 * in (<prefix>/share/nx_hal/plugins when it sits in
 * <prefix>/lib/python3.X/site-packages/nx_hal[/lib]), the install prefix it
 * was built for (<datadir>/nx_hal/plugins) or, outside a Python environment,
 * the prefix above its own directory (<dir>/../share/nx_hal/plugins),
 * $XDG_DATA_HOME/nx_hal/plugins (default ~/.local/share/nx_hal/plugins) and
 * each of $XDG_DATA_DIRS (default /usr/local/share:/usr/share) +
 * /nx_hal/plugins. The environment is read on each call. Relative entries
 * are ignored (never the working directory); a directory listed twice is
 * searched once. Each directory searched, and each manifest and library
 * found in it (a symlink: its target and the target's directory), must be
 * owned by the effective user or root and writable by neither group nor
 * others, or its files are skipped with a reason naming the path. */

/* Called for each directory searched; `directory` and `origin` (the variable
 * or rule that put it there, e.g. "VIRTUAL_ENV") are borrowed for the call.
 * Return nonzero to stop. */
typedef int (*nxhal_search_dir_visit_fn)(const char* directory, const char* origin,
                                         void* user_data);

/* Visits the directories searched, in order, whether they exist or not.
 * Thread-safe. */
nxhal_status_t* nxhal_plugin_search_path(nxhal_search_dir_visit_fn visit, void* user_data);

/* One file the search found. Every string is borrowed for the visit. */
typedef struct nxhal_plugin_entry {
  size_t struct_size;      /* sizeof(nxhal_plugin_entry_t) of the loader */
  const char* name;        /* plugin name (the file's, when the manifest is unreadable) */
  const char* library;     /* resolved library path; NULL when it was not resolved */
  const char* source;      /* the manifest or bare library file */
  const char* directory;   /* the search directory it is in */
  const char* origin;      /* why that directory is searched, e.g. "NX_HAL_PLUGIN_PATH" */
  const char* abi_version; /* the manifest's "abi_version"; "" for a bare library */
  const char* skip_reason; /* NULL: the plugin open_by_name would load; else why not */
} nxhal_plugin_entry_t;

/* Return nonzero to stop. */
typedef int (*nxhal_plugin_entry_fn)(const nxhal_plugin_entry_t* entry, void* user_data);

/* Visits every candidate file in search order, usable or not, without
 * loading any: skipped ones (untrusted, malformed, other ABI major, library
 * missing, shadowed by an earlier plugin of the same name) carry their
 * reason. Read entry fields only below entry->struct_size. Thread-safe. */
nxhal_status_t* nxhal_plugin_scan(nxhal_plugin_entry_fn visit, void* user_data);

/* --- Sealed serialized executables (added with sealing; appended) ---------
 *
 * A serialized executable is native code (XLA CPU's is machine code):
 * loading one runs what it holds, as unpickling runs what a pickle holds. So
 * the bytes a plugin's executable_serialize gives are sealed before they
 * leave the process, and only blobs this user sealed are handed to a
 * plugin's executable_deserialize unless the caller trusts their source.
 * The rule and the format are the Python package's (Executable.serialize,
 * Device.load_executable): blobs move between Python, C and C++ both ways.
 *
 * Format: NXHAL_SEAL_MAGIC, a 32-byte tag, the plugin's bytes. The tag is
 * HMAC-SHA-256 (RFC 2104) keyed by this user's key over "nx_hal executable
 * 1\0", the payload's length (8 bytes, little-endian) and the payload.
 *
 * The key: 32 random bytes as 64 hex digits in <config>/secret, where
 * <config> is $XDG_CONFIG_HOME/nx_hal, else $HOME/.config/nx_hal (either
 * only when absolute), else <per-user>/config with <per-user> =
 * ($XDG_RUNTIME_DIR when absolute, else the temporary directory: $TMPDIR,
 * $TEMP, $TMP, /tmp, ...)/nx_hal-<euid>, which must be this user's and
 * writable by no one else. <config> is made 0700 when missing and must be a
 * directory of this user writable by no group or other (unless sticky),
 * not reached through a final symbolic link. The key file is made on first
 * use with O_EXCL and mode 0600, and on every read opened without following
 * a symbolic link and refused unless it is a regular file of this user that
 * no group or other may read or write, of exactly 64 hex digits. The
 * environment is read on each call; nothing is cached. */

#define NXHAL_SEAL_MAGIC "NXHALEX1"
#define NXHAL_SEAL_MAGIC_SIZE 8
#define NXHAL_SEAL_TAG_SIZE 32
#define NXHAL_SEAL_HEADER_SIZE 40 /* NXHAL_SEAL_MAGIC_SIZE + NXHAL_SEAL_TAG_SIZE */

/* `blob` (`size` bytes, borrowed; NULL only when size is 0) sealed with this
 * user's key, made on first use. A key that cannot be read or made is
 * FAILED_PRECONDITION naming the file and why (Python then writes the bare
 * bytes with a warning; C is told instead). Caller owns *out_sealed: free it
 * with nxhal_loader_free. Thread-safe. */
nxhal_status_t* nxhal_executable_seal(const void* blob, size_t size, void** out_sealed,
                                      size_t* out_size);

/* The plugin's bytes of `data` (`size` bytes): of a sealed blob whose tag
 * checks with this user's key; with `trusted` nonzero, of any blob (a sealed
 * one's payload, or all of an unsealed one) without reading the key.
 * Otherwise INVALID_ARGUMENT, "refusing to load a serialized executable:
 * <why>...". *out_payload is borrowed from `data` (no copy). Thread-safe. */
nxhal_status_t* nxhal_executable_unseal(const void* data, size_t size, int trusted,
                                        const void** out_payload, size_t* out_payload_size);

/* The key file's path under the current environment; nothing is made.
 * Caller owns *out_path: free it with nxhal_loader_free. Thread-safe. */
nxhal_status_t* nxhal_executable_key_path(char** out_path);

/* Frees memory the loader allocated for the caller (sealed blobs, paths).
 * NULL is a no-op. Thread-safe. */
void nxhal_loader_free(void* memory);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_NX_HAL_LOADER_H_ */
