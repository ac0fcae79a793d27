/* hlo_proto.c -- the entry parameters of a compiled program, read from the
 * HloModuleProto that PJRT_Executable_OptimizedProgram returns. Used when the
 * program was MLIR bytecode, whose signature we cannot read as text. Only the
 * few fields needed are decoded; anything unexpected gives up (returns 0). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A length-delimited protobuf slice. */
typedef struct tpu_pb {
  const unsigned char* p;
  const unsigned char* end;
} tpu_pb_t;

static int tpu_pb_varint(tpu_pb_t* pb, uint64_t* out) {
  uint64_t value = 0;
  int shift = 0;
  while (pb->p < pb->end && shift < 64) {
    unsigned char byte = *pb->p++;
    value |= (uint64_t)(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *out = value;
      return 1;
    }
    shift += 7;
  }
  return 0;
}

/* Reads one field's key; for wire type 2 also its slice. 0 at the end or
 * on malformed input. Other wire types are skipped by tpu_pb_skip. */
static int tpu_pb_next(tpu_pb_t* pb, uint32_t* field, uint32_t* wire, uint64_t* varint,
                       tpu_pb_t* slice) {
  uint64_t key, length;
  if (pb->p >= pb->end || !tpu_pb_varint(pb, &key)) return 0;
  *field = (uint32_t)(key >> 3);
  *wire = (uint32_t)(key & 7);
  switch (*wire) {
    case 0: return tpu_pb_varint(pb, varint);
    case 1:
      if (pb->end - pb->p < 8) return 0;
      pb->p += 8;
      return 1;
    case 5:
      if (pb->end - pb->p < 4) return 0;
      pb->p += 4;
      return 1;
    case 2:
      if (!tpu_pb_varint(pb, &length) || (uint64_t)(pb->end - pb->p) < length) return 0;
      slice->p = pb->p;
      slice->end = pb->p + length;
      pb->p += length;
      return 1;
    default: return 0;
  }
}

/* xla.PrimitiveType to nx_hal. */
static nxhal_dtype_t tpu_dtype_from_xla(uint64_t type) {
  switch (type) {
    case 1: return NXHAL_DTYPE_BOOL;
    case 2: return NXHAL_DTYPE_I8;
    case 3: return NXHAL_DTYPE_I16;
    case 4: return NXHAL_DTYPE_I32;
    case 5: return NXHAL_DTYPE_I64;
    case 6: return NXHAL_DTYPE_U8;
    case 7: return NXHAL_DTYPE_U16;
    case 8: return NXHAL_DTYPE_U32;
    case 9: return NXHAL_DTYPE_U64;
    case 10: return NXHAL_DTYPE_F16;
    case 11: return NXHAL_DTYPE_F32;
    case 12: return NXHAL_DTYPE_F64;
    case 16: return NXHAL_DTYPE_BF16;
    default: return NXHAL_DTYPE_INVALID;
  }
}

/* ShapeProto: element_type = 2, dimensions = 3 (packed or not). */
static int tpu_parse_shape(tpu_pb_t shape, tpu_io_t* io) {
  int64_t dims[64];
  int64_t rank = 0;
  uint32_t field, wire;
  uint64_t v = 0;
  tpu_pb_t slice;
  io->dtype = NXHAL_DTYPE_INVALID;
  while (tpu_pb_next(&shape, &field, &wire, &v, &slice)) {
    if (field == 2 && wire == 0) {
      io->dtype = tpu_dtype_from_xla(v);
    } else if (field == 3 && wire == 0) {
      if (rank >= 64) return 0;
      dims[rank++] = (int64_t)v;
    } else if (field == 3 && wire == 2) {
      while (slice.p < slice.end) {
        if (rank >= 64 || !tpu_pb_varint(&slice, &v)) return 0;
        dims[rank++] = (int64_t)v;
      }
    }
  }
  if (io->dtype == NXHAL_DTYPE_INVALID) return 0; /* tuples, tokens, ... */
  io->rank = rank;
  io->dims = (int64_t*)malloc(sizeof(int64_t) * (size_t)(rank ? rank : 1));
  if (io->dims == NULL) return 0;
  memcpy(io->dims, dims, sizeof(int64_t) * (size_t)rank);
  return 1;
}

