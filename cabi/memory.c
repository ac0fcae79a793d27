/* memory.c -- per-device memory accounting with a settable limit. */
#include <pthread.h>

#include "nx_hal/nx_hal_plugin.h"

void nxhal_memory_init(nxhal_memory_t* memory) {
  pthread_mutex_init(&memory->mutex, NULL);
  memory->in_use = 0;
  memory->peak = 0;
  memory->limit = 0;
}

void nxhal_memory_destroy(nxhal_memory_t* memory) { pthread_mutex_destroy(&memory->mutex); }

nxhal_status_t* nxhal_memory_reserve(nxhal_memory_t* memory, uint64_t bytes, const char* what) {
  nxhal_status_t* status = NULL;
  pthread_mutex_lock(&memory->mutex);
  /* Written so that it cannot overflow: in_use <= limit holds whenever a limit is set
   * before allocations, and the test compares against what is left. */
  if (memory->limit != 0 && (bytes > memory->limit || memory->in_use > memory->limit - bytes)) {
    status = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED,
                               "%s needs %llu bytes, which would pass the device's memory limit of "
                               "%llu (%llu in use)",
                               what, (unsigned long long)bytes, (unsigned long long)memory->limit,
                               (unsigned long long)memory->in_use);
  } else {
    memory->in_use += bytes;
    if (memory->in_use > memory->peak) memory->peak = memory->in_use;
  }
  pthread_mutex_unlock(&memory->mutex);
  return status;
}

void nxhal_memory_release(nxhal_memory_t* memory, uint64_t bytes) {
  pthread_mutex_lock(&memory->mutex);
  memory->in_use = memory->in_use > bytes ? memory->in_use - bytes : 0;
  pthread_mutex_unlock(&memory->mutex);
}

void nxhal_memory_set_limit(nxhal_memory_t* memory, uint64_t limit) {
  pthread_mutex_lock(&memory->mutex);
  memory->limit = limit;
  pthread_mutex_unlock(&memory->mutex);
}

void nxhal_memory_stats(nxhal_memory_t* memory, nxhal_memory_stats_t* out) {
  pthread_mutex_lock(&memory->mutex);
  out->bytes_in_use = memory->in_use;
  out->peak_bytes_in_use = memory->peak;
  out->bytes_limit = memory->limit;
  pthread_mutex_unlock(&memory->mutex);
}
