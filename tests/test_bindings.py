"""The cffi binding is generated from the headers, through the C
preprocessor and cffi's parser: these fail if the built extension and the
header drift apart, in content, constants or struct layout, or if the
generator takes in what is not ours or drops what it cannot read."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cffi import FFI, CDefError

from nx_hal import _ffi_build, native
from nx_hal.native import ffi, lib
from tests.cbuild import build_program

STRUCTS = [
    "nxhal_named_value_t", "nxhal_tensor_desc_t", "nxhal_dlpack_managed_tensor_t", "nxhal_plugin_info_t",
    "nxhal_device_info_t", "nxhal_memory_stats_t", "nxhal_buffer_info_t", "nxhal_program_t",
    "nxhal_io_info_t", "nxhal_blob_t", "nxhal_api_t", "nxhal_query_args_t",
]


def test_extension_built_from_current_header() -> None:
    assert native.header_digest() == _ffi_build.header_digest(), (
        "nx_hal/_nxhal_cffi was built from another version of include/nx_hal/*.h: reinstall nx_hal"
    )


def test_every_table_entry_has_a_trampoline() -> None:
    """One nxhal_call_<entry> per function-pointer field of nxhal_api_t, in
    the compiled extension, taking the table and then exactly the entry's
    parameters and returning what it returns."""
    fields = ffi.typeof("nxhal_api_t").fields
    assert [name for name, _ in fields[:3]] == ["struct_size", "abi_major", "abi_minor"]
    api_pointer = ffi.typeof("nxhal_api_t*")
    for name, field in fields[3:]:
        entry = field.type
        assert entry.kind == "function" and not entry.ellipsis, name
        trampoline = ffi.typeof(getattr(lib, f"nxhal_call_{name}"))
        assert trampoline.args == (api_pointer, *entry.args), name
        assert trampoline.result == entry.result, name
    trampolines = {n for n in dir(lib) if n.startswith("nxhal_call_")}
    assert trampolines == {f"nxhal_call_{name}" for name, _ in fields[3:]}


def test_table_in_order() -> None:
    """The header's X(...) lists, expanded by the C preprocessor, are what
    the struct is made of: the frozen prefix first, ABI 1.0's 30 entries after
    it, each with its parameters, qualifiers included (cffi's run-time types
    drop them; the trampolines must keep them)."""
    entries = _ffi_build.table_entries(_ffi_build.ffi)
    names = [name for name, _ in entries]
    fields = [name for name, _ in ffi.typeof("nxhal_api_t").fields]
    assert fields == ["struct_size", "abi_major", "abi_minor", *names]
    assert names[:3] == ["status_free", "status_code", "status_message"]
    v1_0 = names[3:]
    assert len(v1_0) == 30 and v1_0[0] == "plugin_info" and v1_0[-1] == "event_destroy"
    execute = dict(entries)["executable_execute"]
    assert execute.result.get_c_name() == "nxhal_status_t *"
    assert [arg.get_c_name() for arg in execute.args] == [
        "nxhal_executable_t *", "nxhal_buffer_t * const *", "size_t", "nxhal_buffer_t * *", "size_t",
        "nxhal_event_t * *"]
    assert dict(entries)["status_message"].result.get_c_name() == "char const *"


def _declarations(cdef: str) -> str:
    """`cdef` without its line markers (which name files, not declarations)."""
    return "\n".join(line for line in cdef.splitlines() if not line.startswith("#"))


def test_cdef_holds_only_our_headers() -> None:
    """Nothing from the system headers reaches the cdef (cffi knows size_t
    and the <stdint.h> types itself): no typedef of a standard type, no
    reserved (__-prefixed) name, and every name it declares is nx_hal's."""
    cdef = _ffi_build.header_cdef()
    text = _declarations(cdef)
    assert re.search(r"\b__\w+", text) is None
    for std in ("size_t", "ptrdiff_t", "int64_t", "uint64_t", "uintptr_t", "wchar_t"):
        assert re.search(rf"\b{std}\s*;", text) is None, std
    fresh = FFI()
    fresh.cdef(cdef)
    typedefs, structs, unions = fresh.list_types()
    assert typedefs and structs and not unions
    assert all(name.startswith("nxhal_") for name in typedefs + structs)
    assert all(name.startswith(("nxhal_", "NXHAL_")) for name in dir(lib))
    # The helpers Python calls, from nx_hal/_binding.h; not the destructor,
    # which takes a PyObject*.
    assert {"nxhal_py_memory_stats", "nxhal_py_buffer_from_host",
            "nxhal_py_capsule_destructor_address"} <= set(dir(lib))
    assert re.search(r"\bnxhal_py_capsule_destructor\b", text) is None and "PyObject" not in text


