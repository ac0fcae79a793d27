/* client.c -- the OpenVINO core, its devices and the probe's diagnostics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "internal.h"

static const char* const kFormats[] = {"onnx", "openvino-ir"};

/* The client's own options, then the compile options (options.c) it takes
 * as defaults for every compile. memory_limit's only bound is >= 0, checked
 * in npu_client_create: a range would have to print INT64_MAX as its top. */
static const nxhal_option_spec_t kClientSpecs[] = {
    {"cache_dir", NXHAL_VALUE_STRING, 0, 0, 0},
    {"memory_limit", NXHAL_VALUE_INT64, 0, 0, 0},
    {"target", NXHAL_VALUE_STRING, 0, 0, 0},
    {"precision", NXHAL_VALUE_STRING, 0, 0, 0},
    {"performance", NXHAL_VALUE_STRING, 0, 0, 0},
    {"streams", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, NPU_MAX_STREAMS)},
    {"cpu_pinning", NXHAL_VALUE_BOOL, 0, 0, 0},
    {"inference_threads", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, NPU_MAX_THREADS)},
};

/* A device property as a string, or NULL when OpenVINO does not report it.
 * Caller frees. */
static char* get_property(ov_core_t* core, const char* device, const char* key) {
  char* value = NULL;
  if (npu_ov.ov_core_get_property(core, device, key, &value) != OK || value == NULL) return NULL;
  char* copy = npu_strdup(value);
  npu_ov.ov_free(value);
  return copy;
}

static nxhal_device_kind_t kind_of(const char* ov_name) {
  if (strncmp(ov_name, "NPU", 3) == 0) return NXHAL_DEVICE_NPU;
  if (strncmp(ov_name, "CPU", 3) == 0) return NXHAL_DEVICE_CPU;
  if (strncmp(ov_name, "GPU", 3) == 0) return NXHAL_DEVICE_GPU;
  return NXHAL_DEVICE_OTHER;
}

/* Appends a line to *text (owned, realloc'd), newline-separated. */
static void append_line(char** text, const char* line) {
  size_t old = *text != NULL ? strlen(*text) : 0;
  size_t n = strlen(line);
  char* grown = realloc(*text, old + n + 2);
  if (grown == NULL) return;
  if (old > 0) grown[old++] = '\n';
  memcpy(grown + old, line, n + 1);
  *text = grown;
}

static void set_string_attribute(nxhal_attribute_t* a, const char* name, const char* value) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->name = name;
  a->type = NXHAL_VALUE_STRING;
  a->string_value = value;
}

static void set_bool_attribute(nxhal_attribute_t* a, const char* name, int value) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->name = name;
  a->type = NXHAL_VALUE_BOOL;
  a->bool_value = value != 0;
}

/* Whether oneDNN, inside OpenVINO's CPU plugin, was told to use no ISA
 * newer than one without VNNI (ONEDNN_MAX_CPU_ISA, or its older name
 * DNNL_MAX_CPU_ISA: SSE41, AVX, AVX2 or AVX512_CORE): its kernels then take
 * the saturating path even on a CPU that has VNNI. */
#if defined(__x86_64__)
static int isa_capped_below_vnni(void) {
  const char* cap = getenv("ONEDNN_MAX_CPU_ISA");
  if (cap == NULL || cap[0] == '\0') cap = getenv("DNNL_MAX_CPU_ISA");
  if (cap == NULL) return 0;
  static const char* const without_vnni[] = {"SSE41", "AVX", "AVX2", "AVX512_CORE"};
  for (size_t i = 0; i < sizeof without_vnni / sizeof without_vnni[0]; i++) {
    if (strcasecmp(cap, without_vnni[i]) == 0) return 1;
  }
  return 0;
}
#endif

/* Whether OpenVINO's CPU int8 kernels can saturate: without VNNI, x86 CPUs
 * multiply u8 activations by s8 weights with (v)pmaddubsw, whose sums of
 * two products saturate at 16 bits once weights leave [-64, 64]. With
 * AVX512-VNNI or AVX-VNNI the sums are 32-bit; other architectures run
 * other kernels. nx_hal.onnx.deviations reads it (issue 29). */
