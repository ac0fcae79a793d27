/* client.c -- an nx_hal client: one PJRT client per backend library that
 * gave devices, their devices, and what the probe found for the others. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* A growing text buffer for diagnostics. */
typedef struct tpu_text {
  char* data;
  size_t used, cap;
} tpu_text_t;

static void tpu_text_add(tpu_text_t* text, const char* part) {
  size_t n = strlen(part);
  if (text->used + n + 2 > text->cap) {
    size_t cap = text->cap ? text->cap : 256;
    char* bigger;
    while (text->used + n + 2 > cap) cap *= 2;
    bigger = (char*)realloc(text->data, cap);
    if (bigger == NULL) return;
    text->data = bigger;
    text->cap = cap;
  }
  memcpy(text->data + text->used, part, n);
  text->used += n;
  text->data[text->used++] = '\n';
  text->data[text->used] = '\0';
}

/* --- candidates ---------------------------------------------------------- */

static int tpu_is_family(const char* s) {
  return strcmp(s, "cpu") == 0 || strcmp(s, "gpu") == 0 || strcmp(s, "tpu") == 0;
}

/* The family a label states, and the name it is shown by (both malloc'd):
 * "gpu:cuda12" -> gpu, cuda12; "cpu" -> cpu, cpu; "cuda12" -> gpu, cuda12
 * (the CUDA and ROCm labels name GPU plugins); anything else -> "", label.
 * 0 on OOM. */
static int tpu_label_split(const char* label, char** out_family, char** out_name) {
  const char* colon = strchr(label, ':');
  *out_family = NULL;
  *out_name = NULL;
  if (colon != NULL) {
    char* family = tpu_strndup(label, (size_t)(colon - label));
    if (family != NULL && tpu_is_family(family)) {
      *out_family = family;
      *out_name = tpu_strdup(colon + 1);
    } else {
      free(family);
    }
  } else if (tpu_is_family(label)) {
    *out_family = tpu_strdup(label);
  } else if (strncmp(label, "cuda", 4) == 0 || strncmp(label, "rocm", 4) == 0) {
    *out_family = tpu_strdup("gpu");
  }
  if (*out_family == NULL) *out_family = tpu_strdup("");
  if (*out_name == NULL) *out_name = tpu_strdup(label);
  if (*out_family == NULL || *out_name == NULL) {
    free(*out_family);
    free(*out_name);
    *out_family = *out_name = NULL;
    return 0;
  }
  return 1;
}

int tpu_candidates_add(tpu_candidate_t** items, size_t* count, const char* label,
                       const char* path) {
  size_t i;
  tpu_candidate_t* bigger = NULL;
  char* family = NULL;
  char* name = NULL;
  char* path_copy;
  if (path == NULL || *path == '\0') return 0;
  for (i = 0; i < *count; ++i) {
    if (strcmp((*items)[i].path, path) == 0) return 0;
  }
  path_copy = tpu_strdup(path);
  if (path_copy != NULL && tpu_label_split(label, &family, &name)) {
    bigger = (tpu_candidate_t*)realloc(*items, (*count + 1) * sizeof(**items));
  }
  if (bigger == NULL) {
    free(family);
    free(name);
    free(path_copy);
    return 0;
  }
  *items = bigger;
  (*items)[*count].label = name;
  (*items)[*count].family = family;
  (*items)[*count].path = path_copy;
  ++*count;
  return 1;
}

static void tpu_candidates_free(tpu_candidate_t* items, size_t count) {
  size_t i;
  for (i = 0; i < count; ++i) {
    free(items[i].label);
    free(items[i].family);
    free(items[i].path);
  }
  free(items);
}

/* Appends "label=path;label=path;path" entries; skips repeated paths. */
static void tpu_candidates_parse(const char* list, const char* default_label,
                                 tpu_candidate_t** items, size_t* count) {
  const char* p = list;
  while (p != NULL && *p) {
    const char* end = strchr(p, ';');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > 0) {
      char* entry = tpu_strndup(p, n);
      char* eq = entry ? strchr(entry, '=') : NULL;
      if (eq != NULL) {
        *eq = '\0';
        tpu_candidates_add(items, count, entry, eq + 1);
      } else if (entry != NULL) {
        tpu_candidates_add(items, count, default_label, entry);
      }
      free(entry);
    }
    p = end ? end + 1 : NULL;
  }
}

