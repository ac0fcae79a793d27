/* client.c -- an nx_hal client: one PJRT client per backend library that
 * gave devices, their devices, and what the probe found for the others. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tpu_internal.h"

/* nx_hal create options. PJRT create options are reachable only through the
 * rows of tpu_pjrt_options, whose PJRT types are fixed here: a plugin aborts
 * on a wrongly typed value and silently ignores an unknown name. */
static const nxhal_option_spec_t tpu_create_specs[] = {
    {"library_path", NXHAL_VALUE_STRING},
    {"backend_paths", NXHAL_VALUE_STRING},
    {"memory_limit_bytes", NXHAL_VALUE_INT64},
    {"cpu_device_count", NXHAL_VALUE_INT64},
    {"gpu_memory_fraction", NXHAL_VALUE_DOUBLE},
    {"gpu_preallocate", NXHAL_VALUE_BOOL},
    {"gpu_allocator", NXHAL_VALUE_STRING},
    {"gpu_visible_devices", NXHAL_VALUE_INT64_LIST},
};

/* Which nx_hal option becomes which PJRT create option, for which family. */
typedef struct tpu_pjrt_option {
  const char* nxhal_name;
  const char* family; /* "cpu", "gpu", "tpu" */
  const char* pjrt_name;
  PJRT_NamedValue_Type pjrt_type;
} tpu_pjrt_option_t;

static const tpu_pjrt_option_t tpu_pjrt_options[] = {
    {"cpu_device_count", "cpu", "cpu_device_count", PJRT_NamedValue_kInt64},
    {"gpu_memory_fraction", "gpu", "memory_fraction", PJRT_NamedValue_kFloat},
    {"gpu_preallocate", "gpu", "preallocate", PJRT_NamedValue_kBool},
    {"gpu_allocator", "gpu", "allocator", PJRT_NamedValue_kString},
    {"gpu_visible_devices", "gpu", "visible_devices", PJRT_NamedValue_kInt64List},
};

#define TPU_COUNT(a) (sizeof(a) / sizeof((a)[0]))

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

/* The family of PJRT create options a candidate takes: its label when it
 * names one, else a guess from the file name. */
static const char* tpu_candidate_family(const tpu_candidate_t* c) {
  const char* base = strrchr(c->path, '/');
  base = base ? base + 1 : c->path;
  if (strcmp(c->label, "tpu") == 0 || strcmp(c->label, "cpu") == 0) return c->label;
  if (strcmp(c->label, "gpu") == 0 || strncmp(c->label, "cuda", 4) == 0 ||
      strncmp(c->label, "rocm", 4) == 0) {
    return "gpu";
  }
  if (strstr(base, "tpu") != NULL) return "tpu";
  if (strstr(base, "cuda") != NULL || strstr(base, "gpu") != NULL ||
      strstr(base, "rocm") != NULL) {
    return "gpu";
  }
  if (strstr(base, "cpu") != NULL) return "cpu";
  return "";
}

