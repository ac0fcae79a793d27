"""ONNX on every device that can run it: conversion on the PJRT (tpu:cpu)
device, clear errors naming the operator when it cannot convert, and
fallback to OpenVINO's CPU (npu:cpu) with the reason in the report.
onnxruntime is the oracle for every value."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import torch_mlir  # noqa: F401
except ImportError as exc:
    pytest.skip(f"ONNX → StableHLO needs torch-mlir: {exc}", allow_module_level=True)
onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the oracle)")


import nx_hal  # noqa: E402
from nx_hal.onnx import convert  # noqa: E402
from nx_hal.onnx.convert import ConversionError  # noqa: E402
from tests.plugin_env import device_available  # noqa: E402
from tests.store_util import entries  # noqa: E402

TPU, NPU = "tpu:cpu", "npu:cpu"
_RNG = np.random.default_rng(7)


needs_tpu = pytest.mark.skipif(not device_available(TPU), reason="needs the tpu plugin's XLA CPU device (tpu:cpu)")
needs_both = pytest.mark.skipif(not (device_available(TPU) and device_available(NPU)), reason="needs tpu:cpu and npu:cpu")


# ---------------------------------------------------------------- models

from tests.onnx_models import cnn, if_model, maxpool_uint8, resize  # noqa: E402
from tests.onnx_models import mlp as _mlp  # noqa: E402
from tests.onnx_models import transformer_block as transformer  # noqa: E402


def mlp() -> bytes:
    return _mlp(batch=4, features=6, opset=17)


def qdq_int8() -> bytes:
    """The MLP quantized to int8 QDQ by nx_hal.quantize (onnxruntime's static quantizer)."""
    calibration = [_RNG.standard_normal((4, 6)).astype(np.float32) for _ in range(8)]
    return nx_hal.quantize(mlp(), calibration)


def _input_for(model: bytes) -> dict[str, np.ndarray]:
    proto = onnx.load_model_from_string(model)
    feeds = {}
    for vi in proto.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = _RNG.standard_normal(shape).astype(np.float32)
    return feeds


def _oracle(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, feeds)]


def _run(exe: nx_hal.Executable | nx_hal.DynamicExecutable, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [o.to_numpy() for o in exe(*[feeds[s.name] for s in exe.inputs])]


@pytest.fixture
def prefer_tpu_then_npu() -> Iterator[None]:
    """Fallback allowed: tpu:cpu first, npu:cpu next; the default config is restored after."""
    nx_hal.configure({"prefer": [TPU, NPU]})
    try:
        yield
    finally:
        nx_hal.configure()


def lppool3d() -> bytes:
    """LpPool over three spatial dims: the lowering computes it wrong, so the converter refuses it."""
    node = onnx.helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2, 2], p=2)
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", 1, [1, 2, 4, 4, 4])],
                                   [onnx.helper.make_tensor_value_info("y", 1, [1, 2, 3, 3, 3])])
    return bytes(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)]).SerializeToString())


# nx_hal.onnx.rewrites (issue #13), where installed, writes Resize and Q/DQ
# in operators the lowering has: those models convert and stop being examples.
REWRITES = importlib.util.find_spec("nx_hal.onnx.rewrites") is not None
UNCONVERTIBLE = {
    "If": if_model,  # a condition computed from the input
    "LpPool": lppool3d,  # refused: the lowering's values would be wrong
    **({} if REWRITES else {"Resize": resize, "QDQ": qdq_int8}),
}
# What each error must name: for the QDQ model, both quantization operators.
NAMED = {"Resize": ("Resize",), "If": ("If",), "QDQ": ("QuantizeLinear", "DequantizeLinear"), "LpPool": ("LpPool",)}


# ---------------------------------------------------------------- conversion works


