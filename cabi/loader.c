/* loader.c -- opening nx_hal plugins from C: the search path, dlopen,
 * negotiation, table checks. Manifests are read by manifest.c. */
#define _GNU_SOURCE             /* dladdr */
#define _POSIX_C_SOURCE 200809L /* strdup, strndup, realpath, dirent under -std=c99 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "manifest.h"
#include "nx_hal/nx_hal_loader.h"
#include "nx_hal/nx_hal_plugin.h"
#include "validate.h"

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
  const nxhal_api_t* api; /* static in the plugin, or its validation wrapper (process
                             lifetime too); the library is never unloaded */
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
  result = nxhal_status_make(
      NXHAL_ABI_MISMATCH, "plugin '%s' (ABI %u.%u) refused " NXHAL_HOST_VERSION_FMT ": %s: %s",
      path, (unsigned)api->abi_major, (unsigned)api->abi_minor, NXHAL_HOST_VERSION_ARGS,
      nxhal_status_code_name(api->status_code(refusal)), api->status_message(refusal));
  api->status_free(refusal);
  return result;
}

/* ABI_MISMATCH naming the first NULL entry of the 1.0 table, or NULL. */
static nxhal_status_t* nxhal_loader_check_entries(const char* path, const nxhal_api_t* api) {
  const char* missing = NULL;
/* The 1.0 table's entries from the header's list: nothing to keep in step. */
#define NXHAL_CHECK_ENTRY(ret, name, params, since_major, since_minor, P) \
  if (missing == NULL && api->name == NULL) missing = #name;
  NXHAL_API_PREFIX_ENTRIES(NXHAL_CHECK_ENTRY, ~)
  NXHAL_API_ENTRIES_1_0(NXHAL_CHECK_ENTRY, ~)
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
    return nxhal_status_make(
        NXHAL_ABI_MISMATCH, "plugin '%s' accepted " NXHAL_HOST_VERSION_FMT " but returned no table",
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
    return nxhal_status_make(
        NXHAL_ABI_MISMATCH,
        "plugin '%s' speaks ABI %u.%u, " NXHAL_HOST_VERSION_FMT " (major versions differ)", path,
        (unsigned)api->abi_major, (unsigned)api->abi_minor, NXHAL_HOST_VERSION_ARGS);
  }
  if (api->struct_size < NXHAL_API_1_0_SIZE) {
    return nxhal_status_make(NXHAL_ABI_MISMATCH,
                             "plugin '%s' (ABI %u.%u) table is %zu bytes, smaller than ABI "
                             "1.0's %zu; " NXHAL_HOST_VERSION_FMT,
                             path, (unsigned)api->abi_major, (unsigned)api->abi_minor,
                             api->struct_size, (size_t)NXHAL_API_1_0_SIZE, NXHAL_HOST_VERSION_ARGS);
  }
  return nxhal_loader_check_entries(path, api);
}

