/* pjrt_util.c -- PJRT errors, events and element types as nx_hal ones. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "internal.h"

char* tpu_strndup(const char* s, size_t size) {
  char* copy = (char*)malloc(size + 1);
  if (copy == NULL) return NULL;
  if (size > 0) memcpy(copy, s, size);
  copy[size] = '\0';
  return copy;
}

char* tpu_strdup(const char* s) {
  return tpu_strndup(s ? s : "", s ? strlen(s) : 0);
}

char* tpu_sprintf(const char* format, ...) {
  va_list args, copy;
  int length;
  char* text;
  va_start(args, format);
  va_copy(copy, args);
  length = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (length < 0) {
    va_end(args);
    return NULL;
  }
  text = (char*)malloc((size_t)length + 1);
  if (text != NULL) vsnprintf(text, (size_t)length + 1, format, args);
  va_end(args);
  return text;
}

static nxhal_status_code_t tpu_map_code(PJRT_Error_Code code) {
  switch (code) {
    case PJRT_Error_Code_INVALID_ARGUMENT:
    case PJRT_Error_Code_OUT_OF_RANGE: return NXHAL_INVALID_ARGUMENT;
    case PJRT_Error_Code_NOT_FOUND: return NXHAL_NOT_FOUND;
    case PJRT_Error_Code_UNIMPLEMENTED: return NXHAL_UNIMPLEMENTED;
    case PJRT_Error_Code_UNAVAILABLE: return NXHAL_UNAVAILABLE;
    case PJRT_Error_Code_RESOURCE_EXHAUSTED: return NXHAL_RESOURCE_EXHAUSTED;
    case PJRT_Error_Code_FAILED_PRECONDITION: return NXHAL_FAILED_PRECONDITION;
    case PJRT_Error_Code_DEADLINE_EXCEEDED: return NXHAL_DEADLINE_EXCEEDED;
    case PJRT_Error_Code_CANCELLED:
    case PJRT_Error_Code_ABORTED: return NXHAL_CANCELLED;
    default: return NXHAL_INTERNAL;
  }
}

char* tpu_take_error_message(const PJRT_Api* api, PJRT_Error* error) {
  PJRT_Error_Message_Args margs;
  PJRT_Error_Destroy_Args dargs;
  char* text;
  if (error == NULL) return NULL;
  memset(&margs, 0, sizeof(margs));
  margs.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  margs.error = error;
  api->PJRT_Error_Message(&margs);
  text = tpu_strndup(margs.message ? margs.message : "", margs.message ? margs.message_size : 0);
  memset(&dargs, 0, sizeof(dargs));
  dargs.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  dargs.error = error;
  api->PJRT_Error_Destroy(&dargs);
  return text;
}

nxhal_status_t* tpu_status_from_pjrt(const PJRT_Api* api, PJRT_Error* error,
                                     nxhal_status_code_t force_code, const char* what) {
  PJRT_Error_GetCode_Args cargs;
  nxhal_status_code_t code = NXHAL_INTERNAL;
  nxhal_status_t* status;
  char* text;
  if (error == NULL) return NULL;
  memset(&cargs, 0, sizeof(cargs));
  cargs.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  cargs.error = error;
  if (api->PJRT_Error_GetCode(&cargs) == NULL) code = tpu_map_code(cargs.code);
  if (force_code != NXHAL_OK) code = force_code;
  text = tpu_take_error_message(api, error);
  status = nxhal_status_make(code, "%s: %s", what, text ? text : "(no message)");
  free(text);
  return status;
}

void tpu_pjrt_event_destroy(const PJRT_Api* api, PJRT_Event* event) {
  PJRT_Event_Destroy_Args args;
  if (event == NULL) return;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event;
  free(tpu_take_error_message(api, api->PJRT_Event_Destroy(&args)));
}

nxhal_status_t* tpu_event_await_destroy(const PJRT_Api* api, PJRT_Event* event, const char* what) {
  PJRT_Event_Await_Args args;
  nxhal_status_t* status;
  if (event == NULL) return NULL;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = event;
  status = tpu_status_from_pjrt(api, api->PJRT_Event_Await(&args), NXHAL_OK, what);
  tpu_pjrt_event_destroy(api, event);
  return status;
}

/* Carries an nx_hal event through PJRT's OnReady callback. */
typedef struct tpu_bridge {
  const PJRT_Api* api;
  nxhal_event_t* event;
  void (*done)(void* arg);
  void* done_arg;
} tpu_bridge_t;