static int int8_pairs_saturate(void) {
#if defined(__x86_64__)
  if (isa_capped_below_vnni()) return 1;
#if (defined(__clang__) && __clang_major__ >= 13) || \
    (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11)
  __builtin_cpu_init();
  return !__builtin_cpu_supports("avx512vnni") && !__builtin_cpu_supports("avxvnni");
#else
  return 1; /* a compiler that cannot ask: assume they saturate (right, at float's speed) */
#endif
#else
  return 0;
#endif
}

/* Fills one device from OpenVINO's properties. */
static nxhal_status_t* device_init(nxhal_client_t* client, nxhal_device_t* dev, const char* name) {
  dev->client = client;
  dev->kind = kind_of(name);
  dev->ov_name = npu_strdup(name);
  dev->full_name = get_property(client->core, name, npu_ov.ov_property_key_device_full_name);
  if (dev->full_name == NULL) dev->full_name = npu_strdup(name);
  nxhal_memory_init(&dev->memory);
  char* mem = NULL;
  if (dev->kind == NXHAL_DEVICE_GPU)
    mem = get_property(client->core, name, "GPU_DEVICE_TOTAL_MEM_SIZE");
  if (dev->kind == NXHAL_DEVICE_NPU)
    mem = get_property(client->core, name, "NPU_DEVICE_TOTAL_MEM_SIZE");
  if (mem != NULL) dev->memory_bytes = strtoull(mem, NULL, 10);
  free(mem);
  if (dev->kind == NXHAL_DEVICE_CPU) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    dev->compute_units = n > 0 ? n : 0;
  } else if (dev->kind == NXHAL_DEVICE_GPU) {
    char* eu = get_property(client->core, name, "GPU_EXECUTION_UNITS_COUNT");
    if (eu != NULL) dev->compute_units = strtoll(eu, NULL, 10);
    free(eu);
  }
  /* The device plugin's own build ties compiled blobs as tightly as the
   * core's version does. */
  char plugin_build[128] = "";
  ov_core_version_list_t versions = {0};
  if (npu_ov.ov_core_get_versions_by_device_name(client->core, name, &versions) == OK) {
    if (versions.size > 0 && versions.versions[0].version.buildNumber != NULL) {
      snprintf(plugin_build, sizeof plugin_build, "%s", versions.versions[0].version.buildNumber);
    }
    npu_ov.ov_core_versions_free(&versions);
  }
  size_t n = strlen(client->ov_version) + strlen(name) + strlen(dev->full_name) +
             strlen(plugin_build) + strlen(NXHAL_NPU_VERSION) + 96;
  dev->compat_key = malloc(n);
  if (dev->ov_name == NULL || dev->full_name == NULL || dev->compat_key == NULL) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory describing device %s", name);
  }
  snprintf(dev->compat_key, n, "nx-hal-npu %s; openvino %s; device %s; %s; device-plugin %s",
           NXHAL_NPU_VERSION, client->ov_version, name, dev->full_name, plugin_build);
  set_string_attribute(&dev->attributes[0], "openvino_device", dev->ov_name);
  set_string_attribute(&dev->attributes[1], "openvino_version", client->ov_version);
  set_string_attribute(&dev->attributes[2], "full_name", dev->full_name);
  /* Which of possibly several OpenVINO installs answered, for bug reports. */
  set_string_attribute(&dev->attributes[3], "openvino_library", npu_ov_library_path());
  /* executable_deserialize takes `authenticated` (nx_hal.h). */
  set_bool_attribute(&dev->attributes[4], "authenticated_load", 1);
  dev->num_attributes = 5;
  if (dev->kind == NXHAL_DEVICE_CPU) {
    set_bool_attribute(&dev->attributes[5], "int8_pairs_saturate", int8_pairs_saturate());
    dev->num_attributes = 6;
  }
  return NULL;
}

int npu_client_has_device(const nxhal_client_t* client, const char* name) {
  size_t base = strcspn(name, ".");
  for (size_t i = 0; i < client->num_devices; i++) {
    const char* have = client->devices[i].ov_name;
    if (strcmp(have, name) == 0) return 1;
    if (name[base] == '\0' && strncmp(have, name, base) == 0 &&
        (have[base] == '.' || have[base] == '\0')) {
      return 1;
    }
  }
  return 0;
}

/* The last non-empty line of OpenVINO's error text: the reason itself,
 * without the "Exception from <file>:<line>" chain above it. */
static const char* last_line(const char* text) {
  const char* nl = strrchr(text, '\n');
  return nl != NULL ? nl + 1 : text;
}

