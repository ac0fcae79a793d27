/* options.c -- the plugin's options: the nx_hal create and compile options
 * (names, types and ranges, checked by nxhal_options_check), reading them
 * into the plugin's structs, and which create options become which PJRT
 * create options for which backend family. */
#include <stdint.h>
#include <string.h>

#include "internal.h"

#define TPU_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* nx_hal create options. PJRT create options are reachable only through the
 * rows of tpu_pjrt_options, whose PJRT types are fixed here: a plugin aborts
 * on a wrongly typed value and silently ignores an unknown name. */
static const nxhal_option_spec_t tpu_create_specs[] = {
    {"library_path", NXHAL_VALUE_STRING, 0, 0, 0},
    {"backend_paths", NXHAL_VALUE_STRING, 0, 0, 0},
    {"memory_limit_bytes", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(0, INT64_MAX)},
    {"cpu_device_count", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, 1024)},
    /* (0, 1]: the range cannot exclude 0, so tpu_create_options_read does. */
    {"gpu_memory_fraction", NXHAL_VALUE_DOUBLE, NXHAL_OPTION_RANGE(0, 1)},
    {"gpu_preallocate", NXHAL_VALUE_BOOL, 0, 0, 0},
    {"gpu_allocator", NXHAL_VALUE_STRING, 0, 0, 0},
    {"gpu_visible_devices", NXHAL_VALUE_INT64_LIST, 0, 0, 0},
};

/* nx_hal compile options. PJRT needs a CompileOptionsProto; executable.c
 * writes it from these. */
static const nxhal_option_spec_t tpu_compile_specs[] = {
    {"num_replicas", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, INT64_MAX)},
    {"num_partitions", NXHAL_VALUE_INT64, NXHAL_OPTION_RANGE(1, INT64_MAX)},
};

/* Which nx_hal option becomes which PJRT create option, for which family. */
typedef struct tpu_pjrt_option {
  const char* nxhal_name;
  const char* family; /* "cpu", "gpu", "tpu" */
  const char* pjrt_name;
  PJRT_NamedValue_Type pjrt_type;
} tpu_pjrt_option_t;

static const tpu_pjrt_option_t tpu_pjrt_options[] = {
    {"cpu_device_count", "cpu", "cpu_device_count", PJRT_NamedValue_kInt64},
    {"gpu_memory_fraction", "gpu", "memory_fraction", PJRT_NamedValue_kFloat},
    {"gpu_preallocate", "gpu", "preallocate", PJRT_NamedValue_kBool},
    {"gpu_allocator", "gpu", "allocator", PJRT_NamedValue_kString},
    {"gpu_visible_devices", "gpu", "visible_devices", PJRT_NamedValue_kInt64List},
};

/* Callers size their PJRT_NamedValue arrays with TPU_MAX_PJRT_OPTIONS. */
typedef char tpu_pjrt_options_fit[TPU_COUNT(tpu_pjrt_options) <= TPU_MAX_PJRT_OPTIONS ? 1 : -1];

nxhal_status_t* tpu_create_options_read(const nxhal_option_t* options, size_t num_options,
                                        tpu_create_config_t* out) {
  const nxhal_option_t* o;
  nxhal_status_t* status =
      nxhal_options_check(options, num_options, tpu_create_specs, TPU_COUNT(tpu_create_specs));
  if (status != NULL) return status;
  memset(out, 0, sizeof(*out));
  o = nxhal_options_find(options, num_options, "memory_limit_bytes");
  if (o != NULL) out->memory_limit = (uint64_t)o->int64_value;
  o = nxhal_options_find(options, num_options, "gpu_memory_fraction");
  if (o != NULL && o->double_value == 0.0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "option 'gpu_memory_fraction' must be in (0, 1], got %g",
                             o->double_value);
  }
  o = nxhal_options_find(options, num_options, "library_path");
  if (o != NULL && *o->string_value) out->library_path = o->string_value;
  o = nxhal_options_find(options, num_options, "backend_paths");
  if (o != NULL) out->backend_paths = o->string_value;
  return NULL;
}

nxhal_status_t* tpu_compile_options_read(const nxhal_option_t* options, size_t num_options,
                                         int64_t* replicas, int64_t* partitions) {
  const nxhal_option_t* o;
  nxhal_status_t* status =
      nxhal_options_check(options, num_options, tpu_compile_specs, TPU_COUNT(tpu_compile_specs));
  if (status != NULL) return status;
  *replicas = *partitions = 1;
  o = nxhal_options_find(options, num_options, "num_replicas");
  if (o != NULL) *replicas = o->int64_value;
  o = nxhal_options_find(options, num_options, "num_partitions");
  if (o != NULL) *partitions = o->int64_value;
  if (*partitions != 1) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "partitioned (SPMD) execution (num_partitions=%lld) is not supported "
                             "yet; replicated execution is (num_replicas)",
                             (long long)*partitions);
  }
  return NULL;
}

/* Fills one PJRT value from a checked nx_hal option; 0 for a PJRT type this
 * table does not use. */
static int tpu_pjrt_value(const tpu_pjrt_option_t* row, const nxhal_option_t* o,
                          PJRT_NamedValue* v) {
  memset(v, 0, sizeof(*v));
  v->struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v->name = row->pjrt_name;
  v->name_size = strlen(row->pjrt_name);
  v->type = row->pjrt_type;
  /* The nx_hal type was checked against tpu_create_specs; the PJRT type
   * comes from the row, never from the caller. */
  switch (row->pjrt_type) {
    case PJRT_NamedValue_kInt64:
      v->int64_value = o->int64_value;
      v->value_size = 1;
      return 1;
    case PJRT_NamedValue_kFloat:
      v->float_value = (float)o->double_value;
      v->value_size = 1;
      return 1;
    case PJRT_NamedValue_kBool:
      v->bool_value = o->bool_value != 0;
      v->value_size = 1;
      return 1;
    case PJRT_NamedValue_kString:
      v->string_value = o->string_value;
      v->value_size = strlen(o->string_value);
      return 1;
    case PJRT_NamedValue_kInt64List:
      v->int64_array_value = o->int64_list;
      v->value_size = o->int64_list_size;
      return 1;
    default: return 0;
  }
}

size_t tpu_pjrt_create_options(const nxhal_option_t* options, size_t num_options,
                               const char* family, PJRT_NamedValue* values) {
  size_t count = 0, i;
  for (i = 0; i < TPU_COUNT(tpu_pjrt_options); ++i) {
    const tpu_pjrt_option_t* row = &tpu_pjrt_options[i];
    const nxhal_option_t* o = nxhal_options_find(options, num_options, row->nxhal_name);
    if (o == NULL || strcmp(row->family, family) != 0) continue;
    if (tpu_pjrt_value(row, o, &values[count])) ++count;
  }
  return count;
}
