/* executable.c -- compile, run and (de)serialize through the
 * Poplar backend. Everything the ABI promises about bad input is checked
 * here, before the backend (and Poplar) sees it. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "options.h"

/* Serialized form: magic, u32 key length, compat key, u64 payload length,
 * SHA-256 digest, PopEF payload (integers little-endian). The key and the
 * digest are checked before the payload reaches Poplar, which aborts on some
 * foreign or corrupted inputs. The digest covers every byte but the key and
 * itself: a foreign build's blob stays FAILED_PRECONDITION, a damaged one is
 * INVALID_ARGUMENT. The magic's last character is the format version (2
 * added the digest). */
static const char gc_magic[8] = {'N', 'X', 'H', 'A', 'L', 'G', 'C', '2'};
/* magic, key length (u32 LE), payload length (u64 LE), digest */
#define GC_HEADER_FIXED (8 + 4 + 8 + NXHAL_DIGEST_SIZE)
#define GC_MAX_KEY 4096

static int gc_is_known_format(const char* format) {
  return strcmp(format, "onnx") == 0 || strcmp(format, "popef") == 0;
}

nxhal_status_t* gc_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                      const nxhal_option_t* options, size_t num_options,
                                      nxhal_executable_t** out_executable) {
  nxhal_graphcore_compile_config_t config;
  nxhal_executable_t* exe;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  *out_executable = NULL;
  status = nxhal_check_struct(program, NXHAL_PROGRAM_1_0_SIZE, "program");
  if (status != NULL) return status;
  if (program->format == NULL || !gc_is_known_format(program->format)) {
    return nxhal_status_make(
        NXHAL_INVALID_ARGUMENT,
        "graphcore: program format '%s' is not accepted (accepted: onnx, popef)",
        program->format != NULL ? program->format : "(NULL)");
  }
  if (program->data == NULL || program->size == 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "graphcore: program has no bytes");
  }
  status =
      nxhal_graphcore_parse_compile_options(options, num_options, &device->client->config, &config);
  if (status != NULL) return status;
  exe = (nxhal_executable_t*)calloc(1, sizeof(*exe));
  if (exe == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  exe->device = device;
  status = device->client->backend->compile(device->client->bclient, device->index, program,
                                            &config, &exe->bexe);
  if (status == NULL && exe->bexe == NULL) {
    status = nxhal_status_make(NXHAL_INTERNAL, "graphcore: the Poplar backend made no executable");
  }
  if (status != NULL) {
    free(exe);
    return status;
  }
  *out_executable = exe;
  return NULL;
}

void gc_executable_destroy(nxhal_executable_t* executable) {
  if (executable == NULL) return;
  executable->device->client->backend->executable_free(executable->bexe);
  free(executable);
}

/* The backend's io array for `kind`. */
static nxhal_status_t* gc_io(nxhal_executable_t* exe, nxhal_io_kind_t kind,
                             const nxhal_io_info_t** infos, size_t* count) {
  if (kind != NXHAL_IO_INPUT && kind != NXHAL_IO_OUTPUT) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: io kind %d is neither input nor output", (int)kind);
  }
  return exe->device->client->backend->executable_io(exe->bexe, kind, infos, count);
}

nxhal_status_t* gc_executable_io_count(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                       size_t* out_count) {
  const nxhal_io_info_t* infos = NULL;
  NXHAL_REQUIRE_ARG(executable);
  NXHAL_REQUIRE_ARG(out_count);
  return gc_io(executable, kind, &infos, out_count);
}

nxhal_status_t* gc_executable_io_info(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                      size_t index, nxhal_io_info_t* out) {
  const nxhal_io_info_t* infos = NULL;
  size_t count = 0;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(executable);
  status = nxhal_check_struct(out, NXHAL_IO_INFO_1_0_SIZE, "io info");
  if (status != NULL) return status;
  status = gc_io(executable, kind, &infos, &count);
  if (status != NULL) return status;
  if (index >= count) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "graphcore: %s index %zu out of range (%zu)",
                             kind == NXHAL_IO_INPUT ? "input" : "output", index, count);
  }
  nxhal_struct_fill(out, &infos[index], sizeof(infos[index]));
  /* desc carries its own struct_size; ours describes what we filled. */
  out->desc.struct_size = sizeof(nxhal_tensor_desc_t);
  /* One device per executable: the 1.1 field says so where there is room. */
  if (NXHAL_STRUCT_HAS(out, nxhal_io_info_t, device_index)) out->device_index = -1;
  return NULL;
}

