"""Builds the cffi extension ``nx_hal._nxhal_cffi`` from the public headers.

The header is the one source of truth: the cdef is derived from it, and so
are the C trampolines through which Python calls each entry of the plugin
table (cffi's API mode calls a compiled function directly, about twice as fast
as calling a function pointer through libffi). Both come from the header's
lists of table entries, its ``X(return_type, name, (params), since_major,
since_minor, P)`` lines, parsed here rather than run through a C preprocessor
so that no system header reaches the cdef. The loader and helper sources
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
# `#define NXHAL_API_..._ENTRIES(X, P) ...`: one of the header's lists of table entries.
_ENTRY_LIST = re.compile(r"#\s*define\s+(NXHAL_API_\w*ENTRIES\w*)\(\s*X\s*,\s*P\s*\)(.*)")
_LIST_REFERENCE = re.compile(r"(NXHAL_API_\w*ENTRIES\w*)\(\s*X\s*,\s*P\s*\)")
# A struct's fields written as a list's expansion: `  NXHAL_API_ENTRIES(NXHAL_API_FIELD, ~)`.
_FIELD_EXPANSION = re.compile(r"^\s*(NXHAL_API_\w*ENTRIES\w*)\(\s*NXHAL_API_FIELD\s*,[^)]*\)\s*$")
_STATIC_ASSERT = re.compile(r"NXHAL_STATIC_ASSERT\([^;]*\);")

Entry = tuple[str, str, list[tuple[str, str]]]


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside parentheses, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _closing_paren(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced parentheses in: {text[open_at:open_at + 80]}")


def _parse_entry(args: str) -> Entry:
    """One `X(return_type, name, (params), since_major, since_minor, P)`'s arguments."""
    parts = _split_top_level(args)
    if len(parts) != 6 or not (parts[2].startswith("(") and parts[2].endswith(")")):
        raise ValueError(f"not X(return_type, name, (params), major, minor, P): X({args})")
    ret, name, params = " ".join(parts[0].split()), parts[1], parts[2][1:-1]
    decls = [" ".join(p.split()) for p in _split_top_level(params) if p and p != "void"]
    return ret, name, [(d, re.findall(r"\w+", d)[-1]) for d in decls]


def entry_lists(text: str) -> dict[str, list[Entry]]:
    """Every `NXHAL_API_*ENTRIES*(X, P)` list the header defines, by name, with
    the lists it names expanded in place, in order."""
    body = _strip_comments(text).replace("\\\n", " ")
    raw: dict[str, list[Entry | str]] = {}
    for line in body.splitlines():
        match = _ENTRY_LIST.match(line.strip())
        if not match:
            continue
        items: list[Entry | str] = []
        rest, pos = match.group(2), 0
        while pos < len(rest):
            if rest[pos].isspace():
                pos += 1
            elif rest.startswith("X(", pos):
                end = _closing_paren(rest, pos + 1)
                items.append(_parse_entry(rest[pos + 2:end]))
                pos = end + 1
            elif ref := _LIST_REFERENCE.match(rest, pos):
                items.append(ref.group(1))
                pos = ref.end()
            else:  # the format is strict so that this parse can be
                raise ValueError(f"{match.group(1)}: unexpected text: {rest[pos:pos + 80]}")
        raw[match.group(1)] = items

    def expand(name: str) -> list[Entry]:
        out: list[Entry] = []
        for item in raw[name]:
            out.extend(expand(item) if isinstance(item, str) else [item])
        return out

    return {name: expand(name) for name in raw}


def _fields(entries: list[Entry]) -> list[str]:
    return [f"  {ret} (*{name})({', '.join(d for d, _ in params)});" for ret, name, params in entries]


def header_to_cdef(text: str) -> str:
    """C declarations cffi accepts: integer #defines kept, the rest of the
    preprocessor and C++-only parts dropped, struct fields written as an entry
    list's expansion written out, build-time assertions dropped."""
    lists = entry_lists(text)
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
        expansion = _FIELD_EXPANSION.match(line)
        if expansion:
            out.extend(_fields(lists[expansion.group(1)]))
            continue
        out.append(line)
    return _STATIC_ASSERT.sub("", _strip_comments("\n".join(out)))


def table_entries(text: str) -> list[Entry]:
    """(return type, name, [(param decl, param name)]) for each nxhal_api_t
    entry, in table order: the frozen prefix's, then every version's."""
    lists = entry_lists(text)
    return lists["NXHAL_API_PREFIX_ENTRIES"] + lists["NXHAL_API_ENTRIES"]


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