/* The backends to try: library_path first (one path, taken as is: no ';'
 * or '=' splitting; its family from the PJRT client), then backend_paths;
 * given neither, what C programs without the Python package rely on: the
 * environment overrides, then the backends installed beside this library.
 * UNAVAILABLE, saying where it looked, when there is none. */
static nxhal_status_t* tpu_candidates_collect(const tpu_create_config_t* config,
                                              tpu_candidate_t** items, size_t* count) {
  char* searched = NULL;
  nxhal_status_t* status;
  if (config->library_path != NULL)
    tpu_candidates_add(items, count, "explicit", config->library_path);
  if (config->backend_paths != NULL) tpu_candidates_parse(config->backend_paths, "", items, count);
  if (*count > 0) return NULL;
  tpu_candidates_parse(getenv("NXHAL_TPU_BACKEND_PATHS"), "", items, count);
  tpu_candidates_parse(getenv("TPU_LIBRARY_PATH"), "tpu", items, count);
  tpu_backends_discover(items, count, &searched);
  if (*count > 0) {
    free(searched);
    return NULL;
  }
  status = nxhal_status_make(
      NXHAL_UNAVAILABLE,
      "no PJRT backend installed (searched %s; NXHAL_TPU_BACKEND_PATHS and TPU_LIBRARY_PATH "
      "are not set): " TPU_INSTALL_HINT,
      searched != NULL ? searched : "nothing: this library's location is unknown");
  free(searched);
  return status;
}

/* Reads a PJRT string getter on the client into a malloc'd string. */
static char* tpu_client_platform(const PJRT_Api* api, PJRT_Client* client, int version) {
  if (version) {
    PJRT_Client_PlatformVersion_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
    args.client = client;
    PJRT_Error* error = api->PJRT_Client_PlatformVersion(&args);
    if (error != NULL) {
      free(tpu_take_error_message(api, error));
      return tpu_strdup("");
    }
    return tpu_strndup(args.platform_version, args.platform_version_size);
  } else {
    PJRT_Client_PlatformName_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
    args.client = client;
    PJRT_Error* error = api->PJRT_Client_PlatformName(&args);
    if (error != NULL) {
      free(tpu_take_error_message(api, error));
      return tpu_strdup("");
    }
    return tpu_strndup(args.platform_name, args.platform_name_size);
  }
}

static void tpu_client_destroy_pjrt(const PJRT_Api* api, PJRT_Client* client) {
  PJRT_Client_Destroy_Args args;
  if (client == NULL) return;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client;
  free(tpu_take_error_message(api, api->PJRT_Client_Destroy(&args)));
}

/* --- devices ------------------------------------------------------------- */

static char* tpu_device_keep_string(nxhal_device_t* device, char* s) {
  char** bigger;
  if (s == NULL) return NULL;
  bigger = (char**)realloc(device->owned_strings, (device->num_owned_strings + 1) * sizeof(char*));
  if (bigger == NULL) {
    free(s);
    return NULL;
  }
  device->owned_strings = bigger;
  device->owned_strings[device->num_owned_strings++] = s;
  return s;
}

static nxhal_attribute_t* tpu_device_new_attribute(nxhal_device_t* device, const char* name,
                                                   nxhal_value_type_t type) {
  nxhal_attribute_t* bigger = (nxhal_attribute_t*)realloc(
      device->attributes, (device->num_attributes + 1) * sizeof(nxhal_attribute_t));
  nxhal_attribute_t* a;
  if (bigger == NULL) return NULL;
  device->attributes = bigger;
  a = &device->attributes[device->num_attributes];
  memset(a, 0, sizeof(*a));
  a->struct_size = NXHAL_NAMED_VALUE_1_0_SIZE;
  a->name = tpu_device_keep_string(device, tpu_strdup(name));
  if (a->name == NULL) return NULL;
  a->type = type;
  ++device->num_attributes;
  return a;
}

static void tpu_device_add_string(nxhal_device_t* device, const char* name, const char* value) {
  nxhal_attribute_t* a = tpu_device_new_attribute(device, name, NXHAL_VALUE_STRING);
  if (a != NULL) a->string_value = tpu_device_keep_string(device, tpu_strdup(value));
  if (a != NULL && a->string_value == NULL) a->string_value = "";
}

static void tpu_device_add_int(nxhal_device_t* device, const char* name, int64_t value) {
  nxhal_attribute_t* a = tpu_device_new_attribute(device, name, NXHAL_VALUE_INT64);
  if (a != NULL) a->int64_value = value;
}

