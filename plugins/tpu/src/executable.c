/* executable.c -- compiling StableHLO through PJRT, checking inputs before
 * PJRT sees them, executing on the compiled-for device, and serialized
 * executables behind a header whose compat key is checked first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"

/* nx_hal compile options. PJRT needs a CompileOptionsProto; we write it. */
static const nxhal_option_spec_t tpu_compile_specs[] = {
    {"num_replicas", NXHAL_VALUE_INT64},
    {"num_partitions", NXHAL_VALUE_INT64},
};

/* Serialized blob layout (little-endian): magic, u32 version, u32 key
 * length, key, SHA-256 digest (32 bytes), u32 signature length, signature,
 * u64 payload length, payload (PJRT bytes). The digest covers every byte but
 * the key and itself, so a flipped byte is refused before PJRT, which trusts
 * its input, sees it; the key stays outside so a blob from another build is
 * still told apart (FAILED_PRECONDITION) from a corrupted one. Version 2 added
 * the digest. */
static const char tpu_blob_magic[8] = {'N', 'X', 'H', 'A', 'L', 'T', 'P', 'U'};
#define TPU_BLOB_VERSION 2u
#define TPU_BLOB_FIXED (8 + 4 + 4) /* magic, version, key length: what precedes the key */

/* --- compile options ----------------------------------------------------- */

/* Appends a protobuf varint. */
static size_t tpu_put_varint(unsigned char* out, uint64_t value) {
  size_t n = 0;
  do {
    unsigned char byte = (unsigned char)(value & 0x7f);
    value >>= 7;
    out[n++] = (unsigned char)(byte | (value ? 0x80 : 0));
  } while (value);
  return n;
}

/* CompileOptionsProto { executable_build_options (3) { num_replicas (4),
 * num_partitions (5) }, compile_portable_executable (4) }. For 1/1 this is
 * 1a 04 20 01 28 01 (+ 20 01). Empty options abort XLA (replica_count > 0),
 * so these bytes are always sent. Portable: the executable runs on the
 * device named at execute rather than on a fixed device assignment. */
static size_t tpu_compile_options(unsigned char* out, int64_t replicas, int64_t partitions,
                                  int portable) {
  unsigned char inner[32];
  size_t n = 0, m = 0;
  inner[m++] = 0x20;
  m += tpu_put_varint(inner + m, (uint64_t)replicas);
  inner[m++] = 0x28;
  m += tpu_put_varint(inner + m, (uint64_t)partitions);
  out[n++] = 0x1a;
  n += tpu_put_varint(out + n, m);
  memcpy(out + n, inner, m);
  n += m;
  if (portable) {
    out[n++] = 0x20;
    out[n++] = 0x01;
  }
  return n;
}

/* --- io ------------------------------------------------------------------ */

static void tpu_executable_free(nxhal_executable_t* e) {
  const PJRT_Api* api;
  if (e == NULL) return;
  api = e->device ? e->device->backend->api : NULL;
  if (api != NULL && e->executable != NULL) {
    PJRT_Executable_Destroy_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = e->executable;
    free(tpu_take_error_message(api, api->PJRT_Executable_Destroy(&args)));
  }
  if (api != NULL && e->loaded != NULL) {
    PJRT_LoadedExecutable_Destroy_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
    args.executable = e->loaded;
    free(tpu_take_error_message(api, api->PJRT_LoadedExecutable_Destroy(&args)));
  }
  tpu_ios_free(e->inputs, e->num_inputs);
  tpu_ios_free(e->outputs, e->num_outputs);
  free(e->signature);
  free(e->payload);
  free(e->replicas);
  free(e);
}

/* Replicas of an executable: 1 unless compiled with num_replicas > 1. */
static size_t tpu_replicas(const nxhal_executable_t* e) {
  return e->num_replicas > 1 ? e->num_replicas : 1;
}

/* The device replica `r` runs on. */
static nxhal_device_t* tpu_replica_device(const nxhal_executable_t* e, size_t r) {
  return e->num_replicas > 1 ? e->replicas[r] : e->device;
}

/* After compiling with several replicas: the devices PJRT placed them on
 * (its default assignment), in replica order, as this client's devices.
 * Replica 0 must be the device compiled for, so that an executable still
 * belongs to one device. */
