/* execute.c -- running an executable: input checks, a pool of infer
 * requests, host memory wrapped as OpenVINO tensors, sync and async runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* One OpenVINO infer request. `async_started` marks one whose last run went
 * through start_async: it must be waited on before its next use, because
 * OpenVINO calls our callback before the request is idle again. */
typedef struct npu_request {
  ov_infer_request_t* req;
  int async_started;
  ov_callback_t callback; /* OpenVINO keeps a pointer to this, not a copy */
  /* The host memory and shape each input was last bound to: rebinding the
   * same ones is skipped, which is most of a tiny model's overhead. */
  void** bound_data;
  int64_t* bound_rank;
  int64_t (*bound_dims)[NPU_MAX_RANK];
} npu_request_t;

static void request_free(npu_request_t* r) {
  if (r == NULL) return;
  if (r->req != NULL) npu_ov.ov_infer_request_free(r->req);
  free(r->bound_data);
  free(r->bound_rank);
  free(r->bound_dims);
  free(r);
}

static npu_request_t* request_new(const nxhal_executable_t* exe) {
  npu_request_t* r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  size_t n = exe->num_inputs > 0 ? exe->num_inputs : 1;
  r->bound_data = calloc(n, sizeof *r->bound_data);
  r->bound_rank = calloc(n, sizeof *r->bound_rank);
  r->bound_dims = calloc(n, sizeof *r->bound_dims);
  if (r->bound_data == NULL || r->bound_rank == NULL || r->bound_dims == NULL) {
    request_free(r);
    return NULL;
  }
  return r;
}

/* Takes an idle request, creating one while under the pool's cap, else
 * waits for one. Thread-safe. */
static nxhal_status_t* acquire(nxhal_executable_t* exe, npu_request_t** out) {
  pthread_mutex_lock(&exe->pool_mu);
  while (exe->num_idle == 0 && exe->num_created >= exe->max_requests) {
    pthread_cond_wait(&exe->pool_cv, &exe->pool_mu);
  }
  npu_request_t* r = NULL;
  if (exe->num_idle > 0) {
    r = exe->idle[--exe->num_idle];
  } else {
    /* Reserve the slot, then create without the lock held: creation is slow. */
    size_t slot = exe->num_created++;
    pthread_mutex_unlock(&exe->pool_mu);
    r = request_new(exe);
    ov_status_e st =
        r != NULL ? npu_ov.ov_compiled_model_create_infer_request(exe->compiled, &r->req) : OK;
    pthread_mutex_lock(&exe->pool_mu);
    if (r == NULL || st != OK) {
      exe->num_created--;
      pthread_cond_signal(&exe->pool_cv);
      pthread_mutex_unlock(&exe->pool_mu);
      request_free(r);
      return r == NULL ? nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory")
                       : npu_ov_error(NXHAL_INTERNAL, st, "creating an infer request");
    }
    /* Slots below num_created may be filled in any order; find a free one. */
    (void)slot;
    for (size_t i = 0; i < exe->max_requests; i++) {
      if (exe->all[i] == NULL) {
        exe->all[i] = r;
        break;
      }
    }
  }
  pthread_mutex_unlock(&exe->pool_mu);
  if (r->async_started) {
    /* Its callback has run; this returns once OpenVINO marks it idle. The
     * run's own error was already reported through its event. */
    (void)npu_ov.ov_infer_request_wait(r->req);
    r->async_started = 0;
  }
  *out = r;
  return NULL;
}

static void release(nxhal_executable_t* exe, npu_request_t* r) {
  pthread_mutex_lock(&exe->pool_mu);
  exe->idle[exe->num_idle++] = r;
  pthread_cond_signal(&exe->pool_cv);
  pthread_mutex_unlock(&exe->pool_mu);
}

void npu_request_pool_destroy(nxhal_executable_t* exe) {
  if (exe->all == NULL) return;
  for (size_t i = 0; i < exe->max_requests; i++) {
    npu_request_t* r = exe->all[i];
    if (r == NULL) continue;
    if (r->async_started) (void)npu_ov.ov_infer_request_wait(r->req);
    request_free(r);
  }
  free(exe->all);
  free(exe->idle);
  exe->all = exe->idle = NULL;
}

