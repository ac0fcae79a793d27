/*
 * fake_pjrt.c -- a PJRT plugin that forwards to a real one (path in
 * FAKE_PJRT_REAL) but presents a doctored API table, to test the guards
 * against version skew. FAKE_PJRT_MODE:
 *   major     pjrt_api_version.major = 1 (an ABI break: nothing may be called)
 *   old       struct_size ends before PJRT_Executable_OutputElementTypes
 *             (a plugin built against an older header)
 *   newer     minor 999 and a larger struct_size (a newer plugin)
 *   nullser   PJRT_Executable_Serialize is NULL
 *   noclient  PJRT_Client_Create is NULL
 *   noreplicas PJRT_LoadedExecutable_AddressableDevices is NULL
 *   options   the real table, but PJRT_Client_Create prints each create
 *             option as "FAKE_PJRT create_option NAME=VALUE" on stdout
 *             (bools and ints as numbers) and passes none on: the real
 *             plugin (XLA CPU) does not know the GPU options under test
 *   stablehlo the real table, but PJRT_Plugin_Attributes states
 *             stablehlo_current_version as FAKE_PJRT_STABLEHLO ("1.20.0";
 *             empty: the attribute left out), to test what the plugin
 *             decides from a backend's version
 *   track     the real table, but every buffer (and host-buffer event) is
 *             recorded with the client that made it, to catch lifetime bugs
 *             PJRT does not promise to survive: PJRT_Client_Destroy while a
 *             buffer of that client is alive, or a buffer/event used or
 *             destroyed after its client, prints "FAKE_PJRT MISUSE: ..." on
 *             stderr and aborts. Each PJRT_Client_Destroy prints
 *             "FAKE_PJRT client_destroy live_buffers=N" on stdout, each
 *             tracked PJRT_Buffer_Destroy "FAKE_PJRT buffer_destroy", so tests
 *             can check the order.
 * Built by the tests.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"

/* Room past the real table, for the "newer" mode's larger struct_size. */
static union {
  PJRT_Api api;
  char bytes[sizeof(PJRT_Api) + 512];
} table;

/* --- track mode ------------------------------------------------------------ */

/* The real plugin's table, which the wrappers below forward to. */
static PJRT_Api real_api;

enum { TRACK_BUFFER, TRACK_EVENT, TRACK_EXECUTABLE, TRACK_DEAD_CLIENT };

/* One PJRT object and the client that made it; TRACK_DEAD_CLIENT rows list
 * destroyed clients (removed if the address is reused by a new client). */
typedef struct track_row {
  const void* object;
  const void* client;
  int kind;
} track_row_t;

static pthread_mutex_t track_mutex = PTHREAD_MUTEX_INITIALIZER; /* guards rows */
static track_row_t* rows;
static size_t num_rows, cap_rows;

static void track_misuse(const char* what, const void* object, const void* client) {
  fprintf(stderr, "FAKE_PJRT MISUSE: %s (object %p, client %p)\n", what, object, client);
  fflush(stdout);
  abort();
}

/* Callers hold track_mutex. */
static void track_add_locked(const void* object, const void* client, int kind) {
  if (object == NULL) return;
  if (num_rows == cap_rows) {
    cap_rows = cap_rows ? cap_rows * 2 : 64;
    rows = (track_row_t*)realloc(rows, cap_rows * sizeof(*rows));
    if (rows == NULL) abort();
  }
  rows[num_rows].object = object;
  rows[num_rows].client = client;
  rows[num_rows].kind = kind;
  ++num_rows;
}

static void track_add(const void* object, const void* client, int kind) {
  pthread_mutex_lock(&track_mutex);
  track_add_locked(object, client, kind);
  pthread_mutex_unlock(&track_mutex);
}

/* The row of `object` of `kind`, or NULL. Callers hold track_mutex. */
static track_row_t* track_find_locked(const void* object, int kind) {
  size_t i;
  for (i = num_rows; i-- > 0;) {
    if (rows[i].object == object && rows[i].kind == kind) return &rows[i];
  }
  return NULL;
}

static int track_client_dead_locked(const void* client) {
  return client != NULL && track_find_locked(client, TRACK_DEAD_CLIENT) != NULL;
}

/* Aborts when `object` (of `kind`) belongs to a destroyed client; with
 * `forget`, drops its row. */
