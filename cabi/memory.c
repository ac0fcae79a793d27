/* memory.c -- per-device memory accounting with a settable limit. */
#include <pthread.h>

#include "nx_hal/nx_hal_plugin.h"

/* nx_hal_plugin.h keeps the mutex opaque: NXHAL_MEMORY_LOCK_SIZE bytes,
 * 8-byte aligned, at the start of nxhal_memory_t. The platform's mutex must
 * fit there, and the counters must follow it where the header says. */
typedef struct nxhal_mutex_alignment {
  char c;
  pthread_mutex_t mutex;
} nxhal_mutex_alignment_t;
typedef char nxhal_mutex_fits[sizeof(pthread_mutex_t) <= NXHAL_MEMORY_LOCK_SIZE ? 1 : -1];
typedef char nxhal_mutex_aligned[8 % offsetof(nxhal_mutex_alignment_t, mutex) == 0 ? 1 : -1];
typedef char nxhal_memory_counters_after_lock
    [offsetof(nxhal_memory_t, in_use) == NXHAL_MEMORY_LOCK_SIZE ? 1 : -1];
typedef char
    nxhal_memory_size[sizeof(nxhal_memory_t) == NXHAL_MEMORY_LOCK_SIZE + 3 * sizeof(uint64_t) ? 1
                                                                                              : -1];

/* The mutex lives in the first NXHAL_MEMORY_LOCK_SIZE bytes. */
static pthread_mutex_t* memory_mutex(nxhal_memory_t* memory) {
  return (pthread_mutex_t*)(void*)memory;
}

void nxhal_memory_init(nxhal_memory_t* memory) {
  pthread_mutex_init(memory_mutex(memory), NULL);
  memory->in_use = 0;
  memory->peak = 0;
  memory->limit = 0;
}

void nxhal_memory_destroy(nxhal_memory_t* memory) {
  pthread_mutex_destroy(memory_mutex(memory));
}

nxhal_status_t* nxhal_memory_reserve(nxhal_memory_t* memory, uint64_t bytes, const char* what) {
  nxhal_status_t* status = NULL;
  pthread_mutex_lock(memory_mutex(memory));
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
  pthread_mutex_unlock(memory_mutex(memory));
  return status;
}

void nxhal_memory_charge(nxhal_memory_t* memory, uint64_t bytes) {
  pthread_mutex_lock(memory_mutex(memory));
  /* Saturates: a count past UINT64_MAX is no count at all. */
  memory->in_use = bytes > UINT64_MAX - memory->in_use ? UINT64_MAX : memory->in_use + bytes;
  if (memory->in_use > memory->peak) memory->peak = memory->in_use;
  pthread_mutex_unlock(memory_mutex(memory));
}

void nxhal_memory_release(nxhal_memory_t* memory, uint64_t bytes) {
  pthread_mutex_lock(memory_mutex(memory));
  memory->in_use = memory->in_use > bytes ? memory->in_use - bytes : 0;
  pthread_mutex_unlock(memory_mutex(memory));
}

void nxhal_memory_set_limit(nxhal_memory_t* memory, uint64_t limit) {
  pthread_mutex_lock(memory_mutex(memory));
  memory->limit = limit;
  pthread_mutex_unlock(memory_mutex(memory));
}

void nxhal_memory_stats(nxhal_memory_t* memory, nxhal_memory_stats_t* out) {
  pthread_mutex_lock(memory_mutex(memory));
  out->bytes_in_use = memory->in_use;
  out->peak_bytes_in_use = memory->peak;
  out->bytes_limit = memory->limit;
  pthread_mutex_unlock(memory_mutex(memory));
}