/* INVALID_ARGUMENT naming the input when `b` does not match `info`. */
static nxhal_status_t* gc_check_input(const nxhal_buffer_t* b, const nxhal_io_info_t* info,
                                      size_t index) {
  int64_t i;
  const char* name = info->name != NULL ? info->name : "?";
  if (b->dtype != info->desc.dtype) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "graphcore: input %zu '%s' must be %s, got %s",
                             index, name, nxhal_dtype_name(info->desc.dtype),
                             nxhal_dtype_name(b->dtype));
  }
  if (b->rank != info->desc.rank) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: input %zu '%s' must have rank %lld, got %lld", index, name,
                             (long long)info->desc.rank, (long long)b->rank);
  }
  for (i = 0; i < b->rank; ++i) {
    if (b->dims[i] != info->desc.dims[i]) {
      return nxhal_status_make(
          NXHAL_INVALID_ARGUMENT, "graphcore: input %zu '%s' dimension %lld must be %lld, got %lld",
          index, name, (long long)i, (long long)info->desc.dims[i], (long long)b->dims[i]);
    }
  }
  return NULL;
}

/* Checks execute's arguments against the executable's signature: the
 * counts, the arrays, and each input's dtype and shape. Sets *out_infos to
 * the backend's output descriptions. */
static nxhal_status_t* gc_check_execute_args(nxhal_executable_t* executable,
                                             nxhal_buffer_t* const* inputs, size_t num_inputs,
                                             nxhal_buffer_t** out_outputs, size_t num_outputs,
                                             const nxhal_io_info_t** out_infos) {
  const nxhal_io_info_t* in_infos = NULL;
  size_t n_in = 0, n_out = 0, i;
  nxhal_status_t* status = gc_io(executable, NXHAL_IO_INPUT, &in_infos, &n_in);
  if (status == NULL) status = gc_io(executable, NXHAL_IO_OUTPUT, out_infos, &n_out);
  if (status != NULL) return status;
  if (num_inputs != n_in) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: executable takes %zu inputs, got %zu", n_in, num_inputs);
  }
  if (num_outputs != n_out) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: executable has %zu outputs, room given for %zu", n_out,
                             num_outputs);
  }
  if (n_in > 0) NXHAL_REQUIRE_ARG(inputs);
  if (n_out > 0) NXHAL_REQUIRE_ARG(out_outputs);
  for (i = 0; i < n_in; ++i) {
    if (inputs[i] == NULL) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "graphcore: input %zu '%s' is NULL", i,
                               in_infos[i].name != NULL ? in_infos[i].name : "?");
    }
    status = gc_check_input(inputs[i], &in_infos[i], i);
    if (status != NULL) return status;
  }
  return NULL;
}

/* Allocates the outputs (described by out_infos) into out_outputs and has
 * the backend run over the inputs' and outputs' staging memory. On failure
 * every output is destroyed and NULL again. */