static nxhal_status_t* tpu_read_replicas(nxhal_executable_t* e, size_t replicas) {
  const PJRT_Api* api = e->device->backend->api;
  nxhal_client_t* client = e->device->client;
  PJRT_LoadedExecutable_AddressableDevices_Args args;
  PJRT_Error* error;
  size_t r, d;
  /* Not among the entries required at load: an older table may lack it. */
  if (!TPU_HAS_FN(api, PJRT_LoadedExecutable_AddressableDevices)) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "this PJRT plugin cannot say where replicas run "
                             "(no PJRT_LoadedExecutable_AddressableDevices): compile with one replica");
  }
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  args.executable = e->loaded;
  error = api->PJRT_LoadedExecutable_AddressableDevices(&args);
  if (error != NULL) return tpu_status_from_pjrt(api, error, NXHAL_OK, "AddressableDevices");
  if (args.num_addressable_devices != replicas) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "PJRT placed %zu replica(s) on this process's devices, %zu asked: "
                             "replicas on other hosts are not supported",
                             args.num_addressable_devices, replicas);
  }
  e->replicas = (nxhal_device_t**)calloc(replicas, sizeof(nxhal_device_t*));
  if (e->replicas == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  for (r = 0; r < replicas; ++r) {
    for (d = 0; d < client->num_devices && e->replicas[r] == NULL; ++d) {
      if (client->devices[d]->pjrt == args.addressable_devices[r]) e->replicas[r] = client->devices[d];
    }
    if (e->replicas[r] == NULL) {
      return nxhal_status_make(NXHAL_INTERNAL, "PJRT placed replica %zu on a device not listed", r);
    }
  }
  if (e->replicas[0] != e->device) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "with num_replicas=%zu PJRT runs replica 0 on '%s' (device index %zu), "
                             "not on '%s': compile it for device index %zu",
                             replicas, e->replicas[0]->name, e->replicas[0]->index,
                             e->device->name, e->replicas[0]->index);
  }
  e->num_replicas = replicas;
  return NULL;
}

/* Reads output count, element types and dims from PJRT. */
static nxhal_status_t* tpu_executable_read_outputs(nxhal_executable_t* e) {
  const PJRT_Api* api = e->device->backend->api;
  PJRT_LoadedExecutable_GetExecutable_Args gargs;
  PJRT_Executable_NumOutputs_Args nargs;
  PJRT_Error* error;
  size_t i;
  memset(&gargs, 0, sizeof(gargs));
  gargs.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  gargs.loaded_executable = e->loaded;
  error = api->PJRT_LoadedExecutable_GetExecutable(&gargs);
  if (error != NULL) return tpu_status_from_pjrt(api, error, NXHAL_OK, "GetExecutable");
  e->executable = gargs.executable;
  memset(&nargs, 0, sizeof(nargs));
  nargs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  nargs.executable = e->executable;
  error = api->PJRT_Executable_NumOutputs(&nargs);
  if (error != NULL) return tpu_status_from_pjrt(api, error, NXHAL_OK, "NumOutputs");
  e->num_outputs = nargs.num_outputs;
  e->outputs = (tpu_io_t*)calloc(nargs.num_outputs ? nargs.num_outputs : 1, sizeof(tpu_io_t));
  if (e->outputs == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  for (i = 0; i < e->num_outputs; ++i) {
    e->outputs[i].name = tpu_sprintf("output%zu", i);
    e->outputs[i].rank = -1;
    e->outputs[i].dims = (int64_t*)calloc(1, sizeof(int64_t));
    if (e->outputs[i].name == NULL || e->outputs[i].dims == NULL) {
      return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  /* Both entries arrived after the first PJRT versions: optional. */
  if (TPU_HAS_FN(api, PJRT_Executable_OutputElementTypes)) {
    PJRT_Executable_OutputElementTypes_Args targs;
    memset(&targs, 0, sizeof(targs));
    targs.struct_size = PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE;
    targs.executable = e->executable;
    error = api->PJRT_Executable_OutputElementTypes(&targs);
    if (error == NULL && targs.num_output_types == e->num_outputs) {
      for (i = 0; i < e->num_outputs; ++i) {
        e->outputs[i].dtype = tpu_dtype_from_pjrt(targs.output_types[i]);
      }
    } else if (error != NULL) {
      free(tpu_take_error_message(api, error));
    }
  }
  if (TPU_HAS_FN(api, PJRT_Executable_OutputDimensions)) {
    PJRT_Executable_OutputDimensions_Args dargs;
    memset(&dargs, 0, sizeof(dargs));
    dargs.struct_size = PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE;
    dargs.executable = e->executable;
    dargs.num_outputs = e->num_outputs;
    error = api->PJRT_Executable_OutputDimensions(&dargs);
    if (error == NULL) {
      const int64_t* d = dargs.dims;
      for (i = 0; i < e->num_outputs; ++i) {
        size_t rank = dargs.dim_sizes[i];
        int64_t* dims = (int64_t*)malloc(sizeof(int64_t) * (rank ? rank : 1));
        if (dims == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
        if (rank > 0) { /* d is NULL when every output is a scalar */
          memcpy(dims, d, sizeof(int64_t) * rank);
          d += rank;
        }
        free(e->outputs[i].dims);
        e->outputs[i].dims = dims;
        e->outputs[i].rank = (int64_t)rank;
      }
    } else {
      free(tpu_take_error_message(api, error));
    }
  }
  return NULL;
}

static nxhal_status_t* tpu_parse_compile_options(const nxhal_option_t* options, size_t num_options,
                                                 int64_t* replicas, int64_t* partitions) {
  nxhal_status_t* status;
  const nxhal_option_t* o;
  status = nxhal_options_check(options, num_options, tpu_compile_specs,
                               sizeof(tpu_compile_specs) / sizeof(tpu_compile_specs[0]));
  if (status != NULL) return status;
  *replicas = *partitions = 1;
  o = nxhal_options_find(options, num_options, "num_replicas");
  if (o != NULL) *replicas = o->int64_value;
  o = nxhal_options_find(options, num_options, "num_partitions");
  if (o != NULL) *partitions = o->int64_value;
  if (*replicas < 1 || *partitions < 1) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "num_replicas and num_partitions must be >= 1, got %lld and %lld",
                             (long long)*replicas, (long long)*partitions);
  }
  if (*partitions != 1) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "partitioned (SPMD) execution (num_partitions=%lld) is not supported "
                             "yet; replicated execution is (num_replicas)",
                             (long long)*partitions);
  }
  return NULL;
}

