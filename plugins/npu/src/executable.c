/* executable.c -- compiling ONNX / OpenVINO IR, introspection, and
 * export / import of compiled models behind our own checked header. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Serialized executable: this header, the compat key, the OpenVINO target
 * string, then OpenVINO's exported blob. All integers little-endian hosts
 * only, like the blobs OpenVINO itself exports. `digest` is SHA-256 over the
 * header up to it, the target and the payload: every byte but the key and
 * itself, so OpenVINO (which crashes on some damaged streams) never sees a
 * corrupted byte, while a blob from another build is still told apart by its
 * key (FAILED_PRECONDITION). Version 2 added the digest. `precision` was
 * reserved (0) before: the precision option the model was compiled with
 * (npu_precision_code; 0 for none: the importing client's), since
 * OpenVINO's CPU plugin applies the importing core's precision, not the
 * exporting one's. Older plugins ignore it, so the version stays 2. The
 * target string may be followed by a NUL and the run settings
 * (npu_run_settings_format), which import applies again for the same reason;
 * older plugins stop reading the target at the NUL. */
static const char kMagic[8] = {'N', 'X', 'H', 'A', 'L', 'N', 'P', 'U'};
#define NPU_BLOB_VERSION 2u
/* The target (at most 256 bytes, options.c) and its run settings. */
#define NPU_BLOB_TARGET_MAX 512
typedef struct npu_blob_header {
  char magic[8];
  uint32_t version;
  uint32_t key_len;
  uint32_t target_len;
  uint32_t precision;
  uint64_t payload_len;
  uint8_t digest[NXHAL_DIGEST_SIZE];
} npu_blob_header_t;

/* The digest of a blob whose header is `h` and whose target and payload
 * follow the key at `after_key`. */
static void npu_blob_digest(const npu_blob_header_t* h, const char* after_key,
                            uint8_t out[NXHAL_DIGEST_SIZE]) {
  nxhal_sha256_t sha;
  nxhal_sha256_init(&sha);
  nxhal_sha256_update(&sha, h, offsetof(npu_blob_header_t, digest));
  nxhal_sha256_update(&sha, after_key, (size_t)h->target_len + (size_t)h->payload_len);
  nxhal_sha256_final(&sha, out);
}

static void free_io(nxhal_io_info_t* io, size_t n) {
  if (io == NULL) return;
  for (size_t i = 0; i < n; i++) {
    free((char*)io[i].name);
    free((int64_t*)io[i].desc.dims);
  }
  free(io);
}

void npu_executable_destroy(nxhal_executable_t* exe) {
  if (exe == NULL) return;
  npu_request_pool_destroy(exe);
  if (exe->compiled != NULL) npu_ov.ov_compiled_model_free(exe->compiled);
  free_io(exe->inputs, exe->num_inputs);
  free_io(exe->outputs, exe->num_outputs);
  free(exe->input_ov_types);
  free(exe->output_ov_types);
  free(exe->output_static);
  free(exe->target);
  free(exe->run_settings);
  free(exe->imported);
  pthread_mutex_destroy(&exe->pool_mu);
  pthread_cond_destroy(&exe->pool_cv);
  free(exe);
}

