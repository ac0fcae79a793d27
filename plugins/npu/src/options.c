/* options.c -- the typed compile options and their OpenVINO meaning. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* Names, types and ranges; the string values are checked below (precision:
 * f32, bf16, f16 or auto). The client table (client.c) repeats these
 * entries, so both state the same range. */
static const nxhal_option_spec_t kCompileSpecs[] = {
    {"target", NXHAL_VALUE_STRING, 0, 0, 0},
    {"precision", NXHAL_VALUE_STRING, 0, 0, 0},
    {"performance", NXHAL_VALUE_STRING, 0, 0, 0},
    {"streams", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, NPU_MAX_STREAMS)},
};

/* Checks a target string: a device ("NPU", "CPU", "GPU", "GPU.1") or a
 * virtual device with a list ("AUTO:NPU,CPU", "HETERO:NPU,CPU", "MULTI:..").
 * Only the shape is checked here; OpenVINO judges the names. */
static nxhal_status_t* check_target(const char* target) {
  size_t n = strlen(target);
  if (n == 0 || n > 256) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option 'target': empty or too long");
  }
  for (size_t i = 0; i < n; i++) {
    char c = target[i];
    if (!(isalnum((unsigned char)c) || c == ':' || c == ',' || c == '.' || c == '_')) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'target': invalid character '%c' in \"%s\" (expected e.g. "
                               "NPU, CPU, GPU, AUTO:NPU,CPU or HETERO:NPU,CPU)",
                               c, target);
    }
  }
  const char* colon = strchr(target, ':');
  if (colon != NULL) {
    size_t head = (size_t)(colon - target);
    if (!((head == 4 && strncmp(target, "AUTO", 4) == 0) ||
          (head == 6 && strncmp(target, "HETERO", 6) == 0) ||
          (head == 5 && strncmp(target, "MULTI", 5) == 0)) ||
        colon[1] == '\0') {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'target': \"%s\" is not AUTO:<list>, HETERO:<list> or "
                               "MULTI:<list>",
                               target);
    }
  }
  return NULL;
}

/* The precisions a compile or a client may ask for; "auto" sets no hint, so
 * OpenVINO picks (see executable.c, precision_property). */
static int is_precision(const char* p) {
  return npu_precision_code(p) != 0;
}

int npu_precision_code(const char* precision) {
  static const char* const kNames[] = {"f32", "bf16", "f16", "auto"};
  for (int i = 0; precision != NULL && i < NPU_PRECISION_MAX; i++) {
    if (strcmp(precision, kNames[i]) == 0) return i + 1;
  }
  return 0;
}

const char* npu_precision_name(int code) {
  static const char* const kNames[] = {NULL, "f32", "bf16", "f16", "auto"};
  return code >= 0 && code <= NPU_PRECISION_MAX ? kNames[code] : NULL;
}

void npu_compile_options_free(npu_compile_options_t* opts) {
  free(opts->target);
  free(opts->precision);
  free(opts->performance);
  opts->target = opts->precision = opts->performance = NULL;
}

nxhal_status_t* npu_compile_options_parse(const nxhal_option_t* options, size_t num_options,
                                          const npu_compile_options_t* defaults, int client_level,
                                          npu_compile_options_t* out) {
  memset(out, 0, sizeof *out);
  out->streams = -1;
  if (defaults != NULL) {
    out->target = npu_strdup(defaults->target);
    out->precision = npu_strdup(defaults->precision);
    out->performance = npu_strdup(defaults->performance);
    out->streams = defaults->streams;
  }
  if (num_options > 0 && options == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "options is NULL");
  }
  /* The client-level check already covered its extra names. */
  if (!client_level) {
    nxhal_status_t* st = nxhal_options_check(options, num_options, kCompileSpecs,
                                             sizeof kCompileSpecs / sizeof kCompileSpecs[0]);
    if (st != NULL) return st;
  }
  const nxhal_option_t* o;
  if ((o = nxhal_options_find(options, num_options, "target")) != NULL) {
    nxhal_status_t* st = check_target(o->string_value);
    if (st != NULL) return st;
    free(out->target);
    out->target = npu_strdup(o->string_value);
  }
  if ((o = nxhal_options_find(options, num_options, "precision")) != NULL) {
    const char* p = o->string_value;
    if (!is_precision(p)) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'precision': \"%s\" is not one of f32, bf16, f16, auto "
                               "(auto: OpenVINO's own choice, bf16 on CPUs with bf16 units)",
                               p);
    }
    free(out->precision);
    out->precision = npu_strdup(p);
  }
  if ((o = nxhal_options_find(options, num_options, "performance")) != NULL) {
    const char* p = o->string_value;
    const char* mode = NULL;
    if (strcasecmp(p, "latency") == 0) mode = "LATENCY";
    if (strcasecmp(p, "throughput") == 0) mode = "THROUGHPUT";
    if (mode == NULL) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'performance': \"%s\" is not latency or throughput", p);
    }
    free(out->performance);
    out->performance = npu_strdup(mode);
  }
  /* The spec's range (1..NPU_MAX_STREAMS) was checked above, or by the client table. */
  if ((o = nxhal_options_find(options, num_options, "streams")) != NULL) {
    out->streams = o->int64_value;
  }
  return NULL;
}
