/*
 * test_helpers.c -- unit tests for the plugin helper library (cabi/):
 * statuses, struct checks and fills, options, dtypes, tensor descriptions,
 * events, negotiation, memory accounting, the table macros (with the toy
 * plugin of plugin_macros.c, linked in). Prints each failure; exits 1 if any
 * failed. Run by tests/test_cabi.py.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c99 */
/* The toy plugin first, before <pthread.h>, so that nx_hal_plugin.h is seen
 * to need nothing it does not include; included rather than linked so that
 * every build of this program (tests/test_cabi.py, .ci/sanitize) has it. */
#include "plugin_macros.c"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nx_hal/nx_hal_plugin.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Checks `status` has `code` and a message containing `needle`; frees it. */
#define CHECK_STATUS(status, code, needle) check_status((status), (code), (needle), __LINE__)
static void check_status(nxhal_status_t* status, nxhal_status_code_t code, const char* needle,
                         int line) {
  if (nxhal_status_code(status) != code) {
    fprintf(stderr, "%s:%d: expected code %d, got %d (%s)\n", __FILE__, line, (int)code,
            (int)nxhal_status_code(status), nxhal_status_message(status));
    ++failures;
  } else if (needle != NULL && strstr(nxhal_status_message(status), needle) == NULL) {
    fprintf(stderr, "%s:%d: message '%s' lacks '%s'\n", __FILE__, line,
            nxhal_status_message(status), needle);
    ++failures;
  }
  nxhal_status_free(status);
}

static void test_status(void) {
  nxhal_status_t* status;
  nxhal_status_t* copy;
  char long_text[1000];
  CHECK(nxhal_status_make(NXHAL_OK, "ignored") == NULL);
  CHECK(nxhal_status_code(NULL) == NXHAL_OK);
  CHECK(strcmp(nxhal_status_message(NULL), "") == 0);
  nxhal_status_free(NULL);
  status = nxhal_status_make(NXHAL_NOT_FOUND, "no %s number %d", "thing", 7);
  CHECK(nxhal_status_code(status) == NXHAL_NOT_FOUND);
  CHECK(strcmp(nxhal_status_message(status), "no thing number 7") == 0);
  copy = nxhal_status_copy(status);
  CHECK(copy != status);
  CHECK(nxhal_status_code(copy) == NXHAL_NOT_FOUND);
  CHECK(strcmp(nxhal_status_message(copy), "no thing number 7") == 0);
  nxhal_status_free(status);
  nxhal_status_free(copy);
  CHECK(nxhal_status_copy(NULL) == NULL);
  /* Longer than the stack buffer used for formatting. */
  memset(long_text, 'x', sizeof(long_text) - 1);
  long_text[sizeof(long_text) - 1] = '\0';
  status = nxhal_status_make(NXHAL_INTERNAL, "<%s>", long_text);
  CHECK(strlen(nxhal_status_message(status)) == sizeof(long_text) + 1);
  CHECK(nxhal_status_message(status)[0] == '<');
  nxhal_status_free(status);
}

static void test_struct_check(void) {
  nxhal_tensor_desc_t desc;
  CHECK_STATUS(nxhal_check_struct(NULL, 8, "thing"), NXHAL_INVALID_ARGUMENT, "thing is NULL");
  desc.struct_size = 4;
  CHECK_STATUS(nxhal_check_struct(&desc, sizeof(desc), "desc"), NXHAL_INVALID_ARGUMENT,
               "struct_size 4");
  desc.struct_size = sizeof(desc);
  CHECK(nxhal_check_struct(&desc, sizeof(desc), "desc") == NULL);
}

/* A 1.0 caller's nxhal_io_info_t (no device_index), and a later caller's
 * with a field after ours, to fill from a plugin's own (1.1) struct. */
typedef struct io_info_1_0 {
  size_t struct_size;
  const char* name;
  nxhal_tensor_desc_t desc;
} io_info_1_0_t;
typedef struct io_info_later {
  nxhal_io_info_t base;
  int64_t newer_field;
} io_info_later_t;

