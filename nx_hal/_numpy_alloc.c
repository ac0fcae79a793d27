/*
 * nx_hal._numpy_alloc -- a numpy memory handler (NEP 49) whose arrays are
 * 64-byte aligned, for nx_hal.host_memory.align_numpy.
 *
 * XLA CPU aliases a host array only when its data is 64-byte aligned;
 * numpy's allocator gives what malloc gives, 16 bytes, so every large input
 * from numpy is copied once per call (the tpu plugin's staging pool). With
 * this handler installed, the arrays numpy makes from then on alias instead.
 *
 * Each block is taken from malloc (calloc for zeros, so np.zeros keeps the
 * kernel's lazy zero pages) with 64 bytes to spare; the byte just before the
 * aligned pointer holds its distance from the block's start, so free and
 * realloc find the block again without a table. Nothing here depends on the
 * size numpy passes to free.
 *
 * numpy's C API is reached the way its own headers do it, through the
 * _ARRAY_API capsule (PyDataMem_SetHandler and PyDataMem_GetHandler are
 * entries 304 and 305 of that table since numpy 1.22; the project needs
 * 1.24). The handler struct follows numpy's documented version-1 layout.
 *
 * Limited API (abi3, CPython 3.10+), like the other extensions beside it.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#define _DEFAULT_SOURCE /* madvise */
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NXHAL_NP_ALIGN 64u
/* numpy asks the kernel for huge pages on blocks from this size up (when
 * its madvise_hugepage setting is on); the handler does the same. */
#define NXHAL_NP_HUGE_BYTES ((size_t)1 << 22)
#define NXHAL_NP_SET_HANDLER 304
#define NXHAL_NP_GET_HANDLER 305

/* numpy's PyDataMemAllocator and PyDataMem_Handler, version 1 (NEP 49). */
typedef struct {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr, size_t size);
} nxhal_np_allocator_t;

typedef struct {
  char name[127];
  uint8_t version;
  nxhal_np_allocator_t allocator;
} nxhal_np_handler_t;

/* Set by set_hugepages (numpy's own setting); read on every large block. */
static int hugepages = 0;

/* The aligned pointer inside a block from malloc, calloc or realloc: its
 * distance from the block's start is 16 to 64 (malloc's blocks are 16-byte
 * aligned), and mark() records it in the byte before the pointer. */
static unsigned char* aligned_at(void* block) {
  uintptr_t p = ((uintptr_t)block + NXHAL_NP_ALIGN) & ~(uintptr_t)(NXHAL_NP_ALIGN - 1);
  return (unsigned char*)p;
}

static void* mark(unsigned char* block, unsigned char* ptr) {
  ptr[-1] = (unsigned char)(ptr - block);
  return ptr;
}

static void* aligned_in(void* block) {
  return block == NULL ? NULL : mark((unsigned char*)block, aligned_at(block));
}

static void* block_of(void* ptr) {
  return (unsigned char*)ptr - ((unsigned char*)ptr)[-1];
}

/* Like numpy's allocator: huge pages for the whole pages inside a large
 * block, advice the kernel may ignore. */