static nxhal_status_t* gc_run(nxhal_executable_t* executable, nxhal_buffer_t* const* inputs,
                              size_t n_in, const nxhal_io_info_t* out_infos,
                              nxhal_buffer_t** out_outputs, size_t n_out) {
  nxhal_status_t* status = NULL;
  size_t i;
  /* +1: calloc(0) may return NULL. */
  const void** in_ptrs = (const void**)calloc(n_in + 1, sizeof(*in_ptrs));
  size_t* in_sizes = (size_t*)calloc(n_in + 1, sizeof(*in_sizes));
  void** out_ptrs = (void**)calloc(n_out + 1, sizeof(*out_ptrs));
  size_t* out_sizes = (size_t*)calloc(n_out + 1, sizeof(*out_sizes));
  if (in_ptrs == NULL || in_sizes == NULL || out_ptrs == NULL || out_sizes == NULL) {
    status = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  }
  for (i = 0; status == NULL && i < n_in; ++i) {
    in_ptrs[i] = inputs[i]->data;
    in_sizes[i] = (size_t)inputs[i]->size_bytes;
  }
  for (i = 0; status == NULL && i < n_out; ++i) {
    status = nxhal_gc_buffer_alloc(executable->device, out_infos[i].desc.dtype,
                                   out_infos[i].desc.rank, out_infos[i].desc.dims, &out_outputs[i]);
    if (status == NULL) {
      out_ptrs[i] = out_outputs[i]->data;
      out_sizes[i] = (size_t)out_outputs[i]->size_bytes;
    }
  }
  if (status == NULL) {
    status = executable->device->client->backend->execute(executable->bexe, in_ptrs, in_sizes, n_in,
                                                          out_ptrs, out_sizes, n_out);
  }
  free(in_ptrs);
  free(in_sizes);
  free(out_ptrs);
  free(out_sizes);
  if (status != NULL) {
    for (i = 0; i < n_out; ++i) {
      gc_buffer_destroy(out_outputs[i]);
      out_outputs[i] = NULL;
    }
  }
  return status;
}

nxhal_status_t* gc_executable_execute(nxhal_executable_t* executable, nxhal_buffer_t* const* inputs,
                                      size_t num_inputs, nxhal_buffer_t** out_outputs,
                                      size_t num_outputs, nxhal_event_t** out_event) {
  const nxhal_io_info_t* out_infos = NULL;
  size_t i;
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(executable);
  if (out_event != NULL) *out_event = NULL;
  status =
      gc_check_execute_args(executable, inputs, num_inputs, out_outputs, num_outputs, &out_infos);
  if (status != NULL) return status;
  for (i = 0; i < num_outputs; ++i) out_outputs[i] = NULL;
  status = gc_run(executable, inputs, num_inputs, out_infos, out_outputs, num_outputs);
  if (status != NULL) return status;
  /* Poplar's Engine::run returns when the step is done, so the work is
   * complete here; the event is for callers written against async plugins. */
  return nxhal_event_done(out_event);
}

/* Collects serialized bytes from the backend into a growing array. */
typedef struct gc_bytes {
  char* data;
  size_t size;
  size_t capacity;
} gc_bytes_t;

static int gc_bytes_sink(void* user, const void* data, size_t size) {
  gc_bytes_t* bytes = (gc_bytes_t*)user;
  if (size > SIZE_MAX - bytes->size) return 1;
  if (bytes->size + size > bytes->capacity) {
    size_t capacity = bytes->capacity != 0 ? bytes->capacity : 4096;
    char* grown;
    while (capacity < bytes->size + size) {
      if (capacity > SIZE_MAX / 2) return 1;
      capacity *= 2;
    }
    grown = (char*)realloc(bytes->data, capacity);
    if (grown == NULL) return 1;
    bytes->data = grown;
    bytes->capacity = capacity;
  }
  if (size > 0) memcpy(bytes->data + bytes->size, data, size);
  bytes->size += size;
  return 0;
}