/* Describes one port of the compiled model into io / *ov_type / *is_static. */
static nxhal_status_t* describe_port(const ov_output_const_port_t* port, size_t index, int output,
                                     nxhal_io_info_t* io, ov_element_type_e* ov_type,
                                     int* is_static) {
  char* name = NULL;
  char fallback[32];
  io->struct_size = sizeof *io;
  io->desc.struct_size = sizeof io->desc;
  if (npu_ov.ov_port_get_any_name(port, &name) == OK && name != NULL) {
    io->name = npu_strdup(name);
    npu_ov.ov_free(name);
  } else {
    /* Tensors without names exist in IR; an index keeps them addressable. */
    snprintf(fallback, sizeof fallback, "%s%zu", output ? "output" : "input", index);
    io->name = npu_strdup(fallback);
  }
  ov_status_e st = npu_ov.ov_port_get_element_type(port, ov_type);
  if (st != OK) return npu_ov_error(NXHAL_INTERNAL, st, "reading a port's element type");
  io->desc.dtype = npu_dtype_from_ov(*ov_type);
  if (io->desc.dtype == NXHAL_DTYPE_INVALID) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "%s '%s' has OpenVINO element type %d, which nx_hal has no dtype for",
                             output ? "output" : "input", io->name ? io->name : "?", (int)*ov_type);
  }
  ov_partial_shape_t ps = {0};
  st = npu_ov.ov_port_get_partial_shape(port, &ps);
  if (st != OK) return npu_ov_error(NXHAL_INTERNAL, st, "reading a port's shape");
  *is_static = 1;
  if (npu_ov.ov_rank_is_dynamic(ps.rank)) {
    io->desc.rank = -1;
    io->desc.dims = NULL;
    *is_static = 0;
  } else {
    int64_t rank = ps.rank.max;
    int64_t* dims = malloc(sizeof(int64_t) * (size_t)(rank > 0 ? rank : 1));
    if (dims == NULL) {
      npu_ov.ov_partial_shape_free(&ps);
      return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (int64_t i = 0; i < rank; i++) {
      if (npu_ov.ov_dimension_is_dynamic(ps.dims[i])) {
        dims[i] = -1;
        *is_static = 0;
      } else {
        dims[i] = ps.dims[i].max;
      }
    }
    io->desc.rank = rank;
    io->desc.dims = dims;
  }
  npu_ov.ov_partial_shape_free(&ps);
  return NULL;
}

static nxhal_status_t* describe_ports(nxhal_executable_t* exe, int output) {
  size_t n = 0;
  ov_status_e st = output ? npu_ov.ov_compiled_model_outputs_size(exe->compiled, &n)
                          : npu_ov.ov_compiled_model_inputs_size(exe->compiled, &n);
  if (st != OK) return npu_ov_error(NXHAL_INTERNAL, st, "counting ports");
  nxhal_io_info_t* io = calloc(n > 0 ? n : 1, sizeof *io);
  ov_element_type_e* types = calloc(n > 0 ? n : 1, sizeof *types);
  int* statics = calloc(n > 0 ? n : 1, sizeof *statics);
  if (output) {
    exe->outputs = io;
    exe->output_ov_types = types;
    exe->output_static = statics;
    exe->num_outputs = n;
  } else {
    exe->inputs = io;
    exe->input_ov_types = types;
    exe->num_inputs = n;
  }
  if (io == NULL || types == NULL || statics == NULL) {
    if (!output) free(statics);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    ov_output_const_port_t* port = NULL;
    st = output ? npu_ov.ov_compiled_model_output_by_index(exe->compiled, i, &port)
                : npu_ov.ov_compiled_model_input_by_index(exe->compiled, i, &port);
    if (st != OK) {
      if (!output) free(statics);
      return npu_ov_error(NXHAL_INTERNAL, st, "reading a port");
    }
    nxhal_status_t* s = describe_port(port, i, output, &io[i], &types[i], &statics[i]);
    npu_ov.ov_output_const_port_free(port);
    if (s != NULL) {
      if (!output) free(statics);
      return s;
    }
  }
  if (!output) free(statics);
  return NULL;
}