def test_static_asserts_stay_out_of_the_cdef() -> None:
    """nx_hal.h's build-time checks are left out under NXHAL_BINDINGS (and
    only there: test_cabi compiles them in every language)."""
    text = _declarations(_ffi_build.header_cdef())
    assert "NXHAL_STATIC_ASSERT" not in text and "static_assert" not in text.lower()
    assert "nxhal_api_t" in text


def test_integer_constants() -> None:
    """Object-like #defines with an integer literal reach the cdef; include
    guards, strings, expressions and function-like macros do not."""
    constants = _cdef_constants()
    assert {"NXHAL_ABI_VERSION_MAJOR", "NXHAL_ABI_VERSION_MINOR", "NXHAL_HOST_COPY",
            "NXHAL_HOST_ZERO_COPY", "NXHAL_WAIT_FOREVER", "NXHAL_DLPACK_FLAG_READ_ONLY"} <= set(constants)
    for excluded in ("NX_HAL_NX_HAL_H_", "NX_HAL_BINDING_H_", "NXHAL_QUERY_SYMBOL", "NXHAL_PLUGIN_PATH_ENV",
                     "NXHAL_STRUCT_SIZE", "NXHAL_API_1_0_SIZE", "NXHAL_API_ENTRIES", "NXHAL_BINDINGS"):
        assert excluded not in constants, excluded
    macros = {"A": "1", "B": "(-1)", "C": "0u", "D": "0x1F", "E": "", "F": '"text"', "G": "A + 1",
              "H": "sizeof(int)", "I": "(1"}
    assert _ffi_build.integer_constants(macros) == ["A", "B", "C", "D"]


def _cdef_constants() -> list[str]:
    return re.findall(r"^#define (\w+) \.\.\.$", _ffi_build.header_cdef(), re.M)


def test_constants_match_c_compiler(tmp_path: Path) -> None:
    """The binding's integer constants and enum values are the C compiler's."""
    names = _cdef_constants()
    typedefs, _, _ = ffi.list_types()
    for typedef in typedefs:
        if ffi.typeof(typedef).kind == "enum":
            names += ffi.typeof(typedef).elements.values()
    assert "NXHAL_ABI_VERSION_MAJOR" in names and "NXHAL_INVALID_PROGRAM" in names
    src = tmp_path / "constants.c"
    src.write_text('#include <stdio.h>\n#include "nx_hal/nx_hal_loader.h"\nint main(void) {\n'
                   + "".join(f'  printf("%lld\\n", (long long)({name}));\n' for name in names)
                   + "  return 0;\n}\n")
    exe = build_program("constants", [src], tmp_path)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    assert got == [getattr(lib, name) for name in names]


def _bad_header(tmp_path: Path, text: str) -> Path:
    header = tmp_path / "bad.h"
    header.write_text("#include <stddef.h>\n#include <stdint.h>\n" + text)
    return header


