/*
 * validate_driver.c -- commits one kind of contract breach through the
 * loader's table, for tests/test_validate.py to run with and without
 * NX_HAL_VALIDATE. Usage: validate_driver PLUGIN.so SCENARIO, where SCENARIO
 * is one of: identity, clean, double_destroy, use_after_free, cross_client,
 * garbage, leak, threads. Prints every status a breach returns as
 * "status: CODE: message" on stdout (the layer's own reports go to stderr),
 * then "done: SCENARIO". Exits 1 when a call that must succeed fails (or a
 * breach returns success), 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L /* nothing beyond C99 and POSIX threads */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal_loader.h"

static const nxhal_api_t* api = NULL;
static int failures = 0;

/* A call that must succeed: on failure print why and count it. */
#define MUST(call) must((call), #call, __LINE__)
static void must(nxhal_status_t* status, const char* what, int line) {
  if (status == NULL) return;
  fprintf(stderr, "validate_driver.c:%d: %s failed: %s\n", line, what, api->status_message(status));
  api->status_free(status);
  ++failures;
}

/* A call that breaks the contract: print its status and free it through the
 * table, as a caller would. */
#define BREACH(call) breach((call), #call, __LINE__)
static void breach(nxhal_status_t* status, const char* what, int line) {
  if (status == NULL) {
    fprintf(stderr, "validate_driver.c:%d: %s returned success\n", line, what);
    ++failures;
    return;
  }
  printf("status: %s: %s\n", nxhal_status_code_name(api->status_code(status)),
         api->status_message(status));
  fflush(stdout);
  api->status_free(status);
}

/* Handles made up: never dereferenced by the layer, so any value will do. */
#define GARBAGE(type) ((type*)(uintptr_t)0xdead0)

static const int64_t dims[1] = {4};
static const float host[4] = {1, 2, 3, 4};

static nxhal_tensor_desc_t desc_f32x4(void) {
  nxhal_tensor_desc_t desc;
  desc.struct_size = sizeof(desc);
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 1;
  desc.dims = dims;
  return desc;
}

typedef struct {
  nxhal_client_t* client;
  nxhal_device_t* device;
} session_t;

static session_t open_session(void) {
  session_t s = {NULL, NULL};
  MUST(api->client_create(NULL, 0, &s.client));
  if (s.client != NULL) MUST(api->client_device(s.client, 0, &s.device));
  return s;
}

static nxhal_buffer_t* make_buffer(nxhal_device_t* device) {
  nxhal_tensor_desc_t desc = desc_f32x4();
  nxhal_buffer_t* buffer = NULL;
  MUST(api->buffer_from_host(device, &desc, host, sizeof(host), NXHAL_HOST_COPY, &buffer));
  return buffer;
}

/* "neg f32 4": one input, one output (the fixture's program language). */
static nxhal_executable_t* make_executable(nxhal_device_t* device) {
  static const char text[] = "neg f32 4";
  nxhal_program_t program;
  nxhal_executable_t* exe = NULL;
  memset(&program, 0, sizeof(program));
  program.struct_size = sizeof(program);
  program.format = "fixture-elementwise";
  program.data = text;
  program.size = strlen(text);
  MUST(api->executable_compile(device, &program, NULL, 0, &exe));
  return exe;
}

/* The plugin's own table, fetched past the loader. */
static const nxhal_api_t* own_table(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  void* symbol;
  nxhal_query_fn query;
  nxhal_query_args_t args;
  const nxhal_api_t* table = NULL;
  nxhal_status_t* status;
  if (library == NULL) return NULL;
  symbol = dlsym(library, NXHAL_QUERY_SYMBOL);
  if (symbol == NULL) return NULL;
  memcpy(&query, &symbol, sizeof(query));
  args.struct_size = sizeof(args);
  args.host_abi_major = NXHAL_ABI_VERSION_MAJOR;
  args.host_abi_minor = NXHAL_ABI_VERSION_MINOR;
  status = query(&args, &table);
  if (status != NULL && table != NULL) table->status_free(status);
  return table;
}