/* Wraps a compiled model into an executable (takes `compiled`). */
static nxhal_status_t* executable_new(nxhal_device_t* device, ov_compiled_model_t* compiled,
                                      const char* target, nxhal_executable_t** out) {
  nxhal_executable_t* exe = calloc(1, sizeof *exe);
  if (exe == NULL) {
    npu_ov.ov_compiled_model_free(compiled);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  pthread_mutex_init(&exe->pool_mu, NULL);
  pthread_cond_init(&exe->pool_cv, NULL);
  exe->device = device;
  exe->compiled = compiled;
  exe->target = npu_strdup(target);
  nxhal_status_t* st = describe_ports(exe, 0);
  if (st == NULL) st = describe_ports(exe, 1);
  for (size_t o = 0; st == NULL && o < exe->num_outputs; o++) {
    /* OpenVINO's CPU leaves a caller-set output tensor unwritten when the
     * output is an input passed straight through (it then carries the
     * input's name); those are copied out of the request instead. */
    for (size_t i = 0; exe->output_static[o] && i < exe->num_inputs; i++) {
      if (strcmp(exe->outputs[o].name, exe->inputs[i].name) == 0) exe->output_static[o] = 2;
    }
    if (exe->output_static[o] == 1) {
      const nxhal_tensor_desc_t* d = &exe->outputs[o].desc;
      uint64_t bytes = nxhal_dtype_size(d->dtype);
      for (int64_t k = 0; k < d->rank; k++) {
        /* Saturates: an overflowing shape is certainly not small. */
        if (d->dims[k] < 0 || !nxhal_mul_u64(bytes, (uint64_t)d->dims[k], &bytes))
          bytes = UINT64_MAX;
      }
      if (bytes < NPU_BIND_OUTPUT_MIN_BYTES) exe->output_static[o] = 2;
    }
  }
  if (st == NULL) {
    /* Enough requests for OpenVINO's streams, and for a few callers at once. */
    size_t optimal = 1;
    char* value = NULL;
    if (npu_ov.ov_compiled_model_get_property(
            compiled, npu_ov.ov_property_key_optimal_number_of_infer_requests, &value) == OK &&
        value != NULL) {
      optimal = (size_t)strtoul(value, NULL, 10);
      npu_ov.ov_free(value);
    }
    exe->max_requests = optimal < 4 ? 4 : (optimal > 32 ? 32 : optimal);
    exe->all = calloc(exe->max_requests, sizeof *exe->all);
    exe->idle = calloc(exe->max_requests, sizeof *exe->idle);
    if (exe->all == NULL || exe->idle == NULL) {
      st = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (st != NULL) {
    npu_executable_destroy(exe);
    return st;
  }
  *out = exe;
  return NULL;
}

/* UNAVAILABLE when `target` names a single device OpenVINO does not list,
 * caught before OpenVINO tries to load a plugin for it. */
static nxhal_status_t* check_target_available(nxhal_device_t* device, const char* target) {
  if (strchr(target, ':') != NULL || npu_client_has_device(device->client, target)) return NULL;
  const char* diag = device->client->diagnostics;
  return nxhal_status_make(NXHAL_UNAVAILABLE,
                           "target device '%s' is not available on this machine (OpenVINO lists "
                           "only the devices this client reports)%s%s",
                           target, diag != NULL && diag[0] ? ": " : "", diag != NULL ? diag : "");
}

/* Writes the devices of a virtual target's list ("HETERO:NPU,CPU") that
 * OpenVINO does not offer into `out`; returns how many. */
static int list_missing(const nxhal_client_t* client, const char* target, char* out, size_t n) {
  const char* list = strchr(target, ':');
  int count = 0;
  out[0] = '\0';
  if (list == NULL) return 0;
  char name[64];
  for (const char* p = list + 1; *p != '\0';) {
    size_t len = strcspn(p, ",");
    if (len > 0 && len < sizeof name) {
      memcpy(name, p, len);
      name[len] = '\0';
      if (!npu_client_has_device(client, name)) {
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%s", count ? ", " : "", name);
        count++;
      }
    }
    p += len;
    if (*p == ',') p++;
  }
  return count;
}

/* Checks the program's struct, format and bytes; *is_onnx says which of
 * the two formats it is. */
static nxhal_status_t* check_program(const nxhal_program_t* program, int* is_onnx) {
  nxhal_status_t* st = nxhal_check_struct(program, NXHAL_PROGRAM_1_0_SIZE, "nxhal_program_t");
  if (st != NULL) return st;
  if (program->format == NULL)
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "program format is NULL");
  *is_onnx = strcmp(program->format, "onnx") == 0;
  int is_ir = strcmp(program->format, "openvino-ir") == 0;
  if (!*is_onnx && !is_ir) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "program format '%s' is not accepted; formats: onnx, openvino-ir",
                             program->format);
  }
  if (program->data == NULL || program->size == 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "program has no bytes");
  }
  if (program->extra_data == NULL && program->extra_size > 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "program extra_data is NULL but extra_size is %zu",
                             program->extra_size);
  }
  return NULL;
}

