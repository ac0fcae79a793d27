/* dtype.c -- element type tables: sizes, names, DLPack codes. */
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"

typedef struct nxhal_dtype_entry {
  nxhal_dtype_t dtype;
  const char* name;
  size_t size;
  uint8_t dlpack_code;
} nxhal_dtype_entry_t;

/* Indexed by nxhal_dtype_t; entry 0 is the invalid dtype. */
static const nxhal_dtype_entry_t nxhal_dtypes[] = {
    {NXHAL_DTYPE_INVALID, NULL, 0, 0},
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

#define NXHAL_NUM_DTYPES (sizeof(nxhal_dtypes) / sizeof(nxhal_dtypes[0]))

/* The table entry for `dtype`, or NULL when it is not a valid dtype. */
static const nxhal_dtype_entry_t* nxhal_dtype_entry(nxhal_dtype_t dtype) {
  /* Compare as int: a caller may pass any integer through the enum. */
  int value = (int)dtype;
  if (value <= 0 || (size_t)value >= NXHAL_NUM_DTYPES) return NULL;
  return &nxhal_dtypes[value];
}

size_t nxhal_dtype_size(nxhal_dtype_t dtype) {
  const nxhal_dtype_entry_t* entry = nxhal_dtype_entry(dtype);
  return entry == NULL ? 0 : entry->size;
}

const char* nxhal_dtype_name(nxhal_dtype_t dtype) {
  const nxhal_dtype_entry_t* entry = nxhal_dtype_entry(dtype);
  return entry == NULL ? NULL : entry->name;
}

nxhal_dtype_t nxhal_dtype_from_name(const char* name) {
  size_t i;
  if (name == NULL) return NXHAL_DTYPE_INVALID;
  for (i = 1; i < NXHAL_NUM_DTYPES; ++i) {
    if (strcmp(nxhal_dtypes[i].name, name) == 0) return nxhal_dtypes[i].dtype;
  }
  return NXHAL_DTYPE_INVALID;
}

int nxhal_dtype_to_dlpack(nxhal_dtype_t dtype, nxhal_dlpack_dtype_t* out) {
  const nxhal_dtype_entry_t* entry = nxhal_dtype_entry(dtype);
  if (entry == NULL || out == NULL) return 0;
  out->code = entry->dlpack_code;
  out->bits = (uint8_t)(entry->size * 8);
  out->lanes = 1;
  return 1;
}

nxhal_dtype_t nxhal_dtype_from_dlpack(nxhal_dlpack_dtype_t dtype) {
  size_t i;
  if (dtype.lanes != 1) return NXHAL_DTYPE_INVALID;
  for (i = 1; i < NXHAL_NUM_DTYPES; ++i) {
    if (nxhal_dtypes[i].dlpack_code == dtype.code && nxhal_dtypes[i].size * 8 == dtype.bits) {
      return nxhal_dtypes[i].dtype;
    }
  }
  return NXHAL_DTYPE_INVALID;
}
