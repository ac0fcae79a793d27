/* execute.c -- running a compiled executable: inputs checked against the
 * signature before PJRT sees them, output memory reserved on each replica's
 * device, PJRT's outputs wrapped as nx_hal buffers, completion bridged to an
 * nx_hal event. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* --- input checks -------------------------------------------------------- */

/* Each input is on the device its replica runs on. */
static nxhal_status_t* tpu_check_placement(const nxhal_executable_t* e,
                                           nxhal_buffer_t* const* inputs, size_t num_inputs) {
  size_t i, replicas = tpu_replicas(e);
  for (i = 0; i < num_inputs; ++i) {
    const nxhal_device_t* want = replicas > 1 ? e->replicas[i / e->num_inputs] : e->device;
    if (inputs[i] == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu is NULL", i);
    if (inputs[i]->device == want) continue;
    if (replicas > 1) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "input %zu is on device '%s' (index %zu); replica %zu runs on "
                               "'%s' (index %zu)",
                               i, inputs[i]->device->name, inputs[i]->device->index,
                               i / e->num_inputs, want->name, want->index);
    }
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "input %zu is on device '%s', the executable on '%s'", i,
                             inputs[i]->device->name, e->device->name);
  }
  return NULL;
}

/* Writes "f32[4,4]" into text (size 256); rank < 0 gives "f32[]". */
static void tpu_format_shape(char* text, size_t size, const char* dtype, const int64_t* dims,
                             int64_t rank) {
  size_t used = (size_t)snprintf(text, size, "%s[", dtype);
  int64_t d;
  for (d = 0; d < rank && used < size - 24; ++d) {
    used += (size_t)snprintf(text + used, size - used, "%s%lld", d ? "," : "", (long long)dims[d]);
  }
  snprintf(text + used, size - used, "]");
}

/* Whether buffer `b` has the dtype and shape `io` states (unknown parts
 * match anything). */
static int tpu_input_matches(const tpu_io_t* io, const nxhal_buffer_t* b) {
  int64_t d;
  if (io->dtype != NXHAL_DTYPE_INVALID && io->dtype != b->dtype) return 0;
  if (io->rank < 0) return 1;
  if (io->rank != b->rank) return 0;
  for (d = 0; d < io->rank; ++d) {
    if (io->dims[d] >= 0 && io->dims[d] != b->dims[d]) return 0;
  }
  return 1;
}

/* Count, dtypes and shapes against the program's signature. */
static nxhal_status_t* tpu_check_signature(const nxhal_executable_t* e,
                                           nxhal_buffer_t* const* inputs, size_t num_inputs) {
  size_t i;
  if (num_inputs != e->num_inputs * tpu_replicas(e)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "expected %zu inputs, got %zu", e->num_inputs,
                             num_inputs);
  }
  for (i = 0; i < num_inputs; ++i) {
    const tpu_io_t* io = &e->inputs[i % e->num_inputs];
    const nxhal_buffer_t* b = inputs[i];
    char want[256], got[256];
    if (tpu_input_matches(io, b)) continue;
    tpu_format_shape(want, sizeof(want), io->dtype ? nxhal_dtype_name(io->dtype) : "?", io->dims,
                     io->rank);
    tpu_format_shape(got, sizeof(got), nxhal_dtype_name(b->dtype), b->dims, b->rank);
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu ('%s') expects %s, got %s", i,
                             io->name ? io->name : "", want, got);
  }
  return NULL;
}

/* Checks the inputs against the signature before PJRT sees them. */
static nxhal_status_t* tpu_check_inputs(nxhal_executable_t* e, nxhal_buffer_t* const* inputs,
                                        size_t num_inputs) {
  size_t replicas = tpu_replicas(e);
  nxhal_status_t* status;
  if (num_inputs > 0) NXHAL_REQUIRE_ARG(inputs);
  if (replicas > 1 && !e->inputs_known) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "replicated execution needs the program's input signature, and PJRT "
                             "states none for this program");
  }
  if (replicas > 1 && num_inputs != e->num_inputs * replicas) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "expected %zu inputs (%zu for each of %zu replicas), got %zu",
                             e->num_inputs * replicas, e->num_inputs, replicas, num_inputs);
  }
  status = tpu_check_placement(e, inputs, num_inputs);
  if (status != NULL) return status;
  if (!e->inputs_known) return NULL; /* PJRT checks count and shapes itself */
  return tpu_check_signature(e, inputs, num_inputs);
}