/* Runs on a PJRT thread (or inline); owns `error`. */
static void tpu_bridge_fire(PJRT_Error* error, void* user_arg) {
  tpu_bridge_t* bridge = (tpu_bridge_t*)user_arg;
  nxhal_status_t* status = tpu_status_from_pjrt(bridge->api, error, NXHAL_OK, "PJRT");
  if (bridge->done != NULL) bridge->done(bridge->done_arg);
  nxhal_event_complete(bridge->event, status);
  free(bridge);
}

nxhal_status_t* tpu_event_bridge(const PJRT_Api* api, PJRT_Event* event, void (*done)(void* arg),
                                 void* done_arg, nxhal_event_t** out_event) {
  PJRT_Event_OnReady_Args args;
  tpu_bridge_t* bridge;
  nxhal_event_t* nx_event;
  PJRT_Error* error;
  bridge = (tpu_bridge_t*)calloc(1, sizeof(*bridge));
  nx_event = nxhal_event_new();
  if (bridge == NULL || nx_event == NULL) {
    free(bridge);
    if (nx_event != NULL) {
      nxhal_event_complete(nx_event, NULL);
      nxhal_event_destroy(nx_event);
    }
    /* Without an event to hand back, finish the work synchronously. */
    nxhal_status_t* status = tpu_event_await_destroy(api, event, "PJRT");
    if (done != NULL) done(done_arg);
    nxhal_status_free(status);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory creating an event");
  }
  bridge->api = api;
  bridge->event = nx_event;
  bridge->done = done;
  bridge->done_arg = done_arg;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  args.event = event;
  args.callback = tpu_bridge_fire;
  args.user_arg = bridge;
  error = api->PJRT_Event_OnReady(&args);
  if (error != NULL) {
    /* The callback will not run: wait here instead so the work is done. */
    nxhal_status_t* status = tpu_status_from_pjrt(api, error, NXHAL_OK, "PJRT_Event_OnReady");
    nxhal_status_free(tpu_event_await_destroy(api, event, "PJRT"));
    if (done != NULL) done(done_arg);
    nxhal_event_complete(nx_event, NULL);
    nxhal_event_destroy(nx_event);
    free(bridge);
    return status;
  }
  /* PJRT keeps the callback registered after the event handle is destroyed. */
  tpu_pjrt_event_destroy(api, event);
  *out_event = nx_event;
  return NULL;
}

/* One nx_hal event for several PJRT events (the replicas of one execute):
 * it completes when the last of them fires, with the first error seen. */
typedef struct tpu_join {
  const PJRT_Api* api;
  nxhal_event_t* event;
  pthread_mutex_t mutex; /* guards remaining and first */
  size_t remaining;
  nxhal_status_t* first;
} tpu_join_t;

/* Runs on a PJRT thread (or inline); owns `error`. */
static void tpu_join_fire(PJRT_Error* error, void* user_arg) {
  tpu_join_t* join = (tpu_join_t*)user_arg;
  nxhal_status_t* status = tpu_status_from_pjrt(join->api, error, NXHAL_OK, "PJRT");
  int last;
  pthread_mutex_lock(&join->mutex);
  if (join->first == NULL) {
    join->first = status;
  } else {
    nxhal_status_free(status);
  }
  last = --join->remaining == 0;
  pthread_mutex_unlock(&join->mutex);
  if (last) {
    nxhal_event_complete(join->event, join->first);
    pthread_mutex_destroy(&join->mutex);
    free(join);
  }
}

