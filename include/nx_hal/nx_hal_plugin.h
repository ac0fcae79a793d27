/*
 * nx_hal_plugin.h -- helpers for plugin authors (the static library
 * libnxhal_plugin_util, built from cabi/). Statuses, typed option checks,
 * dtype tables, struct-size checks, a ready-made event, and negotiation.
 * Link it statically with hidden visibility: every plugin owns its copy, so
 * statuses are always freed by the library that made them.
 */
#ifndef NX_HAL_NX_HAL_PLUGIN_H_
#define NX_HAL_NX_HAL_PLUGIN_H_

#include <pthread.h>
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
/* A copy of `status` (NULL for NULL). Caller owns it. Thread-safe. */
nxhal_status_t* nxhal_status_copy(const nxhal_status_t* status);

/* --- Struct sizes ------------------------------------------------------- */

/* INVALID_ARGUMENT naming `what` when `ptr` is NULL or its struct_size
 * (its first field) is below `min_size`. Thread-safe. */
nxhal_status_t* nxhal_check_struct(const void* ptr, size_t min_size, const char* what);

/* --- Typed options ------------------------------------------------------ */

typedef struct nxhal_option_spec {
  const char* name;
  nxhal_value_type_t type;
} nxhal_option_spec_t;

/* Element `index` of an options array, whose stride is options[0].struct_size. */
const nxhal_option_t* nxhal_option_at(const nxhal_option_t* options, size_t index);

/* Checks every option against `specs`: an unknown name, a wrong type, a NULL
 * name or string, a struct_size below 1.0's, or a repeated name is
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

/* --- Memory accounting --------------------------------------------------- */

/* A device's bytes in use, peak and limit, behind a mutex: what
 * device_memory_stats reports and device_set_memory_limit caps. Embed one per
 * device; initialise with nxhal_memory_init, free with nxhal_memory_destroy. */
typedef struct nxhal_memory {
  pthread_mutex_t mutex;
  uint64_t in_use;
  uint64_t peak;
  uint64_t limit; /* 0: none */
} nxhal_memory_t;

void nxhal_memory_init(nxhal_memory_t* memory);
void nxhal_memory_destroy(nxhal_memory_t* memory);
/* Counts `bytes` more, or RESOURCE_EXHAUSTED naming `what`, the bytes, the
 * limit and what is in use when that would pass the limit. Thread-safe. */
nxhal_status_t* nxhal_memory_reserve(nxhal_memory_t* memory, uint64_t bytes, const char* what);
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
  uint64_t length;           /* bytes hashed so far */
  unsigned char block[64];   /* the partial block */
  size_t used;               /* bytes in `block` */
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