/* --- one call's arrays --------------------------------------------------- */

/* Inputs and outputs up to this many (over all replicas) use the inline
 * arrays: no allocation on the dispatch path of small programs. */
#define TPU_SMALL_IO 16
#define TPU_SMALL_REPLICAS 8

/* The arrays one execute hands PJRT, in one place so one call frees them:
 * inline for small calls, otherwise carved from one heap block. */
typedef struct tpu_exec_call {
  size_t num_inputs, num_outputs, replicas;
  PJRT_Buffer** args;             /* num_inputs: every replica's, in order */
  PJRT_Buffer** outs;             /* num_outputs: filled by PJRT */
  uint64_t* sizes;                /* num_outputs: bytes reserved for each */
  int64_t* keep;                  /* num_inputs: indices PJRT must not donate */
  PJRT_Buffer* const** arg_lists; /* replicas: each replica's slice of args */
  PJRT_Buffer*** out_lists;       /* replicas: each replica's slice of outs */
  PJRT_Event** complete;          /* replicas: PJRT's completion events */
  void* heap;                     /* the block when not inline; else NULL */
  uint64_t small_sizes[TPU_SMALL_IO];
  int64_t small_keep[TPU_SMALL_IO];
  PJRT_Buffer* small_args[TPU_SMALL_IO];
  PJRT_Buffer* small_outs[TPU_SMALL_IO];
  PJRT_Buffer* const* small_arg_lists[TPU_SMALL_REPLICAS];
  PJRT_Buffer** small_out_lists[TPU_SMALL_REPLICAS];
  PJRT_Event* small_events[TPU_SMALL_REPLICAS];
} tpu_exec_call_t;

/* Points the arrays at inline or heap storage, zeroed. 0 on OOM. */
static int tpu_exec_call_init(tpu_exec_call_t* call, size_t num_inputs, size_t num_outputs,
                              size_t replicas) {
  char* p;
  call->num_inputs = num_inputs;
  call->num_outputs = num_outputs;
  call->replicas = replicas;
  call->heap = NULL;
  if (num_inputs <= TPU_SMALL_IO && num_outputs <= TPU_SMALL_IO && replicas <= TPU_SMALL_REPLICAS) {
    memset(call->small_outs, 0, sizeof(call->small_outs));
    memset(call->small_events, 0, sizeof(call->small_events));
    call->sizes = call->small_sizes;
    call->keep = call->small_keep;
    call->args = call->small_args;
    call->outs = call->small_outs;
    call->arg_lists = call->small_arg_lists;
    call->out_lists = call->small_out_lists;
    call->complete = call->small_events;
    return 1;
  }
  /* uint64_t first: every later array holds pointers, whose alignment the
   * 8-byte elements before them keep. */
  call->heap = calloc(1, (num_outputs + num_inputs) * sizeof(uint64_t) +
                             (num_inputs + num_outputs + 3 * replicas) * sizeof(void*));
  if (call->heap == NULL) return 0;
  p = (char*)call->heap;
  call->sizes = (uint64_t*)(void*)p;
  p += num_outputs * sizeof(uint64_t);
  call->keep = (int64_t*)(void*)p;
  p += num_inputs * sizeof(int64_t);
  call->args = (PJRT_Buffer**)(void*)p;
  p += num_inputs * sizeof(PJRT_Buffer*);
  call->outs = (PJRT_Buffer**)(void*)p;
  p += num_outputs * sizeof(PJRT_Buffer*);
  call->arg_lists = (PJRT_Buffer* const**)(void*)p;
  p += replicas * sizeof(PJRT_Buffer* const*);
  call->out_lists = (PJRT_Buffer***)(void*)p;
  p += replicas * sizeof(PJRT_Buffer**);
  call->complete = (PJRT_Event**)(void*)p;
  return 1;
}

