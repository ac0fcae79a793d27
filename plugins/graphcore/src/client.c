/* client.c -- clients and devices of the Graphcore plugin: the probe for
 * IPUs and the Poplar backend, then the backend's client and our device
 * objects over its devices. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "options.h"
#include "probe.h"

/* --- Device memory, shared with buffer.c ------------------------------- */

nxhal_status_t* nxhal_gc_device_reserve(nxhal_device_t* device, uint64_t bytes) {
  return nxhal_memory_reserve(&device->memory, bytes, "graphcore: a staging buffer");
}

void nxhal_gc_device_release(nxhal_device_t* device, uint64_t bytes) {
  nxhal_memory_release(&device->memory, bytes);
}

/* --- The probe context: the real machine, or a test's fake tree ---------- */

/* Any object of this library: dladdr finds the library file from its address
 * (an object, since ISO C has no function-to-object pointer conversion). */
static const char gc_self_marker = 0;

/* The directory this library was loaded from, into buf ("" if unknown). */
static void gc_library_dir(char* buf, size_t size) {
  Dl_info info;
  const char* slash;
  buf[0] = '\0';
  if (dladdr(&gc_self_marker, &info) == 0 || info.dli_fname == NULL) return;
  slash = strrchr(info.dli_fname, '/');
  if (slash == NULL) return;
  if ((size_t)(slash - info.dli_fname) >= size) return;
  memcpy(buf, info.dli_fname, (size_t)(slash - info.dli_fname));
  buf[slash - info.dli_fname] = '\0';
}

/* $HOME, else the password database's entry, else NULL. Into buf. */
static const char* gc_home(char* buf, size_t size) {
  const char* home = getenv("HOME");
  /* Function scope: the entry's strings live in scratch until copied below. */
  struct passwd pw;
  struct passwd* result = NULL;
  char scratch[4096];
  if (home == NULL || home[0] == '\0') {
    if (getpwuid_r(getuid(), &pw, scratch, sizeof(scratch), &result) != 0 || result == NULL) {
      return NULL;
    }
    home = result->pw_dir;
  }
  if (home == NULL || strlen(home) >= size) return NULL;
  strcpy(buf, home);
  return buf;
}

/* Fills ctx for this process. `scratch` holds the strings it points to. */
typedef struct gc_ctx_storage {
  char backend_path[4096];
  char home[4096];
} gc_ctx_storage_t;

static void gc_make_probe_ctx(nxhal_graphcore_probe_ctx_t* ctx, gc_ctx_storage_t* storage) {
  char dir[4096 - 64]; /* leaves room for "/" NXHAL_GRAPHCORE_BACKEND_FILE */
  memset(ctx, 0, sizeof(*ctx));
  ctx->struct_size = sizeof(*ctx);
  ctx->root = "";
  ctx->home = gc_home(storage->home, sizeof(storage->home));
  ctx->ipuof_config_path = getenv("IPUOF_CONFIG_PATH");
  ctx->vipu_api_host = getenv("IPUOF_VIPU_API_HOST");
  ctx->vipu_partition_id = getenv("IPUOF_VIPU_API_PARTITION_ID");
  ctx->backend_built = NXHAL_GRAPHCORE_BACKEND_BUILT;
  ctx->build_reason = NXHAL_GRAPHCORE_BUILD_REASON;
  gc_library_dir(dir, sizeof(dir));
  snprintf(storage->backend_path, sizeof(storage->backend_path), "%s%s%s", dir,
           dir[0] != '\0' ? "/" : "", NXHAL_GRAPHCORE_BACKEND_FILE);
  ctx->backend_path = storage->backend_path;
#ifdef NXHAL_GRAPHCORE_TEST_HOOKS
  /* Test builds only (never the installed library): point the probe at a
   * fake filesystem tree and at a stand-in backend library. */
  {
    const char* root = getenv("NXHAL_GRAPHCORE_TEST_ROOT");
    const char* backend = getenv("NXHAL_GRAPHCORE_TEST_BACKEND");
    if (root != NULL) ctx->root = root;
    if (backend != NULL) {
      /* "" keeps the real lookup next to this library, to test that too. */
      ctx->backend_built = 1;
      if (backend[0] != '\0') {
        snprintf(storage->backend_path, sizeof(storage->backend_path), "%s", backend);
      }
    }
  }
#endif
}

static nxhal_status_t* gc_host_status_make(nxhal_status_code_t code, const char* message) {
  return nxhal_status_make(code, "%s", message != NULL ? message : "");
}

static const nxhal_graphcore_host_t gc_host = {
    sizeof(nxhal_graphcore_host_t),
    gc_host_status_make,
};

/* --- Clients and devices -------------------------------------------------- */

static void gc_set_int_attr(nxhal_attribute_t* a, const char* name, int64_t value) {
  a->struct_size = sizeof(*a);
  a->name = name;
  a->type = NXHAL_VALUE_INT64;
  a->int64_value = value;
}

static void gc_set_bool_attr(nxhal_attribute_t* a, const char* name, int value) {
  a->struct_size = sizeof(*a);
  a->name = name;
  a->type = NXHAL_VALUE_BOOL;
  a->bool_value = value != 0;
}

