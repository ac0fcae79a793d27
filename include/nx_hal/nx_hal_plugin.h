/*
 * nx_hal_plugin.h -- helpers for plugin authors (the static library
 * libnxhal_plugin_util, built from cabi/). Statuses, typed option checks,
 * dtype tables, struct-size checks, a ready-made event, negotiation, and
 * macros that declare and fill a plugin's function table from the one list
 * of entries in nx_hal.h.
 * Link it statically with hidden visibility: every plugin owns its copy, so
 * statuses are always freed by the library that made them.
 * Only standard C headers are included (no <pthread.h>).
 */
#ifndef NX_HAL_NX_HAL_PLUGIN_H_
#define NX_HAL_NX_HAL_PLUGIN_H_

#include <stdarg.h>

#include "nx_hal/nx_hal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- Statuses ----------------------------------------------------------- */

/* A new status with a printf-style message; NULL when code is NXHAL_OK.
 * Never fails: out of memory gives a static RESOURCE_EXHAUSTED status.
 * Caller owns the result. Thread-safe. */
nxhal_status_t* nxhal_status_make(nxhal_status_code_t code, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
nxhal_status_t* nxhal_status_makev(nxhal_status_code_t code, const char* format, va_list args);
/* The three functions of the table's frozen prefix. Thread-safe. */
void nxhal_status_free(nxhal_status_t* status);
nxhal_status_code_t nxhal_status_code(const nxhal_status_t* status);
const char* nxhal_status_message(const nxhal_status_t* status);
/* A program the SDK cannot parse: INVALID_PROGRAM for hosts that negotiated
 * ABI 1.2 or newer through nxhal_negotiate, INVALID_ARGUMENT for older ones
 * (they do not know the code). Caller owns the result. Thread-safe. */
nxhal_status_t* nxhal_status_invalid_program(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* The code itself, for plugins that build their statuses otherwise:
 * NXHAL_INVALID_PROGRAM or NXHAL_INVALID_ARGUMENT, by the same rule.
 * Thread-safe. */
nxhal_status_code_t nxhal_invalid_program_code(void);
/* A copy of `status` (NULL for NULL). Caller owns it. Thread-safe. */
nxhal_status_t* nxhal_status_copy(const nxhal_status_t* status);

/* --- The function table ------------------------------------------------- */

/* A plugin names its implementation of entry `name` <prefix><name>
 * (tpu_client_create, tpu_buffer_info, ...) and lets the list in nx_hal.h
 * write the rest, so no prototype or table slot can drift from the ABI:
 *
 *   // internal.h: the helper library's event entries under the plugin's
 *   // names (any entry may be aliased to a shared function this way)
 *   #define tpu_event_is_ready nxhal_event_is_ready
 *   #define tpu_event_await nxhal_event_await
 *   #define tpu_event_on_ready nxhal_event_on_ready
 *   #define tpu_event_destroy nxhal_event_destroy
 *   NXHAL_PLUGIN_DECLARE_ENTRIES(tpu_)
 *
 *   // plugin.c
 *   static const nxhal_api_t tpu_api = {
 *       NXHAL_API_1_0_SIZE, NXHAL_ABI_VERSION_MAJOR, NXHAL_ABI_VERSION_MINOR,
 *       NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_PLUGIN_TABLE_ENTRIES(tpu_)};
 *
 * An alias works because a name pasted from the prefix is expanded again:
 * tpu_event_await becomes nxhal_event_await in both the prototype (a
 * redeclaration of the helper's, with the same type) and the table. */

/* One prototype per entry after the frozen prefix: a missing or mistyped
 * definition is a compile or link error. The prototypes are extern, so the
 * definitions cannot be static (hidden visibility keeps them private). */
#define NXHAL_PLUGIN_DECLARE_ENTRIES(prefix) NXHAL_API_ENTRIES(NXHAL_PLUGIN_DECLARE_ENTRY_, prefix)
#define NXHAL_PLUGIN_DECLARE_ENTRY_(ret, name, params, since_major, since_minor, prefix) \
  ret prefix##name params;

/* The table's initializers for every entry after the frozen prefix, in
 * table order, each followed by a comma. */
#define NXHAL_PLUGIN_TABLE_ENTRIES(prefix) NXHAL_API_ENTRIES(NXHAL_PLUGIN_TABLE_ENTRY_, prefix)
#define NXHAL_PLUGIN_TABLE_ENTRY_(ret, name, params, since_major, since_minor, prefix) prefix##name,

/* The frozen prefix's initializers: this library's status functions, the
 * ones that free what nxhal_status_make made. Each followed by a comma. */
#define NXHAL_PLUGIN_PREFIX_ENTRIES NXHAL_API_PREFIX_ENTRIES(NXHAL_PLUGIN_TABLE_ENTRY_, nxhal_)

/* --- Struct sizes ------------------------------------------------------- */

/* INVALID_ARGUMENT naming `what` when `ptr` is NULL or its struct_size
 * (its first field) is below `min_size`. Thread-safe. */
nxhal_status_t* nxhal_check_struct(const void* ptr, size_t min_size, const char* what);

/* Fills a caller's output struct from `ours` (a complete struct of the same
 * type, `our_size` bytes, as this plugin was built): copies the first
 * min(out->struct_size, our_size) bytes and keeps the caller's struct_size,
 * so a smaller (older) caller's struct is never written past and a larger
 * (newer) one keeps its fields beyond ours as the caller set them. Check
 * `out` with nxhal_check_struct first; a NULL `out` is a no-op. Thread-safe
 * as far as `out` is the caller's alone. */
void nxhal_struct_fill(void* out, const void* ours, size_t our_size);

/* --- Argument checks ---------------------------------------------------- */

/* Returns INVALID_ARGUMENT "<function>: '<arg>' is NULL" from the enclosing
 * function (which returns nxhal_status_t*) when `arg` is NULL: the check
 * every entry makes on its handles and out-pointers, with one message. */
#define NXHAL_REQUIRE_ARG(arg)                                                              \
  do {                                                                                      \
    if ((arg) == NULL) {                                                                    \
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s: '%s' is NULL", __func__, #arg); \
    }                                                                                       \
  } while (0)

/* --- Typed options ------------------------------------------------------ */

/* One option a plugin knows. Specs are static tables, read-only after start. */
typedef struct nxhal_option_spec {
  const char* name;
  nxhal_value_type_t type;
  /* Inclusive bounds on an INT64 or DOUBLE value, checked when has_range is
   * 1: the range lives beside the name and type, so every plugin states its
   * limits in one table. NXHAL_OPTION_RANGE(lo, hi) fills the three fields. */
  int has_range;
  double min;
  double max;
} nxhal_option_spec_t;

#define NXHAL_OPTION_RANGE(lo, hi) 1, (double)(lo), (double)(hi)

/* Element `index` of an options array, whose stride is options[0].struct_size. */
const nxhal_option_t* nxhal_option_at(const nxhal_option_t* options, size_t index);

/* Checks every option against `specs`: an unknown name, a wrong type, a value
 * outside the spec's range, a NULL name or string, a struct_size below 1.0's, or a repeated name is
 * INVALID_ARGUMENT naming the option (and for unknown names, listing the
 * known ones). Thread-safe. */
nxhal_status_t* nxhal_options_check(const nxhal_option_t* options, size_t num_options,
                                    const nxhal_option_spec_t* specs, size_t num_specs);

/* The option named `name`, or NULL. Use after nxhal_options_check. */
const nxhal_option_t* nxhal_options_find(const nxhal_option_t* options, size_t num_options,
                                         const char* name);

/* --- Element types ------------------------------------------------------ */

/* Bytes per element; 0 for an unknown dtype. */
size_t nxhal_dtype_size(nxhal_dtype_t dtype);
/* "f32", "bf16", "bool", ...; NULL for an unknown dtype. */
const char* nxhal_dtype_name(nxhal_dtype_t dtype);
/* The dtype named `name`, or NXHAL_DTYPE_INVALID. */
nxhal_dtype_t nxhal_dtype_from_name(const char* name);
/* DLPack conversions; 0 / NXHAL_DTYPE_INVALID when there is no match. */
int nxhal_dtype_to_dlpack(nxhal_dtype_t dtype, nxhal_dlpack_dtype_t* out);
nxhal_dtype_t nxhal_dtype_from_dlpack(nxhal_dlpack_dtype_t dtype);

/* Checks a tensor description (struct size, dtype, rank 0..32, dims >= 0,
 * no overflow) and gives its byte size. `what` names it in the message. */
nxhal_status_t* nxhal_tensor_desc_check(const nxhal_tensor_desc_t* desc, const char* what,
                                        uint64_t* out_size_bytes);

/* --- Events ------------------------------------------------------------- */

/* A thread-safe event implementing the table's event_* entries. Made with
 * two references: the caller's (released by event_destroy) and the
 * producer's (released by nxhal_event_complete). */
nxhal_event_t* nxhal_event_new(void);
/* Completes the event with `status` (taken; NULL = success) and releases
 * the producer's reference. Runs the callback if one is registered. */
void nxhal_event_complete(nxhal_event_t* event, nxhal_status_t* status);
nxhal_status_t* nxhal_event_is_ready(nxhal_event_t* event, int32_t* out_ready);
nxhal_status_t* nxhal_event_await(nxhal_event_t* event, int64_t timeout_ns);
nxhal_status_t* nxhal_event_on_ready(nxhal_event_t* event, nxhal_event_callback_t callback,
                                     void* user_data);
void nxhal_event_destroy(nxhal_event_t* event);

/* For work already finished when the entry returns: with out_event NULL
 * (the caller asked to wait) returns NULL; otherwise sets *out_event to a
 * new event already completed successfully (caller owns it) and returns
 * NULL, or sets it to NULL and returns RESOURCE_EXHAUSTED when no event can
 * be made. Thread-safe. */
nxhal_status_t* nxhal_event_done(nxhal_event_t** out_event);
/* The same for finished work whose result is `status` (taken; NULL =
 * success): with out_event NULL returns `status`; otherwise *out_event
 * completes with it and NULL is returned (or RESOURCE_EXHAUSTED, `status`
 * freed, when no event can be made). Thread-safe. */
nxhal_status_t* nxhal_event_done_with(nxhal_event_t** out_event, nxhal_status_t* status);

/* --- Memory accounting --------------------------------------------------- */

/* Room for the helper library's mutex inside nxhal_memory_t, kept opaque so
 * this header needs no <pthread.h>: a pthread_mutex_t is 40 bytes on glibc
 * and musl x86-64, 48 on aarch64, 8-byte aligned; cabi/memory.c checks at
 * build time that the platform's fits. */
#define NXHAL_MEMORY_LOCK_SIZE 64

/* A device's bytes in use, peak and limit, behind a mutex: what
 * device_memory_stats reports and device_set_memory_limit caps. Embed one per
 * device; initialise with nxhal_memory_init, free with nxhal_memory_destroy.
 * The counters are read and written only through the functions below. */
typedef struct nxhal_memory {
  union {
    unsigned char bytes[NXHAL_MEMORY_LOCK_SIZE];
    uint64_t align_u64_; /* the alignment a pthread_mutex_t needs */
    void* align_ptr_;
  } lock;
  uint64_t in_use;
  uint64_t peak;
  uint64_t limit; /* 0: none */
} nxhal_memory_t;

void nxhal_memory_init(nxhal_memory_t* memory);
void nxhal_memory_destroy(nxhal_memory_t* memory);
/* Counts `bytes` more, or RESOURCE_EXHAUSTED naming `what`, the bytes, the
 * limit and what is in use when that would pass the limit. Thread-safe. */
nxhal_status_t* nxhal_memory_reserve(nxhal_memory_t* memory, uint64_t bytes, const char* what);
/* Counts `bytes` more whatever the limit: for memory already allocated that
 * could not be sized in advance (better counted past the limit than lost
 * from the statistics). Thread-safe. */
void nxhal_memory_charge(nxhal_memory_t* memory, uint64_t bytes);
/* Counts `bytes` less (never below zero). Thread-safe. */
void nxhal_memory_release(nxhal_memory_t* memory, uint64_t bytes);
/* Sets the limit; 0 removes it. Thread-safe. */
void nxhal_memory_set_limit(nxhal_memory_t* memory, uint64_t limit);
/* Fills the three counters of *out (its struct_size is the caller's). Thread-safe. */
void nxhal_memory_stats(nxhal_memory_t* memory, nxhal_memory_stats_t* out);

/* --- Negotiation -------------------------------------------------------- */

/* The body of a plugin's nxhal_query for a plugin speaking `api`'s version:
 * checks args, sets *out_api = api, and returns NULL or ABI_MISMATCH naming
 * both versions. */
nxhal_status_t* nxhal_negotiate(const nxhal_query_args_t* args, const nxhal_api_t* api,
                                const nxhal_api_t** out_api);

/* --- Digests ------------------------------------------------------------ */

/* SHA-256 (FIPS 180-4): what a serialized executable's header carries over
 * its payload, checked before the vendor deserializes a byte. */
#define NXHAL_DIGEST_SIZE 32

/* An incremental SHA-256. Caller owns it (plain struct, no release); one
 * thread at a time per context. */
typedef struct nxhal_sha256 {
  uint32_t state[8];
  uint64_t length;         /* bytes hashed so far */
  unsigned char block[64]; /* the partial block */
  size_t used;             /* bytes in `block` */
} nxhal_sha256_t;

void nxhal_sha256_init(nxhal_sha256_t* ctx);
void nxhal_sha256_update(nxhal_sha256_t* ctx, const void* data, size_t size);
/* Writes the digest; `ctx` must be initialised again before reuse. */
void nxhal_sha256_final(nxhal_sha256_t* ctx, uint8_t out[NXHAL_DIGEST_SIZE]);
/* SHA-256 of `size` bytes at `data` into `out`. Thread-safe. */
void nxhal_digest(const void* data, size_t size, uint8_t out[NXHAL_DIGEST_SIZE]);
/* 1 when equal, compared in constant time. Thread-safe. */
int nxhal_digest_equal(const uint8_t a[NXHAL_DIGEST_SIZE], const uint8_t b[NXHAL_DIGEST_SIZE]);

/* --- Checked arithmetic ------------------------------------------------- */

/* *out = a * b and 1, or 0 with *out untouched when the product passes
 * UINT64_MAX: sizes computed from caller-supplied shapes go through this.
 * Pure; thread-safe. */
static inline int nxhal_mul_u64(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return 0;
  *out = a * b;
  return 1;
}

/* *out = a + b and 1, or 0 with *out untouched when the sum passes
 * UINT64_MAX. Pure; thread-safe. */
static inline int nxhal_add_u64(uint64_t a, uint64_t b, uint64_t* out) {
  if (b > UINT64_MAX - a) return 0;
  *out = a + b;
  return 1;
}

/* --- DLPack import ------------------------------------------------------ */

/* What a plugin's buffer_from_dlpack can honour beyond compact row-major
 * tensors; pass 0 to accept only those. */
#define NXHAL_DLPACK_ACCEPT_STRIDED 1u          /* non-negative strides: transposes, zeros */
#define NXHAL_DLPACK_ACCEPT_NEGATIVE_STRIDES 2u /* with ACCEPT_STRIDED: strides below zero */
/* The highest ndim accepted, as for nxhal_tensor_desc_check's rank. */
#define NXHAL_DLPACK_MAX_NDIM 32

/* The facts a plugin needs from a DLPack tensor that passed
 * nxhal_dlpack_check. Points into the tensor: valid while the tensor is. */
typedef struct nxhal_dlpack_layout {
  nxhal_dtype_t dtype;
  int64_t rank;
  const int64_t* dims; /* the tensor's shape (rank entries) */
  const char* data;    /* data + byte_offset: element 0; NULL only when size_bytes is 0 */
  uint64_t size_bytes; /* elements x element size: the size of a compact copy */
  int compact;         /* 1: strides are NULL or compact row-major (or no elements) */
  /* Byte strides (stride x element size), filled only when !compact. */
  int64_t byte_strides[NXHAL_DLPACK_MAX_NDIM];
} nxhal_dlpack_layout_t;

/* Checks a DLPack tensor handed to buffer_from_dlpack, so every plugin
 * applies the same rules: DLPack major version 1; CPU memory (device type
 * 1), the only kind a plugin here reads directly; a dtype with a nxhal
 * equivalent and one lane; ndim 0..32 with a shape; dims >= 0; a byte size
 * that fits size_t; non-NULL data when there are elements; strides that are
 * compact unless `accept` allows others, and then span no more than the
 * bytes the elements occupy compactly (DLPack gives no allocation size, so
 * a view with gaps cannot be told from one leaving it), never reach below
 * `data`, and never wrap the address space. INVALID_ARGUMENT naming `what` and
 * the problem otherwise. Only reads `tensor` (never calls its deleter) and
 * fills *out on success. Thread-safe. */
nxhal_status_t* nxhal_dlpack_check(const nxhal_dlpack_managed_tensor_t* tensor, uint32_t accept,
                                   const char* what, nxhal_dlpack_layout_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_NX_HAL_PLUGIN_H_ */
