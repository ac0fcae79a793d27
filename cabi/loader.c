/* loader.c -- opening nx_hal plugins from C: dlopen, negotiation, table checks. */
#define _POSIX_C_SOURCE 200809L /* strdup, dirent under -std=c99 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nx_hal/nx_hal_loader.h"
#include "nx_hal/nx_hal_plugin.h"

/* The version this loader speaks. Tests build it as a newer host
 * (-DNXHAL_LOADER_HOST_MINOR=1) to check plugins older than their host. */
#ifndef NXHAL_LOADER_HOST_MAJOR
#define NXHAL_LOADER_HOST_MAJOR NXHAL_ABI_VERSION_MAJOR
#endif
#ifndef NXHAL_LOADER_HOST_MINOR
#define NXHAL_LOADER_HOST_MINOR NXHAL_ABI_VERSION_MINOR
#endif

/* Exported from a shared libnxhal_loader built with hidden visibility. */
#define NXHAL_LOADER_API NXHAL_EXPORT

struct nxhal_plugin {
  char* path;             /* owned */
  const nxhal_api_t* api; /* static in the plugin; the library is never unloaded */
  uint32_t abi_major;     /* negotiated */
  uint32_t abi_minor;
};

#define NXHAL_HOST_VERSION_FMT "host ABI %u.%u"
#define NXHAL_HOST_VERSION_ARGS (unsigned)NXHAL_LOADER_HOST_MAJOR, (unsigned)NXHAL_LOADER_HOST_MINOR

/* Reads and frees a refusal status through the frozen prefix, then returns an
 * ABI_MISMATCH loader status naming both versions. */
static nxhal_status_t* nxhal_loader_refusal(const char* path, const nxhal_api_t* api,
                                            nxhal_status_t* refusal) {
  nxhal_status_t* result;
  if (api == NULL || api->struct_size < NXHAL_API_PREFIX_SIZE || api->status_free == NULL ||
      api->status_code == NULL || api->status_message == NULL) {
    /* Unreadable: the status leaks rather than being freed by the wrong library. */
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' refused " NXHAL_HOST_VERSION_FMT
                             " and gave no readable table (plugin ABI unknown)",
                             path, NXHAL_HOST_VERSION_ARGS);
  }
  result = nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' (ABI %u.%u) refused " NXHAL_HOST_VERSION_FMT ": %s: %s",
                             path, (unsigned)api->abi_major, (unsigned)api->abi_minor,
                             NXHAL_HOST_VERSION_ARGS, nxhal_status_code_name(api->status_code(refusal)),
                             api->status_message(refusal));
  api->status_free(refusal);
  return result;
}

/* ABI_MISMATCH naming the first NULL entry of the 1.0 table, or NULL. */
static nxhal_status_t* nxhal_loader_check_entries(const char* path, const nxhal_api_t* api) {
  const char* missing = NULL;
#define NXHAL_CHECK_ENTRY(field) \
  if (missing == NULL && api->field == NULL) missing = #field;
  NXHAL_CHECK_ENTRY(status_free)
  NXHAL_CHECK_ENTRY(status_code)
  NXHAL_CHECK_ENTRY(status_message)
  NXHAL_CHECK_ENTRY(plugin_info)
  NXHAL_CHECK_ENTRY(client_create)
  NXHAL_CHECK_ENTRY(client_destroy)
  NXHAL_CHECK_ENTRY(client_diagnostics)
  NXHAL_CHECK_ENTRY(client_device_count)
  NXHAL_CHECK_ENTRY(client_device)
  NXHAL_CHECK_ENTRY(device_info)
  NXHAL_CHECK_ENTRY(device_attribute_count)
  NXHAL_CHECK_ENTRY(device_attribute)
  NXHAL_CHECK_ENTRY(device_memory_stats)
  NXHAL_CHECK_ENTRY(device_set_memory_limit)
  NXHAL_CHECK_ENTRY(buffer_create)
  NXHAL_CHECK_ENTRY(buffer_from_host)
  NXHAL_CHECK_ENTRY(buffer_to_host)
  NXHAL_CHECK_ENTRY(buffer_info)
  NXHAL_CHECK_ENTRY(buffer_destroy)
  NXHAL_CHECK_ENTRY(buffer_to_dlpack)
  NXHAL_CHECK_ENTRY(buffer_from_dlpack)
  NXHAL_CHECK_ENTRY(executable_compile)
  NXHAL_CHECK_ENTRY(executable_destroy)
  NXHAL_CHECK_ENTRY(executable_io_count)
  NXHAL_CHECK_ENTRY(executable_io_info)
  NXHAL_CHECK_ENTRY(executable_execute)
  NXHAL_CHECK_ENTRY(executable_serialize)
  NXHAL_CHECK_ENTRY(executable_deserialize)
  NXHAL_CHECK_ENTRY(blob_free)
  NXHAL_CHECK_ENTRY(event_is_ready)
  NXHAL_CHECK_ENTRY(event_await)
  NXHAL_CHECK_ENTRY(event_on_ready)
  NXHAL_CHECK_ENTRY(event_destroy)
#undef NXHAL_CHECK_ENTRY
  if (missing == NULL) return NULL;
  return nxhal_status_make(NXHAL_ABI_MISMATCH,
                           "plugin '%s' has a NULL '%s' entry in its ABI %u.%u table "
                           "(every entry must be set)",
                           path, missing, (unsigned)api->abi_major, (unsigned)api->abi_minor);
}