static void tpu_exec_call_free(tpu_exec_call_t* call) {
  free(call->heap);
}

/* --- steps of execute ---------------------------------------------------- */

/* Destroys outputs [from, n) that were never wrapped, releasing their share
 * of the memory reserved for them on their replica's device. */
static void tpu_drop_outputs(nxhal_executable_t* e, const tpu_exec_call_t* call, size_t from,
                             size_t n) {
  const PJRT_Api* api = e->device->backend->api;
  size_t k;
  for (k = from; k < n; ++k) {
    if (call->outs[k] != NULL) tpu_pjrt_buffer_destroy(api, call->outs[k]);
    nxhal_memory_release(&tpu_replica_device(e, k / e->num_outputs)->memory, call->sizes[k]);
  }
}

/* Reserves each replica's output bytes on its device before running (the
 * output sizes are known), so a limit is enforced before any work. On
 * failure nothing stays reserved. */
static nxhal_status_t* tpu_reserve_outputs(nxhal_executable_t* e, tpu_exec_call_t* call) {
  nxhal_status_t* status = NULL;
  size_t i, r, reserved_replicas = 0;
  for (i = 0; i < call->num_outputs; ++i) {
    const tpu_io_t* io = &e->outputs[i % e->num_outputs];
    uint64_t size = nxhal_dtype_size(io->dtype);
    int64_t d;
    for (d = 0; d < io->rank; ++d) {
      /* Saturates: the reservation below then refuses it as over any limit. */
      if (!nxhal_mul_u64(size, (uint64_t)(io->dims[d] > 0 ? io->dims[d] : 0), &size))
        size = UINT64_MAX;
    }
    call->sizes[i] = size;
  }
  for (r = 0; r < call->replicas && status == NULL; ++r) {
    uint64_t reserved = 0;
    for (i = 0; i < e->num_outputs; ++i) {
      if (!nxhal_add_u64(reserved, call->sizes[r * e->num_outputs + i], &reserved))
        reserved = UINT64_MAX;
    }
    status = nxhal_memory_reserve(&tpu_replica_device(e, r)->memory, reserved, "execute outputs");
    if (status == NULL) reserved_replicas = r + 1;
  }
  if (status != NULL) tpu_drop_outputs(e, call, 0, reserved_replicas * e->num_outputs);
  return status;
}

static int tpu_pointer_order(const void* a, const void* b) {
  uintptr_t x = (uintptr_t)*(PJRT_Buffer* const*)a, y = (uintptr_t)*(PJRT_Buffer* const*)b;
  return (x > y) - (x < y);
}

/* Whether one buffer appears twice among `args`: pairwise where there are
 * few, else through a sorted copy (a pairwise scan of 200 inputs cost a call
 * 280 us). Without memory for the copy, says yes: the caller then checks
 * each input pairwise. */
static int tpu_any_twice(PJRT_Buffer* const* args, size_t n) {
  PJRT_Buffer** sorted;
  size_t i, j;
  int found = 0;
  if (n <= 32) {
    for (i = 0; i < n && !found; ++i)
      for (j = i + 1; j < n && !found; ++j) found = args[i] == args[j];
    return found;
  }
  sorted = (PJRT_Buffer**)malloc(n * sizeof(*sorted));
  if (sorted == NULL) return 1;
  memcpy(sorted, args, n * sizeof(*sorted));
  qsort(sorted, n, sizeof(*sorted), tpu_pointer_order);
  for (i = 1; i < n && !found; ++i) found = sorted[i] == sorted[i - 1];
  free(sorted);
  return found;
}

/* Which inputs PJRT must not donate to a program's outputs (input-output
 * aliasing), in call->keep; returns how many. On a device that cannot donate
 * right (client.c: an older XLA CPU), none: PJRT copies them. On a CPU
 * device that can, none whose memory is seen outside PJRT (the caller's host
 * memory aliased, a live zero-copy export: tpu_storage_exposed), whose bytes
 * would change under that reader or be freed from it; nor one passed twice,
 * which PJRT cannot both donate and read. TPUs and GPUs hold no such memory
 * (their exports and imports are copies). The indices are the same in every
 * replica's list. */