nxhal_status_t* tpu_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                       const nxhal_option_t* options, size_t num_options,
                                       nxhal_executable_t** out_executable) {
  const PJRT_Api* api;
  nxhal_status_t* status;
  nxhal_executable_t* e;
  PJRT_Program pjrt_program;
  PJRT_Client_Compile_Args cargs;
  PJRT_Error* error;
  unsigned char copts[64];
  size_t copts_size;
  int64_t replicas, partitions;
  int found;
  if (device == NULL || out_executable == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "executable_compile: NULL argument");
  }
  *out_executable = NULL;
  status = nxhal_check_struct(program, NXHAL_PROGRAM_STRUCT_SIZE, "program");
  if (status != NULL) return status;
  if (program->format == NULL || strcmp(program->format, "stablehlo") != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "program format '%s' is not accepted (accepted: stablehlo)",
                             program->format ? program->format : "(null)");
  }
  if (program->data == NULL || program->size == 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "program is empty");
  }
  status = tpu_parse_compile_options(options, num_options, &replicas, &partitions);
  if (status != NULL) return status;
  if ((uint64_t)replicas > (uint64_t)device->backend->num_devices) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "num_replicas=%lld, but this PJRT client has %zu device(s)",
                             (long long)replicas, device->backend->num_devices);
  }
  e = (nxhal_executable_t*)calloc(1, sizeof(*e));
  if (e == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  e->device = device;
  e->num_replicas = 1;
  found = tpu_mlir_main_inputs((const char*)program->data, program->size, &e->inputs,
                               &e->num_inputs);
  if (found < 0) {
    tpu_executable_free(e);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (found == 0 && !tpu_mlir_is_bytecode(program->data, program->size) &&
      tpu_mlir_find(program->data, program->size, "sym_name = \"main\"") == NULL) {
    tpu_executable_free(e);
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "StableHLO text has no entry function: expected `func.func @main`");
  }
  e->inputs_known = found == 1;
  api = device->backend->api;
  memset(&pjrt_program, 0, sizeof(pjrt_program));
  pjrt_program.struct_size = PJRT_Program_STRUCT_SIZE;
  pjrt_program.code = (char*)program->data; /* PJRT only reads it */
  pjrt_program.code_size = program->size;
  pjrt_program.format = "mlir";
  pjrt_program.format_size = 4;
  /* Portable (runs where execute says) for one device; several replicas
   * need PJRT's device assignment. */
  copts_size = tpu_compile_options(copts, replicas, partitions, replicas == 1);
  memset(&cargs, 0, sizeof(cargs));
  cargs.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  cargs.client = device->backend->client;
  cargs.program = &pjrt_program;
  cargs.compile_options = (const char*)copts;
  cargs.compile_options_size = copts_size;
  error = api->PJRT_Client_Compile(&cargs);
  if (error != NULL) {
    tpu_executable_free(e);
    /* Whatever PJRT calls it, a program it cannot compile is bad input. */
    return tpu_status_from_pjrt(api, error, NXHAL_INVALID_ARGUMENT, "StableHLO compile failed");
  }
  e->loaded = cargs.executable;
  status = replicas > 1 ? tpu_read_replicas(e, (size_t)replicas) : NULL;
  if (status == NULL) status = tpu_executable_read_outputs(e);
  if (status == NULL && !e->inputs_known) {
    /* Bytecode (or generic-form text): the compiled module states them. */
    e->inputs_known = tpu_executable_parameters(api, e->executable, &e->inputs, &e->num_inputs);
  }
  if (status == NULL) {
    e->signature = tpu_signature_format(e->inputs, e->num_inputs);
    if (e->signature == NULL) status = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (status != NULL) {
    tpu_executable_free(e);
    return status;
  }
  *out_executable = e;
  return NULL;
}

void tpu_executable_destroy(nxhal_executable_t* executable) { tpu_executable_free(executable); }

nxhal_status_t* tpu_executable_io_count(nxhal_executable_t* e, nxhal_io_kind_t kind,
                                        size_t* out_count) {
  if (e == NULL || out_count == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "executable_io_count: NULL argument");
  }
  if (kind == NXHAL_IO_INPUT) {
    if (!e->inputs_known) {
      return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                               "input signature unknown: PJRT states no input types for this "
                               "program and it has no readable `func.func @main` signature");
    }
    *out_count = e->num_inputs * tpu_replicas(e);
  } else if (kind == NXHAL_IO_OUTPUT) {
    *out_count = e->num_outputs * tpu_replicas(e);
  } else {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "unknown io kind %d", (int)kind);
  }
  return NULL;
}

