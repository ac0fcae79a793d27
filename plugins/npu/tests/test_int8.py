"""Int8: nx_hal.quantize makes a QDQ model, OpenVINO's CPU runs it in int8,
and its results stay within 5% of the f32 model's output range (max abs error
over 16 held-out inputs), with the same top-1 class on at least 15 of 16."""

from __future__ import annotations

import models
import numpy as np
import pytest
from conftest import ort_run

from nx_hal.device import Device

quantize_module = pytest.importorskip("nx_hal.onnx.quantize")

BOUND = 0.05  # max abs error / f32 output range


def test_int8_cnn_close_to_f32(dev: Device) -> None:
    model = models.cnn(classes=10)
    rng = np.random.default_rng(11)
    calibration = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(32)]
    qdq = quantize_module.quantize(model, calibration, precision="int8")
    assert b"QuantizeLinear" in qdq and b"DequantizeLinear" in qdq

    exe32 = dev.compile(model)
    exe8 = dev.compile(qdq, format="onnx")
    errors, agree = [], 0
    for _ in range(16):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        ref = exe32(x)[0].to_numpy()
        got = exe8(x)[0].to_numpy()
        np.testing.assert_allclose(ref, ort_run(model, x)[0], rtol=1e-4, atol=1e-5)
        errors.append(np.abs(got - ref).max() / (ref.max() - ref.min()))
        agree += int(got.argmax() == ref.argmax())
    worst = max(errors)
    print(f"\nint8 vs f32: worst relative error {worst:.4f}, top-1 agreement {agree}/16")
    assert worst < BOUND
    assert agree >= 15


def test_int8_really_runs_int8(dev: Device) -> None:
    import openvino as ov

    model = models.cnn()
    rng = np.random.default_rng(12)
    qdq = quantize_module.quantize(model, [rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
                                           for _ in range(8)])
    core = ov.Core()
    compiled = core.compile_model(core.read_model(qdq), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    precisions = {op.get_rt_info()["runtimePrecision"].astype(str)
                  for op in compiled.get_runtime_model().get_ops()
                  if op.get_rt_info()["layerType"].astype(str) == "Convolution"}
    assert precisions & {"i8", "u8", "I8", "U8"}, precisions


def test_quantize_rejects_bad_requests() -> None:
    import nx_hal

    with pytest.raises(nx_hal.InvalidArgumentError, match="precision 'int4'"):
        quantize_module.quantize(models.mlp(), [np.zeros((1, 16), np.float32)], precision="int4")
    with pytest.raises(nx_hal.InvalidArgumentError, match="empty"):
        quantize_module.quantize(models.mlp(), [])
    with pytest.raises(nx_hal.InvalidArgumentError, match="not an ONNX model"):
        quantize_module.quantize(b"\x01\x02garbage", [np.zeros((1, 16), np.float32)])
