/* pjrt_library.c -- loading PJRT plugin libraries, with the guards PJRT needs
 * before its first call: the libtpu metadata-server hang, API version skew,
 * missing table entries. */
#define _GNU_SOURCE /* setenv, RTLD_* under -std=c99 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Loaded libraries, newest first; guarded by tpu_library_mutex. Entries are
 * never freed: the libraries stay loaded for the life of the process. */
static pthread_mutex_t tpu_library_mutex = PTHREAD_MUTEX_INITIALIZER;
static tpu_library_t* tpu_libraries = NULL;

int tpu_tpu_present(void) {
  DIR* dir = opendir("/sys/bus/pci/devices");
  struct dirent* entry;
  int found = 0;
  if (dir == NULL) return 0;
  while (!found && (entry = readdir(dir)) != NULL) {
    char path[512];
    char vendor[32] = {0};
    FILE* file;
    if (entry->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", entry->d_name);
    file = fopen(path, "r");
    if (file == NULL) continue;
    if (fgets(vendor, sizeof(vendor), file) != NULL && strncmp(vendor, "0x1ae0", 6) == 0) {
      found = 1;
    }
    fclose(file);
  }
  closedir(dir);
  return found;
}

/* Formats an int64-list attribute ("1.9.3"). */
static char* tpu_version_list(const int64_t* values, size_t count) {
  char text[128] = {0};
  size_t used = 0, i;
  for (i = 0; i < count && used + 24 < sizeof(text); ++i) {
    used += (size_t)snprintf(text + used, sizeof(text) - used, "%s%lld", i ? "." : "",
                             (long long)values[i]);
  }
  return tpu_strdup(text);
}

/* Reads xla_version and the StableHLO versions the plugin states. */
static void tpu_library_read_attributes(tpu_library_t* lib) {
  PJRT_Plugin_Attributes_Args args;
  size_t i;
  lib->xla_version = lib->stablehlo_version = lib->stablehlo_min_version = NULL;
  if (TPU_HAS_FN(lib->api, PJRT_Plugin_Attributes)) {
    memset(&args, 0, sizeof(args));
    args.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
    PJRT_Error* error = lib->api->PJRT_Plugin_Attributes(&args);
    if (error == NULL) {
      for (i = 0; i < args.num_attributes; ++i) {
        const PJRT_NamedValue* value = &args.attributes[i];
        char** slot = NULL;
        if (value->name == NULL) continue;
        if (value->name_size == 11 && memcmp(value->name, "xla_version", 11) == 0) {
          slot = &lib->xla_version;
        } else if (value->name_size == 25 &&
                   memcmp(value->name, "stablehlo_current_version", 25) == 0) {
          slot = &lib->stablehlo_version;
        } else if (value->name_size == 25 &&
                   memcmp(value->name, "stablehlo_minimum_version", 25) == 0) {
          slot = &lib->stablehlo_min_version;
        }
        if (slot == NULL || *slot != NULL) continue;
        if (value->type == PJRT_NamedValue_kString) {
          *slot = tpu_strndup(value->string_value, value->value_size);
        } else if (value->type == PJRT_NamedValue_kInt64) {
          *slot = tpu_sprintf("%lld", (long long)value->int64_value);
        } else if (value->type == PJRT_NamedValue_kInt64List) {
          *slot = tpu_version_list(value->int64_array_value, value->value_size);
        }
      }
    } else {
      free(tpu_take_error_message(lib->api, error));
    }
  }
  if (lib->xla_version == NULL) lib->xla_version = tpu_strdup("");
  if (lib->stablehlo_version == NULL) lib->stablehlo_version = tpu_strdup("");
  if (lib->stablehlo_min_version == NULL) lib->stablehlo_min_version = tpu_strdup("");
}

/* Entries this plugin calls unconditionally; a table missing one is refused
 * at load rather than jumped through later. */
static const char* tpu_missing_required(const PJRT_Api* api) {
#define TPU_REQUIRE(fn) \
  if (!TPU_HAS_FN(api, fn)) return #fn
  TPU_REQUIRE(PJRT_Error_Destroy);
  TPU_REQUIRE(PJRT_Error_Message);
  TPU_REQUIRE(PJRT_Error_GetCode);
  TPU_REQUIRE(PJRT_Plugin_Initialize);
  TPU_REQUIRE(PJRT_Event_Destroy);
  TPU_REQUIRE(PJRT_Event_Await);
  TPU_REQUIRE(PJRT_Event_OnReady);
  TPU_REQUIRE(PJRT_Client_Create);
  TPU_REQUIRE(PJRT_Client_Destroy);
  TPU_REQUIRE(PJRT_Client_PlatformName);
  TPU_REQUIRE(PJRT_Client_PlatformVersion);
  TPU_REQUIRE(PJRT_Client_AddressableDevices);
  TPU_REQUIRE(PJRT_Client_Compile);
  TPU_REQUIRE(PJRT_Client_BufferFromHostBuffer);
  TPU_REQUIRE(PJRT_Device_GetDescription);
  TPU_REQUIRE(PJRT_DeviceDescription_Kind);
  TPU_REQUIRE(PJRT_DeviceDescription_Id);
  TPU_REQUIRE(PJRT_Executable_Destroy);
  TPU_REQUIRE(PJRT_Executable_NumOutputs);
  TPU_REQUIRE(PJRT_LoadedExecutable_Destroy);
  TPU_REQUIRE(PJRT_LoadedExecutable_GetExecutable);
  TPU_REQUIRE(PJRT_LoadedExecutable_Execute);
  TPU_REQUIRE(PJRT_Buffer_Destroy);
  TPU_REQUIRE(PJRT_Buffer_ElementType);
  TPU_REQUIRE(PJRT_Buffer_Dimensions);
  TPU_REQUIRE(PJRT_Buffer_ToHostBuffer);
#undef TPU_REQUIRE
  return NULL;
}

typedef const PJRT_Api* (*tpu_get_api_fn)(void);

/* Records a library whose load failed after dlopen succeeded, so a later
 * client does not call its PJRT_Plugin_Initialize a second time. Called with
 * tpu_library_mutex held; takes `reason`. */
static void tpu_library_remember_failure(const char* path, char* reason) {
  tpu_library_t* lib = (tpu_library_t*)calloc(1, sizeof(*lib));
  if (lib == NULL) return;
  lib->path = tpu_strdup(path);
  lib->failure = tpu_strdup(reason);
  lib->next = tpu_libraries;
  tpu_libraries = lib;
}

/* The library already loaded (or already refused) from `path`, or NULL.
 * Called with tpu_library_mutex held. */
static tpu_library_t* tpu_library_find(const char* path) {
  tpu_library_t* lib;
  for (lib = tpu_libraries; lib != NULL; lib = lib->next) {
    if (strcmp(lib->path, path) == 0) return lib;
  }
  return NULL;
}

/* Guard: off a TPU VM libtpu's initialisation retries the GCE metadata
 * server for minutes. Setting this before the library is loaded makes it
 * fail at once instead. A value the user set is kept. Called with the
 * library mutex held: setenv is not thread-safe against other setenvs here. */
static void tpu_guard_environment(void) {
  if (tpu_tpu_present()) return;
  setenv("TPU_SKIP_MDS_QUERY", "1", 0);
  /* Without a TPU there is nothing to share, but libtpu still takes a
   * machine-wide lockfile, so a second process probing it (our probe
   * child, a test runner, another application) would get "accessing libtpu
   * multi-process lockfile" instead of libtpu's real reason. */
  setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1", 0);
  /* Off a TPU libtpu's log files say only that it found none, yet every
   * process that loads it adds two to /tmp/tpu_logs (to $TMPDIR itself where
   * that is set), which grows without bound; its reason reaches the
   * diagnostics anyway. Its logs go to stderr
   * instead, which NX_HAL_VENDOR_LOGS=1 shows, and its log folder is one that
   * exists (libtpu makes the folder even when it writes no file there).
   * "TPU_LOG_DIR=disabled" is no such switch: the files then land in $TMPDIR
   * itself. A user who named a log folder or libtpu flags keeps them. */
  if (getenv("TPU_LOG_DIR") == NULL && getenv("LIBTPU_INIT_ARGS") == NULL) {
    const char* temp = getenv("TMPDIR");
    setenv("LIBTPU_INIT_ARGS", "--logtostderr", 1);
    setenv("TPU_LOG_DIR", temp != NULL && *temp ? temp : "/tmp", 1);
  }
}

/* Checks the table of a dlopened library and initialises the plugin. NULL
 * and *out_api on success; otherwise the reason (malloc'd; NULL is OOM). */
static char* tpu_library_init_api(void* handle, const PJRT_Api** out_api) {
  tpu_get_api_fn get_api = (tpu_get_api_fn)dlsym(handle, "GetPjrtApi");
  const PJRT_Api* api;
  const char* missing;
  PJRT_Plugin_Initialize_Args init;
  PJRT_Error* error;
  if (get_api == NULL) return tpu_strdup("not a PJRT plugin: no GetPjrtApi symbol");
  api = get_api();
  if (api == NULL ||
      api->struct_size < offsetof(PJRT_Api, pjrt_api_version) + sizeof(api->pjrt_api_version)) {
    return tpu_strdup("GetPjrtApi returned no usable table");
  }
  /* A different major version may have reordered the table: calling any
   * entry could jump anywhere, so nothing is called. */
  if (api->pjrt_api_version.major_version != PJRT_API_MAJOR) {
    return tpu_sprintf("PJRT API %d.%d is incompatible with this build (%d.%d)",
                       api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version,
                       PJRT_API_MAJOR, PJRT_API_MINOR);
  }
  missing = tpu_missing_required(api);
  if (missing != NULL) {
    return tpu_sprintf("PJRT API %d.%d table lacks %s", api->pjrt_api_version.major_version,
                       api->pjrt_api_version.minor_version, missing);
  }
  memset(&init, 0, sizeof(init));
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  error = api->PJRT_Plugin_Initialize(&init);
  if (error != NULL) {
    char* text = tpu_take_error_message(api, error);
    char* reason = tpu_sprintf("PJRT_Plugin_Initialize failed: %s", text ? text : "");
    free(text);
    return reason;
  }
  *out_api = api;
  return NULL;
}

/* Loads and initialises the library at `path`; called with the library
 * mutex held, after no entry for `path` was found. */
static tpu_library_t* tpu_library_load_locked(const char* path, char** out_reason) {
  tpu_library_t* lib;
  void* handle;
  const PJRT_Api* api = NULL;
  char* reason;
  tpu_guard_environment();
  handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    /* Not remembered: nothing was initialised, so a later try is safe. */
    const char* why = dlerror();
    *out_reason = tpu_sprintf("cannot load: %s", why ? why : "unknown dlopen error");
    return NULL;
  }
  reason = tpu_library_init_api(handle, &api);
  if (api == NULL) {
    if (reason == NULL) reason = tpu_strdup("out of memory");
    tpu_library_remember_failure(path, reason);
    *out_reason = reason;
    return NULL;
  }
  lib = (tpu_library_t*)calloc(1, sizeof(*lib));
  if (lib == NULL) {
    *out_reason = tpu_strdup("out of memory");
    return NULL;
  }
  lib->path = tpu_strdup(path);
  lib->api = api;
  lib->api_major = api->pjrt_api_version.major_version;
  lib->api_minor = api->pjrt_api_version.minor_version;
  tpu_library_read_attributes(lib);
  lib->next = tpu_libraries;
  tpu_libraries = lib;
  return lib;
}

tpu_library_t* tpu_library_load(const char* path, char** out_reason) {
  tpu_library_t* lib;
  *out_reason = NULL;
  pthread_mutex_lock(&tpu_library_mutex);
  lib = tpu_library_find(path);
  if (lib == NULL) {
    lib = tpu_library_load_locked(path, out_reason);
  } else if (lib->failure != NULL) {
    *out_reason = tpu_strdup(lib->failure);
    lib = NULL;
  }
  pthread_mutex_unlock(&tpu_library_mutex);
  return lib;
}
