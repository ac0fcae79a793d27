"""The cffi binding is generated from the header: these fail if the built
extension and the header drift apart, in content or in struct layout."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
    assert native.HOST_ABI == (lib.NXHAL_ABI_VERSION_MAJOR, lib.NXHAL_ABI_VERSION_MINOR) == (1, 1)
    assert lib.NXHAL_API_1_0_SIZE if hasattr(lib, "NXHAL_API_1_0_SIZE") else True
    assert lib.NXHAL_DTYPE_BOOL == 10 and lib.NXHAL_ABI_MISMATCH == 9 and lib.NXHAL_WAIT_FOREVER == -1
