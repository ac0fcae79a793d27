/*
 * hostmem_driver.c -- drives the fixture-hostmem plugin through the loader
 * and checks every ABI 1.0 entry against values computed here. Usage:
 * hostmem_driver PATH/libnxhal_fixture_hostmem.so. Prints each failure;
 * exits 1 if any failed. Run by tests/test_cabi.py (also under sanitizers).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal_loader.h"

static int failures = 0;
static const nxhal_api_t* api = NULL;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Checks a plugin status's code and message fragment; frees it. */
#define CHECK_STATUS(status, code, needle) check_status((status), (code), (needle), __LINE__)
static void check_status(nxhal_status_t* status, nxhal_status_code_t code, const char* needle,
                         int line) {
  if (api->status_code(status) != code) {
    fprintf(stderr, "%s:%d: expected %s, got %s (%s)\n", __FILE__, line,
            nxhal_status_code_name(code), nxhal_status_code_name(api->status_code(status)),
            api->status_message(status));
    ++failures;
  } else if (needle != NULL && strstr(api->status_message(status), needle) == NULL) {
    fprintf(stderr, "%s:%d: message '%s' lacks '%s'\n", __FILE__, line, api->status_message(status),
            needle);
    ++failures;
  }
  api->status_free(status);
}
#define CHECK_OK(status) CHECK_STATUS((status), NXHAL_OK, NULL)

static nxhal_option_t make_option(const char* name, nxhal_value_type_t type) {
  nxhal_option_t option;
  memset(&option, 0, sizeof(option));
  option.struct_size = sizeof(option);
  option.name = name;
  option.type = type;
  return option;
}

static nxhal_tensor_desc_t make_desc(nxhal_dtype_t dtype, int64_t rank, const int64_t* dims) {
  nxhal_tensor_desc_t desc;
  desc.struct_size = sizeof(desc);
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  return desc;
}

static nxhal_program_t make_program(const char* text) {
  nxhal_program_t program;
  memset(&program, 0, sizeof(program));
  program.struct_size = sizeof(program);
  program.format = "fixture-elementwise";
  program.data = text;
  program.size = strlen(text);
  return program;
}

static void test_client_options(void) {
  nxhal_option_t options[2];
  nxhal_client_t* client = NULL;
  size_t count = 0;
  options[0] = make_option("fail_create", NXHAL_VALUE_BOOL);
  options[0].bool_value = 1;
  CHECK_STATUS(api->client_create(options, 1, &client), NXHAL_UNAVAILABLE,
               "fixture asked to be unavailable");
  options[0] = make_option("nope", NXHAL_VALUE_BOOL);
  CHECK_STATUS(api->client_create(options, 1, &client), NXHAL_INVALID_ARGUMENT,
               "unknown option 'nope' (known: fail_create, device_count, compat_key)");
  options[0] = make_option("device_count", NXHAL_VALUE_STRING);
  options[0].string_value = "2";
  CHECK_STATUS(api->client_create(options, 1, &client), NXHAL_INVALID_ARGUMENT,
               "option 'device_count' must be int64, got string");
  options[0] = make_option("device_count", NXHAL_VALUE_INT64);
  options[0].int64_value = 0;
  CHECK_STATUS(api->client_create(options, 1, &client), NXHAL_INVALID_ARGUMENT, "1..16");
  options[0].int64_value = 3;
  CHECK_OK(api->client_create(options, 1, &client));
  CHECK_OK(api->client_device_count(client, &count));
  CHECK(count == 3);
  api->client_destroy(client);
  CHECK_STATUS(api->client_create(NULL, 0, NULL), NXHAL_INVALID_ARGUMENT, "out_client");
}

