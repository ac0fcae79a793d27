/*
 * nx_hal._fastpath -- the per-call path of Buffer and Executable, in C.
 *
 * Running a small program takes a couple of µs in a plugin; through cffi and
 * Python-level objects the binding alone cost about as much again
 * (bench/pjrt_overhead.py). The two base classes here hold the plugin
 * handles, free them in tp_dealloc (no Python __del__), and run an
 * executable on Buffers from tp_call without making a single cffi object.
 * Host arrays that already have an input's exact dtype, shape and layout
 * are put (aliased) here too, read through numpy's array interface (see
 * put_host_input). Everything else about buffers and executables lives in
 * the Python subclasses (nx_hal/buffer.py, nx_hal/executable.py); whatever
 * is off the fast path -- host arrays to convert, buffers of another
 * device, outputs whose shape is only known at run time, an error status --
 * is handed back to them.
 *
 * Limited API (abi3, CPython 3.10+), like the cffi extension beside it.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "nx_hal/nx_hal.h"

/* Inputs and outputs up to this many use stack arrays; more take the slow path. */
#define NXHAL_PY_SMALL_IO 32

/* A device buffer. Fields are set once by _adopt (or by executable_call) and
 * read without locks: the GIL guards them. */
typedef struct {
  PyObject_HEAD const nxhal_api_t* api; /* borrowed: the plugin stays loaded while `device` lives */
  nxhal_buffer_t* handle;               /* owned: destroyed in dealloc */
  PyObject* device;                     /* the nx_hal.Device, kept alive by the buffer */
  PyObject* layout;                     /* nx_hal.buffer.Layout */
  PyObject* host;                       /* host memory the buffer aliases (zero-copy), or NULL */
  PyObject* cdata; /* the handle as a cffi pointer, made on first use by Python */
  PyObject* weakrefs;
} nxhal_py_buffer_t;

/* A compiled program; `layouts` is set only when every output is static. */
typedef struct {
  PyObject_HEAD const nxhal_api_t* api; /* borrowed, as for buffers */
  nxhal_executable_t* handle;           /* owned: destroyed in dealloc */
  PyObject* device;
  PyObject* layouts; /* tuple of the outputs' Layouts, or NULL: every call takes the slow path */
  PyObject* input_devices;  /* tuple: each input's Device (replicas), or NULL: all `device` */
  PyObject* output_devices; /* the same for outputs */
  PyObject* cdata;
  Py_ssize_t num_inputs;
  Py_ssize_t num_outputs;
  PyObject* weakrefs;
  PyObject* host_inputs; /* capsule of a host_inputs_t, or NULL: host arrays take the slow path */
} nxhal_py_executable_t;

/* The Python Buffer class (exactly): the only inputs the fast path takes and
 * the type of the outputs it makes. Set once by set_buffer_type(). */
static PyTypeObject* buffer_type = NULL;
static PyObject* str_call_slow = NULL;
static PyObject* str_raise_status = NULL;
static PyObject* str_array_struct = NULL;

/* Points *slot at value (a new reference), dropping what it held. */
static void replace_ref(PyObject** slot, PyObject* value) {
  PyObject* old = *slot;
  Py_XINCREF(value);
  *slot = value;
  Py_XDECREF(old);
}

static void* address_of(PyObject* value) {
  return value == Py_None ? NULL : PyLong_AsVoidPtr(value);
}

/* The two addresses every _adopt takes: the plugin table and a handle that
 * an object not yet holding one (`held` NULL) takes over. -1 with an
 * exception set when either is missing or not an address. */
static int adopt_addresses(const void* held, PyObject* api, PyObject* handle, const char* what,
                           void** out_api, void** out_handle) {
  if (held != NULL) {
    PyErr_Format(PyExc_RuntimeError, "this %s already owns a handle", what);
    return -1;
  }
  *out_api = address_of(api);
  if (PyErr_Occurred()) return -1;
  *out_handle = address_of(handle);
  if (PyErr_Occurred()) return -1;
  if (*out_api == NULL || *out_handle == NULL) {
    PyErr_Format(PyExc_ValueError, "_adopt needs a plugin table and a %s handle", what);
    return -1;
  }
  return 0;
}

/* --- BufferBase ---------------------------------------------------------- */

static void buffer_dealloc(PyObject* obj) {
  nxhal_py_buffer_t* self = (nxhal_py_buffer_t*)obj;
  PyTypeObject* type = Py_TYPE(obj);
  freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs(obj);
  if (self->handle != NULL) {
    nxhal_buffer_t* handle = self->handle;
    const nxhal_api_t* api = self->api;
    self->handle = NULL;
    /* Without the GIL: a plugin may wait here for work whose completion
     * callbacks need it. */
    Py_BEGIN_ALLOW_THREADS api->buffer_destroy(handle);
    Py_END_ALLOW_THREADS
  }
  /* After the destroy: the aliased host memory and the plugin outlive it. */
  Py_CLEAR(self->cdata);
  Py_CLEAR(self->host);
  Py_CLEAR(self->layout);
  Py_CLEAR(self->device);
  free_fn(obj);
  Py_DECREF(type);
}

/* _adopt(device, api_address, handle_address, layout, host): takes ownership.
 * METH_FASTCALL: Device.put calls it once per buffer. */