nxhal_status_t* tpu_event_bridge_all(const PJRT_Api* api, PJRT_Event* const* events, size_t n,
                                     nxhal_event_t** out_event) {
  tpu_join_t* join;
  nxhal_event_t* nx_event;
  size_t i;
  if (n == 1) return tpu_event_bridge(api, events[0], NULL, NULL, out_event);
  join = (tpu_join_t*)calloc(1, sizeof(*join));
  nx_event = nxhal_event_new();
  if (join == NULL || nx_event == NULL || pthread_mutex_init(&join->mutex, NULL) != 0) {
    free(join);
    if (nx_event != NULL) {
      nxhal_event_complete(nx_event, NULL);
      nxhal_event_destroy(nx_event);
    }
    /* Without an event to hand back, finish the work synchronously. */
    for (i = 0; i < n; ++i) nxhal_status_free(tpu_event_await_destroy(api, events[i], "PJRT"));
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory creating an event");
  }
  join->api = api;
  join->event = nx_event;
  join->remaining = n;
  /* The caller's handle first: the last callback may complete (and hand
   * off) the event before this loop ends. */
  *out_event = nx_event;
  for (i = 0; i < n; ++i) {
    PJRT_Event_OnReady_Args args;
    PJRT_Error* error;
    memset(&args, 0, sizeof(args));
    args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
    args.event = events[i];
    args.callback = tpu_join_fire;
    args.user_arg = join;
    error = api->PJRT_Event_OnReady(&args);
    if (error != NULL) {
      /* This one's callback will not run: wait for it here and count it. */
      PJRT_Event_Await_Args wait;
      free(tpu_take_error_message(api, error));
      memset(&wait, 0, sizeof(wait));
      wait.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
      wait.event = events[i];
      tpu_join_fire(api->PJRT_Event_Await(&wait), join);
    }
    tpu_pjrt_event_destroy(api, events[i]);
  }
  return NULL;
}

PJRT_Buffer_Type tpu_dtype_to_pjrt(nxhal_dtype_t dtype) {
  switch (dtype) {
    case NXHAL_DTYPE_F16: return PJRT_Buffer_Type_F16;
    case NXHAL_DTYPE_BF16: return PJRT_Buffer_Type_BF16;
    case NXHAL_DTYPE_F32: return PJRT_Buffer_Type_F32;
    case NXHAL_DTYPE_F64: return PJRT_Buffer_Type_F64;
    case NXHAL_DTYPE_I8: return PJRT_Buffer_Type_S8;
    case NXHAL_DTYPE_I16: return PJRT_Buffer_Type_S16;
    case NXHAL_DTYPE_I32: return PJRT_Buffer_Type_S32;
    case NXHAL_DTYPE_I64: return PJRT_Buffer_Type_S64;
    case NXHAL_DTYPE_U8: return PJRT_Buffer_Type_U8;
    case NXHAL_DTYPE_U16: return PJRT_Buffer_Type_U16;
    case NXHAL_DTYPE_U32: return PJRT_Buffer_Type_U32;
    case NXHAL_DTYPE_U64: return PJRT_Buffer_Type_U64;
    case NXHAL_DTYPE_BOOL: return PJRT_Buffer_Type_PRED;
    default: return PJRT_Buffer_Type_INVALID;
  }
}

nxhal_dtype_t tpu_dtype_from_pjrt(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_F16: return NXHAL_DTYPE_F16;
    case PJRT_Buffer_Type_BF16: return NXHAL_DTYPE_BF16;
    case PJRT_Buffer_Type_F32: return NXHAL_DTYPE_F32;
    case PJRT_Buffer_Type_F64: return NXHAL_DTYPE_F64;
    case PJRT_Buffer_Type_S8: return NXHAL_DTYPE_I8;
    case PJRT_Buffer_Type_S16: return NXHAL_DTYPE_I16;
    case PJRT_Buffer_Type_S32: return NXHAL_DTYPE_I32;
    case PJRT_Buffer_Type_S64: return NXHAL_DTYPE_I64;
    case PJRT_Buffer_Type_U8: return NXHAL_DTYPE_U8;
    case PJRT_Buffer_Type_U16: return NXHAL_DTYPE_U16;
    case PJRT_Buffer_Type_U32: return NXHAL_DTYPE_U32;
    case PJRT_Buffer_Type_U64: return NXHAL_DTYPE_U64;
    case PJRT_Buffer_Type_PRED: return NXHAL_DTYPE_BOOL;
    default: return NXHAL_DTYPE_INVALID;
  }
}