static void test_device(nxhal_client_t* client, nxhal_device_t** out_device) {
  nxhal_device_info_t info;
  nxhal_attribute_t attribute;
  nxhal_device_t* device = NULL;
  size_t count = 0;
  const char* text = NULL;
  CHECK_OK(api->client_diagnostics(client, &text));
  CHECK(text != NULL && strstr(text, "fixture") != NULL);
  CHECK_OK(api->client_device_count(client, &count));
  CHECK(count == 1);
  CHECK_STATUS(api->client_device(client, 1, &device), NXHAL_INVALID_ARGUMENT, "out of range");
  CHECK_STATUS(api->client_device(NULL, 0, &device), NXHAL_INVALID_ARGUMENT, "client is NULL");
  CHECK_OK(api->client_device(client, 0, &device));
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  CHECK_OK(api->device_info(device, &info));
  CHECK(info.kind == NXHAL_DEVICE_CPU);
  CHECK(strcmp(info.name, "fixture host memory") == 0);
  CHECK(info.num_formats == 1 && strcmp(info.formats[0], "fixture-elementwise") == 0);
  CHECK(strcmp(info.compat_key, "fixture-hostmem-v1") == 0);
  info.struct_size = 8;
  CHECK_STATUS(api->device_info(device, &info), NXHAL_INVALID_ARGUMENT, "struct_size");
  /* A handle of the wrong kind is refused, not misread. */
  CHECK_STATUS(api->device_info((nxhal_device_t*)(void*)client, &info), NXHAL_INVALID_ARGUMENT,
               "not a live device");
  CHECK_OK(api->device_attribute_count(device, &count));
  CHECK(count == 3);
  memset(&attribute, 0, sizeof(attribute));
  attribute.struct_size = sizeof(attribute);
  CHECK_OK(api->device_attribute(device, 0, &attribute));
  CHECK(strcmp(attribute.name, "device_index") == 0 && attribute.type == NXHAL_VALUE_INT64);
  CHECK_STATUS(api->device_attribute(device, 3, &attribute), NXHAL_INVALID_ARGUMENT, "range");
  *out_device = device;
}

