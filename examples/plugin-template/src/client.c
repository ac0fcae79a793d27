/*
 * client.c -- clients and devices of the nx_hal plugin template: the client
 * options, creating a client over its "devices" (host memory), and the
 * device queries and memory accounting.
 */
#include <stdlib.h>

#include "internal.h"

/* The client options this plugin accepts; nxhal_options_check rejects any
 * other name or type, and a number outside an entry's range, with a message
 * naming the option. A real backend lists its own (and mirrors them in the
 * Python package's pydantic model). Entries without a range end in 0, 0, 0. */
static const nxhal_option_spec_t template_client_options[] = {
    {"device_count", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, TEMPLATE_MAX_DEVICES)},
};

static const char* const template_formats[] = {TEMPLATE_FORMAT};

/* --- Clients ------------------------------------------------------------- */

/* Table entry client_create. Caller owns *out_client. Thread-safe. */
nxhal_status_t* template_client_create(const nxhal_option_t* options, size_t num_options,
                                       nxhal_client_t** out_client) {
  const nxhal_option_t* option;
  int64_t device_count = 1;
  nxhal_client_t* client;
  size_t i;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(out_client);
  *out_client = NULL;
  status = nxhal_options_check(options, num_options, template_client_options,
                               TEMPLATE_COUNT(template_client_options));
  if (status != NULL) return status;
  option = nxhal_options_find(options, num_options, "device_count");
  if (option != NULL) device_count = option->int64_value; /* in range: checked above */
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
void template_client_destroy(nxhal_client_t* client) {
  size_t i;
  if (client == NULL) return;
  for (i = 0; i < client->num_devices; ++i) nxhal_memory_destroy(&client->devices[i].memory);
  free(client);
}

/* Table entry client_diagnostics. The text is static. Thread-safe. */
nxhal_status_t* template_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_text);
  /* A real backend says what its probe found and skipped. */
  *out_text = "template: host memory devices (the plugin template, not a backend)";
  return NULL;
}

/* Table entry client_device_count. Thread-safe. */
nxhal_status_t* template_client_device_count(nxhal_client_t* client, size_t* out_count) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = client->num_devices;
  return NULL;
}

/* Table entry client_device. The device is owned by the client. Thread-safe. */
nxhal_status_t* template_client_device(nxhal_client_t* client, size_t index,
                                       nxhal_device_t** out_device) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_device);
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
nxhal_status_t* template_device_info(nxhal_device_t* device, nxhal_device_info_t* out) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_DEVICE_INFO_1_0_SIZE, "device info");
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
nxhal_status_t* template_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_count);
  *out_count = 1;
  return NULL;
}

/* Table entry device_attribute. Thread-safe. A real backend lists what its
 * users select devices by (clock, chip revision, interconnect...). */
nxhal_status_t* template_device_attribute(nxhal_device_t* device, size_t index,
                                          nxhal_attribute_t* out) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_NAMED_VALUE_1_0_SIZE, "attribute");
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
nxhal_status_t* template_device_memory_stats(nxhal_device_t* device, nxhal_memory_stats_t* out) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  status = nxhal_check_struct(out, NXHAL_MEMORY_STATS_1_0_SIZE, "memory stats");
  if (status != NULL) return status;
  nxhal_memory_stats(&device->memory, out);
  return NULL;
}

/* Table entry device_set_memory_limit. Thread-safe. */
nxhal_status_t* template_device_set_memory_limit(nxhal_device_t* device, uint64_t limit_bytes) {
  NXHAL_REQUIRE_ARG(device);
  nxhal_memory_set_limit(&device->memory, limit_bytes);
  return NULL;
}