static void tpu_device_add_bool(nxhal_device_t* device, const char* name, int value) {
  nxhal_attribute_t* a = tpu_device_new_attribute(device, name, NXHAL_VALUE_BOOL);
  if (a != NULL) a->bool_value = value != 0;
}

/* Copies the PJRT device description's attributes. */
static void tpu_device_copy_pjrt_attributes(nxhal_device_t* device, const PJRT_Api* api,
                                            PJRT_DeviceDescription* desc) {
  PJRT_DeviceDescription_Attributes_Args args;
  size_t i;
  if (!TPU_HAS_FN(api, PJRT_DeviceDescription_Attributes)) return;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE;
  args.device_description = desc;
  PJRT_Error* error = api->PJRT_DeviceDescription_Attributes(&args);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return;
  }
  for (i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue* v = &args.attributes[i];
    char name[160];
    nxhal_attribute_t* a;
    snprintf(name, sizeof(name), "pjrt.%.*s", (int)v->name_size, v->name);
    switch (v->type) {
      case PJRT_NamedValue_kString:
        a = tpu_device_new_attribute(device, name, NXHAL_VALUE_STRING);
        if (a) {
          a->string_value =
              tpu_device_keep_string(device, tpu_strndup(v->string_value, v->value_size));
          if (a->string_value == NULL) a->string_value = "";
        }
        break;
      case PJRT_NamedValue_kInt64:
        a = tpu_device_new_attribute(device, name, NXHAL_VALUE_INT64);
        if (a) a->int64_value = v->int64_value;
        if (strcmp(name, "pjrt.core_count") == 0 || strcmp(name, "pjrt.num_cores") == 0) {
          device->compute_units = v->int64_value;
        }
        break;
      case PJRT_NamedValue_kFloat:
        a = tpu_device_new_attribute(device, name, NXHAL_VALUE_DOUBLE);
        if (a) a->double_value = v->float_value;
        break;
      case PJRT_NamedValue_kBool:
        a = tpu_device_new_attribute(device, name, NXHAL_VALUE_BOOL);
        if (a) a->bool_value = v->bool_value ? 1 : 0;
        break;
      case PJRT_NamedValue_kInt64List: {
        int64_t** bigger;
        int64_t* list = (int64_t*)malloc(sizeof(int64_t) * (v->value_size ? v->value_size : 1));
        if (list == NULL) break;
        memcpy(list, v->int64_array_value, sizeof(int64_t) * v->value_size);
        bigger = (int64_t**)realloc(device->owned_lists,
                                    (device->num_owned_lists + 1) * sizeof(int64_t*));
        if (bigger == NULL) {
          free(list);
          break;
        }
        device->owned_lists = bigger;
        device->owned_lists[device->num_owned_lists++] = list;
        a = tpu_device_new_attribute(device, name, NXHAL_VALUE_INT64_LIST);
        if (a) {
          a->int64_list = list;
          a->int64_list_size = v->value_size;
        }
        break;
      }
      default: break;
    }
  }
}

static nxhal_device_kind_t tpu_kind_from(const char* platform, const char* device_kind) {
  char lower[64] = {0};
  size_t i;
  for (i = 0; platform[i] && i + 1 < sizeof(lower); ++i) {
    lower[i] = (char)((platform[i] >= 'A' && platform[i] <= 'Z') ? platform[i] + 32 : platform[i]);
  }
  if (strcmp(lower, "tpu") == 0) return NXHAL_DEVICE_TPU;
  if (strcmp(lower, "cuda") == 0 || strcmp(lower, "rocm") == 0 || strcmp(lower, "gpu") == 0 ||
      strcmp(lower, "sycl") == 0) {
    return NXHAL_DEVICE_GPU;
  }
  if (strcmp(lower, "cpu") == 0 || strcmp(lower, "host") == 0) return NXHAL_DEVICE_CPU;
  if (strstr(device_kind, "TPU") != NULL) return NXHAL_DEVICE_TPU;
  if (strstr(device_kind, "GPU") != NULL || strstr(device_kind, "NVIDIA") != NULL) {
    return NXHAL_DEVICE_GPU;
  }
  if (strstr(device_kind, "cpu") != NULL || strstr(device_kind, "CPU") != NULL) {
    return NXHAL_DEVICE_CPU;
  }
  return NXHAL_DEVICE_OTHER;
}