/* Checks inputs against the compiled model: count, dtype, rank, static dims. */
static nxhal_status_t* check_inputs(const nxhal_executable_t* exe, nxhal_buffer_t* const* inputs,
                                    size_t num_inputs) {
  if (num_inputs != exe->num_inputs) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "expected %zu inputs, got %zu%s%s",
                             exe->num_inputs, num_inputs,
                             num_inputs < exe->num_inputs ? "; missing input " : "",
                             num_inputs < exe->num_inputs ? exe->inputs[num_inputs].name : "");
  }
  if (num_inputs > 0) NXHAL_REQUIRE_ARG(inputs);
  for (size_t i = 0; i < num_inputs; i++) {
    const nxhal_io_info_t* io = &exe->inputs[i];
    const nxhal_buffer_t* b = inputs[i];
    if (b == NULL) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu ('%s') is NULL", i, io->name);
    }
    if (b->dtype != io->desc.dtype) {
      const char* got = nxhal_dtype_name(b->dtype);
      const char* want = nxhal_dtype_name(io->desc.dtype);
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu ('%s') has dtype %s, expected %s",
                               i, io->name, got ? got : "?", want ? want : "?");
    }
    int bad = 0;
    if (io->desc.rank >= 0) {
      bad = b->rank != io->desc.rank;
      for (int64_t d = 0; !bad && d < b->rank; d++) {
        bad = io->desc.dims[d] >= 0 && io->desc.dims[d] != b->dims[d];
      }
    }
    if (bad) {
      char got[256], want[256];
      npu_format_dims(b->dims, b->rank, got, sizeof got);
      npu_format_dims(io->desc.dims, io->desc.rank, want, sizeof want);
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "input %zu ('%s') has shape %s, expected %s (-1: any)", i, io->name,
                               got, want);
    }
    if (b->device->client != exe->device->client) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu ('%s') belongs to another client",
                               i, io->name);
    }
  }
  return NULL;
}

/* An OpenVINO tensor over `data` (not copied). Caller frees *out. */
static ov_status_e wrap(ov_element_type_e type, int64_t rank, const int64_t* dims, void* data,
                        ov_tensor_t** out) {
  if (rank == 0) {
    /* ov_shape_create refuses rank 0, but ov_tensor_create_from_host_ptr
     * only copies `rank` dims out of the struct, so a hand-built empty
     * shape gives the rank-0 tensor a scalar input or output needs. */
    ov_shape_t scalar = {0};
    scalar.rank = 0;
    scalar.dims = NULL;
    return npu_ov.ov_tensor_create_from_host_ptr(type, scalar, data, out);
  }
  ov_shape_t shape = {0};
  ov_status_e st = npu_ov.ov_shape_create(rank, dims, &shape);
  if (st != OK) return st;
  st = npu_ov.ov_tensor_create_from_host_ptr(type, shape, data, out);
  npu_ov.ov_shape_free(&shape);
  return st;
}

/* Sets every input, and every statically shaped output, of `r` to wrap our
 * host memory; allocates the static outputs' buffers into outputs[]. */
