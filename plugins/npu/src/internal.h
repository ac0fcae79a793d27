/*
 * internal.h -- the objects behind the nx_hal handles of the OpenVINO
 * plugin, shared by its source files. Not installed; not part of the ABI.
 */
#ifndef NX_HAL_NPU_INTERNAL_H_
#define NX_HAL_NPU_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "nx_hal/nx_hal.h"
#include "nx_hal/nx_hal_plugin.h"
#include "openvino.h"

#ifndef NXHAL_NPU_VERSION
#define NXHAL_NPU_VERSION "0.0.0"
#endif

#define NPU_NUM_ATTRIBUTES 6
/* Inputs up to this rank have their binding remembered per infer request. */
#define NPU_MAX_RANK 8
/* Static outputs up to this size are copied out of OpenVINO's own output
 * tensor: cheaper than binding a fresh buffer on every run. Larger ones are
 * written by OpenVINO straight into the buffer handed to the caller. */
#define NPU_BIND_OUTPUT_MIN_BYTES 65536
/* The range of the "streams" option: more would be a typo, not a plan. */
#define NPU_MAX_STREAMS 1024
/* Whether OpenVINO's CPU pins its threads when a compile does not say
 * (cpu_pinning): OpenVINO's own default is to pin, which on a machine whose
 * cores are shared stalls a run behind other work (measured in
 * docs/performance.md). */
#define NPU_DEFAULT_CPU_PINNING 0
/* The range of "inference_threads", for the same reason. */
#define NPU_MAX_THREADS 1024
/* Run-time properties a compile or an import passes to OpenVINO: the
 * performance hint, streams, pinning and threads (npu_run_properties). */
#define NPU_MAX_RUN_PROPERTIES 4

/* Precision codes, as serialized executables record them: 0 none given,
 * then f32, bf16, f16, auto (npu_precision_code). */
#define NPU_PRECISION_AUTO 4
#define NPU_PRECISION_MAX 4

/* Compile options after validation; strings owned by whoever holds the struct. */
typedef struct npu_compile_options {
  char* target;              /* OpenVINO device string; NULL: the nx_hal device's own */
  char* precision;           /* "f32" / "bf16" / "f16" / "auto" (set no hint) or NULL */
  char* performance;         /* "LATENCY" / "THROUGHPUT" / "CUMULATIVE_THROUGHPUT" or NULL */
  int64_t streams;           /* -1: not set */
  int cpu_pinning;           /* -1: not set (NPU_DEFAULT_CPU_PINNING applies), 0, 1 */
  int64_t inference_threads; /* -1: not set */
} npu_compile_options_t;

/* Room for the text of one compile's run properties (npu_run_properties). */
typedef struct npu_run_text {
  char streams[24];
  char threads[24];
} npu_run_text_t;

/* One OpenVINO device. Owned by its client; immutable after client_create
 * except the memory counters, which `mu` guards. */
struct nxhal_device {
  struct nxhal_client* client;
  nxhal_device_kind_t kind;
  char* ov_name;    /* "CPU", "GPU.0", "NPU" */
  char* full_name;  /* FULL_DEVICE_NAME */
  char* compat_key; /* what serialized executables must carry */
  uint64_t memory_bytes;
  int64_t compute_units;
  nxhal_attribute_t attributes[NPU_NUM_ATTRIBUTES];
  size_t num_attributes;
  nxhal_memory_t memory; /* what this device's buffers hold, and its limit */
};

/* One OpenVINO core and its devices. */
struct nxhal_client {
  /* The user's handle plus one per live DLPack export: an export's deleter
   * credits its device's accounting, and its consumer may hold it past
   * client_destroy, so the devices (and the core) live until the last goes. */
  atomic_int refs;
  ov_core_t* core; /* OpenVINO documents ov::Core as thread-safe */
  struct nxhal_device* devices;
  size_t num_devices;
  char* diagnostics;              /* owned; "" when nothing to say */
  char* cache_dir;                /* NULL: no model cache */
  char* ov_version;               /* OpenVINO build number */
  npu_compile_options_t defaults; /* compile options given at client level */
  /* OpenVINO's own CPU inference precision, read before the client pinned
   * its own on the core (cpu_pinned): a compile asking for "auto" restores
   * it. NULL when there is no CPU or OpenVINO did not say. */
  char* cpu_own_precision;
  int cpu_pinned;
  /* Cores whose CPU runs another precision than `core`'s, by precision code,
   * made on first need: the CPU plugin imports a blob at the importing
   * core's precision. Guarded by import_mu; freed with the client. */
  pthread_mutex_t import_mu;
  ov_core_t* import_cores[NPU_PRECISION_MAX + 1];
};

