"""Builds the cffi extension ``nx_hal._nxhal_cffi`` from the public headers.

One binding surface, made by real C tools from the headers:

1. The C preprocessor (the compiler Python's extensions are built with) runs
   on a source that includes ``include/nx_hal/nx_hal.h``,
   ``include/nx_hal/nx_hal_loader.h`` and ``nx_hal/_binding.h``, with
   ``NXHAL_BINDINGS`` defined (the header leaves its build-time assertions
   out for it) and GCC attributes defined away. The header's X-macro lists of
   table entries are expanded there, as in any C program. Of its output
   (``-dD``: with the macro definitions), only what the line markers place in
   those headers is kept: the system headers' declarations never reach the
   cdef, cffi knows the standard types itself.
2. cffi's ``cdef`` parses that text with pycparser, plus the headers'
   object-like ``#define``\\ s whose value is an integer literal, declared as
   ``#define NAME ...`` so that the C compiler supplies the value.
3. From cffi's parse of ``nxhal_api_t``, one ``nxhal_call_<entry>`` C
   trampoline per function-pointer field, in table order (cffi's API mode
   calls a compiled function directly, about twice as fast as calling a
   function pointer through libffi).

The hand-written C (hot-path helpers, the DLPack capsule destructor) is in
``nx_hal/_binding.c``; the extension's source only includes files and adds
the generated trampolines and ``nxhal_py_header_digest``. The loader and
helper sources from ``cabi/`` are compiled into the same extension, so Python
and C programs negotiate and validate plugins with the same code.

setup.py builds it (``cffi_modules``); to build it in place, from the
repository root: ``python -P nx_hal/_ffi_build.py`` (``-P``: otherwise the
script's directory comes first on sys.path, and nx_hal/selectors.py hides the
standard library's).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

from cffi import FFI, model

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
PACKAGE = ROOT / "nx_hal"
HEADERS = [INCLUDE / "nx_hal" / "nx_hal.h", INCLUDE / "nx_hal" / "nx_hal_loader.h"]
BINDING_HEADER = PACKAGE / "_binding.h"
BINDING_SOURCE = PACKAGE / "_binding.c"

# The leading fields of nxhal_api_t that are not table entries.
API_HEADER_FIELDS = ("struct_size", "abi_major", "abi_minor")

# cffi-only syntax, not C: the callback nx_hal/event.py defines.
PYTHON_CALLBACKS = 'extern "Python" void nxhal_py_on_ready(nxhal_status_t* status, void* user_data);\n'

# A line marker of `cc -E`: `# 12 "file" flags` (GCC, Clang) or `#line 12 "file"`.
_LINE_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')
# A `-dD` macro line: `#define NAME value`, or `#define NAME(args) value`.
_DEFINE = re.compile(r"#\s*define\s+(\w+)(\()?\s*(.*?)\s*$")
_UNDEF = re.compile(r"#\s*undef\s+(\w+)\s*$")
# An integer literal as a whole #define value: 1, 0u, (-1), 0x10.
_LITERAL = r"-?\s*(?:0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*"
_INTEGER = re.compile(rf"{_LITERAL}|\(\s*{_LITERAL}\s*\)")


class BindingError(RuntimeError):
    """The headers cannot be made into the binding as they are."""


def compiler() -> list[str]:
    """The C compiler Python's extensions are built with: $CC, else the
    interpreter's configured CC, else ``cc``."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(str(command))


