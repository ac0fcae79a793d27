/*
 * nx_hal.h -- the nx_hal plugin ABI, version 1.2.
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
#define NXHAL_ABI_VERSION_MINOR 2

/* The one symbol a plugin exports. */
#define NXHAL_QUERY_SYMBOL "nxhal_query"

#if defined(_WIN32)
#define NXHAL_EXPORT __declspec(dllexport)
#else
#define NXHAL_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct that reports `struct_size` holds `field` entirely. */
#define NXHAL_STRUCT_HAS(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* The size of a struct up to and including `last_field`: the size of its
 * first published version when `last_field` is that version's last field.
 * Each struct's first version size is named NXHAL_<STRUCT>_1_0_SIZE: what a
 * caller must at least set in struct_size, whatever version it was built
 * against. */
#define NXHAL_STRUCT_SIZE(type, last_field) \
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
  NXHAL_CANCELLED = 10,
  /* \since 1.2. The program cannot be read as its format (the SDK's parser
   * or deserializer refused it): a kind of INVALID_ARGUMENT, told apart so a
   * host can retry in another form (StableHLO written for an older parser)
   * without reading messages. A plugin returns it only to hosts that speak
   * ABI 1.2 or newer (nxhal_status_invalid_program decides); older hosts get
   * INVALID_ARGUMENT. */
  NXHAL_INVALID_PROGRAM = 11
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
 * them (attributes). \since 1.0 */
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

#define NXHAL_NAMED_VALUE_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_named_value_t, int64_list_size)

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
 * (outputs). A dimension of -1 means dynamic; `rank` of -1 means unknown.
 * \since 1.0 */
typedef struct nxhal_tensor_desc {
  size_t struct_size;
  nxhal_dtype_t dtype;
  int64_t rank;
  const int64_t* dims;
} nxhal_tensor_desc_t;

#define NXHAL_TENSOR_DESC_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_tensor_desc_t, dims)

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

/* Strings are static in the plugin: valid while the library stays loaded.
 * \since 1.0 */
typedef struct nxhal_plugin_info {
  size_t struct_size;
  const char* name; /* short name: "npu", "tpu", "graphcore" */
  const char* vendor;
  const char* plugin_version;
  const char* sdk_version; /* the vendor SDK it drives; "" if unknown */
  uint32_t abi_major;
  uint32_t abi_minor;
} nxhal_plugin_info_t;

#define NXHAL_PLUGIN_INFO_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_plugin_info_t, abi_minor)

typedef enum nxhal_device_kind {
  NXHAL_DEVICE_OTHER = 0,
  NXHAL_DEVICE_CPU = 1,
  NXHAL_DEVICE_GPU = 2,
  NXHAL_DEVICE_TPU = 3,
  NXHAL_DEVICE_NPU = 4,
  NXHAL_DEVICE_IPU = 5
} nxhal_device_kind_t;

/* Strings and arrays are owned by the device: valid for the client's life.
 * \since 1.0 */
typedef struct nxhal_device_info {
  size_t struct_size;
  nxhal_device_kind_t kind;
  const char* vendor;
  const char* name;
  uint64_t memory_bytes;      /* 0 if the SDK does not say */
  int64_t compute_units;      /* cores, SMs, tiles...; 0 if unknown */
  const char* const* formats; /* program formats compile() accepts */
  size_t num_formats;
  const char* compat_key; /* what a serialized executable must match */
} nxhal_device_info_t;

#define NXHAL_DEVICE_INFO_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_device_info_t, compat_key)

/* A device's memory accounting (device_memory_stats). \since 1.0 */
typedef struct nxhal_memory_stats {
  size_t struct_size;
  uint64_t bytes_in_use;
  uint64_t peak_bytes_in_use;
  uint64_t bytes_limit; /* 0: no limit set */
} nxhal_memory_stats_t;

#define NXHAL_MEMORY_STATS_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_memory_stats_t, bytes_limit)

/* ------------------------------------------------------------------------ */
/* Buffers                                                                  */
/* ------------------------------------------------------------------------ */

