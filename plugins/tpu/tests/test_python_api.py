"""The plugin through the nx_hal Python API (skipped until the core is importable)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from conftest import PLUGIN_DIR, PROGRAMS

nx_hal = pytest.importorskip("nx_hal")
if not hasattr(nx_hal, "devices"):
    pytest.skip("the nx_hal core has no devices() yet", allow_module_level=True)

sys.path.insert(0, str(PLUGIN_DIR))
from nx_hal_tpu import TpuCompileOptions, TpuOptions  # noqa: E402


def _mlp(dev: Any) -> tuple[Any, tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(7)
    inputs = (rng.standard_normal((2, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5),
              rng.standard_normal((5, 2)), rng.standard_normal(2))
    arrays = tuple(a.astype(np.float32) for a in inputs)
    exe = dev.compile((PROGRAMS / "mlp.mlir").read_text(), format="stablehlo")
    return exe, arrays


def test_devices_are_cpu_kind(devices: list[Any]) -> None:
    assert len(devices) == 2
    assert all(d.selector.startswith("tpu:cpu") for d in devices)


def test_mlp_against_numpy(devices: list[Any]) -> None:
    dev = devices[1]
    exe, (x, w1, b1, w2, b2) = _mlp(dev)
    assert [s.shape for s in exe.inputs] == [(2, 3), (3, 5), (5,), (5, 2), (2,)]
    y, h = exe(*(dev.put(a) for a in (x, w1, b1, w2, b2)))
    want_h = np.maximum(x @ w1 + b1, 0)
    np.testing.assert_allclose(h.to_numpy(), want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y.to_numpy(), want_h @ w2 + b2, rtol=1e-5, atol=1e-5)


def test_serialize_and_load(devices: list[Any]) -> None:
    exe, arrays = _mlp(devices[0])
    data = exe.serialize()
    loaded = devices[1].load_executable(data)
    y, _ = loaded(*(devices[1].put(a) for a in arrays))
    (y0, _) = exe(*(devices[0].put(a) for a in arrays))
    np.testing.assert_array_equal(y.to_numpy(), y0.to_numpy())
    tampered = data.replace(b"stablehlo=1.", b"stablehlo=7.", 1)
    with pytest.raises(nx_hal.InvalidArgumentError, match="authenticator does not check"):
        devices[0].load_executable(tampered)  # changed since serialize() sealed it
    with pytest.raises(nx_hal.FailedPreconditionError, match="built for"):
        devices[0].load_executable(tampered, trusted=True)  # the plugin's own compat check


def test_compile_cache_hit_serializes_whole(devices: list[Any]) -> None:
    # The second compile is a cache hit (a deserialized executable); XLA CPU
    # would re-serialize it without kernels, so the plugin keeps its bytes.
    first, arrays = _mlp(devices[0])
    again, _ = _mlp(devices[0])
    blob = again.serialize()
    assert len(blob) == len(first.serialize())
    reloaded = devices[1].load_executable(blob)
    (y, _) = reloaded(*(devices[1].put(a) for a in arrays))
    (want, _) = first(*(devices[0].put(a) for a in arrays))
    np.testing.assert_array_equal(y.to_numpy(), want.to_numpy())


def test_bad_programs_and_inputs(devices: list[Any]) -> None:
    dev = devices[0]
    with pytest.raises(nx_hal.InvalidArgumentError, match="StableHLO compile failed"):
        dev.compile((PROGRAMS / "malformed.mlir").read_text(), format="stablehlo")
    with pytest.raises(nx_hal.InvalidArgumentError, match="@main"):
        dev.compile((PROGRAMS / "no_main.mlir").read_text(), format="stablehlo")
    exe = dev.compile((PROGRAMS / "add.mlir").read_text(), format="stablehlo")
    x = dev.put(np.zeros(4, np.float32))
    with pytest.raises(nx_hal.InvalidArgumentError):
        exe(x)
    with pytest.raises(nx_hal.InvalidArgumentError, match="expects f32"):
        exe(x, dev.put(np.zeros(4, np.int32)))


def test_memory_limit(devices: list[Any]) -> None:
    dev = devices[0]
    dev.set_memory_limit(1000)
    try:
        with pytest.raises(nx_hal.ResourceExhaustedError):
            dev.put(np.zeros(1000, np.float32))
        small = dev.put(np.ones(10, np.float32))
        assert dev.memory_stats().bytes_in_use >= 40
        del small
    finally:
        dev.set_memory_limit(None)


def test_options_model_rejects_mistakes() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TpuOptions(cpu_device_count="two")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TpuOptions(cpu_device_cont=2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        TpuCompileOptions(num_replicas=0)


TRANSPOSE_MATMUL = """module @tm {
  func.func public @main(%a: tensor<256x128xf32>, %b: tensor<128x64xf32>) -> (tensor<64x256xf32>, tensor<2x3x4xi8>) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<256x128xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<256x64xf32>) -> tensor<64x256xf32>
    %2 = stablehlo.iota dim = 2 : tensor<2x3x4xi8>
    return %1, %2 : tensor<64x256xf32>, tensor<2x3x4xi8>
  }
}
"""


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.array([True, False, True]),
    np.arange(-5, 5, dtype=np.int8).reshape(2, 5),
    np.zeros((0, 3), np.float32),
    np.float64(2.5).reshape(()),
], ids=["f32-rank3", "bool", "i8", "empty", "scalar-f64"])
def test_host_round_trip_sync_and_async(devices: list[Any], array: np.ndarray) -> None:
    # On CPU both directions take the plugin's direct path (memcpy from the
    # ready buffer); the values and shapes must match exactly either way.
    buf = devices[0].put(array)
    np.testing.assert_array_equal(buf.to_numpy(), array)
    out, event = buf.to_numpy_async()
    event.wait(10.0)
    np.testing.assert_array_equal(out, array)
    assert out.shape == array.shape and out.dtype == array.dtype


def test_outputs_read_back_in_row_major_order(devices: list[Any]) -> None:
    # A transposed result and a rank-3 integer output, read sync and while
    # the computation may still be running (async), against numpy.
    dev = devices[0]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    exe = dev.compile(TRANSPOSE_MATMUL, format="stablehlo")
    expect = (a @ b).T
    iota = np.broadcast_to(np.arange(4, dtype=np.int8), (2, 3, 4))
    x, y = dev.put(a), dev.put(b)
    for _ in range(3):
        # Read while the run may still be going: async falls back to PJRT's
        # copy, sync waits for the buffer to be ready.
        (t, i), run = exe.run_async(x, y)
        out, event = t.to_numpy_async()
        ints = i.to_numpy()
        event.wait(30.0)
        run.wait(30.0)
        np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(ints, iota)
        t, i = exe(x, y)
        np.testing.assert_allclose(t.to_numpy(), expect, rtol=1e-4, atol=1e-4)
        out, event = i.to_numpy_async()
        event.wait(10.0)
        np.testing.assert_array_equal(out, iota)


def test_more_inputs_than_the_c_path_takes(devices: list[Any]) -> None:
    """Past nx_hal._fastpath.MAX_IO inputs every call goes through Python,
    with buffers and with host arrays alike."""
    from nx_hal._fastpath import MAX_IO

    n = MAX_IO + 3
    args = ", ".join(f"%a{i}: tensor<2xf32>" for i in range(n))
    body = ["%s0 = stablehlo.add %a0, %a1 : tensor<2xf32>"]
    body += [f"%s{i - 1} = stablehlo.add %s{i - 2}, %a{i} : tensor<2xf32>" for i in range(2, n)]
    program = (f"func.func @main({args}) -> tensor<2xf32> {{\n  " + "\n  ".join(body)
               + f"\n  return %s{n - 2} : tensor<2xf32>\n}}\n")
    dev = devices[0]
    exe = dev.compile(program, "stablehlo", cache=False)
    arrays = [np.array([i, -2.0 * i], np.float32) for i in range(n)]
    want = np.sum(arrays, axis=0)
    np.testing.assert_array_equal(exe(*arrays)[0].to_numpy(), want)
    np.testing.assert_array_equal(exe(*[dev.put(a) for a in arrays])[0].to_numpy(), want)
