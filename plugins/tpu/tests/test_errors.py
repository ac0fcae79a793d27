"""Bad input gives a clear status, never an abort (the driver's conftest
asserts no run dies from a signal)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import INVALID_PROGRAM, PROGRAMS, Driver
from programs import run_program

X4 = np.arange(4, dtype=np.float32)


@pytest.fixture()
def cpu(cpu_backend: Path) -> dict[str, str]:
    return {"backend_paths": f"s:cpu={cpu_backend}"}


def test_malformed_mlir_is_invalid_argument_with_pjrt_message(
        run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "malformed.mlir", X4, options=cpu)
    assert out.returncode == 2
    assert out.code == INVALID_PROGRAM
    assert "StableHLO compile failed" in out.message
    assert "error: expected" in out.message  # PJRT's parser speaking


def test_garbage_bytes_are_invalid_argument(run: Driver, tmp_path: Path,
                                            cpu: dict[str, str]) -> None:
    junk = tmp_path / "junk.mlir"
    junk.write_bytes(b"\x00\x01 this is not mlir func.func @main(")
    out = run_program(run, tmp_path, junk, options=cpu)
    assert out.code == INVALID_PROGRAM, out.stdout


def test_truncated_bytecode_is_invalid_argument(run: Driver, tmp_path: Path,
                                                cpu: dict[str, str]) -> None:
    cut = tmp_path / "cut.mlirbc"
    cut.write_bytes((PROGRAMS / "matmul_sum.mlirbc").read_bytes()[:300])
    out = run_program(run, tmp_path, cut, options=cpu)
    assert out.code == INVALID_PROGRAM, out.stdout
    assert "bytecode" in out.message


def test_no_main_is_invalid_argument(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "no_main.mlir", X4, options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "@main" in out.message


def test_wrong_input_count(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "add.mlir", X4, options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "expected 2 inputs, got 1" in out.message


def test_wrong_input_shape(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "add.mlir", X4.reshape(2, 2), X4, options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "input 0 ('x') expects f32[4], got f32[2,2]" in out.message


def test_wrong_input_dtype(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "add.mlir", X4, X4.astype(np.int32), options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "input 1 ('y') expects f32[4], got i32[4]" in out.message


def test_mistyped_create_option_never_reaches_pjrt(run: Driver, cpu: dict[str, str]) -> None:
    # XLA CPU aborts on a string cpu_device_count; we must refuse it first.
    out = run("devices", options={**cpu, "cpu_device_count": "s:two"})
    assert out.code == "INVALID_ARGUMENT"
    assert "cpu_device_count" in out.message and "int64" in out.message


def test_unknown_create_option_is_an_error(run: Driver, cpu: dict[str, str]) -> None:
    out = run("devices", options={**cpu, "cpu_device_cont": "i:2"})
    assert out.code == "INVALID_ARGUMENT"
    assert "unknown option 'cpu_device_cont'" in out.message
    assert "cpu_device_count" in out.message  # the known ones are listed


def test_out_of_range_create_option(run: Driver, cpu: dict[str, str]) -> None:
    out = run("devices", options={**cpu, "cpu_device_count": "i:0"})
    assert out.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("cpu_device_count", "i:0", "option 'cpu_device_count' must be from 1 to 1024, got 0"),
    ("cpu_device_count", "i:1025", "option 'cpu_device_count' must be from 1 to 1024, got 1025"),
    ("memory_limit_bytes", "i:-1", "option 'memory_limit_bytes' must be from 0 to "),
    ("gpu_memory_fraction", "d:1.5", "option 'gpu_memory_fraction' must be from 0 to 1, got 1.5"),
    ("gpu_memory_fraction", "d:nan", "option 'gpu_memory_fraction' must be from 0 to 1, got nan"),
    # The range is inclusive; 0 is refused by its own check.
    ("gpu_memory_fraction", "d:0", "option 'gpu_memory_fraction' must be in (0, 1], got 0"),
])
def test_create_option_ranges(run: Driver, cpu: dict[str, str], name: str, value: str,
                              message: str) -> None:
    out = run("devices", options={**cpu, name: value})
    assert out.code == "INVALID_ARGUMENT"
    assert message in out.message


def test_in_range_create_options_are_accepted(run: Driver, cpu: dict[str, str]) -> None:
    # Bounds included; the gpu_* options do not reach XLA CPU (family cpu).
    opts = {"cpu_device_count": "i:1", "memory_limit_bytes": "i:0", "gpu_memory_fraction": "d:1"}
    out = run("devices", options={**cpu, **opts})
    assert out.returncode == 0, out.stdout
    assert out.values("COUNT") == ["1"]


def test_mistyped_compile_option(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "add.mlir", X4, X4, flags=("--copt", "num_replicas=s:1"),
                      options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "num_replicas" in out.message


def test_partitions_are_refused_not_sent(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "add.mlir", X4, X4, flags=("--copt", "num_partitions=i:2"),
                      options=cpu)
    assert out.code == "UNIMPLEMENTED"
    # Replicas are supported (test_replicas.py), but not more than the client's devices.
    out = run_program(run, tmp_path, "add.mlir", X4, X4, flags=("--copt", "num_replicas=i:99"),
                      options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    ok = run_program(run, tmp_path, "add.mlir", X4, X4, flags=("--copt", "num_replicas=i:1"),
                     options=cpu)
    assert ok.returncode == 0, ok.stdout


def _saved_blob(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> bytes:
    blob = tmp_path / "add.blob"
    out = run_program(run, tmp_path, "add.mlir", X4, X4, flags=("--save", str(blob)), options=cpu)
    assert out.returncode == 0, out.stdout
    return blob.read_bytes()


def test_blob_with_another_xla_key_is_refused_before_pjrt(
        run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    data = _saved_blob(run, tmp_path, cpu)
    key_start = data.index(b"platform=")
    stablehlo = data.index(b"stablehlo=", key_start)
    # Same length, another StableHLO version: PJRT would be handed foreign bytes.
    tampered = data[:stablehlo + 10] + b"9" + data[stablehlo + 11:]
    blob = tmp_path / "other.blob"
    blob.write_bytes(tampered)
    out = run_program(run, tmp_path, "-", X4, X4, flags=("--load", str(blob)), options=cpu)
    assert out.code == "FAILED_PRECONDITION"
    assert "built for 'platform=cpu" in out.message and "this device is" in out.message


def test_blob_that_is_not_ours(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    blob = tmp_path / "junk.blob"
    blob.write_bytes(b"\x7fELF" + bytes(200))
    out = run_program(run, tmp_path, "-", X4, X4, flags=("--load", str(blob)), options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "not a serialized nx_hal TPU executable" in out.message


def test_truncated_blob(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    data = _saved_blob(run, tmp_path, cpu)
    blob = tmp_path / "short.blob"
    blob.write_bytes(data[:-100])
    out = run_program(run, tmp_path, "-", X4, X4, flags=("--load", str(blob)), options=cpu)
    assert out.code == "INVALID_ARGUMENT"
    assert "truncated" in out.message


def test_no_backend_at_all_is_unavailable(run: Driver, tmp_path: Path) -> None:
    out = run("devices", options={"backend_paths": f"s:cpu={tmp_path / 'missing.so'}"})
    assert out.code == "UNAVAILABLE"
    assert "missing.so" in out.message and "cannot load" in out.message


def test_not_a_pjrt_plugin(run: Driver, plugin_library: Path) -> None:
    # Our own library is a fine shared object but has no GetPjrtApi.
    out = run("devices", options={"library_path": f"s:{plugin_library}"})
    assert out.code == "UNAVAILABLE"
    assert "no GetPjrtApi" in out.message