/* Every entry used as the contract says: no report may appear. */
static void scenario_clean(void) {
  session_t s = open_session();
  nxhal_buffer_t* buffer = make_buffer(s.device);
  nxhal_executable_t* exe = make_executable(s.device);
  nxhal_buffer_t* outputs[1] = {NULL};
  nxhal_event_t* event = NULL;
  nxhal_blob_t* blob = NULL;
  nxhal_executable_t* loaded = NULL;
  float back[4];
  MUST(api->executable_execute(exe, &buffer, 1, outputs, 1, &event));
  MUST(api->event_await(event, NXHAL_WAIT_FOREVER));
  api->event_destroy(event);
  MUST(api->buffer_to_host(outputs[0], back, sizeof(back), NULL));
  if (back[3] != -4.0f) ++failures;
  MUST(api->executable_serialize(exe, &blob));
  MUST(api->executable_deserialize(s.device, blob->data, blob->size, NULL, 0, &loaded));
  api->blob_free(blob);
  /* A plugin's own error status goes through the wrapped table unharmed. */
  {
    nxhal_device_t* device = NULL;
    nxhal_status_t* status = api->client_device(s.client, 99, &device);
    if (api->status_code(status) != NXHAL_INVALID_ARGUMENT) ++failures;
    api->status_free(status);
  }
  api->executable_destroy(loaded);
  api->buffer_destroy(outputs[0]);
  api->buffer_destroy(buffer);
  api->executable_destroy(exe);
  api->client_destroy(s.client);
}

static void scenario_double_destroy(void) {
  session_t s = open_session();
  nxhal_buffer_t* buffer = make_buffer(s.device);
  nxhal_executable_t* exe = make_executable(s.device);
  nxhal_event_t* event = NULL;
  nxhal_blob_t* blob = NULL;
  nxhal_status_t* status;
  nxhal_device_t* device = NULL;
  float back[4];
  MUST(api->buffer_to_host(buffer, back, sizeof(back), &event));
  MUST(api->event_await(event, NXHAL_WAIT_FOREVER));
  MUST(api->executable_serialize(exe, &blob));
  api->buffer_destroy(buffer);
  api->buffer_destroy(buffer);
  api->event_destroy(event);
  api->event_destroy(event);
  api->blob_free(blob);
  api->blob_free(blob);
  api->executable_destroy(exe);
  api->executable_destroy(exe);
  status = api->client_device(s.client, 99, &device); /* the plugin's error status */
  api->status_free(status);
  api->status_free(status);
  api->client_destroy(s.client);
  api->client_destroy(s.client);
}

static void scenario_use_after_free(void) {
  session_t s = open_session();
  nxhal_buffer_t* buffer = make_buffer(s.device);
  nxhal_executable_t* exe = make_executable(s.device);
  nxhal_executable_t* other = make_executable(s.device);
  nxhal_event_t* event = NULL;
  nxhal_buffer_t* outputs[1] = {NULL};
  nxhal_buffer_info_t info;
  float back[4];
  size_t count = 0;
  int32_t ready = 0;
  MUST(api->buffer_to_host(buffer, back, sizeof(back), &event));
  MUST(api->event_await(event, NXHAL_WAIT_FOREVER));
  api->event_destroy(event);
  api->buffer_destroy(buffer);
  api->executable_destroy(exe);
  info.struct_size = sizeof(info);
  /* Before any report allocates: a freed address may be handed out again,
   * and then reads as whatever now lives there. */
  BREACH(api->event_is_ready(event, &ready));
  BREACH(api->buffer_info(buffer, &info));
  BREACH(api->buffer_to_host(buffer, back, sizeof(back), NULL));
  BREACH(api->executable_execute(other, &buffer, 1, outputs, 1, NULL));
  BREACH(api->executable_io_count(exe, NXHAL_IO_INPUT, &count));
  api->executable_destroy(other);
  api->client_destroy(s.client);
}

static void scenario_cross_client(void) {
  session_t a = open_session();
  session_t b = open_session();
  nxhal_buffer_t* from_a = make_buffer(a.device);
  nxhal_buffer_t* from_b = make_buffer(b.device);
  nxhal_executable_t* exe_b = make_executable(b.device);
  nxhal_buffer_t* outputs[1] = {NULL};
  BREACH(api->executable_execute(exe_b, &from_a, 1, outputs, 1, NULL));
  /* The same call with the right client's buffer goes through. */
  MUST(api->executable_execute(exe_b, &from_b, 1, outputs, 1, NULL));
  api->buffer_destroy(outputs[0]);
  api->buffer_destroy(from_a);
  api->buffer_destroy(from_b);
  api->executable_destroy(exe_b);
  api->client_destroy(a.client);
  api->client_destroy(b.client);
}

