/* executable.c -- compiling StableHLO through PJRT, and serialized executables
 * behind a header whose compat key is checked first (execute.c runs them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

size_t tpu_replicas(const nxhal_executable_t* e) {
  return e->num_replicas > 1 ? e->num_replicas : 1;
}

nxhal_device_t* tpu_replica_device(const nxhal_executable_t* e, size_t r) {
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
    return nxhal_status_make(
        NXHAL_UNIMPLEMENTED,
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
      if (client->devices[d]->pjrt == args.addressable_devices[r])
        e->replicas[r] = client->devices[d];
    }
    if (e->replicas[r] == NULL) {
      return nxhal_status_make(NXHAL_INTERNAL, "PJRT placed replica %zu on a device not listed", r);
    }
  }
  if (e->replicas[0] != e->device) {
    return nxhal_status_make(
        NXHAL_INVALID_ARGUMENT,
        "with num_replicas=%zu PJRT runs replica 0 on '%s' (device index %zu), "
        "not on '%s': compile it for device index %zu",
        replicas, e->replicas[0]->name, e->replicas[0]->index, e->device->name,
        e->replicas[0]->index);
  }
  e->num_replicas = replicas;
  return NULL;
}

/* Whether the program's outputs may take its inputs' memory: PJRT's memory
 * statistics count aliased bytes; without them, assume so. */
static int tpu_executable_may_donate(const PJRT_Api* api, PJRT_Executable* executable) {
  PJRT_Executable_GetCompiledMemoryStats_Args args;
  PJRT_Error* error;
  if (!TPU_HAS_FN(api, PJRT_Executable_GetCompiledMemoryStats)) return 1;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE;
  args.executable = executable;
  error = api->PJRT_Executable_GetCompiledMemoryStats(&args);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return 1;
  }
  return args.alias_size_in_bytes > 0 || args.host_alias_size_in_bytes > 0;
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
  e->may_donate = tpu_executable_may_donate(api, e->executable);
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

/* The program is StableHLO and not empty. */
static nxhal_status_t* tpu_compile_check_program(const nxhal_program_t* program) {
  nxhal_status_t* status = nxhal_check_struct(program, NXHAL_PROGRAM_1_0_SIZE, "program");
  if (status != NULL) return status;
  if (program->format == NULL || strcmp(program->format, "stablehlo") != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "program format '%s' is not accepted (accepted: stablehlo)",
                             program->format ? program->format : "(null)");
  }
  if (program->data == NULL || program->size == 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "program is empty");
  }
  return NULL;
}

/* Reads the inputs of `@main` from StableHLO text into e. Bytecode (and
 * generic-form text) leaves them unknown, for the compiled module to state;
 * text without any main function is refused before PJRT sees it. */
static nxhal_status_t* tpu_compile_read_inputs(nxhal_executable_t* e,
                                               const nxhal_program_t* program) {
  int found =
      tpu_mlir_main_inputs((const char*)program->data, program->size, &e->inputs, &e->num_inputs);
  if (found < 0) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  if (found == 0 && !tpu_mlir_is_bytecode(program->data, program->size) &&
      tpu_mlir_find(program->data, program->size, "sym_name = \"main\"") == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "StableHLO text has no entry function: expected `func.func @main`");
  }
  e->inputs_known = found == 1;
  return NULL;
}

/* PJRT has no code for a program its parser refuses; XLA's messages say
 * so ("Failed to parse using StableHLO v1.13.3", "attempting to parse 8
 * bytes when only 7 remain"). The words are this vendor's, so they are read
 * here, once, and the host gets a status code (INVALID_PROGRAM) instead of
 * searching messages. Takes `status`; returns the one to report. */
static nxhal_status_t* tpu_compile_failure(nxhal_status_t* status) {
  const char* text = nxhal_status_message(status);
  nxhal_status_t* program;
  /* " to parse": "Failed to", "attempting to", "Unable to"; not "sparse". */
  if (strstr(text, " to parse") == NULL) return status;
  program = nxhal_status_invalid_program("%s", text);
  nxhal_status_free(status);
  return program;
}

