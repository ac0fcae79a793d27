/* probe.c -- finding IPUs and the Poplar backend, and saying
 * precisely what is missing. Reads only through the probe context. */
#define _GNU_SOURCE /* dlerror/dlopen flags on glibc; harmless elsewhere */
#include "probe.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Graphcore's PCI vendor id, as /sys prints it. */
#define NXHAL_GC_PCI_VENDOR 0x1d95UL

/* Copies src into dst (size > 0), truncating, always terminated. */
static void gc_copy(char* dst, size_t size, const char* src) {
  size_t n = strlen(src);
  if (n >= size) n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* Appends printf output to buf, which already holds a terminated string. */
static void gc_append(char* buf, size_t size, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void gc_append(char* buf, size_t size, const char* format, ...) {
  size_t used = strlen(buf);
  va_list args;
  if (used + 1 >= size) return;
  va_start(args, format);
  vsnprintf(buf + used, size - used, format, args);
  va_end(args);
}

/* root + path into buf; 0 when it does not fit. */
static int gc_join(char* buf, size_t size, const char* root, const char* path) {
  int n = snprintf(buf, size, "%s%s", root != NULL ? root : "", path);
  return n >= 0 && (size_t)n < size;
}

static int gc_is_regular_file(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Reads a sysfs "vendor" file ("0x1d95\n"); 1 when it is Graphcore's. */
static int gc_vendor_is_graphcore(const char* path) {
  char text[32];
  size_t n;
  unsigned long value;
  char* end = NULL;
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  errno = 0;
  value = strtoul(text, &end, 16);
  return errno == 0 && end != text && value == NXHAL_GC_PCI_VENDOR;
}

static void gc_probe_pci(const nxhal_graphcore_probe_ctx_t* ctx, nxhal_graphcore_hw_t* out) {
  char dir_path[4096];
  DIR* dir;
  struct dirent* entry;
  if (!gc_join(dir_path, sizeof(dir_path), ctx->root, "/sys/bus/pci/devices")) return;
  dir = opendir(dir_path);
  if (dir == NULL) return;
  out->pci_dir_readable = 1;
  while ((entry = readdir(dir)) != NULL) {
    char vendor_path[4096 + 300];
    if (entry->d_name[0] == '.') continue;
    snprintf(vendor_path, sizeof(vendor_path), "%s/%s/vendor", dir_path, entry->d_name);
    if (gc_vendor_is_graphcore(vendor_path)) {
      /* readdir order is arbitrary; keep the smallest address for stable text. */
      if (out->pci_count == 0 || strcmp(entry->d_name, out->pci_first) < 0) {
        gc_copy(out->pci_first, sizeof(out->pci_first), entry->d_name);
      }
      out->pci_count++;
    }
  }
  closedir(dir);
}

static void gc_probe_dev(const nxhal_graphcore_probe_ctx_t* ctx, nxhal_graphcore_hw_t* out) {
  char dir_path[4096];
  DIR* dir;
  struct dirent* entry;
  if (!gc_join(dir_path, sizeof(dir_path), ctx->root, "/dev")) return;
  dir = opendir(dir_path);
  if (dir == NULL) return;
  while ((entry = readdir(dir)) != NULL) {
    if (strncmp(entry->d_name, "ipu", 3) != 0) continue;
    if (out->dev_count == 0 || strcmp(entry->d_name, out->dev_first) < 0) {
      gc_copy(out->dev_first, sizeof(out->dev_first), entry->d_name);
    }
    out->dev_count++;
  }
  closedir(dir);
}

/* 1 when name ends in ".conf": Poplar's IPUoF client reads only such files
 * from a config directory, so a README or an editor backup is no partition. */
static int gc_is_conf_name(const char* name) {
  size_t n = strlen(name);
  return n > 5 && strcmp(name + n - 5, ".conf") == 0;
}

/* Regular *.conf files directly in dir_path; 0 when it cannot be listed. */
static int gc_count_conf_files(const char* dir_path) {
  int count = 0;
  DIR* dir = opendir(dir_path);
  struct dirent* entry;
  if (dir == NULL) return 0;
  while ((entry = readdir(dir)) != NULL) {
    char file_path[4096 + 300];
    if (entry->d_name[0] == '.' || !gc_is_conf_name(entry->d_name)) continue;
    snprintf(file_path, sizeof(file_path), "%s/%s", dir_path, entry->d_name);
    if (gc_is_regular_file(file_path)) count++;
  }
  closedir(dir);
  return count;
}

static int gc_is_set(const char* value) {
  return value != NULL && value[0] != '\0';
}

static void gc_probe_ipuof(const nxhal_graphcore_probe_ctx_t* ctx, nxhal_graphcore_hw_t* out) {
  char dir_path[4096];
  if (gc_is_set(ctx->ipuof_config_path)) {
    out->ipuof_env_set = 1;
    out->ipuof_env_exists = gc_is_regular_file(ctx->ipuof_config_path);
  }
  out->vipu_host_set = gc_is_set(ctx->vipu_api_host);
  out->vipu_partition_set = gc_is_set(ctx->vipu_partition_id);
  if (gc_join(dir_path, sizeof(dir_path), ctx->root, "/etc/ipuof.conf.d")) {
    out->ipuof_etc_files = gc_count_conf_files(dir_path);
  }
  if (gc_is_set(ctx->home)) {
    out->home_known = 1;
    if (snprintf(dir_path, sizeof(dir_path), "%s/.ipuof.conf.d", ctx->home) <
        (int)sizeof(dir_path)) {
      out->ipuof_dir_files = gc_count_conf_files(dir_path);
    }
  }
}

void nxhal_graphcore_probe_hw(const nxhal_graphcore_probe_ctx_t* ctx, nxhal_graphcore_hw_t* out) {
  if (out == NULL) return;
  memset(out, 0, sizeof(*out));
  if (ctx == NULL) return;
  gc_probe_pci(ctx, out);
  gc_probe_dev(ctx, out);
  gc_probe_ipuof(ctx, out);
}

int nxhal_graphcore_hw_present(const nxhal_graphcore_hw_t* hw) {
  return hw->pci_count > 0 || hw->dev_count > 0 || hw->ipuof_env_exists ||
         hw->ipuof_dir_files > 0 || hw->ipuof_etc_files > 0 ||
         (hw->vipu_host_set && hw->vipu_partition_set);
}

void nxhal_graphcore_hw_found_text(const nxhal_graphcore_probe_ctx_t* ctx,
                                   const nxhal_graphcore_hw_t* hw, char* buf, size_t size) {
  const char* sep = "";
  if (size == 0) return;
  buf[0] = '\0';
  if (hw->pci_count > 0) {
    gc_append(buf, size, "%d PCI device(s) with vendor 0x1d95 (first %s)", hw->pci_count,
              hw->pci_first);
    sep = ", ";
  }
  if (hw->dev_count > 0) {
    gc_append(buf, size, "%s%d /dev/ipu* node(s) (first /dev/%s)", sep, hw->dev_count,
              hw->dev_first);
    sep = ", ";
  }
  if (hw->ipuof_env_exists) {
    gc_append(buf, size, "%sIPU-over-fabric config IPUOF_CONFIG_PATH=%s", sep,
              ctx->ipuof_config_path);
    sep = ", ";
  }
  if (hw->ipuof_dir_files > 0) {
    gc_append(buf, size, "%sIPU-over-fabric config in %s/.ipuof.conf.d/ (%d file(s))", sep,
              ctx->home, hw->ipuof_dir_files);
    sep = ", ";
  }
  if (hw->ipuof_etc_files > 0) {
    gc_append(buf, size, "%sIPU-over-fabric config in %s/etc/ipuof.conf.d/ (%d file(s))", sep,
              ctx->root != NULL ? ctx->root : "", hw->ipuof_etc_files);
    sep = ", ";
  }
  if (hw->vipu_host_set && hw->vipu_partition_set) {
    gc_append(buf, size,
              "%sV-IPU partition IPUOF_VIPU_API_PARTITION_ID=%s on IPUOF_VIPU_API_HOST=%s", sep,
              ctx->vipu_partition_id, ctx->vipu_api_host);
  }
}

/* Appends ", NAME=value" or ", NAME (unset)". */
static void gc_append_env(char* buf, size_t size, const char* name, const char* value) {
  if (gc_is_set(value)) {
    gc_append(buf, size, ", %s=%s", name, value);
  } else {
    gc_append(buf, size, ", %s (unset)", name);
  }
}

void nxhal_graphcore_hw_checked_text(const nxhal_graphcore_probe_ctx_t* ctx,
                                     const nxhal_graphcore_hw_t* hw, char* buf, size_t size) {
  const char* root = ctx->root != NULL ? ctx->root : "";
  if (size == 0) return;
  buf[0] = '\0';
  if (hw->pci_dir_readable) {
    gc_append(buf, size, "PCI vendor 0x1d95 under %s/sys/bus/pci/devices (%d found)", root,
              hw->pci_count);
  } else {
    gc_append(buf, size, "PCI vendor 0x1d95 under %s/sys/bus/pci/devices (not readable)", root);
  }
  gc_append(buf, size, ", %s/dev/ipu* (%d found)", root, hw->dev_count);
  if (!hw->ipuof_env_set) {
    gc_append(buf, size, ", IPUOF_CONFIG_PATH (unset)");
  } else {
    gc_append(buf, size, ", IPUOF_CONFIG_PATH=%s (%s)", ctx->ipuof_config_path,
              hw->ipuof_env_exists ? "present" : "no such file");
  }
  if (!hw->home_known) {
    gc_append(buf, size, ", ~/.ipuof.conf.d/ (home directory unknown)");
  } else {
    gc_append(buf, size, ", %s/.ipuof.conf.d/ (%d config file(s))", ctx->home, hw->ipuof_dir_files);
  }
  gc_append(buf, size, ", %s/etc/ipuof.conf.d/ (%d config file(s))", root, hw->ipuof_etc_files);
  gc_append_env(buf, size, "IPUOF_VIPU_API_HOST", ctx->vipu_api_host);
  gc_append_env(buf, size, "IPUOF_VIPU_API_PARTITION_ID", ctx->vipu_partition_id);
}

/* Serialises backend loading: dlerror() is only per thread on some libcs,
 * and the backend's entry function stores the host table in a global. */
static pthread_mutex_t gc_dl_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Opens the backend and asks for its table; writes the failure into reason. */
static const nxhal_graphcore_backend_t* gc_load_backend(const nxhal_graphcore_probe_ctx_t* ctx,
                                                        const nxhal_graphcore_host_t* host,
                                                        char* reason, size_t reason_size) {
  void* handle;
  void* symbol;
  const nxhal_graphcore_backend_t* table;
  nxhal_graphcore_backend_get_fn get;
  const char* path = ctx->backend_path != NULL ? ctx->backend_path : "";
  pthread_mutex_lock(&gc_dl_mutex);
  dlerror();
  /* RTLD_LOCAL: the SDK's C++ symbols stay out of the global namespace, where
   * they could clash with another plugin's copies of the same libraries. */
  handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char* err = dlerror();
    snprintf(reason, reason_size, "the Poplar backend %s cannot be loaded: %s", path,
             err != NULL ? err : "unknown dlopen error");
    pthread_mutex_unlock(&gc_dl_mutex);
    return NULL;
  }
  dlerror();
  symbol = dlsym(handle, NXHAL_GRAPHCORE_BACKEND_SYMBOL);
  if (symbol == NULL) {
    const char* err = dlerror();
    snprintf(reason, reason_size, "the Poplar backend %s loaded but lacks %s: %s", path,
             NXHAL_GRAPHCORE_BACKEND_SYMBOL, err != NULL ? err : "symbol is NULL");
    pthread_mutex_unlock(&gc_dl_mutex);
    return NULL; /* never dlclose: see nx_hal_loader.h on unloading SDKs */
  }
  /* Function pointers and object pointers share a representation on every
   * platform dlsym exists on; the memcpy keeps ISO C quiet about it. */
  memcpy(&get, &symbol, sizeof(get));
  /* Under the lock too: the backend keeps `host` in a global, and two
   * client_create calls must not write it at once. */
  table = get(host);
  pthread_mutex_unlock(&gc_dl_mutex);
  if (table == NULL || table->struct_size < NXHAL_GRAPHCORE_BACKEND_STRUCT_SIZE ||
      table->version != 1) {
    snprintf(reason, reason_size,
             "the Poplar backend %s does not match this plugin (internal table version %u, "
             "size %zu; expected version 1, size >= %zu): reinstall nx-hal-graphcore",
             path, table != NULL ? (unsigned)table->version : 0u,
             table != NULL ? table->struct_size : (size_t)0,
             (size_t)NXHAL_GRAPHCORE_BACKEND_STRUCT_SIZE);
    return NULL;
  }
  return table;
}

nxhal_graphcore_verdict_t nxhal_graphcore_probe(const nxhal_graphcore_probe_ctx_t* ctx,
                                                const nxhal_graphcore_host_t* host,
                                                const nxhal_graphcore_backend_t** out_backend,
                                                nxhal_graphcore_hw_t* out_hw, char* reason,
                                                size_t reason_size) {
  char found[1024];
  char checked[2048];
  char load_error[2048];
  int present;
  const char* build_reason = ctx->build_reason != NULL && ctx->build_reason[0] != '\0'
                                 ? ctx->build_reason
                                 : "no reason recorded";
  *out_backend = NULL;
  nxhal_graphcore_probe_hw(ctx, out_hw);
  present = nxhal_graphcore_hw_present(out_hw);
  nxhal_graphcore_hw_found_text(ctx, out_hw, found, sizeof(found));
  nxhal_graphcore_hw_checked_text(ctx, out_hw, checked, sizeof(checked));

  /* 1. Was the backend built at all? */
  if (!ctx->backend_built) {
    if (present) {
      snprintf(reason, reason_size,
               "IPU hardware is present but the Poplar SDK is not: found %s; the Poplar "
               "backend was not built (%s). Rebuild nx-hal-graphcore on this machine with "
               "the SDK enabled (see plugins/graphcore/README.md)",
               found, build_reason);
    } else {
      snprintf(reason, reason_size,
               "the Poplar backend was not built (%s); no IPU found: checked %s", build_reason,
               checked);
    }
    return NXHAL_GC_BACKEND_NOT_BUILT;
  }

  /* 2. Can it (and through it libpoplar) be loaded? */
  *out_backend = gc_load_backend(ctx, host, load_error, sizeof(load_error));
  if (*out_backend == NULL) {
    if (present) {
      snprintf(reason, reason_size,
               "IPU hardware is present but the Poplar SDK cannot be used: found %s; %s", found,
               load_error);
    } else {
      snprintf(reason, reason_size, "%s; no IPU found: checked %s", load_error, checked);
    }
    return NXHAL_GC_BACKEND_UNLOADABLE;
  }

  /* 3. Hardware: reported by the caller only if the backend finds no device. */
  if (present) {
    snprintf(reason, reason_size, "found %s", found);
  } else {
    snprintf(reason, reason_size, "no IPU found: checked %s", checked);
  }
  return NXHAL_GC_BACKEND_READY;
}