nxhal_status_t* tpu_executable_io_info(nxhal_executable_t* e, nxhal_io_kind_t kind, size_t index,
                                       nxhal_io_info_t* out) {
  nxhal_status_t* status;
  nxhal_io_info_t info;
  const tpu_io_t* io;
  size_t count = 0, per_replica;
  status = tpu_executable_io_count(e, kind, &count);
  if (status != NULL) return status;
  status = nxhal_check_struct(out, NXHAL_IO_INFO_STRUCT_SIZE, "io_info output");
  if (status != NULL) return status;
  if (index >= count) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s index %zu out of range (%zu)",
                             kind == NXHAL_IO_INPUT ? "input" : "output", index, count);
  }
  /* Replica r's inputs (outputs) follow replica r-1's. */
  per_replica = count / tpu_replicas(e);
  io = kind == NXHAL_IO_INPUT ? &e->inputs[index % per_replica] : &e->outputs[index % per_replica];
  memset(&info, 0, sizeof(info));
  info.struct_size = out->struct_size < sizeof(info) ? out->struct_size : sizeof(info);
  info.name = io->name;
  info.desc.struct_size = NXHAL_TENSOR_DESC_STRUCT_SIZE;
  info.desc.dtype = io->dtype;
  info.desc.rank = io->rank;
  info.desc.dims = io->dims;
  info.device_index =
      e->num_replicas > 1 ? (int64_t)e->replicas[index / per_replica]->index : -1;
  memcpy(out, &info, info.struct_size);
  return NULL;
}

/* Checks the inputs against the signature before PJRT sees them. */
static nxhal_status_t* tpu_check_inputs(nxhal_executable_t* e, nxhal_buffer_t* const* inputs,
                                        size_t num_inputs) {
  size_t i, replicas = tpu_replicas(e);
  int64_t d;
  if (num_inputs > 0 && inputs == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "inputs is NULL");
  }
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
  for (i = 0; i < num_inputs; ++i) {
    const nxhal_device_t* want =
        replicas > 1 ? e->replicas[i / e->num_inputs] : e->device;
    if (inputs[i] == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu is NULL", i);
    if (inputs[i]->device != want) {
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
  }
  if (!e->inputs_known) return NULL; /* PJRT checks count and shapes itself */
  if (num_inputs != e->num_inputs * replicas) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "expected %zu inputs, got %zu",
                             e->num_inputs, num_inputs);
  }
  for (i = 0; i < num_inputs; ++i) {
    const tpu_io_t* io = &e->inputs[i % e->num_inputs];
    const nxhal_buffer_t* b = inputs[i];
    int shape_ok = io->rank < 0 || io->rank == b->rank;
    for (d = 0; shape_ok && io->rank >= 0 && d < io->rank; ++d) {
      shape_ok = io->dims[d] < 0 || io->dims[d] == b->dims[d];
    }
    if ((io->dtype != NXHAL_DTYPE_INVALID && io->dtype != b->dtype) || !shape_ok) {
      char want[256], got[256];
      size_t w = 0, g = 0;
      w += (size_t)snprintf(want, sizeof(want), "%s[",
                            io->dtype ? nxhal_dtype_name(io->dtype) : "?");
      for (d = 0; d < io->rank && w < sizeof(want) - 24; ++d) {
        w += (size_t)snprintf(want + w, sizeof(want) - w, "%s%lld", d ? "," : "",
                              (long long)io->dims[d]);
      }
      snprintf(want + w, sizeof(want) - w, "]");
      g += (size_t)snprintf(got, sizeof(got), "%s[", nxhal_dtype_name(b->dtype));
      for (d = 0; d < b->rank && g < sizeof(got) - 24; ++d) {
        g += (size_t)snprintf(got + g, sizeof(got) - g, "%s%lld", d ? "," : "",
                              (long long)b->dims[d]);
      }
      snprintf(got + g, sizeof(got) - g, "]");
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "input %zu ('%s') expects %s, got %s", i,
                               io->name ? io->name : "", want, got);
    }
  }
  return NULL;
}