static nxhal_status_t* bind(nxhal_executable_t* exe, npu_request_t* r,
                            nxhal_buffer_t* const* inputs, nxhal_buffer_t** outputs) {
  for (size_t i = 0; i < exe->num_inputs; i++) {
    const nxhal_buffer_t* b = inputs[i];
    if (r->bound_data[i] == b->storage->data && r->bound_rank[i] == b->rank &&
        memcmp(r->bound_dims[i], b->dims, sizeof(int64_t) * (size_t)b->rank) == 0) {
      continue; /* the request already reads this memory in this shape */
    }
    r->bound_data[i] = NULL;
    ov_tensor_t* t = NULL;
    ov_status_e st = wrap(exe->input_ov_types[i], b->rank, b->dims, b->storage->data, &t);
    if (st == OK) {
      st = npu_ov.ov_infer_request_set_input_tensor_by_index(r->req, i, t);
      npu_ov.ov_tensor_free(t);
    }
    if (st != OK) {
      char what[300];
      snprintf(what, sizeof what, "setting input %zu ('%s')", i, exe->inputs[i].name);
      return npu_ov_error(NXHAL_INVALID_ARGUMENT, st, what);
    }
    if (b->rank <= NPU_MAX_RANK) {
      r->bound_data[i] = b->storage->data;
      r->bound_rank[i] = b->rank;
      memcpy(r->bound_dims[i], b->dims, sizeof(int64_t) * (size_t)b->rank);
    }
  }
  for (size_t i = 0; i < exe->num_outputs; i++) {
    const nxhal_io_info_t* io = &exe->outputs[i];
    if (!exe->output_static[i]) continue;
    /* The model declares these shapes: a product that overflows would
     * allocate less than OpenVINO then writes. */
    uint64_t size = nxhal_dtype_size(io->desc.dtype);
    for (int64_t d = 0; d < io->desc.rank; d++) {
      if (io->desc.dims[d] < 0 || !nxhal_mul_u64(size, (uint64_t)io->desc.dims[d], &size)) {
        return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED,
                                 "output %zu ('%s') is too large: its shape "
                                 "times its element size overflows",
                                 i, io->name ? io->name : "");
      }
    }
    nxhal_status_t* s = npu_buffer_alloc(exe->device, io->desc.dtype, io->desc.rank, io->desc.dims,
                                         size, &outputs[i]);
    if (s != NULL) return s;
    if (exe->output_static[i] == 2) continue; /* filled by collect() */
    ov_tensor_t* t = NULL;
    ov_status_e st =
        wrap(exe->output_ov_types[i], io->desc.rank, io->desc.dims, outputs[i]->storage->data, &t);
    if (st == OK) {
      st = npu_ov.ov_infer_request_set_output_tensor_by_index(r->req, i, t);
      npu_ov.ov_tensor_free(t);
    }
    if (st != OK) {
      char what[300];
      snprintf(what, sizeof what, "setting output %zu ('%s')", i, io->name);
      return npu_ov_error(NXHAL_INTERNAL, st, what);
    }
  }
  return NULL;
}

/* Reads output `i` of a finished run: its byte size, data and, with
 * `shape` non-NULL, its shape. */
static ov_status_e output_view(npu_request_t* r, size_t i, ov_tensor_t** t, ov_shape_t* shape,
                               size_t* bytes, void** data) {
  ov_status_e st = npu_ov.ov_infer_request_get_output_tensor_by_index(r->req, i, t);
  if (st == OK && shape != NULL) {
    st = npu_ov.ov_tensor_get_shape(*t, shape);
    size_t elements = 0;
    /* The C API refuses to build a rank-0 shape; a one-element tensor that
     * has no shape is a scalar. */
    if (st == INVALID_C_PARAM && npu_ov.ov_tensor_get_size(*t, &elements) == OK && elements == 1) {
      shape->rank = 0;
      shape->dims = NULL;
      st = OK;
    }
  }
  if (st == OK) st = npu_ov.ov_tensor_get_byte_size(*t, bytes);
  /* An empty tensor has no data pointer to ask for. */
  if (st == OK && *bytes > 0) st = npu_ov.ov_tensor_data(*t, data);
  return st;
}

/* Puts static output `i` (`bytes` at `data`, OpenVINO's) into `s`, unless
 * OpenVINO ran it straight into `s`. */
static nxhal_status_t* copy_static(const nxhal_executable_t* exe, size_t i, const void* data,
                                   size_t bytes, npu_storage_t* s) {
  if (data == s->data || bytes == 0) return NULL;
  if (bytes != s->size) {
    return nxhal_status_make(NXHAL_INTERNAL, "output %zu ('%s') came back with %zu bytes, not %llu",
                             i, exe->outputs[i].name, bytes, (unsigned long long)s->size);
  }
  memcpy(s->data, data, bytes);
  return NULL;
}