nxhal_dtype_t tpu_dtype_from_mlir(const char* s, size_t n) {
  static const struct {
    const char* name;
    nxhal_dtype_t dtype;
  } table[] = {{"f16", NXHAL_DTYPE_F16},  {"bf16", NXHAL_DTYPE_BF16}, {"f32", NXHAL_DTYPE_F32},
               {"f64", NXHAL_DTYPE_F64},  {"i1", NXHAL_DTYPE_BOOL},   {"i8", NXHAL_DTYPE_I8},
               {"i16", NXHAL_DTYPE_I16},  {"i32", NXHAL_DTYPE_I32},   {"i64", NXHAL_DTYPE_I64},
               {"ui8", NXHAL_DTYPE_U8},   {"ui16", NXHAL_DTYPE_U16},  {"ui32", NXHAL_DTYPE_U32},
               {"ui64", NXHAL_DTYPE_U64}, {"si8", NXHAL_DTYPE_I8},    {"si16", NXHAL_DTYPE_I16},
               {"si32", NXHAL_DTYPE_I32}, {"si64", NXHAL_DTYPE_I64}};
  size_t i;
  for (i = 0; i < sizeof(table) / sizeof(table[0]); ++i) {
    if (strlen(table[i].name) == n && memcmp(table[i].name, s, n) == 0) return table[i].dtype;
  }
  return NXHAL_DTYPE_INVALID;
}

/* --- Vendor stderr ------------------------------------------------------- */

/* libtpu and the CUDA plugin print pages of log lines to stderr when they
 * find no hardware; a user asking "which device do I get?" sees them on
 * every run. Their own error message already carries the reason, so what
 * they print while a backend is opened is held back: replayed to stderr when
 * the backend works (real logs on real hardware are not lost), dropped when
 * it fails. NX_HAL_VENDOR_LOGS=1 turns this off. fd 2 is process-wide, so
 * captures are serialised. */
static pthread_mutex_t tpu_stderr_mutex = PTHREAD_MUTEX_INITIALIZER;

void tpu_stderr_capture_begin(tpu_stderr_capture_t* cap) {
  const char* keep = getenv("NX_HAL_VENDOR_LOGS");
  cap->saved_fd = -1;
  cap->file = NULL;
  pthread_mutex_lock(&tpu_stderr_mutex);
  if (keep != NULL && keep[0] != '\0' && strcmp(keep, "0") != 0) return;
  fflush(stderr);
  cap->file = tmpfile();
  if (cap->file == NULL) return;
  cap->saved_fd = dup(2);
  if (cap->saved_fd < 0 || dup2(fileno(cap->file), 2) < 0) {
    if (cap->saved_fd >= 0) close(cap->saved_fd);
    cap->saved_fd = -1;
    fclose(cap->file);
    cap->file = NULL;
  }
}

void tpu_stderr_capture_end(tpu_stderr_capture_t* cap, int replay) {
  if (cap->file != NULL) {
    fflush(stderr);
    dup2(cap->saved_fd, 2);
    close(cap->saved_fd);
    if (replay) {
      char chunk[4096];
      size_t n;
      rewind(cap->file);
      while ((n = fread(chunk, 1, sizeof chunk, cap->file)) > 0) fwrite(chunk, 1, n, stderr);
      fflush(stderr);
    }
    fclose(cap->file);
    cap->file = NULL;
  }
  pthread_mutex_unlock(&tpu_stderr_mutex);
}
