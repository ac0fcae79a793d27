/*
 * nx_hal.h -- the nx_hal plugin ABI, version 1.1.
 *
 * A plugin is a shared library that exports one function, nxhal_query().
 * The host passes the highest ABI version it speaks; the plugin answers with
 * its function table (nxhal_api_t) for a version both speak, or a status that
 * says why not.
 *
 * Rules every struct and function here follows:
 *  - Every struct that crosses the boundary starts with `size_t struct_size`,
 *    set by whoever fills the struct in: the caller for inputs, and for
 *    outputs the caller sets it to the size it allocated, so the callee never
 *    writes past it. Fields are only ever appended; a reader checks
 *    NXHAL_STRUCT_HAS() before touching a field newer than 1.0.
 *  - nxhal_api_t only grows at its end. Every entry is non-NULL: an operation
 *    a plugin lacks returns NXHAL_UNIMPLEMENTED through its entry.
 *  - A status is an opaque object; NULL means success. The caller owns every
 *    non-NULL status it receives and frees it with api->status_free.
 *  - No function aborts the process on bad input; it returns
 *    NXHAL_INVALID_ARGUMENT (NULL handles included).
 *  - Strings are NUL-terminated UTF-8.
 *
 * Only standard C headers are used, so this compiles as C99 and as C++.
 */
#ifndef NX_HAL_NX_HAL_H_
#define NX_HAL_NX_HAL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NXHAL_ABI_VERSION_MAJOR 1
#define NXHAL_ABI_VERSION_MINOR 1

/* The one symbol a plugin exports. */
#define NXHAL_QUERY_SYMBOL "nxhal_query"

#if defined(_WIN32)
#define NXHAL_EXPORT __declspec(dllexport)
#else
#define NXHAL_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct that reports `struct_size` holds `field` entirely. */
#define NXHAL_STRUCT_HAS(ptr, type, field)                                    \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* The size of a struct up to and including `last_field`: the size of its
 * first published version when `last_field` is that version's last field. */
#define NXHAL_STRUCT_SIZE(type, last_field)                                   \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum nxhal_status_code {
  NXHAL_OK = 0,
  NXHAL_INVALID_ARGUMENT = 1,
  NXHAL_NOT_FOUND = 2,
  NXHAL_UNIMPLEMENTED = 3,
  NXHAL_UNAVAILABLE = 4,
  NXHAL_RESOURCE_EXHAUSTED = 5,
  NXHAL_FAILED_PRECONDITION = 6,
  NXHAL_DEADLINE_EXCEEDED = 7,
  NXHAL_INTERNAL = 8,
  NXHAL_ABI_MISMATCH = 9,
  NXHAL_CANCELLED = 10
} nxhal_status_code_t;

/* Opaque. Created by a plugin (or the loader), owned by whoever receives it. */
typedef struct nxhal_status nxhal_status_t;

/* ------------------------------------------------------------------------ */
/* Handles. All opaque; lifetimes are stated on the functions below.        */
/* ------------------------------------------------------------------------ */

typedef struct nxhal_client nxhal_client_t;         /* one plugin instance */
typedef struct nxhal_device nxhal_device_t;         /* owned by its client */
typedef struct nxhal_buffer nxhal_buffer_t;         /* owned by the caller */
typedef struct nxhal_executable nxhal_executable_t; /* owned by the caller */
typedef struct nxhal_event nxhal_event_t;           /* owned by the caller */

/* ------------------------------------------------------------------------ */
/* Typed values: options in, attributes out                                 */
/* ------------------------------------------------------------------------ */

typedef enum nxhal_value_type {
  NXHAL_VALUE_INT64 = 0,
  NXHAL_VALUE_DOUBLE = 1,
  NXHAL_VALUE_BOOL = 2,
  NXHAL_VALUE_STRING = 3,
  NXHAL_VALUE_INT64_LIST = 4
} nxhal_value_type_t;