/* What a storage's bytes hold (npu_storage_t.state). */
#define NPU_STORAGE_READY 0   /* its data: nothing is still to write it */
#define NPU_STORAGE_PENDING 1 /* an async run has still to write it */
#define NPU_STORAGE_FAILED 2  /* the async run that was to write it failed */

/* Host memory shared by buffers, exported DLPack tensors and the async runs
 * that write it: freed, and released from its device's accounting, when the
 * last reference goes. */
typedef struct npu_storage {
  atomic_int refs;
  /* NPU_STORAGE_*: set PENDING by an async run before it starts and settled
   * by its completion (npu_storage_settle); readers of the bytes wait while
   * PENDING (npu_storage_wait). Atomic: read without a lock. */
  atomic_int state;
  void* data;
  uint64_t size;
  struct nxhal_device* accounted;        /* non-NULL: counted in this device */
  nxhal_dlpack_managed_tensor_t* dlpack; /* non-NULL: imported; its deleter frees */
  int owned;                             /* 1: `data` came from our allocator */
} npu_storage_t;

struct nxhal_buffer {
  struct nxhal_device* device;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t* dims;
  npu_storage_t* storage;
  int32_t is_zero_copy;
};

/* A compiled model and a pool of infer requests so that several threads can
 * run it at once: a request is used by one call at a time. */
struct nxhal_executable {
  struct nxhal_device* device;
  ov_compiled_model_t* compiled;
  char* target;  /* the OpenVINO device string it was compiled for */
  int precision; /* its precision option's code (npu_precision_code) */
  size_t num_inputs, num_outputs;
  nxhal_io_info_t* inputs; /* names and dims owned here */
  nxhal_io_info_t* outputs;
  ov_element_type_e* input_ov_types;
  ov_element_type_e* output_ov_types;
  int* output_static; /* 0: shape known only after running; 1: static,
                         run into our buffer; 2: static, copied out */
  pthread_mutex_t pool_mu;
  pthread_cond_t pool_cv;
  struct npu_request** idle; /* requests not in use */
  size_t num_idle, num_created, max_requests;
  struct npu_request** all; /* every created request, for destroy */
  char* run_settings;       /* owned; its run properties as a blob records
                               them (npu_run_settings_format) */
  char* imported;           /* an imported model's stream: OpenVINO keeps
                               pointing into it, so it lives as long as this */
  size_t imported_size;
};

/* --- util.c --- */
/* A status carrying OpenVINO's last error text for a failed call `what`.
 * Caller owns it. Thread-safe as far as OpenVINO's error text is. */
nxhal_status_t* npu_ov_error(nxhal_status_code_t code, ov_status_e st, const char* what);
/* OpenVINO's last error, trimmed of trailing blank lines; caller frees. */
char* npu_ov_last_error(void);
/* strdup that returns NULL for NULL. Caller frees. */
char* npu_strdup(const char* s);
/* Element type conversions; DYNAMIC / NXHAL_DTYPE_INVALID when unsupported. */
ov_element_type_e npu_dtype_to_ov(nxhal_dtype_t dtype);
nxhal_dtype_t npu_dtype_from_ov(ov_element_type_e type);
/* Human-readable "[1,3,-1]"; writes into buf (size n). */
void npu_format_dims(const int64_t* dims, int64_t rank, char* buf, size_t n);

/* --- options.c --- */
/* Validates compile options into *out (fields start as `defaults`).
 * Caller frees *out with npu_compile_options_free, on failure too. Thread-safe. */
/* Checks deserialize's options (the compile names and `authenticated`);
 * *out_authenticated is whether the caller vouched for the bytes. Thread-safe. */
nxhal_status_t* npu_deserialize_options_check(const nxhal_option_t* options, size_t num_options,
                                              int* out_authenticated);
nxhal_status_t* npu_compile_options_parse(const nxhal_option_t* options, size_t num_options,
                                          const npu_compile_options_t* defaults, int client_level,
                                          npu_compile_options_t* out);
void npu_compile_options_free(npu_compile_options_t* opts);
/* Appends the OpenVINO key/value pairs of opts' run properties (hint,
 * streams, pinning, threads: at most NPU_MAX_RUN_PROPERTIES pairs) to
 * kv[*n..]; values point into opts, static storage or `text`, which must
 * outlive kv. Thread-safe. */
