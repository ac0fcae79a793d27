/* options.c -- client and compile options of the Graphcore plugin. */
#include "options.h"

#include <string.h>

/* Poplar reserves IPUs in power-of-two groups; 64 is the largest group a
 * single Pod64 partition offers, and more would be a typo here. */
#define NXHAL_GC_MAX_IPUS 64

/* Names, types and ranges. Checked here on top: num_ipus being a power of
 * two, and available_memory_proportion's range (0, 1], whose open lower
 * end an inclusive spec range cannot state. */
static const nxhal_option_spec_t gc_client_specs[] = {
    {"num_ipus", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, NXHAL_GC_MAX_IPUS)},
    {"precision", NXHAL_VALUE_STRING, 0, 0, 0},
    {"available_memory_proportion", NXHAL_VALUE_DOUBLE, 0, 0, 0},
    {"half_partials", NXHAL_VALUE_BOOL, 0, 0, 0},
    {"compile_only", NXHAL_VALUE_BOOL, 0, 0, 0},
    {"ipu_model", NXHAL_VALUE_BOOL, 0, 0, 0},
};

static const nxhal_option_spec_t gc_compile_specs[] = {
    {"precision", NXHAL_VALUE_STRING, 0, 0, 0},
    {"available_memory_proportion", NXHAL_VALUE_DOUBLE, 0, 0, 0},
    {"half_partials", NXHAL_VALUE_BOOL, 0, 0, 0},
};

#define GC_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Value checks shared by client and compile options. */
static nxhal_status_t* gc_parse_precision(const nxhal_option_t* option, int32_t* out_f16) {
  if (strcmp(option->string_value, "float16") == 0) {
    *out_f16 = 1;
  } else if (strcmp(option->string_value, "float32") == 0) {
    *out_f16 = 0;
  } else {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "option 'precision' must be \"float16\" or \"float32\", got \"%s\"",
                             option->string_value);
  }
  return NULL;
}

static nxhal_status_t* gc_parse_amp(const nxhal_option_t* option, double* out) {
  double v = option->double_value;
  /* NaN fails both comparisons, so test for the good range, not the bad. */
  if (!(v > 0.0 && v <= 1.0)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "option 'available_memory_proportion' must be in (0, 1], got %g", v);
  }
  *out = v;
  return NULL;
}

/* The options clients and compiles share: precision, available memory
 * proportion, half partials. Leaves the outputs alone for absent options. */
static nxhal_status_t* gc_parse_numerics(const nxhal_option_t* options, size_t num_options,
                                         int32_t* precision_float16, double* amp,
                                         int32_t* half_partials) {
  const nxhal_option_t* o;
  nxhal_status_t* status;
  if ((o = nxhal_options_find(options, num_options, "precision")) != NULL) {
    status = gc_parse_precision(o, precision_float16);
    if (status != NULL) return status;
  }
  if ((o = nxhal_options_find(options, num_options, "available_memory_proportion")) != NULL) {
    status = gc_parse_amp(o, amp);
    if (status != NULL) return status;
  }
  if ((o = nxhal_options_find(options, num_options, "half_partials")) != NULL) {
    *half_partials = o->bool_value;
  }
  return NULL;
}

nxhal_status_t* nxhal_graphcore_parse_client_options(const nxhal_option_t* options,
                                                     size_t num_options,
                                                     nxhal_graphcore_config_t* out) {
  const nxhal_option_t* o;
  nxhal_status_t* status;
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  out->num_ipus = 1;
  status = nxhal_options_check(options, num_options, gc_client_specs, GC_COUNT(gc_client_specs));
  if (status != NULL) return status;

  if ((o = nxhal_options_find(options, num_options, "num_ipus")) != NULL) {
    int64_t n = o->int64_value; /* in 1..NXHAL_GC_MAX_IPUS: the spec's range */
    if ((n & (n - 1)) != 0) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'num_ipus' must be a power of two from 1 to %d, got %lld",
                               NXHAL_GC_MAX_IPUS, (long long)n);
    }
    out->num_ipus = n;
  }
  status = gc_parse_numerics(options, num_options, &out->precision_float16,
                             &out->available_memory_proportion, &out->half_partials);
  if (status != NULL) return status;
  if ((o = nxhal_options_find(options, num_options, "compile_only")) != NULL) {
    out->compile_only = o->bool_value;
  }
  if ((o = nxhal_options_find(options, num_options, "ipu_model")) != NULL) {
    out->ipu_model = o->bool_value;
  }
  if (out->compile_only && out->ipu_model) {
    return nxhal_status_make(
        NXHAL_INVALID_ARGUMENT,
        "options 'compile_only' and 'ipu_model' cannot both be true "
        "(compile_only targets real IPUs offline; ipu_model runs on the host)");
  }
  return NULL;
}

nxhal_status_t* nxhal_graphcore_parse_compile_options(const nxhal_option_t* options,
                                                      size_t num_options,
                                                      const nxhal_graphcore_config_t* client,
                                                      nxhal_graphcore_compile_config_t* out) {
  nxhal_status_t* status;
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  out->precision_float16 = client->precision_float16;
  out->available_memory_proportion = client->available_memory_proportion;
  out->half_partials = client->half_partials;
  status = nxhal_options_check(options, num_options, gc_compile_specs, GC_COUNT(gc_compile_specs));
  if (status != NULL) return status;
  return gc_parse_numerics(options, num_options, &out->precision_float16,
                           &out->available_memory_proportion, &out->half_partials);
}
