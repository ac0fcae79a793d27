/* options.c -- checking typed options against a plugin's list of known ones. */
#include <stdio.h>
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"

/* The name used in messages for a value type. Static string. */
static const char* nxhal_value_type_name(nxhal_value_type_t type) {
  switch (type) {
    case NXHAL_VALUE_INT64: return "int64";
    case NXHAL_VALUE_DOUBLE: return "double";
    case NXHAL_VALUE_BOOL: return "bool";
    case NXHAL_VALUE_STRING: return "string";
    case NXHAL_VALUE_INT64_LIST: return "int64 list";
  }
  return NULL;
}

const nxhal_option_t* nxhal_option_at(const nxhal_option_t* options, size_t index) {
  /* The caller's struct may be newer and larger than ours: step by its size. */
  return (const nxhal_option_t*)(const void*)((const char*)options +
                                              index * options[0].struct_size);
}

/* Writes "a, b, c" (or "none") into buf, truncating with "..." if needed. */
static void nxhal_format_known(const nxhal_option_spec_t* specs, size_t num_specs, char* buf,
                               size_t buf_size) {
  size_t used = 0;
  size_t i;
  buf[0] = '\0';
  if (num_specs == 0) {
    snprintf(buf, buf_size, "none");
    return;
  }
  for (i = 0; i < num_specs; ++i) {
    int n = snprintf(buf + used, buf_size - used, "%s%s", i == 0 ? "" : ", ",
                     specs[i].name != NULL ? specs[i].name : "?");
    if (n < 0 || (size_t)n >= buf_size - used) {
      if (buf_size > 4) memcpy(buf + buf_size - 4, "...", 4);
      return;
    }
    used += (size_t)n;
  }
}

/* Checks one option's value against the type its spec requires. */
static nxhal_status_t* nxhal_option_check_value(const nxhal_option_t* option,
                                                const nxhal_option_spec_t* spec) {
  nxhal_value_type_t expected = spec->type;
  if (option->type != expected) {
    const char* got = nxhal_value_type_name(option->type);
    if (got == NULL) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option '%s' must be %s, got type %d",
                               option->name, nxhal_value_type_name(expected), (int)option->type);
    }
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option '%s' must be %s, got %s", option->name,
                             nxhal_value_type_name(expected), got);
  }
  switch (option->type) {
    case NXHAL_VALUE_BOOL:
      if (option->bool_value != 0 && option->bool_value != 1) {
        return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option '%s' must be 0 or 1, got %d",
                                 option->name, (int)option->bool_value);
      }
      break;
    case NXHAL_VALUE_INT64:
      if (spec->has_range &&
          ((double)option->int64_value < spec->min || (double)option->int64_value > spec->max)) {
        return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                                 "option '%s' must be from %.17g to %.17g, got %lld", option->name,
                                 spec->min, spec->max, (long long)option->int64_value);
      }
      break;
    case NXHAL_VALUE_DOUBLE:
      /* Written so that NaN fails too. */
      if (spec->has_range &&
          !(option->double_value >= spec->min && option->double_value <= spec->max)) {
        return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                                 "option '%s' must be from %.17g to %.17g, got %.17g", option->name,
                                 spec->min, spec->max, option->double_value);
      }
      break;
    case NXHAL_VALUE_STRING:
      if (option->string_value == NULL) {
        return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option '%s' has a NULL string",
                                 option->name);
      }
      break;
    case NXHAL_VALUE_INT64_LIST:
      if (option->int64_list == NULL && option->int64_list_size != 0) {
        return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                                 "option '%s' has a NULL list of %zu values", option->name,
                                 option->int64_list_size);
      }
      break;
    default: break;
  }
  return NULL;
}

nxhal_status_t* nxhal_options_check(const nxhal_option_t* options, size_t num_options,
                                    const nxhal_option_spec_t* specs, size_t num_specs) {
  size_t i, j;
  if (num_options == 0) return NULL;
  if (options == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "options is NULL but num_options is %zu",
                             num_options);
  }
  if (options[0].struct_size < NXHAL_NAMED_VALUE_1_0_SIZE) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "options have struct_size %zu, below the %zu bytes ABI 1.0 needs",
                             options[0].struct_size, (size_t)NXHAL_NAMED_VALUE_1_0_SIZE);
  }
  if (specs == NULL) num_specs = 0;
  for (i = 0; i < num_options; ++i) {
    const nxhal_option_t* option = nxhal_option_at(options, i);
    const nxhal_option_spec_t* spec = NULL;
    nxhal_status_t* status;
    if (option->name == NULL) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option %zu has a NULL name", i);
    }
    for (j = 0; j < num_specs; ++j) {
      if (specs[j].name != NULL && strcmp(specs[j].name, option->name) == 0) {
        spec = &specs[j];
        break;
      }
    }
    if (spec == NULL) {
      char known[512];
      nxhal_format_known(specs, num_specs, known, sizeof(known));
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "unknown option '%s' (known: %s)",
                               option->name, known);
    }
    status = nxhal_option_check_value(option, spec);
    if (status != NULL) return status;
    for (j = 0; j < i; ++j) {
      if (strcmp(nxhal_option_at(options, j)->name, option->name) == 0) {
        return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "option '%s' is given more than once",
                                 option->name);
      }
    }
  }
  return NULL;
}

const nxhal_option_t* nxhal_options_find(const nxhal_option_t* options, size_t num_options,
                                         const char* name) {
  size_t i;
  if (options == NULL || name == NULL) return NULL;
  for (i = 0; i < num_options; ++i) {
    const nxhal_option_t* option = nxhal_option_at(options, i);
    if (option->name != NULL && strcmp(option->name, name) == 0) return option;
  }
  return NULL;
}