/* A named typed value. Only the field that `type` selects is read.
 * Arrays of these share one struct_size, which is also the array's stride.
 * Strings and lists are borrowed: valid for the duration of the call that
 * receives them (options) or for the lifetime of the object that returned
 * them (attributes). */
typedef struct nxhal_named_value {
  size_t struct_size;
  const char* name;
  nxhal_value_type_t type;
  int64_t int64_value;
  double double_value;
  int32_t bool_value; /* 0 or 1 */
  const char* string_value;
  const int64_t* int64_list;
  size_t int64_list_size;
} nxhal_named_value_t;

typedef nxhal_named_value_t nxhal_option_t;
typedef nxhal_named_value_t nxhal_attribute_t;

#define NXHAL_NAMED_VALUE_STRUCT_SIZE \
  NXHAL_STRUCT_SIZE(nxhal_named_value_t, int64_list_size)

/* ------------------------------------------------------------------------ */
/* Element types and tensor descriptions                                    */
/* ------------------------------------------------------------------------ */

typedef enum nxhal_dtype {
  NXHAL_DTYPE_INVALID = 0,
  NXHAL_DTYPE_F16 = 1,
  NXHAL_DTYPE_BF16 = 2,
  NXHAL_DTYPE_F32 = 3,
  NXHAL_DTYPE_F64 = 4,
  NXHAL_DTYPE_I8 = 5,
  NXHAL_DTYPE_I16 = 6,
  NXHAL_DTYPE_I32 = 7,
  NXHAL_DTYPE_I64 = 8,
  NXHAL_DTYPE_U8 = 9,
  NXHAL_DTYPE_BOOL = 10,
  NXHAL_DTYPE_U16 = 11,
  NXHAL_DTYPE_U32 = 12,
  NXHAL_DTYPE_U64 = 13
} nxhal_dtype_t;

/* A dense, row-major tensor's element type and shape. `dims` is borrowed for
 * the duration of the call (inputs) or owned by the object that returned it
 * (outputs). A dimension of -1 means dynamic; `rank` of -1 means unknown. */
typedef struct nxhal_tensor_desc {
  size_t struct_size;
  nxhal_dtype_t dtype;
  int64_t rank;
  const int64_t* dims;
} nxhal_tensor_desc_t;

#define NXHAL_TENSOR_DESC_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_tensor_desc_t, dims)

/* ------------------------------------------------------------------------ */
/* DLPack: a layout compatible with DLPack 1.x DLManagedTensorVersioned.    */
/* Declared here so the ABI needs no other header.                          */
/* ------------------------------------------------------------------------ */

#define NXHAL_DLPACK_MAJOR_VERSION 1
#define NXHAL_DLPACK_MINOR_VERSION 0
#define NXHAL_DLPACK_DEVICE_CPU 1     /* kDLCPU */
#define NXHAL_DLPACK_CODE_INT 0       /* kDLInt */
#define NXHAL_DLPACK_CODE_UINT 1      /* kDLUInt */
#define NXHAL_DLPACK_CODE_FLOAT 2     /* kDLFloat */
#define NXHAL_DLPACK_CODE_BFLOAT 4    /* kDLBfloat */
#define NXHAL_DLPACK_CODE_BOOL 6      /* kDLBool */
#define NXHAL_DLPACK_FLAG_READ_ONLY 1 /* DLPACK_FLAG_BITMASK_READ_ONLY */

typedef struct nxhal_dlpack_version {
  uint32_t major;
  uint32_t minor;
} nxhal_dlpack_version_t;

typedef struct nxhal_dlpack_device {
  int32_t device_type;
  int32_t device_id;
} nxhal_dlpack_device_t;

typedef struct nxhal_dlpack_dtype {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} nxhal_dlpack_dtype_t;

typedef struct nxhal_dlpack_tensor {
  void* data;
  nxhal_dlpack_device_t device;
  int32_t ndim;
  nxhal_dlpack_dtype_t dtype;
  int64_t* shape;
  int64_t* strides; /* NULL: compact row-major */
  uint64_t byte_offset;
} nxhal_dlpack_tensor_t;