/* buffer_from_host flags. */
#define NXHAL_HOST_COPY 0u
/* Alias the host memory instead of copying where the device can address it.
 * The caller keeps the memory alive and unchanged until the buffer is
 * destroyed. A plugin that cannot alias copies and reports it (is_zero_copy). */
#define NXHAL_HOST_ZERO_COPY 1u

/* `dims` is owned by the buffer. \since 1.0 */
typedef struct nxhal_buffer_info {
  size_t struct_size;
  nxhal_dtype_t dtype;
  int64_t rank;
  const int64_t* dims;
  uint64_t size_bytes;
  int32_t is_zero_copy; /* 1: aliases caller host memory */
  nxhal_device_t* device;
} nxhal_buffer_info_t;

#define NXHAL_BUFFER_INFO_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_buffer_info_t, device)

/* ------------------------------------------------------------------------ */
/* Executables                                                              */
/* ------------------------------------------------------------------------ */

/* A program: a format name ("onnx", "stablehlo", "openvino-ir", "popef")
 * and its bytes. Borrowed for the duration of the compile call. A format
 * made of two files puts its main file in `data` and the second in
 * `extra_data` (openvino-ir: the XML, then the .bin weights); single-file
 * formats leave extra_data NULL and extra_size 0. \since 1.0 */
typedef struct nxhal_program {
  size_t struct_size;
  const char* format;
  const void* data;
  size_t size;
  const void* extra_data; /* the second file, or NULL */
  size_t extra_size;      /* its bytes; 0 when there is none */
} nxhal_program_t;

#define NXHAL_PROGRAM_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_program_t, extra_size)

typedef enum nxhal_io_kind { NXHAL_IO_INPUT = 0, NXHAL_IO_OUTPUT = 1 } nxhal_io_kind_t;

/* `name` and `desc.dims` are owned by the executable. \since 1.0
 *
 * \since 1.1 `device_index`, the client device index of the device this
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
  int64_t device_index; /* \since 1.1 */
} nxhal_io_info_t;

/* The 1.0 size (before device_index); NXHAL_STRUCT_HAS(info, nxhal_io_info_t,
 * device_index) says whether a caller's struct has room for the 1.1 field. */
#define NXHAL_IO_INFO_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_io_info_t, desc)

/* Serialized bytes, owned by the caller: free with api->blob_free.
 * \since 1.0 */
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

/* The table's entries, declared once. Each is
 *
 *   X(return_type, name, (parameters), since_major, since_minor, P)
 *
 * in table order; P is handed through untouched for X macros that need a
 * context (nx_hal_plugin.h passes a plugin's name prefix). nxhal_api_t below,
 * the plugin helpers NXHAL_PLUGIN_DECLARE_ENTRIES / NXHAL_PLUGIN_TABLE_ENTRIES
 * and the Python binding (nx_hal/_ffi_build.py, which reads nxhal_api_t
 * after the C preprocessor) are all made from them, so an entry is written
 * in one place. Keep the format strict: one X(...) per entry, its parameters
 * in one parenthesised list, each parameter named. A new minor version
 * appends its own list (e.g. NXHAL_API_ENTRIES_1_2) to NXHAL_API_ENTRIES;
 * nothing is ever inserted. */

/* One X(...) per entry, in the strict format above, by hand. */
/* clang-format off */
/* The frozen prefix: identical in every ABI major version, so a host can
 * read and free the status of a refused negotiation. */
#define NXHAL_API_PREFIX_ENTRIES(X, P)                                                             \
  /* Frees a status from this plugin; NULL is a no-op. Thread-safe.                                \
   * \since 1.0 */                                                                                 \
  X(void, status_free, (nxhal_status_t* status), 1, 0, P)                                          \
  /* The status's code; NXHAL_OK for NULL. Thread-safe. \since 1.0 */                              \
  X(nxhal_status_code_t, status_code, (const nxhal_status_t* status), 1, 0, P)                     \
  /* The message, owned by the status. "" for NULL. Thread-safe.                                   \
   * \since 1.0 */                                                                                 \
  X(const char*, status_message, (const nxhal_status_t* status), 1, 0, P)