static void gc_put_u32(unsigned char* p, uint32_t v) {
  int i;
  for (i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

static void gc_put_u64(unsigned char* p, uint64_t v) {
  int i;
  for (i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t gc_get_u32(const unsigned char* p) {
  uint32_t v = 0;
  int i;
  for (i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

static uint64_t gc_get_u64(const unsigned char* p) {
  uint64_t v = 0;
  int i;
  for (i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

nxhal_status_t* gc_executable_serialize(nxhal_executable_t* executable, nxhal_blob_t** out_blob) {
  gc_bytes_t payload = {NULL, 0, 0};
  nxhal_status_t* status;
  const char* key;
  size_t key_len, total;
  nxhal_blob_t* blob;
  unsigned char* p;
  NXHAL_REQUIRE_ARG(executable);
  NXHAL_REQUIRE_ARG(out_blob);
  *out_blob = NULL;
  status =
      executable->device->client->backend->serialize(executable->bexe, gc_bytes_sink, &payload);
  if (status != NULL) {
    free(payload.data);
    return status;
  }
  key = executable->device->desc.compat_key;
  key_len = strlen(key);
  total = GC_HEADER_FIXED + key_len + payload.size;
  /* One allocation: the blob struct, then the bytes it points to. */
  blob = (nxhal_blob_t*)malloc(sizeof(*blob) + total);
  if (blob == NULL) {
    free(payload.data);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "graphcore: out of memory");
  }
  p = (unsigned char*)(blob + 1);
  memcpy(p, gc_magic, 8);
  gc_put_u32(p + 8, (uint32_t)key_len);
  memcpy(p + 12, key, key_len);
  gc_put_u64(p + 12 + key_len, (uint64_t)payload.size);
  if (payload.size > 0) memcpy(p + GC_HEADER_FIXED + key_len, payload.data, payload.size);
  free(payload.data);
  {
    nxhal_sha256_t sha;
    nxhal_sha256_init(&sha);
    nxhal_sha256_update(&sha, p, 12);
    nxhal_sha256_update(&sha, p + 12 + key_len, 8);
    nxhal_sha256_update(&sha, p + GC_HEADER_FIXED + key_len, payload.size);
    nxhal_sha256_final(&sha, p + 20 + key_len);
  }
  blob->struct_size = sizeof(*blob);
  blob->data = p;
  blob->size = total;
  *out_blob = blob;
  return NULL;
}

void gc_blob_free(nxhal_blob_t* blob) {
  free(blob);
}

nxhal_status_t* gc_executable_deserialize(nxhal_device_t* device, const void* data, size_t size,
                                          const nxhal_option_t* options, size_t num_options,
                                          nxhal_executable_t** out_executable) {
  const unsigned char* p = (const unsigned char*)data;
  uint32_t key_len;
  uint64_t payload_len;
  const char* ours;
  nxhal_program_t program;
  nxhal_sha256_t sha;
  uint8_t digest[NXHAL_DIGEST_SIZE];
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  *out_executable = NULL;
  if (data != NULL && size >= GC_HEADER_FIXED && memcmp(p, gc_magic, 7) == 0 &&
      memcmp(p, gc_magic, 8) != 0) {
    return nxhal_status_make(
        NXHAL_FAILED_PRECONDITION,
        "graphcore: serialized executable format '%.8s', this plugin reads '%.8s'", (const char*)p,
        gc_magic);
  }
  if (data == NULL || size < GC_HEADER_FIXED || memcmp(p, gc_magic, 8) != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: these %zu bytes are not a serialized nx_hal Graphcore "
                             "executable (no NXHALGC2 header)",
                             size);
  }
  key_len = gc_get_u32(p + 8);
  if (key_len > GC_MAX_KEY || (size_t)key_len > size - GC_HEADER_FIXED) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: corrupted executable: truncated (key of %u bytes)",
                             (unsigned)key_len);
  }
  payload_len = gc_get_u64(p + 12 + key_len);
  if (payload_len != (uint64_t)(size - GC_HEADER_FIXED - key_len)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: corrupted executable: truncated or padded (payload "
                             "says %llu bytes, %zu present)",
                             (unsigned long long)payload_len, size - GC_HEADER_FIXED - key_len);
  }
  ours = device->desc.compat_key;
  if (strlen(ours) != key_len || memcmp(ours, p + 12, key_len) != 0) {
    return nxhal_status_make(
        NXHAL_FAILED_PRECONDITION,
        "graphcore: executable was compiled for '%.*s' but this device is '%s'", (int)key_len,
        (const char*)(p + 12), ours);
  }
  nxhal_sha256_init(&sha);
  nxhal_sha256_update(&sha, p, 12);
  nxhal_sha256_update(&sha, p + 12 + key_len, 8);
  nxhal_sha256_update(&sha, p + GC_HEADER_FIXED + key_len, (size_t)payload_len);
  nxhal_sha256_final(&sha, digest);
  if (!nxhal_digest_equal(digest, p + 20 + key_len)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "graphcore: corrupted executable: digest mismatch");
  }
  memset(&program, 0, sizeof(program));
  program.struct_size = sizeof(program);
  program.format = "popef";
  program.data = p + GC_HEADER_FIXED + key_len;
  program.size = (size_t)payload_len;
  return gc_executable_compile(device, &program, options, num_options, out_executable);
}