void npu_run_properties(const npu_compile_options_t* opts, npu_run_text_t* text, const char** kv,
                        size_t* n);
/* opts' run properties as the text a serialized executable carries
 * ("THROUGHPUT;2;0;-1"); caller frees; NULL when out of memory. Thread-safe. */
char* npu_run_settings_format(const npu_compile_options_t* opts);
/* Reads that text back into the run fields of *opts (others untouched;
 * performance owned by opts). 0 when `text` is not such text. Thread-safe. */
int npu_run_settings_parse(const char* text, npu_compile_options_t* opts);
/* 1..NPU_PRECISION_MAX for "f32", "bf16", "f16", "auto"; 0 for NULL or any
 * other string. Thread-safe. */
int npu_precision_code(const char* precision);
/* The name of a code (NULL for 0 or out of range); static storage. */
const char* npu_precision_name(int code);

/* --- The table's entries ---
 * npu_<entry> for every entry of nx_hal.h (contracts there): plugin info in
 * plugin.c, clients and devices in client.c, memory and buffers in
 * buffer.c, executables in executable.c, executable_execute in execute.c
 * (thread-safe; async runs of executables with dynamically shaped outputs
 * complete before returning). Events are the helper library's. */
#define npu_event_is_ready nxhal_event_is_ready
#define npu_event_await nxhal_event_await
#define npu_event_on_ready nxhal_event_on_ready
#define npu_event_destroy nxhal_event_destroy
NXHAL_PLUGIN_DECLARE_ENTRIES(npu_)

/* --- client.c --- */
/* Takes a reference on `client` (the caller holds one). Thread-safe. */
void npu_client_retain(nxhal_client_t* client);
/* Drops one; the last frees the client. Thread-safe, from any thread. */
void npu_client_release(nxhal_client_t* client);
/* 1 when OpenVINO lists `name` (a bare "GPU" matches "GPU.0"). Thread-safe. */
int npu_client_has_device(const nxhal_client_t* client, const char* name);
/* The core to import a blob compiled with precision `code` for `target`
 * through: the client's own, or one whose CPU runs that precision (owned by
 * the client). Thread-safe. */
nxhal_status_t* npu_client_import_core(nxhal_client_t* client, int code, const char* target,
                                       ov_core_t** out);

/* A new core (caller frees) to import a blob for `target` with precision
 * `code` (0: the client core's) and the run properties kv[0..n) set on the
 * target, since OpenVINO's C import takes no properties. Thread-safe. */
nxhal_status_t* npu_client_settings_core(nxhal_client_t* client, int code, const char* target,
                                         const char* const* kv, size_t n, ov_core_t** out);

/* --- export_check.c --- */
/* NULL when `stream` (exe's export), imported through `core`, computes what
 * exe computes on a fixed input, or when that cannot be tried; UNIMPLEMENTED,
 * naming the output that differs, when it does not. Caller owns the status.
 * Thread-safe for one exe (it uses infer requests of its own). */
nxhal_status_t* npu_export_check(nxhal_executable_t* exe, ov_core_t* core, const char* stream,
                                 size_t size);

/* --- buffer.c --- */
/* A new buffer owning `size` bytes charged to `device` (RESOURCE_EXHAUSTED
 * past its limit). Caller owns *out. Thread-safe. */
nxhal_status_t* npu_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                 const int64_t* dims, uint64_t size, nxhal_buffer_t** out);

/* Takes a reference on `s` (the caller holds one). Thread-safe. */
void npu_storage_retain(npu_storage_t* s);
/* Drops one; the last frees the memory and credits its device. NULL is a
 * no-op. Thread-safe, from any thread. */
void npu_storage_release(npu_storage_t* s);
/* Returns once no async run is still to write `s`: NPU_STORAGE_READY, or
 * NPU_STORAGE_FAILED when the run that was to write it failed (its bytes are
 * not data). One atomic load when nothing is pending. Thread-safe. */
int npu_storage_wait(npu_storage_t* s);
/* Marks a PENDING `s` written (failed 0) or not (failed 1) and wakes its
 * waiters. Called once per pending mark by the run that made it. Thread-safe. */
void npu_storage_settle(npu_storage_t* s, int failed);

/* --- execute.c --- */
/* Frees every infer request of the pool. Caller guarantees none is in use. */
void npu_request_pool_destroy(nxhal_executable_t* executable);

#endif /* NX_HAL_NPU_INTERNAL_H_ */