/* ABI 1.0's entries, after the prefix. */
#define NXHAL_API_ENTRIES_1_0(X, P)                                                                \
  /* Fills *out (caller sets out->struct_size). Thread-safe. \since 1.0 */                         \
  X(nxhal_status_t*, plugin_info, (nxhal_plugin_info_t* out), 1, 0, P)                             \
                                                                                                   \
  /* Creates a client: probes the SDK and enumerates devices. Options are                          \
   * borrowed; unknown names and wrong types are INVALID_ARGUMENT naming the                       \
   * option. A missing SDK or no usable device is UNAVAILABLE with the reason.                     \
   * Caller owns *out_client. Thread-safe. \since 1.0 */                                           \
  X(nxhal_status_t*, client_create,                                                                \
    (const nxhal_option_t* options, size_t num_options, nxhal_client_t** out_client), 1, 0, P)     \
  /* Destroys the client after every buffer, executable and event made from it.                    \
   * Not thread-safe with other calls on the same client. \since 1.0 */                            \
  X(void, client_destroy, (nxhal_client_t* client), 1, 0, P)                                       \
  /* Free-form text on what the probe found and skipped (e.g. "NPU: not                            \
   * available: <SDK reason>"). Owned by the client; "" if nothing.                                \
   * Thread-safe. \since 1.0 */                                                                    \
  X(nxhal_status_t*, client_diagnostics, (nxhal_client_t* client, const char** out_text), 1, 0,    \
    P)                                                                                             \
  /* Number of devices. Thread-safe. \since 1.0 */                                                 \
  X(nxhal_status_t*, client_device_count, (nxhal_client_t* client, size_t* out_count), 1, 0, P)    \
  /* Device `index` (< count, else INVALID_ARGUMENT). Owned by the client.                         \
   * Thread-safe. \since 1.0 */                                                                    \
  X(nxhal_status_t*, client_device,                                                                \
    (nxhal_client_t* client, size_t index, nxhal_device_t** out_device), 1, 0, P)                  \
                                                                                                   \
  /* Fills *out (caller sets out->struct_size). Thread-safe. \since 1.0 */                         \
  X(nxhal_status_t*, device_info, (nxhal_device_t* device, nxhal_device_info_t* out), 1, 0, P)     \
  /* Number of free-form attributes. Thread-safe. \since 1.0 */                                    \
  X(nxhal_status_t*, device_attribute_count, (nxhal_device_t* device, size_t* out_count), 1, 0,    \
    P)                                                                                             \
  /* Attribute `index`; strings/lists owned by the device. Thread-safe.                            \
   * \since 1.0 */                                                                                 \
  X(nxhal_status_t*, device_attribute,                                                             \
    (nxhal_device_t* device, size_t index, nxhal_attribute_t* out), 1, 0, P)                       \
  /* Memory accounting of this device's buffers. Thread-safe. \since 1.0 */                        \
  X(nxhal_status_t*, device_memory_stats, (nxhal_device_t* device, nxhal_memory_stats_t* out),     \
    1, 0, P)                                                                                       \
  /* Caps the bytes this device may hold; 0 removes the cap. Allocations past                      \
   * it fail with RESOURCE_EXHAUSTED. Thread-safe. \since 1.0 */                                   \
  X(nxhal_status_t*, device_set_memory_limit, (nxhal_device_t* device, uint64_t limit_bytes), 1,   \
    0, P)                                                                                          \
                                                                                                   \
  /* Allocates an uninitialised buffer. `desc` borrowed; caller owns                               \
   * *out_buffer. Thread-safe. \since 1.0 */                                                       \
  X(nxhal_status_t*, buffer_create,                                                                \
    (nxhal_device_t* device, const nxhal_tensor_desc_t* desc, nxhal_buffer_t** out_buffer), 1, 0,  \
    P)                                                                                             \
  /* Makes a buffer from `size_bytes` of host memory laid out as `desc`                            \
   * (row-major); the size must match exactly. Copies unless `flags` has                           \
   * NXHAL_HOST_ZERO_COPY (see there). The copy is complete on return.                             \
   * Caller owns *out_buffer. Thread-safe. \since 1.0 */                                           \
  X(nxhal_status_t*, buffer_from_host,                                                             \
    (nxhal_device_t* device, const nxhal_tensor_desc_t* desc, const void* data,                    \
     size_t size_bytes, uint32_t flags, nxhal_buffer_t** out_buffer),                              \
    1, 0, P)                                                                                       \
  /* Copies the buffer into `dst` (`size_bytes` must equal the buffer's).                          \
   * With out_event NULL it returns when done; otherwise it may return at once                     \
   * and *out_event (caller owns) completes when `dst` is filled; `dst` must                       \
   * stay valid until then. Thread-safe. \since 1.0 */                                             \
  X(nxhal_status_t*, buffer_to_host,                                                               \
    (nxhal_buffer_t* buffer, void* dst, size_t size_bytes, nxhal_event_t** out_event), 1, 0, P)    \
  /* Describes the buffer; dims owned by it. Thread-safe. \since 1.0 */                            \
  X(nxhal_status_t*, buffer_info, (nxhal_buffer_t* buffer, nxhal_buffer_info_t* out), 1, 0, P)     \
  /* Frees the buffer; NULL is a no-op. Not thread-safe with its other uses.                       \
   * \since 1.0 */                                                                                 \
  X(void, buffer_destroy, (nxhal_buffer_t* buffer), 1, 0, P)                                       \
  /* Exports the buffer as a DLPack tensor (caller owns, calls its deleter).                       \
   * The tensor stays valid after the buffer is destroyed. UNIMPLEMENTED where                     \
   * the device memory is not host-addressable. Thread-safe. \since 1.0 */                         \
  X(nxhal_status_t*, buffer_to_dlpack,                                                             \
    (nxhal_buffer_t* buffer, nxhal_dlpack_managed_tensor_t * *out_tensor), 1, 0, P)                \
  /* Imports a DLPack tensor. On success the buffer owns `tensor` and calls its                    \
   * deleter when done; on failure the caller still owns it. Caller owns                           \
   * *out_buffer. Thread-safe. \since 1.0 */                                                       \
  X(nxhal_status_t*, buffer_from_dlpack,                                                           \
    (nxhal_device_t* device, nxhal_dlpack_managed_tensor_t* tensor,                                \
     nxhal_buffer_t * *out_buffer),                                                                \
    1, 0, P)                                                                                       \
                                                                                                   \
  /* Compiles `program` (borrowed) for `device`. Unknown formats are                               \
   * INVALID_ARGUMENT listing the accepted ones; malformed programs are                            \
   * INVALID_ARGUMENT with the SDK's message. Caller owns *out_executable.                         \
   * Thread-safe. \since 1.0 */                                                                    \
  X(nxhal_status_t*, executable_compile,                                                           \
    (nxhal_device_t* device, const nxhal_program_t* program, const nxhal_option_t* options,        \
     size_t num_options, nxhal_executable_t** out_executable),                                     \
    1, 0, P)                                                                                       \
  /* Frees the executable; NULL is a no-op. Not thread-safe with its uses.                         \
   * \since 1.0 */                                                                                 \
  X(void, executable_destroy, (nxhal_executable_t* executable), 1, 0, P)                           \
  /* Number of inputs or outputs. Thread-safe. \since 1.0 */                                       \
  X(nxhal_status_t*, executable_io_count,                                                          \
    (nxhal_executable_t* executable, nxhal_io_kind_t kind, size_t* out_count), 1, 0, P)            \
  /* Input or output `index`; strings/dims owned by the executable.                                \
   * Thread-safe. \since 1.0 */                                                                    \
  X(nxhal_status_t*, executable_io_info,                                                           \
    (nxhal_executable_t* executable, nxhal_io_kind_t kind, size_t index, nxhal_io_info_t* out),    \
    1, 0, P)                                                                                       \
  /* Runs the executable on the device it was compiled for. `inputs` are                           \
   * borrowed and must match the inputs' count, dtypes and shapes (else                            \
   * INVALID_ARGUMENT naming the input). `out_outputs` has room for                                \
   * `num_outputs` (= the output count); the caller owns the buffers written                       \
   * there. With out_event NULL it returns when done; otherwise outputs are                        \
   * ready when *out_event (caller owns) completes, and inputs must live until                     \
   * then. Thread-safe: several threads may execute one executable at once.                        \
   * \since 1.0 */                                                                                 \
  X(nxhal_status_t*, executable_execute,                                                           \
    (nxhal_executable_t* executable, nxhal_buffer_t* const* inputs, size_t num_inputs,             \
     nxhal_buffer_t** out_outputs, size_t num_outputs, nxhal_event_t** out_event),                 \
    1, 0, P)                                                                                       \
  /* Serializes the executable with its device's compat_key embedded.                              \
   * Caller owns *out_blob (free with blob_free). Thread-safe. \since 1.0 */                       \
  X(nxhal_status_t*, executable_serialize,                                                         \
    (nxhal_executable_t* executable, nxhal_blob_t * *out_blob), 1, 0, P)                           \
  /* Loads serialized bytes (borrowed). The embedded compat_key is checked                         \
   * before anything is handed to the SDK: a mismatch is FAILED_PRECONDITION                       \
   * naming both keys; bytes that are not ours are INVALID_ARGUMENT. A device                      \
   * whose attributes hold `authenticated_load` (bool, 1) takes the option                         \
   * `authenticated` (bool): 1 says the caller has authenticated the bytes as                      \
   * this plugin's own serialize output (nx_hal's store and sealed blobs: an                       \
   * HMAC under the user's key), so the plugin may skip its digest of them;                        \
   * give it for no other bytes. Hosts pass it only to devices reporting the                       \
   * attribute. Caller owns *out_executable. Thread-safe. \since 1.0 */                            \
  X(nxhal_status_t*, executable_deserialize,                                                       \
    (nxhal_device_t* device, const void* data, size_t size, const nxhal_option_t* options,         \
     size_t num_options, nxhal_executable_t** out_executable),                                     \
    1, 0, P)                                                                                       \
  /* Frees a blob; NULL is a no-op. Thread-safe. \since 1.0 */                                     \
  X(void, blob_free, (nxhal_blob_t* blob), 1, 0, P)                                                \
                                                                                                   \
  /* *out_ready = 1 once the event has completed (either way). Thread-safe.                        \
   * \since 1.0 */                                                                                 \
  X(nxhal_status_t*, event_is_ready, (nxhal_event_t* event, int32_t* out_ready), 1, 0, P)          \
  /* Waits up to timeout_ns (NXHAL_WAIT_FOREVER: no limit). Returns NULL when                      \
   * it completed successfully, DEADLINE_EXCEEDED if still pending, else a                         \
   * copy of the event's error. Thread-safe. \since 1.0 */                                         \
  X(nxhal_status_t*, event_await, (nxhal_event_t* event, int64_t timeout_ns), 1, 0, P)             \
  /* Registers a callback (see nxhal_event_callback_t); one per event.                             \
   * Thread-safe. \since 1.0 */                                                                    \
  X(nxhal_status_t*, event_on_ready,                                                               \
    (nxhal_event_t* event, nxhal_event_callback_t callback, void* user_data), 1, 0, P)             \
  /* Frees the event. A pending event's work still completes and its callback                      \
   * still runs. Not thread-safe with other uses of the event. \since 1.0 */                       \
  X(void, event_destroy, (nxhal_event_t* event), 1, 0, P)
