/*
 * internal.h -- the handles of the template plugin and the calls
 * its source files share. Not installed; nothing here crosses the ABI.
 *
 * The template keeps every "device" in host memory so it runs anywhere. A
 * real backend keeps the same shapes and swaps what is inside them: the
 * client holds the vendor SDK's context, a device wraps the SDK's device, a
 * buffer holds a device allocation, an executable holds what the vendor
 * compiler produced.
 */
#ifndef NXHAL_TEMPLATE_INTERNAL_H_
#define NXHAL_TEMPLATE_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "nx_hal/nx_hal.h"
#include "nx_hal/nx_hal_plugin.h"

#define TEMPLATE_FORMAT "template-elementwise"
#define TEMPLATE_MAX_DEVICES 8
#define TEMPLATE_MAX_RANK 32 /* nxhal_tensor_desc_check allows rank 0..32 */
#define TEMPLATE_COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* Owned by its client; lives as long as the client. Its memory counters are
 * thread-safe (nxhal_memory_t has its own mutex); the rest is immutable. */
struct nxhal_device {
  nxhal_client_t* client;
  size_t index;
  nxhal_memory_t memory; /* what device_memory_stats reports and the limit caps */
};

/* Owned by the caller of client_create. Immutable after creation. */
struct nxhal_client {
  size_t num_devices;
  nxhal_device_t devices[TEMPLATE_MAX_DEVICES];
};

/* Owned by the caller. Immutable after creation except the bytes in `data`. */
struct nxhal_buffer {
  nxhal_device_t* device;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t dims[TEMPLATE_MAX_RANK];
  uint64_t size_bytes;
  void* data; /* owned; a real backend holds a device allocation here */
};

/* The elementwise operations the template "compiles". */
typedef enum template_op { TEMPLATE_OP_ADD, TEMPLATE_OP_MUL } template_op_t;

/* Owned by the caller. Immutable after creation, so several threads may
 * execute it at once. */
struct nxhal_executable {
  nxhal_device_t* device;
  template_op_t op;
  nxhal_dtype_t dtype;
  int64_t rank;
  int64_t dims[TEMPLATE_MAX_RANK];
  uint64_t size_bytes; /* of each input and of the output */
  char* text;          /* owned; the program, kept for serialize */
};

/* The compatibility key serialized executables carry (see
 * executable.c). Static string. */
extern const char* const template_compat_key;

/* A new buffer of `dtype`/`rank`/`dims` (already checked) on `device`, its
 * `size_bytes` counted against the device's memory limit. Caller owns
 * *out_buffer. Thread-safe. */
nxhal_status_t* template_buffer_alloc(nxhal_device_t* device, nxhal_dtype_t dtype, int64_t rank,
                                      const int64_t* dims, uint64_t size_bytes,
                                      nxhal_buffer_t** out_buffer);

/* The table entries, one per nxhal_api_t field, named template_<field>:
 * the list in nx_hal.h declares them all, so a missing or mistyped one is a
 * build error. Ownership and thread safety are as nx_hal.h states on that
 * field. Plugin info: plugin.c; clients and devices: client.c; buffers:
 * buffer.c; executables: executable.c. Events are the helper library's
 * (every operation here is finished when its entry returns). */
#define template_event_is_ready nxhal_event_is_ready
#define template_event_await nxhal_event_await
#define template_event_on_ready nxhal_event_on_ready
#define template_event_destroy nxhal_event_destroy
NXHAL_PLUGIN_DECLARE_ENTRIES(template_)

#endif /* NXHAL_TEMPLATE_INTERNAL_H_ */