/* Checks the table nxhal_query returned without a status. */
static nxhal_status_t* nxhal_loader_check_table(const char* path, const nxhal_api_t* api) {
  if (api == NULL) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' accepted " NXHAL_HOST_VERSION_FMT
                             " but returned no table",
                             path, NXHAL_HOST_VERSION_ARGS);
  }
  if (api->struct_size < NXHAL_API_PREFIX_SIZE) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' table is %zu bytes, smaller than any ABI's prefix "
                             "(%zu); plugin ABI unknown, " NXHAL_HOST_VERSION_FMT,
                             path, api->struct_size, (size_t)NXHAL_API_PREFIX_SIZE,
                             NXHAL_HOST_VERSION_ARGS);
  }
  if (api->abi_major != NXHAL_LOADER_HOST_MAJOR) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' speaks ABI %u.%u, " NXHAL_HOST_VERSION_FMT
                             " (major versions differ)",
                             path, (unsigned)api->abi_major, (unsigned)api->abi_minor,
                             NXHAL_HOST_VERSION_ARGS);
  }
  if (api->struct_size < NXHAL_API_1_0_SIZE) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' (ABI %u.%u) table is %zu bytes, smaller than ABI "
                             "1.0's %zu; " NXHAL_HOST_VERSION_FMT,
                             path, (unsigned)api->abi_major, (unsigned)api->abi_minor,
                             api->struct_size, (size_t)NXHAL_API_1_0_SIZE,
                             NXHAL_HOST_VERSION_ARGS);
  }
  return nxhal_loader_check_entries(path, api);
}