static void advise(void* ptr, size_t size) {
#ifdef MADV_HUGEPAGE
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t start, end;
  if (!hugepages || size < NXHAL_NP_HUGE_BYTES || page <= 0) return;
  start = ((uintptr_t)ptr + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
  end = ((uintptr_t)ptr + size) & ~((uintptr_t)page - 1);
  if (end > start) (void)madvise((void*)start, end - start, MADV_HUGEPAGE);
#else
  (void)ptr;
  (void)size;
#endif
}

static void* aligned_malloc(void* ctx, size_t size) {
  void* ptr;
  (void)ctx;
  if (size > SIZE_MAX - NXHAL_NP_ALIGN) return NULL;
  ptr = aligned_in(malloc(size + NXHAL_NP_ALIGN));
  if (ptr != NULL) advise(ptr, size);
  return ptr;
}

static void* aligned_calloc(void* ctx, size_t nelem, size_t elsize) {
  void* ptr;
  size_t size;
  (void)ctx;
  if (elsize != 0 && nelem > (SIZE_MAX - NXHAL_NP_ALIGN) / elsize) return NULL;
  size = nelem * elsize;
  ptr = aligned_in(calloc(1, size + NXHAL_NP_ALIGN));
  if (ptr != NULL) advise(ptr, size);
  return ptr;
}

/* realloc may move the block to an address of another alignment: the data,
 * which realloc put at the old distance from the block's start, then moves
 * to the new aligned pointer. Moving new_size bytes stays inside the new
 * block (its distance is at most 64) even where the old data was shorter. */
static void* aligned_realloc(void* ctx, void* ptr, size_t new_size) {
  unsigned char *block, *moved;
  unsigned char distance;
  if (ptr == NULL) return aligned_malloc(ctx, new_size);
  if (new_size > SIZE_MAX - NXHAL_NP_ALIGN) return NULL;
  distance = ((unsigned char*)ptr)[-1];
  block = (unsigned char*)realloc(block_of(ptr), new_size + NXHAL_NP_ALIGN);
  if (block == NULL) return NULL; /* the old block stays, as realloc's does */
  moved = aligned_at(block);
  /* Marked only after the move: the mark's byte may hold old data. */
  if (moved != block + distance) memmove(moved, block + distance, new_size);
  return mark(block, moved);
}

static void aligned_free(void* ctx, void* ptr, size_t size) {
  (void)ctx;
  (void)size;
  if (ptr != NULL) free(block_of(ptr));
}

static nxhal_np_handler_t aligned_handler = {
    "nx_hal_aligned_64",
    1,
    {NULL, aligned_malloc, aligned_calloc, aligned_realloc, aligned_free},
};

/* numpy's C API table, or NULL with an exception set. */
static void** numpy_api(void) {
  static void** api = NULL;
  PyObject *module, *capsule;
  if (api != NULL) return api;
  module = PyImport_ImportModule("numpy._core._multiarray_umath");
  if (module == NULL) {
    PyErr_Clear(); /* numpy 1.x */
    module = PyImport_ImportModule("numpy.core._multiarray_umath");
  }
  if (module == NULL) return NULL;
  capsule = PyObject_GetAttrString(module, "_ARRAY_API");
  Py_DECREF(module);
  if (capsule == NULL) return NULL;
  api = (void**)PyCapsule_GetPointer(capsule, NULL);
  Py_DECREF(capsule); /* the module keeps it, and the table, alive */
  return api;
}

static PyObject* handler(PyObject* module, PyObject* unused) {
  (void)module;
  (void)unused;
  return PyCapsule_New(&aligned_handler, "mem_handler", NULL);
}

static PyObject* get_handler(PyObject* module, PyObject* unused) {
  void** api = numpy_api();
  (void)module;
  (void)unused;
  if (api == NULL) return NULL;
  return ((PyObject * (*)(void)) api[NXHAL_NP_GET_HANDLER])();
}

static PyObject* set_handler(PyObject* module, PyObject* capsule) {
  void** api = numpy_api();
  (void)module;
  if (api == NULL) return NULL;
  if (!PyCapsule_IsValid(capsule, "mem_handler")) {
    PyErr_SetString(PyExc_TypeError, "set_handler needs a numpy memory handler capsule");
    return NULL;
  }
  return ((PyObject * (*)(PyObject*)) api[NXHAL_NP_SET_HANDLER])(capsule);
}

static PyObject* set_hugepages(PyObject* module, PyObject* flag) {
  int on = PyObject_IsTrue(flag);
  (void)module;
  if (on < 0) return NULL;
  hugepages = on;
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"handler", handler, METH_NOARGS, "A new capsule for the 64-byte aligned handler."},
    {"get_handler", get_handler, METH_NOARGS, "numpy's handler in the current context."},
    {"set_handler", set_handler, METH_O,
     "Sets numpy's handler in the current context; returns the one before."},
    {"set_hugepages", set_hugepages, METH_O, "Whether large blocks are advised huge pages."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "nx_hal._numpy_alloc",
    "A numpy memory handler with 64-byte aligned arrays.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__numpy_alloc(void) {
  return PyModule_Create(&module_def);
}
