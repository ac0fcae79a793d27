/*
 * template_plugin.c -- the exported entry point, the function table, and the
 * plugin, client and device entries of the nx_hal plugin template.
 *
 * Copy this plugin to start a backend: keep the shape (one exported symbol,
 * a static table, every entry checking its arguments and returning a status)
 * and replace what the comments marked "A real backend" point at.
 */
#include <stdlib.h>

#include "template_internal.h"

#ifndef TEMPLATE_PLUGIN_VERSION
#define TEMPLATE_PLUGIN_VERSION "0.0.0" /* CMakeLists.txt passes pyproject's version */
#endif

/* The ABI version this file implements. Built against newer headers it
 * keeps claiming this version, and its table stops at the last entry it
 * fills in, until someone writes the new entries: a newer host then sees an
 * older plugin, which the ABI supports, never a NULL entry. */
#define TEMPLATE_ABI_MAJOR 1
#define TEMPLATE_ABI_MINOR 1
#define TEMPLATE_API_SIZE NXHAL_STRUCT_SIZE(nxhal_api_t, event_destroy)
#if NXHAL_ABI_VERSION_MAJOR != TEMPLATE_ABI_MAJOR || NXHAL_ABI_VERSION_MINOR < TEMPLATE_ABI_MINOR
#error "the nx_hal headers are not ABI 1.x with x >= 1: use an nx-hal core of the 0.1 series"
#endif

#define TEMPLATE_COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* A real backend derives its key from what decides whether a compiled
 * program still runs: the SDK version, the chip generation, the compiler's
 * flags. Deserialization refuses bytes made under another key. */
const char* const template_compat_key = "nx-hal-plugin-template-1";

/* The client options this plugin accepts; nxhal_options_check rejects any
 * other name or type with a message naming the option. A real backend lists
 * its own (and mirrors them in the Python package's pydantic model). */
static const nxhal_option_spec_t template_client_options[] = {
    {"device_count", NXHAL_VALUE_INT64},
};

static const char* const template_formats[] = {TEMPLATE_FORMAT};

nxhal_status_t* template_check_not_null(const void* ptr, const char* what) {
  return ptr == NULL ? nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s is NULL", what) : NULL;
}

/* --- Plugin and client --------------------------------------------------- */

/* Table entry plugin_info. Thread-safe. */
static nxhal_status_t* template_plugin_info(nxhal_plugin_info_t* out) {
  nxhal_status_t* status = nxhal_check_struct(out, NXHAL_PLUGIN_INFO_STRUCT_SIZE, "plugin info");
  if (status != NULL) return status;
  out->name = "template";
  out->vendor = "Example Vendor";
  out->plugin_version = TEMPLATE_PLUGIN_VERSION;
  out->sdk_version = ""; /* A real backend reports its vendor SDK's version. */
  out->abi_major = TEMPLATE_ABI_MAJOR;
  out->abi_minor = TEMPLATE_ABI_MINOR;
  return NULL;
}

/* Table entry client_create. Caller owns *out_client. Thread-safe. */
static nxhal_status_t* template_client_create(const nxhal_option_t* options, size_t num_options,
                                              nxhal_client_t** out_client) {
  const nxhal_option_t* option;
  int64_t device_count = 1;
  nxhal_client_t* client;
  size_t i;
  nxhal_status_t* status = template_check_not_null(out_client, "out_client");
  if (status != NULL) return status;
  *out_client = NULL;
  status = nxhal_options_check(options, num_options, template_client_options,
                               TEMPLATE_COUNT(template_client_options));
  if (status != NULL) return status;
  option = nxhal_options_find(options, num_options, "device_count");
  if (option != NULL) device_count = option->int64_value;
  if (device_count < 1 || device_count > TEMPLATE_MAX_DEVICES) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "option 'device_count' must be 1..%d, got %lld", TEMPLATE_MAX_DEVICES,
                             (long long)device_count);
  }
  /* A real backend loads its SDK and enumerates its devices here. Where the
   * SDK or the hardware is missing it returns UNAVAILABLE saying exactly
   * what it looked for: nx_hal shows that reason and the conformance suite
   * skips the plugin instead of failing. */
  client = (nxhal_client_t*)calloc(1, sizeof(*client));
  if (client == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  client->num_devices = (size_t)device_count;
  for (i = 0; i < client->num_devices; ++i) {
    client->devices[i].client = client;
    client->devices[i].index = i;
    nxhal_memory_init(&client->devices[i].memory);
  }
  *out_client = client;
  return NULL;
}