/* Reads the ONNX or IR program into an OpenVINO model (caller frees it);
 * an IR's weights come in extra_data. */
static nxhal_status_t* read_model(ov_core_t* core, const nxhal_program_t* program, int is_onnx,
                                  ov_model_t** model) {
  ov_tensor_t* weights = NULL;
  ov_status_e ost = OK;
  if (!is_onnx && program->extra_size > 0) {
    int64_t dim = (int64_t)program->extra_size;
    ov_shape_t shape = {0};
    ost = npu_ov.ov_shape_create(1, &dim, &shape);
    if (ost == OK) {
      /* OpenVINO reads the weights in place while building the model. */
      ost = npu_ov.ov_tensor_create_from_host_ptr(U8, shape, (void*)program->extra_data, &weights);
      npu_ov.ov_shape_free(&shape);
    }
    if (ost != OK) return npu_ov_error(NXHAL_INTERNAL, ost, "wrapping the IR weights");
  }
  ost = npu_ov.ov_core_read_model_from_memory_buffer(core, (const char*)program->data,
                                                     program->size, weights, model);
  if (weights != NULL) npu_ov.ov_tensor_free(weights);
  /* OpenVINO's reader refused it: a program it cannot parse (ABI 1.2's
   * INVALID_PROGRAM, INVALID_ARGUMENT for older hosts). */
  if (ost != OK) {
    return npu_ov_error(nxhal_invalid_program_code(), ost,
                        is_onnx ? "reading the ONNX model" : "reading the OpenVINO IR model");
  }
  return NULL;
}

/* The error of a failed compile for `target`: UNAVAILABLE when a virtual
 * device lists an absent one (HETERO:NPU,CPU without an NPU), since then
 * the machine is at fault, not the program; INVALID_ARGUMENT otherwise. */
static nxhal_status_t* compile_error(nxhal_device_t* device, const char* target, ov_status_e ost) {
  char what[600];
  char missing[256];
  int absent = list_missing(device->client, target, missing, sizeof missing);
  if (absent) {
    snprintf(what, sizeof what,
             "compiling for OpenVINO device '%s' (it lists %s, which this machine does not offer)",
             target, missing);
  } else {
    snprintf(what, sizeof what, "compiling for OpenVINO device '%s'", target);
  }
  return npu_ov_error(absent ? NXHAL_UNAVAILABLE : NXHAL_INVALID_ARGUMENT, ost, what);
}

/* The property pair that gives `precision` to a compile for `target`, or
 * NULL keys for none. "auto" means OpenVINO's own choice: nothing to set,
 * unless the client pinned the CPU's precision on the core, which a compile
 * can only undo by naming OpenVINO's own value. DEVICE_PROPERTIES scopes that
 * value to the CPU, so the other devices of AUTO:/HETERO: lists keep theirs.
 * `buf` (size n) holds the value. */
static void precision_property(const nxhal_client_t* client, const char* precision,
                               const char* target, char* buf, size_t n, const char** key,
                               const char** value) {
  *key = *value = NULL;
  if (precision == NULL) return;
  if (strcmp(precision, "auto") != 0) {
    *key = npu_ov.ov_property_key_hint_inference_precision;
    *value = precision;
    return;
  }
  if (!client->cpu_pinned || client->cpu_own_precision == NULL || strstr(target, "CPU") == NULL) {
    return;
  }
  snprintf(buf, n, "{CPU:{%s:%s}}", npu_ov.ov_property_key_hint_inference_precision,
           client->cpu_own_precision);
  *key = "DEVICE_PROPERTIES";
  *value = buf;
}

/* Compiles `model` for `target` with the client's cache and the options'
 * hints. Does not free the model. */
