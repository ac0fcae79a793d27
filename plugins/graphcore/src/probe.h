/*
 * probe.h -- looks for IPU hardware and for the Poplar backend and
 * explains what is missing. Everything the probe reads from the machine
 * comes through nxhal_graphcore_probe_ctx_t, so tests run it on fake trees.
 */
#ifndef NX_HAL_GRAPHCORE_PROBE_H_
#define NX_HAL_GRAPHCORE_PROBE_H_

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the probe looks. Strings borrowed for the duration of each call. */
typedef struct nxhal_graphcore_probe_ctx {
  size_t struct_size;
  /* Prefixed to /sys/bus/pci/devices, /dev and /etc; "" for the real machine. */
  const char* root;
  /* The home directory holding .ipuof.conf.d; NULL when unknown. */
  const char* home;
  /* The value of IPUOF_CONFIG_PATH; NULL when unset. */
  const char* ipuof_config_path;
  /* The values of IPUOF_VIPU_API_HOST and IPUOF_VIPU_API_PARTITION_ID (a
   * V-IPU partition Poplar asks the V-IPU server about); NULL when unset. */
  const char* vipu_api_host;
  const char* vipu_partition_id;
  /* 1 when the Poplar backend was built, and why not otherwise. */
  int backend_built;
  const char* build_reason;
  /* The backend library to load when built. */
  const char* backend_path;
} nxhal_graphcore_probe_ctx_t;

#define NXHAL_GRAPHCORE_PROBE_CTX_STRUCT_SIZE \
  NXHAL_STRUCT_SIZE(nxhal_graphcore_probe_ctx_t, backend_path)

/* What the hardware probe found. Plain data; no ownership. */
typedef struct nxhal_graphcore_hw {
  int pci_count;          /* PCI functions with vendor 0x1d95 */
  char pci_first[64];     /* the first one's address, e.g. "0000:3b:00.0" */
  int dev_count;          /* /dev/ipu* nodes */
  char dev_first[64];     /* the first one's name, e.g. "ipu0" */
  int pci_dir_readable;   /* 0: /sys/bus/pci/devices could not be listed */
  int ipuof_env_set;      /* IPUOF_CONFIG_PATH is set */
  int ipuof_env_exists;   /* ... and names a file that exists */
  int ipuof_dir_files;    /* regular *.conf files in ~/.ipuof.conf.d */
  int ipuof_etc_files;    /* regular *.conf files in /etc/ipuof.conf.d */
  int vipu_host_set;      /* IPUOF_VIPU_API_HOST is set and not empty */
  int vipu_partition_set; /* IPUOF_VIPU_API_PARTITION_ID is set and not empty */
  int home_known;
} nxhal_graphcore_hw_t;

/* The outcome of the full probe, in the order the checks run. */
typedef enum nxhal_graphcore_verdict {
  NXHAL_GC_BACKEND_NOT_BUILT = 1,  /* stop: nothing to load */
  NXHAL_GC_BACKEND_UNLOADABLE = 2, /* dlopen/dlsym failed */
  NXHAL_GC_BACKEND_READY = 3       /* *out_backend set; hardware may still be absent */
} nxhal_graphcore_verdict_t;

/* Fills *out from the machine `ctx` describes. Never fails; unreadable
 * places count as empty. Thread-safe. */
void nxhal_graphcore_probe_hw(const nxhal_graphcore_probe_ctx_t* ctx, nxhal_graphcore_hw_t* out);

/* 1 when any IPU or IPU-over-fabric configuration was found (a V-IPU
 * partition counts only when both its host and its id are set). */
int nxhal_graphcore_hw_present(const nxhal_graphcore_hw_t* hw);

/* Writes what was found ("PCI 0000:3b:00.0 (vendor 0x1d95), /dev/ipu0") into
 * buf, or "" when nothing. Always NUL-terminates. */
void nxhal_graphcore_hw_found_text(const nxhal_graphcore_probe_ctx_t* ctx,
                                   const nxhal_graphcore_hw_t* hw, char* buf, size_t size);

/* Writes the list of places checked and what each held into buf. */
void nxhal_graphcore_hw_checked_text(const nxhal_graphcore_probe_ctx_t* ctx,
                                     const nxhal_graphcore_hw_t* hw, char* buf, size_t size);

/* Runs the checks in order: backend built, backend loadable (with the
 * backend's own check of its table), hardware. Writes into `reason` the
 * explanation for any verdict but READY, and for READY the hardware text
 * (used when the backend then finds no device). On READY *out_backend is the
 * backend's table, which stays valid for the life of the process (the library
 * is never unloaded). Thread-safe. */
nxhal_graphcore_verdict_t nxhal_graphcore_probe(const nxhal_graphcore_probe_ctx_t* ctx,
                                                const nxhal_graphcore_host_t* host,
                                                const nxhal_graphcore_backend_t** out_backend,
                                                nxhal_graphcore_hw_t* out_hw, char* reason,
                                                size_t reason_size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NX_HAL_GRAPHCORE_PROBE_H_ */