/* After a run: copies each dynamically shaped output out of the request into
 * a buffer of the shape it came out with. A static output was bound to our
 * buffer, but OpenVINO may still hand back its own tensor (an output that is
 * an input passed straight through); then the data is copied from there.
 * Static outputs go to `storages` where given (an async run's: the caller
 * may have destroyed the buffers by now), else to outputs[i]'s storage;
 * `outputs` may be NULL when every output is static. */
static nxhal_status_t* collect(nxhal_executable_t* exe, npu_request_t* r, nxhal_buffer_t** outputs,
                               npu_storage_t* const* storages) {
  for (size_t i = 0; i < exe->num_outputs; i++) {
    ov_tensor_t* t = NULL;
    ov_shape_t shape = {0};
    void* data = NULL;
    size_t bytes = 0;
    ov_status_e st = output_view(r, i, &t, exe->output_static[i] ? NULL : &shape, &bytes, &data);
    if (st != OK) {
      if (t != NULL) npu_ov.ov_tensor_free(t);
      npu_ov.ov_shape_free(&shape);
      return nxhal_status_make(NXHAL_INTERNAL, "reading output %zu ('%s') failed (OpenVINO %s)", i,
                               exe->outputs[i].name, npu_ov.ov_get_error_info(st));
    }
    nxhal_status_t* s = NULL;
    if (!exe->output_static[i]) {
      s = npu_buffer_alloc(exe->device, exe->outputs[i].desc.dtype, shape.rank, shape.dims, bytes,
                           &outputs[i]);
      if (s == NULL && bytes > 0) memcpy(outputs[i]->storage->data, data, bytes);
    } else {
      s = copy_static(exe, i, data, bytes, storages != NULL ? storages[i] : outputs[i]->storage);
    }
    npu_ov.ov_shape_free(&shape);
    npu_ov.ov_tensor_free(t);
    if (s != NULL) return s;
  }
  return NULL;
}

static void destroy_outputs(nxhal_buffer_t** outputs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    npu_buffer_destroy(outputs[i]);
    outputs[i] = NULL;
  }
}

/* What an async run carries to its completion callback. Owned by the run:
 * made before the start, freed by the callback (or by a failed start). */
typedef struct async_run {
  nxhal_executable_t* exe;
  npu_request_t* r;
  nxhal_event_t* event;
  /* One reference on each output's storage, marked pending until written:
   * the caller may destroy the buffers (not the storage) before the end. */
  npu_storage_t** storages;
} async_run_t;

/* Ends the run's hold on its outputs: settled (waking their readers), then
 * released (freeing those whose buffers are gone). */
static void settle_outputs(npu_storage_t** storages, size_t n, int failed) {
  for (size_t i = 0; i < n; i++) {
    npu_storage_settle(storages[i], failed);
    npu_storage_release(storages[i]);
  }
  free(storages);
}

static void OPENVINO_C_API_CALLBACK on_done(void* args) {
  async_run_t* run = args;
  /* The C API drops the run's exception, and the request is not idle yet,
   * so it cannot be asked. Inputs were checked before the start; what can
   * still fail is internal to OpenVINO, and the next synchronous run on the
   * request reports it. */
  nxhal_executable_t* exe = run->exe;
  npu_request_t* r = run->r;
  nxhal_event_t* event = run->event;
  nxhal_status_t* st = collect(exe, r, NULL, run->storages);
  /* Settled before the event completes, so that a reader who waited for the
   * event finds the outputs ready without taking a lock. */
  settle_outputs(run->storages, exe->num_outputs, st != NULL);
  free(run);
  release(exe, r);
  nxhal_event_complete(event, st);
}

/* Starts `r` (bound, every output static) on OpenVINO's threads; on_done
 * completes *out_event. On failure the caller still owns `r` and `outputs`. */
