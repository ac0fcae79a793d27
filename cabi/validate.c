/* validate.c -- the loader's validation layer (NX_HAL_VALIDATE): a wrapped
 * function table that checks every handle against the set of handles the
 * plugin has made, as Vulkan's validation layers do. See validate.h.
 *
 * Table entries take no context argument, so each wrapped table needs its
 * own set of functions that know which plugin they forward to: they are
 * stamped out per slot (NXHAL_VALIDATE_SLOTS of them) by a macro, each a
 * one-line call into the shared implementation with its slot's layer.
 *
 * A handle is looked up by its address only, never dereferenced: a garbage
 * pointer is reported, not followed. Destroyed handles stay in the set as
 * dead entries so a later use says "already destroyed" rather than
 * "unknown"; an address the allocator hands out again becomes live again. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"
#include "validate.h"

/* How many distinct plugin tables can be wrapped in one process (a test
 * suite opens many copies of one fixture library, each its own table). */
#define NXHAL_VALIDATE_SLOTS 64

/* The entry implementations, shared by every slot: kept out of line, so a
 * slot's functions are a jump each rather than a copy of the layer. */
#if defined(__GNUC__)
#define NXHAL_VALIDATE_SHARED __attribute__((noinline))
#else
#define NXHAL_VALIDATE_SHARED
#endif
/* Initial capacity of a handle set (a power of two). */
#define NXHAL_VALIDATE_MIN_CAPACITY 1024u
#define NXHAL_VALIDATE_MESSAGE_SIZE 512

typedef enum nxhal_validate_kind {
  NXHAL_KIND_CLIENT = 1,
  NXHAL_KIND_DEVICE,
  NXHAL_KIND_BUFFER,
  NXHAL_KIND_EXECUTABLE,
  NXHAL_KIND_EVENT,
  NXHAL_KIND_BLOB,
  NXHAL_KIND_STATUS
} nxhal_validate_kind_t;

enum { NXHAL_ENTRY_EMPTY = 0, NXHAL_ENTRY_LIVE = 1, NXHAL_ENTRY_DEAD = 2 };
enum { NXHAL_DEAD_DESTROYED = 0, NXHAL_DEAD_WITH_CLIENT = 1 };

/* One address the plugin (or this layer) has handed out. */
typedef struct nxhal_validate_entry {
  const void* key;
  const void* client; /* the client that made it; NULL for blobs and statuses */
  uint32_t count;     /* statuses: handed out and not yet freed (a plugin's static
                         out-of-memory status can be out several times) */
  uint8_t kind;
  uint8_t state;
  uint8_t why_dead;
  uint8_t ours; /* statuses: made by this layer, so freed by the loader's helpers */
} nxhal_validate_entry_t;

/* One wrapped plugin table and its handle set (open addressing, linear
 * probing). Every field below `mutex` is guarded by it. */
typedef struct nxhal_validate_layer {
  const nxhal_api_t* real; /* the plugin's table; set once, before `table` is handed out */
  nxhal_api_t table;       /* what callers get */
  pthread_mutex_t mutex;
  nxhal_validate_entry_t* entries;
  size_t capacity; /* a power of two, or 0 before the first insert */
  size_t used;     /* live + dead */
  size_t dead;
  int warned_oom; /* the set could not grow once: said so on stderr */
} nxhal_validate_layer_t;

static nxhal_validate_layer_t nxhal_validate_layers[NXHAL_VALIDATE_SLOTS];
static size_t nxhal_validate_layer_count = 0; /* guarded by nxhal_validate_layers_mutex */
static pthread_mutex_t nxhal_validate_layers_mutex = PTHREAD_MUTEX_INITIALIZER;

nxhal_validate_mode_t nxhal_validate_mode(void) {
  const char* value = getenv(NXHAL_VALIDATE_ENV);
  if (value == NULL || value[0] == '\0' || strcmp(value, "0") == 0) return NXHAL_VALIDATE_OFF;
  if (strcmp(value, "abort") == 0) return NXHAL_VALIDATE_ABORT;
  return NXHAL_VALIDATE_REPORT;
}

static const char* nxhal_kind_name(int kind) {
  switch (kind) {
    case NXHAL_KIND_CLIENT: return "client";
    case NXHAL_KIND_DEVICE: return "device";
    case NXHAL_KIND_BUFFER: return "buffer";
    case NXHAL_KIND_EXECUTABLE: return "executable";
    case NXHAL_KIND_EVENT: return "event";
    case NXHAL_KIND_BLOB: return "blob";
    case NXHAL_KIND_STATUS: return "status";
  }
  return "handle";
}

/* --- The handle set (every function here: called with the layer's lock held) */

static size_t nxhal_validate_hash(const void* key, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)key;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL; /* murmur3's finaliser: addresses differ in few bits */
  x ^= x >> 33;
  return (size_t)x & mask;
}

/* The entry for `key`, or the empty slot where it would go. capacity > 0. */
static nxhal_validate_entry_t* nxhal_validate_slot(nxhal_validate_layer_t* layer, const void* key) {
  size_t mask = layer->capacity - 1;
  size_t i = nxhal_validate_hash(key, mask);
  while (layer->entries[i].state != NXHAL_ENTRY_EMPTY && layer->entries[i].key != key) {
    i = (i + 1) & mask;
  }
  return &layer->entries[i];
}

/* The entry for `key`, or NULL. */
static nxhal_validate_entry_t* nxhal_validate_find(nxhal_validate_layer_t* layer, const void* key) {
  nxhal_validate_entry_t* entry;
  if (layer->capacity == 0) return NULL;
  entry = nxhal_validate_slot(layer, key);
  return entry->state == NXHAL_ENTRY_EMPTY ? NULL : entry;
}

/* Rebuilds the set with room for one more entry, at most half full. Dead
 * entries are dropped when they outnumber the live ones, which bounds the
 * set by the live handles rather than by every address ever seen: an old
 * destroyed handle then reads as "never made" instead of "destroyed", still
 * a report. Returns 0 when out of memory (the set is left as it was). */