static size_t tpu_non_donatable(const nxhal_executable_t* e, tpu_exec_call_t* call,
                                nxhal_buffer_t* const* inputs, size_t per_replica) {
  size_t i, j, r, n = 0;
  int twice = 0;
  if (!e->device->is_cpu) return 0;
  /* call->args holds each input's PJRT buffer, contiguous: one storage is
   * one PJRT buffer, and a scan of the array touches no input's handle. */
  for (r = 0; r < call->replicas && !twice && e->device->donates; ++r)
    twice = tpu_any_twice(call->args + r * per_replica, per_replica);
  for (i = 0; i < per_replica; ++i) {
    int keep = !e->device->donates;
    for (r = 0; r < call->replicas && !keep; ++r) {
      PJRT_Buffer* const* args = call->args + r * per_replica;
      keep = tpu_storage_exposed(inputs[r * per_replica + i]->storage);
      for (j = 0; twice && j < per_replica && !keep; ++j) keep = j != i && args[j] == args[i];
    }
    if (keep) call->keep[n++] = (int64_t)i;
  }
  return n;
}

/* Runs the executable over `inputs`; PJRT fills call->outs and
 * call->complete. On failure the outputs' reservations are released. */
static nxhal_status_t* tpu_exec_run(nxhal_executable_t* e, tpu_exec_call_t* call,
                                    nxhal_buffer_t* const* inputs) {
  const PJRT_Api* api = e->device->backend->api;
  PJRT_ExecuteOptions opts;
  PJRT_LoadedExecutable_Execute_Args xargs;
  PJRT_Error* error;
  size_t i, r, per_replica = call->num_inputs / call->replicas;
  for (i = 0; i < call->num_inputs; ++i) call->args[i] = inputs[i]->storage->buffer;
  for (r = 0; r < call->replicas; ++r) {
    call->arg_lists[r] = call->args + r * per_replica;
    call->out_lists[r] = call->outs + r * e->num_outputs;
  }
  memset(&opts, 0, sizeof(opts));
  opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  opts.num_non_donatable_input_indices = tpu_non_donatable(e, call, inputs, per_replica);
  opts.non_donatable_input_indices = call->keep;
  memset(&xargs, 0, sizeof(xargs));
  xargs.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  xargs.executable = e->loaded;
  xargs.options = &opts;
  xargs.argument_lists = call->arg_lists;
  xargs.num_devices = call->replicas;
  xargs.num_args = per_replica;
  xargs.output_lists = call->out_lists;
  xargs.device_complete_events = call->complete;
  /* A portable executable runs where execute says: the compiled-for device.
   * Replicas run on PJRT's device assignment. */
  xargs.execute_device = call->replicas == 1 ? e->device->pjrt : NULL;
  error = api->PJRT_LoadedExecutable_Execute(&xargs);
  if (error == NULL) return NULL;
  tpu_drop_outputs(e, call, 0, call->num_outputs);
  for (i = 0; i < call->num_inputs; ++i) {
    if (tpu_buffer_is_gone(inputs[i])) {
      free(tpu_take_error_message(api, error));
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "execute: input %zu was donated to an earlier execute (a program's "
                               "donated input: its memory now holds that call's output, which is "
                               "the value to pass) or deleted",
                               i % per_replica);
    }
  }
  return tpu_status_from_pjrt(api, error, NXHAL_OK, "execute");
}

/* Destroys wrapped outputs [0, n), leaving NULLs. */
static void tpu_destroy_outputs(nxhal_buffer_t** out_outputs, size_t n) {
  size_t k;
  for (k = 0; k < n; ++k) {
    tpu_buffer_destroy(out_outputs[k]);
    out_outputs[k] = NULL;
  }
}

/* Wraps PJRT's outputs as nx_hal buffers; each takes its share of the
 * reservation. On failure every output is gone and the run awaited. */