/* Inputs and outputs up to this many (over all replicas) use stack arrays:
 * no allocation on the dispatch path of small programs. */
#define TPU_SMALL_IO 16
#define TPU_SMALL_REPLICAS 8

/* Destroys outputs [from, n) that were never wrapped, releasing their share
 * of the memory reserved for them on their replica's device. */
static void tpu_drop_outputs(nxhal_executable_t* e, PJRT_Buffer** outs, const uint64_t* sizes,
                             size_t from, size_t n) {
  const PJRT_Api* api = e->device->backend->api;
  size_t k;
  for (k = from; k < n; ++k) {
    if (outs[k] != NULL) tpu_pjrt_buffer_destroy(api, outs[k]);
    nxhal_memory_release(&tpu_replica_device(e, k / e->num_outputs)->memory, sizes[k]);
  }
}

nxhal_status_t* tpu_executable_execute(nxhal_executable_t* e, nxhal_buffer_t* const* inputs,
                                       size_t num_inputs, nxhal_buffer_t** out_outputs,
                                       size_t num_outputs, nxhal_event_t** out_event) {
  const PJRT_Api* api;
  nxhal_status_t* status = NULL;
  PJRT_Buffer* small_args[TPU_SMALL_IO];
  PJRT_Buffer* small_outs[TPU_SMALL_IO];
  uint64_t small_sizes[TPU_SMALL_IO];
  PJRT_Buffer* const* small_arg_lists[TPU_SMALL_REPLICAS];
  PJRT_Buffer** small_out_lists[TPU_SMALL_REPLICAS];
  PJRT_Event* small_events[TPU_SMALL_REPLICAS];
  PJRT_Buffer** args_list;
  PJRT_Buffer** outs;
  uint64_t* sizes;
  PJRT_Buffer* const** arg_lists;
  PJRT_Buffer*** out_lists;
  PJRT_Event** complete;
  PJRT_ExecuteOptions opts;
  PJRT_LoadedExecutable_Execute_Args xargs;
  PJRT_Error* error;
  size_t i, r, replicas, reserved_replicas = 0;
  if (out_event != NULL) *out_event = NULL;
  if (e == NULL) return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "executable is NULL");
  replicas = tpu_replicas(e);
  if (num_outputs != e->num_outputs * replicas || (num_outputs > 0 && out_outputs == NULL)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "room for %zu outputs given, %zu produced",
                             out_outputs ? num_outputs : 0, e->num_outputs * replicas);
  }
  status = tpu_check_inputs(e, inputs, num_inputs);
  if (status != NULL) return status;
  api = e->device->backend->api;
  args_list = num_inputs <= TPU_SMALL_IO
                  ? small_args
                  : (PJRT_Buffer**)malloc(num_inputs * sizeof(PJRT_Buffer*));
  outs = num_outputs <= TPU_SMALL_IO
             ? small_outs
             : (PJRT_Buffer**)calloc(num_outputs, sizeof(PJRT_Buffer*));
  sizes = num_outputs <= TPU_SMALL_IO
              ? small_sizes
              : (uint64_t*)calloc(num_outputs, sizeof(uint64_t));
  arg_lists = replicas <= TPU_SMALL_REPLICAS
                  ? small_arg_lists
                  : (PJRT_Buffer* const**)calloc(replicas, sizeof(*arg_lists));
  out_lists = replicas <= TPU_SMALL_REPLICAS
                  ? small_out_lists
                  : (PJRT_Buffer***)calloc(replicas, sizeof(*out_lists));
  complete = replicas <= TPU_SMALL_REPLICAS
                 ? small_events
                 : (PJRT_Event**)calloc(replicas, sizeof(*complete));
  if (args_list == NULL || outs == NULL || sizes == NULL || arg_lists == NULL ||
      out_lists == NULL || complete == NULL) {
    status = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  /* The limit is enforced before running, on each replica's device: output
   * sizes are known. */
  for (i = 0; i < num_outputs; ++i) {
    const tpu_io_t* io = &e->outputs[i % e->num_outputs];
    uint64_t size = nxhal_dtype_size(io->dtype);
    int64_t d;
    for (d = 0; d < io->rank; ++d) {
      /* Saturates: the reservation below then refuses it as over any limit. */
      if (!nxhal_mul_u64(size, (uint64_t)(io->dims[d] > 0 ? io->dims[d] : 0), &size)) size = UINT64_MAX;
    }
    sizes[i] = size;
  }
  for (r = 0; r < replicas && status == NULL; ++r) {
    uint64_t reserved = 0;
    for (i = 0; i < e->num_outputs; ++i) {
      if (!nxhal_add_u64(reserved, sizes[r * e->num_outputs + i], &reserved)) reserved = UINT64_MAX;
    }
    status = nxhal_memory_reserve(&tpu_replica_device(e, r)->memory, reserved, "execute outputs");
    if (status == NULL) reserved_replicas = r + 1;
  }
  if (status != NULL) {
    for (i = 0; i < num_outputs; ++i) outs[i] = NULL;
    tpu_drop_outputs(e, outs, sizes, 0, reserved_replicas * e->num_outputs);
    goto done;
  }
  for (i = 0; i < num_inputs; ++i) args_list[i] = inputs[i]->storage->buffer;
  for (i = 0; i < num_outputs; ++i) outs[i] = NULL;
  for (r = 0; r < replicas; ++r) {
    arg_lists[r] = args_list + r * (num_inputs / replicas);
    out_lists[r] = outs + r * e->num_outputs;
    complete[r] = NULL;
  }
  memset(&opts, 0, sizeof(opts));
  opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  memset(&xargs, 0, sizeof(xargs));
  xargs.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  xargs.executable = e->loaded;
  xargs.options = &opts;
  xargs.argument_lists = arg_lists;
  xargs.num_devices = replicas;
  xargs.num_args = num_inputs / replicas;
  xargs.output_lists = out_lists;
  xargs.device_complete_events = complete;
  /* A portable executable runs where execute says: the compiled-for device.
   * Replicas run on PJRT's device assignment. */
  xargs.execute_device = replicas == 1 ? e->device->pjrt : NULL;
  error = api->PJRT_LoadedExecutable_Execute(&xargs);
  if (error != NULL) {
    tpu_drop_outputs(e, outs, sizes, 0, num_outputs);
    status = tpu_status_from_pjrt(api, error, NXHAL_OK, "execute");
    goto done;
  }
  /* PJRT filled `outs` during the call; wrapping takes each one's share of
   * the reservation (and on failure destroys that buffer and releases it). */
  for (i = 0; i < num_outputs; ++i) {
    const tpu_io_t* io = &e->outputs[i % e->num_outputs];
    status = tpu_buffer_wrap(tpu_replica_device(e, i / e->num_outputs), outs[i], sizes[i],
                             io->dtype, io->rank, io->dims, &out_outputs[i]);
    if (status != NULL) {
      size_t k;
      tpu_drop_outputs(e, outs, sizes, i + 1, num_outputs);
      for (k = 0; k < i; ++k) {
        tpu_buffer_destroy(out_outputs[k]);
        out_outputs[k] = NULL;
      }
      for (r = 0; r < replicas; ++r) {
        nxhal_status_free(tpu_event_await_destroy(api, complete[r], "execute"));
      }
      goto done;
    }
  }
  if (out_event == NULL) {
    for (r = 0; r < replicas; ++r) {
      nxhal_status_t* failed = tpu_event_await_destroy(api, complete[r], "execute");
      if (status == NULL) {
        status = failed;
      } else {
        nxhal_status_free(failed);
      }
    }
    if (status != NULL) {
      for (i = 0; i < num_outputs; ++i) {
        tpu_buffer_destroy(out_outputs[i]);
        out_outputs[i] = NULL;
      }
    }
  } else if (complete[0] == NULL) {
    /* PJRT gave no completion events: the work is done. */
    for (r = 1; r < replicas; ++r) tpu_event_destroy(api, complete[r]);
    *out_event = nxhal_event_new();
    if (*out_event == NULL) {
      status = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      nxhal_event_complete(*out_event, NULL);
    }
  } else {
    status = tpu_event_bridge_all(api, complete, replicas, out_event);
  }
done:
  if (args_list != small_args) free(args_list);
  if (outs != small_outs) free(outs);
  if (sizes != small_sizes) free(sizes);
  if (arg_lists != small_arg_lists) free((void*)arg_lists);
  if (out_lists != small_out_lists) free(out_lists);
  if (complete != small_events) free(complete);
  return status;
}