static void track_use(const void* object, int kind, const char* what, int forget) {
  track_row_t* row;
  const void* client = NULL;
  int dead = 0;
  pthread_mutex_lock(&track_mutex);
  row = track_find_locked(object, kind);
  if (row != NULL) {
    client = row->client;
    dead = track_client_dead_locked(client);
    if (forget) *row = rows[--num_rows];
  }
  pthread_mutex_unlock(&track_mutex);
  if (dead) track_misuse(what, object, client);
}

static PJRT_Error* track_Client_Create(PJRT_Client_Create_Args* args) {
  PJRT_Error* error = real_api.PJRT_Client_Create(args);
  if (error == NULL) {
    track_row_t* dead;
    pthread_mutex_lock(&track_mutex);
    dead = track_find_locked(args->client, TRACK_DEAD_CLIENT);
    if (dead != NULL) *dead = rows[--num_rows]; /* address reused */
    pthread_mutex_unlock(&track_mutex);
  }
  return error;
}

static PJRT_Error* track_Client_Destroy(PJRT_Client_Destroy_Args* args) {
  size_t i, live = 0;
  pthread_mutex_lock(&track_mutex);
  for (i = 0; i < num_rows; ++i) {
    live += rows[i].kind == TRACK_BUFFER && rows[i].client == args->client;
  }
  track_add_locked(args->client, NULL, TRACK_DEAD_CLIENT);
  pthread_mutex_unlock(&track_mutex);
  printf("FAKE_PJRT client_destroy live_buffers=%zu\n", live);
  fflush(stdout);
  if (live > 0) {
    fprintf(stderr, "FAKE_PJRT MISUSE: PJRT_Client_Destroy while %zu of its buffers are alive\n",
            live);
    abort();
  }
  return real_api.PJRT_Client_Destroy(args);
}

static PJRT_Error* track_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* args) {
  PJRT_Error* error = real_api.PJRT_Client_BufferFromHostBuffer(args);
  if (error == NULL) {
    track_add(args->buffer, args->client, TRACK_BUFFER);
    track_add(args->done_with_host_buffer, args->client, TRACK_EVENT);
  }
  return error;
}

static PJRT_Error* track_Client_CreateViewOfDeviceBuffer(
    PJRT_Client_CreateViewOfDeviceBuffer_Args* args) {
  PJRT_Error* error = real_api.PJRT_Client_CreateViewOfDeviceBuffer(args);
  if (error == NULL) track_add(args->buffer, args->client, TRACK_BUFFER);
  return error;
}

static PJRT_Error* track_Client_Compile(PJRT_Client_Compile_Args* args) {
  PJRT_Error* error = real_api.PJRT_Client_Compile(args);
  if (error == NULL) track_add(args->executable, args->client, TRACK_EXECUTABLE);
  return error;
}

static PJRT_Error* track_Executable_DeserializeAndLoad(
    PJRT_Executable_DeserializeAndLoad_Args* args) {
  PJRT_Error* error = real_api.PJRT_Executable_DeserializeAndLoad(args);
  if (error == NULL) track_add(args->loaded_executable, args->client, TRACK_EXECUTABLE);
  return error;
}

static PJRT_Error* track_LoadedExecutable_Destroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  track_use(args->executable, TRACK_EXECUTABLE, "PJRT_LoadedExecutable_Destroy after its client",
            1);
  return real_api.PJRT_LoadedExecutable_Destroy(args);
}