static PyObject* buffer_adopt(PyObject* obj, PyObject* const* args, Py_ssize_t nargs) {
  nxhal_py_buffer_t* self = (nxhal_py_buffer_t*)obj;
  void* api_ptr;
  void* handle_ptr;
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "_adopt(device, api, handle, layout, host)");
    return NULL;
  }
  if (adopt_addresses(self->handle, args[1], args[2], "Buffer", &api_ptr, &handle_ptr) < 0) {
    return NULL;
  }
  self->api = (const nxhal_api_t*)api_ptr;
  self->handle = (nxhal_buffer_t*)handle_ptr;
  replace_ref(&self->device, args[0]);
  replace_ref(&self->layout, args[3]);
  replace_ref(&self->host, args[4] == Py_None ? NULL : args[4]);
  Py_RETURN_NONE;
}

static PyObject* buffer_get_addr(PyObject* obj, void* closure) {
  (void)closure;
  return PyLong_FromVoidPtr(((nxhal_py_buffer_t*)obj)->handle);
}

/* --- host views: DLPack exports handed to numpy ------------------------ */

/* What Buffer.to_numpy gives numpy.from_dlpack: an object whose __dlpack__
 * hands over one "dltensor_versioned" capsule, once. The capsule owns the
 * plugin's export, which keeps the plugin's storage (and client) alive on
 * its own, so the array numpy makes over it stays valid after the Buffer
 * and its handle are gone. */
typedef struct {
  PyObject_HEAD PyObject* capsule; /* NULL once handed over */
} nxhal_py_host_view_t;

static PyTypeObject* host_view_type = NULL;
static const char capsule_name[] = "dltensor_versioned";

/* A capsule numpy never consumed (still under its first name) frees the export. */
static void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, capsule_name)) {
    nxhal_dlpack_managed_tensor_t* t =
        (nxhal_dlpack_managed_tensor_t*)PyCapsule_GetPointer(capsule, capsule_name);
    if (t != NULL && t->deleter != NULL) t->deleter(t);
  }
}

static void host_view_dealloc(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
  Py_CLEAR(((nxhal_py_host_view_t*)obj)->capsule);
  free_fn(obj);
  Py_DECREF(type);
}

static PyObject* host_view_dlpack(PyObject* obj, PyObject* args, PyObject* kwargs) {
  nxhal_py_host_view_t* self = (nxhal_py_host_view_t*)obj;
  PyObject* capsule = self->capsule;
  (void)args;
  (void)kwargs;
  if (capsule == NULL) {
    PyErr_SetString(PyExc_BufferError, "this host view was already exported");
    return NULL;
  }
  self->capsule = NULL;
  return capsule; /* the reference passes to the caller */
}

static PyObject* host_view_dlpack_device(PyObject* obj, PyObject* args) {
  (void)obj;
  (void)args;
  return Py_BuildValue("(ii)", NXHAL_DLPACK_DEVICE_CPU, 0);
}

static PyMethodDef host_view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))host_view_dlpack, METH_VARARGS | METH_KEYWORDS,
     "Hands over the capsule (once)."},
    {"__dlpack_device__", host_view_dlpack_device, METH_NOARGS, "(kDLCPU, 0)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot host_view_slots[] = {
    {Py_tp_dealloc, (void*)host_view_dealloc},
    {Py_tp_methods, host_view_methods},
    {Py_tp_doc, (void*)"A plugin's zero-copy DLPack export of a buffer, for numpy.from_dlpack."},
    {0, NULL},
};

static PyType_Spec host_view_spec = {
    "nx_hal._fastpath.HostView",
    sizeof(nxhal_py_host_view_t),
    0,
    Py_TPFLAGS_DEFAULT,
    host_view_slots,
};

/* 1 when the export is host memory holding exactly the buffer's layout
 * (shape, element size), compact row-major; -1 with an exception set. */
static int export_matches(const nxhal_dlpack_tensor_t* t, PyObject* layout) {
  PyObject* shape = PyTuple_GetItem(layout, 0);
  PyObject* np_dtype = PyTuple_GetItem(layout, 3);
  PyObject* item = np_dtype ? PyObject_GetAttrString(np_dtype, "itemsize") : NULL;
  long itemsize = item ? PyLong_AsLong(item) : -1;
  Py_ssize_t rank = shape ? PyTuple_Size(shape) : -1;
  int64_t expect = 1;
  Py_XDECREF(item);
  if (itemsize < 0 || rank < 0) return -1;
  if (t->device.device_type != NXHAL_DLPACK_DEVICE_CPU || t->ndim != rank ||
      (long)t->dtype.bits * t->dtype.lanes != itemsize * 8 || (rank > 0 && t->shape == NULL)) {
    return 0;
  }
  for (Py_ssize_t i = rank - 1; i >= 0; --i) {
    long long dim = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
    if (dim == -1 && PyErr_Occurred()) return -1;
    if (t->shape[i] != dim) return 0;
    if (t->strides != NULL && dim != 1 && t->strides[i] != expect) return 0;
    expect *= dim;
  }
  return t->data != NULL || expect == 0;
}

/* _host_view(): a HostView over the plugin's zero-copy export of this
 * buffer, marked read-only, or None where there is none to give (export
 * unsupported or failed, not host memory, another layout): the caller then
 * copies, and the copy reports any error. bf16 is exported as its uint16
 * words, as Buffer.to_numpy gives it. */
