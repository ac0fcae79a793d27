/*
 * executable.c -- compiling, running and serializing programs in
 * the template's one format, "template-elementwise".
 *
 * A program is ASCII text "<op> <dtype> <shape>": `add f32 4`,
 * `mul i32 2,3`, `add f32 scalar`. Ops: add, mul (two inputs "lhs" and
 * "rhs", one output "out", all of the same dtype and shape). Dtypes: f32,
 * i32. A real backend replaces the parser with its compiler (ONNX,
 * StableHLO, its own IR) and the loop with a launch on its device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The first line of a serialized executable; the second is the compat key. */
#define TEMPLATE_BLOB_MAGIC "NXHAL-TEMPLATE-EXE 2\n" /* 2: length and digest added */

/* Checks compile (and deserialize) options. The template accepts none, so
 * every name is INVALID_ARGUMENT naming it; a real backend passes its
 * compiler's options as a nxhal_option_spec_t list, as client_create does.
 * Caller owns the result. Thread-safe. */
static nxhal_status_t* template_check_compile_options(const nxhal_option_t* options,
                                                      size_t num_options) {
  return nxhal_options_check(options, num_options, NULL, 0);
}

#define TEMPLATE_INVALID(...) nxhal_status_make(NXHAL_INVALID_ARGUMENT, __VA_ARGS__)

/* Parses "<op> <dtype> <shape>" into `exe`; INVALID_ARGUMENT saying what is
 * wrong. The caller owns the result. Pure. */
static nxhal_status_t* template_parse(const char* text, nxhal_executable_t* exe) {
  char op[16], dtype[16], shape[256], extra[2];
  char* cursor = shape;
  if (sscanf(text, "%15s %15s %255s %1s", op, dtype, shape, extra) != 3) {
    return TEMPLATE_INVALID(TEMPLATE_FORMAT
                            " program must be '<op> <dtype> <shape>' "
                            "(e.g. 'add f32 4'), got '%.40s'",
                            text);
  }
  if (strcmp(op, "add") == 0) {
    exe->op = TEMPLATE_OP_ADD;
  } else if (strcmp(op, "mul") == 0) {
    exe->op = TEMPLATE_OP_MUL;
  } else {
    return TEMPLATE_INVALID("unknown op '%s' (known: add, mul)", op);
  }
  exe->dtype = nxhal_dtype_from_name(dtype);
  if (exe->dtype != NXHAL_DTYPE_F32 && exe->dtype != NXHAL_DTYPE_I32) {
    return TEMPLATE_INVALID("dtype '%s' is not supported (known: f32, i32)", dtype);
  }
  exe->rank = 0;
  exe->size_bytes = nxhal_dtype_size(exe->dtype);
  if (strcmp(shape, "scalar") == 0) return NULL;
  for (;;) {
    char* end;
    long long dim;
    if (*cursor < '0' || *cursor > '9' || exe->rank == TEMPLATE_MAX_RANK) {
      return TEMPLATE_INVALID(
          "shape '%s' must be 'scalar' or up to %d comma-separated "
          "non-negative integers",
          shape, TEMPLATE_MAX_RANK);
    }
    dim = strtoll(cursor, &end, 10);
    /* Tiny programs only: this also keeps size_bytes from overflowing. */
    if (dim > (1LL << 24) || exe->size_bytes * (uint64_t)dim > ((uint64_t)1 << 30)) {
      return TEMPLATE_INVALID("shape '%s' is larger than the template's 1 GiB", shape);
    }
    exe->dims[exe->rank++] = dim;
    exe->size_bytes *= (uint64_t)dim;
    if (*end == '\0') return NULL;
    if (*end != ',') return TEMPLATE_INVALID("shape '%s' has a stray '%c'", shape, *end);
    cursor = end + 1;
  }
}

/* A new executable for `device` from program text (`size` bytes, not
 * NUL-terminated). Caller owns *out. Thread-safe. */