static nxhal_status_t* compile_model(nxhal_device_t* device, ov_model_t* model,
                                     const npu_compile_options_t* opts, const char* target,
                                     ov_compiled_model_t** compiled) {
  /* Key/value pairs for the variadic ov_core_compile_model: the array form
   * (ov_core_compile_model_props) only exists from OpenVINO 2026.4. */
  const char* kv[2 * (2 + NPU_MAX_RUN_PROPERTIES)] = {NULL};
  size_t num_kv = 0;
  npu_run_text_t run_text;
  char precision_buf[128];
  const char* precision_key = NULL;
  const char* precision_value = NULL;
  /* Not for the CPU: OpenVINO 2026.4's CPU plugin loads forward and reverse
   * LSTM, GRU and RNN models from its own cache computing other values, as
   * it imports their exported streams (see export_check.c). nx_hal's compile
   * cache keeps CPU executables instead, checked before they are stored. */
  if (device->client->cache_dir != NULL && strncmp(target, "CPU", 3) != 0) {
    kv[num_kv++] = npu_ov.ov_property_key_cache_dir;
    kv[num_kv++] = device->client->cache_dir;
  }
  precision_property(device->client, opts->precision, target, precision_buf, sizeof precision_buf,
                     &precision_key, &precision_value);
  if (precision_key != NULL) {
    kv[num_kv++] = precision_key;
    kv[num_kv++] = precision_value;
  }
  npu_run_properties(opts, &run_text, kv, &num_kv);
  /* OpenVINO reads only the first num_kv of them; passing all twelve keeps
   * one call for every count. */
  ov_status_e ost = npu_ov.ov_core_compile_model(device->client->core, model, target, num_kv,
                                                 compiled, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5],
                                                 kv[6], kv[7], kv[8], kv[9], kv[10], kv[11]);
  return ost != OK ? compile_error(device, target, ost) : NULL;
}

nxhal_status_t* npu_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                       const nxhal_option_t* options, size_t num_options,
                                       nxhal_executable_t** out_executable) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  *out_executable = NULL;
  int is_onnx = 0;
  nxhal_status_t* st = check_program(program, &is_onnx);
  if (st != NULL) return st;
  npu_compile_options_t opts;
  st = npu_compile_options_parse(options, num_options, &device->client->defaults, 0, &opts);
  if (st != NULL) {
    npu_compile_options_free(&opts);
    return st;
  }
  const char* target = opts.target != NULL ? opts.target : device->ov_name;
  ov_model_t* model = NULL;
  ov_compiled_model_t* compiled = NULL;
  st = check_target_available(device, target);
  if (st == NULL) st = read_model(device->client->core, program, is_onnx, &model);
  if (st == NULL) {
    st = compile_model(device, model, &opts, target, &compiled);
    npu_ov.ov_model_free(model);
  }
  if (st == NULL) st = executable_new(device, compiled, target, out_executable);
  /* Only a compile's own precision travels with its blob: the client's
   * default applies to whatever its client runs, loaded blobs included (the
   * compile cache keys entries by compile options, not client ones). */
  const nxhal_option_t* own = nxhal_options_find(options, num_options, "precision");
  if (st == NULL) {
    (*out_executable)->precision = own != NULL ? npu_precision_code(own->string_value) : 0;
    /* Exported blobs drop the run properties (measured: an imported model
     * is back to LATENCY, pinned, all cores), so the blob carries them. */
    (*out_executable)->run_settings = npu_run_settings_format(&opts);
  }
  npu_compile_options_free(&opts);
  return st;
}

nxhal_status_t* npu_executable_io_count(nxhal_executable_t* exe, nxhal_io_kind_t kind,
                                        size_t* out_count) {
  NXHAL_REQUIRE_ARG(exe);
  NXHAL_REQUIRE_ARG(out_count);
  if (kind != NXHAL_IO_INPUT && kind != NXHAL_IO_OUTPUT) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "io kind %d is neither input nor output",
                             (int)kind);
  }
  *out_count = kind == NXHAL_IO_INPUT ? exe->num_inputs : exe->num_outputs;
  return NULL;
}

