/*
 * export_check.c -- does OpenVINO's exported stream compute what the model
 * it came from computes?
 *
 * OpenVINO 2026.4's CPU plugin exports some compiled models whose import
 * computes other values, with no error (measured: every forward or reverse
 * ONNX LSTM, GRU and RNN gives errors of 0.3 to 1.4 after import, where the
 * bidirectional ones are exact). A serialized executable feeds nx_hal's
 * compile cache and the sandbox's hand-over from its child, so such a stream
 * would make a cached model silently wrong. Before a stream leaves the
 * plugin it is imported and both models run on one fixed input; a stream
 * whose outputs differ is refused (UNIMPLEMENTED: the core then compiles
 * again instead of loading). The C API cannot list a model's operations, so
 * the check is by result, which also covers export bugs not yet seen. It
 * runs on models with static output shapes only (see npu_export_check), the
 * recurrent models' case; others are only imported. A stream that does not
 * import at all is refused the same way.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "openvino.h"

/* Values in [-1, 1), a fixed sequence (the same input on every run). */
static float pattern_value(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)(*state >> 8) / (float)(1u << 23) - 1.0f;
}

/* An IEEE half for |v| < 2 (normal numbers; tiny ones as zero). */
static uint16_t to_f16(float v) {
  uint16_t sign = v < 0 ? 0x8000u : 0;
  int exp = 0;
  float m = frexpf(fabsf(v), &exp); /* |v| = m * 2^exp, m in [0.5, 1) */
  if (m == 0 || exp < -13) return sign;
  uint16_t mantissa = (uint16_t)((m * 2 - 1) * 1024);
  return (uint16_t)(sign | (uint16_t)((exp - 1 + 15) << 10) | mantissa);
}

/* Fills `n` elements of `type` at `data`: floats from the pattern; integers
 * and booleans with 1 (a valid index, id, mask or divisor for most models,
 * where 0 divides by zero: an integer division by zero is SIGFPE). */
static void fill(ov_element_type_e type, void* data, size_t n, uint32_t* state) {
  for (size_t i = 0; i < n; i++) {
    switch (type) {
      case F32: ((float*)data)[i] = pattern_value(state); break;
      case F64: ((double*)data)[i] = pattern_value(state); break;
      case F16: ((uint16_t*)data)[i] = to_f16(pattern_value(state)); break;
      case BF16: {
        float v = pattern_value(state);
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        ((uint16_t*)data)[i] = (uint16_t)(bits >> 16);
        break;
      }
      case BOOLEAN:
      case U8:
      case I8: ((uint8_t*)data)[i] = 1; break;
      case I16:
      case U16: ((uint16_t*)data)[i] = 1; break;
      case I32:
      case U32: ((uint32_t*)data)[i] = 1; break;
      case I64:
      case U64: ((uint64_t*)data)[i] = 1; break;
      default: break; /* sub-byte and other types: zeros */
    }
  }
}

/* Whether two outputs agree: floats within 1e-4 relative to the output's
 * largest magnitude (the same stream may run in another thread order),
 * NaN where the other has NaN; any other type byte for byte. */
static int outputs_agree(ov_element_type_e type, const void* a, const void* b, size_t bytes,
                         double* worst) {
  *worst = 0;
  if (type != F32 && type != F64) return memcmp(a, b, bytes) == 0;
  size_t n = bytes / (type == F32 ? sizeof(float) : sizeof(double));
  double scale = 0;
  for (size_t i = 0; i < n; i++) {
    double x = type == F32 ? ((const float*)b)[i] : ((const double*)b)[i];
    if (isfinite(x) && fabs(x) > scale) scale = fabs(x);
  }
  for (size_t i = 0; i < n; i++) {
    double x = type == F32 ? ((const float*)a)[i] : ((const double*)a)[i];
    double y = type == F32 ? ((const float*)b)[i] : ((const double*)b)[i];
    if (isnan(x) || isnan(y)) {
      if (isnan(x) != isnan(y)) *worst = INFINITY;
      continue;
    }
    double d = x == y ? 0 : fabs(x - y);
    if (d > *worst) *worst = d;
  }
  return *worst <= 1e-4 * (scale > 1 ? scale : 1);
}

/* One inference of `model` on `inputs`; outputs[] owned by the caller. */
static ov_status_e run_once(ov_compiled_model_t* model, ov_tensor_t** inputs, size_t n_in,
                            ov_tensor_t** outputs, size_t n_out) {
  ov_infer_request_t* r = NULL;
  ov_status_e st = npu_ov.ov_compiled_model_create_infer_request(model, &r);
  for (size_t i = 0; st == OK && i < n_in; i++)
    st = npu_ov.ov_infer_request_set_input_tensor_by_index(r, i, inputs[i]);
  if (st == OK) st = npu_ov.ov_infer_request_infer(r);
  for (size_t o = 0; st == OK && o < n_out; o++)
    st = npu_ov.ov_infer_request_get_output_tensor_by_index(r, o, &outputs[o]);
  if (r != NULL) npu_ov.ov_infer_request_free(r);
  return st;
}

/* The inputs: each static shape as compiled (a dynamic dimension as 1),
 * filled by `fill`. data[i] owns the memory tensors[i] wraps. */