/* Compiles the program with PJRT into e->loaded. */
static nxhal_status_t* tpu_compile_pjrt(nxhal_executable_t* e, const nxhal_program_t* program,
                                        int64_t replicas, int64_t partitions) {
  const PJRT_Api* api = e->device->backend->api;
  PJRT_Program pjrt_program;
  PJRT_Client_Compile_Args cargs;
  PJRT_Error* error;
  unsigned char copts[64];
  memset(&pjrt_program, 0, sizeof(pjrt_program));
  pjrt_program.struct_size = PJRT_Program_STRUCT_SIZE;
  pjrt_program.code = (char*)program->data; /* PJRT only reads it */
  pjrt_program.code_size = program->size;
  pjrt_program.format = "mlir";
  pjrt_program.format_size = 4;
  memset(&cargs, 0, sizeof(cargs));
  cargs.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  cargs.client = e->device->backend->client;
  cargs.program = &pjrt_program;
  cargs.compile_options = (const char*)copts;
  /* Portable (runs where execute says) for one device; several replicas
   * need PJRT's device assignment. */
  cargs.compile_options_size = tpu_compile_options(copts, replicas, partitions, replicas == 1);
  error = api->PJRT_Client_Compile(&cargs);
  /* Whatever PJRT calls it, a program it cannot compile is bad input. */
  if (error != NULL) {
    return tpu_compile_failure(
        tpu_status_from_pjrt(api, error, NXHAL_INVALID_ARGUMENT, "StableHLO compile failed"));
  }
  e->loaded = cargs.executable;
  return NULL;
}

/* After compiling: where replicas run, the outputs, the inputs when the
 * text did not state them, and the signature text serialize stores. */
static nxhal_status_t* tpu_compile_describe(nxhal_executable_t* e, int64_t replicas) {
  nxhal_status_t* status = replicas > 1 ? tpu_read_replicas(e, (size_t)replicas) : NULL;
  if (status == NULL) status = tpu_executable_read_outputs(e);
  if (status != NULL) return status;
  if (!e->inputs_known) {
    /* Bytecode (or generic-form text): the compiled module states them. */
    e->inputs_known = tpu_executable_parameters(e->device->backend->api, e->executable, &e->inputs,
                                                &e->num_inputs);
  }
  e->signature = tpu_signature_format(e->inputs, e->num_inputs);
  if (e->signature == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  return NULL;
}

nxhal_status_t* tpu_executable_compile(nxhal_device_t* device, const nxhal_program_t* program,
                                       const nxhal_option_t* options, size_t num_options,
                                       nxhal_executable_t** out_executable) {
  nxhal_status_t* status;
  nxhal_executable_t* e;
  int64_t replicas, partitions;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  *out_executable = NULL;
  status = tpu_compile_check_program(program);
  if (status == NULL)
    status = tpu_compile_options_read(options, num_options, &replicas, &partitions);
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
  status = tpu_compile_read_inputs(e, program);
  if (status == NULL) status = tpu_compile_pjrt(e, program, replicas, partitions);
  if (status == NULL) status = tpu_compile_describe(e, replicas);
  if (status != NULL) {
    tpu_executable_free(e);
    return status;
  }
  *out_executable = e;
  return NULL;
}

void tpu_executable_destroy(nxhal_executable_t* executable) {
  tpu_executable_free(executable);
}

nxhal_status_t* tpu_executable_io_count(nxhal_executable_t* e, nxhal_io_kind_t kind,
                                        size_t* out_count) {
  NXHAL_REQUIRE_ARG(e);
  NXHAL_REQUIRE_ARG(out_count);
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
  status = nxhal_check_struct(out, NXHAL_IO_INFO_1_0_SIZE, "io_info output");
  if (status != NULL) return status;
  if (index >= count) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "%s index %zu out of range (%zu)",
                             kind == NXHAL_IO_INPUT ? "input" : "output", index, count);
  }
  /* Replica r's inputs (outputs) follow replica r-1's. */
  per_replica = count / tpu_replicas(e);
  io = kind == NXHAL_IO_INPUT ? &e->inputs[index % per_replica] : &e->outputs[index % per_replica];
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.name = io->name;
  info.desc.struct_size = NXHAL_TENSOR_DESC_1_0_SIZE;
  info.desc.dtype = io->dtype;
  info.desc.rank = io->rank;
  info.desc.dims = io->dims;
  info.device_index = e->num_replicas > 1 ? (int64_t)e->replicas[index / per_replica]->index : -1;
  nxhal_struct_fill(out, &info, sizeof(info));
  return NULL;
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