typedef struct nxhal_dlpack_managed_tensor {
  nxhal_dlpack_version_t version;
  void* manager_ctx;
  /* Frees the tensor; called once by its final owner. May be NULL. */
  void (*deleter)(struct nxhal_dlpack_managed_tensor* self);
  uint64_t flags;
  nxhal_dlpack_tensor_t dl_tensor;
} nxhal_dlpack_managed_tensor_t;

/* ------------------------------------------------------------------------ */
/* Plugins and devices                                                      */
/* ------------------------------------------------------------------------ */

/* Strings are static in the plugin: valid while the library stays loaded. */
typedef struct nxhal_plugin_info {
  size_t struct_size;
  const char* name;           /* short name: "npu", "tpu", "graphcore" */
  const char* vendor;
  const char* plugin_version;
  const char* sdk_version;    /* the vendor SDK it drives; "" if unknown */
  uint32_t abi_major;
  uint32_t abi_minor;
} nxhal_plugin_info_t;

#define NXHAL_PLUGIN_INFO_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_plugin_info_t, abi_minor)

typedef enum nxhal_device_kind {
  NXHAL_DEVICE_OTHER = 0,
  NXHAL_DEVICE_CPU = 1,
  NXHAL_DEVICE_GPU = 2,
  NXHAL_DEVICE_TPU = 3,
  NXHAL_DEVICE_NPU = 4,
  NXHAL_DEVICE_IPU = 5
} nxhal_device_kind_t;

/* Strings and arrays are owned by the device: valid for the client's life. */
typedef struct nxhal_device_info {
  size_t struct_size;
  nxhal_device_kind_t kind;
  const char* vendor;
  const char* name;
  uint64_t memory_bytes;          /* 0 if the SDK does not say */
  int64_t compute_units;          /* cores, SMs, tiles...; 0 if unknown */
  const char* const* formats;     /* program formats compile() accepts */
  size_t num_formats;
  const char* compat_key;         /* what a serialized executable must match */
} nxhal_device_info_t;

#define NXHAL_DEVICE_INFO_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_device_info_t, compat_key)

typedef struct nxhal_memory_stats {
  size_t struct_size;
  uint64_t bytes_in_use;
  uint64_t peak_bytes_in_use;
  uint64_t bytes_limit; /* 0: no limit set */
} nxhal_memory_stats_t;

#define NXHAL_MEMORY_STATS_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_memory_stats_t, bytes_limit)

/* ------------------------------------------------------------------------ */
/* Buffers                                                                  */
/* ------------------------------------------------------------------------ */

/* buffer_from_host flags. */
#define NXHAL_HOST_COPY 0u
/* Alias the host memory instead of copying where the device can address it.
 * The caller keeps the memory alive and unchanged until the buffer is
 * destroyed. A plugin that cannot alias copies and reports it (is_zero_copy). */
#define NXHAL_HOST_ZERO_COPY 1u

/* `dims` is owned by the buffer. */
typedef struct nxhal_buffer_info {
  size_t struct_size;
  nxhal_dtype_t dtype;
  int64_t rank;
  const int64_t* dims;
  uint64_t size_bytes;
  int32_t is_zero_copy; /* 1: aliases caller host memory */
  nxhal_device_t* device;
} nxhal_buffer_info_t;

#define NXHAL_BUFFER_INFO_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_buffer_info_t, device)

/* ------------------------------------------------------------------------ */
/* Executables                                                              */
/* ------------------------------------------------------------------------ */

/* A program: a format name ("onnx", "stablehlo", "openvino-ir", "popef")
 * and its bytes. Borrowed for the duration of the compile call. Formats made
 * of several files (openvino-ir) put the second in `data2`. */
typedef struct nxhal_program {
  size_t struct_size;
  const char* format;
  const void* data;
  size_t size;
  const void* data2;
  size_t size2;
} nxhal_program_t;

#define NXHAL_PROGRAM_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_program_t, size2)