static const char* tpu_vendor_for(nxhal_device_kind_t kind, const char* platform) {
  if (kind == NXHAL_DEVICE_TPU) return "Google";
  if (strcmp(platform, "cuda") == 0) return "NVIDIA";
  if (strcmp(platform, "rocm") == 0) return "AMD";
  if (kind == NXHAL_DEVICE_CPU) return "OpenXLA (XLA CPU)";
  return "OpenXLA";
}

/* The device's kind text ("" if PJRT states none) and id, from its PJRT
 * description (*desc; NULL when PJRT gives none). NULL on OOM. */
static char* tpu_device_describe(const PJRT_Api* api, PJRT_Device* pjrt,
                                 PJRT_DeviceDescription** desc, int* id) {
  PJRT_Device_GetDescription_Args dargs;
  PJRT_DeviceDescription_Kind_Args kargs;
  PJRT_DeviceDescription_Id_Args iargs;
  PJRT_Error* error;
  char* kind_text = NULL;
  *id = 0;
  memset(&dargs, 0, sizeof(dargs));
  dargs.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  dargs.device = pjrt;
  error = api->PJRT_Device_GetDescription(&dargs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    dargs.device_description = NULL;
  }
  *desc = dargs.device_description;
  if (*desc != NULL) {
    memset(&kargs, 0, sizeof(kargs));
    kargs.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
    kargs.device_description = *desc;
    error = api->PJRT_DeviceDescription_Kind(&kargs);
    if (error == NULL)
      kind_text = tpu_strndup(kargs.device_kind, kargs.device_kind_size);
    else
      free(tpu_take_error_message(api, error));
    memset(&iargs, 0, sizeof(iargs));
    iargs.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
    iargs.device_description = *desc;
    error = api->PJRT_DeviceDescription_Id(&iargs);
    if (error == NULL)
      *id = iargs.id;
    else
      free(tpu_take_error_message(api, error));
  }
  return kind_text != NULL ? kind_text : tpu_strdup("");
}

/* The attributes every device states: its backend's versions and path, and
 * how DLPack exchanges its memory. */
static void tpu_device_add_standard_attributes(nxhal_device_t* device, const char* kind_text,
                                               int id) {
  const tpu_backend_t* backend = device->backend;
  const PJRT_Api* api = backend->api;
  char version[32];
  tpu_device_add_string(device, "platform_name", backend->platform_name);
  tpu_device_add_string(device, "platform_version", backend->platform_version);
  tpu_device_add_string(device, "device_kind", kind_text);
  tpu_device_add_int(device, "pjrt_device_id", id);
  snprintf(version, sizeof(version), "%d.%d", backend->lib->api_major, backend->lib->api_minor);
  tpu_device_add_string(device, "pjrt_api_version", version);
  tpu_device_add_string(device, "xla_version", backend->lib->xla_version);
  tpu_device_add_string(device, "stablehlo_version", backend->lib->stablehlo_version);
  tpu_device_add_string(device, "stablehlo_minimum_version", backend->lib->stablehlo_min_version);
  tpu_device_add_string(device, "backend_path", backend->lib->path);
  tpu_device_add_string(
      device, "dlpack_export",
      device->is_cpu && TPU_HAS_FN(api, PJRT_Buffer_UnsafePointer) ? "zero-copy" : "copy to host");
  tpu_device_add_string(device, "dlpack_import",
                        device->is_cpu && TPU_HAS_FN(api, PJRT_Client_CreateViewOfDeviceBuffer)
                            ? "zero-copy"
                            : "copy");
  /* What a program's donated inputs (input-output aliasing) get here. */
  tpu_device_add_string(device, "donation", device->donates ? "in place" : "copy");
  /* executable_deserialize takes `authenticated` (nx_hal.h). */
  tpu_device_add_bool(device, "authenticated_load", 1);
}

/* Capacity: PJRT states it only through memory statistics, on some
 * backends; the entry may be missing or UNIMPLEMENTED. */
static void tpu_device_read_capacity(nxhal_device_t* device, const PJRT_Api* api) {
  PJRT_Device_MemoryStats_Args margs;
  PJRT_Error* error;
  if (!TPU_HAS_FN(api, PJRT_Device_MemoryStats)) return;
  memset(&margs, 0, sizeof(margs));
  margs.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  margs.device = device->pjrt;
  error = api->PJRT_Device_MemoryStats(&margs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return;
  }
  if (margs.bytes_limit_is_set && margs.bytes_limit > 0) {
    device->memory_bytes = (uint64_t)margs.bytes_limit;
  }
}

