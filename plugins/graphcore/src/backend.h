/*
 * backend.h -- the internal C contract between the always-built
 * library (libnxhal_graphcore.so, C) and the Poplar backend
 * (libnxhal_graphcore_poplar.so, C++ over Poplar/PopART/PopEF).
 *
 * Why a second table: only the backend links the SDK's C++ libraries, so a
 * machine without the SDK can still load libnxhal_graphcore.so and be told
 * precisely what is missing. The backend is dlopen'ed and exports one C
 * symbol, NXHAL_GRAPHCORE_BACKEND_SYMBOL, which fills this table.
 *
 * Rules: every struct starts with struct_size; the table only grows at its
 * end; no C++ exception crosses this boundary (the backend catches them all
 * and returns a status); statuses are made through the host's status_make so
 * that the frontend's status_free frees them. Not part of the public ABI.
 */
#ifndef NX_HAL_GRAPHCORE_BACKEND_H_
#define NX_HAL_GRAPHCORE_BACKEND_H_

#include <stddef.h>
#include <stdint.h>

#include "nx_hal/nx_hal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The symbol the backend exports; its type is nxhal_graphcore_backend_get_fn. */
#define NXHAL_GRAPHCORE_BACKEND_SYMBOL "nxhal_graphcore_backend_v1"
/* File name of the backend, looked up next to libnxhal_graphcore.so. */
#define NXHAL_GRAPHCORE_BACKEND_FILE "libnxhal_graphcore_poplar.so"

/* Client options after validation (see options.c). */
typedef struct nxhal_graphcore_config {
  size_t struct_size;
  int64_t num_ipus;                   /* power of two, >= 1 */
  int32_t precision_float16;          /* 1: float16, 0: float32 */
  double available_memory_proportion; /* in (0, 1]; 0 means the SDK default */
  int32_t half_partials;              /* 1: float16 partials in matmul/conv */
  int32_t compile_only;               /* 1: offline target, no device attached */
  int32_t ipu_model;                  /* 1: Poplar's IPU Model instead of hardware */
} nxhal_graphcore_config_t;

#define NXHAL_GRAPHCORE_CONFIG_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_graphcore_config_t, ipu_model)

/* What the backend says about one device. Strings owned by the backend client. */
typedef struct nxhal_graphcore_device_desc {
  size_t struct_size;
  const char* name;       /* e.g. "IPU-M2000 device 0" or "IPU Model" */
  const char* arch;       /* target architecture, e.g. "ipu2" */
  const char* compat_key; /* what a serialized executable must match */
  int64_t device_id;      /* Poplar device manager id; -1 for model/offline */
  int64_t num_ipus;
  int64_t tiles_per_ipu;
  int64_t bytes_per_tile;
  int32_t is_ipu_model;
  int32_t is_offline; /* compile_only: can compile, cannot run */
} nxhal_graphcore_device_desc_t;

#define NXHAL_GRAPHCORE_DEVICE_DESC_STRUCT_SIZE \
  NXHAL_STRUCT_SIZE(nxhal_graphcore_device_desc_t, is_offline)

/* Compile settings: client defaults overridden by compile options. */
typedef struct nxhal_graphcore_compile_config {
  size_t struct_size;
  int32_t precision_float16;
  double available_memory_proportion; /* 0: SDK default */
  int32_t half_partials;
} nxhal_graphcore_compile_config_t;

#define NXHAL_GRAPHCORE_COMPILE_CONFIG_STRUCT_SIZE \
  NXHAL_STRUCT_SIZE(nxhal_graphcore_compile_config_t, half_partials)

/* What the frontend lends the backend. */
typedef struct nxhal_graphcore_host {
  size_t struct_size;
  /* Makes a status owned by the caller; `message` is copied. Thread-safe. */
  nxhal_status_t* (*status_make)(nxhal_status_code_t code, const char* message);
} nxhal_graphcore_host_t;