nxhal_status_t* npu_executable_io_info(nxhal_executable_t* exe, nxhal_io_kind_t kind, size_t index,
                                       nxhal_io_info_t* out) {
  size_t count = 0;
  nxhal_status_t* st = npu_executable_io_count(exe, kind, &count);
  if (st != NULL) return st;
  st = nxhal_check_struct(out, NXHAL_IO_INFO_1_0_SIZE, "nxhal_io_info_t");
  if (st != NULL) return st;
  if (index >= count) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s index %zu out of range (%zu)",
                             kind == NXHAL_IO_INPUT ? "input" : "output", index, count);
  }
  const nxhal_io_info_t* io = kind == NXHAL_IO_INPUT ? &exe->inputs[index] : &exe->outputs[index];
  out->name = io->name;
  out->desc.struct_size = NXHAL_TENSOR_DESC_1_0_SIZE;
  out->desc.dtype = io->desc.dtype;
  out->desc.rank = io->desc.rank;
  out->desc.dims = io->desc.dims;
  return NULL;
}

/* Reads a whole file into a malloc'd buffer. */
static int read_file(const char* path, char** out, size_t* out_size) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return 0;
  int ok = fseek(f, 0, SEEK_END) == 0;
  long n = ok ? ftell(f) : -1;
  ok = ok && n >= 0 && fseek(f, 0, SEEK_SET) == 0;
  char* data = ok ? malloc((size_t)n + 1) : NULL;
  ok = data != NULL && fread(data, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  if (!ok) {
    free(data);
    return 0;
  }
  *out = data;
  *out_size = (size_t)n;
  return 1;
}

/* A blob of our header (magic, compat key, target) and `payload` (copied). */
static nxhal_status_t* npu_blob_make(const nxhal_executable_t* exe, const char* payload,
                                     size_t payload_len, nxhal_blob_t** out_blob) {
  const char* key = exe->device->compat_key;
  npu_blob_header_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = NPU_BLOB_VERSION;
  h.key_len = (uint32_t)strlen(key);
  /* The target, then a NUL and the run settings: older plugins read the
   * target up to the NUL and import without them. */
  size_t settings_len = exe->run_settings != NULL ? strlen(exe->run_settings) + 1 : 0;
  size_t name_len = strlen(exe->target);
  h.target_len = (uint32_t)(name_len + settings_len);
  h.precision = (uint32_t)exe->precision;
  h.payload_len = payload_len;
  size_t total = sizeof h + h.key_len + h.target_len + payload_len;
  nxhal_blob_t* blob = calloc(1, sizeof *blob);
  char* data = malloc(total);
  if (blob == NULL || data == NULL) {
    free(blob);
    free(data);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(data, &h, sizeof h);
  memcpy(data + sizeof h, key, h.key_len);
  memcpy(data + sizeof h + h.key_len, exe->target, name_len);
  if (settings_len > 0)
    memcpy(data + sizeof h + h.key_len + name_len + 1, exe->run_settings, settings_len - 1);
  if (settings_len > 0) data[sizeof h + h.key_len + name_len] = '\0';
  memcpy(data + sizeof h + h.key_len + h.target_len, payload, payload_len);
  npu_blob_digest(&h, data + sizeof h + h.key_len, h.digest);
  memcpy(data, &h, sizeof h);
  blob->struct_size = sizeof *blob;
  blob->data = data;
  blob->size = total;
  *out_blob = blob;
  return NULL;
}

nxhal_status_t* npu_executable_serialize(nxhal_executable_t* exe, nxhal_blob_t** out_blob) {
  NXHAL_REQUIRE_ARG(exe);
  NXHAL_REQUIRE_ARG(out_blob);
  *out_blob = NULL;
  /* Re-exporting an imported model gives a stream OpenVINO cannot import
   * again (measured), so an imported executable hands back its own stream. */
  if (exe->imported != NULL) return npu_blob_make(exe, exe->imported, exe->imported_size, out_blob);
  /* OpenVINO exports models compiled for one device only (AUTO, HETERO and
   * MULTI throw "Not Implemented"). */
  if (strncmp(exe->target, "AUTO", 4) == 0 || strncmp(exe->target, "HETERO", 6) == 0 ||
      strncmp(exe->target, "MULTI", 5) == 0) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "OpenVINO cannot export a model compiled for '%s'; compile for one "
                             "device to serialize",
                             exe->target);
  }
  /* OpenVINO's C API exports to a file only. */
  const char* tmp = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/nxhal_npu_export_XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0)
    return nxhal_status_make(NXHAL_INTERNAL, "cannot create a temporary file in %s", path);
  close(fd);
  ov_status_e ost = npu_ov.ov_compiled_model_export_model(exe->compiled, path);
  char* payload = NULL;
  size_t payload_len = 0;
  int ok = ost == OK && read_file(path, &payload, &payload_len);
  unlink(path);
  if (ost != OK) return npu_ov_error(NXHAL_INTERNAL, ost, "exporting the compiled model");
  if (!ok) return nxhal_status_make(NXHAL_INTERNAL, "cannot read back the exported model");
  /* Imported as a deserializer would import it, through the same core. */
  ov_core_t* core = NULL;
  nxhal_status_t* st =
      npu_client_import_core(exe->device->client, exe->precision, exe->target, &core);
  if (st == NULL) st = npu_export_check(exe, core, payload, payload_len);
  if (st != NULL) {
    free(payload);
    return st;
  }
  st = npu_blob_make(exe, payload, payload_len, out_blob);
  free(payload);
  return st;
}

