/*
 * fake_nvml.c -- an NVML library for tests of the GPU memory guard
 * (src/gpu_memory.c): one GPU whose free and total memory come from
 * FAKE_NVML_FREE_MIB and FAKE_NVML_TOTAL_MIB. Named through
 * NXHAL_NVML_LIBRARY. Not a backend: it answers five calls and nothing else.
 */
#include <stdlib.h>

typedef struct fake_nvml_memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} fake_nvml_memory_t;

static unsigned long long fake_mib(const char* name) {
  const char* v = getenv(name);
  return (v != NULL ? strtoull(v, NULL, 10) : 0ull) << 20;
}

int nvmlInit_v2(void) {
  return 0;
}
int nvmlShutdown(void) {
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 1;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  static int the_gpu;
  if (index != 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = &the_gpu;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, fake_nvml_memory_t* memory) {
  (void)device;
  memory->total = fake_mib("FAKE_NVML_TOTAL_MIB");
  memory->free = fake_mib("FAKE_NVML_FREE_MIB");
  memory->used = memory->total - memory->free;
  return 0;
}