/* The oldest StableHLO version of an XLA CPU plugin measured to compute a
 * donated step right. xla_cpu_pjrt 0.0.1 (StableHLO 1.13.3) computes a
 * donated training step wrongly once a donated parameter is updated in place
 * (bench/donation_check.py: JAX itself on it is 0.065 off jaxlib's own CPU
 * after 10 steps; without donation 2.4e-7); XLA's CPU plugin of jax 0.11.2
 * (StableHLO 1.20.0, as in lammps-jax-pjrt-cpu) is 2.4e-7 off either way. The
 * versions between were not measured, so they copy. */
static const long tpu_cpu_donation_since[3] = {1, 20, 0};

/* Whether donated inputs are given to outputs in place: always on TPUs and
 * GPUs; on a CPU backend only from tpu_cpu_donation_since on, elsewhere PJRT
 * copies them (execute.c). */
static int tpu_device_donates(const nxhal_device_t* device) {
  const char* text = device->backend->lib->stablehlo_version;
  size_t i;
  if (!device->is_cpu) return 1;
  for (i = 0; i < 3; ++i) {
    char* end;
    long part = strtol(text, &end, 10);
    if (end == text) return 0; /* not stated, or not a version: copy */
    if (part != tpu_cpu_donation_since[i]) return part > tpu_cpu_donation_since[i];
    if (*end != '.') return i == 2 || tpu_cpu_donation_since[i + 1] == 0;
    text = end + 1;
  }
  return 1;
}

/* Fills one device from a PJRT device of `backend`. 0 on OOM. */
static int tpu_device_init(nxhal_device_t* device, tpu_backend_t* backend, PJRT_Device* pjrt,
                           uint64_t memory_limit) {
  const PJRT_Api* api = backend->api;
  PJRT_DeviceDescription* desc;
  char* kind_text;
  int id;
  memset(device, 0, sizeof(*device));
  device->backend = backend;
  device->pjrt = pjrt;
  nxhal_memory_init(&device->memory);
  tpu_staging_init(&device->staging);
  nxhal_memory_set_limit(&device->memory, memory_limit);
  kind_text = tpu_device_describe(api, pjrt, &desc, &id);
  if (kind_text == NULL) return 0;
  device->kind = tpu_kind_from(backend->platform_name, kind_text);
  device->is_cpu = device->kind == NXHAL_DEVICE_CPU;
  device->donates = tpu_device_donates(device);
  device->vendor = tpu_device_keep_string(
      device, tpu_strdup(tpu_vendor_for(device->kind, backend->platform_name)));
  device->name = tpu_device_keep_string(
      device, tpu_sprintf("%s:%d (%s)", backend->platform_name, id, kind_text));
  if (device->vendor == NULL || device->name == NULL) {
    free(kind_text);
    return 0;
  }
  tpu_device_add_standard_attributes(device, kind_text, id);
  if (desc != NULL) tpu_device_copy_pjrt_attributes(device, api, desc);
  tpu_device_read_capacity(device, api);
  free(kind_text);
  return 1;
}

static void tpu_device_free(nxhal_device_t* device) {
  size_t i;
  for (i = 0; i < device->num_owned_strings; ++i) free(device->owned_strings[i]);
  for (i = 0; i < device->num_owned_lists; ++i) free(device->owned_lists[i]);
  free(device->owned_strings);
  free(device->owned_lists);
  free(device->attributes);
  nxhal_memory_destroy(&device->memory);
  tpu_staging_destroy(&device->staging);
}

/* --- backends ------------------------------------------------------------ */

/* The family of PJRT create options a platform takes, from the name its
 * PJRT client reports ("cpu", "cuda", "tpu", ...); "" when it names none. */
static const char* tpu_family_from_platform(const char* platform) {
  switch (tpu_kind_from(platform, "")) {
    case NXHAL_DEVICE_CPU: return "cpu";
    case NXHAL_DEVICE_GPU: return "gpu";
    case NXHAL_DEVICE_TPU: return "tpu";
    default: return "";
  }
}

/* Creates a PJRT client on `lib` with the PJRT create options of `family`.
 * NULL and *out_client on success; otherwise a malloc'd reason. */