static void test_buffers(nxhal_device_t* device) {
  const int64_t dims[2] = {2, 3};
  float host[6] = {1, 2, 3, 4, 5, 6};
  float back[6];
  nxhal_tensor_desc_t desc = make_desc(NXHAL_DTYPE_F32, 2, dims);
  nxhal_buffer_t* buffer = NULL;
  nxhal_buffer_t* alias = NULL;
  nxhal_buffer_t* imported = NULL;
  nxhal_buffer_info_t info;
  nxhal_memory_stats_t stats;
  nxhal_event_t* event = NULL;
  nxhal_dlpack_managed_tensor_t* tensor = NULL;

  CHECK_OK(api->buffer_from_host(device, &desc, host, sizeof(host), NXHAL_HOST_COPY, &buffer));
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  CHECK_OK(api->buffer_info(buffer, &info));
  CHECK(info.dtype == NXHAL_DTYPE_F32 && info.rank == 2 && info.dims[1] == 3);
  CHECK(info.size_bytes == 24 && info.is_zero_copy == 0 && info.device == device);
  memset(back, 0, sizeof(back));
  CHECK_OK(api->buffer_to_host(buffer, back, sizeof(back), NULL));
  CHECK(memcmp(back, host, sizeof(host)) == 0);
  memset(back, 0, sizeof(back));
  CHECK_OK(api->buffer_to_host(buffer, back, sizeof(back), &event));
  CHECK_OK(api->event_await(event, NXHAL_WAIT_FOREVER));
  api->event_destroy(event);
  CHECK(memcmp(back, host, sizeof(host)) == 0);

  stats.struct_size = sizeof(stats);
  CHECK_OK(api->device_memory_stats(device, &stats));
  CHECK(stats.bytes_in_use == 24 && stats.peak_bytes_in_use >= 24 && stats.bytes_limit == 0);

  /* Zero copy aliases: a change to host memory shows through. */
  CHECK_OK(api->buffer_from_host(device, &desc, host, sizeof(host), NXHAL_HOST_ZERO_COPY, &alias));
  CHECK_OK(api->buffer_info(alias, &info));
  CHECK(info.is_zero_copy == 1);
  host[0] = 42;
  CHECK_OK(api->buffer_to_host(alias, back, sizeof(back), NULL));
  CHECK(back[0] == 42);
  api->buffer_destroy(alias);

  /* DLPack round trip; the export outlives the buffer. */
  CHECK_OK(api->buffer_to_dlpack(buffer, &tensor));
  CHECK(tensor->dl_tensor.ndim == 2 && tensor->dl_tensor.shape[0] == 2);
  CHECK(tensor->dl_tensor.dtype.code == NXHAL_DLPACK_CODE_FLOAT &&
        tensor->dl_tensor.dtype.bits == 32);
  api->buffer_destroy(buffer);
  CHECK(((float*)tensor->dl_tensor.data)[5] == 6);
  CHECK_OK(api->buffer_from_dlpack(device, tensor, &imported));
  CHECK_OK(api->buffer_to_host(imported, back, sizeof(back), NULL));
  CHECK(back[0] == 1 && back[5] == 6);
  api->buffer_destroy(imported); /* calls the tensor's deleter */

  /* Strict argument checks. */
  CHECK_STATUS(api->buffer_from_host(device, &desc, host, 20, 0, &buffer), NXHAL_INVALID_ARGUMENT,
               "size_bytes is 20");
  desc.dtype = (nxhal_dtype_t)77;
  CHECK_STATUS(api->buffer_from_host(device, &desc, host, 24, 0, &buffer), NXHAL_INVALID_ARGUMENT,
               "unknown dtype 77");
  desc.dtype = NXHAL_DTYPE_F32;
  CHECK_STATUS(api->buffer_from_host(NULL, &desc, host, 24, 0, &buffer), NXHAL_INVALID_ARGUMENT,
               "device is NULL");
  CHECK_STATUS(api->buffer_from_host(device, &desc, host, 24, 8, &buffer), NXHAL_INVALID_ARGUMENT,
               "flags");
  CHECK_STATUS(api->buffer_to_host(NULL, back, 24, NULL), NXHAL_INVALID_ARGUMENT, "NULL");

  /* Memory limit. */
  CHECK_OK(api->device_set_memory_limit(device, 30));
  CHECK_OK(api->buffer_create(device, &desc, &buffer));
  CHECK_STATUS(api->buffer_create(device, &desc, &alias), NXHAL_RESOURCE_EXHAUSTED, "limit of 30");
  api->buffer_destroy(buffer);
  CHECK_OK(api->device_memory_stats(device, &stats));
  CHECK(stats.bytes_in_use == 0 && stats.bytes_limit == 30);
  CHECK_OK(api->device_set_memory_limit(device, 0));
}

/* Filled by on_ready on the producer's thread; guarded by `mutex`. */
typedef struct callback_record {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int calls;
  nxhal_status_code_t code;
} callback_record_t;

static void on_ready(nxhal_status_t* status, void* user_data) {
  callback_record_t* record = (callback_record_t*)user_data;
  pthread_mutex_lock(&record->mutex);
  record->calls++;
  record->code = api->status_code(status);
  pthread_cond_broadcast(&record->cond);
  pthread_mutex_unlock(&record->mutex);
  api->status_free(status);
}