static nxhal_status_t* template_make_executable(nxhal_device_t* device, const void* text,
                                                size_t size, nxhal_executable_t** out) {
  nxhal_status_t* status;
  nxhal_executable_t* exe;
  if (size > 0 && memchr(text, '\0', size) != NULL) {
    return TEMPLATE_INVALID(TEMPLATE_FORMAT " programs are text; this one holds a NUL byte");
  }
  exe = (nxhal_executable_t*)calloc(1, sizeof(*exe));
  if (exe != NULL) exe->text = (char*)malloc(size + 1);
  if (exe == NULL || exe->text == NULL) {
    free(exe);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (size > 0) memcpy(exe->text, text, size);
  exe->text[size] = '\0';
  /* A real backend runs its compiler here and keeps what it produced. */
  status = template_parse(exe->text, exe);
  if (status != NULL) {
    template_executable_destroy(exe);
    return status;
  }
  exe->device = device;
  *out = exe;
  return NULL;
}

nxhal_status_t* template_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                            const nxhal_option_t* options, size_t num_options,
                                            nxhal_executable_t** out_executable) {
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  status = nxhal_check_struct(program, NXHAL_PROGRAM_1_0_SIZE, "program");
  if (status == NULL) status = template_check_compile_options(options, num_options);
  if (status != NULL) return status;
  *out_executable = NULL;
  if (program->format == NULL || strcmp(program->format, TEMPLATE_FORMAT) != 0) {
    return TEMPLATE_INVALID("program format '%s' is not accepted (accepted: " TEMPLATE_FORMAT ")",
                            program->format != NULL ? program->format : "(null)");
  }
  if (program->data == NULL && program->size > 0) return TEMPLATE_INVALID("program data is NULL");
  return template_make_executable(device, program->data, program->size, out_executable);
}

void template_executable_destroy(nxhal_executable_t* executable) {
  if (executable == NULL) return;
  free(executable->text);
  free(executable);
}

nxhal_status_t* template_executable_io_count(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                             size_t* out_count) {
  NXHAL_REQUIRE_ARG(executable);
  NXHAL_REQUIRE_ARG(out_count);
  if (kind != NXHAL_IO_INPUT && kind != NXHAL_IO_OUTPUT) {
    return TEMPLATE_INVALID("io kind %d is neither input nor output", (int)kind);
  }
  *out_count = kind == NXHAL_IO_INPUT ? 2 : 1;
  return NULL;
}

nxhal_status_t* template_executable_io_info(nxhal_executable_t* executable, nxhal_io_kind_t kind,
                                            size_t index, nxhal_io_info_t* out) {
  size_t count = 0;
  nxhal_status_t* status = template_executable_io_count(executable, kind, &count);
  if (status == NULL) status = nxhal_check_struct(out, NXHAL_IO_INFO_1_0_SIZE, "io info");
  if (status != NULL) return status;
  if (index >= count) {
    return TEMPLATE_INVALID("%s index %zu out of range (executable has %zu)",
                            kind == NXHAL_IO_INPUT ? "input" : "output", index, count);
  }
  out->name = kind == NXHAL_IO_OUTPUT ? "out" : index == 0 ? "lhs" : "rhs";
  out->desc.struct_size = NXHAL_TENSOR_DESC_1_0_SIZE;
  out->desc.dtype = executable->dtype;
  out->desc.rank = executable->rank;
  out->desc.dims = executable->dims;
  /* ABI 1.1: -1 is "on the executable's own device"; only a caller whose
   * struct has room for the field gets it. */
  if (NXHAL_STRUCT_HAS(out, nxhal_io_info_t, device_index)) out->device_index = -1;
  return NULL;
}

/* INVALID_ARGUMENT naming input `index` when it does not fit `executable`.
 * Caller owns the result. Thread-safe (reads immutable fields only). */
static nxhal_status_t* template_check_input(const nxhal_executable_t* executable, size_t index,
                                            const nxhal_buffer_t* input) {
  const char* name = index == 0 ? "lhs" : "rhs";
  int64_t i;
  if (input == NULL) return TEMPLATE_INVALID("input '%s' is NULL", name);
  if (input->device != executable->device) {
    return TEMPLATE_INVALID("input '%s' is on another device than the executable", name);
  }
  if (input->dtype != executable->dtype || input->rank != executable->rank) {
    return TEMPLATE_INVALID("input '%s' is %s of rank %lld, expected %s of rank %lld", name,
                            nxhal_dtype_name(input->dtype), (long long)input->rank,
                            nxhal_dtype_name(executable->dtype), (long long)executable->rank);
  }
  for (i = 0; i < input->rank; ++i) {
    if (input->dims[i] != executable->dims[i]) {
      return TEMPLATE_INVALID("input '%s' has dimension %lld = %lld, expected %lld", name,
                              (long long)i, (long long)input->dims[i],
                              (long long)executable->dims[i]);
    }
  }
  return NULL;
}