/* The PJRT bytes of e into *sargs: those it was loaded from, or a fresh
 * PJRT serialization (whose deleter the caller runs). */
static nxhal_status_t* tpu_serialized_payload(nxhal_executable_t* e,
                                              PJRT_Executable_Serialize_Args* sargs) {
  const PJRT_Api* api = e->device->backend->api;
  PJRT_Error* error;
  memset(sargs, 0, sizeof(*sargs));
  if (e->payload != NULL) {
    sargs->serialized_bytes = (const char*)e->payload;
    sargs->serialized_bytes_size = e->payload_size;
    return NULL;
  }
  if (!TPU_HAS_FN(api, PJRT_Executable_Serialize)) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED, "this PJRT plugin cannot serialize executables");
  }
  sargs->struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  sargs->executable = e->executable;
  error = api->PJRT_Executable_Serialize(sargs);
  if (error != NULL) return tpu_status_from_pjrt(api, error, NXHAL_OK, "PJRT_Executable_Serialize");
  return NULL;
}

/* Writes the blob (layout above) into `data` of `total` bytes, the digest
 * last, over everything but the key and itself. */
static void tpu_blob_write(unsigned char* data, size_t total, const char* key,
                           const char* signature, const void* payload, uint64_t payload_size) {
  size_t key_len = strlen(key), sig_len = strlen(signature);
  unsigned char* p = data;
  unsigned char* digest;
  nxhal_sha256_t sha;
  memcpy(p, tpu_blob_magic, 8);
  p += 8;
  tpu_put_u32(p, TPU_BLOB_VERSION);
  p += 4;
  tpu_put_u32(p, (uint32_t)key_len);
  p += 4;
  memcpy(p, key, key_len);
  p += key_len;
  digest = p;
  p += NXHAL_DIGEST_SIZE;
  tpu_put_u32(p, (uint32_t)sig_len);
  p += 4;
  memcpy(p, signature, sig_len);
  p += sig_len;
  tpu_put_u32(p, (uint32_t)(payload_size & 0xffffffffu));
  tpu_put_u32(p + 4, (uint32_t)(payload_size >> 32));
  p += 8;
  memcpy(p, payload, (size_t)payload_size);
  nxhal_sha256_init(&sha);
  nxhal_sha256_update(&sha, data, TPU_BLOB_FIXED);
  nxhal_sha256_update(&sha, digest + NXHAL_DIGEST_SIZE,
                      total - (size_t)(digest + NXHAL_DIGEST_SIZE - data));
  nxhal_sha256_final(&sha, digest);
}