@needs_tpu
@pytest.mark.parametrize("build", [mlp, cnn, transformer], ids=["mlp", "cnn", "transformer"])
def test_converted_models_match_onnxruntime_on_tpu(build: Any) -> None:
    model = build()
    feeds = _input_for(model)
    exe = nx_hal.device(TPU).compile(model, "onnx")
    got = _run(exe, feeds)
    want = _oracle(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=False):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert np.abs(want[0]).max() > 1e-3  # not a vacuous comparison of zeros


# ---------------------------------------------------------------- clear errors, then fallback


@needs_tpu
@pytest.mark.parametrize("op", list(UNCONVERTIBLE))
def test_unconvertible_model_on_tpu_is_an_error_naming_the_operator(op: str) -> None:
    model = UNCONVERTIBLE[op]()
    with pytest.raises(ConversionError) as info:
        nx_hal.device(TPU).compile(model, "onnx")
    for name in NAMED[op]:
        assert name in info.value.operators
        assert name in str(info.value)
    assert info.value.reason == "unsupported-operator"
    if op == "QDQ":
        assert "int8 QDQ quantization is not supported" in str(info.value)
    # Naming the device in compile_anywhere is strict too: no fallback.
    with pytest.raises(ConversionError) as strict:
        nx_hal.compile_anywhere(model, "onnx", selector=TPU)
    assert set(NAMED[op]) <= set(strict.value.operators)


@needs_both
@pytest.mark.parametrize("op", list(UNCONVERTIBLE))
def test_unconvertible_model_falls_back_to_npu(op: str, prefer_tpu_then_npu: None) -> None:
    model = UNCONVERTIBLE[op]()
    assert nx_hal.device().plugin == "tpu"  # the preference puts tpu first
    with pytest.warns(nx_hal.FallbackWarning, match=NAMED[op][0]):
        exe, report = nx_hal.compile_anywhere(model, "onnx")
    assert report.chosen is not None and report.chosen.plugin == "npu"
    # One line for the plugin, however many of its devices were skipped.
    skipped = [s for s in report.skipped if "tpu:cpu:0" in s.reason]
    assert len(skipped) == 1, report.skipped
    assert "StableHLO" in skipped[0].reason
    for name in NAMED[op]:
        assert name in skipped[0].reason
    feeds = _input_for(model)
    got = _run(exe, feeds)
    want = _oracle(model, feeds)
    assert [g.shape for g in got] == [w.shape for w in want]
    # OpenVINO computes QDQ in int8 (one quantization step apart at most).
    atol = 0.05 if op == "QDQ" else 1e-5
    for g, w in zip(got, want, strict=False):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)


# ---------------------------------------------------------------- converter crash


