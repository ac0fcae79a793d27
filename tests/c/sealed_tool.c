/* sealed_tool.c -- the loader's sealing functions (cabi/sealed.c) from the
 * command line, for tests/test_sealed_c.py, which checks them against the
 * Python package's nx_hal/store/sealed.py:
 *   sealed_tool seal IN OUT              OUT = nxhal_executable_seal(IN)
 *   sealed_tool unseal IN OUT [trusted]  OUT = the payload nxhal_executable_unseal gives
 *   sealed_tool key-path                 prints nxhal_executable_key_path
 *   sealed_tool misuse                   NULL arguments are INVALID_ARGUMENT
 * Exit status: 0 done, 1 the call failed ("<CODE>: <message>" on stderr),
 * 2 usage or I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nx_hal/nx_hal_loader.h"

/* The whole of `path`, malloc'd (one byte more, so never NULL for an empty
 * file); NULL on failure. */
static unsigned char* read_file(const char* path, size_t* size) {
  FILE* file = fopen(path, "rb");
  unsigned char* data = NULL;
  long length;
  if (file == NULL) return NULL;
  if (fseek(file, 0, SEEK_END) == 0 && (length = ftell(file)) >= 0 &&
      fseek(file, 0, SEEK_SET) == 0) {
    data = (unsigned char*)malloc((size_t)length + 1);
    if (data != NULL && fread(data, 1, (size_t)length, file) != (size_t)length) {
      free(data);
      data = NULL;
    }
    *size = (size_t)length;
  }
  fclose(file);
  return data;
}

static int write_file(const char* path, const void* data, size_t size) {
  FILE* file = fopen(path, "wb");
  int ok;
  if (file == NULL) return 0;
  ok = fwrite(data, 1, size, file) == size;
  return fclose(file) == 0 && ok;
}

/* Prints and frees a failed call's status; 1, or 0 when it succeeded. */
static int failed(nxhal_status_t* status) {
  if (status == NULL) return 0;
  fprintf(stderr, "%s: %s\n", nxhal_status_code_name(nxhal_loader_status_code(status)),
          nxhal_loader_status_message(status));
  nxhal_loader_status_free(status);
  return 1;
}

static int seal(const char* in, const char* out) {
  size_t size = 0, sealed_size = 0;
  void* sealed = NULL;
  unsigned char* data = read_file(in, &size);
  int status;
  if (data == NULL) return 2;
  status = failed(nxhal_executable_seal(data, size, &sealed, &sealed_size));
  if (status == 0 && !write_file(out, sealed, sealed_size)) status = 2;
  nxhal_loader_free(sealed);
  free(data);
  return status;
}

static int unseal(const char* in, const char* out, int trusted) {
  size_t size = 0, payload_size = 0;
  const void* payload = NULL;
  unsigned char* data = read_file(in, &size);
  int status;
  if (data == NULL) return 2;
  status = failed(nxhal_executable_unseal(data, size, trusted, &payload, &payload_size));
  if (status == 0 && !write_file(out, payload, payload_size)) status = 2;
  if (status == 1 && (payload != NULL || payload_size != 0)) status = 3; /* outputs not cleared */
  free(data);
  return status;
}

static int key_path(void) {
  char* path = NULL;
  int status = failed(nxhal_executable_key_path(&path));
  if (status == 0) printf("%s\n", path);
  nxhal_loader_free(path);
  return status;
}

/* Each NULL argument is INVALID_ARGUMENT, never a crash. */
static int misuse(void) {
  void* sealed = NULL;
  const void* payload = NULL;
  size_t size = 0;
  int refused = 0;
  refused += failed(nxhal_executable_seal(NULL, 1, &sealed, &size));
  refused += failed(nxhal_executable_seal("x", 1, NULL, &size));
  refused += failed(nxhal_executable_seal("x", 1, &sealed, NULL));
  refused += failed(nxhal_executable_unseal(NULL, 1, 1, &payload, &size));
  refused += failed(nxhal_executable_unseal("x", 1, 1, NULL, &size));
  refused += failed(nxhal_executable_unseal("x", 1, 1, &payload, NULL));
  refused += failed(nxhal_executable_key_path(NULL));
  nxhal_loader_free(NULL);
  printf("%d refused\n", refused);
  return refused == 7 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "seal") == 0) return seal(argv[2], argv[3]);
  if ((argc == 4 || (argc == 5 && strcmp(argv[4], "trusted") == 0)) &&
      strcmp(argv[1], "unseal") == 0) {
    return unseal(argv[2], argv[3], argc == 5);
  }
  if (argc == 2 && strcmp(argv[1], "key-path") == 0) return key_path();
  if (argc == 2 && strcmp(argv[1], "misuse") == 0) return misuse();
  fprintf(stderr, "usage: sealed_tool seal IN OUT | unseal IN OUT [trusted] | key-path | misuse\n");
  return 2;
}