static nxhal_status_t* tpu_wrap_outputs(nxhal_executable_t* e, tpu_exec_call_t* call,
                                        nxhal_buffer_t** out_outputs) {
  const PJRT_Api* api = e->device->backend->api;
  size_t i, r;
  for (i = 0; i < call->num_outputs; ++i) {
    const tpu_io_t* io = &e->outputs[i % e->num_outputs];
    /* On failure tpu_buffer_wrap destroys outs[i] and releases its share. */
    nxhal_status_t* status =
        tpu_buffer_wrap(tpu_replica_device(e, i / e->num_outputs), call->outs[i], call->sizes[i],
                        io->dtype, io->rank, io->dims, &out_outputs[i]);
    if (status != NULL) {
      tpu_drop_outputs(e, call, i + 1, call->num_outputs);
      tpu_destroy_outputs(out_outputs, i);
      for (r = 0; r < call->replicas; ++r) {
        nxhal_status_free(tpu_event_await_destroy(api, call->complete[r], "execute"));
      }
      return status;
    }
  }
  return NULL;
}

/* Completion: awaited here without out_event (outputs destroyed if the run
 * failed), else handed to a new nx_hal event. */
static nxhal_status_t* tpu_exec_complete(nxhal_executable_t* e, tpu_exec_call_t* call,
                                         nxhal_buffer_t** out_outputs, nxhal_event_t** out_event) {
  const PJRT_Api* api = e->device->backend->api;
  nxhal_status_t* status = NULL;
  size_t r;
  if (out_event == NULL) {
    for (r = 0; r < call->replicas; ++r) {
      nxhal_status_t* failed = tpu_event_await_destroy(api, call->complete[r], "execute");
      if (status == NULL) {
        status = failed;
      } else {
        nxhal_status_free(failed);
      }
    }
    if (status != NULL) tpu_destroy_outputs(out_outputs, call->num_outputs);
    return status;
  }
  if (call->complete[0] != NULL) {
    return tpu_event_bridge_all(api, call->complete, call->replicas, out_event);
  }
  /* PJRT gave no completion events: the work is done. */
  for (r = 1; r < call->replicas; ++r) tpu_pjrt_event_destroy(api, call->complete[r]);
  return nxhal_event_done(out_event);
}

/* A donated input's memory is counted by the output that took it: the
 * input's count is given back now, not when its handle is destroyed, so a
 * loop that keeps its old parameters' handles is not refused by the
 * device's memory limit for memory it no longer holds. */
static void tpu_forget_donated(const nxhal_executable_t* e, nxhal_buffer_t* const* inputs,
                               size_t num_inputs) {
  size_t i;
  if (!e->may_donate || !e->device->donates) return;
  for (i = 0; i < num_inputs; ++i) {
    if (tpu_buffer_is_gone(inputs[i])) tpu_storage_forget_memory(inputs[i]->storage);
  }
}

nxhal_status_t* tpu_executable_execute(nxhal_executable_t* e, nxhal_buffer_t* const* inputs,
                                       size_t num_inputs, nxhal_buffer_t** out_outputs,
                                       size_t num_outputs, nxhal_event_t** out_event) {
  nxhal_status_t* status;
  tpu_exec_call_t call;
  size_t replicas;
  if (out_event != NULL) *out_event = NULL;
  NXHAL_REQUIRE_ARG(e);
  replicas = tpu_replicas(e);
  if (num_outputs != e->num_outputs * replicas || (num_outputs > 0 && out_outputs == NULL)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "room for %zu outputs given, %zu produced",
                             out_outputs ? num_outputs : 0, e->num_outputs * replicas);
  }
  status = tpu_check_inputs(e, inputs, num_inputs);
  if (status != NULL) return status;
  if (!tpu_exec_call_init(&call, num_inputs, num_outputs, replicas)) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  status = tpu_reserve_outputs(e, &call);
  if (status == NULL) status = tpu_exec_run(e, &call, inputs);
  if (status == NULL) tpu_forget_donated(e, inputs, num_inputs);
  if (status == NULL) status = tpu_wrap_outputs(e, &call, out_outputs);
  if (status == NULL) status = tpu_exec_complete(e, &call, out_outputs, out_event);
  tpu_exec_call_free(&call);
  return status;
}
