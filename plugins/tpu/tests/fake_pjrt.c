/*
 * fake_pjrt.c -- a PJRT plugin that forwards to a real one (path in
 * FAKE_PJRT_REAL) but presents a doctored API table, to test the guards
 * against version skew. FAKE_PJRT_MODE:
 *   major     pjrt_api_version.major = 1 (an ABI break: nothing may be called)
 *   old       struct_size ends before PJRT_Executable_OutputElementTypes
 *             (a plugin built against an older header)
 *   newer     minor 999 and a larger struct_size (a newer plugin)
 *   nullser   PJRT_Executable_Serialize is NULL
 *   noclient  PJRT_Client_Create is NULL
 *   noreplicas PJRT_LoadedExecutable_AddressableDevices is NULL
 * Built by the tests.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"

/* Room past the real table, for the "newer" mode's larger struct_size. */
static union {
  PJRT_Api api;
  char bytes[sizeof(PJRT_Api) + 512];
} table;

const PJRT_Api* GetPjrtApi(void) {
  const char* real_path = getenv("FAKE_PJRT_REAL");
  const char* mode = getenv("FAKE_PJRT_MODE");
  void* real;
  const PJRT_Api* (*get)(void);
  if (real_path == NULL || mode == NULL) return NULL;
  real = dlopen(real_path, RTLD_NOW | RTLD_LOCAL);
  if (real == NULL) return NULL;
  *(void**)&get = dlsym(real, "GetPjrtApi");
  if (get == NULL) return NULL;
  memcpy(&table.api, get(), sizeof(PJRT_Api));
  if (strcmp(mode, "major") == 0) {
    table.api.pjrt_api_version.major_version = 1;
  } else if (strcmp(mode, "old") == 0) {
    table.api.struct_size = offsetof(PJRT_Api, PJRT_Executable_OutputElementTypes);
    table.api.pjrt_api_version.minor_version = 20;
  } else if (strcmp(mode, "newer") == 0) {
    table.api.struct_size = sizeof(table.bytes);
    table.api.pjrt_api_version.minor_version = 999;
  } else if (strcmp(mode, "nullser") == 0) {
    table.api.PJRT_Executable_Serialize = NULL;
  } else if (strcmp(mode, "noclient") == 0) {
    table.api.PJRT_Client_Create = NULL;
  } else if (strcmp(mode, "noreplicas") == 0) {
    table.api.PJRT_LoadedExecutable_AddressableDevices = NULL;
  }
  return &table.api;
}