/* Outputs of an execute belong to the executable's client. */
static PJRT_Error* track_LoadedExecutable_Execute(PJRT_LoadedExecutable_Execute_Args* args) {
  PJRT_Error* error;
  PJRT_LoadedExecutable_GetExecutable_Args gargs;
  PJRT_Executable_NumOutputs_Args nargs;
  PJRT_Executable_Destroy_Args dargs;
  track_row_t* row;
  const void* client = NULL;
  size_t d, i;
  track_use(args->executable, TRACK_EXECUTABLE, "PJRT_LoadedExecutable_Execute after its client",
            0);
  error = real_api.PJRT_LoadedExecutable_Execute(args);
  if (error != NULL) return error;
  pthread_mutex_lock(&track_mutex);
  row = track_find_locked(args->executable, TRACK_EXECUTABLE);
  if (row != NULL) client = row->client;
  pthread_mutex_unlock(&track_mutex);
  if (client == NULL) return NULL;
  memset(&gargs, 0, sizeof(gargs));
  gargs.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  gargs.loaded_executable = args->executable;
  if (real_api.PJRT_LoadedExecutable_GetExecutable(&gargs) != NULL) abort();
  memset(&nargs, 0, sizeof(nargs));
  nargs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  nargs.executable = gargs.executable;
  if (real_api.PJRT_Executable_NumOutputs(&nargs) != NULL) abort();
  memset(&dargs, 0, sizeof(dargs));
  dargs.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  dargs.executable = gargs.executable;
  real_api.PJRT_Executable_Destroy(&dargs);
  for (d = 0; d < args->num_devices; ++d) {
    for (i = 0; i < nargs.num_outputs; ++i)
      track_add(args->output_lists[d][i], client, TRACK_BUFFER);
  }
  return NULL;
}

static PJRT_Error* track_Buffer_Destroy(PJRT_Buffer_Destroy_Args* args) {
  track_use(args->buffer, TRACK_BUFFER,
            "PJRT_Buffer_Destroy after its client's PJRT_Client_Destroy", 1);
  printf("FAKE_PJRT buffer_destroy\n");
  fflush(stdout);
  return real_api.PJRT_Buffer_Destroy(args);
}

static PJRT_Error* track_Buffer_UnsafePointer(PJRT_Buffer_UnsafePointer_Args* args) {
  track_use(args->buffer, TRACK_BUFFER, "PJRT_Buffer_UnsafePointer after its client", 0);
  return real_api.PJRT_Buffer_UnsafePointer(args);
}

static PJRT_Error* track_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* args) {
  track_use(args->buffer, TRACK_BUFFER, "PJRT_Buffer_ReadyEvent after its client", 0);
  return real_api.PJRT_Buffer_ReadyEvent(args);
}

static PJRT_Error* track_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* args) {
  track_use(args->src, TRACK_BUFFER, "PJRT_Buffer_ToHostBuffer after its client", 0);
  return real_api.PJRT_Buffer_ToHostBuffer(args);
}

static PJRT_Error* track_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args* args) {
  track_use(args->buffer, TRACK_BUFFER, "PJRT_Buffer_GetMemoryLayout after its client", 0);
  return real_api.PJRT_Buffer_GetMemoryLayout(args);
}

static PJRT_Error* track_Event_Destroy(PJRT_Event_Destroy_Args* args) {
  track_use(args->event, TRACK_EVENT, "PJRT_Event_Destroy after its client's PJRT_Client_Destroy",
            1);
  return real_api.PJRT_Event_Destroy(args);
}

static void track_install(PJRT_Api* api) {
  memcpy(&real_api, api, sizeof(PJRT_Api));
  api->PJRT_Client_Create = track_Client_Create;
  api->PJRT_Client_Destroy = track_Client_Destroy;
  api->PJRT_Client_BufferFromHostBuffer = track_Client_BufferFromHostBuffer;
  api->PJRT_Client_CreateViewOfDeviceBuffer = track_Client_CreateViewOfDeviceBuffer;
  api->PJRT_Client_Compile = track_Client_Compile;
  api->PJRT_Executable_DeserializeAndLoad = track_Executable_DeserializeAndLoad;
  api->PJRT_LoadedExecutable_Destroy = track_LoadedExecutable_Destroy;
  api->PJRT_LoadedExecutable_Execute = track_LoadedExecutable_Execute;
  api->PJRT_Buffer_Destroy = track_Buffer_Destroy;
  api->PJRT_Buffer_UnsafePointer = track_Buffer_UnsafePointer;
  api->PJRT_Buffer_ReadyEvent = track_Buffer_ReadyEvent;
  api->PJRT_Buffer_ToHostBuffer = track_Buffer_ToHostBuffer;
  api->PJRT_Buffer_GetMemoryLayout = track_Buffer_GetMemoryLayout;
  api->PJRT_Event_Destroy = track_Event_Destroy;
}

/* --- options mode ---------------------------------------------------------- */

