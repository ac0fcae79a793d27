"""Builds the cffi extension ``nx_hal._nxhal_cffi`` from the public headers.

The header is the one source of truth: the cdef is derived from it, and so
are the C trampolines through which Python calls each entry of the plugin
table (cffi's API mode calls a compiled function directly, about twice as fast
as calling a function pointer through libffi). The loader and helper sources
from ``cabi/`` are compiled into the same extension, so Python and C programs
negotiate and validate plugins with the same code.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
HEADERS = [INCLUDE / "nx_hal" / "nx_hal.h", INCLUDE / "nx_hal" / "nx_hal_loader.h"]

_INT_DEFINE = re.compile(r"#define\s+(\w+)\s+\(?(-?\s*(?:0x[0-9a-fA-F]+|\d+))[uU]?\)?\s*(?:/\*.*)?$")
_TABLE_ENTRY = re.compile(r"([\w\s\*]+?)\(\s*\*\s*(\w+)\s*\)\s*\(([^;]*)\)\s*;")


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def header_to_cdef(text: str) -> str:
    """C declarations cffi accepts: integer #defines kept, the rest of the
    preprocessor and C++-only parts dropped."""
    out: list[str] = []
    skip_depth = 0
    depth = 0
    for line in text.replace("\\\n", " ").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            directive = stripped[1:].strip()
            if directive.startswith(("if", "ifdef", "ifndef")):
                depth += 1
                if skip_depth == 0 and ("__cplusplus" in directive or "_WIN32" in directive):
                    skip_depth = depth
            elif directive.startswith("endif"):
                if skip_depth == depth:
                    skip_depth = 0
                depth -= 1
            elif directive.startswith("else") and skip_depth == depth:
                skip_depth = 0  # the #else of a C++/Windows-only block is ours
            elif skip_depth == 0:
                match = _INT_DEFINE.match(stripped)
                if match:
                    out.append(f"#define {match.group(1)} {match.group(2).replace(' ', '')}")
            continue
        if skip_depth:
            continue
        out.append(line)
    return _strip_comments("\n".join(out))


def table_entries(text: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(return type, name, [(param decl, param name)]) for each nxhal_api_t entry."""
    body = _strip_comments(text)
    start = body.index("typedef struct nxhal_api {")
    end = body.index("} nxhal_api_t;", start)
    entries = []
    for ret, name, params in _TABLE_ENTRY.findall(" ".join(body[start:end].split())):
        decls = [p.strip() for p in params.split(",") if p.strip() and p.strip() != "void"]
        parsed = [(d, re.findall(r"\w+", d)[-1]) for d in decls]
        entries.append((ret.strip(), name, parsed))
    return entries


def trampolines(text: str) -> tuple[str, str]:
    """(C definitions, cdef declarations) of one ``nxhal_call_<entry>`` per table entry."""
    defs, decls = [], []
    for ret, name, params in table_entries(text):
        sig = ", ".join(["const nxhal_api_t* api"] + [d for d, _ in params])
        args = ", ".join(n for _, n in params)
        ret_kw = "" if ret == "void" else "return "
        defs.append(f"static {ret} nxhal_call_{name}({sig}) {{ {ret_kw}api->{name}({args}); }}")
        decls.append(f"{ret} nxhal_call_{name}({sig});")
    return "\n".join(defs), "\n".join(decls)