#define NXHAL_GRAPHCORE_HOST_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_graphcore_host_t, status_make)

/* Receives serialized bytes (borrowed for the call); returns 0 on success. */
typedef int (*nxhal_graphcore_sink_fn)(void* user, const void* data, size_t size);

typedef struct nxhal_graphcore_bclient nxhal_graphcore_bclient_t; /* opaque, backend-owned */
typedef struct nxhal_graphcore_bexe nxhal_graphcore_bexe_t;       /* opaque, backend-owned */

typedef struct nxhal_graphcore_backend {
  size_t struct_size;
  uint32_t version; /* 1 */

  /* Poplar's version string; static. Thread-safe. */
  const char* (*sdk_version)(void);
  /* Enumerates (and for hardware, attaches) devices for `config`. A machine
   * with no matching device gives a client with zero devices and a reason in
   * *out_reason (owned by the client), not an error: the frontend composes
   * the final message with the hardware probe. Caller owns *out_client. */
  nxhal_status_t* (*client_open)(const nxhal_graphcore_config_t* config,
                                 nxhal_graphcore_bclient_t** out_client, const char** out_reason);
  /* Detaches devices and frees the client. NULL is a no-op. */
  void (*client_close)(nxhal_graphcore_bclient_t* client);
  /* Number of devices. Thread-safe. */
  nxhal_status_t* (*device_count)(nxhal_graphcore_bclient_t* client, size_t* out_count);
  /* Describes device `index` (caller sets out->struct_size). Thread-safe. */
  nxhal_status_t* (*device_describe)(nxhal_graphcore_bclient_t* client, size_t index,
                                     nxhal_graphcore_device_desc_t* out);
  /* Compiles an "onnx" (through PopART) or loads a "popef" program for
   * device `index`. `program` borrowed. Caller owns *out_exe. Thread-safe. */
  nxhal_status_t* (*compile)(nxhal_graphcore_bclient_t* client, size_t index,
                             const nxhal_program_t* program,
                             const nxhal_graphcore_compile_config_t* config,
                             nxhal_graphcore_bexe_t** out_exe);
  /* Frees an executable. NULL is a no-op. */
  void (*executable_free)(nxhal_graphcore_bexe_t* exe);
  /* The inputs or outputs: *out_infos is an array of *out_count entries
   * (each with struct_size set) owned by the executable. Thread-safe. */
  nxhal_status_t* (*executable_io)(nxhal_graphcore_bexe_t* exe, nxhal_io_kind_t kind,
                                   const nxhal_io_info_t** out_infos, size_t* out_count);
  /* Runs once: inputs are host memory laid out as the io infos say (sizes
   * already checked by the frontend); outputs are written to host memory of
   * the given sizes. Serialised per executable by the backend. */
  nxhal_status_t* (*execute)(nxhal_graphcore_bexe_t* exe, const void* const* inputs,
                             const size_t* input_sizes, size_t num_inputs, void* const* outputs,
                             const size_t* output_sizes, size_t num_outputs);
  /* Writes the executable as PopEF bytes to `sink`. Thread-safe. */
  nxhal_status_t* (*serialize)(nxhal_graphcore_bexe_t* exe, nxhal_graphcore_sink_fn sink,
                               void* user);
} nxhal_graphcore_backend_t;

#define NXHAL_GRAPHCORE_BACKEND_STRUCT_SIZE NXHAL_STRUCT_SIZE(nxhal_graphcore_backend_t, serialize)

/* The exported function: checks host->struct_size, keeps `host` (static in
 * the frontend) and returns the backend's static table, or NULL when it
 * cannot serve this host (then the frontend reports an ABI mismatch). */
typedef const nxhal_graphcore_backend_t* (*nxhal_graphcore_backend_get_fn)(
    const nxhal_graphcore_host_t* host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_GRAPHCORE_BACKEND_H_ */