int tpu_candidates_add(tpu_candidate_t** items, size_t* count, const char* label,
                       const char* path) {
  size_t i;
  tpu_candidate_t* bigger;
  char* label_copy;
  char* path_copy;
  if (path == NULL || *path == '\0') return 0;
  for (i = 0; i < *count; ++i) {
    if (strcmp((*items)[i].path, path) == 0) return 0;
  }
  label_copy = tpu_strdup(label);
  path_copy = tpu_strdup(path);
  bigger = label_copy && path_copy
               ? (tpu_candidate_t*)realloc(*items, (*count + 1) * sizeof(**items))
               : NULL;
  if (bigger == NULL) {
    free(label_copy);
    free(path_copy);
    return 0;
  }
  *items = bigger;
  (*items)[*count].label = label_copy;
  (*items)[*count].path = path_copy;
  ++*count;
  return 1;
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
  bigger = (char**)realloc(device->owned_strings,
                           (device->num_owned_strings + 1) * sizeof(char*));
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
  a->struct_size = NXHAL_NAMED_VALUE_STRUCT_SIZE;
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
          a->string_value = tpu_device_keep_string(device, tpu_strndup(v->string_value,
                                                                       v->value_size));
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
      default:
        break;
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

/* Fills one device from a PJRT device of `backend`. 0 on OOM. */
static int tpu_device_init(nxhal_device_t* device, tpu_backend_t* backend, PJRT_Device* pjrt,
                           uint64_t memory_limit) {
  const PJRT_Api* api = backend->api;
  PJRT_Device_GetDescription_Args dargs;
  PJRT_DeviceDescription_Kind_Args kargs;
  PJRT_DeviceDescription_Id_Args iargs;
  PJRT_Error* error;
  char* kind_text;
  int id = 0;
  memset(device, 0, sizeof(*device));
  device->backend = backend;
  device->pjrt = pjrt;
  nxhal_memory_init(&device->memory);
  nxhal_memory_set_limit(&device->memory, memory_limit);
  memset(&dargs, 0, sizeof(dargs));
  dargs.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  dargs.device = pjrt;
  error = api->PJRT_Device_GetDescription(&dargs);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    dargs.device_description = NULL;
  }
  kind_text = NULL;
  if (dargs.device_description != NULL) {
    memset(&kargs, 0, sizeof(kargs));
    kargs.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
    kargs.device_description = dargs.device_description;
    error = api->PJRT_DeviceDescription_Kind(&kargs);
    if (error == NULL) kind_text = tpu_strndup(kargs.device_kind, kargs.device_kind_size);
    else free(tpu_take_error_message(api, error));
    memset(&iargs, 0, sizeof(iargs));
    iargs.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
    iargs.device_description = dargs.device_description;
    error = api->PJRT_DeviceDescription_Id(&iargs);
    if (error == NULL) id = iargs.id;
    else free(tpu_take_error_message(api, error));
  }
  if (kind_text == NULL) kind_text = tpu_strdup("");
  if (kind_text == NULL) return 0;
  device->kind = tpu_kind_from(backend->platform_name, kind_text);
  device->is_cpu = device->kind == NXHAL_DEVICE_CPU;
  device->vendor = tpu_device_keep_string(
      device, tpu_strdup(tpu_vendor_for(device->kind, backend->platform_name)));
  device->name = tpu_device_keep_string(
      device, tpu_sprintf("%s:%d (%s)", backend->platform_name, id, kind_text));
  if (device->vendor == NULL || device->name == NULL) {
    free(kind_text);
    return 0;
  }
  tpu_device_add_string(device, "platform_name", backend->platform_name);
  tpu_device_add_string(device, "platform_version", backend->platform_version);
  tpu_device_add_string(device, "device_kind", kind_text);
  tpu_device_add_int(device, "pjrt_device_id", id);
  {
    char version[32];
    snprintf(version, sizeof(version), "%d.%d", backend->lib->api_major, backend->lib->api_minor);
    tpu_device_add_string(device, "pjrt_api_version", version);
  }
  tpu_device_add_string(device, "xla_version", backend->lib->xla_version);
  tpu_device_add_string(device, "stablehlo_version", backend->lib->stablehlo_version);
  tpu_device_add_string(device, "stablehlo_minimum_version", backend->lib->stablehlo_min_version);
  tpu_device_add_string(device, "backend_path", backend->lib->path);
  tpu_device_add_string(device, "dlpack_export",
                        device->is_cpu && TPU_HAS_FN(api, PJRT_Buffer_UnsafePointer)
                            ? "zero-copy"
                            : "copy to host");
  tpu_device_add_string(device, "dlpack_import",
                        device->is_cpu && TPU_HAS_FN(api, PJRT_Client_CreateViewOfDeviceBuffer)
                            ? "zero-copy"
                            : "copy");
  if (dargs.device_description != NULL) {
    tpu_device_copy_pjrt_attributes(device, api, dargs.device_description);
  }
  /* Capacity: PJRT states it only through memory statistics, on some
   * backends; the entry may be missing or UNIMPLEMENTED. */
  if (TPU_HAS_FN(api, PJRT_Device_MemoryStats)) {
    PJRT_Device_MemoryStats_Args margs;
    memset(&margs, 0, sizeof(margs));
    margs.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
    margs.device = pjrt;
    error = api->PJRT_Device_MemoryStats(&margs);
    if (error == NULL) {
      if (margs.bytes_limit_is_set && margs.bytes_limit > 0) {
        device->memory_bytes = (uint64_t)margs.bytes_limit;
      }
    } else {
      free(tpu_take_error_message(api, error));
    }
  }
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
}

/* --- client -------------------------------------------------------------- */