static void test_struct_fill(void) {
  nxhal_io_info_t ours;
  io_info_1_0_t old_caller;
  io_info_later_t new_caller;
  nxhal_io_info_t same;
  memset(&ours, 0, sizeof(ours));
  ours.struct_size = sizeof(ours);
  ours.name = "x";
  ours.desc.struct_size = sizeof(ours.desc);
  ours.desc.dtype = NXHAL_DTYPE_F32;
  ours.device_index = 3;

  /* Older caller: filled up to its size, not a byte past it. */
  memset(&old_caller, 0xAB, sizeof(old_caller));
  old_caller.struct_size = NXHAL_IO_INFO_1_0_SIZE;
  CHECK(sizeof(old_caller) == NXHAL_IO_INFO_1_0_SIZE);
  nxhal_struct_fill(&old_caller, &ours, sizeof(ours));
  CHECK(old_caller.struct_size == NXHAL_IO_INFO_1_0_SIZE);
  CHECK(old_caller.name == ours.name && old_caller.desc.dtype == NXHAL_DTYPE_F32);

  /* Same version: everything, struct_size kept. */
  memset(&same, 0, sizeof(same));
  same.struct_size = sizeof(same);
  same.device_index = -1;
  nxhal_struct_fill(&same, &ours, sizeof(ours));
  CHECK(same.struct_size == sizeof(same) && same.device_index == 3 && same.name == ours.name);

  /* Newer caller: our fields filled, its newer one left as it set it, and
   * struct_size still says what it allocated. */
  memset(&new_caller, 0, sizeof(new_caller));
  new_caller.base.struct_size = sizeof(new_caller);
  new_caller.newer_field = 77;
  nxhal_struct_fill(&new_caller, &ours, sizeof(ours));
  CHECK(new_caller.base.struct_size == sizeof(new_caller));
  CHECK(new_caller.base.device_index == 3 && new_caller.newer_field == 77);

  /* A struct_size of only the size field, or no struct: nothing written. */
  memset(&same, 0, sizeof(same));
  same.struct_size = sizeof(size_t);
  nxhal_struct_fill(&same, &ours, sizeof(ours));
  CHECK(same.struct_size == sizeof(size_t) && same.name == NULL);
  nxhal_struct_fill(NULL, &ours, sizeof(ours));
}

/* An option struct larger than ours, as a newer caller might pass. */
typedef struct bigger_option {
  nxhal_option_t base;
  int64_t future_field;
} bigger_option_t;

static nxhal_option_t make_option(const char* name, nxhal_value_type_t type) {
  nxhal_option_t option;
  memset(&option, 0, sizeof(option));
  option.struct_size = sizeof(option);
  option.name = name;
  option.type = type;
  return option;
}

static void test_options(void) {
  static const nxhal_option_spec_t specs[] = {{"count", NXHAL_VALUE_INT64, 0, 0, 0},
                                              {"verbose", NXHAL_VALUE_BOOL, 0, 0, 0},
                                              {"path", NXHAL_VALUE_STRING, 0, 0, 0}};
  nxhal_option_t options[3];
  bigger_option_t bigger[2];
  CHECK(nxhal_options_check(NULL, 0, specs, 3) == NULL);
  CHECK_STATUS(nxhal_options_check(NULL, 1, specs, 3), NXHAL_INVALID_ARGUMENT, "NULL");

  options[0] = make_option("count", NXHAL_VALUE_INT64);
  options[0].int64_value = 5;
  options[1] = make_option("verbose", NXHAL_VALUE_BOOL);
  options[1].bool_value = 1;
  options[2] = make_option("path", NXHAL_VALUE_STRING);
  options[2].string_value = "/tmp";
  CHECK(nxhal_options_check(options, 3, specs, 3) == NULL);
  CHECK(nxhal_options_find(options, 3, "path") == &options[2]);
  CHECK(nxhal_options_find(options, 3, "missing") == NULL);

  options[0] = make_option("foo", NXHAL_VALUE_INT64);
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT,
               "unknown option 'foo' (known: count, verbose, path)");
  CHECK_STATUS(nxhal_options_check(options, 1, NULL, 0), NXHAL_INVALID_ARGUMENT, "known: none");
  options[0] = make_option("count", NXHAL_VALUE_STRING);
  options[0].string_value = "5";
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT,
               "option 'count' must be int64, got string");
  options[0] = make_option("count", (nxhal_value_type_t)17);
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT, "got type 17");
  options[0] = make_option("verbose", NXHAL_VALUE_BOOL);
  options[0].bool_value = 2;
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT,
               "option 'verbose' must be 0 or 1");
  options[0] = make_option("path", NXHAL_VALUE_STRING);
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT,
               "option 'path' has a NULL string");
  options[0] = make_option(NULL, NXHAL_VALUE_INT64);
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT, "NULL name");
  options[0] = make_option("count", NXHAL_VALUE_INT64);
  options[1] = make_option("count", NXHAL_VALUE_INT64);
  CHECK_STATUS(nxhal_options_check(options, 2, specs, 3), NXHAL_INVALID_ARGUMENT,
               "option 'count' is given more than once");
  options[0].struct_size = 8;
  CHECK_STATUS(nxhal_options_check(options, 1, specs, 3), NXHAL_INVALID_ARGUMENT, "struct_size 8");

  /* Stride follows the caller's struct_size. */
  memset(bigger, 0, sizeof(bigger));
  bigger[0].base = make_option("count", NXHAL_VALUE_INT64);
  bigger[0].base.struct_size = sizeof(bigger_option_t);
  bigger[1].base = make_option("bogus", NXHAL_VALUE_INT64);
  bigger[1].base.struct_size = sizeof(bigger_option_t);
  CHECK(nxhal_option_at(&bigger[0].base, 1) == &bigger[1].base);
  CHECK_STATUS(nxhal_options_check(&bigger[0].base, 2, specs, 3), NXHAL_INVALID_ARGUMENT,
               "unknown option 'bogus'");
  bigger[1].base.name = "verbose";
  bigger[1].base.type = NXHAL_VALUE_BOOL;
  CHECK(nxhal_options_check(&bigger[0].base, 2, specs, 3) == NULL);
  CHECK(nxhal_options_find(&bigger[0].base, 2, "verbose") == &bigger[1].base);
}

