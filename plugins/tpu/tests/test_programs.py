"""StableHLO programs on XLA CPU through the nx_hal ABI, against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import PROGRAMS, Driver
from programs import results, run_program

RNG = np.random.default_rng(1234)


@pytest.fixture()
def cpu(cpu_backend: Path) -> dict[str, str]:
    return {"backend_paths": f"s:cpu={cpu_backend}"}


def test_add_matches_numpy(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    x = np.array([1.5, -2.0, 3.25, 4.0], np.float32)
    y = np.array([10.0, 20.0, -30.5, 0.125], np.float32)
    out = run_program(run, tmp_path, "add.mlir", x, y, options=cpu)
    assert out.returncode == 0, out.stdout
    (z,) = results(out)
    assert z.dtype == np.float32 and z.shape == (4,)
    np.testing.assert_array_equal(z, x + y)
    assert out.values("IN") == ["0 x f32 4", "1 y f32 4"]
    assert out.values("OUT") == ["0 output0 f32 4"]


def test_matmul_matches_numpy(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 4)).astype(np.float32)
    out = run_program(run, tmp_path, "matmul.mlir", a, b, options=cpu)
    assert out.returncode == 0, out.stdout
    (c,) = results(out)
    assert c.shape == (8, 4)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _mlp_inputs() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(99)  # fixed per call: the ReLU check below depends on it
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w1 = rng.standard_normal((3, 5)).astype(np.float32)
    b1 = rng.standard_normal(5).astype(np.float32)
    w2 = rng.standard_normal((5, 2)).astype(np.float32)
    b2 = rng.standard_normal(2).astype(np.float32)
    return x, w1, b1, w2, b2


def _mlp_numpy(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray,
               b2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(x @ w1 + b1, 0.0)
    return h @ w2 + b2, h


@pytest.mark.parametrize("flags", [(), ("--async",), ("--zero-copy",), ("--device", "1")],
                         ids=["sync", "async", "zero-copy", "device1"])
def test_mlp_matches_numpy(run: Driver, tmp_path: Path, cpu: dict[str, str],
                           flags: tuple[str, ...]) -> None:
    inputs = _mlp_inputs()
    out = run_program(run, tmp_path, "mlp.mlir", *inputs, flags=flags, options=cpu)
    assert out.returncode == 0, out.stdout
    y, h = results(out)
    want_y, want_h = _mlp_numpy(*inputs)
    assert (want_h == 0).any()  # the ReLU clips something with this seed
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    assert out.values("OUT") == ["0 output0 f32 2,2", "1 output1 f32 2,5"]
    assert [line.split()[1] for line in out.values("IN")] == ["x", "w1", "b1", "w2", "b2"]


def test_zero_copy_aliases_on_cpu(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    x = np.arange(4, dtype=np.float32)
    out = run_program(run, tmp_path, "add.mlir", x, x, flags=("--zero-copy",), options=cpu)
    assert out.returncode == 0, out.stdout
    assert out.values("BUFFER") == ["0 zero_copy=1 size=16", "1 zero_copy=1 size=16"]
    np.testing.assert_array_equal(results(out)[0], 2 * x)
    copied = run_program(run, tmp_path, "add.mlir", x, x, options=cpu)
    assert copied.values("BUFFER")[0] == "0 zero_copy=0 size=16"


def test_scalar_integers(run: Driver, tmp_path: Path, cpu: dict[str, str]) -> None:
    out = run_program(run, tmp_path, "scalar_i32.mlir", np.array(6, np.int32),
                      np.array(-7, np.int32), options=cpu)
    assert out.returncode == 0, out.stdout
    (r,) = results(out)
    assert r.shape == () and r.dtype == np.int32 and int(r) == -41


def test_serialize_then_load_on_another_device(run: Driver, tmp_path: Path,
                                               cpu: dict[str, str]) -> None:
    inputs = _mlp_inputs()
    blob = tmp_path / "mlp.blob"
    saved = run_program(run, tmp_path, "mlp.mlir", *inputs, flags=("--save", str(blob)),
                        options=cpu)
    assert saved.returncode == 0, saved.stdout
    assert blob.read_bytes()[:8] == b"NXHALTPU"
    loaded = run_program(run, tmp_path, "-", *inputs, flags=("--device", "2", "--load", str(blob)),
                         options=cpu)
    assert loaded.returncode == 0, loaded.stdout
    assert "COMPILE_SECONDS" not in loaded.stdout
    # The input signature travels in the blob, so checks still work after loading.
    assert [line.split()[2:] for line in loaded.values("IN")] == [
        ["f32", "2,3"], ["f32", "3,5"], ["f32", "5"], ["f32", "5,2"], ["f32", "2"]]
    y, h = results(loaded)
    want_y, want_h = _mlp_numpy(*inputs)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)


def test_reserialized_executable_still_runs(run: Driver, tmp_path: Path,
                                            cpu: dict[str, str]) -> None:
    # XLA CPU serializes a deserialized executable without its kernels; the
    # plugin must hand back the bytes it loaded instead.
    x = np.arange(4, dtype=np.float32)
    first, second = tmp_path / "first.blob", tmp_path / "second.blob"
    assert run_program(run, tmp_path, "add.mlir", x, x, flags=("--save", str(first)),
                       options=cpu).returncode == 0
    out = run_program(run, tmp_path, "-", x, x,
                      flags=("--load", str(first), "--save", str(second)), options=cpu)
    assert out.returncode == 0, out.stdout
    assert second.read_bytes() == first.read_bytes()
    out = run_program(run, tmp_path, "-", x, x, flags=("--load", str(second)), options=cpu)
    assert out.returncode == 0, out.stdout
    np.testing.assert_array_equal(results(out)[0], 2 * x)


def test_cpu_device_count_option_reaches_xla(run: Driver, cpu: dict[str, str]) -> None:
    out = run("devices", options={**cpu, "cpu_device_count": "i:2"})
    assert out.returncode == 0, out.stdout
    assert out.values("COUNT") == ["2"]
    out = run("devices", options={**cpu, "cpu_device_count": "i:3"})
    assert out.values("COUNT") == ["3"]


def test_concurrent_execution_of_one_executable(run: Driver, cpu: dict[str, str]) -> None:
    # 8 threads x 100 runs, every second one asynchronous with an on_ready
    # callback; every result is checked and all memory is released after.
    out = run("threads", PROGRAMS / "add.mlir", "8", "100", options=cpu)
    assert out.returncode == 0, out.stdout
    assert out.values("THREADS") == ["runs=800 failures=0 callbacks=400 in_use_after=0"]


@pytest.mark.parametrize("program", ["matmul_sum.mlir", "matmul_sum.mlirbc"])
def test_text_and_portable_bytecode_agree(run: Driver, tmp_path: Path, cpu: dict[str, str],
                                          program: str) -> None:
    # The bytecode has no readable signature: inputs come from the compiled
    # HLO module (PJRT_Executable_OptimizedProgram), so checks still apply.
    a = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    out = run_program(run, tmp_path, program, a, b, options=cpu)
    assert out.returncode == 0, out.stdout
    assert [line.split()[2:] for line in out.values("IN")] == [["f32", "2,3"], ["f32", "3,4"]]
    y, total = results(out)
    np.testing.assert_allclose(y, a @ b + 1.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, a.sum(), rtol=1e-5)
    bad = run_program(run, tmp_path, program, a.T.copy(), b, options=cpu)
    assert bad.code == "INVALID_ARGUMENT" and "expects f32[2,3], got f32[3,2]" in bad.message