/* Builds the PJRT create options for `family` from checked nx_hal options.
 * `values` has room for every row of tpu_pjrt_options. */
static size_t tpu_pjrt_create_options(const nxhal_option_t* options, size_t num_options,
                                      const char* family, PJRT_NamedValue* values) {
  size_t count = 0, i;
  for (i = 0; i < TPU_COUNT(tpu_pjrt_options); ++i) {
    const tpu_pjrt_option_t* row = &tpu_pjrt_options[i];
    const nxhal_option_t* o = nxhal_options_find(options, num_options, row->nxhal_name);
    PJRT_NamedValue* v;
    if (o == NULL || strcmp(row->family, family) != 0) continue;
    v = &values[count++];
    memset(v, 0, sizeof(*v));
    v->struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v->name = row->pjrt_name;
    v->name_size = strlen(row->pjrt_name);
    v->type = row->pjrt_type;
    /* The nx_hal type was checked against tpu_create_specs; the PJRT type
     * comes from the row, never from the caller. */
    switch (row->pjrt_type) {
      case PJRT_NamedValue_kInt64:
        v->int64_value = o->int64_value;
        v->value_size = 1;
        break;
      case PJRT_NamedValue_kFloat:
        v->float_value = (float)o->double_value;
        v->value_size = 1;
        break;
      case PJRT_NamedValue_kBool:
        v->bool_value = o->bool_value != 0;
        v->value_size = 1;
        break;
      case PJRT_NamedValue_kString:
        v->string_value = o->string_value;
        v->value_size = strlen(o->string_value);
        break;
      case PJRT_NamedValue_kInt64List:
        v->int64_array_value = o->int64_list;
        v->value_size = o->int64_list_size;
        break;
      default:
        --count;
        break;
    }
  }
  return count;
}

void tpu_client_destroy(nxhal_client_t* client);

/* Tries one candidate. On success fills *backend (PJRT client alive) and
 * returns NULL; otherwise returns a malloc'd reason. */
static char* tpu_backend_open(const tpu_candidate_t* c, const nxhal_option_t* options,
                              size_t num_options, tpu_backend_t* backend,
                              PJRT_Device* const** out_devices, size_t* out_num_devices) {
  char* reason = NULL;
  tpu_stderr_capture_t capture;
  tpu_library_t* lib;
  PJRT_NamedValue values[TPU_COUNT(tpu_pjrt_options)];
  PJRT_Client_Create_Args cargs;
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
  memset(&cargs, 0, sizeof(cargs));
  cargs.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  cargs.create_options = values;
  cargs.num_options = tpu_pjrt_create_options(options, num_options, tpu_candidate_family(c), values);
  error = lib->api->PJRT_Client_Create(&cargs);
  tpu_stderr_capture_end(&capture, error == NULL);
  if (error != NULL) {
    char* text = tpu_take_error_message(lib->api, error);
    reason = tpu_sprintf("PJRT_Client_Create failed: %s", text ? text : "");
    free(text);
    return reason;
  }
  backend->client = cargs.client;
  backend->platform_name = tpu_client_platform(lib->api, cargs.client, 0);
  backend->platform_version = tpu_client_platform(lib->api, cargs.client, 1);
  memset(&aargs, 0, sizeof(aargs));
  aargs.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  aargs.client = cargs.client;
  error = lib->api->PJRT_Client_AddressableDevices(&aargs);
  if (error != NULL || aargs.num_addressable_devices == 0) {
    char* text = error ? tpu_take_error_message(lib->api, error) : tpu_strdup("none addressable");
    reason = tpu_sprintf("no devices: %s", text ? text : "");
    free(text);
    tpu_client_destroy_pjrt(lib->api, cargs.client);
    free(backend->platform_name);
    free(backend->platform_version);
    return reason;
  }
  /* xla_version is a coarse number (XLA CPU states "2"); the library's
   * size tells builds apart cheaply, so an executable from another build of
   * the same version is refused before PJRT parses it. */
  {
    struct stat st;
    long long build = stat(lib->path, &st) == 0 ? (long long)st.st_size : 0;
    backend->compat_key = tpu_sprintf(
        "platform=%s;platform_version=%s;xla=%s;stablehlo=%s;pjrt_build=%llx;plugin=nx-hal-tpu/%s",
        backend->platform_name, backend->platform_version, lib->xla_version,
        lib->stablehlo_version, build, TPU_PLUGIN_VERSION);
  }
  *out_devices = aargs.addressable_devices;
  *out_num_devices = aargs.num_addressable_devices;
  return NULL;
}