def test_header_errors_stop_the_build(tmp_path: Path) -> None:
    """Text the binding cannot take raises, naming where, instead of being
    dropped from the binding."""
    good = _bad_header(tmp_path, "typedef struct thing { size_t n; int64_t v; } thing_t;\n")
    fresh = FFI()
    fresh.cdef(_ffi_build.header_cdef([good], [tmp_path]))
    assert [name for name, _ in fresh.typeof("thing_t").fields] == ["n", "v"]

    # A C syntax error: cffi's parser (pycparser) refuses it, at the header's line.
    header = _bad_header(tmp_path, "\ntypedef struct thing { int a } thing_t;\n")
    with pytest.raises(CDefError, match=r"bad\.h:4"):
        FFI().cdef(_ffi_build.header_cdef([header], [tmp_path]))
    # A preprocessor error.
    for text in ('#include "missing.h"\n', "#error no\n"):
        header = _bad_header(tmp_path, text)
        with pytest.raises(_ffi_build.BindingError):
            _ffi_build.header_cdef([header], [tmp_path])
    # A directive that would change what C sees without cffi knowing.
    header = _bad_header(tmp_path, "#pragma pack(1)\ntypedef struct thing { char c; int64_t v; } thing_t;\n")
    with pytest.raises(_ffi_build.BindingError, match="pragma"):
        _ffi_build.header_cdef([header], [tmp_path])


def test_table_fields_must_be_entries(tmp_path: Path) -> None:
    """A field of nxhal_api_t after the first three that is not a function
    pointer stops the build instead of getting no trampoline."""
    table = ("typedef struct nxhal_api {{ size_t struct_size; uint32_t abi_major; uint32_t abi_minor;"
             " void (*status_free)(void* status); {} }} nxhal_api_t;\n")
    header = _bad_header(tmp_path, table.format("int (*ok)(const char** text);"))
    fresh = FFI()
    fresh.cdef(_ffi_build.header_cdef([header], [tmp_path]))
    defs, decls = _ffi_build.trampolines(fresh)
    assert "int nxhal_call_ok(const nxhal_api_t* api, char const * * a0)" in decls
    assert "{ return api->ok(a0); }" in defs and "{ api->status_free(a0); }" in defs
    header = _bad_header(tmp_path, table.format("int not_an_entry;"))
    fresh = FFI()
    fresh.cdef(_ffi_build.header_cdef([header], [tmp_path]))
    with pytest.raises(_ffi_build.BindingError, match="not_an_entry"):
        _ffi_build.trampolines(fresh)


def test_layout_matches_c_compiler(tmp_path: Path) -> None:
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "nx_hal/nx_hal.h"', "int main(void) {"]
    expected = []
    for struct in STRUCTS:
        lines.append(f'  printf("%zu\\n", sizeof({struct}));')
        expected.append(ffi.sizeof(struct))
        for field, _ in ffi.typeof(struct).fields:
            lines.append(f'  printf("%zu\\n", offsetof({struct}, {field}));')
            expected.append(ffi.offsetof(struct, field))
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = build_program("layout", [src], tmp_path)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    assert got == expected


def test_abi_constants() -> None:
    assert native.HOST_ABI == (lib.NXHAL_ABI_VERSION_MAJOR, lib.NXHAL_ABI_VERSION_MINOR) == (1, 2)
    assert lib.NXHAL_DTYPE_BOOL == 10 and lib.NXHAL_ABI_MISMATCH == 9 and lib.NXHAL_WAIT_FOREVER == -1
    assert lib.NXHAL_INVALID_PROGRAM == 11


def test_table_sizes_match_c_compiler(tmp_path: Path) -> None:
    """The frozen prefix and the 1.0 table end where the C header says; a
    table entry moved, added before event_destroy or dropped changes them."""
    src = tmp_path / "sizes.c"
    src.write_text('#include <stdio.h>\n#include "nx_hal/nx_hal.h"\n'
                   'int main(void) { printf("%zu %zu\\n", (size_t)NXHAL_API_PREFIX_SIZE, (size_t)NXHAL_API_1_0_SIZE);'
                   " return 0; }\n")
    exe = build_program("sizes", [src], tmp_path)
    prefix, v1_0 = (int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True,
                                                     check=True).stdout.split())
    pointer = ffi.sizeof("void*")
    assert prefix == ffi.offsetof("nxhal_api_t", "status_message") + pointer
    assert v1_0 == ffi.offsetof("nxhal_api_t", "event_destroy") + pointer
    # struct_size, two uint32 versions, three function pointers: frozen forever.
    assert prefix == ffi.sizeof("size_t") + 8 + 3 * pointer
    # ABI 1.0 has 30 entries after its prefix.
    assert (v1_0 - prefix) // pointer == 30