typedef enum nxhal_io_kind {
  NXHAL_IO_INPUT = 0,
  NXHAL_IO_OUTPUT = 1
} nxhal_io_kind_t;

/* `name` and `desc.dims` are owned by the executable.
 *
 * Since 1.1: `device_index`, the client device index of the device this
 * input must be on (or this output is made on), for executables that span
 * several devices; -1 means the executable's own device. A caller sets it to
 * -1 before the call: a 1.0 plugin leaves it there. An executable compiled
 * with several replicas (the tpu plugin's num_replicas) lists every
 * replica's inputs, replica by replica (replica r's inputs are indices
 * r*k .. r*k+k-1, k per replica), and its outputs the same way. */
typedef struct nxhal_io_info {
  size_t struct_size;
  const char* name;
  nxhal_tensor_desc_t desc;
  int64_t device_index; /* since 1.1 */
} nxhal_io_info_t;

/* The 1.0 size; NXHAL_STRUCT_HAS(info, nxhal_io_info_t, device_index) says
 * whether a caller's struct has room for the 1.1 field. */
#define NXHAL_IO_INFO_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_io_info_t, desc)

/* Serialized bytes, owned by the caller: free with api->blob_free. */
typedef struct nxhal_blob {
  size_t struct_size;
  const void* data;
  size_t size;
} nxhal_blob_t;

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

/* Called once when the event completes, on any thread (immediately on the
 * registering thread if it already has). `status` is NULL on success; the
 * callback owns it and frees it with the api's status_free. */
typedef void (*nxhal_event_callback_t)(nxhal_status_t* status, void* user_data);

/* Await without a deadline. */
#define NXHAL_WAIT_FOREVER (-1)

/* ------------------------------------------------------------------------ */
/* The function table                                                       */
/* ------------------------------------------------------------------------ */

