/*
 * internal.h -- the nx_hal TPU plugin's private types, shared by its
 * translation units. The plugin drives any OpenXLA PJRT plugin (libtpu, the
 * CUDA plugin, XLA CPU) through the PJRT C API, which it dlopens at runtime.
 */
#ifndef NXHAL_TPU_INTERNAL_H_
#define NXHAL_TPU_INTERNAL_H_

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "nx_hal/nx_hal.h"
#include "nx_hal/nx_hal_plugin.h"
#include "pjrt_c_api.h"

/* The package version, from pyproject.toml through CMakeLists.txt. */
#ifndef TPU_PLUGIN_VERSION
#define TPU_PLUGIN_VERSION "0.0.0"
#endif

/* True when `api` (a plugin's table) holds entry `fn` and it is non-NULL.
 * Every call of a PJRT function goes through this check first: a plugin
 * built against an older header has a shorter table. */
#define TPU_HAS_FN(api, fn)                                                             \
  ((api) != NULL && (api)->struct_size >= offsetof(PJRT_Api, fn) + sizeof((api)->fn) && \
   (api)->fn != NULL)

/* A PJRT plugin library, loaded and initialised once per process (PJRT
 * plugins must not be initialised twice, and are never unloaded: unloading
 * them crashes at exit). Immutable after loading; lives forever. */
typedef struct tpu_library {
  char* path;
  const PJRT_Api* api;
  int api_major, api_minor;
  char* xla_version;           /* plugin attribute, "" if not stated */
  char* stablehlo_version;     /* "1.9.3" or "" */
  char* stablehlo_min_version; /* "0.9.0" or "" */
  char* failure;               /* non-NULL: loading failed, for this reason */
  struct tpu_library* next;
} tpu_library_t;

typedef struct tpu_backend tpu_backend_t;

/* Aligned host blocks that misaligned zero-copy inputs on CPU devices are
 * copied into and aliased from (staging.c): warm memory reused from call to
 * call, where PJRT's own copy would take fresh pages each time. Guarded by
 * `mutex`; owned by its device. */
#define TPU_STAGING_SLOTS 8
typedef struct tpu_staging {
  pthread_mutex_t mutex;
  int ready; /* the mutex is initialised */
  void* blocks[TPU_STAGING_SLOTS];
  size_t sizes[TPU_STAGING_SLOTS]; /* each block's size, a multiple of 64 */
  size_t count;
  size_t cached_bytes;
} tpu_staging_t;

struct nxhal_device {
  tpu_backend_t* backend;
  nxhal_client_t* client; /* the client listing it, at `index` */
  size_t index;
  PJRT_Device* pjrt;
  nxhal_device_kind_t kind;
  int is_cpu;  /* host-addressable memory */
  int donates; /* donated inputs are given to outputs in place (client.c says when) */
  char* vendor;
  char* name;
  uint64_t memory_bytes;
  int64_t compute_units;
  nxhal_memory_t memory;
  tpu_staging_t staging;         /* CPU devices only */
  nxhal_attribute_t* attributes; /* strings/lists below owned by the device */
  size_t num_attributes;
  char** owned_strings;
  size_t num_owned_strings;
  int64_t** owned_lists;
  size_t num_owned_lists;
};

/* One PJRT client over one library. Owned by the nx_hal client. */
struct tpu_backend {
  tpu_library_t* lib;
  const PJRT_Api* api;
  PJRT_Client* client;
  char* platform_name;
  char* platform_version;
  char* compat_key;                 /* what serialized executables for its devices must match */
  size_t first_device, num_devices; /* range in the client's device array */
};

/* Reference counted: the user's handle (dropped by client_destroy) plus one
 * per live zero-copy DLPack export, whose consumer may keep it past
 * client_destroy; the PJRT clients and the devices (whose accounting the
 * export's storage credits) are freed when the last reference goes. */