static nxhal_status_t* start_async(nxhal_executable_t* exe, npu_request_t* r,
                                   nxhal_buffer_t** outputs, size_t num_outputs,
                                   nxhal_event_t** out_event) {
  async_run_t* run = calloc(1, sizeof *run);
  npu_storage_t** storages = calloc(num_outputs > 0 ? num_outputs : 1, sizeof *storages);
  nxhal_event_t* event = run != NULL && storages != NULL ? nxhal_event_new() : NULL;
  if (event == NULL) {
    free(storages);
    free(run);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < num_outputs; i++) {
    /* Marked before the start and before the caller has the buffers, so no
     * reader can see the bytes unwritten and think them done. */
    storages[i] = outputs[i]->storage;
    npu_storage_retain(storages[i]);
    atomic_store(&storages[i]->state, NPU_STORAGE_PENDING);
  }
  run->exe = exe;
  run->r = r;
  run->event = event;
  run->storages = storages;
  r->callback.callback_func = on_done;
  r->callback.args = run;
  ov_status_e ost = npu_ov.ov_infer_request_set_callback(r->req, &r->callback);
  if (ost == OK) {
    r->async_started = 1;
    ost = npu_ov.ov_infer_request_start_async(r->req);
    if (ost != OK) r->async_started = 0;
  }
  if (ost != OK) {
    nxhal_status_t* st = npu_ov_error(NXHAL_INTERNAL, ost, "starting inference");
    settle_outputs(storages, num_outputs, 1);
    free(run);
    nxhal_event_complete(event, NULL);
    nxhal_event_destroy(event);
    return st;
  }
  /* From here on_done may already have run and freed `run`. */
  *out_event = event;
  return NULL;
}

static int has_dynamic_output(const nxhal_executable_t* exe) {
  for (size_t i = 0; i < exe->num_outputs; i++) {
    if (!exe->output_static[i]) return 1;
  }
  return 0;
}

/* Waits for inputs that are outputs of async runs still going: OpenVINO
 * reads their bytes without asking us. Called before a request is taken, so
 * a wait holds nothing the run it waits for needs. */
static nxhal_status_t* await_inputs(const nxhal_executable_t* exe, nxhal_buffer_t* const* inputs) {
  for (size_t i = 0; i < exe->num_inputs; i++) {
    if (npu_storage_wait(inputs[i]->storage) != NPU_STORAGE_READY) {
      return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                               "input %zu ('%s') was never written: the run that was to write it "
                               "failed (its event has the error)",
                               i, exe->inputs[i].name);
    }
  }
  return NULL;
}

nxhal_status_t* npu_executable_execute(nxhal_executable_t* exe, nxhal_buffer_t* const* inputs,
                                       size_t num_inputs, nxhal_buffer_t** out_outputs,
                                       size_t num_outputs, nxhal_event_t** out_event) {
  NXHAL_REQUIRE_ARG(exe);
  if (num_outputs != exe->num_outputs || (num_outputs > 0 && out_outputs == NULL)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "room for %zu outputs given; the model has %zu", num_outputs,
                             exe->num_outputs);
  }
  if (out_event != NULL) *out_event = NULL;
  for (size_t i = 0; i < num_outputs; i++) out_outputs[i] = NULL;
  nxhal_status_t* st = check_inputs(exe, inputs, num_inputs);
  if (st == NULL) st = await_inputs(exe, inputs);
  if (st != NULL) return st;
  npu_request_t* r = NULL;
  st = acquire(exe, &r);
  if (st != NULL) return st;
  st = bind(exe, r, inputs, out_outputs);
  if (st != NULL) {
    destroy_outputs(out_outputs, num_outputs);
    release(exe, r);
    return st;
  }
  /* Outputs whose shape is only known after the run cannot be handed out
   * before it (a buffer's shape is fixed when the caller receives it), so
   * such executables run synchronously and return a completed event. */
  if (out_event == NULL || has_dynamic_output(exe)) {
    ov_status_e ost = npu_ov.ov_infer_request_infer(r->req);
    if (ost != OK) {
      st = npu_ov_error(NXHAL_INTERNAL, ost, "running inference");
    } else {
      st = collect(exe, r, out_outputs, NULL);
    }
    release(exe, r);
    if (st != NULL) destroy_outputs(out_outputs, num_outputs);
    if (st != NULL || out_event == NULL) return st;
    return nxhal_event_done(out_event);
  }
  st = start_async(exe, r, out_outputs, num_outputs, out_event);
  if (st != NULL) {
    destroy_outputs(out_outputs, num_outputs);
    release(exe, r);
  }
  return st;
}