/* clang-format on */

/* Every entry after the prefix, in table order: each version's list, oldest
 * first. (1.1 added struct fields, no entries.) */
#define NXHAL_API_ENTRIES(X, P) NXHAL_API_ENTRIES_1_0(X, P)

/* One nxhal_api_t field: a pointer to the entry's function. */
#define NXHAL_API_FIELD(ret, name, params, since_major, since_minor, P) ret(*name) params;

/* The function table a plugin hands out (see nxhal_query_fn). The plugin
 * owns it (static, never freed); it only grows at its end. \since 1.0 */
typedef struct nxhal_api {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  NXHAL_API_PREFIX_ENTRIES(NXHAL_API_FIELD, ~)
  NXHAL_API_ENTRIES(NXHAL_API_FIELD, ~)
} nxhal_api_t;

/* The size of the frozen prefix, and of the ABI 1.0 table. \since 1.0 */
#define NXHAL_API_PREFIX_SIZE NXHAL_STRUCT_SIZE(nxhal_api_t, status_message)
#define NXHAL_API_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_api_t, event_destroy)

/* Build-time checks of the frozen prefix and of the published 1.0 table:
 * a field moved, added, dropped or resized fails every compile that
 * includes this header. C11 and C++11 have static assertions; C99 gets a
 * typedef of an array whose size is negative when the condition fails. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define NXHAL_STATIC_ASSERT(cond, name) static_assert(cond, #name)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define NXHAL_STATIC_ASSERT(cond, name) _Static_assert(cond, #name)
#else
#define NXHAL_STATIC_ASSERT(cond, name) typedef char nxhal_static_assert_##name[(cond) ? 1 : -1]
#endif

/* NXHAL_BINDINGS: defined only by generators of bindings that read this
 * header's declarations after the C preprocessor (nx_hal/_ffi_build.py);
 * their C parser takes declarations, not assertions. Never define it in a
 * program: these checks are part of every C and C++ build. */