static PJRT_Error* options_Client_Create(PJRT_Client_Create_Args* args) {
  size_t i;
  for (i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue* v = &args->create_options[i];
    switch (v->type) {
      case PJRT_NamedValue_kBool:
        printf("FAKE_PJRT create_option %.*s=%d\n", (int)v->name_size, v->name, (int)v->bool_value);
        break;
      case PJRT_NamedValue_kInt64:
        printf("FAKE_PJRT create_option %.*s=%lld\n", (int)v->name_size, v->name,
               (long long)v->int64_value);
        break;
      case PJRT_NamedValue_kFloat:
        printf("FAKE_PJRT create_option %.*s=%g\n", (int)v->name_size, v->name,
               (double)v->float_value);
        break;
      default: printf("FAKE_PJRT create_option %.*s\n", (int)v->name_size, v->name); break;
    }
  }
  fflush(stdout);
  args->create_options = NULL;
  args->num_options = 0;
  return real_api.PJRT_Client_Create(args);
}

/* --- stablehlo mode ----------------------------------------------------------- */

/* The real attributes with stablehlo_current_version replaced (or dropped). */
static PJRT_NamedValue fake_attributes[32];
static int64_t fake_version[8];

static PJRT_Error* stablehlo_Plugin_Attributes(PJRT_Plugin_Attributes_Args* args) {
  const char* text = getenv("FAKE_PJRT_STABLEHLO");
  size_t i, n = 0, parts = 0;
  PJRT_Error* error = real_api.PJRT_Plugin_Attributes(args);
  if (error != NULL) return error;
  while (text != NULL && *text != '\0' && parts < 8) {
    char* end;
    fake_version[parts++] = strtoll(text, &end, 10);
    text = *end == '.' ? end + 1 : end + strlen(end);
  }
  for (i = 0; i < args->num_attributes && n < 32; ++i) {
    PJRT_NamedValue value = args->attributes[i];
    if (value.name_size == 25 && memcmp(value.name, "stablehlo_current_version", 25) == 0) {
      if (parts == 0) continue;
      value.type = PJRT_NamedValue_kInt64List;
      value.int64_array_value = fake_version;
      value.value_size = parts;
    }
    fake_attributes[n++] = value;
  }
  args->attributes = fake_attributes;
  args->num_attributes = n;
  return NULL;
}

/* --- the plugin entry point ------------------------------------------------ */

const PJRT_Api* GetPjrtApi(void) {
  const char* real_path = getenv("FAKE_PJRT_REAL");
  const char* mode = getenv("FAKE_PJRT_MODE");
  void* real;
  const PJRT_Api* (*get)(void);
  if (real_path == NULL || mode == NULL) return NULL;
  real = dlopen(real_path, RTLD_NOW | RTLD_LOCAL);
  if (real == NULL) return NULL;
  *(void**)&get = dlsym(real, "GetPjrtApi");
  if (get == NULL) return NULL;
  memcpy(&table.api, get(), sizeof(PJRT_Api));
  if (strcmp(mode, "major") == 0) {
    table.api.pjrt_api_version.major_version = 1;
  } else if (strcmp(mode, "old") == 0) {
    table.api.struct_size = offsetof(PJRT_Api, PJRT_Executable_OutputElementTypes);
    table.api.pjrt_api_version.minor_version = 20;
  } else if (strcmp(mode, "newer") == 0) {
    table.api.struct_size = sizeof(table.bytes);
    table.api.pjrt_api_version.minor_version = 999;
  } else if (strcmp(mode, "nullser") == 0) {
    table.api.PJRT_Executable_Serialize = NULL;
  } else if (strcmp(mode, "noclient") == 0) {
    table.api.PJRT_Client_Create = NULL;
  } else if (strcmp(mode, "noreplicas") == 0) {
    table.api.PJRT_LoadedExecutable_AddressableDevices = NULL;
  } else if (strcmp(mode, "stablehlo") == 0) {
    memcpy(&real_api, &table.api, sizeof(PJRT_Api));
    table.api.PJRT_Plugin_Attributes = stablehlo_Plugin_Attributes;
  } else if (strcmp(mode, "track") == 0) {
    track_install(&table.api);
  } else if (strcmp(mode, "options") == 0) {
    memcpy(&real_api, &table.api, sizeof(PJRT_Api));
    table.api.PJRT_Client_Create = options_Client_Create;
  }
  return &table.api;
}