static char* tpu_pjrt_client_create(const tpu_library_t* lib, const nxhal_option_t* options,
                                    size_t num_options, const char* family,
                                    PJRT_Client** out_client) {
  PJRT_NamedValue values[TPU_MAX_PJRT_OPTIONS];
  PJRT_Client_Create_Args cargs;
  PJRT_Error* error;
  char* text;
  char* reason;
  memset(&cargs, 0, sizeof(cargs));
  cargs.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  cargs.create_options = values;
  cargs.num_options = tpu_pjrt_create_options(options, num_options, family, values);
  error = lib->api->PJRT_Client_Create(&cargs);
  if (error == NULL) {
    *out_client = cargs.client;
    return NULL;
  }
  text = tpu_take_error_message(lib->api, error);
  reason = tpu_sprintf("PJRT_Client_Create failed: %s", text ? text : "");
  free(text);
  return reason;
}

/* Creates the backend's PJRT client and reads its platform. A candidate
 * whose label states no family gets the family its client reports: a
 * first client is made without family options, and when the options hold
 * some for the reported family, it is made again with them (the platform
 * name is only known from a client). NULL on success, else the reason. */
static char* tpu_backend_connect(const tpu_candidate_t* c, const nxhal_option_t* options,
                                 size_t num_options, tpu_backend_t* backend) {
  PJRT_NamedValue values[TPU_MAX_PJRT_OPTIONS];
  const char* family;
  char* reason =
      tpu_pjrt_client_create(backend->lib, options, num_options, c->family, &backend->client);
  if (reason != NULL) return reason;
  backend->platform_name = tpu_client_platform(backend->api, backend->client, 0);
  backend->platform_version = tpu_client_platform(backend->api, backend->client, 1);
  family = tpu_family_from_platform(backend->platform_name ? backend->platform_name : "");
  if (*c->family != '\0' || tpu_pjrt_create_options(options, num_options, family, values) == 0) {
    return NULL;
  }
  tpu_client_destroy_pjrt(backend->api, backend->client);
  backend->client = NULL;
  reason = tpu_pjrt_client_create(backend->lib, options, num_options, family, &backend->client);
  if (reason != NULL) {
    free(backend->platform_name);
    free(backend->platform_version);
  }
  return reason;
}

/* The key serialized executables for the backend's devices must match.
 * xla_version is a coarse number (XLA CPU states "2"); the library's size
 * tells builds apart cheaply, so an executable from another build of the
 * same version is refused before PJRT parses it. */
static char* tpu_backend_compat_key(const tpu_backend_t* backend) {
  struct stat st;
  long long build = stat(backend->lib->path, &st) == 0 ? (long long)st.st_size : 0;
  return tpu_sprintf(
      "platform=%s;platform_version=%s;xla=%s;stablehlo=%s;pjrt_build=%llx;plugin=nx-hal-tpu/%s",
      backend->platform_name, backend->platform_version, backend->lib->xla_version,
      backend->lib->stablehlo_version, build, TPU_PLUGIN_VERSION);
}

/* Tries one candidate. On success fills *backend (PJRT client alive) and
 * returns NULL; otherwise returns a malloc'd reason. */
static char* tpu_backend_open(const tpu_candidate_t* c, const nxhal_option_t* options,
                              size_t num_options, tpu_backend_t* backend,
                              PJRT_Device* const** out_devices, size_t* out_num_devices) {
  char* reason = NULL;
  tpu_stderr_capture_t capture;
  tpu_library_t* lib;
  PJRT_Client_AddressableDevices_Args aargs;
  PJRT_Error* error;
  tpu_stderr_capture_begin(&capture);
  lib = tpu_library_load(c->path, &reason);
  if (lib == NULL) {
    tpu_stderr_capture_end(&capture, 0);
    return reason;
  }
  memset(backend, 0, sizeof(*backend));
  backend->lib = lib;
  backend->api = lib->api;
  reason = tpu_backend_connect(c, options, num_options, backend);
  tpu_stderr_capture_end(&capture, reason == NULL);
  if (reason != NULL) return reason;
  memset(&aargs, 0, sizeof(aargs));
  aargs.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  aargs.client = backend->client;
  error = lib->api->PJRT_Client_AddressableDevices(&aargs);
  if (error != NULL || aargs.num_addressable_devices == 0) {
    char* text = error ? tpu_take_error_message(lib->api, error) : tpu_strdup("none addressable");
    reason = tpu_sprintf("no devices: %s", text ? text : "");
    free(text);
    tpu_client_destroy_pjrt(lib->api, backend->client);
    free(backend->platform_name);
    free(backend->platform_version);
    return reason;
  }
  backend->compat_key = tpu_backend_compat_key(backend);
  *out_devices = aargs.addressable_devices;
  *out_num_devices = aargs.num_addressable_devices;
  return NULL;
}