/* --- serialization ------------------------------------------------------- */

static void tpu_put_u32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

static uint32_t tpu_get_u32(const unsigned char* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

nxhal_status_t* tpu_executable_serialize(nxhal_executable_t* e, nxhal_blob_t** out_blob) {
  const PJRT_Api* api;
  PJRT_Executable_Serialize_Args sargs;
  PJRT_Error* error;
  const char* key;
  size_t key_len, sig_len, total;
  unsigned char* data;
  nxhal_blob_t* blob;
  uint64_t payload;
  if (e == NULL || out_blob == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "executable_serialize: NULL argument");
  }
  *out_blob = NULL;
  if (e->num_replicas > 1) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "a replicated executable (num_replicas=%zu) is not serialised: its "
                             "device assignment would not survive loading; compile it again",
                             e->num_replicas);
  }
  api = e->device->backend->api;
  memset(&sargs, 0, sizeof(sargs));
  if (e->payload != NULL) {
    sargs.serialized_bytes = (const char*)e->payload;
    sargs.serialized_bytes_size = e->payload_size;
  } else {
    if (!TPU_HAS_FN(api, PJRT_Executable_Serialize)) {
      return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                               "this PJRT plugin cannot serialize executables");
    }
    sargs.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
    sargs.executable = e->executable;
    error = api->PJRT_Executable_Serialize(&sargs);
    if (error != NULL) {
      return tpu_status_from_pjrt(api, error, NXHAL_OK, "PJRT_Executable_Serialize");
    }
  }
  key = e->device->backend->compat_key;
  key_len = strlen(key);
  sig_len = strlen(e->signature);
  payload = sargs.serialized_bytes_size;
  total = TPU_BLOB_FIXED + key_len + NXHAL_DIGEST_SIZE + 4 + sig_len + 8 + (size_t)payload;
  blob = (nxhal_blob_t*)calloc(1, sizeof(*blob));
  data = (unsigned char*)malloc(total);
  if (blob == NULL || data == NULL) {
    free(blob);
    free(data);
    if (sargs.serialized_executable_deleter) sargs.serialized_executable_deleter(sargs.serialized_executable);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory serializing");
  }
  {
    unsigned char* p = data;
    memcpy(p, tpu_blob_magic, 8);
    p += 8;
    tpu_put_u32(p, TPU_BLOB_VERSION);
    p += 4;
    tpu_put_u32(p, (uint32_t)key_len);
    p += 4;
    unsigned char* digest;
    nxhal_sha256_t sha;
    memcpy(p, key, key_len);
    p += key_len;
    digest = p;
    p += NXHAL_DIGEST_SIZE;
    tpu_put_u32(p, (uint32_t)sig_len);
    p += 4;
    memcpy(p, e->signature, sig_len);
    p += sig_len;
    tpu_put_u32(p, (uint32_t)(payload & 0xffffffffu));
    tpu_put_u32(p + 4, (uint32_t)(payload >> 32));
    p += 8;
    memcpy(p, sargs.serialized_bytes, (size_t)payload);
    nxhal_sha256_init(&sha);
    nxhal_sha256_update(&sha, data, TPU_BLOB_FIXED);
    nxhal_sha256_update(&sha, digest + NXHAL_DIGEST_SIZE, total - (size_t)(digest + NXHAL_DIGEST_SIZE - data));
    nxhal_sha256_final(&sha, digest);
  }
  if (sargs.serialized_executable_deleter) sargs.serialized_executable_deleter(sargs.serialized_executable);
  blob->struct_size = sizeof(*blob);
  blob->data = data;
  blob->size = total;
  *out_blob = blob;
  return NULL;
}