nxhal_status_t* tpu_executable_serialize(nxhal_executable_t* e, nxhal_blob_t** out_blob) {
  PJRT_Executable_Serialize_Args sargs;
  nxhal_status_t* status = NULL;
  const char* key;
  size_t total;
  unsigned char* data;
  nxhal_blob_t* blob;
  NXHAL_REQUIRE_ARG(e);
  NXHAL_REQUIRE_ARG(out_blob);
  *out_blob = NULL;
  if (e->num_replicas > 1) {
    return nxhal_status_make(NXHAL_UNIMPLEMENTED,
                             "a replicated executable (num_replicas=%zu) is not serialised: its "
                             "device assignment would not survive loading; compile it again",
                             e->num_replicas);
  }
  status = tpu_serialized_payload(e, &sargs);
  if (status != NULL) return status;
  key = e->device->backend->compat_key;
  total = TPU_BLOB_FIXED + strlen(key) + NXHAL_DIGEST_SIZE + 4 + strlen(e->signature) + 8 +
          (size_t)sargs.serialized_bytes_size;
  blob = (nxhal_blob_t*)calloc(1, sizeof(*blob));
  data = (unsigned char*)malloc(total);
  if (blob == NULL || data == NULL) {
    free(blob);
    free(data);
    status = nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory serializing");
  } else {
    tpu_blob_write(data, total, key, e->signature, sargs.serialized_bytes,
                   sargs.serialized_bytes_size);
    blob->struct_size = sizeof(*blob);
    blob->data = data;
    blob->size = total;
    *out_blob = blob;
  }
  if (sargs.serialized_executable_deleter)
    sargs.serialized_executable_deleter(sargs.serialized_executable);
  return status;
}

void tpu_blob_free(nxhal_blob_t* blob) {
  if (blob == NULL) return;
  free((void*)blob->data);
  free(blob);
}

/* What a checked blob holds: pointers into it. */
typedef struct tpu_blob_view {
  const char* signature;
  uint32_t signature_size;
  const unsigned char* payload;
  uint64_t payload_size;
} tpu_blob_view_t;

/* Checks magic, version and compat key, then sizes and digest, before any
 * byte is interpreted further; fills *view. The digest not when the caller
 * authenticated the bytes itself (`authenticated`, nx_hal.h: nx_hal's store
 * and sealed blobs carry an HMAC over them). */
static nxhal_status_t* tpu_blob_check(const nxhal_device_t* device, const void* data, size_t size,
                                      int authenticated, tpu_blob_view_t* view) {
  const unsigned char* p = (const unsigned char*)data;
  const unsigned char* end = p + size;
  const unsigned char* lenp;
  uint32_t version, key_len, sig_len;
  const char* mine = device->backend->compat_key;
  uint8_t digest[NXHAL_DIGEST_SIZE];
  nxhal_sha256_t sha;
  if (size < TPU_BLOB_FIXED || memcmp(p, tpu_blob_magic, 8) != 0) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "not a serialized nx_hal TPU executable (bad magic)");
  }
  version = tpu_get_u32(p + 8);
  if (version != TPU_BLOB_VERSION) {
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "serialized executable format version %u, this plugin reads %u",
                             version, TPU_BLOB_VERSION);
  }
  key_len = tpu_get_u32(p + 12);
  p += TPU_BLOB_FIXED;
  if ((size_t)(end - p) < (size_t)key_len + NXHAL_DIGEST_SIZE + 4 + 8) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "corrupted executable: truncated (%zu bytes, key of %u bytes)", size,
                             key_len);
  }
  /* The key is checked before PJRT sees any byte: PJRT may crash on an
   * executable from another XLA version. */
  if (strlen(mine) != key_len || memcmp(mine, p, key_len) != 0) {
    return nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                             "serialized executable was built for '%.*s', this device is '%s'",
                             (int)key_len, (const char*)p, mine);
  }
  p += key_len;
  /* The size fields first (each read within bounds), so a short blob is
   * reported as truncated; then the digest over every other byte. */
  sig_len = tpu_get_u32(p + NXHAL_DIGEST_SIZE);
  if ((size_t)(end - p) - NXHAL_DIGEST_SIZE - 4 < (size_t)sig_len + 8) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "corrupted executable: truncated (%zu bytes, signature of %u bytes)",
                             size, sig_len);
  }
  lenp = p + NXHAL_DIGEST_SIZE + 4 + sig_len;
  view->payload_size = (uint64_t)tpu_get_u32(lenp) | ((uint64_t)tpu_get_u32(lenp + 4) << 32);
  if ((uint64_t)(end - (lenp + 8)) != view->payload_size) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "corrupted executable: truncated or has trailing bytes (payload of "
                             "%llu bytes declared, %zu present)",
                             (unsigned long long)view->payload_size, (size_t)(end - (lenp + 8)));
  }
  if (!authenticated) {
    nxhal_sha256_init(&sha);
    nxhal_sha256_update(&sha, data, TPU_BLOB_FIXED);
    nxhal_sha256_update(&sha, p + NXHAL_DIGEST_SIZE, (size_t)(end - p) - NXHAL_DIGEST_SIZE);
    nxhal_sha256_final(&sha, digest);
    if (!nxhal_digest_equal(digest, p)) {
      return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "corrupted executable: digest mismatch");
    }
  }
  view->signature = (const char*)(p + NXHAL_DIGEST_SIZE + 4);
  view->signature_size = sig_len;
  view->payload = lenp + 8;
  return NULL;
}