void npu_blob_free(nxhal_blob_t* blob) {
  if (blob == NULL) return;
  free((void*)blob->data);
  free(blob);
}

/* Checks a serialized executable's header, key and digest into *h, before
 * OpenVINO sees any of its bytes; the digest not when the caller
 * authenticated the bytes itself (`authenticated`: nx_hal's store and sealed
 * blobs carry an HMAC, and hashing 47 MB again took 32 ms of a 0.23 s load). */
static nxhal_status_t* check_blob(const nxhal_device_t* device, const void* data, size_t size,
                                  int authenticated, npu_blob_header_t* h) {
  if (size < sizeof *h || memcmp(data, kMagic, sizeof kMagic) != 0) {
    return nxhal_status_make(
        NXHAL_INVALID_ARGUMENT,
        "these %zu bytes are not a serialized nx-hal-npu executable (bad magic)", size);
  }
  memcpy(h, data, sizeof *h);
  if (h->version != NPU_BLOB_VERSION) {
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "serialized executable has format version %u; this plugin reads %u",
                             h->version, NPU_BLOB_VERSION);
  }
  /* payload_len is bounded first so the sum below cannot wrap. */
  if (h->payload_len > size ||
      (uint64_t)h->key_len + h->target_len + h->payload_len != size - sizeof *h ||
      h->target_len == 0 || h->target_len > NPU_BLOB_TARGET_MAX) {
    return nxhal_status_make(
        NXHAL_INVALID_ARGUMENT,
        "corrupted executable: truncated or corrupt (%zu bytes, header "
        "declares %llu)",
        size,
        (unsigned long long)(sizeof *h + (uint64_t)h->key_len + h->target_len + h->payload_len));
  }
  const char* bytes = data;
  const char* key = bytes + sizeof *h;
  const char* want = device->compat_key;
  if (h->key_len != strlen(want) || memcmp(key, want, h->key_len) != 0) {
    return nxhal_status_make(
        NXHAL_FAILED_PRECONDITION,
        "serialized executable was made for \"%.*s\" but this device is \"%s\"", (int)h->key_len,
        key, want);
  }
  uint8_t digest[NXHAL_DIGEST_SIZE];
  if (!authenticated) npu_blob_digest(h, bytes + sizeof *h + h->key_len, digest);
  if (!authenticated && !nxhal_digest_equal(digest, h->digest)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "corrupted executable: digest mismatch");
  }
  if (h->precision > NPU_PRECISION_MAX) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "corrupted executable: unknown precision code %u", h->precision);
  }
  return NULL;
}