static int make_inputs(const nxhal_executable_t* exe, ov_tensor_t** tensors, void** data) {
  uint32_t state = 12345u;
  for (size_t i = 0; i < exe->num_inputs; i++) {
    const nxhal_tensor_desc_t* d = &exe->inputs[i].desc;
    int64_t dims[NPU_MAX_RANK];
    if (d->rank > NPU_MAX_RANK) return 0;
    size_t n = 1;
    for (int64_t k = 0; k < d->rank; k++) {
      dims[k] = d->dims[k] < 0 ? 1 : d->dims[k];
      n *= (size_t)dims[k];
    }
    size_t size = nxhal_dtype_size(d->dtype);
    if (size == 0 || n > ((size_t)1 << 28)) return 0; /* not a check worth its memory */
    data[i] = calloc(n ? n : 1, size);
    if (data[i] == NULL) return 0;
    fill(exe->input_ov_types[i], data[i], n, &state);
    ov_shape_t shape = {0};
    ov_status_e st = OK;
    if (d->rank > 0) st = npu_ov.ov_shape_create(d->rank, dims, &shape);
    if (st == OK)
      st = npu_ov.ov_tensor_create_from_host_ptr(exe->input_ov_types[i], shape, data[i],
                                                 &tensors[i]);
    if (d->rank > 0) npu_ov.ov_shape_free(&shape);
    if (st != OK) return 0;
  }
  return 1;
}

/* Compares every output of the two runs; a refusal names the first that differs. */
static nxhal_status_t* compare(const nxhal_executable_t* exe, ov_tensor_t** want,
                               ov_tensor_t** got) {
  for (size_t o = 0; o < exe->num_outputs; o++) {
    size_t bytes_a = 0, bytes_b = 0;
    void *a = NULL, *b = NULL;
    if (npu_ov.ov_tensor_get_byte_size(got[o], &bytes_a) != OK ||
        npu_ov.ov_tensor_get_byte_size(want[o], &bytes_b) != OK ||
        npu_ov.ov_tensor_data(got[o], &a) != OK || npu_ov.ov_tensor_data(want[o], &b) != OK)
      return NULL; /* unreadable: not evidence either way */
    double worst = 0;
    if (bytes_a != bytes_b || !outputs_agree(exe->output_ov_types[o], a, b, bytes_a, &worst)) {
      return nxhal_status_make(
          NXHAL_UNIMPLEMENTED,
          "OpenVINO's exported stream of this model computes other values once imported (output "
          "'%s' differs by %g on a fixed input; a vendor bug seen with LSTM, GRU and RNN): it is "
          "not serialized, so it is compiled again rather than loaded from a cache",
          exe->outputs[o].name, bytes_a != bytes_b ? INFINITY : worst);
    }
  }
  return NULL;
}

nxhal_status_t* npu_export_check(nxhal_executable_t* exe, ov_core_t* core, const char* stream,
                                 size_t size) {
  ov_compiled_model_t* imported = NULL;
  /* A stream its own OpenVINO cannot import is refused here, not handed out
   * to fail at every load (OpenVINO 2025.1 exports models holding the IsNaN
   * nx_hal's NaN rewrites add, then cannot read them back). */
  ov_status_e ost = npu_ov.ov_core_import_model(core, stream, size, exe->target, &imported);
  if (ost != OK) {
    return npu_ov_error(
        NXHAL_UNIMPLEMENTED, ost,
        "importing the stream OpenVINO exported for this model (checked before it is "
        "serialized)");
  }
  /* Run only models whose output shapes compile fixes: a made-up input to one
   * whose sizes follow its values (Range, Tile, NonZero) can ask for any
   * amount of memory or divide by zero (Range with a step of 0 is SIGFPE). */
  for (size_t o = 0; o < exe->num_outputs; o++) {
    if (!exe->output_static[o]) {
      npu_ov.ov_compiled_model_free(imported);
      return NULL;
    }
  }
  size_t n_in = exe->num_inputs, n_out = exe->num_outputs;
  ov_tensor_t** inputs = calloc(n_in + 1, sizeof *inputs);
  void** data = calloc(n_in + 1, sizeof *data);
  ov_tensor_t** want = calloc(n_out + 1, sizeof *want);
  ov_tensor_t** got = calloc(n_out + 1, sizeof *got);
  nxhal_status_t* st = NULL;
  /* A model that cannot run on the made-up input (a dynamic dimension that
   * must not be 1, say) stays unchecked, as before this check. */
  if (inputs != NULL && data != NULL && want != NULL && got != NULL &&
      make_inputs(exe, inputs, data) && run_once(exe->compiled, inputs, n_in, want, n_out) == OK &&
      run_once(imported, inputs, n_in, got, n_out) == OK) {
    st = compare(exe, want, got);
  }
  for (size_t o = 0; o < n_out && want != NULL && got != NULL; o++) {
    if (want[o] != NULL) npu_ov.ov_tensor_free(want[o]);
    if (got[o] != NULL) npu_ov.ov_tensor_free(got[o]);
  }
  for (size_t i = 0; i < n_in && inputs != NULL && data != NULL; i++) {
    if (inputs[i] != NULL) npu_ov.ov_tensor_free(inputs[i]);
    free(data[i]);
  }
  free(inputs);
  free(data);
  free(want);
  free(got);
  npu_ov.ov_compiled_model_free(imported);
  return st;
}