/* Loads the checked payload with PJRT into e, keeping a copy of its bytes:
 * XLA CPU re-serializes a deserialized executable without its kernels
 * (loading that fails with "Function ... not found"), so serialize hands
 * out the bytes it was loaded from. */
static nxhal_status_t* tpu_blob_load(nxhal_executable_t* e, const tpu_blob_view_t* view) {
  const PJRT_Api* api = e->device->backend->api;
  PJRT_Executable_DeserializeAndLoad_Args dargs;
  PJRT_Error* error;
  unsigned char copts[64];
  memset(&dargs, 0, sizeof(dargs));
  dargs.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  dargs.client = e->device->backend->client;
  dargs.serialized_executable = (const char*)view->payload;
  dargs.serialized_executable_size = (size_t)view->payload_size;
  dargs.overridden_serialized_compile_options = (const char*)copts;
  dargs.overridden_serialized_compile_options_size = tpu_compile_options(copts, 1, 1, 1);
  error = api->PJRT_Executable_DeserializeAndLoad(&dargs);
  if (error != NULL) {
    return tpu_status_from_pjrt(api, error, NXHAL_INVALID_ARGUMENT,
                                "PJRT_Executable_DeserializeAndLoad");
  }
  e->loaded = dargs.loaded_executable;
  e->payload = (unsigned char*)malloc(view->payload_size ? (size_t)view->payload_size : 1);
  if (e->payload == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(e->payload, view->payload, (size_t)view->payload_size);
  e->payload_size = (size_t)view->payload_size;
  return tpu_executable_read_outputs(e);
}

/* executable_deserialize's one option (nx_hal.h). */
static const nxhal_option_spec_t tpu_deserialize_specs[] = {
    {"authenticated", NXHAL_VALUE_BOOL, 0, 0, 0},
};

nxhal_status_t* tpu_executable_deserialize(nxhal_device_t* device, const void* data, size_t size,
                                           const nxhal_option_t* options, size_t num_options,
                                           nxhal_executable_t** out_executable) {
  nxhal_status_t* status;
  tpu_blob_view_t view;
  const nxhal_option_t* authenticated;
  char* signature;
  nxhal_executable_t* e;
  NXHAL_REQUIRE_ARG(device);
  NXHAL_REQUIRE_ARG(out_executable);
  if (size > 0) NXHAL_REQUIRE_ARG(data);
  *out_executable = NULL;
  memset(&view, 0, sizeof(view));
  status = nxhal_options_check(options, num_options, tpu_deserialize_specs, 1);
  authenticated = nxhal_options_find(options, num_options, "authenticated");
  if (status == NULL) {
    status = tpu_blob_check(device, data, size, authenticated != NULL && authenticated->bool_value,
                            &view);
  }
  if (status != NULL) return status;
  signature = tpu_strndup(view.signature, view.signature_size);
  if (signature == NULL) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
  if (!TPU_HAS_FN(device->backend->api, PJRT_Executable_DeserializeAndLoad)) {
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
    status = nxhal_status_make(NXHAL_INVALID_ARGUMENT, "serialized executable has a bad signature");
  } else {
    e->inputs_known = 1;
    status = tpu_blob_load(e, &view);
  }
  if (status != NULL) {
    tpu_executable_free(e);
    return status;
  }
  *out_executable = e;
  return NULL;
}
