/*
 * fake_backend.c -- a test stand-in for libnxhal_graphcore_poplar.so. It
 * implements the internal backend table over host memory so the tests can
 * drive the always-built library's forwarding, checks and serialization.
 * It is not Poplar and never claims to be: its device is named
 * "fake test backend" and its SDK version says so.
 *
 * Programs are text: "add <value> <dtype> <d0,d1,...>" makes an executable
 * with input "x" and output "y" = x + value (dtype f32 only runs). Two
 * programs stand for the real backend's mapped failures, so the tests see
 * the frontend pass them on: "oom" fails to compile as PopART's
 * memory_allocation_err does (RESOURCE_EXHAUSTED), and "unserializable add
 * ..." compiles and runs but refuses serialize (UNIMPLEMENTED), as an ONNX
 * program on the IPU Model does.
 * Environment: GC_FAKE_DEVICES=<n> hardware devices (default 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#if defined(__GNUC__)
#define GC_FAKE_EXPORT __attribute__((visibility("default")))
#else
#define GC_FAKE_EXPORT
#endif

#ifdef GC_FAKE_NEEDS_POPLAR
int gc_fake_poplar_marker(void);
#endif

static const nxhal_graphcore_host_t* g_host;

struct nxhal_graphcore_bclient {
  size_t num_devices;
  int is_model;
  int is_offline;
  int64_t num_ipus;
  char key[128];
};

struct nxhal_graphcore_bexe {
  char* text;
  char settings[96];  /* the compile settings it got, echoed by serialize */
  int unserializable; /* serialize answers UNIMPLEMENTED */
  double addend;
  int runnable;
  int64_t dims[8];
  nxhal_io_info_t in;
  nxhal_io_info_t out;
};

static nxhal_status_t* fail(nxhal_status_code_t code, const char* message) {
  return g_host->status_make(code, message);
}

static const char* fake_sdk_version(void) {
  return "fake-0.0 (test stand-in, not Poplar)";
}

static nxhal_status_t* fake_client_open(const nxhal_graphcore_config_t* config,
                                        nxhal_graphcore_bclient_t** out, const char** out_reason) {
  nxhal_graphcore_bclient_t* c = (nxhal_graphcore_bclient_t*)calloc(1, sizeof(*c));
  const char* env = getenv("GC_FAKE_DEVICES");
  if (config->struct_size < NXHAL_GRAPHCORE_CONFIG_STRUCT_SIZE) {
    free(c);
    return fail(NXHAL_INTERNAL, "fake backend: config too small");
  }
  c->num_ipus = config->num_ipus;
  if (config->ipu_model) {
    c->num_devices = 1;
    c->is_model = 1;
  } else if (config->compile_only) {
    c->num_devices = 1;
    c->is_offline = 1;
  } else {
    c->num_devices = env != NULL ? (size_t)atoi(env) : 0;
  }
  snprintf(c->key, sizeof(c->key), "graphcore:fake-0.0:ipu2:%lldipu", (long long)c->num_ipus);
  *out_reason = "fake DeviceManager returned no devices";
  *out = c;
  return NULL;
}

static void fake_client_close(nxhal_graphcore_bclient_t* c) {
  free(c);
}

static nxhal_status_t* fake_device_count(nxhal_graphcore_bclient_t* c, size_t* out) {
  *out = c->num_devices;
  return NULL;
}

static nxhal_status_t* fake_device_describe(nxhal_graphcore_bclient_t* c, size_t index,
                                            nxhal_graphcore_device_desc_t* out) {
  if (index >= c->num_devices) return fail(NXHAL_INVALID_ARGUMENT, "fake backend: bad index");
  out->name = c->is_model ? "IPU Model (fake test backend)" : "fake test backend IPU";
  out->arch = "ipu2";
  out->compat_key = c->key;
  out->device_id = c->is_model || c->is_offline ? -1 : (int64_t)index;
  out->num_ipus = c->num_ipus;
  out->tiles_per_ipu = 1472;
  out->bytes_per_tile = 638976;
  out->is_ipu_model = c->is_model;
  out->is_offline = c->is_offline;
  return NULL;
}