/* Why OpenVINO offers no NPU, in its own words: ask the NPU plugin for its
 * driver version, which fails with the reason ("No available backend", or
 * the plugin library that failed to load). */
static void diagnose_missing(nxhal_client_t* client, const char* name) {
  char* value = NULL;
  char line[2048];
  ov_status_e st = npu_ov.ov_core_get_property(client->core, name, "NPU_DRIVER_VERSION", &value);
  if (st == OK) {
    snprintf(line, sizeof line,
             "%s: not available: driver %s is installed but OpenVINO lists no %s device", name,
             value != NULL ? value : "?", name);
    if (value != NULL) npu_ov.ov_free(value);
  } else {
    char* why = npu_ov_last_error();
    snprintf(line, sizeof line, "%s: not available: %s (OpenVINO %s plugin)", name,
             why != NULL && why[0] ? last_line(why) : npu_ov.ov_get_error_info(st), name);
    free(why);
  }
  append_line(&client->diagnostics, line);
}

/* OpenVINO's build number, for the compat key and plugin info. Caller frees. */
static char* ov_version_string(void) {
  char* text = NULL;
  ov_version_t version = {0};
  if (npu_ov.ov_get_openvino_version(&version) == OK) {
    text = npu_strdup(version.buildNumber);
    npu_ov.ov_version_free(&version);
  }
  return text != NULL ? text : npu_strdup("unknown");
}

/* Creates the OpenVINO core and one nx_hal device per device it lists, each
 * capped at limit_bytes (0: none). On failure the devices made so far stay
 * in client->devices for npu_client_destroy to free. */