static int nxhal_validate_rebuild(nxhal_validate_layer_t* layer) {
  int drop_dead = layer->dead > layer->used - layer->dead;
  size_t keep = drop_dead ? layer->used - layer->dead : layer->used;
  size_t capacity = NXHAL_VALIDATE_MIN_CAPACITY;
  nxhal_validate_entry_t* old = layer->entries;
  size_t old_capacity = layer->capacity;
  size_t i;
  /* Compacting leaves it a quarter full, so the next rebuild is far off. */
  while ((keep + 1) * (drop_dead ? 4 : 2) > capacity) capacity *= 2;
  layer->entries = (nxhal_validate_entry_t*)calloc(capacity, sizeof(*layer->entries));
  if (layer->entries == NULL) {
    layer->entries = old;
    return 0;
  }
  layer->capacity = capacity;
  layer->used = 0;
  layer->dead = 0;
  for (i = 0; i < old_capacity; ++i) {
    if (old[i].state == NXHAL_ENTRY_EMPTY) continue;
    if (drop_dead && old[i].state == NXHAL_ENTRY_DEAD) continue;
    *nxhal_validate_slot(layer, old[i].key) = old[i];
    ++layer->used;
    if (old[i].state == NXHAL_ENTRY_DEAD) ++layer->dead;
  }
  free(old);
  return 1;
}

/* Records `key` as a live `kind` made by `client`, replacing whatever the
 * address held before (the allocator reuses addresses). */
static void nxhal_validate_insert(nxhal_validate_layer_t* layer, const void* key, int kind,
                                  const void* client, int ours) {
  nxhal_validate_entry_t* entry;
  if ((layer->used + 1) * 2 > layer->capacity && !nxhal_validate_rebuild(layer)) {
    if (layer->capacity == 0 || layer->used + 1 >= layer->capacity) {
      /* Not recorded: a later use reads as "never made", so say why once. */
      if (!layer->warned_oom) {
        fprintf(stderr,
                "nx_hal validation (warning): out of memory recording handles; "
                "reports of unknown handles may be wrong from here on\n");
        layer->warned_oom = 1;
      }
      return;
    }
  }
  entry = nxhal_validate_slot(layer, key);
  if (entry->state == NXHAL_ENTRY_EMPTY) {
    ++layer->used;
  } else if (entry->state == NXHAL_ENTRY_DEAD) {
    --layer->dead;
  }
  if (entry->state == NXHAL_ENTRY_LIVE && entry->kind == kind && kind == NXHAL_KIND_STATUS) {
    ++entry->count;
    return;
  }
  entry->key = key;
  entry->client = client;
  entry->count = 1;
  entry->kind = (uint8_t)kind;
  entry->state = NXHAL_ENTRY_LIVE;
  entry->why_dead = NXHAL_DEAD_DESTROYED;
  entry->ours = (uint8_t)ours;
}

static void nxhal_validate_kill(nxhal_validate_layer_t* layer, nxhal_validate_entry_t* entry,
                                int why) {
  entry->state = NXHAL_ENTRY_DEAD;
  entry->why_dead = (uint8_t)why;
  ++layer->dead;
}

/* Checks that `handle` is a live `kind` and, when `client` is not NULL, that
 * it belongs to *client (else sets *client to its client). Writes the report
 * into `message` and returns 0 when it is not. `role` names the argument. */
static int nxhal_validate_check(nxhal_validate_layer_t* layer, const char* entry_name,
                                const char* role, const void* handle, int kind, int destroying,
                                const void** client, char* message) {
  const nxhal_validate_entry_t* entry = nxhal_validate_find(layer, handle);
  const char* verb = (kind == NXHAL_KIND_BLOB || kind == NXHAL_KIND_STATUS) ? "freed" : "destroyed";
  if (entry == NULL) {
    snprintf(message, NXHAL_VALIDATE_MESSAGE_SIZE,
             "%s: %s %p was never made by this plugin (unknown handle)", entry_name, role, handle);
    return 0;
  }
  if (entry->kind != kind) {
    snprintf(message, NXHAL_VALIDATE_MESSAGE_SIZE,
             "%s: %s %p is %s %s, not %s %s (wrong handle kind)", entry_name, role, handle,
             entry->state == NXHAL_ENTRY_LIVE ? "a live" : "a destroyed",
             nxhal_kind_name(entry->kind),
             kind == NXHAL_KIND_EXECUTABLE || kind == NXHAL_KIND_EVENT ? "an" : "a",
             nxhal_kind_name(kind));
    return 0;
  }
  if (entry->state != NXHAL_ENTRY_LIVE) {
    if (entry->why_dead == NXHAL_DEAD_WITH_CLIENT) {
      snprintf(message, NXHAL_VALIDATE_MESSAGE_SIZE,
               "%s: %s %p was destroyed with its client %p (use after free)", entry_name, role,
               handle, entry->client);
    } else {
      snprintf(message, NXHAL_VALIDATE_MESSAGE_SIZE, "%s: %s %p was already %s (%s)", entry_name,
               role, handle, verb,
               destroying
                   ? (kind == NXHAL_KIND_BLOB || kind == NXHAL_KIND_STATUS ? "double free"
                                                                           : "double destroy")
                   : "use after free");
    }
    return 0;
  }
  if (client != NULL && *client != NULL && entry->client != *client) {
    snprintf(message, NXHAL_VALIDATE_MESSAGE_SIZE,
             "%s: %s %p belongs to client %p, not to client %p of the other handles "
             "(handle from another client)",
             entry_name, role, handle, entry->client, *client);
    return 0;
  }
  if (client != NULL) *client = entry->client;
  return 1;
}

/* --- Reports -------------------------------------------------------------- */

/* Prints the report on stderr (so void entries report too); aborts when
 * NX_HAL_VALIDATE=abort. */
static void nxhal_validate_print(const char* message) {
  fprintf(stderr, "nx_hal validation: %s\n", message);
  fflush(stderr);
  if (nxhal_validate_mode() == NXHAL_VALIDATE_ABORT) abort();
}

/* Prints the report and returns it as a status the caller frees through the
 * wrapped table's status_free, which knows it is the loader's. */
static nxhal_status_t* nxhal_validate_report(nxhal_validate_layer_t* layer, const char* message) {
  nxhal_status_t* status;
  nxhal_validate_print(message);
  status = nxhal_status_make(NXHAL_INVALID_ARGUMENT, "nx_hal validation: %s", message);
  pthread_mutex_lock(&layer->mutex);
  nxhal_validate_insert(layer, status, NXHAL_KIND_STATUS, NULL, 1);
  pthread_mutex_unlock(&layer->mutex);
  return status;
}

/* Records a status the plugin returned (the caller will free it through the
 * wrapped table) and passes it on. */