static PyObject* buffer_host_view(PyObject* obj, PyObject* unused) {
  nxhal_py_buffer_t* self = (nxhal_py_buffer_t*)obj;
  nxhal_dlpack_managed_tensor_t* t = NULL;
  nxhal_status_t* status;
  nxhal_py_host_view_t* view;
  int match;
  (void)unused;
  if (self->handle == NULL || self->layout == NULL || host_view_type == NULL ||
      self->api->buffer_to_dlpack == NULL) {
    Py_RETURN_NONE;
  }
  /* Without the GIL: the plugin waits here until the buffer is written. */
  Py_BEGIN_ALLOW_THREADS status = self->api->buffer_to_dlpack(self->handle, &t);
  Py_END_ALLOW_THREADS if (status != NULL || t == NULL) {
    if (status != NULL) self->api->status_free(status);
    Py_RETURN_NONE;
  }
  match = export_matches(&t->dl_tensor, self->layout);
  if (match <= 0) {
    if (t->deleter != NULL) t->deleter(t);
    if (match < 0) return NULL;
    Py_RETURN_NONE;
  }
  if (t->dl_tensor.dtype.code == NXHAL_DLPACK_CODE_BFLOAT) {
    t->dl_tensor.dtype.code = NXHAL_DLPACK_CODE_UINT;
  }
  /* The memory may alias the caller's host array or the plugin's own
   * storage that later runs never write: numpy must not write it either. */
  t->flags |= NXHAL_DLPACK_FLAG_READ_ONLY;
  view = (nxhal_py_host_view_t*)PyType_GenericAlloc(host_view_type, 0);
  if (view != NULL) view->capsule = PyCapsule_New(t, capsule_name, capsule_destructor);
  if (view == NULL || view->capsule == NULL) {
    if (t->deleter != NULL) t->deleter(t);
    Py_XDECREF(view);
    return NULL;
  }
  return (PyObject*)view;
}

/* _read_into(out): defined with the array interface below. */
static PyObject* buffer_read_into(PyObject* obj, PyObject* out);