/* Both sides of each inclusive bound, a NaN, NULL lists, lookups. */
static void test_option_values(void) {
  static const nxhal_option_spec_t specs[] = {{"level", NXHAL_VALUE_INT64, 1, 2.0, 5.0},
                                              {"ratio", NXHAL_VALUE_DOUBLE, 1, 0.25, 0.75},
                                              {"dims", NXHAL_VALUE_INT64_LIST, 0, 0, 0},
                                              {"any", NXHAL_VALUE_INT64, 0, 0, 0}};
  static const int64_t dims[] = {2, 3};
  nxhal_option_t o[2];
  int64_t level;
  double ratio;
  for (level = 1; level <= 6; ++level) {
    o[0] = make_option("level", NXHAL_VALUE_INT64);
    o[0].int64_value = level;
    if (level >= 2 && level <= 5) {
      CHECK(nxhal_options_check(o, 1, specs, 4) == NULL);
    } else {
      CHECK_STATUS(nxhal_options_check(o, 1, specs, 4), NXHAL_INVALID_ARGUMENT,
                   level == 1 ? "option 'level' must be from 2 to 5, got 1"
                              : "option 'level' must be from 2 to 5, got 6");
    }
  }
  o[0] = make_option("any", NXHAL_VALUE_INT64); /* no range: anything goes */
  o[0].int64_value = -1000000;
  CHECK(nxhal_options_check(o, 1, specs, 4) == NULL);
  for (ratio = 0.0; ratio <= 1.0; ratio += 0.25) {
    o[0] = make_option("ratio", NXHAL_VALUE_DOUBLE);
    o[0].double_value = ratio;
    if (ratio >= 0.25 && ratio <= 0.75) {
      CHECK(nxhal_options_check(o, 1, specs, 4) == NULL);
    } else {
      CHECK_STATUS(nxhal_options_check(o, 1, specs, 4), NXHAL_INVALID_ARGUMENT,
                   "option 'ratio' must be from 0.25 to 0.75, got ");
    }
  }
  o[0].double_value = 0.0 / 0.0;
  CHECK_STATUS(nxhal_options_check(o, 1, specs, 4), NXHAL_INVALID_ARGUMENT,
               "nan"); /* "-nan" on glibc */
  o[0] = make_option("dims", NXHAL_VALUE_INT64_LIST);
  CHECK(nxhal_options_check(o, 1, specs, 4) == NULL); /* NULL and empty: an empty list */
  o[0].int64_list_size = 2;
  CHECK_STATUS(nxhal_options_check(o, 1, specs, 4), NXHAL_INVALID_ARGUMENT,
               "option 'dims' has a NULL list of 2 values");
  o[0].int64_list = dims;
  CHECK(nxhal_options_check(o, 1, specs, 4) == NULL);
  /* Lookups: the last option is found, NULL arguments find nothing. */
  o[1] = make_option("level", NXHAL_VALUE_INT64);
  CHECK(nxhal_options_find(o, 2, "dims") == &o[0]);
  CHECK(nxhal_options_find(o, 2, "level") == &o[1]);
  CHECK(nxhal_options_find(o, 1, "level") == NULL);
  CHECK(nxhal_options_find(NULL, 2, "level") == NULL);
  CHECK(nxhal_options_find(o, 2, NULL) == NULL);
}

