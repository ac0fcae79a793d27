/* openvino.c -- finding, opening and checking OpenVINO's C library. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openvino.h"
#include "nx_hal/nx_hal_plugin.h"

npu_ov_api_t npu_ov;

/* What the one load found; written once under g_once, read-only afterwards. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_loaded;
static char g_path[PATH_MAX];
static char g_error[8192];

/* Appends printf-style text to g_error, truncating rather than overflowing. */
static void report(const char* fmt, ...) {
  size_t used = strlen(g_error);
  if (used + 1 >= sizeof g_error) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error + used, sizeof g_error - used, fmt, ap);
  va_end(ap);
}

/* "2026.4.1-22982-..." -> 1 when major.minor lies in the supported range. */
static int version_supported(const char* build) {
  int major = 0, minor = 0;
  if (build == NULL || sscanf(build, "%d.%d", &major, &minor) != 2) return 0;
  if (major < NPU_OV_MIN_MAJOR || major >= NPU_OV_BELOW_MAJOR) return 0;
  return major > NPU_OV_MIN_MAJOR || minor >= NPU_OV_MIN_MINOR;
}

/* Opens `path` and resolves the whole table; on success fills npu_ov and
 * returns 1, otherwise appends why to g_error and returns 0. */
static int try_library(const char* path) {
  dlerror();
  /* RTLD_LOCAL: another OpenVINO in the process (the openvino Python
   * package, another plugin) keeps its own symbols, and ours stay ours. */
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char* why = dlerror();
    report("%s", why != NULL ? why : "dlopen failed");
    return 0;
  }
  npu_ov_api_t table;
  memset(&table, 0, sizeof table);
  const char* missing = NULL;
  /* dlsym hands back an object pointer; POSIX guarantees it converts to a
   * function pointer, which the memcpy spells out without a cast warning. */