nxhal_status_t* tpu_client_create(const nxhal_option_t* options, size_t num_options,
                                  nxhal_client_t** out_client) {
  nxhal_status_t* status;
  tpu_candidate_t* candidates = NULL;
  size_t num_candidates = 0, i;
  const nxhal_option_t* o;
  nxhal_client_t* client;
  tpu_text_t text = {NULL, 0, 0};
  uint64_t memory_limit = 0;
  size_t usable = 0;
  if (out_client == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_client is NULL");
  *out_client = NULL;
  status = nxhal_options_check(options, num_options, tpu_create_specs, TPU_COUNT(tpu_create_specs));
  if (status != NULL) return status;
  o = nxhal_options_find(options, num_options, "memory_limit_bytes");
  if (o != NULL) {
    if (o->int64_value < 0) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'memory_limit_bytes' must be >= 0, got %lld",
                               (long long)o->int64_value);
    }
    memory_limit = (uint64_t)o->int64_value;
  }
  o = nxhal_options_find(options, num_options, "cpu_device_count");
  if (o != NULL && (o->int64_value < 1 || o->int64_value > 1024)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "option 'cpu_device_count' must be 1..1024, got %lld",
                             (long long)o->int64_value);
  }
  o = nxhal_options_find(options, num_options, "gpu_memory_fraction");
  if (o != NULL && !(o->double_value > 0.0 && o->double_value <= 1.0)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "option 'gpu_memory_fraction' must be in (0, 1], got %g",
                             o->double_value);
  }
  o = nxhal_options_find(options, num_options, "library_path");
  if (o != NULL && *o->string_value) {
    /* One path, taken as is (no ';' or '=' splitting). */
    candidates = (tpu_candidate_t*)calloc(1, sizeof(*candidates));
    if (candidates != NULL) {
      candidates[0].label = tpu_strdup("explicit");
      candidates[0].path = tpu_strdup(o->string_value);
      if (candidates[0].label != NULL && candidates[0].path != NULL) {
        num_candidates = 1;
      } else {
        free(candidates[0].label);
        free(candidates[0].path);
      }
    }
  }
  o = nxhal_options_find(options, num_options, "backend_paths");
  if (o != NULL) tpu_candidates_parse(o->string_value, "", &candidates, &num_candidates);
  if (num_candidates == 0) {
    /* C programs without the Python package: the environment overrides, then
     * the backends installed beside this library. */
    char* searched = NULL;
    tpu_candidates_parse(getenv("NXHAL_TPU_BACKEND_PATHS"), "", &candidates, &num_candidates);
    tpu_candidates_parse(getenv("TPU_LIBRARY_PATH"), "tpu", &candidates, &num_candidates);
    tpu_backends_discover(&candidates, &num_candidates, &searched);
    if (num_candidates == 0) {
      free(candidates);
      status = nxhal_status_make(
          NXHAL_UNAVAILABLE,
          "no PJRT backend installed (searched %s; NXHAL_TPU_BACKEND_PATHS and TPU_LIBRARY_PATH "
          "are not set): " TPU_INSTALL_HINT,
          searched != NULL ? searched : "nothing: this library's location is unknown");
      free(searched);
      return status;
    }
    free(searched);
  }
  client = (nxhal_client_t*)calloc(1, sizeof(*client));
  if (client != NULL) {
    client->refcount = 1; /* the caller's handle */
    client->backends = (tpu_backend_t*)calloc(num_candidates, sizeof(tpu_backend_t));
  }
  if (client == NULL || client->backends == NULL) {
    free(client);
    for (i = 0; i < num_candidates; ++i) {
      free(candidates[i].label);
      free(candidates[i].path);
    }
    free(candidates);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory creating a client");
  }
  for (i = 0; i < num_candidates; ++i) {
    tpu_backend_t* backend = &client->backends[client->num_backends];
    PJRT_Device* const* devices = NULL;
    size_t num_devices = 0, d;
    char* reason = tpu_backend_open(&candidates[i], options, num_options, backend, &devices,
                                    &num_devices);
    char* line;
    if (reason != NULL) {
      line = tpu_sprintf("backend %s (%s): not available: %s",
                         *candidates[i].label ? candidates[i].label : "pjrt",
                         candidates[i].path, reason);
      free(reason);
      if (line) tpu_text_add(&text, line);
      free(line);
      memset(backend, 0, sizeof(*backend));
      continue;
    }
    {
      /* Devices are allocated one by one: each holds a mutex, which must not
       * move once initialised. */
      nxhal_device_t** bigger = (nxhal_device_t**)realloc(
          client->devices, (client->num_devices + num_devices) * sizeof(nxhal_device_t*));
      if (bigger == NULL) {
        tpu_client_destroy_pjrt(backend->api, backend->client);
        continue;
      }
      client->devices = bigger;
    }
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
    ++client->num_backends;
    ++usable;
    line = tpu_sprintf(
        "backend %s (%s): PJRT API %d.%d (built against %d.%d); platform %s %s; xla_version %s; "
        "stablehlo %s (minimum %s); %zu device(s)",
        *candidates[i].label ? candidates[i].label : "pjrt", candidates[i].path,
        backend->lib->api_major, backend->lib->api_minor, PJRT_API_MAJOR, PJRT_API_MINOR,
        backend->platform_name, backend->platform_version,
        *backend->lib->xla_version ? backend->lib->xla_version : "(not stated)",
        *backend->lib->stablehlo_version ? backend->lib->stablehlo_version : "(not stated)",
        *backend->lib->stablehlo_min_version ? backend->lib->stablehlo_min_version
                                             : "(not stated)",
        backend->num_devices);
    if (line) tpu_text_add(&text, line);
    free(line);
  }
  for (i = 0; i < num_candidates; ++i) {
    free(candidates[i].label);
    free(candidates[i].path);
  }
  free(candidates);
  client->diagnostics = text.data ? text.data : tpu_strdup("");
  if (usable == 0 || client->num_devices == 0) {
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
void tpu_client_destroy(nxhal_client_t* client) { tpu_client_release(client); }

nxhal_status_t* tpu_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  if (client == NULL || out_text == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "client_diagnostics: NULL argument");
  }
  *out_text = client->diagnostics ? client->diagnostics : "";
  return NULL;
}