/* The "known:" list of an unknown option, cut with "..." when it would not fit. */
static void test_option_known_list(void) {
  enum { N = 60 };
  static char names[N][24];
  static nxhal_option_spec_t specs[N];
  nxhal_option_t o = make_option("nope", NXHAL_VALUE_INT64);
  nxhal_status_t* status;
  const char* message;
  size_t i;
  for (i = 0; i < N; ++i) {
    snprintf(names[i], sizeof names[i], "option_number_%02u", (unsigned)i);
    specs[i].name = names[i];
    specs[i].type = NXHAL_VALUE_INT64;
  }
  status = nxhal_options_check(&o, 1, specs, 2);
  CHECK(strstr(nxhal_status_message(status), "(known: option_number_00, option_number_01)") !=
        NULL);
  nxhal_status_free(status);
  status = nxhal_options_check(&o, 1, specs, N);
  message = nxhal_status_message(status);
  CHECK(strstr(message, "known: option_number_00, option_number_01, ") != NULL);
  CHECK(strstr(message, "option_number_59") == NULL); /* cut */
  CHECK(strstr(message, "...") != NULL && message[strlen(message) - 1] == ')');
  nxhal_status_free(status);
}

static void test_dtypes(void) {
  static const struct {
    nxhal_dtype_t dtype;
    const char* name;
    size_t size;
    uint8_t code;
  } expected[] = {
      {NXHAL_DTYPE_F16, "f16", 2, NXHAL_DLPACK_CODE_FLOAT},
      {NXHAL_DTYPE_BF16, "bf16", 2, NXHAL_DLPACK_CODE_BFLOAT},
      {NXHAL_DTYPE_F32, "f32", 4, NXHAL_DLPACK_CODE_FLOAT},
      {NXHAL_DTYPE_F64, "f64", 8, NXHAL_DLPACK_CODE_FLOAT},
      {NXHAL_DTYPE_I8, "i8", 1, NXHAL_DLPACK_CODE_INT},
      {NXHAL_DTYPE_I16, "i16", 2, NXHAL_DLPACK_CODE_INT},
      {NXHAL_DTYPE_I32, "i32", 4, NXHAL_DLPACK_CODE_INT},
      {NXHAL_DTYPE_I64, "i64", 8, NXHAL_DLPACK_CODE_INT},
      {NXHAL_DTYPE_U8, "u8", 1, NXHAL_DLPACK_CODE_UINT},
      {NXHAL_DTYPE_BOOL, "bool", 1, NXHAL_DLPACK_CODE_BOOL},
      {NXHAL_DTYPE_U16, "u16", 2, NXHAL_DLPACK_CODE_UINT},
      {NXHAL_DTYPE_U32, "u32", 4, NXHAL_DLPACK_CODE_UINT},
      {NXHAL_DTYPE_U64, "u64", 8, NXHAL_DLPACK_CODE_UINT},
  };
  size_t i;
  nxhal_dlpack_dtype_t dl;
  for (i = 0; i < sizeof(expected) / sizeof(expected[0]); ++i) {
    CHECK(nxhal_dtype_size(expected[i].dtype) == expected[i].size);
    CHECK(strcmp(nxhal_dtype_name(expected[i].dtype), expected[i].name) == 0);
    CHECK(nxhal_dtype_from_name(expected[i].name) == expected[i].dtype);
    CHECK(nxhal_dtype_to_dlpack(expected[i].dtype, &dl) == 1);
    CHECK(dl.code == expected[i].code);
    CHECK(dl.bits == expected[i].size * 8);
    CHECK(dl.lanes == 1);
    CHECK(nxhal_dtype_from_dlpack(dl) == expected[i].dtype);
  }
  CHECK(nxhal_dtype_size(NXHAL_DTYPE_INVALID) == 0);
  CHECK(nxhal_dtype_size((nxhal_dtype_t)99) == 0);
  CHECK(nxhal_dtype_size((nxhal_dtype_t)-1) == 0);
  CHECK(nxhal_dtype_name((nxhal_dtype_t)99) == NULL);
  CHECK(nxhal_dtype_from_name("float32") == NXHAL_DTYPE_INVALID);
  CHECK(nxhal_dtype_from_name(NULL) == NXHAL_DTYPE_INVALID);
  CHECK(nxhal_dtype_to_dlpack((nxhal_dtype_t)99, &dl) == 0);
  dl.code = NXHAL_DLPACK_CODE_FLOAT;
  dl.bits = 32;
  dl.lanes = 4;
  CHECK(nxhal_dtype_from_dlpack(dl) == NXHAL_DTYPE_INVALID);
  dl.lanes = 1;
  dl.bits = 128;
  CHECK(nxhal_dtype_from_dlpack(dl) == NXHAL_DTYPE_INVALID);
}