static nxhal_status_t* open_devices(nxhal_client_t* client, uint64_t limit_bytes) {
  ov_status_e ost = npu_ov.ov_core_create(&client->core);
  if (ost != OK) return npu_ov_error(NXHAL_UNAVAILABLE, ost, "creating the OpenVINO core");
  ov_available_devices_t avail = {0};
  ost = npu_ov.ov_core_get_available_devices(client->core, &avail);
  if (ost != OK) return npu_ov_error(NXHAL_UNAVAILABLE, ost, "listing OpenVINO devices");
  client->devices = calloc(avail.size > 0 ? avail.size : 1, sizeof *client->devices);
  if (client->devices == NULL) {
    npu_ov.ov_available_devices_free(&avail);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  nxhal_status_t* st = NULL;
  for (size_t i = 0; i < avail.size; i++) {
    st = device_init(client, &client->devices[i], avail.devices[i]);
    client->num_devices = i + 1;
    if (st != NULL) break;
    nxhal_memory_set_limit(&client->devices[i].memory, limit_bytes);
  }
  npu_ov.ov_available_devices_free(&avail);
  return st;
}

/* OpenVINO's CPU defaults to bf16 where the CPU has it, which silently
 * costs f32 models two decimal digits; nx_hal runs f32 unless asked, and
 * "auto" leaves OpenVINO's choice. Set on the core so compiles, AUTO and
 * imported blobs all see it. OpenVINO's own value is read first: once
 * pinned, the core no longer reports it, and a compile asking for "auto"
 * needs it. */
static nxhal_status_t* pin_cpu_precision(nxhal_client_t* client) {
  if (!npu_client_has_device(client, "CPU")) return NULL;
  client->cpu_own_precision =
      get_property(client->core, "CPU", npu_ov.ov_property_key_hint_inference_precision);
  const char* precision = client->defaults.precision != NULL ? client->defaults.precision : "f32";
  if (strcmp(precision, "auto") == 0) return NULL;
  ov_status_e ost = npu_ov.ov_core_set_property(
      client->core, "CPU", npu_ov.ov_property_key_hint_inference_precision, precision);
  if (ost != OK) {
    return npu_ov_error(NXHAL_INVALID_ARGUMENT, ost, "setting the CPU's inference precision");
  }
  client->cpu_pinned = 1;
  return NULL;
}

/* Sets nx_hal's default CPU pinning (NPU_DEFAULT_CPU_PINNING, chosen by
 * measurement: docs/performance.md) on a core's CPU, so that compiles and
 * imports through it get it without naming it; a compile's own cpu_pinning
 * overrides it. */
static ov_status_e set_default_pinning(const nxhal_client_t* client, ov_core_t* core) {
  if (!npu_client_has_device(client, "CPU")) return OK;
  return npu_ov.ov_core_set_property(core, "CPU", npu_ov.ov_property_key_hint_enable_cpu_pinning,
                                     NPU_DEFAULT_CPU_PINNING ? "YES" : "NO");
}

/* The precision code `client->core`'s CPU runs at. */
static int core_precision(const nxhal_client_t* client) {
  if (!client->cpu_pinned) return NPU_PRECISION_AUTO;
  int code = npu_precision_code(client->defaults.precision);
  return code != 0 ? code : npu_precision_code("f32");
}

nxhal_status_t* npu_client_import_core(nxhal_client_t* client, int code, const char* target,
                                       ov_core_t** out) {
  *out = client->core;
  /* Only the CPU's precision is pinned on the core; other devices import
   * as they always did. */
  if (code == 0 || code > NPU_PRECISION_MAX || strstr(target, "CPU") == NULL ||
      code == core_precision(client)) {
    return NULL;
  }
  nxhal_status_t* st = NULL;
  pthread_mutex_lock(&client->import_mu);
  ov_core_t* core = client->import_cores[code];
  if (core == NULL) {
    ov_status_e ost = npu_ov.ov_core_create(&core);
    if (ost == OK) ost = set_default_pinning(client, core);
    if (ost == OK && code != NPU_PRECISION_AUTO) {
      ost = npu_ov.ov_core_set_property(
          core, "CPU", npu_ov.ov_property_key_hint_inference_precision, npu_precision_name(code));
    }
    if (ost != OK) {
      st = npu_ov_error(NXHAL_INTERNAL, ost, "creating an OpenVINO core to import through");
      if (core != NULL) npu_ov.ov_core_free(core);
      core = NULL;
    }
    client->import_cores[code] = core;
  }
  pthread_mutex_unlock(&client->import_mu);
  if (core != NULL) *out = core;
  return st;
}

nxhal_status_t* npu_client_settings_core(nxhal_client_t* client, int code, const char* target,
                                         const char* const* kv, size_t n, ov_core_t** out) {
  *out = NULL;
  if (code == 0 || code > NPU_PRECISION_MAX) code = core_precision(client);
  ov_core_t* core = NULL;
  ov_status_e ost = npu_ov.ov_core_create(&core);
  if (ost == OK) ost = set_default_pinning(client, core);
  if (ost == OK && code != NPU_PRECISION_AUTO && strstr(target, "CPU") != NULL) {
    ost = npu_ov.ov_core_set_property(core, "CPU", npu_ov.ov_property_key_hint_inference_precision,
                                      npu_precision_name(code));
  }
  /* One pair per call: the variadic setter reads a single pair. */
  for (size_t i = 0; ost == OK && i + 1 < n; i += 2) {
    ost = npu_ov.ov_core_set_property(core, target, kv[i], kv[i + 1]);
  }
  if (ost != OK) {
    nxhal_status_t* st = npu_ov_error(NXHAL_INVALID_ARGUMENT, ost,
                                      "applying an executable's run settings to its import");
    if (core != NULL) npu_ov.ov_core_free(core);
    return st;
  }
  *out = core;
  return NULL;
}

nxhal_status_t* npu_client_create(const nxhal_option_t* options, size_t num_options,
                                  nxhal_client_t** out_client) {
  NXHAL_REQUIRE_ARG(out_client);
  *out_client = NULL;
  if (num_options > 0) NXHAL_REQUIRE_ARG(options);
  nxhal_status_t* st = nxhal_options_check(options, num_options, kClientSpecs,
                                           sizeof kClientSpecs / sizeof kClientSpecs[0]);
  if (st != NULL) return st;
  st = npu_ov_load();
  if (st != NULL) return st;
  const nxhal_option_t* limit = nxhal_options_find(options, num_options, "memory_limit");
  if (limit != NULL && limit->int64_value < 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option 'memory_limit': %lld is negative",
                             (long long)limit->int64_value);
  }
  nxhal_client_t* client = calloc(1, sizeof *client);
  if (client == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  atomic_init(&client->refs, 1); /* the caller's handle */
  pthread_mutex_init(&client->import_mu, NULL);
  st = npu_compile_options_parse(options, num_options, NULL, 1, &client->defaults);
  if (st != NULL) goto fail;
  const nxhal_option_t* cache = nxhal_options_find(options, num_options, "cache_dir");
  if (cache != NULL) client->cache_dir = npu_strdup(cache->string_value);
  client->ov_version = ov_version_string();

  st = open_devices(client, limit != NULL ? (uint64_t)limit->int64_value : 0);
  if (st != NULL) goto fail;
  if (!npu_client_has_device(client, "NPU")) diagnose_missing(client, "NPU");
  st = pin_cpu_precision(client);
  ov_status_e pin = st == NULL ? set_default_pinning(client, client->core) : OK;
  if (pin != OK) st = npu_ov_error(NXHAL_INTERNAL, pin, "setting the CPU's thread pinning");
  if (st != NULL) goto fail;
  if (client->num_devices == 0) {
    st = nxhal_status_make(NXHAL_UNAVAILABLE, "OpenVINO reports no devices. %s",
                           client->diagnostics != NULL ? client->diagnostics : "");
    goto fail;
  }
  if (client->diagnostics == NULL) client->diagnostics = npu_strdup("");
  *out_client = client;
  return NULL;
fail:
  npu_client_destroy(client);
  return st;
}

/* The last reference is gone: nothing made from the client is alive. */
static void client_free(nxhal_client_t* client) {
  for (size_t i = 0; i < client->num_devices; i++) {
    nxhal_device_t* d = &client->devices[i];
    free(d->ov_name);
    free(d->full_name);
    free(d->compat_key);
    nxhal_memory_destroy(&d->memory);
  }
  free(client->devices);
  if (client->core != NULL) npu_ov.ov_core_free(client->core);
  for (int i = 0; i <= NPU_PRECISION_MAX; i++) {
    if (client->import_cores[i] != NULL) npu_ov.ov_core_free(client->import_cores[i]);
  }
  pthread_mutex_destroy(&client->import_mu);
  free(client->diagnostics);
  free(client->cache_dir);
  free(client->ov_version);
  free(client->cpu_own_precision);
  npu_compile_options_free(&client->defaults);
  free(client);
}

/* The caller already holds a reference (a live buffer of the client). */
void npu_client_retain(nxhal_client_t* client) {
  atomic_fetch_add_explicit(&client->refs, 1, memory_order_relaxed);
}

/* Any thread may drop the last reference (a consumer deleting an export);
 * acq_rel orders every holder's use before the free. */
void npu_client_release(nxhal_client_t* client) {
  if (client == NULL) return;
  if (atomic_fetch_sub_explicit(&client->refs, 1, memory_order_acq_rel) != 1) return;
  client_free(client);
}

/* Drops the user's reference only: live DLPack exports keep the devices
 * (and their accounting) until their consumers delete them. */
void npu_client_destroy(nxhal_client_t* client) {
  npu_client_release(client);
}

nxhal_status_t* npu_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_text);
  *out_text = client->diagnostics;
  return NULL;
}

