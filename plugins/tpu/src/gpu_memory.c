/* gpu_memory.c -- how much memory is free on the GPUs before a CUDA client
 * preallocates. XLA's CUDA plugin takes a fraction of each GPU's memory (75%
 * unless told otherwise) when its client is created. When other processes
 * already hold that memory it falls back to smaller pieces, and a later
 * allocation aborts the whole process ("Bad StatusOr access:
 * RESOURCE_EXHAUSTED", measured with 14 processes sharing one H100, 5 of
 * them killed by SIGABRT). NVML says how much is free without creating a
 * CUDA context, and the driver ships it (libnvidia-ml.so.1). No NVML header
 * is installed anywhere we build, so the five calls are declared here from
 * NVML's documented API. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* XLA's default share of GPU memory taken at client creation. */
#define TPU_GPU_DEFAULT_FRACTION 0.75
/* Room for the CUDA context and cuBLAS/cuDNN workspaces beside the pool. */
#define TPU_GPU_HEADROOM_BYTES (256ull << 20)

typedef struct tpu_nvml_memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} tpu_nvml_memory_t;

typedef int (*tpu_nvml_void_fn)(void);
typedef int (*tpu_nvml_count_fn)(unsigned int*);
typedef int (*tpu_nvml_handle_fn)(unsigned int, void**);
typedef int (*tpu_nvml_memory_fn)(void*, tpu_nvml_memory_t*);

/* The GPU with the least memory free as a share of its total, of all NVML
 * sees: the client may use any of them, and a process's CUDA ordinals need
 * not be NVML's order. */
typedef struct tpu_gpu_memory {
  unsigned int index;
  unsigned long long free_bytes, total_bytes;
} tpu_gpu_memory_t;

static void tpu_gpu_keep_tightest(tpu_gpu_memory_t* out, int* found, unsigned int index,
                                  const tpu_nvml_memory_t* m) {
  if (m->total == 0) return;
  if (*found &&
      (double)m->free / (double)m->total >= (double)out->free_bytes / (double)out->total_bytes) {
    return;
  }
  out->index = index;
  out->free_bytes = m->free;
  out->total_bytes = m->total;
  *found = 1;
}

/* 1 and *out filled when NVML answered for at least one GPU; 0 when there
 * is no NVML (the check is then skipped, as before). NXHAL_NVML_LIBRARY
 * names another library (a machine with NVML elsewhere; the tests' fake).
 * Thread-safe: NVML counts its inits. */
static int tpu_gpu_memory_tightest(tpu_gpu_memory_t* out) {
  const char* path = getenv("NXHAL_NVML_LIBRARY");
  void* lib =
      dlopen(path != NULL && *path != '\0' ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  tpu_nvml_void_fn init, shutdown;
  tpu_nvml_count_fn count;
  tpu_nvml_handle_fn handle;
  tpu_nvml_memory_fn memory;
  unsigned int n = 0, i;
  int found = 0;
  if (lib == NULL) return 0;
  *(void**)&init = dlsym(lib, "nvmlInit_v2");
  *(void**)&shutdown = dlsym(lib, "nvmlShutdown");
  *(void**)&count = dlsym(lib, "nvmlDeviceGetCount_v2");
  *(void**)&handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  *(void**)&memory = dlsym(lib, "nvmlDeviceGetMemoryInfo");
  if (init == NULL || shutdown == NULL || count == NULL || handle == NULL || memory == NULL ||
      init() != 0) {
    dlclose(lib);
    return 0;
  }
  if (count(&n) == 0) {
    for (i = 0; i < n; ++i) {
      void* device = NULL;
      tpu_nvml_memory_t m;
      memset(&m, 0, sizeof(m));
      if (handle(i, &device) == 0 && memory(device, &m) == 0) {
        tpu_gpu_keep_tightest(out, &found, i, &m);
      }
    }
  }
  shutdown();
  dlclose(lib);
  return found;
}

/* `options` with gpu_preallocate=false added, in our struct size; NULL when
 * out of memory. Caller frees. */
static nxhal_option_t* tpu_options_without_preallocation(const nxhal_option_t* options,
                                                         size_t num_options) {
  nxhal_option_t* copy = (nxhal_option_t*)calloc(num_options + 1, sizeof(nxhal_option_t));
  size_t i;
  if (copy == NULL) return NULL;
  for (i = 0; i < num_options; ++i) {
    memcpy(&copy[i], nxhal_option_at(options, i), sizeof(nxhal_option_t));
    copy[i].struct_size = sizeof(nxhal_option_t);
  }
  copy[num_options].struct_size = sizeof(nxhal_option_t);
  copy[num_options].name = "gpu_preallocate";
  copy[num_options].type = NXHAL_VALUE_BOOL;
  copy[num_options].bool_value = 0;
  return copy;
}

char* tpu_gpu_memory_guard(const nxhal_option_t* options, size_t num_options,
                           nxhal_option_t** out_options) {
  const nxhal_option_t* pre = nxhal_options_find(options, num_options, "gpu_preallocate");
  const nxhal_option_t* frac = nxhal_options_find(options, num_options, "gpu_memory_fraction");
  double fraction = frac != NULL ? frac->double_value : TPU_GPU_DEFAULT_FRACTION;
  tpu_gpu_memory_t gpu;
  double need, mib = 1024.0 * 1024.0;
  *out_options = NULL;
  if (pre == NULL) {
    /* Unasked, memory is allocated as needed: processes that start together
     * all see a free GPU (a check would pass in each) and then all
     * preallocate, which is the abort above. */
    *out_options = tpu_options_without_preallocation(options, num_options);
    return *out_options == NULL ? tpu_strdup("out of memory") : NULL;
  }
  if (!pre->bool_value) return NULL;
  /* Asked for: refused at once when it cannot fit now (NVML's count). */
  memset(&gpu, 0, sizeof(gpu));
  if (!tpu_gpu_memory_tightest(&gpu)) return NULL;
  need = fraction * (double)gpu.total_bytes + (double)TPU_GPU_HEADROOM_BYTES;
  if ((double)gpu.free_bytes >= need) return NULL;
  return tpu_sprintf(
      "GPU %u has %.0f MiB free of %.0f MiB (other processes hold the rest): preallocating "
      "%.0f%% of it does not fit, and XLA aborts the process when a later allocation fails; "
      "set gpu_preallocate=false, or a gpu_memory_fraction below %.2f",
      gpu.index, (double)gpu.free_bytes / mib, (double)gpu.total_bytes / mib, fraction * 100.0,
      ((double)gpu.free_bytes - (double)TPU_GPU_HEADROOM_BYTES) / (double)gpu.total_bytes);
}