static void test_executables(nxhal_device_t* device) {
  const int64_t dims[2] = {2, 3};
  const int32_t a[6] = {1, 2, 3, 4, 5, 2147483647};
  const int32_t b[6] = {10, 20, 30, 40, 50, 1};
  int32_t out[6];
  nxhal_tensor_desc_t desc = make_desc(NXHAL_DTYPE_I32, 2, dims);
  nxhal_program_t program = make_program("add i32 2,3");
  nxhal_executable_t* exe = NULL;
  nxhal_executable_t* loaded = NULL;
  nxhal_buffer_t* inputs[2] = {NULL, NULL};
  nxhal_buffer_t* outputs[1] = {NULL};
  nxhal_io_info_t io;
  nxhal_event_t* event = NULL;
  nxhal_blob_t* blob = NULL;
  nxhal_option_t option;
  callback_record_t record;
  size_t count = 0;
  int i;

  CHECK_OK(api->executable_compile(device, &program, NULL, 0, &exe));
  CHECK_OK(api->executable_io_count(exe, NXHAL_IO_INPUT, &count));
  CHECK(count == 2);
  CHECK_OK(api->executable_io_count(exe, NXHAL_IO_OUTPUT, &count));
  CHECK(count == 1);
  io.struct_size = sizeof(io);
  CHECK_OK(api->executable_io_info(exe, NXHAL_IO_INPUT, 1, &io));
  CHECK(strcmp(io.name, "rhs") == 0 && io.desc.dtype == NXHAL_DTYPE_I32 && io.desc.rank == 2);
  CHECK_OK(api->executable_io_info(exe, NXHAL_IO_OUTPUT, 0, &io));
  CHECK(strcmp(io.name, "out") == 0 && io.desc.dims[0] == 2 && io.desc.dims[1] == 3);
  CHECK_STATUS(api->executable_io_info(exe, NXHAL_IO_INPUT, 2, &io), NXHAL_INVALID_ARGUMENT,
               "range");

  CHECK_OK(api->buffer_from_host(device, &desc, a, sizeof(a), 0, &inputs[0]));
  CHECK_OK(api->buffer_from_host(device, &desc, b, sizeof(b), 0, &inputs[1]));
  CHECK_OK(api->executable_execute(exe, inputs, 2, outputs, 1, NULL));
  CHECK_OK(api->buffer_to_host(outputs[0], out, sizeof(out), NULL));
  for (i = 0; i < 5; ++i) CHECK(out[i] == a[i] + b[i]);
  CHECK(out[5] == (int32_t)-2147483647 - 1); /* wraps like numpy */
  api->buffer_destroy(outputs[0]);

  /* Async with a callback. */
  memset(&record, 0, sizeof(record));
  pthread_mutex_init(&record.mutex, NULL);
  pthread_cond_init(&record.cond, NULL);
  CHECK_OK(api->executable_execute(exe, inputs, 2, outputs, 1, &event));
  CHECK_OK(api->event_on_ready(event, on_ready, &record));
  CHECK_OK(api->event_await(event, NXHAL_WAIT_FOREVER));
  api->event_destroy(event);
  /* await may return before the callback has finished on the producer's thread. */
  pthread_mutex_lock(&record.mutex);
  while (record.calls == 0) pthread_cond_wait(&record.cond, &record.mutex);
  CHECK(record.calls == 1 && record.code == NXHAL_OK);
  pthread_mutex_unlock(&record.mutex);
  pthread_mutex_destroy(&record.mutex);
  pthread_cond_destroy(&record.cond);
  CHECK_OK(api->buffer_to_host(outputs[0], out, sizeof(out), NULL));
  CHECK(out[0] == 11 && out[4] == 55);
  api->buffer_destroy(outputs[0]);

  /* Wrong inputs. */
  CHECK_STATUS(api->executable_execute(exe, inputs, 1, outputs, 1, NULL), NXHAL_INVALID_ARGUMENT,
               "takes 2 inputs, got 1");
  api->buffer_destroy(inputs[1]);
  {
    const int64_t other_dims[2] = {3, 2};
    nxhal_tensor_desc_t other = make_desc(NXHAL_DTYPE_I32, 2, other_dims);
    CHECK_OK(api->buffer_from_host(device, &other, b, sizeof(b), 0, &inputs[1]));
    CHECK_STATUS(api->executable_execute(exe, inputs, 2, outputs, 1, NULL), NXHAL_INVALID_ARGUMENT,
                 "input 'rhs' has dimension 0 = 3, expected 2");
    api->buffer_destroy(inputs[1]);
    other = make_desc(NXHAL_DTYPE_F32, 2, dims);
    CHECK_OK(api->buffer_from_host(device, &other, b, sizeof(b), 0, &inputs[1]));
    CHECK_STATUS(api->executable_execute(exe, inputs, 2, outputs, 1, NULL), NXHAL_INVALID_ARGUMENT,
                 "input 'rhs' has dtype f32, expected i32");
    api->buffer_destroy(inputs[1]);
  }
  inputs[1] = NULL;
  CHECK_STATUS(api->executable_execute(exe, inputs, 2, outputs, 1, NULL), NXHAL_INVALID_ARGUMENT,
               "input 'rhs' is NULL");

  /* Serialize, deserialize, compat key. */
  CHECK_OK(api->executable_serialize(exe, &blob));
  CHECK(blob != NULL && blob->size > 0);
  CHECK_OK(api->executable_deserialize(device, blob->data, blob->size, NULL, 0, &loaded));
  CHECK_OK(api->executable_io_count(loaded, NXHAL_IO_INPUT, &count));
  CHECK(count == 2);
  api->executable_destroy(loaded);
  CHECK_STATUS(api->executable_deserialize(device, "garbage!", 8, NULL, 0, &loaded),
               NXHAL_INVALID_ARGUMENT, "not a serialized");
  {
    nxhal_client_t* other_client = NULL;
    nxhal_device_t* other_device = NULL;
    option = make_option("compat_key", NXHAL_VALUE_STRING);
    option.string_value = "other-key";
    CHECK_OK(api->client_create(&option, 1, &other_client));
    CHECK_OK(api->client_device(other_client, 0, &other_device));
    CHECK_STATUS(
        api->executable_deserialize(other_device, blob->data, blob->size, NULL, 0, &loaded),
        NXHAL_FAILED_PRECONDITION, "'fixture-hostmem-v1', this device's is 'other-key'");
    api->client_destroy(other_client);
  }
  api->blob_free(blob);

  /* Compile errors. */
  program = make_program("pow f32 4");
  CHECK_STATUS(api->executable_compile(device, &program, NULL, 0, &loaded), NXHAL_INVALID_ARGUMENT,
               "unknown op 'pow'");
  program = make_program("add f16 4");
  CHECK_STATUS(api->executable_compile(device, &program, NULL, 0, &loaded), NXHAL_INVALID_ARGUMENT,
               "dtype 'f16'");
  program = make_program("add f32 4,x");
  CHECK_STATUS(api->executable_compile(device, &program, NULL, 0, &loaded), NXHAL_INVALID_ARGUMENT,
               "shape '4,x'");
  program = make_program("add f32");
  CHECK_STATUS(api->executable_compile(device, &program, NULL, 0, &loaded), NXHAL_INVALID_ARGUMENT,
               "<op> <dtype> <shape>");
  program = make_program("neg f32 4");
  program.format = "onnx";
  CHECK_STATUS(api->executable_compile(device, &program, NULL, 0, &loaded), NXHAL_INVALID_ARGUMENT,
               "accepted: fixture-elementwise");
  program.format = "fixture-elementwise";
  option = make_option("opt_level", NXHAL_VALUE_DOUBLE);
  CHECK_STATUS(api->executable_compile(device, &program, &option, 1, &loaded),
               NXHAL_INVALID_ARGUMENT, "option 'opt_level' must be int64, got double");
  option.type = NXHAL_VALUE_INT64;
  CHECK_OK(api->executable_compile(device, &program, &option, 1, &loaded));
  {
    const float x[4] = {1.5f, -2.0f, 0.0f, 3.25f};
    const int64_t four[1] = {4};
    float y[4];
    nxhal_tensor_desc_t xdesc = make_desc(NXHAL_DTYPE_F32, 1, four);
    nxhal_buffer_t* xbuf = NULL;
    CHECK_OK(api->buffer_from_host(device, &xdesc, x, sizeof(x), NXHAL_HOST_ZERO_COPY, &xbuf));
    CHECK_OK(api->executable_execute(loaded, &xbuf, 1, outputs, 1, NULL));
    CHECK_OK(api->buffer_to_host(outputs[0], y, sizeof(y), NULL));
    CHECK(y[0] == -1.5f && y[1] == 2.0f && y[3] == -3.25f);
    api->buffer_destroy(outputs[0]);
    api->buffer_destroy(xbuf);
  }
  api->executable_destroy(loaded);
  api->buffer_destroy(inputs[0]);
  api->executable_destroy(exe);
}

