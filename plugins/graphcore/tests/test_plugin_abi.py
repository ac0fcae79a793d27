"""The plugin's ABI surface: negotiation, info, NULL safety, exports, and
the forwarding to a backend (driven with a host-memory stand-in backend, not
Poplar: these tests check the frontend's checks, buffers and serialization)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import Build, driver_argv, run_driver

ENTRY_POINTS = [
    "plugin_info", "client_create", "client_create_null_options", "client_diagnostics",
    "client_device_count", "client_device", "device_info", "device_attribute_count",
    "device_attribute", "device_memory_stats", "device_set_memory_limit", "buffer_create",
    "buffer_from_host", "buffer_to_host", "buffer_info", "buffer_to_dlpack",
    "buffer_from_dlpack", "executable_compile", "executable_io_count", "executable_io_info",
    "executable_execute", "executable_serialize", "executable_deserialize", "event_is_ready",
    "event_await", "event_on_ready",
]


def _header_abi() -> str:
    """The ABI version of the header the plugin was built against."""
    text = (Path(__file__).resolve().parents[3] / "include" / "nx_hal" / "nx_hal.h").read_text()
    found = [re.search(rf"#define NXHAL_ABI_VERSION_{part} (\d+)", text) for part in ("MAJOR", "MINOR")]
    assert all(found), "nx_hal.h declares no ABI version"
    return ".".join(m.group(1) for m in found if m)


def test_negotiates_the_header_abi_and_reports_itself(build: Build) -> None:
    out = run_driver(build, build.library, "info")
    abi = _header_abi()
    assert out["negotiated.abi"] == abi  # the loader's negotiation
    assert out["api.abi"] == abi
    assert (out["name"], out["vendor"], out["abi"]) == ("graphcore", "Graphcore", abi)
    assert out["plugin_version"] == "0.1.0"
    assert out["sdk_version"] == ""  # no SDK was found when it was built


@pytest.mark.parametrize("library", ["library", "testhooks"])
def test_every_entry_refuses_null_without_crashing(build: Build, library: str) -> None:
    out = run_driver(build, getattr(build, library), "nulls")
    assert out["survived"] == "1"
    for entry in ENTRY_POINTS:
        assert out[f"{entry}.status"] == "INVALID_ARGUMENT", entry
        assert out[f"{entry}.message"], entry


def test_exports_only_nxhal_query(build: Build) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    text = subprocess.run([nm, "-D", "--defined-only", str(build.library)], capture_output=True,
                          text=True, check=True).stdout
    symbols = sorted(line.split()[-1] for line in text.splitlines() if line.strip())
    assert symbols == ["nxhal_query"]


def test_library_does_not_link_poplar(build: Build) -> None:
    """The always-built library must load where no SDK exists."""
    text = subprocess.run(["ldd", str(build.library)], capture_output=True, text=True).stdout
    assert "poplar" not in text and "popart" not in text and "stdc++" not in text


def fake_run(build: Build, program: str, *options: str) -> dict[str, str]:
    return run_driver(build, build.testhooks, "run", program, *options,
                      env={"NXHAL_GRAPHCORE_TEST_BACKEND": str(build.fake_backend)})


def values(text: str) -> np.ndarray:
    return np.array([float(v) for v in text.split(",")], dtype=np.float32)


def test_forwarding_executes_and_matches_numpy(build: Build) -> None:
    out = fake_run(build, "add 1.5 f32 2,3")
    assert out["compile.status"] == "OK"
    assert (out["inputs"], out["input0.name"], out["input0.rank"]) == ("1", "x", "2")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(values(out["y"]), (x + np.float32(1.5)).ravel())
    assert out["execute.status"] == "OK" and out["await.status"] == "OK"
    # x and y staged: 2 x 6 float32.
    assert out["bytes_in_use"] == str(2 * 6 * 4)


def test_dlpack_export_import_round_trip(build: Build) -> None:
    out = fake_run(build, "add 0.25 f32 2,3")
    assert (out["dlpack.ndim"], out["dlpack.code"], out["dlpack.bits"], out["dlpack.device"]) == (
        "2", "2", "32", "1")  # kDLFloat, 32 bits, kDLCPU
    expected = np.arange(6, dtype=np.float32) + np.float32(0.25)
    np.testing.assert_array_equal(values(out["dlpack_back"]), expected)
    assert out["from_dlpack_strided.status"] == "INVALID_ARGUMENT"
    assert "strided" in out["from_dlpack_strided.message"]


def test_forwarding_refuses_bad_calls_by_name(build: Build) -> None:
    out = fake_run(build, "add 1 f32 2,3")
    assert out["compile_bad_format.message"] == (
        "graphcore: program format 'tflite' is not accepted (accepted: onnx, popef)")
    assert out["execute_wrong_count.message"] == "graphcore: executable takes 1 inputs, got 0"
    assert out["execute_wrong_shape.message"] == "graphcore: input 0 'x' must have rank 2, got 1"
    assert out["io_info_out_of_range.status"] == "INVALID_ARGUMENT"
    assert out["buffer_create.status"] == "UNIMPLEMENTED"
    assert "allocating IPU memory outside a program is not supported" in out["buffer_create.message"]
    assert out["over_limit.status"] == "RESOURCE_EXHAUSTED"


def test_serialize_round_trip_and_compat_key(build: Build) -> None:
    out = fake_run(build, "add -2 f32 4")
    np.testing.assert_array_equal(values(out["y2"]), np.arange(4, dtype=np.float32) - 2)
    assert out["deserialize.status"] == "OK"
    assert out["deserialize_other_key.status"] == "FAILED_PRECONDITION"
    assert out["deserialize_other_key.message"] == (
        "graphcore: executable was compiled for 'Graphcore:fake-0.0:ipu2:1ipu' but this device "
        "is 'graphcore:fake-0.0:ipu2:1ipu'")
    assert out["deserialize_truncated.status"] == "INVALID_ARGUMENT"
    assert out["deserialize_foreign.message"].startswith(
        "graphcore: these 21 bytes are not a serialized nx_hal Graphcore executable")


@pytest.mark.parametrize(
    ("options", "settings"),
    [
        ((), "f16=0 amp=0 half=0"),  # the SDK's defaults
        (("s:precision=float16", "d:available_memory_proportion=0.3"), "f16=1 amp=0.3 half=0"),
        (("s:precision=float16", "Cs:precision=float32", "Cb:half_partials=1"),
         "f16=0 amp=0 half=1"),  # compile options override the client's
        (("b:half_partials=1", "Cd:available_memory_proportion=0.75"), "f16=0 amp=0.75 half=1"),
    ],
)
def test_compile_settings_merge_client_and_compile_options(
        build: Build, options: tuple[str, ...], settings: str) -> None:
    out = fake_run(build, "add 1 f32 2", *options)
    assert out["compile.status"] == "OK", out
    assert out["blob.magic"] == "NXHALGC2"
    assert out["blob.key"] == "graphcore:fake-0.0:ipu2:1ipu"
    assert out["blob.payload"] == f"add 1 f32 2 # {settings}"


def test_backend_compile_error_passes_through(build: Build) -> None:
    out = fake_run(build, "mul 2 f32 4")
    assert out["compile.status"] == "INVALID_ARGUMENT"
    assert out["compile.message"].startswith("fake backend: cannot parse program")


def test_out_of_tile_memory_is_resource_exhausted(build: Build) -> None:
    """The real backend maps popart::memory_allocation_err (and Poplar's
    graph_memory_allocation_error) to RESOURCE_EXHAUSTED; the frontend must
    pass that code and message on unchanged."""
    out = fake_run(build, "oom")
    assert out["compile.status"] == "RESOURCE_EXHAUSTED"
    assert out["compile.message"].startswith("graphcore: compile: out of IPU tile memory: ")


def test_unserializable_executable_runs_but_does_not_serialize(build: Build) -> None:
    """ONNX on the IPU Model runs through a PopART session and has no PopEF
    to save: serialize is UNIMPLEMENTED, the rest works."""
    out = fake_run(build, "unserializable add 1 f32 3")
    assert out["compile.status"] == "OK", out
    np.testing.assert_array_equal(values(out["y"]), np.arange(3, dtype=np.float32) + 1)
    assert out["serialize.status"] == "UNIMPLEMENTED"
    assert "cannot be serialized" in out["serialize.message"]


def test_ipu_model_device_attributes(build: Build, tmp_path: Path) -> None:
    out = run_driver(build, build.testhooks, "create", "b:ipu_model=1", "i:num_ipus=4",
                     "s:precision=float16",
                     env={"NXHAL_GRAPHCORE_TEST_BACKEND": str(build.fake_backend)})
    assert out["create.status"] == "OK"
    assert out["device0.kind"] == "5"  # NXHAL_DEVICE_IPU
    assert out["device0.attr.num_ipus"] == "4"
    assert out["device0.attr.ipu_model"] == "1"
    assert out["device0.attr.precision"] == "float16"
    assert out["device0.compute_units"] == str(4 * 1472)
    assert out["device0.memory_bytes"] == str(4 * 1472 * 638976)
    assert (out["device0.format0"], out["device0.format1"]) == ("onnx", "popef")
    assert out["device_out_of_range.status"] == "INVALID_ARGUMENT"


def test_threads_share_clients_and_executables(build: Build) -> None:
    """8 threads each create a client and run their own and one shared executable."""
    out = run_driver(build, build.testhooks, "threads", "8", "200",
                     env={"NXHAL_GRAPHCORE_TEST_BACKEND": str(build.fake_backend)})
    assert (out["threads"], out["failures"]) == ("8", "0")
    # Every staging buffer of the shared device was released again.
    assert out["shared.bytes_in_use"] == "0"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("memcheck", ("run", "add 1 f32 2,3")),
        ("memcheck", ("nulls",)),
        ("memcheck", ("create", "i:num_ipus=3")),
        ("helgrind", ("threads", "4", "10")),
    ],
)
def test_no_memory_errors_leaks_or_races(build: Build, tool: str, args: tuple[str, ...]) -> None:
    extra = (["--leak-check=full", "--errors-for-leak-kinds=definite"] if tool == "memcheck"
             else [])
    env = dict(os.environ, NXHAL_GRAPHCORE_TEST_BACKEND=str(build.fake_backend))
    proc = subprocess.run(
        ["valgrind", f"--tool={tool}", "-q", "--error-exitcode=9", *extra,
         *driver_argv(build, build.testhooks, *args)],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