nxhal_status_t* template_executable_execute(nxhal_executable_t* executable,
                                            nxhal_buffer_t* const* inputs, size_t num_inputs,
                                            nxhal_buffer_t** out_outputs, size_t num_outputs,
                                            nxhal_event_t** out_event) {
  nxhal_buffer_t* output = NULL;
  size_t i, n;
  nxhal_status_t* status = NULL;
  NXHAL_REQUIRE_ARG(executable);
  NXHAL_REQUIRE_ARG(out_outputs);
  if (num_inputs != 2) return TEMPLATE_INVALID("executable takes 2 inputs, got %zu", num_inputs);
  NXHAL_REQUIRE_ARG(inputs);
  if (num_outputs != 1) {
    return TEMPLATE_INVALID("executable has 1 output, got room for %zu", num_outputs);
  }
  for (i = 0; status == NULL && i < 2; ++i) status = template_check_input(executable, i, inputs[i]);
  if (status == NULL) {
    status = template_buffer_alloc(executable->device, executable->dtype, executable->rank,
                                   executable->dims, executable->size_bytes, &output);
  }
  if (status != NULL) return status;
  /* A real backend launches the compiled program on its device here. */
  n = (size_t)(executable->size_bytes / nxhal_dtype_size(executable->dtype));
  if (executable->dtype == NXHAL_DTYPE_F32) {
    const float* a = (const float*)inputs[0]->data;
    const float* b = (const float*)inputs[1]->data;
    float* z = (float*)output->data;
    for (i = 0; i < n; ++i) z[i] = executable->op == TEMPLATE_OP_ADD ? a[i] + b[i] : a[i] * b[i];
  } else {
    /* i32 wraps on overflow, as numpy does: computed in unsigned arithmetic. */
    const uint32_t* a = (const uint32_t*)inputs[0]->data;
    const uint32_t* b = (const uint32_t*)inputs[1]->data;
    uint32_t* z = (uint32_t*)output->data;
    for (i = 0; i < n; ++i) z[i] = executable->op == TEMPLATE_OP_ADD ? a[i] + b[i] : a[i] * b[i];
  }
  /* As in buffer_to_host: a real backend completes the event from its
   * launch's completion callback; the template has already finished. */
  status = nxhal_event_done(out_event);
  if (status != NULL) {
    template_buffer_destroy(output);
    return status;
  }
  out_outputs[0] = output;
  return NULL;
}

/* Serialized layout: TEMPLATE_BLOB_MAGIC, the compat key, '\n', the
 * payload's length (u64 LE), its SHA-256 digest, the payload (here the program
 * text; a real backend writes its compiled artefact). The digest covers the
 * magic, the length and the payload, all but the key and itself: a damaged
 * blob is refused (INVALID_ARGUMENT) before the SDK sees a byte, since vendor
 * loaders trust their input and crash on flipped bytes, while a blob from
 * another SDK stays FAILED_PRECONDITION by its key. */
#define TEMPLATE_BLOB_TAIL (8 + NXHAL_DIGEST_SIZE) /* length and digest after the key line */

static void template_blob_digest(const unsigned char* length_field, const void* payload,
                                 size_t payload_len, uint8_t out[NXHAL_DIGEST_SIZE]) {
  nxhal_sha256_t sha;
  nxhal_sha256_init(&sha);
  nxhal_sha256_update(&sha, TEMPLATE_BLOB_MAGIC, strlen(TEMPLATE_BLOB_MAGIC));
  nxhal_sha256_update(&sha, length_field, 8);
  nxhal_sha256_update(&sha, payload, payload_len);
  nxhal_sha256_final(&sha, out);
}