static void test_tensor_desc(void) {
  int64_t dims[3] = {2, 3, 4};
  int64_t huge[3] = {INT64_MAX, INT64_MAX, 2};
  nxhal_tensor_desc_t desc;
  uint64_t size = 0;
  desc.struct_size = sizeof(desc);
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 3;
  desc.dims = dims;
  CHECK(nxhal_tensor_desc_check(&desc, "x", &size) == NULL);
  CHECK(size == 96);
  desc.rank = 0;
  desc.dims = NULL;
  CHECK(nxhal_tensor_desc_check(&desc, "x", &size) == NULL);
  CHECK(size == 4);
  desc.rank = 2;
  CHECK_STATUS(nxhal_tensor_desc_check(&desc, "x", &size), NXHAL_INVALID_ARGUMENT, "NULL dims");
  desc.dims = dims;
  desc.dtype = (nxhal_dtype_t)42;
  CHECK_STATUS(nxhal_tensor_desc_check(&desc, "x", &size), NXHAL_INVALID_ARGUMENT,
               "x has unknown dtype 42");
  desc.dtype = NXHAL_DTYPE_F32;
  desc.rank = 33;
  CHECK_STATUS(nxhal_tensor_desc_check(&desc, "x", &size), NXHAL_INVALID_ARGUMENT, "rank 33");
  desc.rank = -1;
  CHECK_STATUS(nxhal_tensor_desc_check(&desc, "x", &size), NXHAL_INVALID_ARGUMENT, "rank -1");
  dims[1] = -3;
  desc.rank = 3;
  CHECK_STATUS(nxhal_tensor_desc_check(&desc, "x", &size), NXHAL_INVALID_ARGUMENT, "= -3");
  desc.dims = huge;
  CHECK_STATUS(nxhal_tensor_desc_check(&desc, "x", &size), NXHAL_INVALID_ARGUMENT, "overflow");
  CHECK_STATUS(nxhal_tensor_desc_check(NULL, "x", &size), NXHAL_INVALID_ARGUMENT, "x is NULL");
}

typedef struct callback_record {
  int calls;
  nxhal_status_code_t code;
  char message[128];
} callback_record_t;

static void record_callback(nxhal_status_t* status, void* user_data) {
  callback_record_t* record = (callback_record_t*)user_data;
  record->calls++;
  record->code = nxhal_status_code(status);
  snprintf(record->message, sizeof(record->message), "%s", nxhal_status_message(status));
  nxhal_status_free(status);
}

static void* complete_later(void* arg) {
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL);
  nxhal_event_complete((nxhal_event_t*)arg, nxhal_status_make(NXHAL_INTERNAL, "late failure"));
  return NULL;
}