typedef struct nxhal_api {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;

  /* --- Frozen prefix: identical in every ABI major version, so a host can
   *     read and free the status of a refused negotiation. --- */

  /* Frees a status from this plugin; NULL is a no-op. Thread-safe. */
  void (*status_free)(nxhal_status_t* status);
  /* The status's code; NXHAL_OK for NULL. Thread-safe. */
  nxhal_status_code_t (*status_code)(const nxhal_status_t* status);
  /* The message, owned by the status. "" for NULL. Thread-safe. */
  const char* (*status_message)(const nxhal_status_t* status);

  /* --- ABI 1.0 --- */

  /* Fills *out (caller sets out->struct_size). Thread-safe. */
  nxhal_status_t* (*plugin_info)(nxhal_plugin_info_t* out);

  /* Creates a client: probes the SDK and enumerates devices. Options are
   * borrowed; unknown names and wrong types are INVALID_ARGUMENT naming the
   * option. A missing SDK or no usable device is UNAVAILABLE with the reason.
   * Caller owns *out_client. Thread-safe. */
  nxhal_status_t* (*client_create)(const nxhal_option_t* options, size_t num_options,
                                   nxhal_client_t** out_client);
  /* Destroys the client after every buffer, executable and event made from it.
   * Not thread-safe with other calls on the same client. */
  void (*client_destroy)(nxhal_client_t* client);
  /* Free-form text on what the probe found and skipped (e.g. "NPU: not
   * available: <SDK reason>"). Owned by the client; "" if nothing. Thread-safe. */
  nxhal_status_t* (*client_diagnostics)(nxhal_client_t* client, const char** out_text);
  /* Number of devices. Thread-safe. */
  nxhal_status_t* (*client_device_count)(nxhal_client_t* client, size_t* out_count);
  /* Device `index` (< count, else INVALID_ARGUMENT). Owned by the client.
   * Thread-safe. */
  nxhal_status_t* (*client_device)(nxhal_client_t* client, size_t index,
                                   nxhal_device_t** out_device);

  /* Fills *out (caller sets out->struct_size). Thread-safe. */
  nxhal_status_t* (*device_info)(nxhal_device_t* device, nxhal_device_info_t* out);
  /* Number of free-form attributes. Thread-safe. */
  nxhal_status_t* (*device_attribute_count)(nxhal_device_t* device, size_t* out_count);
  /* Attribute `index`; strings/lists owned by the device. Thread-safe. */
  nxhal_status_t* (*device_attribute)(nxhal_device_t* device, size_t index,
                                      nxhal_attribute_t* out);
  /* Memory accounting of this device's buffers. Thread-safe. */
  nxhal_status_t* (*device_memory_stats)(nxhal_device_t* device, nxhal_memory_stats_t* out);
  /* Caps the bytes this device may hold; 0 removes the cap. Allocations past
   * it fail with RESOURCE_EXHAUSTED. Thread-safe. */
  nxhal_status_t* (*device_set_memory_limit)(nxhal_device_t* device, uint64_t limit_bytes);

  /* Allocates an uninitialised buffer. `desc` borrowed; caller owns
   * *out_buffer. Thread-safe. */
  nxhal_status_t* (*buffer_create)(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                   nxhal_buffer_t** out_buffer);
  /* Makes a buffer from `size_bytes` of host memory laid out as `desc`
   * (row-major); the size must match exactly. Copies unless `flags` has
   * NXHAL_HOST_ZERO_COPY (see there). The copy is complete on return.
   * Caller owns *out_buffer. Thread-safe. */
  nxhal_status_t* (*buffer_from_host)(nxhal_device_t* device, const nxhal_tensor_desc_t* desc,
                                      const void* data, size_t size_bytes, uint32_t flags,
                                      nxhal_buffer_t** out_buffer);
  /* Copies the buffer into `dst` (`size_bytes` must equal the buffer's).
   * With out_event NULL it returns when done; otherwise it may return at once
   * and *out_event (caller owns) completes when `dst` is filled; `dst` must
   * stay valid until then. Thread-safe. */
  nxhal_status_t* (*buffer_to_host)(nxhal_buffer_t* buffer, void* dst, size_t size_bytes,
                                    nxhal_event_t** out_event);
  /* Describes the buffer; dims owned by it. Thread-safe. */
  nxhal_status_t* (*buffer_info)(nxhal_buffer_t* buffer, nxhal_buffer_info_t* out);
  /* Frees the buffer; NULL is a no-op. Not thread-safe with its other uses. */
  void (*buffer_destroy)(nxhal_buffer_t* buffer);
  /* Exports the buffer as a DLPack tensor (caller owns, calls its deleter).
   * The tensor stays valid after the buffer is destroyed. UNIMPLEMENTED where
   * the device memory is not host-addressable. Thread-safe. */
  nxhal_status_t* (*buffer_to_dlpack)(nxhal_buffer_t* buffer,
                                      nxhal_dlpack_managed_tensor_t** out_tensor);
  /* Imports a DLPack tensor. On success the buffer owns `tensor` and calls its
   * deleter when done; on failure the caller still owns it. Caller owns
   * *out_buffer. Thread-safe. */
  nxhal_status_t* (*buffer_from_dlpack)(nxhal_device_t* device,
                                        nxhal_dlpack_managed_tensor_t* tensor,
                                        nxhal_buffer_t** out_buffer);

  /* Compiles `program` (borrowed) for `device`. Unknown formats are
   * INVALID_ARGUMENT listing the accepted ones; malformed programs are
   * INVALID_ARGUMENT with the SDK's message. Caller owns *out_executable.
   * Thread-safe. */
  nxhal_status_t* (*executable_compile)(nxhal_device_t* device, const nxhal_program_t* program,
                                        const nxhal_option_t* options, size_t num_options,
                                        nxhal_executable_t** out_executable);
  /* Frees the executable; NULL is a no-op. Not thread-safe with its uses. */
  void (*executable_destroy)(nxhal_executable_t* executable);
  /* Number of inputs or outputs. Thread-safe. */
  nxhal_status_t* (*executable_io_count)(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                         size_t* out_count);
  /* Input or output `index`; strings/dims owned by the executable. Thread-safe. */
  nxhal_status_t* (*executable_io_info)(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                        size_t index, nxhal_io_info_t* out);
  /* Runs the executable on the device it was compiled for. `inputs` are
   * borrowed and must match the inputs' count, dtypes and shapes (else
   * INVALID_ARGUMENT naming the input). `out_outputs` has room for
   * `num_outputs` (= the output count); the caller owns the buffers written
   * there. With out_event NULL it returns when done; otherwise outputs are
   * ready when *out_event (caller owns) completes, and inputs must live until
   * then. Thread-safe: several threads may execute one executable at once. */
  nxhal_status_t* (*executable_execute)(nxhal_executable_t* executable,
                                        nxhal_buffer_t* const* inputs, size_t num_inputs,
                                        nxhal_buffer_t** out_outputs, size_t num_outputs,
                                        nxhal_event_t** out_event);
  /* Serializes the executable with its device's compat_key embedded.
   * Caller owns *out_blob (free with blob_free). Thread-safe. */
  nxhal_status_t* (*executable_serialize)(nxhal_executable_t* executable,
                                          nxhal_blob_t** out_blob);
  /* Loads serialized bytes (borrowed). The embedded compat_key is checked
   * before anything is handed to the SDK: a mismatch is FAILED_PRECONDITION
   * naming both keys; bytes that are not ours are INVALID_ARGUMENT.
   * Caller owns *out_executable. Thread-safe. */
  nxhal_status_t* (*executable_deserialize)(nxhal_device_t* device, const void* data,
                                            size_t size, const nxhal_option_t* options,
                                            size_t num_options,
                                            nxhal_executable_t** out_executable);
  /* Frees a blob; NULL is a no-op. Thread-safe. */
  void (*blob_free)(nxhal_blob_t* blob);

  /* *out_ready = 1 once the event has completed (either way). Thread-safe. */
  nxhal_status_t* (*event_is_ready)(nxhal_event_t* event, int32_t* out_ready);
  /* Waits up to timeout_ns (NXHAL_WAIT_FOREVER: no limit). Returns NULL when
   * it completed successfully, DEADLINE_EXCEEDED if still pending, else a
   * copy of the event's error. Thread-safe. */
  nxhal_status_t* (*event_await)(nxhal_event_t* event, int64_t timeout_ns);
  /* Registers a callback (see nxhal_event_callback_t); one per event.
   * Thread-safe. */
  nxhal_status_t* (*event_on_ready)(nxhal_event_t* event, nxhal_event_callback_t callback,
                                    void* user_data);
  /* Frees the event. A pending event's work still completes and its callback
   * still runs. Not thread-safe with other uses of the event. */
  void (*event_destroy)(nxhal_event_t* event);
} nxhal_api_t;

/* The size of the frozen prefix, and of the ABI 1.0 table. */
#define NXHAL_API_PREFIX_SIZE NXHAL_STRUCT_SIZE(nxhal_api_t, status_message)
#define NXHAL_API_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_api_t, event_destroy)

/* ------------------------------------------------------------------------ */
/* Negotiation                                                              */
/* ------------------------------------------------------------------------ */

typedef struct nxhal_query_args {
  size_t struct_size;
  uint32_t host_abi_major; /* highest version the host speaks */
  uint32_t host_abi_minor;
} nxhal_query_args_t;

#define NXHAL_QUERY_ARGS_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_query_args_t, host_abi_minor)

/* The exported entry point. Sets *out_api to the plugin's static table
 * (never freed) whenever it can, refusal included, so the host can read and
 * free the status through the frozen prefix. Returns NULL when the table is
 * for a version the host speaks: same major, minor <= the host's or larger
 * (the host then uses only what it knows); otherwise ABI_MISMATCH naming both
 * versions. Thread-safe. */
typedef nxhal_status_t* (*nxhal_query_fn)(const nxhal_query_args_t* args,
                                          const nxhal_api_t** out_api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_NX_HAL_H_ */