/* Contracts of the exported functions are in nx_hal_loader.h. */
NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_open(const char* path, nxhal_plugin_t** out_plugin) {
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
                             "'%s' does not export " NXHAL_QUERY_SYMBOL " (not an nx_hal plugin)",
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
  /* Off (the default), callers get the plugin's own table and pay nothing. */
  plugin->api = nxhal_validate_mode() == NXHAL_VALIDATE_OFF ? api : nxhal_validate_wrap(api, path);
  plugin->abi_major = api->abi_major;
  plugin->abi_minor = api->abi_minor < host_minor ? api->abi_minor : host_minor;
  *out_plugin = plugin;
  return NULL;
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

/* --- The search path --------------------------------------------------------
 * Built from the environment on each call, so tests and programs may change
 * it. Only absolute directories are searched: a relative entry would make the
 * working directory a source of code (see ARCHITECTURE "Trust"). */

/* The install prefix this loader was built for. */
#ifndef NXHAL_LOADER_DATADIR
#define NXHAL_LOADER_DATADIR "/usr/local/share"
#endif

#define NXHAL_PLUGINS_SUBDIR "nx_hal/plugins"

typedef struct nxhal_search_dir {
  char* path;         /* owned, absolute */
  const char* origin; /* static: where it came from */
  int plugin_path;    /* from NX_HAL_PLUGIN_PATH: bare libraries count too */
} nxhal_search_dir_t;

typedef struct nxhal_search_path {
  nxhal_search_dir_t* dirs; /* owned */
  size_t count, capacity;
  nxhal_strbuf_t ignored; /* "ORIGIN 'entry', ..." of relative entries */
} nxhal_search_path_t;

/* Adds `dir` (copied) unless it is relative (then recorded as ignored) or
 * already listed, by name or as the same directory. */
static void nxhal_search_path_add(nxhal_search_path_t* sp, const char* dir, const char* origin,
                                  int plugin_path) {
  struct stat info, other;
  size_t i;
  int exists;
  if (dir == NULL || dir[0] == '\0') return;
  if (dir[0] != '/') {
    nxhal_strbuf_addf(&sp->ignored, "%s%s '%s'", sp->ignored.length ? ", " : "", origin, dir);
    return;
  }
  exists = stat(dir, &info) == 0;
  for (i = 0; i < sp->count; ++i) {
    if (strcmp(sp->dirs[i].path, dir) == 0) return;
    if (exists && stat(sp->dirs[i].path, &other) == 0 && other.st_dev == info.st_dev &&
        other.st_ino == info.st_ino) {
      return;
    }
  }
  if (sp->count == sp->capacity) {
    size_t capacity = sp->capacity ? sp->capacity * 2 : 16;
    nxhal_search_dir_t* bigger = (nxhal_search_dir_t*)realloc(sp->dirs, capacity * sizeof(*bigger));
    if (bigger == NULL) return;
    sp->dirs = bigger;
    sp->capacity = capacity;
  }
  sp->dirs[sp->count].path = strdup(dir);
  if (sp->dirs[sp->count].path == NULL) return;
  sp->dirs[sp->count].origin = origin;
  sp->dirs[sp->count].plugin_path = plugin_path;
  ++sp->count;
}

/* Adds "<base>/<suffix>" when `base` is set (a relative base is ignored). */
static void nxhal_search_path_add_under(nxhal_search_path_t* sp, const char* base,
                                        const char* suffix, const char* origin) {
  char* dir;
  if (base == NULL || base[0] == '\0') return;
  if (base[0] != '/') {
    nxhal_search_path_add(sp, base, origin, 0); /* records it as ignored */
    return;
  }
  dir = nxhal_aprintf("%s/%s", strcmp(base, "/") == 0 ? "" : base, suffix);
  if (dir != NULL) nxhal_search_path_add(sp, dir, origin, 0);
  free(dir);
}

/* Adds each entry of the ':'-separated `list` + "/" + suffix (suffix NULL:
 * the entry itself). */
static void nxhal_search_path_add_list(nxhal_search_path_t* sp, const char* list,
                                       const char* suffix, const char* origin, int plugin_path) {
  char* copy;
  char* cursor;
  if (list == NULL) return;
  copy = strdup(list);
  if (copy == NULL) return;
  cursor = copy;
  while (cursor != NULL) {
    char* next = strchr(cursor, ':');
    if (next != NULL) *next++ = '\0';
    if (suffix == NULL) {
      nxhal_search_path_add(sp, cursor, origin, plugin_path);
    } else {
      nxhal_search_path_add_under(sp, cursor, suffix, origin);
    }
    cursor = next;
  }
  free(copy);
}

/* What dladdr resolves: an object inside this loader, wherever it is linked. */
static const char nxhal_loader_anchor = 0;

/* The directory holding the loader (its shared library, or the program or
 * module it is compiled into), symlinks resolved; malloc'd or NULL. */
static char* nxhal_loader_dir(void) {
  Dl_info info;
  char* real = NULL;
  char* slash;
  if (dladdr(&nxhal_loader_anchor, &info) != 0 && info.dli_fname != NULL &&
      strchr(info.dli_fname, '/') != NULL) {
    real = realpath(info.dli_fname, NULL);
  }
  /* For the main program glibc may report argv[0] or ""; the kernel knows. */
  if (real == NULL) real = realpath("/proc/self/exe", NULL);
  if (real == NULL) return NULL;
  slash = strrchr(real, '/');
  if (slash == NULL || slash == real) {
    free(real);
    return NULL;
  }
  *slash = '\0';
  return real;
}

/* The last component of `path` (borrowed). */
static const char* nxhal_basename(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* The directories of the environment the loader lives in: inside the core
 * wheel (<site-packages>/nx_hal/lib, or <site-packages>/nx_hal for the
 * Python module) that environment's prefix; otherwise the prefix above its
 * lib/ (a `cmake --install` tree). */
static void nxhal_search_path_add_own(nxhal_search_path_t* sp) {
  char* dir = nxhal_loader_dir();
  char* package;
  char* site;
  char* prefix;
  if (dir == NULL) return;
  package = strcmp(nxhal_basename(dir), "lib") == 0 ? nxhal_path_up(dir, 1) : strdup(dir);
  site = package != NULL && strcmp(nxhal_basename(package), "nx_hal") == 0
             ? nxhal_path_up(package, 1)
             : NULL;
  if (site != NULL && (strcmp(nxhal_basename(site), "site-packages") == 0 ||
                       strcmp(nxhal_basename(site), "dist-packages") == 0)) {
    /* <prefix>/lib/python3.X/site-packages */
    prefix = nxhal_path_up(site, 3);
    nxhal_search_path_add_under(sp, prefix, "share/" NXHAL_PLUGINS_SUBDIR, "python environment");
    nxhal_search_path_add_under(sp, NXHAL_LOADER_DATADIR, NXHAL_PLUGINS_SUBDIR, "install prefix");
  } else {
    prefix = nxhal_path_up(dir, 1);
    nxhal_search_path_add_under(sp, NXHAL_LOADER_DATADIR, NXHAL_PLUGINS_SUBDIR, "install prefix");
    nxhal_search_path_add_under(sp, prefix, "share/" NXHAL_PLUGINS_SUBDIR, "loader prefix");
  }
  free(prefix);
  free(site);
  free(package);
  free(dir);
}

static void nxhal_search_path_build(nxhal_search_path_t* sp) {
  const char* xdg_home = getenv("XDG_DATA_HOME");
  const char* xdg_dirs = getenv("XDG_DATA_DIRS");
  memset(sp, 0, sizeof(*sp));
  nxhal_search_path_add_list(sp, getenv(NXHAL_PLUGIN_PATH_ENV), NULL, NXHAL_PLUGIN_PATH_ENV, 1);
  nxhal_search_path_add_under(sp, getenv("VIRTUAL_ENV"), "share/" NXHAL_PLUGINS_SUBDIR,
                              "VIRTUAL_ENV");
  nxhal_search_path_add_under(sp, getenv("CONDA_PREFIX"), "share/" NXHAL_PLUGINS_SUBDIR,
                              "CONDA_PREFIX");
  nxhal_search_path_add_own(sp);
  if (xdg_home != NULL && xdg_home[0] != '\0') {
    nxhal_search_path_add_under(sp, xdg_home, NXHAL_PLUGINS_SUBDIR, "XDG_DATA_HOME");
  } else {
    nxhal_search_path_add_under(sp, getenv("HOME"), ".local/share/" NXHAL_PLUGINS_SUBDIR,
                                "XDG_DATA_HOME");
  }
  nxhal_search_path_add_list(
      sp, xdg_dirs != NULL && xdg_dirs[0] != '\0' ? xdg_dirs : "/usr/local/share:/usr/share",
      NXHAL_PLUGINS_SUBDIR, "XDG_DATA_DIRS", 0);
}

static void nxhal_search_path_free(nxhal_search_path_t* sp) {
  size_t i;
  for (i = 0; i < sp->count; ++i) free(sp->dirs[i].path);
  free(sp->dirs);
  free(sp->ignored.data);
  memset(sp, 0, sizeof(*sp));
}

NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_search_path(nxhal_search_dir_visit_fn visit,
                                                          void* user_data) {
  nxhal_search_path_t sp;
  size_t i;
  if (visit == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "visit is NULL");
  nxhal_search_path_build(&sp);
  for (i = 0; i < sp.count; ++i) {
    if (visit(sp.dirs[i].path, sp.dirs[i].origin, user_data)) break;
  }
  nxhal_search_path_free(&sp);
  return NULL;
}

/* --- Scanning the search path --------------------------------------------- */

/* True for "libnxhal_<name>.so" with a non-empty name. */
static int nxhal_is_plugin_file(const char* file) {
  size_t len = strlen(file);
  return len > 12 && strncmp(file, "libnxhal_", 9) == 0 && strcmp(file + len - 3, ".so") == 0;
}

/* True for "<stem>.json" with a non-empty stem. */
static int nxhal_is_manifest_file(const char* file) {
  size_t len = strlen(file);
  return len > 5 && strcmp(file + len - 5, ".json") == 0;
}

/* One file a directory offers: its plugin name (the file's stem) and kind. */
typedef struct nxhal_candidate {
  char* file; /* owned */
  char* stem; /* owned */
  int is_manifest;
} nxhal_candidate_t;

/* By name; a bare library before a manifest of the same name. */
static int nxhal_compare_candidates(const void* a, const void* b) {
  const nxhal_candidate_t* x = (const nxhal_candidate_t*)a;
  const nxhal_candidate_t* y = (const nxhal_candidate_t*)b;
  int by_name = strcmp(x->stem, y->stem);
  return by_name != 0 ? by_name : x->is_manifest - y->is_manifest;
}

static int nxhal_candidate_add(nxhal_candidate_t** items, size_t* count, size_t* capacity,
                               const char* file, int is_manifest) {
  size_t len = strlen(file);
  nxhal_candidate_t* item;
  if (*count == *capacity) {
    size_t bigger_capacity = *capacity ? *capacity * 2 : 8;
    nxhal_candidate_t* bigger =
        (nxhal_candidate_t*)realloc(*items, bigger_capacity * sizeof(*bigger));
    if (bigger == NULL) return 0;
    *items = bigger;
    *capacity = bigger_capacity;
  }
  item = &(*items)[*count];
  item->file = strdup(file);
  item->stem = is_manifest ? strndup(file, len - 5) : strndup(file + 9, len - 12);
  item->is_manifest = is_manifest;
  if (item->file == NULL || item->stem == NULL) {
    free(item->file);
    free(item->stem);
    return 0;
  }
  ++*count;
  return 1;
}

/* The files of `dir` that may hold plugins, sorted; only `only_name`'s when
 * it is set (looked up directly, without listing the directory). */
static nxhal_candidate_t* nxhal_dir_candidates(const nxhal_search_dir_t* dir, const char* only_name,
                                               size_t* out_count) {
  nxhal_candidate_t* items = NULL;
  size_t count = 0, capacity = 0;
  *out_count = 0;
  if (only_name != NULL) {
    char* names[2];
    int k;
    struct stat info;
    names[0] = dir->plugin_path ? nxhal_aprintf("libnxhal_%s.so", only_name) : NULL;
    names[1] = nxhal_aprintf("%s.json", only_name);
    for (k = 0; k < 2; ++k) {
      char* path = names[k] != NULL ? nxhal_join_path(dir->path, names[k]) : NULL;
      if (path != NULL && stat(path, &info) == 0) {
        nxhal_candidate_add(&items, &count, &capacity, names[k], k == 1);
      }
      free(path);
      free(names[k]);
    }
  } else {
    DIR* handle = opendir(dir->path);
    struct dirent* entry;
    if (handle == NULL) return NULL; /* a missing directory is not an error */
    while ((entry = readdir(handle)) != NULL) {
      if (dir->plugin_path && nxhal_is_plugin_file(entry->d_name)) {
        nxhal_candidate_add(&items, &count, &capacity, entry->d_name, 0);
      } else if (nxhal_is_manifest_file(entry->d_name)) {
        nxhal_candidate_add(&items, &count, &capacity, entry->d_name, 1);
      }
    }
    closedir(handle);
    /* readdir order is arbitrary; sort for a stable listing. */
    if (count > 1) qsort(items, count, sizeof(*items), nxhal_compare_candidates);
  }
  *out_count = count;
  return items;
}

/* Names already found usable, with where, for "shadowed by". */
typedef struct nxhal_seen {
  char** names;     /* owned */
  char** libraries; /* owned */
  size_t count;
} nxhal_seen_t;

static const char* nxhal_seen_find(const nxhal_seen_t* seen, const char* name) {
  size_t i;
  for (i = 0; i < seen->count; ++i) {
    if (strcmp(seen->names[i], name) == 0) return seen->libraries[i];
  }
  return NULL;
}

static void nxhal_seen_add(nxhal_seen_t* seen, const char* name, const char* library) {
  char** names = (char**)realloc(seen->names, (seen->count + 1) * sizeof(char*));
  char** libraries;
  if (names == NULL) return;
  seen->names = names;
  libraries = (char**)realloc(seen->libraries, (seen->count + 1) * sizeof(char*));
  if (libraries == NULL) return;
  seen->libraries = libraries;
  seen->names[seen->count] = strdup(name);
  seen->libraries[seen->count] = strdup(library);
  if (seen->names[seen->count] == NULL || seen->libraries[seen->count] == NULL) {
    free(seen->names[seen->count]);
    free(seen->libraries[seen->count]);
    return;
  }
  ++seen->count;
}

static void nxhal_seen_free(nxhal_seen_t* seen) {
  size_t i;
  for (i = 0; i < seen->count; ++i) {
    free(seen->names[i]);
    free(seen->libraries[i]);
  }
  free(seen->names);
  free(seen->libraries);
}

/* Checks one candidate and visits it; returns the visitor's answer.
 * `dir_reason`: why its directory is not trusted (NULL: it is). */
static int nxhal_scan_candidate(const nxhal_search_dir_t* dir, const char* dir_reason,
                                const nxhal_candidate_t* candidate, nxhal_seen_t* seen,
                                nxhal_plugin_entry_fn visit, void* user_data) {
  nxhal_plugin_entry_t entry;
  nxhal_manifest_t manifest;
  char* source = nxhal_join_path(dir->path, candidate->file);
  char* reason = NULL;
  char* shadowed = NULL;
  const char* earlier;
  int stop;
  memset(&manifest, 0, sizeof(manifest));
  memset(&entry, 0, sizeof(entry));
  if (source == NULL) return 0;
  entry.struct_size = sizeof(entry);
  entry.name = candidate->stem;
  entry.source = source;
  entry.directory = dir->path;
  entry.origin = dir->origin;
  entry.abi_version = "";
  /* The directory first, then the file (through a symlink: its target and
   * the target's directory), and only then is a manifest read. */
  if (dir_reason == NULL) reason = nxhal_trust_check_path(source, 0);
  if (dir_reason == NULL && reason == NULL) {
    if (candidate->is_manifest) {
      reason = nxhal_manifest_load(source, dir->path, candidate->stem, NXHAL_LOADER_HOST_MAJOR,
                                   &manifest);
      if (manifest.name != NULL) entry.name = manifest.name;
      if (manifest.abi_version != NULL) entry.abi_version = manifest.abi_version;
      entry.library = manifest.library;
    } else {
      entry.library = source;
    }
  }
  entry.skip_reason = dir_reason != NULL ? dir_reason : reason;
  if (entry.skip_reason == NULL) {
    earlier = nxhal_seen_find(seen, entry.name);
    if (earlier != NULL) {
      shadowed = nxhal_aprintf("shadowed by '%s', found earlier", earlier);
      entry.skip_reason = shadowed != NULL ? shadowed : "shadowed by an earlier plugin";
    } else {
      nxhal_seen_add(seen, entry.name, entry.library);
    }
  }
  stop = visit(&entry, user_data);
  free(shadowed);
  free(reason);
  nxhal_manifest_free(&manifest);
  free(source);
  return stop;
}

/* Visits what the search path offers, in order, until `visit` returns
 * nonzero; only plugin `only_name` when it is set. */
static void nxhal_scan(const nxhal_search_path_t* sp, const char* only_name,
                       nxhal_plugin_entry_fn visit, void* user_data) {
  nxhal_seen_t seen;
  size_t d, i;
  int stop = 0;
  memset(&seen, 0, sizeof(seen));
  for (d = 0; d < sp->count; ++d) {
    size_t count = 0;
    nxhal_candidate_t* candidates = nxhal_dir_candidates(&sp->dirs[d], only_name, &count);
    /* Checked only where it offers something: a missing directory is not an error. */
    char* dir_reason = count > 0 ? nxhal_trust_check_path(sp->dirs[d].path, 1) : NULL;
    for (i = 0; i < count; ++i) {
      if (!stop) {
        stop =
            nxhal_scan_candidate(&sp->dirs[d], dir_reason, &candidates[i], &seen, visit, user_data);
      }
      free(candidates[i].file);
      free(candidates[i].stem);
    }
    free(dir_reason);
    free(candidates);
    if (stop) break;
  }
  nxhal_seen_free(&seen);
}

NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_scan(nxhal_plugin_entry_fn visit, void* user_data) {
  nxhal_search_path_t sp;
  if (visit == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "visit is NULL");
  nxhal_search_path_build(&sp);
  nxhal_scan(&sp, NULL, visit, user_data);
  nxhal_search_path_free(&sp);
  return NULL;
}

/* --- open_by_name and enumerate on top of the scan ------------------------- */

typedef struct nxhal_find_state {
  char* found;            /* owned; the first usable library */
  nxhal_strbuf_t skipped; /* "source: reason; ..." */
} nxhal_find_state_t;

static int nxhal_find_visit(const nxhal_plugin_entry_t* entry, void* user_data) {
  nxhal_find_state_t* state = (nxhal_find_state_t*)user_data;
  if (entry->skip_reason == NULL) {
    state->found = strdup(entry->library);
    return 1;
  }
  nxhal_strbuf_addf(&state->skipped, "%s%s: %s", state->skipped.length ? "; " : "", entry->source,
                    entry->skip_reason);
  return 0;
}

/* The NOT_FOUND status of open_by_name: what was looked for, where, and
 * what was skipped and why. */
static nxhal_status_t* nxhal_not_found(const char* name, const nxhal_search_path_t* sp,
                                       const nxhal_find_state_t* state) {
  nxhal_strbuf_t text;
  nxhal_status_t* status;
  size_t i;
  memset(&text, 0, sizeof(text));
  /* The first words are the ones older loaders said: programs match them. */
  nxhal_strbuf_addf(&text,
                    "no libnxhal_%s.so in " NXHAL_PLUGIN_PATH_ENV " and no %s.json manifest (",
                    name, name);
  if (getenv(NXHAL_PLUGIN_PATH_ENV) == NULL) {
    nxhal_strbuf_addf(&text, NXHAL_PLUGIN_PATH_ENV " is not set; ");
  }
  nxhal_strbuf_addf(&text, "searched: ");
  for (i = 0; i < sp->count; ++i) {
    nxhal_strbuf_addf(&text, "%s%s", i > 0 ? ", " : "", sp->dirs[i].path);
  }
  if (sp->count == 0) nxhal_strbuf_addf(&text, "no directories");
  if (state->skipped.length > 0) nxhal_strbuf_addf(&text, "; skipped: %s", state->skipped.data);
  if (sp->ignored.length > 0) {
    nxhal_strbuf_addf(&text, "; ignored relative directories: %s", sp->ignored.data);
  }
  nxhal_strbuf_addf(&text, ")");
  status = nxhal_status_make(NXHAL_NOT_FOUND, "%s",
                             text.data != NULL ? text.data : "plugin not found (out of memory)");
  free(text.data);
  return status;
}

NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_open_by_name(const char* name,
                                                           nxhal_plugin_t** out_plugin) {
  nxhal_search_path_t sp;
  nxhal_find_state_t state;
  nxhal_status_t* status;
  if (out_plugin == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_plugin is NULL");
  *out_plugin = NULL;
  if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL || strlen(name) > 200) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "plugin name must be non-empty, short and contain no '/'");
  }
  memset(&state, 0, sizeof(state));
  nxhal_search_path_build(&sp);
  nxhal_scan(&sp, name, nxhal_find_visit, &state);
  if (state.found == NULL) {
    status = nxhal_not_found(name, &sp, &state);
  } else {
    status = nxhal_plugin_open(state.found, out_plugin);
  }
  free(state.found);
  free(state.skipped.data);
  nxhal_search_path_free(&sp);
  return status;
}

typedef struct nxhal_enumerate_state {
  nxhal_plugin_visit_fn visit;
  void* user_data;
} nxhal_enumerate_state_t;

static int nxhal_enumerate_visit(const nxhal_plugin_entry_t* entry, void* user_data) {
  nxhal_enumerate_state_t* state = (nxhal_enumerate_state_t*)user_data;
  if (entry->skip_reason != NULL) return 0;
  return state->visit(entry->name, entry->library, state->user_data);
}

NXHAL_LOADER_API nxhal_status_t* nxhal_plugin_enumerate(nxhal_plugin_visit_fn visit,
                                                        void* user_data) {
  nxhal_enumerate_state_t state;
  if (visit == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "visit is NULL");
  state.visit = visit;
  state.user_data = user_data;
  return nxhal_plugin_scan(nxhal_enumerate_visit, &state);
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
    case NXHAL_INVALID_PROGRAM: return "INVALID_PROGRAM";
  }
  return "UNKNOWN";
}
