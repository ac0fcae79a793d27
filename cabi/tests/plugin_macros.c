/*
 * plugin_macros.c -- a toy plugin declared and tabled with the macros of
 * nx_hal_plugin.h, included first by test_helpers.c (tests/test_cabi.py).
 * Its definitions below are written by hand: a prototype the macros got
 * wrong fails the compile, and toy_table_misplaced() compares the table they
 * filled in order with one filled by field name. <pthread.h> is deliberately
 * not included before nx_hal_plugin.h, and toy_memory_layout() reports the
 * nxhal_memory_t layout that a plugin sees.
 */
#include <stddef.h>

#include "nx_hal/nx_hal_plugin.h"

/* The helper library's entries under the toy's names. */
#define toy_event_is_ready nxhal_event_is_ready
#define toy_event_await nxhal_event_await
#define toy_event_on_ready nxhal_event_on_ready
#define toy_event_destroy nxhal_event_destroy

NXHAL_PLUGIN_DECLARE_ENTRIES(toy_)

/* What test_helpers.c calls (the toy's other entries are reached through
 * its table). */
const nxhal_api_t* toy_table(void);
int toy_table_misplaced(void);
size_t toy_memory_layout(size_t* in_use_offset);
uint64_t toy_memory_round_trip(void);

/* Every entry fails the same way: what matters here is which one ran. */
#define TOY_UNIMPLEMENTED() return nxhal_status_make(NXHAL_UNIMPLEMENTED, "%s", __func__)