nxhal_status_t* npu_client_device_count(nxhal_client_t* client, size_t* out_count) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = client->num_devices;
  return NULL;
}

nxhal_status_t* npu_client_device(nxhal_client_t* client, size_t index,
                                  nxhal_device_t** out_device) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_device);
  if (index >= client->num_devices) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "device index %zu out of range (%zu devices)",
                             index, client->num_devices);
  }
  *out_device = &client->devices[index];
  return NULL;
}

nxhal_status_t* npu_device_info(nxhal_device_t* device, nxhal_device_info_t* out) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_status_t* st = nxhal_check_struct(out, NXHAL_DEVICE_INFO_1_0_SIZE, "nxhal_device_info_t");
  if (st != NULL) return st;
  out->kind = device->kind;
  out->vendor = "Intel (OpenVINO)";
  out->name = device->full_name;
  out->memory_bytes = device->memory_bytes;
  out->compute_units = device->compute_units;
  out->formats = kFormats;
  out->num_formats = sizeof kFormats / sizeof kFormats[0];
  out->compat_key = device->compat_key;
  return NULL;
}

nxhal_status_t* npu_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = device->num_attributes;
  return NULL;
}

nxhal_status_t* npu_device_attribute(nxhal_device_t* device, size_t index, nxhal_attribute_t* out) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_status_t* st = nxhal_check_struct(out, NXHAL_NAMED_VALUE_1_0_SIZE, "nxhal_attribute_t");
  if (st != NULL) return st;
  if (index >= device->num_attributes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "attribute index %zu out of range (%zu)",
                             index, device->num_attributes);
  }
  nxhal_struct_fill(out, &device->attributes[index], sizeof device->attributes[index]);
  return NULL;
}