/* Table entry client_destroy. Not thread-safe with other uses of the client. */
static void template_client_destroy(nxhal_client_t* client) {
  size_t i;
  if (client == NULL) return;
  for (i = 0; i < client->num_devices; ++i) nxhal_memory_destroy(&client->devices[i].memory);
  free(client);
}

/* Table entry client_diagnostics. The text is static. Thread-safe. */
static nxhal_status_t* template_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  nxhal_status_t* status = template_check_not_null(client, "client");
  if (status == NULL) status = template_check_not_null(out_text, "out_text");
  if (status != NULL) return status;
  /* A real backend says what its probe found and skipped. */
  *out_text = "template: host memory devices (the plugin template, not a backend)";
  return NULL;
}

/* Table entry client_device_count. Thread-safe. */
static nxhal_status_t* template_client_device_count(nxhal_client_t* client, size_t* out_count) {
  nxhal_status_t* status = template_check_not_null(client, "client");
  if (status == NULL) status = template_check_not_null(out_count, "out_count");
  if (status != NULL) return status;
  *out_count = client->num_devices;
  return NULL;
}

/* Table entry client_device. The device is owned by the client. Thread-safe. */
static nxhal_status_t* template_client_device(nxhal_client_t* client, size_t index,
                                              nxhal_device_t** out_device) {
  nxhal_status_t* status = template_check_not_null(client, "client");
  if (status == NULL) status = template_check_not_null(out_device, "out_device");
  if (status != NULL) return status;
  if (index >= client->num_devices) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "device index %zu out of range (client has %zu devices)", index,
                             client->num_devices);
  }
  *out_device = &client->devices[index];
  return NULL;
}

/* --- Devices ------------------------------------------------------------- */

/* Table entry device_info. Strings are static. Thread-safe. */
static nxhal_status_t* template_device_info(nxhal_device_t* device, nxhal_device_info_t* out) {
  nxhal_status_t* status = template_check_not_null(device, "device");
  if (status == NULL) {
    status = nxhal_check_struct(out, NXHAL_DEVICE_INFO_STRUCT_SIZE, "device info");
  }
  if (status != NULL) return status;
  /* A real backend fills these from its SDK's device query. */
  out->kind = NXHAL_DEVICE_CPU;
  out->vendor = "Example Vendor";
  out->name = "nx_hal plugin template (host memory, not a real device)";
  out->memory_bytes = 0; /* unknown: host memory has no fixed capacity here */
  out->compute_units = 1;
  out->formats = template_formats;
  out->num_formats = TEMPLATE_COUNT(template_formats);
  out->compat_key = template_compat_key;
  return NULL;
}

/* Table entry device_attribute_count. Thread-safe. */
static nxhal_status_t* template_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  nxhal_status_t* status = template_check_not_null(device, "device");
  if (status == NULL) status = template_check_not_null(out_count, "out_count");
  if (status != NULL) return status;
  *out_count = 1;
  return NULL;
}

/* Table entry device_attribute. Thread-safe. A real backend lists what its
 * users select devices by (clock, chip revision, interconnect...). */