/* Contracts of the exported functions are in nx_hal_loader.h. */
NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_open(const char* path,
                                                   nxhal_plugin_t** out_plugin) {
  void* library;
  void* symbol;
  nxhal_query_fn query;
  nxhal_query_args_t args;
  const nxhal_api_t* api = NULL;
  nxhal_status_t* status;
  nxhal_plugin_t* plugin;
  const uint32_t host_minor = NXHAL_LOADER_HOST_MINOR;
  if (out_plugin == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_plugin is NULL");
  *out_plugin = NULL;
  if (path == NULL || path[0] == '\0') {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "plugin path is NULL or empty");
  }
  /* RTLD_LOCAL: plugins bundle their own helpers and SDK symbols; keep them apart. */
  library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    const char* error = dlerror();
    return nxhal_status_make(NXHAL_UNAVAILABLE, "cannot load plugin '%s': %s", path,
                             error != NULL ? error : "unknown dlopen error");
  }
  dlerror();
  symbol = dlsym(library, NXHAL_QUERY_SYMBOL);
  if (symbol == NULL) {
    /* Never dlclose: see nxhal_plugin_close. */
    return nxhal_status_make(NXHAL_NOT_FOUND,
                             "'%s' does not export " NXHAL_QUERY_SYMBOL
                             " (not an nx_hal plugin)",
                             path);
  }
  /* POSIX guarantees this conversion for dlsym results. */
  memcpy(&query, &symbol, sizeof(query));
  args.struct_size = sizeof(args);
  args.host_abi_major = NXHAL_LOADER_HOST_MAJOR;
  args.host_abi_minor = NXHAL_LOADER_HOST_MINOR;
  status = query(&args, &api);
  if (status != NULL) return nxhal_loader_refusal(path, api, status);
  status = nxhal_loader_check_table(path, api);
  if (status != NULL) return status;
  plugin = (nxhal_plugin_t*)calloc(1, sizeof(*plugin));
  if (plugin == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  plugin->path = strdup(path);
  if (plugin->path == NULL) {
    free(plugin);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  plugin->api = api;
  plugin->abi_major = api->abi_major;
  plugin->abi_minor = api->abi_minor < host_minor ? api->abi_minor : host_minor;
  *out_plugin = plugin;
  return NULL;
}

/* Iterates NX_HAL_PLUGIN_PATH: calls `fn` on each non-empty directory until it
 * returns nonzero. Returns 0 if the variable is unset. */
typedef int (*nxhal_dir_fn)(const char* dir, void* user_data);
/* Reads the environment on each call, so tests and programs may change it. */
static int nxhal_for_each_dir(nxhal_dir_fn fn, void* user_data) {
  const char* env = getenv(NXHAL_PLUGIN_PATH_ENV);
  char* copy;
  char* cursor;
  int stop = 0;
  if (env == NULL) return 0;
  copy = strdup(env);
  if (copy == NULL) return 0;
  cursor = copy;
  while (!stop && cursor != NULL) {
    char* next = strchr(cursor, ':');
    if (next != NULL) *next++ = '\0';
    if (cursor[0] != '\0') stop = fn(cursor, user_data);
    cursor = next;
  }
  free(copy);
  return stop;
}

/* Joins dir + "/" + file into a new string (caller frees), or NULL. */
static char* nxhal_join_path(const char* dir, const char* file) {
  size_t dir_len = strlen(dir);
  size_t file_len = strlen(file);
  char* path = (char*)malloc(dir_len + file_len + 2);
  if (path == NULL) return NULL;
  memcpy(path, dir, dir_len);
  path[dir_len] = '/';
  memcpy(path + dir_len + 1, file, file_len + 1);
  return path;
}

typedef struct nxhal_find_state {
  const char* file;       /* "libnxhal_<name>.so" */
  char* found;            /* owned; first match */
  char searched[1024];    /* "dir1, dir2" for the NOT_FOUND message */
  size_t searched_len;
} nxhal_find_state_t;

/* nxhal_for_each_dir step for open_by_name: records `dir`, stops at the file. */
static int nxhal_find_in_dir(const char* dir, void* user_data) {
  nxhal_find_state_t* state = (nxhal_find_state_t*)user_data;
  struct stat info;
  char* path;
  size_t room = sizeof(state->searched) - state->searched_len;
  size_t dir_len = strlen(dir);
  if (room > dir_len + 3) {
    if (state->searched_len > 0) {
      memcpy(state->searched + state->searched_len, ", ", 2);
      state->searched_len += 2;
    }
    memcpy(state->searched + state->searched_len, dir, dir_len + 1);
    state->searched_len += dir_len;
  }
  path = nxhal_join_path(dir, state->file);
  if (path == NULL) return 0;
  if (stat(path, &info) == 0 && S_ISREG(info.st_mode)) {
    state->found = path;
    return 1;
  }
  free(path);
  return 0;
}

NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_open_by_name(const char* name,
                                                           nxhal_plugin_t** out_plugin) {
  nxhal_find_state_t state;
  char file[256];
  nxhal_status_t* status;
  if (out_plugin == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_plugin is NULL");
  *out_plugin = NULL;
  if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL ||
      strlen(name) > sizeof(file) - 20) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "plugin name must be non-empty, short and contain no '/'");
  }
  memset(&state, 0, sizeof(state));
  strcpy(file, "libnxhal_");
  strcat(file, name);
  strcat(file, ".so");
  state.file = file;
  nxhal_for_each_dir(nxhal_find_in_dir, &state);
  if (state.found == NULL) {
    if (getenv(NXHAL_PLUGIN_PATH_ENV) == NULL) {
      return nxhal_status_make(NXHAL_NOT_FOUND, "no %s: " NXHAL_PLUGIN_PATH_ENV " is not set",
                               file);
    }
    return nxhal_status_make(NXHAL_NOT_FOUND,
                             "no %s in " NXHAL_PLUGIN_PATH_ENV " (searched: %s)", file,
                             state.searched_len > 0 ? state.searched : "no directories");
  }
  status = nxhal_plugin_open(state.found, out_plugin);
  free(state.found);
  return status;
}

typedef struct nxhal_enumerate_state {
  nxhal_plugin_visit_fn visit;
  void* user_data;
} nxhal_enumerate_state_t;