void tpu_blob_free(nxhal_blob_t* blob) {
  if (blob == NULL) return;
  free((void*)blob->data);
  free(blob);
}

nxhal_status_t* tpu_executable_deserialize(nxhal_device_t* device, const void* data, size_t size,
                                           const nxhal_option_t* options, size_t num_options,
                                           nxhal_executable_t** out_executable) {
  const unsigned char* p = (const unsigned char*)data;
  const unsigned char* end = p + size;
  const PJRT_Api* api;
  nxhal_status_t* status;
  uint32_t version, key_len, sig_len;
  uint64_t payload;
  const char* key;
  const char* mine;
  char* signature;
  nxhal_executable_t* e;
  PJRT_Executable_DeserializeAndLoad_Args dargs;
  PJRT_Error* error;
  unsigned char copts[64];
  size_t copts_size;
  uint8_t digest[NXHAL_DIGEST_SIZE];
  nxhal_sha256_t sha;
  if (device == NULL || out_executable == NULL || (data == NULL && size > 0)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "executable_deserialize: NULL argument");
  }
  *out_executable = NULL;
  status = nxhal_options_check(options, num_options, NULL, 0);
  if (status != NULL) return status;
  if (size < TPU_BLOB_FIXED || memcmp(p, tpu_blob_magic, 8) != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "not a serialized nx_hal TPU executable (bad magic)");
  }
  p += 8;
  version = tpu_get_u32(p);
  p += 4;
  if (version != TPU_BLOB_VERSION) {
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "serialized executable format version %u, this plugin reads %u",
                             version, TPU_BLOB_VERSION);
  }
  key_len = tpu_get_u32(p);
  p += 4;
  if ((size_t)(end - p) < (size_t)key_len + NXHAL_DIGEST_SIZE + 4 + 8) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "corrupted executable: truncated (%zu bytes, key of %u bytes)", size,
                             key_len);
  }
  key = (const char*)p;
  p += key_len;
  mine = device->backend->compat_key;
  /* The key is checked before PJRT sees any byte: PJRT may crash on an
   * executable from another XLA version. */
  if (strlen(mine) != key_len || memcmp(mine, key, key_len) != 0) {
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "serialized executable was built for '%.*s', this device is '%s'",
                             (int)key_len, key, mine);
  }
  /* The size fields first (each read within bounds), so a short blob is
   * reported as truncated; then the digest over every other byte, before any
   * is interpreted further. */
  sig_len = tpu_get_u32(p + NXHAL_DIGEST_SIZE);
  if ((size_t)(end - p) - NXHAL_DIGEST_SIZE - 4 < (size_t)sig_len + 8) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "corrupted executable: truncated (%zu bytes, signature of %u bytes)",
                             size, sig_len);
  }
  {
    const unsigned char* lenp = p + NXHAL_DIGEST_SIZE + 4 + sig_len;
    payload = (uint64_t)tpu_get_u32(lenp) | ((uint64_t)tpu_get_u32(lenp + 4) << 32);
    if ((uint64_t)(end - (lenp + 8)) != payload) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               "corrupted executable: truncated or has trailing bytes (payload of "
                               "%llu bytes declared, %zu present)",
                               (unsigned long long)payload, (size_t)(end - (lenp + 8)));
    }
  }
  nxhal_sha256_init(&sha);
  nxhal_sha256_update(&sha, data, TPU_BLOB_FIXED);
  nxhal_sha256_update(&sha, p + NXHAL_DIGEST_SIZE, (size_t)(end - p) - NXHAL_DIGEST_SIZE);
  nxhal_sha256_final(&sha, digest);
  if (!nxhal_digest_equal(digest, p)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "corrupted executable: digest mismatch");
  }
  p += NXHAL_DIGEST_SIZE + 4;
  signature = tpu_strndup((const char*)p, sig_len);
  p += sig_len + 8;
  if (signature == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  api = device->backend->api;
  if (!TPU_HAS_FN(api, PJRT_Executable_DeserializeAndLoad)) {
    free(signature);
    return nxhal_status_make(NXHAL_UNIMPLEMENTED, "this PJRT plugin cannot load executables");
  }
  e = (nxhal_executable_t*)calloc(1, sizeof(*e));
  if (e == NULL) {
    free(signature);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  e->device = device;
  e->num_replicas = 1;
  e->signature = signature;
  if (!tpu_signature_parse(signature, &e->inputs, &e->num_inputs)) {
    tpu_executable_free(e);
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "serialized executable has a bad signature");
  }
  e->inputs_known = 1;
  copts_size = tpu_compile_options(copts, 1, 1, 1);
  memset(&dargs, 0, sizeof(dargs));
  dargs.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  dargs.client = device->backend->client;
  dargs.serialized_executable = (const char*)p;
  dargs.serialized_executable_size = (size_t)payload;
  dargs.overridden_serialized_compile_options = (const char*)copts;
  dargs.overridden_serialized_compile_options_size = copts_size;
  error = api->PJRT_Executable_DeserializeAndLoad(&dargs);
  if (error != NULL) {
    tpu_executable_free(e);
    return tpu_status_from_pjrt(api, error, NXHAL_INVALID_ARGUMENT,
                                "PJRT_Executable_DeserializeAndLoad");
  }
  e->loaded = dargs.loaded_executable;
  /* XLA CPU re-serializes a deserialized executable without its kernels
   * (loading that fails with "Function ... not found"), so serialize hands
   * out the bytes it was loaded from. */
  e->payload = (unsigned char*)malloc(payload ? (size_t)payload : 1);
  if (e->payload == NULL) {
    tpu_executable_free(e);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(e->payload, p, (size_t)payload);
  e->payload_size = (size_t)payload;
  status = tpu_executable_read_outputs(e);
  if (status != NULL) {
    tpu_executable_free(e);
    return status;
  }
  *out_executable = e;
  return NULL;
}