static nxhal_status_t* fake_compile(nxhal_graphcore_bclient_t* c, size_t index,
                                    const nxhal_program_t* program,
                                    const nxhal_graphcore_compile_config_t* config,
                                    nxhal_graphcore_bexe_t** out) {
  nxhal_graphcore_bexe_t* e;
  char dtype[16];
  char dims[128];
  char* text;
  char* p;
  const char* body;
  int rank = 0;
  int unserializable;
  if (index >= c->num_devices) return fail(NXHAL_INVALID_ARGUMENT, "fake backend: bad index");
  if (program->size == 3 && memcmp(program->data, "oom", 3) == 0) {
    return fail(NXHAL_RESOURCE_EXHAUSTED,
                "graphcore: compile: out of IPU tile memory: fake backend (lower "
                "available_memory_proportion or use more IPUs)");
  }
  text = (char*)malloc(program->size + 1);
  if (text == NULL) return fail(NXHAL_RESOURCE_EXHAUSTED, "fake backend: oom");
  memcpy(text, program->data, program->size);
  text[program->size] = '\0';
  unserializable = strncmp(text, "unserializable ", 15) == 0;
  body = unserializable ? text + 15 : text;
  e = (nxhal_graphcore_bexe_t*)calloc(1, sizeof(*e));
  if (e == NULL || sscanf(body, "add %lf %15s %127s", &e->addend, dtype, dims) != 3 ||
      strcmp(dtype, "f32") != 0) {
    free(text);
    free(e);
    return fail(NXHAL_INVALID_ARGUMENT,
                "fake backend: cannot parse program (want 'add <v> f32 <dims>')");
  }
  for (p = strtok(dims, ","); p != NULL && rank < 8; p = strtok(NULL, ",")) {
    e->dims[rank++] = atoll(p);
  }
  e->text = text;
  e->unserializable = unserializable;
  snprintf(e->settings, sizeof(e->settings), " # f16=%d amp=%g half=%d",
           (int)config->precision_float16, config->available_memory_proportion,
           (int)config->half_partials);
  e->runnable = !c->is_offline;
  e->in.struct_size = sizeof(e->in);
  e->in.name = "x";
  e->in.desc.struct_size = sizeof(e->in.desc);
  e->in.desc.dtype = NXHAL_DTYPE_F32;
  e->in.desc.rank = rank;
  e->in.desc.dims = e->dims;
  e->out = e->in;
  e->out.name = "y";
  *out = e;
  return NULL;
}

static void fake_executable_free(nxhal_graphcore_bexe_t* e) {
  if (e == NULL) return;
  free(e->text);
  free(e);
}

static nxhal_status_t* fake_executable_io(nxhal_graphcore_bexe_t* e, nxhal_io_kind_t kind,
                                          const nxhal_io_info_t** infos, size_t* count) {
  *infos = kind == NXHAL_IO_INPUT ? &e->in : &e->out;
  *count = 1;
  return NULL;
}

static nxhal_status_t* fake_execute(nxhal_graphcore_bexe_t* e, const void* const* inputs,
                                    const size_t* input_sizes, size_t num_inputs,
                                    void* const* outputs, const size_t* output_sizes,
                                    size_t num_outputs) {
  size_t i;
  const float* x;
  float* y;
  if (!e->runnable) {
    return fail(NXHAL_FAILED_PRECONDITION, "fake backend: compile_only client cannot execute");
  }
  if (num_inputs != 1 || num_outputs != 1 || input_sizes[0] != output_sizes[0]) {
    return fail(NXHAL_INTERNAL, "fake backend: frontend passed mismatched io");
  }
  x = (const float*)inputs[0];
  y = (float*)outputs[0];
  for (i = 0; i < input_sizes[0] / sizeof(float); ++i) y[i] = x[i] + (float)e->addend;
  return NULL;
}

static nxhal_status_t* fake_serialize(nxhal_graphcore_bexe_t* e, nxhal_graphcore_sink_fn sink,
                                      void* user) {
  if (e->unserializable) {
    return fail(NXHAL_UNIMPLEMENTED,
                "graphcore: serialize: executables compiled on the IPU Model cannot be "
                "serialized (PopART saves executables only for offline-capable devices)");
  }
  /* sscanf in fake_compile reads three tokens, so the echo after them is
   * ignored when the bytes come back through deserialize. */
  if (sink(user, e->text, strlen(e->text)) != 0 ||
      (strstr(e->text, " # ") == NULL && sink(user, e->settings, strlen(e->settings)) != 0)) {
    return fail(NXHAL_RESOURCE_EXHAUSTED, "fake backend: sink failed");
  }
  return NULL;
}

static const nxhal_graphcore_backend_t g_table = {
    sizeof(nxhal_graphcore_backend_t),
    1,
    fake_sdk_version,
    fake_client_open,
    fake_client_close,
    fake_device_count,
    fake_device_describe,
    fake_compile,
    fake_executable_free,
    fake_executable_io,
    fake_execute,
    fake_serialize,
};

GC_FAKE_EXPORT const nxhal_graphcore_backend_t* nxhal_graphcore_backend_v1(
    const nxhal_graphcore_host_t* host);

GC_FAKE_EXPORT const nxhal_graphcore_backend_t* nxhal_graphcore_backend_v1(
    const nxhal_graphcore_host_t* host) {
#ifdef GC_FAKE_NEEDS_POPLAR
  if (gc_fake_poplar_marker() != 42) return NULL;
#endif
  if (host == NULL || host->struct_size < NXHAL_GRAPHCORE_HOST_STRUCT_SIZE) return NULL;
  g_host = host;
  return &g_table;
}