@needs_tpu
def test_converter_crash_is_a_clear_error_and_the_process_survives() -> None:
    with pytest.raises(ConversionError) as info:
        nx_hal.device(TPU).compile(maxpool_uint8(), "onnx", cache=False)
    assert info.value.reason == "crash"
    assert "crashed" in str(info.value) and "MaxPool" in str(info.value)
    # Still alive, and the device still converts and runs the next model.
    model = mlp()
    feeds = _input_for(model)
    np.testing.assert_allclose(_run(nx_hal.device(TPU).compile(model, "onnx", cache=False), feeds)[0],
                               _oracle(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_worker_survives_a_crash_and_keeps_converting() -> None:
    """The batch converter: the crashing model fails alone, the next converts."""
    model = mlp()
    with convert.ConverterWorker() as worker:
        first = convert.onnx_to_stablehlo(model, worker=worker, use_cache=False)
        with pytest.raises(ConversionError) as info:
            convert.onnx_to_stablehlo(maxpool_uint8(), worker=worker, use_cache=False)
        assert info.value.reason == "crash" and "MaxPool" in str(info.value)
        again = convert.onnx_to_stablehlo(model, worker=worker, use_cache=False)
        assert again.module == first.module
        with pytest.raises(ConversionError) as bad:
            convert.onnx_to_stablehlo(lppool3d(), worker=worker, use_cache=False)
        assert "LpPool" in bad.value.operators
        assert worker.started == 2  # one restart, after the crash only
    with pytest.raises(nx_hal.InvalidArgumentError):
        convert.onnx_to_stablehlo(mlp(), worker=worker, use_cache=False)


def test_worker_timeout_stops_the_child_and_recovers() -> None:
    with convert.ConverterWorker() as worker:
        with pytest.raises(nx_hal.DeadlineExceededError):
            convert.onnx_to_stablehlo(cnn(), worker=worker, use_cache=False, timeout=0.01)
        assert convert.onnx_to_stablehlo(cnn(), worker=worker, use_cache=False).module


def test_killed_worker_is_restarted_transparently() -> None:
    with convert.ConverterWorker() as worker:
        convert.onnx_to_stablehlo(mlp(), worker=worker, use_cache=False)
        pid = worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # dead, and left for the worker to reap
        assert convert.onnx_to_stablehlo(cnn(), worker=worker, use_cache=False).module
        assert worker.started == 2


def test_crash_in_a_fresh_interpreter_exits_cleanly() -> None:
    """The caller's process, not just this test, survives: its exit status is 0."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
        "from tests.test_onnx_fallback import maxpool_uint8\n"
        "from nx_hal.onnx import convert\n"
        "try:\n"
        "    convert.onnx_to_stablehlo(maxpool_uint8(), use_cache=False)\n"
        "except convert.ConversionError as e:\n"
        "    print('converr', e.reason)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "converr crash" in proc.stdout


# ---------------------------------------------------------------- conversion cache


def test_conversion_cache_is_hit_on_the_second_conversion(tmp_path: Path) -> None:
    model = cnn()
    first = convert.onnx_to_stablehlo(model, target_version="1.9.0", bytecode=True, cache_dir=tmp_path)
    second = convert.onnx_to_stablehlo(model, target_version="1.9.0", bytecode=True, cache_dir=tmp_path)
    assert not first.cache_hit and second.cache_hit
    assert second.module == first.module
    print(f"conversion {first.seconds:.3f} s, cache hit {second.seconds:.4f} s")
    assert second.seconds < first.seconds / 10


def test_failed_conversion_is_remembered_in_the_process(tmp_path: Path) -> None:
    """Selection tries tpu:cpu:0, :1, ... in turn: the converter runs once, not per device."""
    model = lppool3d()
    started = time.perf_counter()
    with pytest.raises(ConversionError):
        convert.onnx_to_stablehlo(model, cache_dir=tmp_path)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    with pytest.raises(ConversionError) as again:
        convert.onnx_to_stablehlo(model, cache_dir=tmp_path)
    assert time.perf_counter() - started < cold / 10
    assert "LpPool" in again.value.operators
    with pytest.raises(ConversionError):  # use_cache=False converts again
        convert.onnx_to_stablehlo(model, cache_dir=tmp_path, use_cache=False)


@needs_tpu
def test_device_compile_hits_the_conversion_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device.compile converts once; the second compile of the same model
    reads the converted module from the cache (no converter child runs)."""
    nx_hal.configure({"cache_dir": str(tmp_path), "compile_cache": True})
    try:
        model = transformer()
        dev = nx_hal.device(TPU)
        started = time.perf_counter()
        dev.compile(model, "onnx")
        cold = time.perf_counter() - started
        found = entries(tmp_path, "stablehlo")
        assert len(found) == 1

        def no_child(*args: object, **kwargs: object) -> None:
            raise AssertionError("the converter ran again: the cache was not hit")

        monkeypatch.setattr(convert, "_run_child", no_child)
        started = time.perf_counter()
        exe = dev.compile(model, "onnx")
        warm = time.perf_counter() - started
        print(f"compile of ONNX on tpu:cpu: first {cold:.3f} s, second {warm:.3f} s")
        assert warm < cold / 3
        feeds = _input_for(model)
        np.testing.assert_allclose(_run(exe, feeds)[0], _oracle(model, feeds)[0], rtol=1e-4, atol=1e-5)
    finally:
        nx_hal.configure()