struct nxhal_client {
  int refcount; /* atomic */
  tpu_backend_t* backends;
  size_t num_backends;
  nxhal_device_t** devices; /* each allocated alone, owned */
  size_t num_devices;
  char* diagnostics;
};

/* The PJRT buffer behind nx_hal buffers and exported DLPack tensors, shared
 * by reference count so a DLPack export outlives the nx_hal buffer. */
typedef struct tpu_storage {
  int refcount; /* atomic */
  const PJRT_Api* api;
  PJRT_Buffer* buffer;
  PJRT_Event* host_done;                   /* zero-copy: fires when PJRT drops the host memory */
  nxhal_dlpack_managed_tensor_t* imported; /* DLPack import kept alive */
  nxhal_memory_t* memory;                  /* accounting to credit on release */
  uint64_t accounted;
  tpu_staging_t* staging; /* non-NULL: `staged` goes back to this pool on release */
  void* staged;           /* the staging block PJRT aliases, owned */
  size_t staged_size;
} tpu_storage_t;

struct nxhal_buffer {
  nxhal_device_t* device;
  tpu_storage_t* storage;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t* dims; /* in the buffer's own allocation */
  uint64_t size_bytes;
  int32_t is_zero_copy;
};

/* One input or output of an executable; name and dims owned by it. */
typedef struct tpu_io {
  char* name;
  nxhal_dtype_t dtype;
  int64_t rank; /* -1: unknown */
  int64_t* dims;
} tpu_io_t;

struct nxhal_executable {
  nxhal_device_t* device;    /* compiled for; replica 0's device when replicated */
  size_t num_replicas;       /* 1, or num_replicas of the compile */
  nxhal_device_t** replicas; /* num_replicas > 1: each replica's device, in order */
  PJRT_LoadedExecutable* loaded;
  PJRT_Executable* executable; /* from GetExecutable; destroyed with it */
  int may_donate;              /* its outputs may take inputs' memory (input-output aliasing) */
  tpu_io_t* inputs;            /* one replica's (all replicas share them) */
  size_t num_inputs;
  int inputs_known; /* 0 when the program gave no readable signature */
  tpu_io_t* outputs;
  size_t num_outputs;
  char* signature;        /* inputs as text, stored in serialized blobs */
  unsigned char* payload; /* deserialized: the PJRT bytes it came from */
  size_t payload_size;
};

/* --- executable.c (shared with execute.c) ------------------------------- */

/* Replicas of an executable: 1 unless compiled with num_replicas > 1.
 * Thread-safe (reads immutable fields). */
size_t tpu_replicas(const nxhal_executable_t* e);
/* The device replica `r` runs on. Thread-safe. */
nxhal_device_t* tpu_replica_device(const nxhal_executable_t* e, size_t r);

/* --- pjrt_util.c ---------------------------------------------------------- */

/* A status from a PJRT error (consumed), prefixed with `what`. NULL for NULL.
 * `force_code` != NXHAL_OK overrides the mapped code. Thread-safe. */
nxhal_status_t* tpu_status_from_pjrt(const PJRT_Api* api, PJRT_Error* error,
                                     nxhal_status_code_t force_code, const char* what);
/* The PJRT error's message copied into a malloc'd string; frees the error. */
char* tpu_take_error_message(const PJRT_Api* api, PJRT_Error* error);
/* A malloc'd copy of `size` bytes of `s` as a C string; NULL on OOM. */
char* tpu_strndup(const char* s, size_t size);
char* tpu_strdup(const char* s);
/* malloc'd printf. NULL on OOM. */
/* Holds back what vendor code writes to stderr (see pjrt_util.c). */
typedef struct tpu_stderr_capture {
  int saved_fd;
  FILE* file;
} tpu_stderr_capture_t;
/* Starts holding back stderr; always pair with tpu_stderr_capture_end.
 * Serialised process-wide (holds a mutex until the end call). */