static nxhal_status_t* nxhal_validate_pass(nxhal_validate_layer_t* layer, nxhal_status_t* status) {
  if (status == NULL) return NULL;
  pthread_mutex_lock(&layer->mutex);
  nxhal_validate_insert(layer, status, NXHAL_KIND_STATUS, NULL, 0);
  pthread_mutex_unlock(&layer->mutex);
  return status;
}

/* Checks one handle argument: NULL is passed on for the plugin to refuse (the
 * ABI makes that INVALID_ARGUMENT). Returns the report, or NULL when the call
 * may go on; sets *client (if not NULL) to the handle's client. */
static nxhal_status_t* nxhal_validate_use(nxhal_validate_layer_t* layer, const char* entry_name,
                                          const void* handle, int kind, const void** client) {
  char message[NXHAL_VALIDATE_MESSAGE_SIZE];
  int ok;
  if (client != NULL) *client = NULL;
  if (handle == NULL) return NULL;
  pthread_mutex_lock(&layer->mutex);
  ok = nxhal_validate_check(layer, entry_name, nxhal_kind_name(kind), handle, kind, 0, client,
                            message);
  pthread_mutex_unlock(&layer->mutex);
  return ok ? NULL : nxhal_validate_report(layer, message);
}

/* For the destroy and free entries: 1 when `handle` is a live `kind`, which
 * is then marked dead before the plugin frees it (after the free the
 * allocator may hand the address to another thread's new handle). Prints the
 * report and returns 0 otherwise. */
static int nxhal_validate_retire(nxhal_validate_layer_t* layer, const char* entry_name,
                                 const void* handle, int kind) {
  char message[NXHAL_VALIDATE_MESSAGE_SIZE];
  nxhal_validate_entry_t* entry;
  int ok;
  pthread_mutex_lock(&layer->mutex);
  ok = nxhal_validate_check(layer, entry_name, nxhal_kind_name(kind), handle, kind, 1, NULL,
                            message);
  if (ok) {
    entry = nxhal_validate_find(layer, handle);
    if (entry->kind != NXHAL_KIND_STATUS || --entry->count == 0) {
      nxhal_validate_kill(layer, entry, NXHAL_DEAD_DESTROYED);
    }
  }
  pthread_mutex_unlock(&layer->mutex);
  if (!ok) nxhal_validate_print(message);
  return ok;
}

/* Records a handle the plugin made (NULL is ignored). */
static void nxhal_validate_made(nxhal_validate_layer_t* layer, const void* handle, int kind,
                                const void* client) {
  if (handle == NULL) return;
  pthread_mutex_lock(&layer->mutex);
  nxhal_validate_insert(layer, handle, kind, client, 0);
  pthread_mutex_unlock(&layer->mutex);
}

#define NXHAL_VALIDATE_USE(layer, entry_name, handle, kind, client)            \
  do {                                                                         \
    nxhal_status_t* nxhal_bad_ =                                               \
        nxhal_validate_use((layer), (entry_name), (handle), (kind), (client)); \
    if (nxhal_bad_ != NULL) return nxhal_bad_;                                 \
  } while (0)

/* --- Statuses ------------------------------------------------------------- */

/* Whether `status` is one this layer made (a live one). */
static int nxhal_validate_is_ours(nxhal_validate_layer_t* layer, const nxhal_status_t* status) {
  const nxhal_validate_entry_t* entry;
  int ours;
  pthread_mutex_lock(&layer->mutex);
  entry = nxhal_validate_find(layer, status);
  ours = entry != NULL && entry->kind == NXHAL_KIND_STATUS && entry->state == NXHAL_ENTRY_LIVE &&
         entry->ours;
  pthread_mutex_unlock(&layer->mutex);
  return ours;
}

static NXHAL_VALIDATE_SHARED void nxhal_v_status_free(nxhal_validate_layer_t* layer,
                                                      nxhal_status_t* status) {
  int ours;
  if (status == NULL) return;
  ours = nxhal_validate_is_ours(layer, status);
  if (!nxhal_validate_retire(layer, "status_free", status, NXHAL_KIND_STATUS)) return;
  if (ours) {
    nxhal_status_free(status);
  } else {
    layer->real->status_free(status);
  }
}

static NXHAL_VALIDATE_SHARED nxhal_status_code_t nxhal_v_status_code(nxhal_validate_layer_t* layer,
                                                                     const nxhal_status_t* status) {
  if (status == NULL) return NXHAL_OK;
  return nxhal_validate_is_ours(layer, status) ? nxhal_status_code(status)
                                               : layer->real->status_code(status);
}

static NXHAL_VALIDATE_SHARED const char* nxhal_v_status_message(nxhal_validate_layer_t* layer,
                                                                const nxhal_status_t* status) {
  if (status == NULL) return "";
  return nxhal_validate_is_ours(layer, status) ? nxhal_status_message(status)
                                               : layer->real->status_message(status);
}