#define NPU_OV_RESOLVE_FUNCTION(name)        \
  if (missing == NULL) {                     \
    void* sym = dlsym(handle, #name);        \
    if (sym == NULL)                         \
      missing = #name;                       \
    else                                     \
      memcpy(&table.name, &sym, sizeof sym); \
  }
  NPU_OV_FUNCTIONS(NPU_OV_RESOLVE_FUNCTION)
#undef NPU_OV_RESOLVE_FUNCTION
#define NPU_OV_RESOLVE_VARIABLE(name)                                \
  if (missing == NULL) {                                             \
    __typeof__(name)* var = (__typeof__(name)*)dlsym(handle, #name); \
    if (var == NULL || *var == NULL)                                 \
      missing = #name;                                               \
    else                                                             \
      table.name = *var;                                             \
  }
  NPU_OV_VARIABLES(NPU_OV_RESOLVE_VARIABLE)
#undef NPU_OV_RESOLVE_VARIABLE
  if (missing != NULL) {
    report("%s: it has no %s (an OpenVINO older than %d.%d?)", path, missing, NPU_OV_MIN_MAJOR,
           NPU_OV_MIN_MINOR);
    /* Nothing of it ran yet, so unloading cannot leave threads behind. */
    dlclose(handle);
    return 0;
  }
  ov_version_t version = {0};
  int ok = 0;
  if (table.ov_get_openvino_version(&version) == OK) {
    ok = version_supported(version.buildNumber);
    if (!ok) {
      report("%s: it is OpenVINO %s, but nx-hal-npu needs %s", path,
             version.buildNumber != NULL ? version.buildNumber : "?", NPU_OV_REQUIREMENT);
    }
    table.ov_version_free(&version);
  } else {
    report("%s: ov_get_openvino_version failed", path);
  }
  /* A rejected library stays mapped: its C++ runtime has run, and unloading
   * that is a known source of crashes at exit. RTLD_LOCAL keeps it inert. */
  if (!ok) return 0;
  npu_ov = table;
  snprintf(g_path, sizeof g_path, "%s", path);
  return 1;
}

static int compare_versions_descending(const void* a, const void* b) {
  return strverscmp(*(const char* const*)b, *(const char* const*)a);
}

/* The openvino wheel installed beside this plugin: site-packages holds both
 * nx_hal_npu/libnxhal_npu.so and openvino/libs/libopenvino_c.so.<ver>. */
static int try_wheel(void) {
  Dl_info info;
  char self[PATH_MAX];
  if (dladdr((const void*)&npu_ov_load, &info) == 0 || info.dli_fname == NULL) {
    report("the openvino wheel beside this plugin (dladdr found no path for the plugin)");
    return 0;
  }
  if (realpath(info.dli_fname, self) == NULL) snprintf(self, sizeof self, "%s", info.dli_fname);
  /* <site>/nx_hal_npu/libnxhal_npu.so -> <site>, spelled without "..", so
   * the error message names the directory a user would look in. */
  for (int up = 0; up < 2; up++) {
    char* slash = strrchr(self, '/');
    if (slash == NULL) {
      snprintf(self, sizeof self, ".");
      break;
    }
    *slash = '\0';
  }
  if (self[0] == '\0') snprintf(self, sizeof self, "/");
  char dir[PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s/openvino/libs", self);

  DIR* d = opendir(dir);
  if (d == NULL) {
    report("%s/libopenvino_c.so* (no such directory: the openvino wheel is not installed)", dir);
    return 0;
  }
  char* names[32];
  size_t count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && count < sizeof names / sizeof names[0]) {
    if (strncmp(e->d_name, "libopenvino_c.so", 16) == 0) {
      names[count] = malloc(strlen(e->d_name) + 1);
      if (names[count] != NULL) strcpy(names[count++], e->d_name);
    }
  }
  closedir(d);
  if (count == 0) {
    report("%s/libopenvino_c.so* (no such file)", dir);
    return 0;
  }
  qsort(names, count, sizeof names[0], compare_versions_descending);
  int loaded = 0;
  for (size_t i = 0; i < count; i++) {
    if (!loaded) {
      char path[sizeof dir + 256];
      snprintf(path, sizeof path, "%s/%s", dir, names[i]);
      if (i > 0) report("; ");
      loaded = try_library(path);
    }
    free(names[i]);
  }
  return loaded;
}

static void load_once(void) {
  const char* explicit_path = getenv(NPU_OV_LIBRARY_ENV);
  if (explicit_path != NULL && explicit_path[0] != '\0') {
    /* A path the user named is the only one tried: falling back to another
     * OpenVINO would hide the mistake behind a different version. */
    report("OpenVINO's C library could not be loaded from %s=%s: ", NPU_OV_LIBRARY_ENV,
           explicit_path);
    g_loaded = try_library(explicit_path);
    report(
        ". Fix: set %s to the libopenvino_c.so.<ver> of OpenVINO %d.%d or later (before %d), "
        "or unset it and run: pip install '%s'",
        NPU_OV_LIBRARY_ENV, NPU_OV_MIN_MAJOR, NPU_OV_MIN_MINOR, NPU_OV_BELOW_MAJOR,
        NPU_OV_REQUIREMENT);
    return;
  }
  report(
      "OpenVINO's C library (libopenvino_c) could not be loaded. Searched: 1) $%s: not set; "
      "2) ",
      NPU_OV_LIBRARY_ENV);
  g_loaded = try_wheel();
  if (g_loaded) return;
  report("; 3) libopenvino_c.so through the system loader: ");
  g_loaded = try_library("libopenvino_c.so");
  report(
      ". Fix: pip install '%s' (into this Python environment), or set %s to the path of an "
      "OpenVINO %d.%d or later libopenvino_c.so.<ver>",
      NPU_OV_REQUIREMENT, NPU_OV_LIBRARY_ENV, NPU_OV_MIN_MAJOR, NPU_OV_MIN_MINOR);
}

nxhal_status_t* npu_ov_load(void) {
  pthread_once(&g_once, load_once);
  if (g_loaded) return NULL;
  return nxhal_status_make(NXHAL_UNAVAILABLE, "%s", g_error);
}

const char* npu_ov_library_path(void) {
  pthread_once(&g_once, load_once);
  return g_loaded ? g_path : NULL;
}