/* qsort comparator over char* file names. */
static int nxhal_compare_names(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* True for "libnxhal_<name>.so" with a non-empty name. */
static int nxhal_is_plugin_file(const char* file) {
  size_t len = strlen(file);
  return len > 12 && strncmp(file, "libnxhal_", 9) == 0 && strcmp(file + len - 3, ".so") == 0;
}

/* nxhal_for_each_dir step for enumerate: visits the dir's plugins, sorted. */
static int nxhal_enumerate_dir(const char* dir, void* user_data) {
  nxhal_enumerate_state_t* state = (nxhal_enumerate_state_t*)user_data;
  DIR* handle = opendir(dir);
  struct dirent* entry;
  char** files = NULL;
  size_t count = 0, capacity = 0, i;
  int stop = 0;
  if (handle == NULL) return 0; /* a missing directory is not an error */
  while ((entry = readdir(handle)) != NULL) {
    char* copy;
    if (!nxhal_is_plugin_file(entry->d_name)) continue;
    if (count == capacity) {
      size_t new_capacity = capacity == 0 ? 8 : capacity * 2;
      char** grown = (char**)realloc(files, new_capacity * sizeof(*files));
      if (grown == NULL) break;
      files = grown;
      capacity = new_capacity;
    }
    copy = strdup(entry->d_name);
    if (copy == NULL) break;
    files[count++] = copy;
  }
  closedir(handle);
  /* readdir order is arbitrary; sort for a stable listing. */
  if (count > 0) qsort(files, count, sizeof(*files), nxhal_compare_names);
  for (i = 0; i < count; ++i) {
    if (!stop) {
      char* path = nxhal_join_path(dir, files[i]);
      size_t name_len = strlen(files[i]) - 12;
      char name[256];
      if (path != NULL && name_len < sizeof(name)) {
        memcpy(name, files[i] + 9, name_len);
        name[name_len] = '\0';
        stop = state->visit(name, path, state->user_data);
      }
      free(path);
    }
    free(files[i]);
  }
  free(files);
  return stop;
}

NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_enumerate(nxhal_plugin_visit_fn visit,
                                                        void* user_data) {
  nxhal_enumerate_state_t state;
  if (visit == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "visit is NULL");
  state.visit = visit;
  state.user_data = user_data;
  nxhal_for_each_dir(nxhal_enumerate_dir, &state);
  return NULL;
}

NXHAL_LOADER_API const nxhal_api_t* nxhal_plugin_api(const nxhal_plugin_t* plugin) {
  return plugin == NULL ? NULL : plugin->api;
}

NXHAL_LOADER_API uint32_t nxhal_plugin_abi_major(const nxhal_plugin_t* plugin) {
  return plugin == NULL ? 0 : plugin->abi_major;
}

NXHAL_LOADER_API uint32_t nxhal_plugin_abi_minor(const nxhal_plugin_t* plugin) {
  return plugin == NULL ? 0 : plugin->abi_minor;
}

NXHAL_LOADER_API const char* nxhal_plugin_path(const nxhal_plugin_t* plugin) {
  return plugin == NULL ? NULL : plugin->path;
}

NXHAL_LOADER_API void nxhal_plugin_close(nxhal_plugin_t* plugin) {
  /* The library stays loaded on purpose: see the header. */
  if (plugin == NULL) return;
  free(plugin->path);
  free(plugin);
}

NXHAL_LOADER_API nxhal_status_code_t nxhal_loader_status_code(const nxhal_status_t* status) {
  return nxhal_status_code(status);
}

NXHAL_LOADER_API const char* nxhal_loader_status_message(const nxhal_status_t* status) {
  return nxhal_status_message(status);
}

NXHAL_LOADER_API void nxhal_loader_status_free(nxhal_status_t* status) {
  nxhal_status_free(status);
}

NXHAL_LOADER_API const char* nxhal_status_code_name(nxhal_status_code_t code) {
  switch (code) {
    case NXHAL_OK: return "OK";
    case NXHAL_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case NXHAL_NOT_FOUND: return "NOT_FOUND";
    case NXHAL_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case NXHAL_UNAVAILABLE: return "UNAVAILABLE";
    case NXHAL_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case NXHAL_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case NXHAL_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case NXHAL_INTERNAL: return "INTERNAL";
    case NXHAL_ABI_MISMATCH: return "ABI_MISMATCH";
    case NXHAL_CANCELLED: return "CANCELLED";
  }
  return "UNKNOWN";
}