static void test_events(void) {
  nxhal_event_t* event;
  callback_record_t record;
  int32_t ready = -1;
  pthread_t thread;
  struct timespec start, end;
  double elapsed;

  /* Pending: await times out, is_ready says 0. */
  event = nxhal_event_new();
  CHECK(event != NULL);
  CHECK(nxhal_event_is_ready(event, &ready) == NULL);
  CHECK(ready == 0);
  clock_gettime(CLOCK_MONOTONIC, &start);
  CHECK_STATUS(nxhal_event_await(event, 20 * 1000 * 1000), NXHAL_DEADLINE_EXCEEDED, "not ready");
  clock_gettime(CLOCK_MONOTONIC, &end);
  elapsed = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
  CHECK(elapsed >= 0.019);
  CHECK_STATUS(nxhal_event_await(event, 0), NXHAL_DEADLINE_EXCEEDED, NULL);
  CHECK_STATUS(nxhal_event_await(event, -5), NXHAL_INVALID_ARGUMENT, "timeout_ns");
  /* Callback registered before completion runs once, on completion. */
  memset(&record, 0, sizeof(record));
  CHECK(nxhal_event_on_ready(event, record_callback, &record) == NULL);
  CHECK_STATUS(nxhal_event_on_ready(event, record_callback, &record), NXHAL_FAILED_PRECONDITION,
               "already");
  CHECK(record.calls == 0);
  nxhal_event_complete(event, NULL);
  CHECK(record.calls == 1);
  CHECK(record.code == NXHAL_OK);
  CHECK(nxhal_event_is_ready(event, &ready) == NULL);
  CHECK(ready == 1);
  CHECK(nxhal_event_await(event, NXHAL_WAIT_FOREVER) == NULL);
  CHECK(nxhal_event_await(event, 0) == NULL);
  nxhal_event_destroy(event);

  /* Completed with an error from another thread: await returns copies. */
  event = nxhal_event_new();
  CHECK(pthread_create(&thread, NULL, complete_later, event) == 0);
  CHECK_STATUS(nxhal_event_await(event, NXHAL_WAIT_FOREVER), NXHAL_INTERNAL, "late failure");
  CHECK_STATUS(nxhal_event_await(event, 0), NXHAL_INTERNAL, "late failure");
  /* Callback registered after completion runs at once on this thread. */
  memset(&record, 0, sizeof(record));
  CHECK(nxhal_event_on_ready(event, record_callback, &record) == NULL);
  CHECK(record.calls == 1);
  CHECK(record.code == NXHAL_INTERNAL);
  CHECK(strcmp(record.message, "late failure") == 0);
  pthread_join(thread, NULL);
  nxhal_event_destroy(event);

  /* Caller destroys first; the producer completes later and frees it. */
  event = nxhal_event_new();
  nxhal_event_destroy(event);
  nxhal_event_complete(event, nxhal_status_make(NXHAL_CANCELLED, "nobody listens"));

  CHECK_STATUS(nxhal_event_is_ready(NULL, &ready), NXHAL_INVALID_ARGUMENT, "event is NULL");
  CHECK_STATUS(nxhal_event_await(NULL, 0), NXHAL_INVALID_ARGUMENT, "event is NULL");
  CHECK_STATUS(nxhal_event_on_ready(NULL, record_callback, NULL), NXHAL_INVALID_ARGUMENT, NULL);
  nxhal_event_destroy(NULL);
}

static void test_event_done(void) {
  nxhal_event_t* event = (nxhal_event_t*)&event; /* anything but NULL */
  int32_t ready = 0;
  /* No event asked for: nothing to make, the result handed back. */
  CHECK(nxhal_event_done(NULL) == NULL);
  CHECK_STATUS(nxhal_event_done_with(NULL, nxhal_status_make(NXHAL_INTERNAL, "sync failure")),
               NXHAL_INTERNAL, "sync failure");
  CHECK(nxhal_event_done_with(NULL, NULL) == NULL);
  /* Asked for: a completed event, carrying the result. */
  CHECK(nxhal_event_done(&event) == NULL);
  CHECK(event != NULL);
  CHECK(nxhal_event_is_ready(event, &ready) == NULL && ready == 1);
  CHECK(nxhal_event_await(event, 0) == NULL);
  nxhal_event_destroy(event);
  event = NULL;
  CHECK(nxhal_event_done_with(&event, nxhal_status_make(NXHAL_INTERNAL, "async failure")) == NULL);
  CHECK(event != NULL);
  CHECK_STATUS(nxhal_event_await(event, 0), NXHAL_INTERNAL, "async failure");
  nxhal_event_destroy(event);
}

static void test_plugin_macros(void) {
  const nxhal_api_t* api = toy_table();
  nxhal_event_t* event = NULL;
  size_t count = 0;
  CHECK(toy_table_misplaced() == 0);
  CHECK(api->struct_size == NXHAL_API_1_0_SIZE);
  CHECK(api->status_free == nxhal_status_free && api->event_destroy == nxhal_event_destroy);
  /* Each slot calls the function named for it, NULL checks included. */
  CHECK_STATUS(api->plugin_info(NULL), NXHAL_INVALID_ARGUMENT, "toy_plugin_info: 'out' is NULL");
  CHECK_STATUS(api->client_device_count((nxhal_client_t*)&count, NULL), NXHAL_INVALID_ARGUMENT,
               "toy_client_device_count: 'out_count' is NULL");
  CHECK_STATUS(api->client_diagnostics(NULL, NULL), NXHAL_INVALID_ARGUMENT,
               "toy_client_diagnostics: 'client' is NULL");
  CHECK_STATUS(api->executable_deserialize(NULL, NULL, 0, NULL, 0, NULL), NXHAL_UNIMPLEMENTED,
               "toy_executable_deserialize");
  CHECK_STATUS(api->device_set_memory_limit(NULL, 0), NXHAL_UNIMPLEMENTED,
               "toy_device_set_memory_limit");
  CHECK(api->buffer_to_host(NULL, NULL, 0, &event) == NULL);
  CHECK(event != NULL && api->event_await(event, 0) == NULL);
  api->event_destroy(event);
}