static void scenario_garbage(void) {
  session_t s = open_session();
  nxhal_buffer_t* buffer = make_buffer(s.device);
  nxhal_buffer_t* outputs[1] = {NULL};
  nxhal_buffer_info_t info;
  nxhal_device_info_t device_info;
  size_t count = 0;
  info.struct_size = sizeof(info);
  device_info.struct_size = sizeof(device_info);
  BREACH(api->buffer_info(GARBAGE(nxhal_buffer_t), &info));
  BREACH(api->device_info(GARBAGE(nxhal_device_t), &device_info));
  BREACH(api->client_device_count(GARBAGE(nxhal_client_t), &count));
  BREACH(api->executable_execute(GARBAGE(nxhal_executable_t), &buffer, 1, outputs, 1, NULL));
  /* A real handle of the wrong kind. */
  BREACH(api->device_info((nxhal_device_t*)(void*)buffer, &device_info));
  api->buffer_destroy(GARBAGE(nxhal_buffer_t));
  api->event_destroy(GARBAGE(nxhal_event_t));
  api->client_destroy(GARBAGE(nxhal_client_t));
  api->buffer_destroy(buffer);
  api->client_destroy(s.client);
}

static void scenario_leak(void) {
  session_t s = open_session();
  nxhal_buffer_t* first = make_buffer(s.device);
  nxhal_buffer_t* second = make_buffer(s.device);
  nxhal_executable_t* exe = make_executable(s.device);
  nxhal_event_t* event = NULL;
  nxhal_buffer_info_t info;
  float back[4];
  MUST(api->buffer_to_host(first, back, sizeof(back), &event));
  MUST(api->event_await(event, NXHAL_WAIT_FOREVER));
  (void)second;
  (void)exe;
  api->client_destroy(s.client); /* reports, then destroys the client all the same */
  /* What it left behind died with it. */
  info.struct_size = sizeof(info);
  BREACH(api->buffer_info(first, &info));
}

/* Handles made and destroyed on several threads at once: no report. */
static void* thread_body(void* arg) {
  nxhal_device_t* device = (nxhal_device_t*)arg;
  nxhal_executable_t* exe = make_executable(device);
  int i;
  for (i = 0; i < 2000; ++i) {
    nxhal_buffer_t* buffer = make_buffer(device);
    nxhal_buffer_t* outputs[1] = {NULL};
    MUST(api->executable_execute(exe, &buffer, 1, outputs, 1, NULL));
    api->buffer_destroy(outputs[0]);
    api->buffer_destroy(buffer);
  }
  api->executable_destroy(exe);
  return NULL;
}

static void scenario_threads(void) {
  session_t s = open_session();
  pthread_t threads[8];
  int i;
  for (i = 0; i < 8; ++i) pthread_create(&threads[i], NULL, thread_body, s.device);
  for (i = 0; i < 8; ++i) pthread_join(threads[i], NULL);
  api->client_destroy(s.client);
}

int main(int argc, char** argv) {
  nxhal_plugin_t* plugin = NULL;
  nxhal_status_t* status;
  const char* scenario;
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so SCENARIO\n", argv[0]);
    return 2;
  }
  scenario = argv[2];
  status = nxhal_plugin_open(argv[1], &plugin);
  if (status != NULL) {
    fprintf(stderr, "open: %s\n", nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
    return 1;
  }
  api = nxhal_plugin_api(plugin);
  if (strcmp(scenario, "identity") == 0) {
    const nxhal_api_t* own = own_table(argv[1]);
    if (own == NULL) return 1;
    printf("table: %s\n", api == own ? "own" : "wrapped");
  } else if (strcmp(scenario, "clean") == 0) {
    scenario_clean();
  } else if (strcmp(scenario, "double_destroy") == 0) {
    scenario_double_destroy();
  } else if (strcmp(scenario, "use_after_free") == 0) {
    scenario_use_after_free();
  } else if (strcmp(scenario, "cross_client") == 0) {
    scenario_cross_client();
  } else if (strcmp(scenario, "garbage") == 0) {
    scenario_garbage();
  } else if (strcmp(scenario, "leak") == 0) {
    scenario_leak();
  } else if (strcmp(scenario, "threads") == 0) {
    scenario_threads();
  } else {
    fprintf(stderr, "unknown scenario '%s'\n", scenario);
    return 2;
  }
  nxhal_plugin_close(plugin);
  printf("done: %s\n", scenario);
  return failures == 0 ? 0 : 1;
}