/* --- client -------------------------------------------------------------- */

/* Adds the backend's devices to the client. Devices are allocated one by
 * one: each holds a mutex, which must not move once initialised. 0 when the
 * device array cannot grow. */
static int tpu_client_add_devices(nxhal_client_t* client, tpu_backend_t* backend,
                                  PJRT_Device* const* devices, size_t num_devices,
                                  uint64_t memory_limit) {
  size_t d;
  nxhal_device_t** bigger = (nxhal_device_t**)realloc(
      client->devices, (client->num_devices + num_devices) * sizeof(nxhal_device_t*));
  if (bigger == NULL) return 0;
  client->devices = bigger;
  backend->first_device = client->num_devices;
  for (d = 0; d < num_devices; ++d) {
    nxhal_device_t* device = (nxhal_device_t*)calloc(1, sizeof(nxhal_device_t));
    if (device == NULL) continue;
    if (tpu_device_init(device, backend, devices[d], memory_limit)) {
      device->client = client;
      device->index = client->num_devices;
      client->devices[client->num_devices++] = device;
    } else {
      tpu_device_free(device);
      free(device);
    }
  }
  backend->num_devices = client->num_devices - backend->first_device;
  return 1;
}

/* The diagnostics line of a backend that gave devices. */
static char* tpu_backend_line(const tpu_candidate_t* c, const tpu_backend_t* backend) {
  const tpu_library_t* lib = backend->lib;
  return tpu_sprintf(
      "backend %s (%s): PJRT API %d.%d (built against %d.%d); platform %s %s; xla_version %s; "
      "stablehlo %s (minimum %s); %zu device(s)",
      *c->label ? c->label : "pjrt", c->path, lib->api_major, lib->api_minor, PJRT_API_MAJOR,
      PJRT_API_MINOR, backend->platform_name, backend->platform_version,
      *lib->xla_version ? lib->xla_version : "(not stated)",
      *lib->stablehlo_version ? lib->stablehlo_version : "(not stated)",
      *lib->stablehlo_min_version ? lib->stablehlo_min_version : "(not stated)",
      backend->num_devices);
}

/* Tries one candidate as the client's next backend; a line for the
 * diagnostics says what came of it. */
static void tpu_client_try_backend(nxhal_client_t* client, const tpu_candidate_t* c,
                                   const nxhal_option_t* options, size_t num_options,
                                   uint64_t memory_limit, tpu_text_t* text) {
  tpu_backend_t* backend = &client->backends[client->num_backends];
  PJRT_Device* const* devices = NULL;
  size_t num_devices = 0;
  nxhal_option_t* adjusted = NULL;
  char* reason = NULL;
  char* line;
  if (strcmp(c->family, "gpu") == 0) reason = tpu_gpu_memory_guard(options, num_options, &adjusted);
  if (reason == NULL) {
    reason = tpu_backend_open(c, adjusted ? adjusted : options, num_options + (adjusted != NULL),
                              backend, &devices, &num_devices);
  }
  free(adjusted); /* PJRT copies create options; nothing keeps pointers into them */
  if (reason != NULL) {
    line = tpu_sprintf("backend %s (%s): not available: %s", *c->label ? c->label : "pjrt", c->path,
                       reason);
    free(reason);
    if (line) tpu_text_add(text, line);
    free(line);
    memset(backend, 0, sizeof(*backend));
    return;
  }
  if (!tpu_client_add_devices(client, backend, devices, num_devices, memory_limit)) {
    tpu_client_destroy_pjrt(backend->api, backend->client);
    return;
  }
  ++client->num_backends;
  line = tpu_backend_line(c, backend);
  if (line) tpu_text_add(text, line);
  free(line);
}