/* --- Plugin and client ---------------------------------------------------- */

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_plugin_info(nxhal_validate_layer_t* layer,
                                                                 nxhal_plugin_info_t* out) {
  return nxhal_validate_pass(layer, layer->real->plugin_info(out));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_client_create(nxhal_validate_layer_t* layer,
                                                                   const nxhal_option_t* options,
                                                                   size_t num_options,
                                                                   nxhal_client_t** out_client) {
  nxhal_status_t* status = layer->real->client_create(options, num_options, out_client);
  if (status == NULL && out_client != NULL && *out_client != NULL) {
    nxhal_validate_made(layer, *out_client, NXHAL_KIND_CLIENT, *out_client);
  }
  return nxhal_validate_pass(layer, status);
}

/* Reports what the client still owns, marks it and everything it made dead,
 * then lets the plugin destroy it: a leak is a report, not a reason to keep
 * the client. */
static NXHAL_VALIDATE_SHARED void nxhal_v_client_destroy(nxhal_validate_layer_t* layer,
                                                         nxhal_client_t* client) {
  char message[NXHAL_VALIDATE_MESSAGE_SIZE];
  size_t leaked[NXHAL_KIND_STATUS + 1];
  size_t i;
  int ok;
  if (client == NULL) {
    layer->real->client_destroy(client);
    return;
  }
  memset(leaked, 0, sizeof(leaked));
  pthread_mutex_lock(&layer->mutex);
  ok = nxhal_validate_check(layer, "client_destroy", "client", client, NXHAL_KIND_CLIENT, 1, NULL,
                            message);
  if (ok) {
    /* A scan of the whole set: client_destroy is rare, lookups are not. */
    for (i = 0; i < layer->capacity; ++i) {
      nxhal_validate_entry_t* entry = &layer->entries[i];
      if (entry->state != NXHAL_ENTRY_LIVE || entry->client != client) continue;
      if (entry->key == (const void*)client) continue;
      ++leaked[entry->kind];
      nxhal_validate_kill(layer, entry, NXHAL_DEAD_WITH_CLIENT);
    }
    nxhal_validate_kill(layer, nxhal_validate_find(layer, client), NXHAL_DEAD_DESTROYED);
  }
  pthread_mutex_unlock(&layer->mutex);
  if (!ok) {
    nxhal_validate_print(message);
    return;
  }
  if (leaked[NXHAL_KIND_BUFFER] + leaked[NXHAL_KIND_EXECUTABLE] + leaked[NXHAL_KIND_EVENT] > 0) {
    /* Devices belong to the client: only what the caller owns is a leak. */
    int length =
        snprintf(message, sizeof(message),
                 "client_destroy: client %p destroyed with live handles it made:", (void*)client);
    const int kinds[3] = {NXHAL_KIND_BUFFER, NXHAL_KIND_EXECUTABLE, NXHAL_KIND_EVENT};
    const char* separator = " ";
    int k;
    for (k = 0; k < 3 && length > 0 && (size_t)length < sizeof(message); ++k) {
      size_t count = leaked[kinds[k]];
      if (count == 0) continue;
      length += snprintf(message + length, sizeof(message) - (size_t)length, "%s%zu %s%s",
                         separator, count, nxhal_kind_name(kinds[k]), count == 1 ? "" : "s");
      separator = ", ";
    }
    if (length > 0 && (size_t)length < sizeof(message)) {
      snprintf(message + length, sizeof(message) - (size_t)length,
               " (leaked; destroy them before their client)");
    }
    nxhal_validate_print(message);
  }
  layer->real->client_destroy(client);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_client_diagnostics(
    nxhal_validate_layer_t* layer, nxhal_client_t* client, const char** out_text) {
  NXHAL_VALIDATE_USE(layer, "client_diagnostics", client, NXHAL_KIND_CLIENT, NULL);
  return nxhal_validate_pass(layer, layer->real->client_diagnostics(client, out_text));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_client_device_count(
    nxhal_validate_layer_t* layer, nxhal_client_t* client, size_t* out_count) {
  NXHAL_VALIDATE_USE(layer, "client_device_count", client, NXHAL_KIND_CLIENT, NULL);
  return nxhal_validate_pass(layer, layer->real->client_device_count(client, out_count));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_client_device(nxhal_validate_layer_t* layer,
                                                                   nxhal_client_t* client,
                                                                   size_t index,
                                                                   nxhal_device_t** out_device) {
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "client_device", client, NXHAL_KIND_CLIENT, NULL);
  status = layer->real->client_device(client, index, out_device);
  if (status == NULL && out_device != NULL) {
    nxhal_validate_made(layer, *out_device, NXHAL_KIND_DEVICE, client);
  }
  return nxhal_validate_pass(layer, status);
}

/* --- Devices -------------------------------------------------------------- */

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_device_info(nxhal_validate_layer_t* layer,
                                                                 nxhal_device_t* device,
                                                                 nxhal_device_info_t* out) {
  NXHAL_VALIDATE_USE(layer, "device_info", device, NXHAL_KIND_DEVICE, NULL);
  return nxhal_validate_pass(layer, layer->real->device_info(device, out));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_device_attribute_count(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, size_t* out_count) {
  NXHAL_VALIDATE_USE(layer, "device_attribute_count", device, NXHAL_KIND_DEVICE, NULL);
  return nxhal_validate_pass(layer, layer->real->device_attribute_count(device, out_count));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_device_attribute(nxhal_validate_layer_t* layer,
                                                                      nxhal_device_t* device,
                                                                      size_t index,
                                                                      nxhal_attribute_t* out) {
  NXHAL_VALIDATE_USE(layer, "device_attribute", device, NXHAL_KIND_DEVICE, NULL);
  return nxhal_validate_pass(layer, layer->real->device_attribute(device, index, out));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_device_memory_stats(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, nxhal_memory_stats_t* out) {
  NXHAL_VALIDATE_USE(layer, "device_memory_stats", device, NXHAL_KIND_DEVICE, NULL);
  return nxhal_validate_pass(layer, layer->real->device_memory_stats(device, out));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_device_set_memory_limit(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, uint64_t limit_bytes) {
  NXHAL_VALIDATE_USE(layer, "device_set_memory_limit", device, NXHAL_KIND_DEVICE, NULL);
  return nxhal_validate_pass(layer, layer->real->device_set_memory_limit(device, limit_bytes));
}

/* --- Buffers -------------------------------------------------------------- */

/* Records the buffer a successful call made for `client`. */
static nxhal_status_t* nxhal_validate_made_buffer(nxhal_validate_layer_t* layer,
                                                  nxhal_status_t* status,
                                                  nxhal_buffer_t** out_buffer, const void* client) {
  if (status == NULL && out_buffer != NULL) {
    nxhal_validate_made(layer, *out_buffer, NXHAL_KIND_BUFFER, client);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_buffer_create(nxhal_validate_layer_t* layer,
                                                                   nxhal_device_t* device,
                                                                   const nxhal_tensor_desc_t* desc,
                                                                   nxhal_buffer_t** out_buffer) {
  const void* client;
  NXHAL_VALIDATE_USE(layer, "buffer_create", device, NXHAL_KIND_DEVICE, &client);
  return nxhal_validate_made_buffer(layer, layer->real->buffer_create(device, desc, out_buffer),
                                    out_buffer, client);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_buffer_from_host(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
    const void* data, size_t size_bytes, uint32_t flags, nxhal_buffer_t** out_buffer) {
  const void* client;
  NXHAL_VALIDATE_USE(layer, "buffer_from_host", device, NXHAL_KIND_DEVICE, &client);
  return nxhal_validate_made_buffer(
      layer, layer->real->buffer_from_host(device, desc, data, size_bytes, flags, out_buffer),
      out_buffer, client);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_buffer_to_host(nxhal_validate_layer_t* layer,
                                                                    nxhal_buffer_t* buffer,
                                                                    void* dst, size_t size_bytes,
                                                                    nxhal_event_t** out_event) {
  const void* client;
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "buffer_to_host", buffer, NXHAL_KIND_BUFFER, &client);
  status = layer->real->buffer_to_host(buffer, dst, size_bytes, out_event);
  if (status == NULL && out_event != NULL) {
    nxhal_validate_made(layer, *out_event, NXHAL_KIND_EVENT, client);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_buffer_info(nxhal_validate_layer_t* layer,
                                                                 nxhal_buffer_t* buffer,
                                                                 nxhal_buffer_info_t* out) {
  const void* client;
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "buffer_info", buffer, NXHAL_KIND_BUFFER, &client);
  status = layer->real->buffer_info(buffer, out);
  if (status == NULL && out != NULL && NXHAL_STRUCT_HAS(out, nxhal_buffer_info_t, device) &&
      out->device != NULL) {
    /* The plugin handed this device out, so it is one it made; a device not
     * yet seen through client_device is recorded rather than reported. */
    pthread_mutex_lock(&layer->mutex);
    if (nxhal_validate_find(layer, out->device) == NULL ||
        nxhal_validate_find(layer, out->device)->state != NXHAL_ENTRY_LIVE) {
      nxhal_validate_insert(layer, out->device, NXHAL_KIND_DEVICE, client, 0);
    }
    pthread_mutex_unlock(&layer->mutex);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED void nxhal_v_buffer_destroy(nxhal_validate_layer_t* layer,
                                                         nxhal_buffer_t* buffer) {
  if (buffer != NULL &&
      !nxhal_validate_retire(layer, "buffer_destroy", buffer, NXHAL_KIND_BUFFER)) {
    return;
  }
  layer->real->buffer_destroy(buffer);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_buffer_to_dlpack(
    nxhal_validate_layer_t* layer, nxhal_buffer_t* buffer,
    nxhal_dlpack_managed_tensor_t** out_tensor) {
  NXHAL_VALIDATE_USE(layer, "buffer_to_dlpack", buffer, NXHAL_KIND_BUFFER, NULL);
  return nxhal_validate_pass(layer, layer->real->buffer_to_dlpack(buffer, out_tensor));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_buffer_from_dlpack(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, nxhal_dlpack_managed_tensor_t* tensor,
    nxhal_buffer_t** out_buffer) {
  const void* client;
  NXHAL_VALIDATE_USE(layer, "buffer_from_dlpack", device, NXHAL_KIND_DEVICE, &client);
  return nxhal_validate_made_buffer(
      layer, layer->real->buffer_from_dlpack(device, tensor, out_buffer), out_buffer, client);
}

/* --- Executables ---------------------------------------------------------- */

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_executable_compile(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, const nxhal_program_t* program,
    const nxhal_option_t* options, size_t num_options, nxhal_executable_t** out_executable) {
  const void* client;
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "executable_compile", device, NXHAL_KIND_DEVICE, &client);
  status = layer->real->executable_compile(device, program, options, num_options, out_executable);
  if (status == NULL && out_executable != NULL) {
    nxhal_validate_made(layer, *out_executable, NXHAL_KIND_EXECUTABLE, client);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED void nxhal_v_executable_destroy(nxhal_validate_layer_t* layer,
                                                             nxhal_executable_t* executable) {
  if (executable != NULL &&
      !nxhal_validate_retire(layer, "executable_destroy", executable, NXHAL_KIND_EXECUTABLE)) {
    return;
  }
  layer->real->executable_destroy(executable);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_executable_io_count(
    nxhal_validate_layer_t* layer, nxhal_executable_t* executable, nxhal_io_kind_t kind,
    size_t* out_count) {
  NXHAL_VALIDATE_USE(layer, "executable_io_count", executable, NXHAL_KIND_EXECUTABLE, NULL);
  return nxhal_validate_pass(layer, layer->real->executable_io_count(executable, kind, out_count));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_executable_io_info(
    nxhal_validate_layer_t* layer, nxhal_executable_t* executable, nxhal_io_kind_t kind,
    size_t index, nxhal_io_info_t* out) {
  NXHAL_VALIDATE_USE(layer, "executable_io_info", executable, NXHAL_KIND_EXECUTABLE, NULL);
  return nxhal_validate_pass(layer, layer->real->executable_io_info(executable, kind, index, out));
}

/* Checks the executable and every input under one lock: each input must be a
 * live buffer of the executable's client. */
static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_executable_execute(
    nxhal_validate_layer_t* layer, nxhal_executable_t* executable, nxhal_buffer_t* const* inputs,
    size_t num_inputs, nxhal_buffer_t** out_outputs, size_t num_outputs,
    nxhal_event_t** out_event) {
  char message[NXHAL_VALIDATE_MESSAGE_SIZE];
  char role[48];
  const void* client = NULL;
  nxhal_status_t* status;
  size_t i;
  int ok = 1;
  if (executable != NULL) {
    pthread_mutex_lock(&layer->mutex);
    ok = nxhal_validate_check(layer, "executable_execute", "executable", executable,
                              NXHAL_KIND_EXECUTABLE, 0, &client, message);
    for (i = 0; ok && inputs != NULL && i < num_inputs; ++i) {
      const void* input_client = client;
      if (inputs[i] == NULL) continue; /* the plugin refuses it, naming the input */
      snprintf(role, sizeof(role), "inputs[%zu] buffer", i);
      ok = nxhal_validate_check(layer, "executable_execute", role, inputs[i], NXHAL_KIND_BUFFER, 0,
                                &input_client, message);
    }
    pthread_mutex_unlock(&layer->mutex);
    if (!ok) return nxhal_validate_report(layer, message);
  }
  status = layer->real->executable_execute(executable, inputs, num_inputs, out_outputs, num_outputs,
                                           out_event);
  if (status == NULL) {
    pthread_mutex_lock(&layer->mutex);
    for (i = 0; out_outputs != NULL && i < num_outputs; ++i) {
      if (out_outputs[i] != NULL) {
        nxhal_validate_insert(layer, out_outputs[i], NXHAL_KIND_BUFFER, client, 0);
      }
    }
    if (out_event != NULL && *out_event != NULL) {
      nxhal_validate_insert(layer, *out_event, NXHAL_KIND_EVENT, client, 0);
    }
    pthread_mutex_unlock(&layer->mutex);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_executable_serialize(
    nxhal_validate_layer_t* layer, nxhal_executable_t* executable, nxhal_blob_t** out_blob) {
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "executable_serialize", executable, NXHAL_KIND_EXECUTABLE, NULL);
  status = layer->real->executable_serialize(executable, out_blob);
  /* A blob is plain bytes: it may outlive the client, so it has none. */
  if (status == NULL && out_blob != NULL) {
    nxhal_validate_made(layer, *out_blob, NXHAL_KIND_BLOB, NULL);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_executable_deserialize(
    nxhal_validate_layer_t* layer, nxhal_device_t* device, const void* data, size_t size,
    const nxhal_option_t* options, size_t num_options, nxhal_executable_t** out_executable) {
  const void* client;
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "executable_deserialize", device, NXHAL_KIND_DEVICE, &client);
  status =
      layer->real->executable_deserialize(device, data, size, options, num_options, out_executable);
  if (status == NULL && out_executable != NULL) {
    nxhal_validate_made(layer, *out_executable, NXHAL_KIND_EXECUTABLE, client);
  }
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED void nxhal_v_blob_free(nxhal_validate_layer_t* layer,
                                                    nxhal_blob_t* blob) {
  if (blob != NULL && !nxhal_validate_retire(layer, "blob_free", blob, NXHAL_KIND_BLOB)) return;
  layer->real->blob_free(blob);
}

/* --- Events --------------------------------------------------------------- */

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_event_is_ready(nxhal_validate_layer_t* layer,
                                                                    nxhal_event_t* event,
                                                                    int32_t* out_ready) {
  NXHAL_VALIDATE_USE(layer, "event_is_ready", event, NXHAL_KIND_EVENT, NULL);
  return nxhal_validate_pass(layer, layer->real->event_is_ready(event, out_ready));
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_event_await(nxhal_validate_layer_t* layer,
                                                                 nxhal_event_t* event,
                                                                 int64_t timeout_ns) {
  NXHAL_VALIDATE_USE(layer, "event_await", event, NXHAL_KIND_EVENT, NULL);
  return nxhal_validate_pass(layer, layer->real->event_await(event, timeout_ns));
}

/* The caller's callback, behind one that records the status it is given
 * (the caller frees it through the wrapped status_free). Freed when called. */
typedef struct nxhal_validate_callback {
  nxhal_validate_layer_t* layer;
  nxhal_event_callback_t callback;
  void* user_data;
} nxhal_validate_callback_t;

static void nxhal_validate_callback_trampoline(nxhal_status_t* status, void* user_data) {
  nxhal_validate_callback_t context = *(nxhal_validate_callback_t*)user_data;
  free(user_data);
  context.callback(nxhal_validate_pass(context.layer, status), context.user_data);
}

static NXHAL_VALIDATE_SHARED nxhal_status_t* nxhal_v_event_on_ready(nxhal_validate_layer_t* layer,
                                                                    nxhal_event_t* event,
                                                                    nxhal_event_callback_t callback,
                                                                    void* user_data) {
  nxhal_validate_callback_t* context;
  nxhal_status_t* status;
  NXHAL_VALIDATE_USE(layer, "event_on_ready", event, NXHAL_KIND_EVENT, NULL);
  if (event == NULL || callback == NULL) {
    return nxhal_validate_pass(layer, layer->real->event_on_ready(event, callback, user_data));
  }
  context = (nxhal_validate_callback_t*)malloc(sizeof(*context));
  if (context == NULL) {
    return nxhal_validate_report(layer, "event_on_ready: out of memory wrapping the callback");
  }
  context->layer = layer;
  context->callback = callback;
  context->user_data = user_data;
  status = layer->real->event_on_ready(event, nxhal_validate_callback_trampoline, context);
  /* Refused: the plugin will not call it. Accepted: it may already have. */
  if (status != NULL) free(context);
  return nxhal_validate_pass(layer, status);
}

static NXHAL_VALIDATE_SHARED void nxhal_v_event_destroy(nxhal_validate_layer_t* layer,
                                                        nxhal_event_t* event) {
  if (event != NULL && !nxhal_validate_retire(layer, "event_destroy", event, NXHAL_KIND_EVENT)) {
    return;
  }
  layer->real->event_destroy(event);
}

/* --- One set of entry functions per slot ---------------------------------- */

/* One assignment of a slot's fill function: entry `name` of slot `n` is
 * nxhal_v<n>_<name>. The fill walks the entry list of nx_hal.h, so an entry
 * added there without a trampoline below fails the compile. */
#define NXHAL_VALIDATE_FILL_ENTRY(ret, name, params, since_major, since_minor, n) \
  t->name = nxhal_v##n##_##name;

#define NXHAL_VALIDATE_SLOT(n)                                                                     \
  static void nxhal_v##n##_status_free(nxhal_status_t* s) {                                        \
    nxhal_v_status_free(&nxhal_validate_layers[n], s);                                             \
  }                                                                                                \
  static nxhal_status_code_t nxhal_v##n##_status_code(const nxhal_status_t* s) {                   \
    return nxhal_v_status_code(&nxhal_validate_layers[n], s);                                      \
  }                                                                                                \
  static const char* nxhal_v##n##_status_message(const nxhal_status_t* s) {                        \
    return nxhal_v_status_message(&nxhal_validate_layers[n], s);                                   \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_plugin_info(nxhal_plugin_info_t* o) {                        \
    return nxhal_v_plugin_info(&nxhal_validate_layers[n], o);                                      \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_client_create(const nxhal_option_t* o, size_t k,             \
                                                    nxhal_client_t** c) {                          \
    return nxhal_v_client_create(&nxhal_validate_layers[n], o, k, c);                              \
  }                                                                                                \
  static void nxhal_v##n##_client_destroy(nxhal_client_t* c) {                                     \
    nxhal_v_client_destroy(&nxhal_validate_layers[n], c);                                          \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_client_diagnostics(nxhal_client_t* c, const char** t) {      \
    return nxhal_v_client_diagnostics(&nxhal_validate_layers[n], c, t);                            \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_client_device_count(nxhal_client_t* c, size_t* k) {          \
    return nxhal_v_client_device_count(&nxhal_validate_layers[n], c, k);                           \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_client_device(nxhal_client_t* c, size_t i,                   \
                                                    nxhal_device_t** d) {                          \
    return nxhal_v_client_device(&nxhal_validate_layers[n], c, i, d);                              \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_device_info(nxhal_device_t* d, nxhal_device_info_t* o) {     \
    return nxhal_v_device_info(&nxhal_validate_layers[n], d, o);                                   \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_device_attribute_count(nxhal_device_t* d, size_t* k) {       \
    return nxhal_v_device_attribute_count(&nxhal_validate_layers[n], d, k);                        \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_device_attribute(nxhal_device_t* d, size_t i,                \
                                                       nxhal_attribute_t* o) {                     \
    return nxhal_v_device_attribute(&nxhal_validate_layers[n], d, i, o);                           \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_device_memory_stats(nxhal_device_t* d,                       \
                                                          nxhal_memory_stats_t* o) {               \
    return nxhal_v_device_memory_stats(&nxhal_validate_layers[n], d, o);                           \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_device_set_memory_limit(nxhal_device_t* d, uint64_t l) {     \
    return nxhal_v_device_set_memory_limit(&nxhal_validate_layers[n], d, l);                       \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_buffer_create(                                               \
      nxhal_device_t* d, const nxhal_tensor_desc_t* t, nxhal_buffer_t** b) {                       \
    return nxhal_v_buffer_create(&nxhal_validate_layers[n], d, t, b);                              \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_buffer_from_host(                                            \
      nxhal_device_t* d, const nxhal_tensor_desc_t* t, const void* p, size_t s, uint32_t f,        \
      nxhal_buffer_t** b) {                                                                        \
    return nxhal_v_buffer_from_host(&nxhal_validate_layers[n], d, t, p, s, f, b);                  \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_buffer_to_host(nxhal_buffer_t* b, void* p, size_t s,         \
                                                     nxhal_event_t** e) {                          \
    return nxhal_v_buffer_to_host(&nxhal_validate_layers[n], b, p, s, e);                          \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_buffer_info(nxhal_buffer_t* b, nxhal_buffer_info_t* o) {     \
    return nxhal_v_buffer_info(&nxhal_validate_layers[n], b, o);                                   \
  }                                                                                                \
  static void nxhal_v##n##_buffer_destroy(nxhal_buffer_t* b) {                                     \
    nxhal_v_buffer_destroy(&nxhal_validate_layers[n], b);                                          \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_buffer_to_dlpack(nxhal_buffer_t* b,                          \
                                                       nxhal_dlpack_managed_tensor_t** t) {        \
    return nxhal_v_buffer_to_dlpack(&nxhal_validate_layers[n], b, t);                              \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_buffer_from_dlpack(                                          \
      nxhal_device_t* d, nxhal_dlpack_managed_tensor_t* t, nxhal_buffer_t** b) {                   \
    return nxhal_v_buffer_from_dlpack(&nxhal_validate_layers[n], d, t, b);                         \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_executable_compile(                                          \
      nxhal_device_t* d, const nxhal_program_t* p, const nxhal_option_t* o, size_t k,              \
      nxhal_executable_t** x) {                                                                    \
    return nxhal_v_executable_compile(&nxhal_validate_layers[n], d, p, o, k, x);                   \
  }                                                                                                \
  static void nxhal_v##n##_executable_destroy(nxhal_executable_t* x) {                             \
    nxhal_v_executable_destroy(&nxhal_validate_layers[n], x);                                      \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_executable_io_count(nxhal_executable_t* x,                   \
                                                          nxhal_io_kind_t k, size_t* c) {          \
    return nxhal_v_executable_io_count(&nxhal_validate_layers[n], x, k, c);                        \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_executable_io_info(nxhal_executable_t* x, nxhal_io_kind_t k, \
                                                         size_t i, nxhal_io_info_t* o) {           \
    return nxhal_v_executable_io_info(&nxhal_validate_layers[n], x, k, i, o);                      \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_executable_execute(                                          \
      nxhal_executable_t* x, nxhal_buffer_t* const* in, size_t ni, nxhal_buffer_t** out,           \
      size_t no, nxhal_event_t** e) {                                                              \
    return nxhal_v_executable_execute(&nxhal_validate_layers[n], x, in, ni, out, no, e);           \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_executable_serialize(nxhal_executable_t* x,                  \
                                                           nxhal_blob_t** b) {                     \
    return nxhal_v_executable_serialize(&nxhal_validate_layers[n], x, b);                          \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_executable_deserialize(nxhal_device_t* d, const void* p,     \
                                                             size_t s, const nxhal_option_t* o,    \
                                                             size_t k, nxhal_executable_t** x) {   \
    return nxhal_v_executable_deserialize(&nxhal_validate_layers[n], d, p, s, o, k, x);            \
  }                                                                                                \
  static void nxhal_v##n##_blob_free(nxhal_blob_t* b) {                                            \
    nxhal_v_blob_free(&nxhal_validate_layers[n], b);                                               \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_event_is_ready(nxhal_event_t* e, int32_t* r) {               \
    return nxhal_v_event_is_ready(&nxhal_validate_layers[n], e, r);                                \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_event_await(nxhal_event_t* e, int64_t t) {                   \
    return nxhal_v_event_await(&nxhal_validate_layers[n], e, t);                                   \
  }                                                                                                \
  static nxhal_status_t* nxhal_v##n##_event_on_ready(nxhal_event_t* e, nxhal_event_callback_t c,   \
                                                     void* u) {                                    \
    return nxhal_v_event_on_ready(&nxhal_validate_layers[n], e, c, u);                             \
  }                                                                                                \
  static void nxhal_v##n##_event_destroy(nxhal_event_t* e) {                                       \
    nxhal_v_event_destroy(&nxhal_validate_layers[n], e);                                           \
  }                                                                                                \
  static void nxhal_validate_fill_##n(nxhal_api_t* t) {                                            \
    NXHAL_API_PREFIX_ENTRIES(NXHAL_VALIDATE_FILL_ENTRY, n)                                         \
    NXHAL_API_ENTRIES(NXHAL_VALIDATE_FILL_ENTRY, n)                                                \
  }

NXHAL_VALIDATE_SLOT(0)
NXHAL_VALIDATE_SLOT(1)
NXHAL_VALIDATE_SLOT(2)
NXHAL_VALIDATE_SLOT(3)
NXHAL_VALIDATE_SLOT(4)
NXHAL_VALIDATE_SLOT(5)
NXHAL_VALIDATE_SLOT(6)
NXHAL_VALIDATE_SLOT(7)
NXHAL_VALIDATE_SLOT(8)
NXHAL_VALIDATE_SLOT(9)
NXHAL_VALIDATE_SLOT(10)
NXHAL_VALIDATE_SLOT(11)
NXHAL_VALIDATE_SLOT(12)
NXHAL_VALIDATE_SLOT(13)
NXHAL_VALIDATE_SLOT(14)
NXHAL_VALIDATE_SLOT(15)
NXHAL_VALIDATE_SLOT(16)
NXHAL_VALIDATE_SLOT(17)
NXHAL_VALIDATE_SLOT(18)
NXHAL_VALIDATE_SLOT(19)
NXHAL_VALIDATE_SLOT(20)
NXHAL_VALIDATE_SLOT(21)
NXHAL_VALIDATE_SLOT(22)
NXHAL_VALIDATE_SLOT(23)
NXHAL_VALIDATE_SLOT(24)
NXHAL_VALIDATE_SLOT(25)
NXHAL_VALIDATE_SLOT(26)
NXHAL_VALIDATE_SLOT(27)
NXHAL_VALIDATE_SLOT(28)
NXHAL_VALIDATE_SLOT(29)
NXHAL_VALIDATE_SLOT(30)
NXHAL_VALIDATE_SLOT(31)
NXHAL_VALIDATE_SLOT(32)
NXHAL_VALIDATE_SLOT(33)
NXHAL_VALIDATE_SLOT(34)
NXHAL_VALIDATE_SLOT(35)
NXHAL_VALIDATE_SLOT(36)
NXHAL_VALIDATE_SLOT(37)
NXHAL_VALIDATE_SLOT(38)
NXHAL_VALIDATE_SLOT(39)
NXHAL_VALIDATE_SLOT(40)
NXHAL_VALIDATE_SLOT(41)
NXHAL_VALIDATE_SLOT(42)
NXHAL_VALIDATE_SLOT(43)
NXHAL_VALIDATE_SLOT(44)
NXHAL_VALIDATE_SLOT(45)
NXHAL_VALIDATE_SLOT(46)
NXHAL_VALIDATE_SLOT(47)
NXHAL_VALIDATE_SLOT(48)
NXHAL_VALIDATE_SLOT(49)
NXHAL_VALIDATE_SLOT(50)
NXHAL_VALIDATE_SLOT(51)
NXHAL_VALIDATE_SLOT(52)
NXHAL_VALIDATE_SLOT(53)
NXHAL_VALIDATE_SLOT(54)
NXHAL_VALIDATE_SLOT(55)
NXHAL_VALIDATE_SLOT(56)
NXHAL_VALIDATE_SLOT(57)
NXHAL_VALIDATE_SLOT(58)
NXHAL_VALIDATE_SLOT(59)
NXHAL_VALIDATE_SLOT(60)
NXHAL_VALIDATE_SLOT(61)
NXHAL_VALIDATE_SLOT(62)
NXHAL_VALIDATE_SLOT(63)

typedef void (*nxhal_validate_fill_fn)(nxhal_api_t* table);
static const nxhal_validate_fill_fn nxhal_validate_fills[NXHAL_VALIDATE_SLOTS] = {
    nxhal_validate_fill_0,  nxhal_validate_fill_1,  nxhal_validate_fill_2,  nxhal_validate_fill_3,
    nxhal_validate_fill_4,  nxhal_validate_fill_5,  nxhal_validate_fill_6,  nxhal_validate_fill_7,
    nxhal_validate_fill_8,  nxhal_validate_fill_9,  nxhal_validate_fill_10, nxhal_validate_fill_11,
    nxhal_validate_fill_12, nxhal_validate_fill_13, nxhal_validate_fill_14, nxhal_validate_fill_15,
    nxhal_validate_fill_16, nxhal_validate_fill_17, nxhal_validate_fill_18, nxhal_validate_fill_19,
    nxhal_validate_fill_20, nxhal_validate_fill_21, nxhal_validate_fill_22, nxhal_validate_fill_23,
    nxhal_validate_fill_24, nxhal_validate_fill_25, nxhal_validate_fill_26, nxhal_validate_fill_27,
    nxhal_validate_fill_28, nxhal_validate_fill_29, nxhal_validate_fill_30, nxhal_validate_fill_31,
    nxhal_validate_fill_32, nxhal_validate_fill_33, nxhal_validate_fill_34, nxhal_validate_fill_35,
    nxhal_validate_fill_36, nxhal_validate_fill_37, nxhal_validate_fill_38, nxhal_validate_fill_39,
    nxhal_validate_fill_40, nxhal_validate_fill_41, nxhal_validate_fill_42, nxhal_validate_fill_43,
    nxhal_validate_fill_44, nxhal_validate_fill_45, nxhal_validate_fill_46, nxhal_validate_fill_47,
    nxhal_validate_fill_48, nxhal_validate_fill_49, nxhal_validate_fill_50, nxhal_validate_fill_51,
    nxhal_validate_fill_52, nxhal_validate_fill_53, nxhal_validate_fill_54, nxhal_validate_fill_55,
    nxhal_validate_fill_56, nxhal_validate_fill_57, nxhal_validate_fill_58, nxhal_validate_fill_59,
    nxhal_validate_fill_60, nxhal_validate_fill_61, nxhal_validate_fill_62, nxhal_validate_fill_63};

const nxhal_api_t* nxhal_validate_wrap(const nxhal_api_t* api, const char* path) {
  nxhal_validate_layer_t* layer = NULL;
  size_t i;
  pthread_mutex_lock(&nxhal_validate_layers_mutex);
  for (i = 0; i < nxhal_validate_layer_count; ++i) {
    if (nxhal_validate_layers[i].real == api) {
      layer = &nxhal_validate_layers[i];
      break;
    }
  }
  if (layer == NULL && nxhal_validate_layer_count < NXHAL_VALIDATE_SLOTS) {
    layer = &nxhal_validate_layers[nxhal_validate_layer_count];
    memset(layer, 0, sizeof(*layer));
    pthread_mutex_init(&layer->mutex, NULL);
    layer->real = api;
    /* The fields past the entries (struct_size, versions) are the plugin's;
     * the table is never larger than the one this loader knows. */
    layer->table.struct_size =
        api->struct_size < sizeof(nxhal_api_t) ? api->struct_size : sizeof(nxhal_api_t);
    layer->table.abi_major = api->abi_major;
    layer->table.abi_minor = api->abi_minor;
    nxhal_validate_fills[nxhal_validate_layer_count](&layer->table);
    ++nxhal_validate_layer_count;
  }
  pthread_mutex_unlock(&nxhal_validate_layers_mutex);
  if (layer == NULL) {
    fprintf(stderr,
            "nx_hal validation (warning): more than %d plugin tables in this process; '%s' "
            "is not validated\n",
            NXHAL_VALIDATE_SLOTS, path != NULL ? path : "(unknown)");
    return api;
  }
  return &layer->table;
}