#ifndef NXHAL_BINDINGS
NXHAL_STATIC_ASSERT(offsetof(nxhal_api_t, struct_size) == 0, api_struct_size_offset);
NXHAL_STATIC_ASSERT(offsetof(nxhal_api_t, abi_major) == sizeof(size_t), api_abi_major_offset);
NXHAL_STATIC_ASSERT(offsetof(nxhal_api_t, abi_minor) == sizeof(size_t) + 4, api_abi_minor_offset);
NXHAL_STATIC_ASSERT(offsetof(nxhal_api_t, status_free) == sizeof(size_t) + 8,
                    api_status_free_offset);
NXHAL_STATIC_ASSERT(offsetof(nxhal_api_t, status_code) == sizeof(size_t) + 8 + sizeof(void*),
                    api_status_code_offset);
NXHAL_STATIC_ASSERT(offsetof(nxhal_api_t, status_message) == sizeof(size_t) + 8 + 2 * sizeof(void*),
                    api_status_message_offset);
NXHAL_STATIC_ASSERT(NXHAL_API_PREFIX_SIZE == sizeof(size_t) + 8 + 3 * sizeof(void*),
                    api_prefix_size);
/* ABI 1.0: 30 entries after the prefix. */
NXHAL_STATIC_ASSERT(NXHAL_API_1_0_SIZE == NXHAL_API_PREFIX_SIZE + 30 * sizeof(void*), api_1_0_size);
#endif /* NXHAL_BINDINGS */

/* ------------------------------------------------------------------------ */
/* Negotiation                                                              */
/* ------------------------------------------------------------------------ */

/* What the host passes to nxhal_query. \since 1.0 */
typedef struct nxhal_query_args {
  size_t struct_size;
  uint32_t host_abi_major; /* highest version the host speaks */
  uint32_t host_abi_minor;
} nxhal_query_args_t;

#define NXHAL_QUERY_ARGS_1_0_SIZE NXHAL_STRUCT_SIZE(nxhal_query_args_t, host_abi_minor)

/* The exported entry point. Sets *out_api to the plugin's static table
 * (never freed) whenever it can, refusal included, so the host can read and
 * free the status through the frozen prefix. Returns NULL when the table is
 * for a version the host speaks: same major, minor <= the host's or larger
 * (the host then uses only what it knows); otherwise ABI_MISMATCH naming both
 * versions. Thread-safe. \since 1.0 */
typedef nxhal_status_t* (*nxhal_query_fn)(const nxhal_query_args_t* args,
                                          const nxhal_api_t** out_api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_NX_HAL_H_ */