nxhal_status_t* tpu_client_create(const nxhal_option_t* options, size_t num_options,
                                  nxhal_client_t** out_client) {
  nxhal_status_t* status;
  tpu_create_config_t config;
  tpu_candidate_t* candidates = NULL;
  size_t num_candidates = 0, i;
  nxhal_client_t* client;
  tpu_text_t text = {NULL, 0, 0};
  NXHAL_REQUIRE_ARG(out_client);
  *out_client = NULL;
  status = tpu_create_options_read(options, num_options, &config);
  if (status == NULL) status = tpu_candidates_collect(&config, &candidates, &num_candidates);
  if (status != NULL) {
    tpu_candidates_free(candidates, num_candidates);
    return status;
  }
  client = (nxhal_client_t*)calloc(1, sizeof(*client));
  if (client != NULL) {
    client->refcount = 1; /* the caller's handle */
    client->backends = (tpu_backend_t*)calloc(num_candidates, sizeof(tpu_backend_t));
  }
  if (client == NULL || client->backends == NULL) {
    free(client);
    tpu_candidates_free(candidates, num_candidates);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory creating a client");
  }
  for (i = 0; i < num_candidates; ++i) {
    tpu_client_try_backend(client, &candidates[i], options, num_options, config.memory_limit,
                           &text);
  }
  tpu_candidates_free(candidates, num_candidates);
  client->diagnostics = text.data ? text.data : tpu_strdup("");
  if (client->num_backends == 0 || client->num_devices == 0) {
    status = nxhal_status_make(NXHAL_UNAVAILABLE, "no PJRT backend gave a device:\n%s",
                               client->diagnostics ? client->diagnostics : "");
    tpu_client_destroy(client);
    return status;
  }
  *out_client = client;
  return NULL;
}

/* The last reference is gone: nothing made from the client is alive, so its
 * PJRT clients may go (PJRT requires their buffers destroyed first). */
static void tpu_client_free(nxhal_client_t* client) {
  size_t i;
  for (i = 0; i < client->num_devices; ++i) {
    tpu_device_free(client->devices[i]);
    free(client->devices[i]);
  }
  for (i = 0; i < client->num_backends; ++i) {
    tpu_backend_t* b = &client->backends[i];
    tpu_client_destroy_pjrt(b->api, b->client);
    free(b->platform_name);
    free(b->platform_version);
    free(b->compat_key);
  }
  free(client->devices);
  free(client->backends);
  free(client->diagnostics);
  free(client);
}

void tpu_client_retain(nxhal_client_t* client) {
  __atomic_add_fetch(&client->refcount, 1, __ATOMIC_RELAXED);
}

void tpu_client_release(nxhal_client_t* client) {
  /* ACQ_REL: whatever the other holders did to the client happens before
   * the free on whichever thread drops the last reference. */
  if (client == NULL || __atomic_sub_fetch(&client->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  tpu_client_free(client);
}

/* Drops the user's reference only: DLPack exports still alive keep the PJRT
 * client until their consumers delete them. */
void tpu_client_destroy(nxhal_client_t* client) {
  tpu_client_release(client);
}

nxhal_status_t* tpu_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_text);
  *out_text = client->diagnostics ? client->diagnostics : "";
  return NULL;
}

nxhal_status_t* tpu_client_device_count(nxhal_client_t* client, size_t* out_count) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = client->num_devices;
  return NULL;
}

nxhal_status_t* tpu_client_device(nxhal_client_t* client, size_t index,
                                  nxhal_device_t** out_device) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_device);
  if (index >= client->num_devices) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "device index %zu out of range (%zu devices)",
                             index, client->num_devices);
  }
  *out_device = client->devices[index];
  return NULL;
}

static const char* const tpu_formats[] = {"stablehlo"};

nxhal_status_t* tpu_device_info(nxhal_device_t* device, nxhal_device_info_t* out) {
  nxhal_device_info_t info;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_DEVICE_INFO_1_0_SIZE, "device_info output");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.kind = device->kind;
  info.vendor = device->vendor;
  info.name = device->name;
  info.memory_bytes = device->memory_bytes;
  info.compute_units = device->compute_units;
  info.formats = tpu_formats;
  info.num_formats = 1;
  info.compat_key = device->backend->compat_key;
  /* Never write past what the caller allocated. */
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
}

nxhal_status_t* tpu_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = device->num_attributes;
  return NULL;
}

nxhal_status_t* tpu_device_attribute(nxhal_device_t* device, size_t index, nxhal_attribute_t* out) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_NAMED_VALUE_1_0_SIZE, "device_attribute output");
  if (status != NULL) return status;
  if (index >= device->num_attributes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "attribute index %zu out of range (%zu attributes)", index,
                             device->num_attributes);
  }
  nxhal_struct_fill(out, &device->attributes[index], sizeof(device->attributes[index]));
  return NULL;
}