/* The core to import a blob's stream for `target` through, and the run
 * settings its executable keeps: the blob's (after the target's NUL), or
 * none. *owned is set when the core is a fresh one the caller frees: the
 * settings can only reach OpenVINO's C import through a core's properties. */
static nxhal_status_t* import_core(nxhal_device_t* device, const npu_blob_header_t* h,
                                   const char* target, char** settings, ov_core_t** core,
                                   int* owned) {
  *owned = 0;
  *settings = NULL;
  size_t name_len = strlen(target);
  if (name_len + 1 < h->target_len) {
    npu_compile_options_t run;
    memset(&run, 0, sizeof run);
    if (!npu_run_settings_parse(target + name_len + 1, &run)) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "corrupted executable: bad run settings");
    }
    const char* kv[2 * NPU_MAX_RUN_PROPERTIES];
    size_t n = 0;
    npu_run_text_t text;
    npu_run_properties(&run, &text, kv, &n);
    *settings = npu_run_settings_format(&run);
    nxhal_status_t* st = NULL;
    if (n > 0) {
      st = npu_client_settings_core(device->client, (int)h->precision, target, kv, n, core);
      *owned = st == NULL;
    }
    npu_compile_options_free(&run);
    if (n > 0 || st != NULL) return st;
  }
  return npu_client_import_core(device->client, (int)h->precision, target, core);
}

nxhal_status_t* npu_executable_deserialize(nxhal_device_t* device, const void* data, size_t size,
                                           const nxhal_option_t* options, size_t num_options,
                                           nxhal_executable_t** out_executable) {
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  if (size > 0) NXHAL_REQUIRE_ARG(data);
  *out_executable = NULL;
  /* Same names as compile, so callers can pass one option set to both; the
   * compile (its blob's run settings) already fixed their effect. */
  int authenticated = 0;
  nxhal_status_t* st = npu_deserialize_options_check(options, num_options, &authenticated);
  if (st != NULL) return st;
  npu_compile_options_t opts;
  st = npu_compile_options_parse(options, num_options, NULL, 1, &opts);
  npu_compile_options_free(&opts);
  if (st != NULL) return st;
  npu_blob_header_t h;
  st = check_blob(device, data, size, authenticated, &h);
  if (st != NULL) return st;
  const char* bytes = data;
  char target[NPU_BLOB_TARGET_MAX + 1];
  memcpy(target, bytes + sizeof h + h.key_len, h.target_len);
  target[h.target_len] = '\0';
  st = check_target_available(device, target);
  ov_core_t* core = NULL;
  char* settings = NULL;
  int owned = 0;
  if (st == NULL) st = import_core(device, &h, target, &settings, &core, &owned);
  if (st != NULL) return st;
  /* OpenVINO's CPU plugin keeps referring to the stream's weights after
   * import (measured: results turn to garbage once the caller's bytes are
   * freed), so the executable owns a copy of the stream. */
  size_t payload_len = (size_t)h.payload_len;
  char* stream = malloc(payload_len ? payload_len : 1);
  ov_compiled_model_t* compiled = NULL;
  ov_status_e ost = GENERAL_ERROR;
  if (stream != NULL) {
    memcpy(stream, bytes + sizeof h + h.key_len + h.target_len, payload_len);
    ost = npu_ov.ov_core_import_model(core, stream, payload_len, target, &compiled);
  }
  /* The compiled model holds what it needs of the core's plugin. */
  if (owned) npu_ov.ov_core_free(core);
  if (stream == NULL) st = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  if (st == NULL && ost != OK)
    st = npu_ov_error(NXHAL_INVALID_ARGUMENT, ost, "importing the compiled model");
  if (st == NULL) st = executable_new(device, compiled, target, out_executable);
  if (st != NULL) {
    free(stream);
    free(settings);
    return st;
  }
  (*out_executable)->precision = (int)h.precision;
  (*out_executable)->run_settings = settings;
  (*out_executable)->imported = stream;
  (*out_executable)->imported_size = payload_len;
  return NULL;
}
