/* status.c -- status objects: a code and a message, one allocation each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"

/* The message lives in the same allocation, after the struct. */
struct nxhal_status {
  nxhal_status_code_t code;
  char* message;
};

/* Returned when a status cannot be allocated, so making one never fails;
 * nxhal_status_free recognises it and leaves it alone. */
static char nxhal_oom_message[] = "out of memory while reporting an error";
static struct nxhal_status nxhal_oom_status = {NXHAL_RESOURCE_EXHAUSTED, nxhal_oom_message};

/* Allocates a status holding a copy of `message`. Thread-safe. */
static nxhal_status_t* nxhal_status_alloc(nxhal_status_code_t code, const char* message,
                                          size_t length) {
  nxhal_status_t* status = (nxhal_status_t*)malloc(sizeof(*status) + length + 1);
  if (status == NULL) return &nxhal_oom_status;
  status->code = code;
  status->message = (char*)(status + 1);
  memcpy(status->message, message, length);
  status->message[length] = '\0';
  return status;
}

nxhal_status_t* nxhal_status_makev(nxhal_status_code_t code, const char* format, va_list args) {
  char small[256];
  va_list copy;
  int length;
  nxhal_status_t* status;
  if (code == NXHAL_OK) return NULL;
  if (format == NULL) format = "";
  va_copy(copy, args);
  length = vsnprintf(small, sizeof(small), format, copy);
  va_end(copy);
  if (length < 0) return nxhal_status_alloc(code, format, strlen(format));
  if ((size_t)length < sizeof(small)) return nxhal_status_alloc(code, small, (size_t)length);
  status = (nxhal_status_t*)malloc(sizeof(*status) + (size_t)length + 1);
  if (status == NULL) return &nxhal_oom_status;
  status->code = code;
  status->message = (char*)(status + 1);
  vsnprintf(status->message, (size_t)length + 1, format, args);
  return status;
}

nxhal_status_t* nxhal_status_make(nxhal_status_code_t code, const char* format, ...) {
  va_list args;
  nxhal_status_t* status;
  va_start(args, format);
  status = nxhal_status_makev(code, format, args);
  va_end(args);
  return status;
}

void nxhal_status_free(nxhal_status_t* status) {
  if (status == NULL || status == &nxhal_oom_status) return;
  free(status);
}

nxhal_status_code_t nxhal_status_code(const nxhal_status_t* status) {
  return status == NULL ? NXHAL_OK : status->code;
}

const char* nxhal_status_message(const nxhal_status_t* status) {
  return status == NULL ? "" : status->message;
}

nxhal_status_t* nxhal_status_copy(const nxhal_status_t* status) {
  if (status == NULL) return NULL;
  if (status == &nxhal_oom_status) return &nxhal_oom_status;
  return nxhal_status_alloc(status->code, status->message, strlen(status->message));
}