/* A plugin table of ABI 1.`plugin_minor` and a host's query args of ABI 1.`host_minor`. */
static void negotiation_pair(nxhal_api_t* api, uint32_t plugin_minor, nxhal_query_args_t* args,
                             uint32_t host_minor) {
  memset(api, 0, sizeof(*api));
  api->struct_size = sizeof(*api);
  api->abi_major = 1;
  api->abi_minor = plugin_minor;
  args->struct_size = sizeof(*args);
  args->host_abi_major = 1;
  args->host_abi_minor = host_minor;
}

/* Before any host negotiates, the plugin assumes ABI minor 0 (malformed
 * programs are INVALID_ARGUMENT, the 1.0 code); the oldest minor any host
 * negotiated decides from then on. Runs before test_negotiate (process-wide). */
static void test_negotiated_minor(void) {
  nxhal_api_t api;
  nxhal_query_args_t args;
  const nxhal_api_t* out = NULL;
  negotiation_pair(&api, 2, &args, 2);
  CHECK(nxhal_invalid_program_code() == NXHAL_INVALID_ARGUMENT);
  CHECK(nxhal_negotiate(&args, &api, &out) == NULL);
  CHECK(nxhal_invalid_program_code() == NXHAL_INVALID_PROGRAM);
  CHECK_STATUS(nxhal_status_invalid_program("bad %s", "graph"), NXHAL_INVALID_PROGRAM, "bad graph");
  args.host_abi_minor = 3; /* a newer host does not raise what the older one is told */
  CHECK(nxhal_negotiate(&args, &api, &out) == NULL);
  CHECK(nxhal_invalid_program_code() == NXHAL_INVALID_PROGRAM);
  args.host_abi_minor = 1; /* an older one lowers it for everyone */
  CHECK(nxhal_negotiate(&args, &api, &out) == NULL);
  CHECK(nxhal_invalid_program_code() == NXHAL_INVALID_ARGUMENT);
  CHECK_STATUS(nxhal_status_invalid_program("bad"), NXHAL_INVALID_ARGUMENT, "bad");
  args.host_abi_minor = 2;
  CHECK(nxhal_negotiate(&args, &api, &out) == NULL);
  CHECK(nxhal_invalid_program_code() == NXHAL_INVALID_ARGUMENT);
}

static void test_negotiate(void) {
  nxhal_api_t api;
  nxhal_query_args_t args;
  const nxhal_api_t* out = NULL;
  negotiation_pair(&api, 0, &args, 3);
  CHECK(nxhal_negotiate(&args, &api, &out) == NULL);
  CHECK(out == &api);
  args.host_abi_major = 2;
  out = NULL;
  CHECK_STATUS(nxhal_negotiate(&args, &api, &out), NXHAL_ABI_MISMATCH,
               "ABI 1.0, host speaks ABI 2.3");
  CHECK(out == &api); /* set even on refusal, for the frozen prefix */
  args.struct_size = 4;
  CHECK_STATUS(nxhal_negotiate(&args, &api, &out), NXHAL_INVALID_ARGUMENT, "query args");
  CHECK_STATUS(nxhal_negotiate(NULL, &api, &out), NXHAL_INVALID_ARGUMENT, "query args is NULL");
  CHECK_STATUS(nxhal_negotiate(&args, &api, NULL), NXHAL_INVALID_ARGUMENT, "out_api");
}