static void gc_set_string_attr(nxhal_attribute_t* a, const char* name, const char* value) {
  a->struct_size = sizeof(*a);
  a->name = name;
  a->type = NXHAL_VALUE_STRING;
  a->string_value = value != NULL ? value : "";
}

static void gc_client_free(nxhal_client_t* client) {
  size_t i;
  if (client == NULL) return;
  for (i = 0; i < client->num_devices; ++i) nxhal_memory_destroy(&client->devices[i].memory);
  free(client->devices);
  if (client->bclient != NULL) client->backend->client_close(client->bclient);
  free(client->diagnostics);
  free(client);
}

/* Builds our device objects over the backend client's devices. */
static nxhal_status_t* gc_client_init_devices(nxhal_client_t* client, size_t count) {
  size_t i;
  client->devices = (struct nxhal_device*)calloc(count, sizeof(struct nxhal_device));
  if (client->devices == NULL) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  }
  for (i = 0; i < count; ++i) {
    struct nxhal_device* d = &client->devices[i];
    nxhal_status_t* status;
    d->client = client;
    d->index = i;
    d->desc.struct_size = sizeof(d->desc);
    status = client->backend->device_describe(client->bclient, i, &d->desc);
    if (status != NULL) return status;
    if (d->desc.struct_size < NXHAL_GRAPHCORE_DEVICE_DESC_STRUCT_SIZE || d->desc.name == NULL ||
        d->desc.arch == NULL || d->desc.compat_key == NULL) {
      return nxhal_status_make(
          NXHAL_INTERNAL, "graphcore: the Poplar backend described device %zu incompletely", i);
    }
    d->formats[0] = "onnx";
    d->formats[1] = "popef";
    gc_set_int_attr(&d->attributes[0], "num_ipus", d->desc.num_ipus);
    gc_set_int_attr(&d->attributes[1], "tiles_per_ipu", d->desc.tiles_per_ipu);
    gc_set_int_attr(&d->attributes[2], "bytes_per_tile", d->desc.bytes_per_tile);
    gc_set_string_attr(&d->attributes[3], "arch", d->desc.arch);
    gc_set_int_attr(&d->attributes[4], "device_id", d->desc.device_id);
    gc_set_bool_attr(&d->attributes[5], "ipu_model", d->desc.is_ipu_model);
    gc_set_bool_attr(&d->attributes[6], "compile_only", d->desc.is_offline);
    gc_set_string_attr(&d->attributes[7], "precision",
                       client->config.precision_float16 ? "float16" : "float32");
    nxhal_memory_init(&d->memory);
    client->num_devices = i + 1;
  }
  return NULL;
}

/* The probe's reason text: what it found on the machine, for messages and
 * diagnostics. */
#define GC_REASON_SIZE 8192

/* Probes the machine for IPUs and the Poplar backend. READY sets *backend
 * and *hw; otherwise UNAVAILABLE with the probe's reason. `reason` holds
 * GC_REASON_SIZE bytes. */
static nxhal_status_t* gc_probe_backend(const nxhal_graphcore_backend_t** backend,
                                        nxhal_graphcore_hw_t* hw, char* reason) {
  nxhal_graphcore_probe_ctx_t ctx;
  nxhal_graphcore_verdict_t verdict;
  /* On the heap: two 4 KiB paths are a lot of stack for a library call. */
  gc_ctx_storage_t* storage = (gc_ctx_storage_t*)malloc(sizeof(*storage));
  if (storage == NULL) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  }
  gc_make_probe_ctx(&ctx, storage);
  verdict = nxhal_graphcore_probe(&ctx, &gc_host, backend, hw, reason, GC_REASON_SIZE);
  free(storage);
  if (verdict != NXHAL_GC_BACKEND_READY) {
    return nxhal_status_make(NXHAL_UNAVAILABLE, "graphcore: %s", reason);
  }
  return NULL;
}

/* Opens the backend's client for client->config and counts its devices
 * into *count: UNAVAILABLE, with what Poplar said and what the probe
 * found, when it sees none. */
static nxhal_status_t* gc_client_open_backend(nxhal_client_t* client,
                                              const nxhal_graphcore_hw_t* hw, const char* reason,
                                              size_t* count) {
  const nxhal_graphcore_backend_t* backend = client->backend;
  const char* backend_reason = NULL;
  nxhal_status_t* status = backend->client_open(&client->config, &client->bclient, &backend_reason);
  if (status == NULL && client->bclient == NULL) {
    status = nxhal_status_make(NXHAL_INTERNAL, "graphcore: the Poplar backend made no client");
  }
  if (status == NULL) status = backend->device_count(client->bclient, count);
  if (status == NULL && *count == 0) {
    /* Poplar loaded but sees nothing: say what it said and what we probed. */
    status = nxhal_status_make(
        NXHAL_UNAVAILABLE, "graphcore: Poplar %s found no device with %lld IPU(s) (%s); %s%s",
        backend->sdk_version(), (long long)client->config.num_ipus,
        backend_reason != NULL && backend_reason[0] != '\0' ? backend_reason : "no reason given",
        reason,
        nxhal_graphcore_hw_present(hw) ? "" : "; set ipu_model=true to use Poplar's IPU Model");
  }
  return status;
}