void tpu_stderr_capture_begin(tpu_stderr_capture_t* cap);
/* Restores stderr; with `replay`, writes what was held back to it. */
void tpu_stderr_capture_end(tpu_stderr_capture_t* cap, int replay);

char* tpu_sprintf(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* Destroys a PJRT buffer (NULL is a no-op), ignoring (and freeing) any error. */
void tpu_pjrt_buffer_destroy(const PJRT_Api* api, PJRT_Buffer* buffer);
/* Destroys a PJRT event, ignoring (and freeing) any error. */
void tpu_pjrt_event_destroy(const PJRT_Api* api, PJRT_Event* event);
/* Awaits and destroys a PJRT event; the event's error as a status. */
/* staging.c: the pool behind misaligned zero-copy inputs on CPU devices.
 * init/destroy: once per device, not concurrently with anything else;
 * take/give: thread-safe. take returns a 64-byte aligned block of at least
 * `size` bytes (the caller owns it) or NULL when out of memory; give takes
 * it back, keeping it for reuse or freeing it. */
#define TPU_STAGING_MIN_BYTES (64u * 1024u) /* below this PJRT's own copy costs as little */
void tpu_staging_init(tpu_staging_t* pool);
void tpu_staging_destroy(tpu_staging_t* pool);
void* tpu_staging_take(tpu_staging_t* pool, size_t size);
void tpu_staging_give(tpu_staging_t* pool, void* block, size_t size);

nxhal_status_t* tpu_event_await_destroy(const PJRT_Api* api, PJRT_Event* event, const char* what);
/* Maps a PJRT event onto a new nx_hal event (caller owns *out_event); the
 * PJRT event is consumed. `done`/`done_arg` run first when it fires (may be
 * NULL). Thread-safe. */
nxhal_status_t* tpu_event_bridge(const PJRT_Api* api, PJRT_Event* event, void (*done)(void* arg),
                                 void* done_arg, nxhal_event_t** out_event);
/* The same for several PJRT events (all consumed): *out_event completes
 * when every one has fired, with the first error. Thread-safe. */
nxhal_status_t* tpu_event_bridge_all(const PJRT_Api* api, PJRT_Event* const* events, size_t n,
                                     nxhal_event_t** out_event);
/* dtype conversions; INVALID when there is no match. */
PJRT_Buffer_Type tpu_dtype_to_pjrt(nxhal_dtype_t dtype);
nxhal_dtype_t tpu_dtype_from_pjrt(PJRT_Buffer_Type type);
/* Parses an MLIR element type ("f32", "i1", "ui8", ...). */
nxhal_dtype_t tpu_dtype_from_mlir(const char* s, size_t n);

/* --- memory accounting (buffer.c) ---------------------------------------- */

/* True when memory outside PJRT's own can see `storage`'s bytes: the
 * caller's host memory aliased (zero-copy put, staged, DLPack import) or a
 * live zero-copy DLPack export (a to_numpy view). Such an input is never
 * donated: its bytes would change under, or be freed from, that reader.
 * Thread-safe (the export count is read atomically). */
int tpu_storage_exposed(tpu_storage_t* storage);

/* Gives back the device memory `storage` is counted for (once): its PJRT
 * buffer was donated, and the output that took its memory is counted.
 * Thread-safe. */
void tpu_storage_forget_memory(tpu_storage_t* storage);

/* Whether PJRT deleted `buffer`'s memory (donated to an execute, or
 * deleted). Thread-safe. */
int tpu_buffer_is_gone(const nxhal_buffer_t* buffer);

/* `status` as it is, or, where it is an error and `buffer` is gone, an
 * INVALID_ARGUMENT saying it was donated (takes `status`). */
nxhal_status_t* tpu_buffer_explain_gone(const nxhal_buffer_t* buffer, nxhal_status_t* status,
                                        const char* what);

/* Wraps a PJRT buffer (taken, destroyed on failure) as an nx_hal buffer;
 * `accounted` bytes were reserved on the device (released on failure).
 * dtype/rank/dims describe it; INVALID or rank < 0: read from PJRT. */
nxhal_status_t* tpu_buffer_wrap(nxhal_device_t* device, PJRT_Buffer* pjrt, uint64_t accounted,
                                nxhal_dtype_t dtype, int64_t rank, const int64_t* dims,
                                nxhal_buffer_t** out_buffer);

/* --- pjrt_library.c ------------------------------------------------------ */

/* Loads (once per process) the PJRT plugin at `path`: guards the
 * environment, dlopens, checks the API version and table, initialises.
 * On failure returns NULL and sets *out_reason (malloc'd). Thread-safe. */
tpu_library_t* tpu_library_load(const char* path, char** out_reason);
/* 1 when a Google TPU (PCI vendor 0x1ae0) is present. */
int tpu_tpu_present(void);

/* --- mlir_signature.c ---------------------------------------------------- */

/* Parses the inputs of `func.func @main` in MLIR text. Returns 1 and fills
 * *out_ios (malloc'd array) when found; 0 when `text` has no main function
 * or is not text (bytecode); -1 on OOM. */
int tpu_mlir_main_inputs(const char* text, size_t size, tpu_io_t** out_ios, size_t* out_count);
/* `needle` in [text, text+size), or NULL. */
const char* tpu_mlir_find(const void* text, size_t size, const char* needle);
/* Whether the program is MLIR bytecode (magic "ML\xefR"). */
int tpu_mlir_is_bytecode(const void* data, size_t size);
/* Signature text <-> io arrays ("f32[4,4];bf16[];..."), for serialized blobs. */
char* tpu_signature_format(const tpu_io_t* ios, size_t count);
int tpu_signature_parse(const char* text, tpu_io_t** out_ios, size_t* out_count);
void tpu_ios_free(tpu_io_t* ios, size_t count);

/* --- hlo_proto.c -------------------------------------------------------- */

/* The entry parameters from a serialized HloModuleProto. 1 on success
 * (caller frees *out_ios with tpu_ios_free), 0 when they cannot be read. */
int tpu_hlo_parameters(const void* proto, size_t size, tpu_io_t** out_ios, size_t* out_count);
/* The same from a compiled executable, via PJRT_Executable_OptimizedProgram
 * (when the table has it). */
int tpu_executable_parameters(const PJRT_Api* api, PJRT_Executable* executable, tpu_io_t** out_ios,
                              size_t* out_count);

/* --- options.c ----------------------------------------------------------- */

/* The create options the client reads itself; the strings point into the
 * caller's options, valid during client_create. */
typedef struct tpu_create_config {
  uint64_t memory_limit;     /* 0: none */
  const char* library_path;  /* NULL: none */
  const char* backend_paths; /* NULL: none */
} tpu_create_config_t;

/* At least the number of rows mapping nx_hal options to PJRT create options
 * (options.c checks it at build time): the size of a PJRT_NamedValue array
 * that tpu_pjrt_create_options fills. */
#define TPU_MAX_PJRT_OPTIONS 8

/* Checks the create options against their specs (names, types, ranges) and
 * reads them into *out. Thread-safe. */
nxhal_status_t* tpu_create_options_read(const nxhal_option_t* options, size_t num_options,
                                        tpu_create_config_t* out);
/* Checks the compile options and reads the replica and partition counts
 * (1 when not given); partitions other than 1 are UNIMPLEMENTED. Thread-safe. */
nxhal_status_t* tpu_compile_options_read(const nxhal_option_t* options, size_t num_options,
                                         int64_t* replicas, int64_t* partitions);
/* Fills `values` (room for TPU_MAX_PJRT_OPTIONS) with the PJRT create options
 * of backend family `family` ("cpu", "gpu", "tpu"; "" takes none) from
 * checked options; returns how many. The values point into `options`.
 * Thread-safe. */
size_t tpu_pjrt_create_options(const nxhal_option_t* options, size_t num_options,
                               const char* family, PJRT_NamedValue* values);

/* --- backends (client.c, backend_discovery.c) ---------------------------- */

/* One backend library to try, all strings owned by the candidate list:
 * - label: its name in diagnostics ("tpu", "cuda12", "cpu", "explicit", or
 *   "" for an unnamed entry);
 * - family: which PJRT create options it takes ("cpu", "gpu", "tpu"), from
 *   its label; "" when the label does not say, and the PJRT client's own
 *   platform name decides after creation;
 * - path: the library. */
typedef struct tpu_candidate {
  char* label;
  char* family;
  char* path;
} tpu_candidate_t;

/* What to install when no backend is found; nx_hal_tpu/backends.py says the
 * same (INSTALL_HINT). */
#define TPU_INSTALL_HINT                                                           \
  "install one with pip install 'nx-hal-tpu[cpu]' (XLA CPU), "                     \
  "pip install 'nx-hal-tpu[tpu]' (Cloud TPU) or pip install 'nx-hal-tpu[cuda12]' " \
  "/ 'nx-hal-tpu[cuda13]' (NVIDIA GPU, CUDA 12 / 13)"

/* Before a GPU backend's client is made. Without gpu_preallocate in the
 * options: *out_options, the options with gpu_preallocate=false added
 * (caller frees), since XLA's preallocation aborts processes that share a
 * GPU. With gpu_preallocate=true: a reason to refuse when the memory
 * fraction does not fit in what NVML says is free now. Returns the malloc'd
 * reason or NULL. Thread-safe. */
char* tpu_gpu_memory_guard(const nxhal_option_t* options, size_t num_options,
                           nxhal_option_t** out_options);

/* Appends (label, path), copied, unless the path is empty or listed already.
 * `label` may state the family: "family:name" ("gpu:cuda12"), or a label
 * that is a family ("cpu", "gpu", "tpu"); "cuda*" and "rocm*" labels are
 * "gpu". Returns 1 when added. Not thread-safe on one list. */
int tpu_candidates_add(tpu_candidate_t** items, size_t* count, const char* label, const char* path);

/* Appends the PJRT backends installed in the site-packages this library is
 * installed in (<site-packages>/nx_hal_tpu/libnxhal_tpu.so), in the order
 * nx_hal_tpu/backends.py uses: tpu, cuda12, cuda13, cpu. *out_searched
 * (caller frees; NULL when the location is unknown) says where it looked.
 * Thread-safe. */
void tpu_backends_discover(tpu_candidate_t** items, size_t* count, char** out_searched);

/* --- the nx_hal table's entries (plugin.c fills the table with them) ---- */
/* tpu_<entry> for every entry of nx_hal.h; contracts, ownership and thread
 * safety are those of nxhal_api_t. Plugin info is in plugin.c, clients and
 * devices in client.c, buffers in buffer.c, executables in executable.c and
 * execute.c. Events are the helper library's (tpu_event_bridge completes
 * them from PJRT's). */
#define tpu_event_is_ready nxhal_event_is_ready
#define tpu_event_await nxhal_event_await
#define tpu_event_on_ready nxhal_event_on_ready
#define tpu_event_destroy nxhal_event_destroy
NXHAL_PLUGIN_DECLARE_ENTRIES(tpu_)

/* Takes a reference on `client`; the caller must already hold one (the
 * user's handle, through a live buffer). One atomic add. Thread-safe. */
void tpu_client_retain(nxhal_client_t* client);
/* Drops a reference; the last one destroys every PJRT resource of the
 * client. NULL is a no-op. Thread-safe (any thread may drop the last). */
void tpu_client_release(nxhal_client_t* client);

#endif /* NXHAL_TPU_INTERNAL_H_ */