/* Loader entry points given bad arguments return statuses, never crash. */
static void test_loader_misuse(void) {
  nxhal_plugin_t* plugin = NULL;
  nxhal_status_t* status = nxhal_plugin_open(NULL, &plugin);
  CHECK(nxhal_loader_status_code(status) == NXHAL_INVALID_ARGUMENT);
  nxhal_loader_status_free(status);
  status = nxhal_plugin_open("", &plugin);
  CHECK(nxhal_loader_status_code(status) == NXHAL_INVALID_ARGUMENT &&
        strcmp(nxhal_loader_status_message(status), "plugin path is NULL or empty") == 0);
  nxhal_loader_status_free(status);
  status = nxhal_plugin_open("x.so", NULL);
  CHECK(nxhal_loader_status_code(status) == NXHAL_INVALID_ARGUMENT);
  nxhal_loader_status_free(status);
  status = nxhal_plugin_open_by_name("../evil", &plugin);
  CHECK(nxhal_loader_status_code(status) == NXHAL_INVALID_ARGUMENT);
  nxhal_loader_status_free(status);
  status = nxhal_plugin_enumerate(NULL, NULL);
  CHECK(nxhal_loader_status_code(status) == NXHAL_INVALID_ARGUMENT);
  nxhal_loader_status_free(status);
  CHECK(plugin == NULL);
  CHECK(nxhal_plugin_api(NULL) == NULL && nxhal_plugin_path(NULL) == NULL);
  nxhal_plugin_close(NULL);
  nxhal_loader_status_free(NULL);
  CHECK(strcmp(nxhal_status_code_name((nxhal_status_code_t)99), "UNKNOWN") == 0);
  CHECK(strcmp(nxhal_status_code_name(NXHAL_ABI_MISMATCH), "ABI_MISMATCH") == 0);
  CHECK(strcmp(nxhal_loader_status_message(NULL), "") == 0);
}

int main(int argc, char** argv) {
  nxhal_plugin_t* plugin = NULL;
  nxhal_status_t* status;
  nxhal_client_t* client = NULL;
  nxhal_device_t* device = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH/libnxhal_fixture_hostmem.so\n", argv[0]);
    return 2;
  }
  test_loader_misuse();
  status = nxhal_plugin_open(argv[1], &plugin);
  if (status != NULL) {
    fprintf(stderr, "open failed: %s\n", nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
    return 1;
  }
  api = nxhal_plugin_api(plugin);
  CHECK(strcmp(nxhal_plugin_path(plugin), argv[1]) == 0);
  CHECK(nxhal_plugin_abi_major(plugin) == NXHAL_ABI_VERSION_MAJOR &&
        nxhal_plugin_abi_minor(plugin) == NXHAL_ABI_VERSION_MINOR);
  test_client_options();
  CHECK_OK(api->client_create(NULL, 0, &client));
  if (client != NULL) {
    test_device(client, &device);
    test_buffers(device);
    test_executables(device);
    api->client_destroy(client);
  }
  nxhal_plugin_close(plugin);
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all hostmem checks passed\n");
  return 0;
}