# Hot-path helpers: descriptor structs built on the C stack instead of being
# allocated by cffi on every call (see bench/dispatch.py).
HOT_PATH_DEFS = r"""
static nxhal_status_t* nxhal_py_memory_stats(const nxhal_api_t* api, nxhal_device_t* device,
                                             uint64_t* out3) {
  nxhal_memory_stats_t stats;
  nxhal_status_t* status;
  stats.struct_size = sizeof stats;
  status = api->device_memory_stats(device, &stats);
  if (status == NULL) {
    out3[0] = stats.bytes_in_use;
    out3[1] = stats.peak_bytes_in_use;
    out3[2] = stats.bytes_limit;
  }
  return status;
}
static nxhal_status_t* nxhal_py_buffer_from_host(const nxhal_api_t* api, nxhal_device_t* device,
                                                 int32_t dtype, int64_t rank, const int64_t* dims,
                                                 const void* data, size_t size, uint32_t flags,
                                                 uintptr_t* out) {
  /* The handle comes back as an address: what nx_hal._fastpath's buffers
   * take, without a cffi pointer made and converted on every put. */
  nxhal_tensor_desc_t desc;
  nxhal_buffer_t* buffer = NULL;
  nxhal_status_t* status;
  desc.struct_size = sizeof desc;
  desc.dtype = (nxhal_dtype_t)dtype;
  desc.rank = rank;
  desc.dims = dims;
  status = api->buffer_from_host(device, &desc, data, size, flags, &buffer);
  *out = (uintptr_t)buffer;
  return status;
}
"""
HOT_PATH_DEFS += r"""
/* Buffer.to_numpy: the handle as the address nx_hal._fastpath holds. */
static nxhal_status_t* nxhal_py_buffer_to_host(const nxhal_api_t* api, uintptr_t buffer, void* dst,
                                               size_t size, nxhal_event_t** out_event) {
  return api->buffer_to_host((nxhal_buffer_t*)buffer, dst, size, out_event);
}
/* The destructor of a DLPack capsule we hand out: a consumer that takes the
 * tensor renames the capsule ("used_dltensor_versioned") and owns it; one
 * that never did leaves the name, and the tensor is released here. Only
 * limited-API calls, and none that can set an exception. */
static void nxhal_py_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    nxhal_dlpack_managed_tensor_t* tensor =
        (nxhal_dlpack_managed_tensor_t*)PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (tensor != NULL && tensor->deleter != NULL) tensor->deleter(tensor);
  }
}
static uintptr_t nxhal_py_capsule_destructor_address(void) {
  return (uintptr_t)&nxhal_py_capsule_destructor;
}
"""
HOT_PATH_DECLS = """
nxhal_status_t* nxhal_py_buffer_to_host(const nxhal_api_t* api, uintptr_t buffer, void* dst, size_t size,
    nxhal_event_t** out_event);
uintptr_t nxhal_py_capsule_destructor_address(void);
nxhal_status_t* nxhal_py_memory_stats(const nxhal_api_t* api, nxhal_device_t* device, uint64_t* out3);
nxhal_status_t* nxhal_py_buffer_from_host(const nxhal_api_t* api, nxhal_device_t* device, int32_t dtype,
    int64_t rank, const int64_t* dims, const void* data, size_t size, uint32_t flags, uintptr_t* out);
"""


def header_digest() -> str:
    digest = hashlib.sha256()
    for header in HEADERS:
        digest.update(header.read_bytes())
    return digest.hexdigest()


def make_ffi() -> FFI:
    api_header = HEADERS[0].read_text()
    tramp_defs, tramp_decls = trampolines(api_header)
    cdef = "\n".join(header_to_cdef(h.read_text()) for h in HEADERS)
    cdef += "\n" + tramp_decls + "\nconst char* nxhal_py_header_digest(void);\n"
    cdef += HOT_PATH_DECLS
    cdef += 'extern "Python" void nxhal_py_on_ready(nxhal_status_t* status, void* user_data);\n'
    ffi = FFI()
    ffi.cdef(cdef)
    source = (
        '#include "nx_hal/nx_hal.h"\n#include "nx_hal/nx_hal_loader.h"\n'
        + tramp_defs
        + HOT_PATH_DEFS
        + f'\nstatic const char* nxhal_py_header_digest(void) {{ return "{header_digest()}"; }}\n'
    )
    ffi.set_source(
        "nx_hal._nxhal_cffi",
        source,
        sources=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cabi").glob("*.c")),
        include_dirs=[str(INCLUDE.relative_to(ROOT))],
        extra_compile_args=["-std=c99", "-fvisibility=hidden", "-D_POSIX_C_SOURCE=200809L"],
        libraries=["dl", "pthread"],
        py_limited_api=True,
    )
    return ffi


ffi = make_ffi()

if __name__ == "__main__":
    ffi.compile(verbose=True)