static nxhal_status_t* template_device_attribute(nxhal_device_t* device, size_t index,
                                                 nxhal_attribute_t* out) {
  nxhal_status_t* status = template_check_not_null(device, "device");
  if (status == NULL) status = nxhal_check_struct(out, NXHAL_NAMED_VALUE_STRUCT_SIZE, "attribute");
  if (status != NULL) return status;
  if (index >= 1) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "attribute index %zu out of range (device has 1)", index);
  }
  out->name = "device_index";
  out->type = NXHAL_VALUE_INT64;
  out->int64_value = (int64_t)device->index;
  out->double_value = 0.0;
  out->bool_value = 0;
  out->string_value = NULL;
  out->int64_list = NULL;
  out->int64_list_size = 0;
  return NULL;
}

/* Table entry device_memory_stats. Thread-safe. */
static nxhal_status_t* template_device_memory_stats(nxhal_device_t* device,
                                                    nxhal_memory_stats_t* out) {
  nxhal_status_t* status = template_check_not_null(device, "device");
  if (status == NULL) {
    status = nxhal_check_struct(out, NXHAL_MEMORY_STATS_STRUCT_SIZE, "memory stats");
  }
  if (status != NULL) return status;
  nxhal_memory_stats(&device->memory, out);
  return NULL;
}

/* Table entry device_set_memory_limit. Thread-safe. */
static nxhal_status_t* template_device_set_memory_limit(nxhal_device_t* device,
                                                        uint64_t limit_bytes) {
  nxhal_status_t* status = template_check_not_null(device, "device");
  if (status != NULL) return status;
  nxhal_memory_set_limit(&device->memory, limit_bytes);
  return NULL;
}

/* --- The table ----------------------------------------------------------- */

/* Every entry is set: what the template does not support (DLPack) answers
 * UNIMPLEMENTED through its entry. Statuses and events come from the helpers
 * library (linked statically, so this library frees what it made). */
static const nxhal_api_t template_api = {
    .struct_size = TEMPLATE_API_SIZE,
    .abi_major = TEMPLATE_ABI_MAJOR,
    .abi_minor = TEMPLATE_ABI_MINOR,
    .status_free = nxhal_status_free,
    .status_code = nxhal_status_code,
    .status_message = nxhal_status_message,
    .plugin_info = template_plugin_info,
    .client_create = template_client_create,
    .client_destroy = template_client_destroy,
    .client_diagnostics = template_client_diagnostics,
    .client_device_count = template_client_device_count,
    .client_device = template_client_device,
    .device_info = template_device_info,
    .device_attribute_count = template_device_attribute_count,
    .device_attribute = template_device_attribute,
    .device_memory_stats = template_device_memory_stats,
    .device_set_memory_limit = template_device_set_memory_limit,
    .buffer_create = template_buffer_create,
    .buffer_from_host = template_buffer_from_host,
    .buffer_to_host = template_buffer_to_host,
    .buffer_info = template_buffer_info,
    .buffer_destroy = template_buffer_destroy,
    .buffer_to_dlpack = template_buffer_to_dlpack,
    .buffer_from_dlpack = template_buffer_from_dlpack,
    .executable_compile = template_executable_compile,
    .executable_destroy = template_executable_destroy,
    .executable_io_count = template_executable_io_count,
    .executable_io_info = template_executable_io_info,
    .executable_execute = template_executable_execute,
    .executable_serialize = template_executable_serialize,
    .executable_deserialize = template_executable_deserialize,
    .blob_free = template_blob_free,
    .event_is_ready = nxhal_event_is_ready,
    .event_await = nxhal_event_await,
    .event_on_ready = nxhal_event_on_ready,
    .event_destroy = nxhal_event_destroy,
};

/* The one exported symbol: negotiation is the helpers' (same major, any
 * minor; else ABI_MISMATCH naming both versions). Thread-safe. */
NXHAL_EXPORT nxhal_status_t* nxhal_query(const nxhal_query_args_t* args,
                                         const nxhal_api_t** out_api) {
  return nxhal_negotiate(args, &template_api, out_api);
}