/* ProgramShapeProto: parameters = 1. */
static int tpu_parse_program_shape(tpu_pb_t shape, tpu_io_t** out_ios, size_t* out_count) {
  tpu_pb_t scan = shape, slice;
  uint32_t field, wire;
  uint64_t v;
  size_t count = 0, i = 0;
  tpu_io_t* ios;
  while (tpu_pb_next(&scan, &field, &wire, &v, &slice)) count += field == 1 && wire == 2;
  ios = (tpu_io_t*)calloc(count ? count : 1, sizeof(tpu_io_t));
  if (ios == NULL) return 0;
  scan = shape;
  while (tpu_pb_next(&scan, &field, &wire, &v, &slice)) {
    if (field != 1 || wire != 2) continue;
    ios[i].name = tpu_sprintf("arg%zu", i);
    if (ios[i].name == NULL || !tpu_parse_shape(slice, &ios[i])) {
      tpu_ios_free(ios, i + 1);
      return 0;
    }
    ++i;
  }
  *out_ios = ios;
  *out_count = count;
  return 1;
}

int tpu_hlo_parameters(const void* proto, size_t size, tpu_io_t** out_ios, size_t* out_count) {
  tpu_pb_t module = {(const unsigned char*)proto, (const unsigned char*)proto + size};
  tpu_pb_t slice;
  uint32_t field, wire;
  uint64_t v;
  *out_ios = NULL;
  *out_count = 0;
  /* HloModuleProto.host_program_shape = 4. */
  while (tpu_pb_next(&module, &field, &wire, &v, &slice)) {
    if (field == 4 && wire == 2) return tpu_parse_program_shape(slice, out_ios, out_count);
  }
  return 0;
}

int tpu_executable_parameters(const PJRT_Api* api, PJRT_Executable* executable, tpu_io_t** out_ios,
                              size_t* out_count) {
  PJRT_Executable_OptimizedProgram_Args args;
  PJRT_Program program;
  PJRT_Error* error;
  int ok, with_config;
  if (!TPU_HAS_FN(api, PJRT_Executable_OptimizedProgram)) return 0;
  memset(&program, 0, sizeof(program));
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  memset(&args, 0, sizeof(args));
  args.struct_size = PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE;
  args.executable = executable;
  args.program = &program;
  /* First the size, then the bytes. */
  error = api->PJRT_Executable_OptimizedProgram(&args);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    return 0;
  }
  /* "hlo" is an HloModuleProto; "hlo_with_config" wraps one (field 1). */
  if (program.format == NULL || program.code_size == 0) return 0;
  if (program.format_size == 3 && memcmp(program.format, "hlo", 3) == 0) {
    with_config = 0;
  } else if (program.format_size == 15 && memcmp(program.format, "hlo_with_config", 15) == 0) {
    with_config = 1;
  } else {
    return 0;
  }
  program.code = (char*)malloc(program.code_size);
  if (program.code == NULL) return 0;
  error = api->PJRT_Executable_OptimizedProgram(&args);
  if (error != NULL) {
    free(tpu_take_error_message(api, error));
    free(program.code);
    return 0;
  }
  ok = 0;
  if (with_config) {
    tpu_pb_t wrapper = {(const unsigned char*)program.code,
                        (const unsigned char*)program.code + program.code_size};
    tpu_pb_t slice;
    uint32_t field, wire;
    uint64_t v;
    while (tpu_pb_next(&wrapper, &field, &wire, &v, &slice)) {
      if (field == 1 && wire == 2) {
        ok = tpu_hlo_parameters(slice.p, (size_t)(slice.end - slice.p), out_ios, out_count);
        break;
      }
    }
  } else {
    ok = tpu_hlo_parameters(program.code, program.code_size, out_ios, out_count);
  }
  free(program.code);
  return ok;
}