nxhal_status_t* tpu_client_device_count(nxhal_client_t* client, size_t* out_count) {
  if (client == NULL || out_count == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "client_device_count: NULL argument");
  }
  *out_count = client->num_devices;
  return NULL;
}

nxhal_status_t* tpu_client_device(nxhal_client_t* client, size_t index,
                                  nxhal_device_t** out_device) {
  if (client == NULL || out_device == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "client_device: NULL argument");
  }
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
  if (device == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "device is NULL");
  status = nxhal_check_struct(out, NXHAL_DEVICE_INFO_STRUCT_SIZE, "device_info output");
  if (status != NULL) return status;
  memset(&info, 0, sizeof(info));
  info.struct_size = out->struct_size < sizeof(info) ? out->struct_size : sizeof(info);
  info.kind = device->kind;
  info.vendor = device->vendor;
  info.name = device->name;
  info.memory_bytes = device->memory_bytes;
  info.compute_units = device->compute_units;
  info.formats = tpu_formats;
  info.num_formats = 1;
  info.compat_key = device->backend->compat_key;
  /* Never write past what the caller allocated. */
  memcpy(out, &info, info.struct_size);
  return NULL;
}

nxhal_status_t* tpu_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  if (device == NULL || out_count == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "device_attribute_count: NULL argument");
  }
  *out_count = device->num_attributes;
  return NULL;
}

nxhal_status_t* tpu_device_attribute(nxhal_device_t* device, size_t index, nxhal_attribute_t* out) {
  nxhal_status_t* status;
  size_t size;
  if (device == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "device is NULL");
  status = nxhal_check_struct(out, NXHAL_NAMED_VALUE_STRUCT_SIZE, "device_attribute output");
  if (status != NULL) return status;
  if (index >= device->num_attributes) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "attribute index %zu out of range (%zu attributes)", index,
                             device->num_attributes);
  }
  size = out->struct_size < sizeof(*out) ? out->struct_size : sizeof(*out);
  memcpy(out, &device->attributes[index], size);
  out->struct_size = size;
  return NULL;
}