/* Sets client->diagnostics: the SDK, the device count and mode, and the
 * hardware probe's findings. */
static nxhal_status_t* gc_client_set_diagnostics(nxhal_client_t* client, size_t count,
                                                 const char* reason) {
  const size_t size = GC_REASON_SIZE + 512;
  const nxhal_graphcore_config_t* config = &client->config;
  char* diag = (char*)malloc(size);
  if (diag == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  snprintf(diag, size, "graphcore: Poplar %s, %zu device(s)%s; hardware probe: %s",
           client->backend->sdk_version(), count,
           config->ipu_model      ? " (IPU Model)"
           : config->compile_only ? " (offline, compile only)"
                                  : "",
           reason);
  client->diagnostics = diag;
  return NULL;
}

nxhal_status_t* gc_client_create(const nxhal_option_t* options, size_t num_options,
                                 nxhal_client_t** out_client) {
  nxhal_graphcore_config_t config;
  nxhal_graphcore_hw_t hw;
  const nxhal_graphcore_backend_t* backend = NULL;
  nxhal_client_t* client;
  nxhal_status_t* status;
  size_t count = 0;
  char* reason;

  NXHAL_REQUIRE_ARG(out_client);
  *out_client = NULL;
  /* Bad options are the caller's mistake on any machine: report them first. */
  status = nxhal_graphcore_parse_client_options(options, num_options, &config);
  if (status != NULL) return status;

  reason = (char*)malloc(GC_REASON_SIZE);
  if (reason == NULL) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  }
  status = gc_probe_backend(&backend, &hw, reason);
  if (status != NULL) {
    free(reason);
    return status;
  }

  client = (nxhal_client_t*)calloc(1, sizeof(*client));
  if (client == NULL) {
    free(reason);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  }
  client->backend = backend;
  client->config = config;
  status = gc_client_open_backend(client, &hw, reason, &count);
  if (status == NULL) status = gc_client_init_devices(client, count);
  if (status == NULL) status = gc_client_set_diagnostics(client, count, reason);
  free(reason);
  if (status != NULL) {
    gc_client_free(client);
    return status;
  }
  *out_client = client;
  return NULL;
}

void gc_client_destroy(nxhal_client_t* client) {
  gc_client_free(client);
}

nxhal_status_t* gc_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_text);
  *out_text = client->diagnostics != NULL ? client->diagnostics : "";
  return NULL;
}

nxhal_status_t* gc_client_device_count(nxhal_client_t* client, size_t* out_count) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = client->num_devices;
  return NULL;
}

nxhal_status_t* gc_client_device(nxhal_client_t* client, size_t index,
                                 nxhal_device_t** out_device) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_device);
  if (index >= client->num_devices) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: device index %zu out of range (client has %zu)", index,
                             client->num_devices);
  }
  *out_device = &client->devices[index];
  return NULL;
}

nxhal_status_t* gc_device_info(nxhal_device_t* device, nxhal_device_info_t* out) {
  nxhal_device_info_t info;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_DEVICE_INFO_1_0_SIZE, "device info");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.kind = NXHAL_DEVICE_IPU;
  info.vendor = "Graphcore";
  info.name = device->desc.name;
  info.memory_bytes = (uint64_t)device->desc.num_ipus * (uint64_t)device->desc.tiles_per_ipu *
                      (uint64_t)device->desc.bytes_per_tile;
  info.compute_units = device->desc.num_ipus * device->desc.tiles_per_ipu;
  info.formats = device->formats;
  info.num_formats = 2;
  info.compat_key = device->desc.compat_key;
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
}

nxhal_status_t* gc_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = NXHAL_GC_NUM_ATTRIBUTES;
  return NULL;
}

nxhal_status_t* gc_device_attribute(nxhal_device_t* device, size_t index, nxhal_attribute_t* out) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_NAMED_VALUE_1_0_SIZE, "attribute");
  if (status != NULL) return status;
  if (index >= NXHAL_GC_NUM_ATTRIBUTES) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: attribute index %zu out of range (device has %d)", index,
                             NXHAL_GC_NUM_ATTRIBUTES);
  }
  nxhal_struct_fill(out, &device->attributes[index], sizeof(device->attributes[index]));
  return NULL;
}

nxhal_status_t* gc_device_memory_stats(nxhal_device_t* device, nxhal_memory_stats_t* out) {
  nxhal_memory_stats_t stats;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_MEMORY_STATS_1_0_SIZE, "memory stats");
  if (status != NULL) return status;
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  nxhal_memory_stats(&device->memory, &stats);
  nxhal_struct_fill(out, &stats, sizeof(stats));
  return NULL;
}

nxhal_status_t* gc_device_set_memory_limit(nxhal_device_t* device, uint64_t limit_bytes) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_memory_set_limit(&device->memory, limit_bytes);
  return NULL;
}