def preprocess(headers: Sequence[Path], include_dirs: Sequence[Path],
               own: Iterable[Path] | None = None) -> tuple[str, dict[str, str]]:
    """The declarations of `headers` after the C preprocessor, and the
    object-like macros they define (name: value), both only from the files
    in `own` (default: every header in the directories of `headers`), in
    order. The declarations keep line markers of those files, so cffi's
    errors name the header's line. Raises BindingError with the compiler's
    message when the preprocessor fails."""
    if own is None:
        own = [p for d in {h.resolve().parent for h in headers} for p in d.glob("*.h")]
    own_files = {p.resolve() for p in own}
    source = "".join(f'#include "{h.resolve()}"\n' for h in headers)
    command = [*compiler(), "-E", "-dD", "-std=c99", "-DNXHAL_BINDINGS", "-D__attribute__(x)=",
               *(f"-I{d.resolve()}" for d in include_dirs), "-x", "c", "-"]
    result = subprocess.run(command, input=source, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        raise BindingError(f"{shlex.join(command)} failed:\n{result.stderr}")
    lines: list[str] = []
    macros: dict[str, str] = {}
    in_own = False
    for line in result.stdout.splitlines():
        stripped = line.strip()
        marker = _LINE_MARKER.match(stripped)
        if marker:
            name = re.sub(r"\\(.)", r"\1", marker.group(2))
            path = (ROOT / name).resolve()
            in_own = not name.startswith("<") and path in own_files
            if in_own:  # cffi's errors then name the header's file and line
                lines.append(f'# {marker.group(1)} "{_shown(path)}"')
            continue
        if not in_own:
            continue
        if not stripped.startswith("#"):
            lines.append(line)
            continue
        lines.append("")  # the directive's line, so the lines after it keep their numbers
        if define := _DEFINE.match(stripped):
            if define.group(2) is None:  # function-like macros are expanded already
                macros[define.group(1)] = define.group(3)
        elif undef := _UNDEF.match(stripped):
            macros.pop(undef.group(1), None)
        else:
            raise BindingError(f"a directive cffi cannot take in the headers: {stripped}")
    return "\n".join(lines) + "\n", macros


def _shown(path: Path) -> str:
    """`path` as error messages show it: relative to the repository if in it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def integer_constants(macros: dict[str, str]) -> list[str]:
    """The macros whose value is an integer literal: not include guards
    (empty), strings or expressions."""
    return [name for name, value in macros.items() if _INTEGER.fullmatch(value)]


def header_cdef(headers: Sequence[Path] = (*HEADERS, BINDING_HEADER),
                include_dirs: Sequence[Path] = (INCLUDE, PACKAGE)) -> str:
    """The cdef of `headers`: their declarations after the preprocessor and
    their integer constants, valued by the C compiler when cffi builds."""
    declarations, macros = preprocess(headers, include_dirs)
    constants = "".join(f"#define {name} ...\n" for name in integer_constants(macros))
    return constants + declarations


def _table_type(ffi: FFI) -> model.StructType:
    # cffi's own parse of the struct (cffi.model), which keeps the qualifiers
    # that ffi.typeof()'s run-time types drop: a trampoline must take
    # `const char** out_text` to pass it on, not `char**`.
    declaration = ffi._parser._declarations.get("typedef nxhal_api_t")
    if declaration is None or not isinstance(declaration[0], model.StructType):
        raise BindingError("the cdef declares no struct nxhal_api_t")
    struct: model.StructType = declaration[0]
    if [name for name, _ in ffi.typeof("nxhal_api_t").fields] != list(struct.fldnames):
        raise BindingError("cffi's parse and its run-time type of nxhal_api_t disagree")
    return struct


def table_entries(ffi: FFI) -> list[tuple[str, model.FunctionPtrType]]:
    """(name, function type) of each nxhal_api_t entry, in table order: every
    field after the three that are not entries, each a function pointer."""
    struct = _table_type(ffi)
    names, first = list(struct.fldnames), len(API_HEADER_FIELDS)
    if tuple(names[:first]) != API_HEADER_FIELDS:
        raise BindingError(f"nxhal_api_t does not start with {', '.join(API_HEADER_FIELDS)}: {names[:first]}")
    entries = []
    for name, ftype in zip(names[first:], struct.fldtypes[first:], strict=True):
        if not isinstance(ftype, model.FunctionPtrType) or ftype.ellipsis:
            raise BindingError(f"nxhal_api_t.{name} is not a table entry (a function pointer): "
                               f"{ftype.get_c_name(f' {name}')}")
        entries.append((name, ftype))
    return entries


def trampolines(ffi: FFI) -> tuple[str, str]:
    """(C definitions, cdef declarations) of one ``nxhal_call_<entry>`` per
    table entry of `ffi`'s nxhal_api_t: the table pointer, then the entry's
    parameters."""
    defs, decls = [], []
    for name, ftype in table_entries(ffi):
        params = [f"a{i}" for i in range(len(ftype.args))]
        declared = ", ".join(["const nxhal_api_t* api"]
                             + [arg.get_c_name(f" {param}") for arg, param in zip(ftype.args, params, strict=True)])
        signature = ftype.result.get_c_name(f" nxhal_call_{name}({declared})")
        returns = "" if isinstance(ftype.result, model.VoidType) else "return "
        defs.append(f"static {signature} {{ {returns}api->{name}({', '.join(params)}); }}")
        decls.append(f"{signature};")
    return "\n".join(defs) + "\n", "\n".join(decls) + "\n"


def header_digest() -> str:
    digest = hashlib.sha256()
    for header in HEADERS:
        digest.update(header.read_bytes())
    return digest.hexdigest()


def make_ffi() -> FFI:
    ffi = FFI()
    ffi.cdef(header_cdef())
    tramp_defs, tramp_decls = trampolines(ffi)
    ffi.cdef(tramp_decls + "const char* nxhal_py_header_digest(void);\n" + PYTHON_CALLBACKS)
    source = (
        '#include "nx_hal/nx_hal.h"\n#include "nx_hal/nx_hal_loader.h"\n'
        f'#include "{BINDING_SOURCE.name}"\n'
        + tramp_defs
        + f'static const char* nxhal_py_header_digest(void) {{ return "{header_digest()}"; }}\n'
    )
    ffi.set_source(
        "nx_hal._nxhal_cffi",
        source,
        sources=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cabi").glob("*.c")),
        include_dirs=[str(d.relative_to(ROOT)) for d in (INCLUDE, PACKAGE)],
        depends=[str(p.relative_to(ROOT)) for p in (*HEADERS, BINDING_HEADER, BINDING_SOURCE)],
        extra_compile_args=["-std=c99", "-fvisibility=hidden", "-D_POSIX_C_SOURCE=200809L"],
        libraries=["dl", "pthread"],
        py_limited_api=True,
    )
    return ffi


ffi = make_ffi()

if __name__ == "__main__":
    ffi.compile(verbose=True)