nxhal_status_t* toy_plugin_info(nxhal_plugin_info_t* out) {
  NXHAL_REQUIRE_ARG(out);
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_client_create(const nxhal_option_t* options, size_t num_options,
                                  nxhal_client_t** out_client) {
  (void)options;
  (void)num_options;
  NXHAL_REQUIRE_ARG(out_client);
  TOY_UNIMPLEMENTED();
}
void toy_client_destroy(nxhal_client_t* client) {
  (void)client;
}
nxhal_status_t* toy_client_diagnostics(nxhal_client_t* client, const char** out_text) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_text);
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_client_device_count(nxhal_client_t* client, size_t* out_count) {
  NXHAL_REQUIRE_ARG(client);
  NXHAL_REQUIRE_ARG(out_count);
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_client_device(nxhal_client_t* client, size_t index,
                                  nxhal_device_t** out_device) {
  (void)client;
  (void)index;
  (void)out_device;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_device_info(nxhal_device_t* device, nxhal_device_info_t* out) {
  (void)device;
  (void)out;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_device_attribute_count(nxhal_device_t* device, size_t* out_count) {
  (void)device;
  (void)out_count;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_device_attribute(nxhal_device_t* device, size_t index, nxhal_attribute_t* out) {
  (void)device;
  (void)index;
  (void)out;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_device_memory_stats(nxhal_device_t* device, nxhal_memory_stats_t* out) {
  (void)device;
  (void)out;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_device_set_memory_limit(nxhal_device_t* device, uint64_t limit_bytes) {
  (void)device;
  (void)limit_bytes;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_buffer_create(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                  nxhal_buffer_t** out_buffer) {
  (void)device;
  (void)desc;
  (void)out_buffer;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_buffer_from_host(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                     const void* data, size_t size_bytes, uint32_t flags,
                                     nxhal_buffer_t** out_buffer) {
  (void)device;
  (void)desc;
  (void)data;
  (void)size_bytes;
  (void)flags;
  (void)out_buffer;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_buffer_to_host(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                   nxhal_event_t** out_event) {
  (void)buffer;
  (void)dst;
  (void)size_bytes;
  /* Host memory: the copy would be done here, so the event is too. */
  return nxhal_event_done(out_event);
}
nxhal_status_t* toy_buffer_info(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out) {
  (void)buffer;
  (void)out;
  TOY_UNIMPLEMENTED();
}
void toy_buffer_destroy(nxhal_buffer_t* buffer) {
  (void)buffer;
}
nxhal_status_t* toy_buffer_to_dlpack(nxhal_buffer_t* buffer,
                                     nxhal_dlpack_managed_tensor_t** out_tensor) {
  (void)buffer;
  (void)out_tensor;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_buffer_from_dlpack(nxhal_device_t* device,
                                       nxhal_dlpack_managed_tensor_t* tensor,
                                       nxhal_buffer_t** out_buffer) {
  (void)device;
  (void)tensor;
  (void)out_buffer;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                       const nxhal_option_t* options, size_t num_options,
                                       nxhal_executable_t** out_executable) {
  (void)device;
  (void)program;
  (void)options;
  (void)num_options;
  (void)out_executable;
  TOY_UNIMPLEMENTED();
}
void toy_executable_destroy(nxhal_executable_t* executable) {
  (void)executable;
}
nxhal_status_t* toy_executable_io_count(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                        size_t* out_count) {
  (void)executable;
  (void)kind;
  (void)out_count;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_executable_io_info(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                       size_t index, nxhal_io_info_t* out) {
  (void)executable;
  (void)kind;
  (void)index;
  (void)out;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_executable_execute(nxhal_executable_t* executable,
                                       nxhal_buffer_t* const* inputs, size_t num_inputs,
                                       nxhal_buffer_t** out_outputs, size_t num_outputs,
                                       nxhal_event_t** out_event) {
  (void)executable;
  (void)inputs;
  (void)num_inputs;
  (void)out_outputs;
  (void)num_outputs;
  (void)out_event;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_executable_serialize(nxhal_executable_t* executable, nxhal_blob_t** out_blob) {
  (void)executable;
  (void)out_blob;
  TOY_UNIMPLEMENTED();
}
nxhal_status_t* toy_executable_deserialize(nxhal_device_t* device, const void* data, size_t size,
                                           const nxhal_option_t* options, size_t num_options,
                                           nxhal_executable_t** out_executable) {
  (void)device;
  (void)data;
  (void)size;
  (void)options;
  (void)num_options;
  (void)out_executable;
  TOY_UNIMPLEMENTED();
}
void toy_blob_free(nxhal_blob_t* blob) {
  (void)blob;
}

static const nxhal_api_t toy_api = {NXHAL_API_1_0_SIZE, NXHAL_ABI_VERSION_MAJOR,
                                    NXHAL_ABI_VERSION_MINOR,
                                    NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_PLUGIN_TABLE_ENTRIES(toy_)};

const nxhal_api_t* toy_table(void) {
  return &toy_api;
}

/* The number of slots of toy_api that differ from a table filled field by
 * field, by name, as a plugin without the macros would write it. */
int toy_table_misplaced(void) {
  nxhal_api_t by_name;
  int misplaced = 0;
  by_name.struct_size = NXHAL_API_1_0_SIZE;
  by_name.abi_major = NXHAL_ABI_VERSION_MAJOR;
  by_name.abi_minor = NXHAL_ABI_VERSION_MINOR;
  by_name.status_free = nxhal_status_free;
  by_name.status_code = nxhal_status_code;
  by_name.status_message = nxhal_status_message;
  by_name.plugin_info = toy_plugin_info;
  by_name.client_create = toy_client_create;
  by_name.client_destroy = toy_client_destroy;
  by_name.client_diagnostics = toy_client_diagnostics;
  by_name.client_device_count = toy_client_device_count;
  by_name.client_device = toy_client_device;
  by_name.device_info = toy_device_info;
  by_name.device_attribute_count = toy_device_attribute_count;
  by_name.device_attribute = toy_device_attribute;
  by_name.device_memory_stats = toy_device_memory_stats;
  by_name.device_set_memory_limit = toy_device_set_memory_limit;
  by_name.buffer_create = toy_buffer_create;
  by_name.buffer_from_host = toy_buffer_from_host;
  by_name.buffer_to_host = toy_buffer_to_host;
  by_name.buffer_info = toy_buffer_info;
  by_name.buffer_destroy = toy_buffer_destroy;
  by_name.buffer_to_dlpack = toy_buffer_to_dlpack;
  by_name.buffer_from_dlpack = toy_buffer_from_dlpack;
  by_name.executable_compile = toy_executable_compile;
  by_name.executable_destroy = toy_executable_destroy;
  by_name.executable_io_count = toy_executable_io_count;
  by_name.executable_io_info = toy_executable_io_info;
  by_name.executable_execute = toy_executable_execute;
  by_name.executable_serialize = toy_executable_serialize;
  by_name.executable_deserialize = toy_executable_deserialize;
  by_name.blob_free = toy_blob_free;
  by_name.event_is_ready = nxhal_event_is_ready;
  by_name.event_await = nxhal_event_await;
  by_name.event_on_ready = nxhal_event_on_ready;
  by_name.event_destroy = nxhal_event_destroy;
  if (toy_api.struct_size != by_name.struct_size || toy_api.abi_major != by_name.abi_major ||
      toy_api.abi_minor != by_name.abi_minor) {
    ++misplaced;
  }
  /* Compared by name, so the order of the list does not matter here. */
#define TOY_COMPARE(ret, name, params, since_major, since_minor, P) \
  if (toy_api.name != by_name.name) ++misplaced;
  NXHAL_API_PREFIX_ENTRIES(TOY_COMPARE, ~)
  NXHAL_API_ENTRIES(TOY_COMPARE, ~)
#undef TOY_COMPARE
  return misplaced;
}

/* sizeof(nxhal_memory_t) and the offset of in_use, as a file without
 * <pthread.h> lays it out. */
size_t toy_memory_layout(size_t* in_use_offset) {
  *in_use_offset = offsetof(nxhal_memory_t, in_use);
  return sizeof(nxhal_memory_t);
}

/* The accounting functions on an opaque nxhal_memory_t: the peak after
 * reserving 100, charging 50 past a limit of 120 and releasing 30. */
uint64_t toy_memory_round_trip(void) {
  nxhal_memory_t memory;
  nxhal_memory_stats_t stats;
  nxhal_status_t* status;
  nxhal_memory_init(&memory);
  nxhal_memory_set_limit(&memory, 120);
  status = nxhal_memory_reserve(&memory, 100, "toy");
  nxhal_status_free(status);
  nxhal_memory_charge(&memory, 50);
  nxhal_memory_release(&memory, 30);
  stats.struct_size = sizeof(stats);
  nxhal_memory_stats(&memory, &stats);
  nxhal_memory_destroy(&memory);
  return status == NULL && stats.bytes_in_use == 120 && stats.bytes_limit == 120
             ? stats.peak_bytes_in_use
             : 0;
}
