/* options.c -- the typed compile options and their OpenVINO meaning. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* Names, types and ranges; the string values are checked below (precision:
 * f32, bf16, f16 or auto; performance: latency, throughput or
 * cumulative_throughput). The client table (client.c) repeats the compile
 * entries, so both state the same range. Deserialize takes compile's names
 * (callers pass one option set to both) and one more, the last
 * (`authenticated`: nx_hal.h, executable_deserialize). */
static const nxhal_option_spec_t kCompileSpecs[] = {
    {"target", NXHAL_VALUE_STRING, 0, 0, 0},
    {"precision", NXHAL_VALUE_STRING, 0, 0, 0},
    {"performance", NXHAL_VALUE_STRING, 0, 0, 0},
    {"streams", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, NPU_MAX_STREAMS)},
    {"cpu_pinning", NXHAL_VALUE_BOOL, 0, 0, 0},
    {"inference_threads", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, NPU_MAX_THREADS)},
    {"authenticated", NXHAL_VALUE_BOOL, 0, 0, 0},
};
#define NPU_DESERIALIZE_SPECS (sizeof kCompileSpecs / sizeof kCompileSpecs[0])
#define NPU_COMPILE_SPECS (NPU_DESERIALIZE_SPECS - 1)

nxhal_status_t* npu_deserialize_options_check(const nxhal_option_t* options, size_t num_options,
                                              int* out_authenticated) {
  nxhal_status_t* st =
      nxhal_options_check(options, num_options, kCompileSpecs, NPU_DESERIALIZE_SPECS);
  if (st != NULL) return st;
  const nxhal_option_t* o = nxhal_options_find(options, num_options, "authenticated");
  *out_authenticated = o != NULL && o->bool_value != 0;
  return NULL;
}

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

/* The OpenVINO hint for a performance value, or NULL for none of them. */
static const char* performance_mode(const char* value) {
  static const char* const kModes[][2] = {{"latency", "LATENCY"},
                                          {"throughput", "THROUGHPUT"},
                                          {"cumulative_throughput", "CUMULATIVE_THROUGHPUT"}};
  for (size_t i = 0; i < sizeof kModes / sizeof kModes[0]; i++) {
    if (strcasecmp(value, kModes[i][0]) == 0 || strcmp(value, kModes[i][1]) == 0) {
      return kModes[i][1];
    }
  }
  return NULL;
}

/* The string-valued options (types checked by the spec table). */
static nxhal_status_t* parse_strings(const nxhal_option_t* options, size_t num_options,
                                     npu_compile_options_t* out) {
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
    const char* mode = performance_mode(o->string_value);
    if (mode == NULL) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "option 'performance': \"%s\" is not one of latency, throughput, "
                               "cumulative_throughput",
                               o->string_value);
    }
    free(out->performance);
    out->performance = npu_strdup(mode);
  }
  return NULL;
}

nxhal_status_t* npu_compile_options_parse(const nxhal_option_t* options, size_t num_options,
                                          const npu_compile_options_t* defaults, int client_level,
                                          npu_compile_options_t* out) {
  memset(out, 0, sizeof *out);
  out->streams = out->inference_threads = -1;
  out->cpu_pinning = -1;
  if (defaults != NULL) {
    out->target = npu_strdup(defaults->target);
    out->precision = npu_strdup(defaults->precision);
    out->performance = npu_strdup(defaults->performance);
    out->streams = defaults->streams;
    out->cpu_pinning = defaults->cpu_pinning;
    out->inference_threads = defaults->inference_threads;
  }
  if (num_options > 0 && options == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "options is NULL");
  }
  /* The client-level check already covered its extra names. */
  if (!client_level) {
    nxhal_status_t* st =
        nxhal_options_check(options, num_options, kCompileSpecs, NPU_COMPILE_SPECS);
    if (st != NULL) return st;
  }
  nxhal_status_t* st = parse_strings(options, num_options, out);
  if (st != NULL) return st;
  /* Ranges (streams 1..NPU_MAX_STREAMS, inference_threads 1..NPU_MAX_THREADS)
   * and types were checked above, or by the client table. */
  const nxhal_option_t* o;
  if ((o = nxhal_options_find(options, num_options, "streams")) != NULL) {
    out->streams = o->int64_value;
  }
  if ((o = nxhal_options_find(options, num_options, "inference_threads")) != NULL) {
    out->inference_threads = o->int64_value;
  }
  if ((o = nxhal_options_find(options, num_options, "cpu_pinning")) != NULL) {
    out->cpu_pinning = o->bool_value != 0;
  }
  return NULL;
}

void npu_run_properties(const npu_compile_options_t* opts, npu_run_text_t* text, const char** kv,
                        size_t* n) {
  if (opts->performance != NULL) {
    kv[(*n)++] = npu_ov.ov_property_key_hint_performance_mode;
    kv[(*n)++] = opts->performance;
  }
  if (opts->streams > 0) {
    snprintf(text->streams, sizeof text->streams, "%lld", (long long)opts->streams);
    kv[(*n)++] = npu_ov.ov_property_key_num_streams;
    kv[(*n)++] = text->streams;
  }
  /* Unset, the core's default applies (client.c, set_default_pinning). */
  if (opts->cpu_pinning >= 0) {
    kv[(*n)++] = npu_ov.ov_property_key_hint_enable_cpu_pinning;
    kv[(*n)++] = opts->cpu_pinning ? "YES" : "NO";
  }
  if (opts->inference_threads > 0) {
    snprintf(text->threads, sizeof text->threads, "%lld", (long long)opts->inference_threads);
    kv[(*n)++] = npu_ov.ov_property_key_inference_num_threads;
    kv[(*n)++] = text->threads;
  }
}

char* npu_run_settings_format(const npu_compile_options_t* opts) {
  char text[128];
  snprintf(text, sizeof text, "%s;%lld;%d;%lld", opts->performance != NULL ? opts->performance : "",
           (long long)opts->streams, opts->cpu_pinning, (long long)opts->inference_threads);
  return npu_strdup(text);
}

int npu_run_settings_parse(const char* text, npu_compile_options_t* opts) {
  char mode[32] = {0};
  long long streams = -1, threads = -1;
  int pinning = -1, used = 0;
  /* %31[A-Z_] fails on an empty hint; that case is matched on its own. */
  if (text[0] == ';') {
    if (sscanf(text, ";%lld;%d;%lld%n", &streams, &pinning, &threads, &used) != 3) return 0;
  } else if (sscanf(text, "%31[A-Z_];%lld;%d;%lld%n", mode, &streams, &pinning, &threads, &used) !=
                 4 ||
             performance_mode(mode) == NULL) {
    return 0;
  }
  if (text[used] != '\0' || pinning < -1 || pinning > 1) return 0;
  if (streams != -1 && (streams < 1 || streams > NPU_MAX_STREAMS)) return 0;
  if (threads != -1 && (threads < 1 || threads > NPU_MAX_THREADS)) return 0;
  free(opts->performance);
  opts->performance = mode[0] ? npu_strdup(performance_mode(mode)) : NULL;
  opts->streams = streams;
  opts->cpu_pinning = pinning;
  opts->inference_threads = threads;
  return 1;
}