static PyMethodDef buffer_methods[] = {
    {"_adopt", (PyCFunction)(void (*)(void))buffer_adopt, METH_FASTCALL,
     "Takes ownership of a plugin buffer handle."},
    {"_host_view", buffer_host_view, METH_NOARGS,
     "A read-only zero-copy DLPack export for numpy.from_dlpack, or None."},
    {"_read_into", buffer_read_into, METH_O,
     "Copies the buffer into a writable C-contiguous numpy array; a failed status's address, or "
     "None."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef buffer_members[] = {
    {"device", T_OBJECT, offsetof(nxhal_py_buffer_t, device), READONLY, "The Device holding it."},
    {"_layout", T_OBJECT, offsetof(nxhal_py_buffer_t, layout), READONLY, NULL},
    {"_host", T_OBJECT, offsetof(nxhal_py_buffer_t, host), READONLY, NULL},
    {"_cdata", T_OBJECT, offsetof(nxhal_py_buffer_t, cdata), 0, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(nxhal_py_buffer_t, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef buffer_getset[] = {
    {"_addr", buffer_get_addr, NULL, "The handle's address.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot buffer_slots[] = {
    {Py_tp_dealloc, (void*)buffer_dealloc},
    {Py_tp_methods, buffer_methods},
    {Py_tp_members, buffer_members},
    {Py_tp_getset, buffer_getset},
    {Py_tp_new, (void*)PyType_GenericNew},
    {Py_tp_doc, (void*)"The C part of nx_hal.Buffer: its handle, device and layout."},
    {0, NULL},
};

static PyType_Spec buffer_spec = {
    "nx_hal._fastpath.BufferBase",
    sizeof(nxhal_py_buffer_t),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    buffer_slots,
};

/* --- ExecutableBase ------------------------------------------------------ */

static void executable_dealloc(PyObject* obj) {
  nxhal_py_executable_t* self = (nxhal_py_executable_t*)obj;
  PyTypeObject* type = Py_TYPE(obj);
  freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs(obj);
  if (self->handle != NULL) {
    nxhal_executable_t* handle = self->handle;
    const nxhal_api_t* api = self->api;
    self->handle = NULL;
    Py_BEGIN_ALLOW_THREADS api->executable_destroy(handle);
    Py_END_ALLOW_THREADS
  }
  Py_CLEAR(self->cdata);
  Py_CLEAR(self->layouts);
  Py_CLEAR(self->input_devices);
  Py_CLEAR(self->output_devices);
  Py_CLEAR(self->host_inputs);
  Py_CLEAR(self->device);
  free_fn(obj);
  Py_DECREF(type);
}

/* _adopt(device, api_address, handle_address): takes ownership. Until
 * _set_signature, every call takes the slow path. */
static PyObject* executable_adopt(PyObject* obj, PyObject* args) {
  nxhal_py_executable_t* self = (nxhal_py_executable_t*)obj;
  PyObject *device, *api, *handle;
  void* api_ptr;
  void* handle_ptr;
  if (!PyArg_ParseTuple(args, "OOO:_adopt", &device, &api, &handle)) return NULL;
  if (adopt_addresses(self->handle, api, handle, "Executable", &api_ptr, &handle_ptr) < 0) {
    return NULL;
  }
  self->api = (const nxhal_api_t*)api_ptr;
  self->handle = (nxhal_executable_t*)handle_ptr;
  replace_ref(&self->device, device);
  Py_RETURN_NONE;
}

/* --- host arrays as inputs ----------------------------------------------- */

/* numpy's array interface, C-struct access: what the capsule returned by an
 * array's __array_struct__ points at, as numpy documents it
 * (https://numpy.org/doc/stable/reference/arrays.interface.html). Declared
 * here because numpy is not a build dependency, and read this way because
 * PyObject_GetBuffer is not in the 3.10 limited API. */
typedef struct {
  int two; /* 2, or this is not the struct */
  int nd;
  char typekind; /* 'f', 'i', 'u', 'b', ... */
  int itemsize;
  int flags;
  Py_intptr_t* shape;
  Py_intptr_t* strides;
  void* data; /* the first element */
  PyObject* descr;
} nxhal_py_array_interface_t;

#define NXHAL_PY_ARRAY_C_CONTIGUOUS 0x1
#define NXHAL_PY_ARRAY_ALIGNED 0x100
#define NXHAL_PY_ARRAY_NOTSWAPPED 0x200
#define NXHAL_PY_ARRAY_WRITEABLE 0x400
#define NXHAL_PY_ARRAY_AS_IS \
  (NXHAL_PY_ARRAY_C_CONTIGUOUS | NXHAL_PY_ARRAY_ALIGNED | NXHAL_PY_ARRAY_NOTSWAPPED)

/* Buffer._read_into(out): the small-array to_numpy in one C call (a cffi
 * from_buffer and call cost about twice as much). `out` must be a writable,
 * C-contiguous, aligned numpy array; the plugin checks that its size is the
 * buffer's. Returns None, or the address of the plugin's failed status for
 * Python to raise and free. */
static PyObject* buffer_read_into(PyObject* obj, PyObject* out) {
  nxhal_py_buffer_t* self = (nxhal_py_buffer_t*)obj;
  const nxhal_py_array_interface_t* a;
  nxhal_status_t* status;
  PyObject* capsule;
  size_t nbytes;
  int i;
  if (self->handle == NULL) {
    PyErr_SetString(PyExc_ValueError, "this Buffer holds no handle");
    return NULL;
  }
  capsule = PyObject_GetAttr(out, str_array_struct);
  if (capsule == NULL) return NULL;
  a = (const nxhal_py_array_interface_t*)PyCapsule_GetPointer(capsule, NULL);
  if (a == NULL || a->two != 2 ||
      (a->flags & (NXHAL_PY_ARRAY_AS_IS | NXHAL_PY_ARRAY_WRITEABLE)) !=
          (NXHAL_PY_ARRAY_AS_IS | NXHAL_PY_ARRAY_WRITEABLE) ||
      (a->nd > 0 && a->shape == NULL)) {
    Py_DECREF(capsule);
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "_read_into needs a writable C-contiguous numpy array");
    }
    return NULL;
  }
  nbytes = (size_t)a->itemsize;
  for (i = 0; i < a->nd; ++i) nbytes *= (size_t)a->shape[i];
  /* Without the GIL: the plugin may wait for the run that writes the buffer. */
  Py_BEGIN_ALLOW_THREADS status = self->api->buffer_to_host(self->handle, a->data, nbytes, NULL);
  Py_END_ALLOW_THREADS Py_DECREF(capsule);
  if (status != NULL) return PyLong_FromVoidPtr(status);
  Py_RETURN_NONE;
}

/* Inputs of a higher rank than this take host arrays on the slow path. */
#define NXHAL_PY_HOST_MAX_RANK 32

/* The numpy kind and item size of each nxhal_dtype_t, indexed by its value
 * (nx_hal/dtypes.py). bf16 has none: numpy carries it as uint16 words, which
 * the slow path takes as they are. */
static const struct {
  char kind;
  int size;
} numpy_kinds[] = {
    {0, 0},   {'f', 2}, {0, 0},   {'f', 4}, {'f', 8}, {'i', 1}, {'i', 2},
    {'i', 4}, {'i', 8}, {'u', 1}, {'b', 1}, {'u', 2}, {'u', 4}, {'u', 8},
};

/* One input's static signature, which a host array must match exactly to
 * be put in C. dtype NXHAL_DTYPE_INVALID: host arrays for it take the slow
 * path (dynamic or unknown shape, no numpy kind, zero-size). */
typedef struct {
  nxhal_dtype_t dtype;
  char typekind;
  int itemsize;
  int64_t rank;
  size_t nbytes;
  int64_t dims[NXHAL_PY_HOST_MAX_RANK];
} host_input_t;

/* Every input's signature and the device they are put on. Owned by a
 * capsule: the executable holds it, and a call holds it while it reads it
 * (an __array_struct__ may run Python code that sets a new signature). */
typedef struct {
  nxhal_device_t* device; /* borrowed: the executable keeps its Device alive */
  Py_ssize_t count;
  host_input_t inputs[];
} host_inputs_t;

static const char host_inputs_name[] = "nx_hal._fastpath.host_inputs";

static void host_inputs_free(PyObject* capsule) {
  PyMem_Free(PyCapsule_GetPointer(capsule, host_inputs_name));
}

/* Reads one input's (dtype code, shape) entry into `in`, which stays
 * NXHAL_DTYPE_INVALID where host arrays must take the slow path. -1 with an
 * exception only for an entry of the wrong form. */
static int read_host_input(host_input_t* in, PyObject* spec) {
  PyObject* shape;
  long code;
  Py_ssize_t rank, i;
  size_t count = 1;
  memset(in, 0, sizeof *in);
  if (spec == Py_None) return 0;
  if (!PyTuple_Check(spec) || PyTuple_Size(spec) != 2) {
    PyErr_SetString(PyExc_ValueError, "host inputs are (dtype code, shape) pairs or None");
    return -1;
  }
  code = PyLong_AsLong(PyTuple_GetItem(spec, 0));
  if (code == -1 && PyErr_Occurred()) return -1;
  shape = PyTuple_GetItem(spec, 1);
  if (!PyTuple_Check(shape) || code <= 0 ||
      code >= (long)(sizeof numpy_kinds / sizeof numpy_kinds[0]) || numpy_kinds[code].kind == 0) {
    return 0; /* unknown rank, or a dtype numpy has no kind for */
  }
  rank = PyTuple_Size(shape);
  if (rank > NXHAL_PY_HOST_MAX_RANK) return 0;
  for (i = 0; i < rank; ++i) {
    PyObject* item = PyTuple_GetItem(shape, i);
    long long dim = item == Py_None ? -1 : PyLong_AsLongLong(item);
    if (dim == -1 && PyErr_Occurred()) return -1;
    /* Dynamic, zero-size (the slow path puts those), or too large. */
    if (dim <= 0 || (unsigned long long)dim > SIZE_MAX / 8 / count) return 0;
    count *= (size_t)dim;
    in->dims[i] = dim;
  }
  in->typekind = numpy_kinds[code].kind;
  in->itemsize = numpy_kinds[code].size;
  in->rank = rank;
  in->nbytes = count * (size_t)in->itemsize;
  in->dtype = (nxhal_dtype_t)code;
  return 0;
}

/* The capsule _set_signature keeps from its device and host_inputs
 * arguments; None (a new reference) when host arrays always take the slow
 * path; NULL with an exception set. */
static PyObject* host_inputs_new(Py_ssize_t num_inputs, PyObject* device, PyObject* specs) {
  host_inputs_t* sig;
  PyObject* capsule;
  Py_ssize_t i;
  if (specs == Py_None || device == Py_None) Py_RETURN_NONE;
  if (!PyTuple_Check(specs) || PyTuple_Size(specs) != num_inputs) {
    PyErr_SetString(PyExc_ValueError, "host_inputs needs one entry per input (or None)");
    return NULL;
  }
  sig = (host_inputs_t*)PyMem_Malloc(sizeof *sig + (size_t)num_inputs * sizeof(host_input_t));
  if (sig == NULL) return PyErr_NoMemory();
  sig->device = (nxhal_device_t*)PyLong_AsVoidPtr(device);
  sig->count = num_inputs;
  for (i = 0; i < num_inputs; ++i) {
    if (read_host_input(&sig->inputs[i], PyTuple_GetItem(specs, i)) < 0) break;
  }
  if (PyErr_Occurred() || sig->device == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "host inputs need a device handle");
    PyMem_Free(sig);
    return NULL;
  }
  capsule = PyCapsule_New(sig, host_inputs_name, host_inputs_free);
  if (capsule == NULL) PyMem_Free(sig);
  return capsule;
}

/* _set_signature(num_inputs, num_outputs, layouts, input_devices,
 * output_devices, device, host_inputs): layouts is a tuple with every
 * output's Layout, or None when some output's shape is only known at run
 * time (those runs take the slow path). The device tuples give each input's
 * and output's Device for executables that span several (replicas); None:
 * all on `device`. device is the address of the Device's handle, and
 * host_inputs each input's (dtype code, shape) -- None for a dynamic dim,
 * shape None when even the rank is unknown -- for host arrays put in C; or
 * None: host arrays always take the slow path. */
static int tuple_of(PyObject* value, Py_ssize_t size) {
  return value == Py_None || (PyTuple_Check(value) && PyTuple_Size(value) == size);
}

static PyObject* executable_set_signature(PyObject* obj, PyObject* args) {
  nxhal_py_executable_t* self = (nxhal_py_executable_t*)obj;
  Py_ssize_t num_inputs, num_outputs;
  PyObject *layouts, *input_devices, *output_devices, *device, *specs, *host_inputs;
  if (!PyArg_ParseTuple(args, "nnOOOOO:_set_signature", &num_inputs, &num_outputs, &layouts,
                        &input_devices, &output_devices, &device, &specs)) {
    return NULL;
  }
  if (num_inputs < 0 || num_outputs < 0 || !tuple_of(layouts, num_outputs) ||
      !tuple_of(input_devices, num_inputs) || !tuple_of(output_devices, num_outputs)) {
    PyErr_SetString(PyExc_ValueError,
                    "layouts and output_devices need one entry per output, input_devices one per "
                    "input (or None)");
    return NULL;
  }
  host_inputs = host_inputs_new(num_inputs, device, specs);
  if (host_inputs == NULL) return NULL;
  self->num_inputs = num_inputs;
  self->num_outputs = num_outputs;
  replace_ref(&self->layouts, layouts == Py_None ? NULL : layouts);
  replace_ref(&self->input_devices, input_devices == Py_None ? NULL : input_devices);
  replace_ref(&self->output_devices, output_devices == Py_None ? NULL : output_devices);
  replace_ref(&self->host_inputs, host_inputs == Py_None ? NULL : host_inputs);
  Py_DECREF(host_inputs);
  Py_RETURN_NONE;
}

/* The buffers one call put for host arrays, each with what keeps its
 * array's memory alive until the buffer is destroyed: the capsule from the
 * array's __array_struct__, which holds a reference to the array. */
typedef struct {
  Py_ssize_t count;
  nxhal_buffer_t* buffers[NXHAL_PY_SMALL_IO];
  PyObject* capsules[NXHAL_PY_SMALL_IO];
} host_puts_t;

/* 1 when the array is exactly the input's layout: its dtype, its static
 * shape, C-contiguous, aligned, native byte order. */
static int array_matches(const nxhal_py_array_interface_t* a, const host_input_t* in) {
  int i;
  if (a->two != 2 || (a->flags & NXHAL_PY_ARRAY_AS_IS) != NXHAL_PY_ARRAY_AS_IS ||
      a->nd != in->rank || a->typekind != in->typekind || a->itemsize != in->itemsize ||
      a->data == NULL || (a->nd > 0 && a->shape == NULL)) {
    return 0;
  }
  for (i = 0; i < a->nd; ++i) {
    if (a->shape[i] != in->dims[i]) return 0;
  }
  return 1;
}

/* Puts host array `x` as input `index` in C, aliased where the plugin can
 * (NXHAL_HOST_ZERO_COPY; see executable_call for why that is safe). 1: put,
 * *out is its handle, and `puts` holds it and its capsule; 0: `x` takes the
 * slow path (no array interface, or a dtype, shape or layout that Python
 * converts, or refuses with the error it has always given); -1: the plugin
 * failed, *status is its status. */
static int put_host_input(const nxhal_api_t* api, const host_inputs_t* sig, Py_ssize_t index,
                          PyObject* x, host_puts_t* puts, nxhal_buffer_t** out,
                          nxhal_status_t** status) {
  const host_input_t* in = &sig->inputs[index];
  const nxhal_py_array_interface_t* array;
  nxhal_tensor_desc_t desc;
  PyObject* capsule;
  if (in->dtype == NXHAL_DTYPE_INVALID) return 0;
  capsule = PyObject_GetAttr(x, str_array_struct);
  array = capsule ? (const nxhal_py_array_interface_t*)PyCapsule_GetPointer(capsule, NULL) : NULL;
  if (array == NULL || !array_matches(array, in)) {
    PyErr_Clear(); /* not an array, or not a numpy one we can read as it is */
    Py_XDECREF(capsule);
    return 0;
  }
  desc.struct_size = sizeof desc;
  desc.dtype = in->dtype;
  desc.rank = in->rank;
  desc.dims = in->dims;
  *out = NULL;
  *status =
      api->buffer_from_host(sig->device, &desc, array->data, in->nbytes, NXHAL_HOST_ZERO_COPY, out);
  if (*status != NULL) {
    Py_DECREF(capsule);
    return -1;
  }
  puts->buffers[puts->count] = *out;
  puts->capsules[puts->count] = capsule;
  ++puts->count;
  return 1;
}

/* Without the GIL; the capsules are released after this, with it. */
static void destroy_puts(const nxhal_api_t* api, const host_puts_t* puts) {
  Py_ssize_t i;
  for (i = 0; i < puts->count; ++i) api->buffer_destroy(puts->buffers[i]);
}

static void release_capsules(host_puts_t* puts) {
  Py_ssize_t i;
  for (i = 0; i < puts->count; ++i) Py_DECREF(puts->capsules[i]);
  puts->count = 0;
}

/* Undoes the puts of a call that did not run. */
static void drop_puts(const nxhal_api_t* api, host_puts_t* puts) {
  if (puts->count == 0) return;
  Py_BEGIN_ALLOW_THREADS destroy_puts(api, puts);
  Py_END_ALLOW_THREADS release_capsules(puts);
}

/* 1 when host array args[i] is the very object an earlier input of the
 * same signature was put from: inputs[i] takes that buffer, so an array
 * passed twice (exe(x, x)) is copied at most once where it is misaligned.
 * Reading one buffer twice is allowed: it is never donated. */
static int repeated_host_input(const host_inputs_t* sig, PyObject* args, Py_ssize_t i,
                               nxhal_buffer_t** inputs, const char* host) {
  const host_input_t* in = &sig->inputs[i];
  PyObject* x = PyTuple_GetItem(args, i);
  Py_ssize_t j;
  for (j = 0; j < i; ++j) {
    const host_input_t* other = &sig->inputs[j];
    if (!host[j] || PyTuple_GetItem(args, j) != x || other->dtype != in->dtype ||
        other->rank != in->rank ||
        memcmp(other->dims, in->dims, (size_t)in->rank * sizeof in->dims[0]) != 0) {
      continue;
    }
    inputs[i] = inputs[j];
    return 1;
  }
  return 0;
}

/* The handles of one call's inputs: Buffers of the right device as they
 * are, host arrays put in C where they match their input (only for
 * executables on one device: `host_inputs` NULL otherwise). 1: every
 * handle is in `inputs`; 0: the call takes the slow path; -1: a put failed
 * (*status). Whatever was put is in `puts` either way. */
static int gather_inputs(const nxhal_py_executable_t* self, PyObject* args, PyObject* host_inputs,
                         nxhal_buffer_t** inputs, host_puts_t* puts, nxhal_status_t** status) {
  const host_inputs_t* sig =
      host_inputs ? (const host_inputs_t*)PyCapsule_GetPointer(host_inputs, host_inputs_name)
                  : NULL;
  Py_ssize_t i, n = PyTuple_Size(args);
  char host[NXHAL_PY_SMALL_IO] = {0}; /* 1: inputs[i] was put from a host array */
  for (i = 0; i < n; ++i) {
    PyObject* x = PyTuple_GetItem(args, i);
    int put;
    if (Py_TYPE(x) == buffer_type) {
      const nxhal_py_buffer_t* b = (const nxhal_py_buffer_t*)x;
      PyObject* want = self->input_devices ? PyTuple_GetItem(self->input_devices, i) : self->device;
      if (b->device != want || b->handle == NULL) return 0;
      inputs[i] = b->handle;
      continue;
    }
    if (sig == NULL || sig->count != n) return 0;
    if (repeated_host_input(sig, args, i, inputs, host)) continue;
    put = put_host_input(self->api, sig, i, x, puts, &inputs[i], status);
    if (put <= 0) return put;
    host[i] = 1;
  }
  return 1;
}

static PyObject* call_slow(PyObject* self, PyObject* args) {
  return PyObject_CallMethodObjArgs(self, str_call_slow, args, NULL);
}

/* Python turns a failed status into the right exception (and frees it). */
static PyObject* raise_status(PyObject* obj, const nxhal_api_t* api, nxhal_status_t* status) {
  PyObject* result;
  PyObject* address = PyLong_FromVoidPtr(status);
  if (address == NULL) {
    api->status_free(status);
    return NULL;
  }
  result = PyObject_CallMethodObjArgs(obj, str_raise_status, address, NULL);
  Py_DECREF(address);
  return result;
}

/* The outputs of a run as a list of new Buffers (the plugin's handles pass
 * to them; on failure the ones not yet wrapped are destroyed). */
static PyObject* wrap_outputs(const nxhal_py_executable_t* self, nxhal_buffer_t** outputs,
                              Py_ssize_t num_outputs) {
  PyObject* result = PyList_New(num_outputs);
  Py_ssize_t i;
  for (i = 0; i < num_outputs; ++i) {
    nxhal_py_buffer_t* b =
        result == NULL ? NULL : (nxhal_py_buffer_t*)PyType_GenericAlloc(buffer_type, 0);
    PyObject* layout;
    PyObject* device;
    if (b == NULL) {
      /* Out of memory: the outputs not yet wrapped are freed here. */
      Py_ssize_t k;
      for (k = i; k < num_outputs; ++k) self->api->buffer_destroy(outputs[k]);
      Py_XDECREF(result);
      return NULL;
    }
    layout = PyTuple_GetItem(self->layouts, i);
    device = self->output_devices ? PyTuple_GetItem(self->output_devices, i) : self->device;
    b->api = self->api;
    b->handle = outputs[i];
    Py_INCREF(device);
    b->device = device;
    Py_INCREF(layout);
    b->layout = layout;
    PyList_SetItem(result, i, (PyObject*)b); /* steals */
  }
  return result;
}

/* exe(*inputs): one synchronous run on Buffers of its device and host
 * arrays that match their inputs exactly; returns a list of new Buffers.
 *
 * Host arrays are aliased, not copied, where the plugin can
 * (NXHAL_HOST_ZERO_COPY; it copies where it cannot). That is safe because
 * this run is synchronous: execute without an event returns only when the
 * run is done (the ABI's contract; the tpu plugin awaits PJRT's completion
 * events, the npu plugin runs OpenVINO's infer()), and the buffers put here
 * are destroyed right after it, before the capsules that keep the arrays
 * alive are released, so nothing reads an array after this call returns.
 * Outputs never alias inputs: plugins only read aliased memory (the tpu
 * plugin marks aliased inputs non-donatable, so a program that may alias an
 * input with an output gets PJRT to copy), and the npu plugin copies an
 * input passed straight through into its own output buffer. So changing an
 * array after the call never changes an output. (Changing it from another
 * thread *during* the call is a data race, as it was with a copy.) The
 * slow path puts the arrays it converts the same way; run_async, which
 * returns before the run is done, copies. */
static PyObject* executable_call(PyObject* obj, PyObject* args, PyObject* kwargs) {
  nxhal_py_executable_t* self = (nxhal_py_executable_t*)obj;
  nxhal_buffer_t* inputs[NXHAL_PY_SMALL_IO];
  nxhal_buffer_t* outputs[NXHAL_PY_SMALL_IO];
  Py_ssize_t num_inputs = PyTuple_Size(args);
  Py_ssize_t num_outputs = self->num_outputs;
  const nxhal_api_t* api = self->api;
  nxhal_status_t* status = NULL;
  host_puts_t puts;
  PyObject* host_inputs;
  int gathered;
  if (kwargs != NULL && PyDict_Size(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "an Executable takes its inputs by position only");
    return NULL;
  }
  if (self->layouts == NULL || self->handle == NULL || buffer_type == NULL ||
      num_inputs != self->num_inputs || num_inputs > NXHAL_PY_SMALL_IO ||
      num_outputs > NXHAL_PY_SMALL_IO) {
    return call_slow(obj, args);
  }
  puts.count = 0;
  host_inputs = self->input_devices == NULL ? self->host_inputs : NULL;
  Py_XINCREF(host_inputs);
  gathered = gather_inputs(self, args, host_inputs, inputs, &puts, &status);
  Py_XDECREF(host_inputs);
  if (gathered <= 0) {
    drop_puts(api, &puts);
    return gathered == 0 ? call_slow(obj, args) : raise_status(obj, api, status);
  }
  /* The args tuple keeps every input alive while the GIL is released, and
   * the capsules in `puts` the arrays' memory. */
  Py_BEGIN_ALLOW_THREADS status = api->executable_execute(self->handle, inputs, (size_t)num_inputs,
                                                          outputs, (size_t)num_outputs, NULL);
  destroy_puts(api, &puts);
  Py_END_ALLOW_THREADS release_capsules(&puts);
  if (status != NULL) return raise_status(obj, api, status);
  return wrap_outputs(self, outputs, num_outputs);
}

static PyObject* executable_get_addr(PyObject* obj, void* closure) {
  (void)closure;
  return PyLong_FromVoidPtr(((nxhal_py_executable_t*)obj)->handle);
}

static PyMethodDef executable_methods[] = {
    {"_adopt", executable_adopt, METH_VARARGS, "Takes ownership of a plugin executable handle."},
    {"_set_signature", executable_set_signature, METH_VARARGS,
     "Input and output counts, and the outputs' Layouts when all are static."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef executable_members[] = {
    {"device", T_OBJECT, offsetof(nxhal_py_executable_t, device), READONLY,
     "The Device it was compiled for."},
    {"_cdata", T_OBJECT, offsetof(nxhal_py_executable_t, cdata), 0, NULL},
    {"_layouts", T_OBJECT, offsetof(nxhal_py_executable_t, layouts), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(nxhal_py_executable_t, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef executable_getset[] = {
    {"_addr", executable_get_addr, NULL, "The handle's address.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot executable_slots[] = {
    {Py_tp_dealloc, (void*)executable_dealloc},
    {Py_tp_call, (void*)executable_call},
    {Py_tp_methods, executable_methods},
    {Py_tp_members, executable_members},
    {Py_tp_getset, executable_getset},
    {Py_tp_new, (void*)PyType_GenericNew},
    {Py_tp_doc, (void*)"The C part of nx_hal.Executable: its handle and the run of exe(*buffers)."},
    {0, NULL},
};

static PyType_Spec executable_spec = {
    "nx_hal._fastpath.ExecutableBase",
    sizeof(nxhal_py_executable_t),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    executable_slots,
};

/* --- module -------------------------------------------------------------- */

static PyObject* set_buffer_type(PyObject* module, PyObject* type) {
  (void)module;
  if (!PyType_Check(type)) {
    PyErr_SetString(PyExc_TypeError, "set_buffer_type needs a class");
    return NULL;
  }
  replace_ref((PyObject**)&buffer_type, type);
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_buffer_type", set_buffer_type, METH_O,
     "Names the BufferBase subclass the fast path takes and makes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "nx_hal._fastpath",
    "The per-call path of nx_hal buffers and executables.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
  PyObject* module = PyModule_Create(&module_def);
  PyObject* type;
  if (module == NULL) return NULL;
  str_call_slow = PyUnicode_InternFromString("_call_slow");
  str_raise_status = PyUnicode_InternFromString("_raise_status");
  str_array_struct = PyUnicode_InternFromString("__array_struct__");
  if (str_call_slow == NULL || str_raise_status == NULL || str_array_struct == NULL) goto fail;
  /* Python's own guard before it hands put buffers back to tp_call. */
  if (PyModule_AddIntConstant(module, "MAX_IO", NXHAL_PY_SMALL_IO) < 0) goto fail;
  type = PyType_FromSpec(&buffer_spec);
  if (type == NULL || PyModule_AddObject(module, "BufferBase", type) < 0) {
    Py_XDECREF(type);
    goto fail;
  }
  host_view_type = (PyTypeObject*)PyType_FromSpec(&host_view_spec);
  if (host_view_type == NULL) goto fail;
  Py_INCREF(host_view_type);
  if (PyModule_AddObject(module, "HostView", (PyObject*)host_view_type) < 0) {
    Py_DECREF(host_view_type);
    goto fail;
  }
  type = PyType_FromSpec(&executable_spec);
  if (type == NULL || PyModule_AddObject(module, "ExecutableBase", type) < 0) {
    Py_XDECREF(type);
    goto fail;
  }
  return module;
fail:
  Py_DECREF(module);
  return NULL;
}