nxhal_status_t* template_executable_serialize(nxhal_executable_t* executable,
                                              nxhal_blob_t** out_blob) {
  nxhal_blob_t* blob;
  size_t size, head, text_len, i;
  unsigned char* tail;
  NXHAL_REQUIRE_ARG(executable);
  NXHAL_REQUIRE_ARG(out_blob);
  head = strlen(TEMPLATE_BLOB_MAGIC) + strlen(template_compat_key) + 1;
  text_len = strlen(executable->text);
  size = head + TEMPLATE_BLOB_TAIL + text_len;
  /* One allocation: the blob struct, then its bytes (+1 for snprintf's NUL). */
  blob = (nxhal_blob_t*)malloc(sizeof(*blob) + size + 1);
  if (blob == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  snprintf((char*)(blob + 1), head + 1, "%s%s\n", TEMPLATE_BLOB_MAGIC, template_compat_key);
  tail = (unsigned char*)(blob + 1) + head;
  for (i = 0; i < 8; i++) tail[i] = (unsigned char)((uint64_t)text_len >> (8 * i));
  memcpy(tail + TEMPLATE_BLOB_TAIL, executable->text, text_len);
  template_blob_digest(tail, executable->text, text_len, tail + 8);
  blob->struct_size = sizeof(*blob);
  blob->data = blob + 1;
  blob->size = size;
  *out_blob = blob;
  return NULL;
}

nxhal_status_t* template_executable_deserialize(nxhal_device_t* device, const void* data,
                                                size_t size, const nxhal_option_t* options,
                                                size_t num_options,
                                                nxhal_executable_t** out_executable) {
  const size_t magic_len = strlen(TEMPLATE_BLOB_MAGIC);
  const size_t key_len = strlen(template_compat_key);
  const char* bytes = (const char*)data;
  const char* key;
  const char* newline;
  const unsigned char* tail;
  size_t rest, i;
  uint64_t payload_len = 0;
  uint8_t digest[NXHAL_DIGEST_SIZE];
  nxhal_status_t* status;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  status = template_check_compile_options(options, num_options);
  if (status != NULL) return status;
  *out_executable = NULL;
  if (bytes == NULL || size < magic_len || memcmp(bytes, TEMPLATE_BLOB_MAGIC, magic_len) != 0) {
    return TEMPLATE_INVALID("bytes are not a serialized template executable");
  }
  key = bytes + magic_len;
  newline = (const char*)memchr(key, '\n', size - magic_len);
  if (newline == NULL) return TEMPLATE_INVALID("serialized template executable is truncated");
  /* The key is checked before anything else is read: a real backend must
   * never hand its SDK an artefact built for another SDK or chip. */
  if ((size_t)(newline - key) != key_len || memcmp(key, template_compat_key, key_len) != 0) {
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "executable was built for compat key '%.*s', this device's is '%s'",
                             (int)((newline - key) > 100 ? 100 : (newline - key)), key,
                             template_compat_key);
  }
  /* The length against the blob's size (no over-read), then the digest,
   * before any payload byte is interpreted. */
  rest = size - (size_t)(newline + 1 - bytes);
  tail = (const unsigned char*)newline + 1;
  if (rest < TEMPLATE_BLOB_TAIL) {
    return TEMPLATE_INVALID("corrupted executable: truncated (%zu bytes)", size);
  }
  for (i = 0; i < 8; i++) payload_len |= (uint64_t)tail[i] << (8 * i);
  if (payload_len != rest - TEMPLATE_BLOB_TAIL) {
    return TEMPLATE_INVALID(
        "corrupted executable: truncated or padded (payload of %llu bytes "
        "declared, %zu present)",
        (unsigned long long)payload_len, rest - TEMPLATE_BLOB_TAIL);
  }
  template_blob_digest(tail, tail + TEMPLATE_BLOB_TAIL, (size_t)payload_len, digest);
  if (!nxhal_digest_equal(digest, tail + 8)) {
    return TEMPLATE_INVALID("corrupted executable: digest mismatch");
  }
  return template_make_executable(device, tail + TEMPLATE_BLOB_TAIL, (size_t)payload_len,
                                  out_executable);
}

void template_blob_free(nxhal_blob_t* blob) {
  free(blob); /* the bytes share its allocation */
}
