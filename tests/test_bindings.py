"""The cffi binding is generated from the header: these fail if the built
extension and the header drift apart, in content or in struct layout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nx_hal import _ffi_build, native
from nx_hal.native import ffi, lib
from tests.cbuild import build_program, repo_root

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
    entries = _ffi_build.table_entries((repo_root() / "include/nx_hal/nx_hal.h").read_text())
    assert len(entries) == len(ffi.typeof("nxhal_api_t").fields) - 3  # minus size and version fields
    for _, name, _ in entries:
        assert hasattr(lib, f"nxhal_call_{name}"), name


def test_entry_lists_give_the_table_in_order() -> None:
    """The header's X(...) lists are what the struct is made of: the same
    names in the same order as the fields the C compiler laid out, the frozen
    prefix first and ABI 1.0's 30 entries after it."""
    lists = _ffi_build.entry_lists((repo_root() / "include/nx_hal/nx_hal.h").read_text())
    fields = [name for name, _ in ffi.typeof("nxhal_api_t").fields]
    prefix = [name for _, name, _ in lists["NXHAL_API_PREFIX_ENTRIES"]]
    v1_0 = [name for _, name, _ in lists["NXHAL_API_ENTRIES_1_0"]]
    assert prefix == ["status_free", "status_code", "status_message"]
    assert len(v1_0) == 30 and v1_0[0] == "plugin_info" and v1_0[-1] == "event_destroy"
    assert fields == ["struct_size", "abi_major", "abi_minor", *prefix, *v1_0]
    ret, name, params = lists["NXHAL_API_ENTRIES_1_0"][v1_0.index("executable_execute")]
    assert (ret, name) == ("nxhal_status_t*", "executable_execute")
    assert params[1] == ("nxhal_buffer_t* const* inputs", "inputs") and len(params) == 6


def test_entry_list_format_is_strict() -> None:
    """Text the parser does not understand stops the build instead of
    silently dropping an entry from the binding."""
    good = "#define NXHAL_API_ENTRIES_9_9(X, P) X(void, thing_free, (int* thing), 9, 9, P)\n"
    assert _ffi_build.entry_lists(good)["NXHAL_API_ENTRIES_9_9"] == [("void", "thing_free", [("int* thing", "thing")])]
    for bad in ("#define NXHAL_API_ENTRIES_9_9(X, P) X(void, thing_free, int* thing, 9, 9, P)\n",
                "#define NXHAL_API_ENTRIES_9_9(X, P) Y(void, thing_free, (int* thing), 9, 9, P)\n"):
        with pytest.raises(ValueError):
            _ffi_build.entry_lists(bad)


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