static void test_memory(void) {
  nxhal_memory_t m;
  nxhal_memory_stats_t stats;
  nxhal_memory_init(&m);
  CHECK_STATUS(nxhal_memory_reserve(&m, 100, "a"), NXHAL_OK, NULL);
  nxhal_memory_set_limit(&m, 150);
  CHECK_STATUS(nxhal_memory_reserve(&m, 60, "the second buffer"), NXHAL_RESOURCE_EXHAUSTED,
               "the second buffer needs 60 bytes");
  CHECK_STATUS(nxhal_memory_reserve(&m, UINT64_MAX, "huge"), NXHAL_RESOURCE_EXHAUSTED,
               "limit of 150");
  CHECK_STATUS(nxhal_memory_reserve(&m, 50, "b"), NXHAL_OK, NULL);
  nxhal_memory_release(&m, 120);
  nxhal_memory_release(&m, 500); /* never below zero */
  stats.struct_size = sizeof stats;
  nxhal_memory_stats(&m, &stats);
  CHECK(stats.bytes_in_use == 0 && stats.peak_bytes_in_use == 150 && stats.bytes_limit == 150);
  nxhal_memory_set_limit(&m, 0);
  CHECK_STATUS(nxhal_memory_reserve(&m, UINT64_MAX / 2, "no limit"), NXHAL_OK, NULL);
  /* Charged past any limit, saturating rather than wrapping. */
  nxhal_memory_set_limit(&m, 10);
  nxhal_memory_charge(&m, UINT64_MAX / 2);
  nxhal_memory_charge(&m, UINT64_MAX / 2);
  nxhal_memory_charge(&m, 5);
  nxhal_memory_stats(&m, &stats);
  CHECK(stats.bytes_in_use == UINT64_MAX && stats.peak_bytes_in_use == UINT64_MAX);
  nxhal_memory_destroy(&m);
  /* The header's layout puts the counters where cabi/memory.c, which sees
   * the real mutex type, asserts they are. */
  {
    size_t in_use_offset = 0;
    CHECK(toy_memory_layout(&in_use_offset) == NXHAL_MEMORY_LOCK_SIZE + 3 * sizeof(uint64_t));
    CHECK(in_use_offset == NXHAL_MEMORY_LOCK_SIZE);
  }
  CHECK(toy_memory_round_trip() == 150);
}

/* FIPS 180-4 SHA-256 examples (NIST's published vectors), plus the same
 * messages fed in pieces, so block-boundary carries are exercised. */
static int digest_is(const uint8_t got[NXHAL_DIGEST_SIZE], const char* hex) {
  char text[2 * NXHAL_DIGEST_SIZE + 1];
  int i;
  for (i = 0; i < NXHAL_DIGEST_SIZE; i++) snprintf(text + 2 * i, 3, "%02x", got[i]);
  if (strcmp(text, hex) != 0) {
    fprintf(stderr, "digest %s, expected %s\n", text, hex);
    return 0;
  }
  return 1;
}

static void test_digest(void) {
  static const struct {
    const char* message;
    const char* hex;
  } vectors[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
       "opqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  uint8_t out[NXHAL_DIGEST_SIZE], whole[NXHAL_DIGEST_SIZE];
  nxhal_sha256_t ctx;
  size_t v, split, i;
  static char million[1000000];
  for (v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
    size_t n = strlen(vectors[v].message);
    nxhal_digest(vectors[v].message, n, out);
    CHECK(digest_is(out, vectors[v].hex));
    for (split = 0; split <= n; split++) {
      nxhal_sha256_init(&ctx);
      nxhal_sha256_update(&ctx, vectors[v].message, split);
      nxhal_sha256_update(&ctx, vectors[v].message + split, n - split);
      nxhal_sha256_final(&ctx, out);
      CHECK(digest_is(out, vectors[v].hex));
    }
  }
  /* One million 'a': 15,625 blocks, the length field past 2^22 bits. */
  memset(million, 'a', sizeof million);
  nxhal_digest(million, sizeof million, whole);
  CHECK(digest_is(whole, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
  nxhal_sha256_init(&ctx);
  for (i = 0; i < sizeof million; i += 997) {
    nxhal_sha256_update(&ctx, million + i, sizeof million - i < 997 ? sizeof million - i : 997);
  }
  nxhal_sha256_final(&ctx, out);
  CHECK(nxhal_digest_equal(out, whole));
  out[31] ^= 1;
  CHECK(!nxhal_digest_equal(out, whole));
}

int main(void) {
  test_status();
  test_memory();
  test_struct_check();
  test_struct_fill();
  test_options();
  test_option_values();
  test_option_known_list();
  test_dtypes();
  test_tensor_desc();
  test_events();
  test_event_done();
  test_plugin_macros();
  test_negotiated_minor();
  test_negotiate();
  test_digest();
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all helper tests passed\n");
  return 0;
}
