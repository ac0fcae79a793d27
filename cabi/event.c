/* event.c -- a thread-safe, reference-counted completion event. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_MONOTONIC under -std=c99 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "nx_hal/nx_hal_plugin.h"

/* Two references at birth: the caller's (event_destroy) and the producer's
 * (nxhal_event_complete); whichever goes last frees the event. */
struct nxhal_event {
  pthread_mutex_t mutex;
  pthread_cond_t cond;             /* signalled on completion; waits on CLOCK_MONOTONIC */
  int refcount;                    /* guarded by mutex */
  int done;                        /* guarded by mutex */
  nxhal_status_t* status;          /* owned; set once when done */
  nxhal_event_callback_t callback; /* guarded by mutex; run once */
  void* user_data;
  int has_callback;
};

nxhal_event_t* nxhal_event_new(void) {
  pthread_condattr_t attr;
  nxhal_event_t* event = (nxhal_event_t*)calloc(1, sizeof(*event));
  if (event == NULL) return NULL;
  if (pthread_mutex_init(&event->mutex, NULL) != 0) {
    free(event);
    return NULL;
  }
  if (pthread_condattr_init(&attr) != 0) {
    pthread_mutex_destroy(&event->mutex);
    free(event);
    return NULL;
  }
  /* Monotonic: a wall-clock jump must not stretch or cut a timeout. */
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (pthread_cond_init(&event->cond, &attr) != 0) {
    pthread_condattr_destroy(&attr);
    pthread_mutex_destroy(&event->mutex);
    free(event);
    return NULL;
  }
  pthread_condattr_destroy(&attr);
  event->refcount = 2;
  return event;
}

/* Drops one reference; the last frees the event and its status. */
static void nxhal_event_release(nxhal_event_t* event) {
  int remaining;
  pthread_mutex_lock(&event->mutex);
  remaining = --event->refcount;
  pthread_mutex_unlock(&event->mutex);
  if (remaining > 0) return;
  nxhal_status_free(event->status);
  pthread_cond_destroy(&event->cond);
  pthread_mutex_destroy(&event->mutex);
  free(event);
}

void nxhal_event_complete(nxhal_event_t* event, nxhal_status_t* status) {
  nxhal_event_callback_t callback = NULL;
  void* user_data = NULL;
  if (event == NULL) {
    nxhal_status_free(status);
    return;
  }
  pthread_mutex_lock(&event->mutex);
  if (event->done) {
    /* A second completion is a producer bug; keep the first result. */
    pthread_mutex_unlock(&event->mutex);
    nxhal_status_free(status);
    return;
  }
  event->done = 1;
  event->status = status;
  if (event->has_callback) {
    callback = event->callback;
    user_data = event->user_data;
    event->callback = NULL;
  }
  pthread_cond_broadcast(&event->cond);
  pthread_mutex_unlock(&event->mutex);
  /* Outside the lock: the callback may call back into the event. The
   * producer's reference keeps it alive until after the call. Waiters are
   * already woken, so await may return before the callback has finished. */
  if (callback != NULL) callback(nxhal_status_copy(status), user_data);
  nxhal_event_release(event);
}

nxhal_status_t* nxhal_event_is_ready(nxhal_event_t* event, int32_t* out_ready) {
  if (event == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "event is NULL");
  if (out_ready == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "out_ready is NULL");
  pthread_mutex_lock(&event->mutex);
  *out_ready = event->done ? 1 : 0;
  pthread_mutex_unlock(&event->mutex);
  return NULL;
}

nxhal_status_t* nxhal_event_await(nxhal_event_t* event, int64_t timeout_ns) {
  struct timespec deadline;
  nxhal_status_t* result;
  int rc = 0;
  if (event == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "event is NULL");
  if (timeout_ns < 0 && timeout_ns != NXHAL_WAIT_FOREVER) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "timeout_ns is %lld; use >= 0 or NXHAL_WAIT_FOREVER",
                             (long long)timeout_ns);
  }
  if (timeout_ns >= 0) {
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(timeout_ns / 1000000000);
    deadline.tv_nsec += (long)(timeout_ns % 1000000000);
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000L;
    }
  }
  pthread_mutex_lock(&event->mutex);
  while (!event->done && rc != ETIMEDOUT) {
    if (timeout_ns < 0) {
      pthread_cond_wait(&event->cond, &event->mutex);
    } else {
      rc = pthread_cond_timedwait(&event->cond, &event->mutex, &deadline);
    }
  }
  if (event->done) {
    result = nxhal_status_copy(event->status);
  } else {
    result = nxhal_status_make(NXHAL_DEADLINE_EXCEEDED, "event not ready after %lld ns",
                               (long long)timeout_ns);
  }
  pthread_mutex_unlock(&event->mutex);
  return result;
}

nxhal_status_t* nxhal_event_on_ready(nxhal_event_t* event, nxhal_event_callback_t callback,
                                     void* user_data) {
  nxhal_status_t* copy;
  if (event == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "event is NULL");
  if (callback == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "callback is NULL");
  pthread_mutex_lock(&event->mutex);
  if (event->has_callback) {
    pthread_mutex_unlock(&event->mutex);
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "event already has a callback (one per event)");
  }
  event->has_callback = 1;
  if (!event->done) {
    event->callback = callback;
    event->user_data = user_data;
    pthread_mutex_unlock(&event->mutex);
    return NULL;
  }
  copy = nxhal_status_copy(event->status);
  pthread_mutex_unlock(&event->mutex);
  callback(copy, user_data);
  return NULL;
}

void nxhal_event_destroy(nxhal_event_t* event) {
  if (event == NULL) return;
  nxhal_event_release(event);
}

nxhal_status_t* nxhal_event_done_with(nxhal_event_t** out_event, nxhal_status_t* status) {
  nxhal_event_t* event;
  if (out_event == NULL) return status;
  event = nxhal_event_new();
  if (event == NULL) {
    *out_event = NULL;
    nxhal_status_free(status);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory for an event");
  }
  /* Our reference is the caller's; completing releases the producer's. */
  nxhal_event_complete(event, status);
  *out_event = event;
  return NULL;
}

nxhal_status_t* nxhal_event_done(nxhal_event_t** out_event) {
  return nxhal_event_done_with(out_event, NULL);
}
