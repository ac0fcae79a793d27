"""Int8: nx_hal.quantize makes a QDQ model, OpenVINO's CPU runs it in int8,
and its results stay within 5% of the f32 model's output range (max abs error
over 16 held-out inputs), with the same top-1 class on at least 15 of 16."""

from __future__ import annotations

import os

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


def test_quantized_weights_fit_seven_bits_so_no_cpu_needs_a_rewrite(dev: Device) -> None:
    """nx_hal.quantize keeps weights in [-64, 64]: the int8 saturation
    rewrite (nx_hal.onnx.deviations) leaves its models as they are."""
    import onnx
    from onnx import numpy_helper

    from nx_hal.onnx import deviations

    rng = np.random.default_rng(13)
    qdq = quantize_module.quantize(models.cnn(), [rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
                                                  for _ in range(8)])
    proto = onnx.load_from_string(qdq)
    weights = [numpy_helper.to_array(i) for i in proto.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    assert weights and all(int(w.min()) >= -64 and int(w.max()) <= 64 for w in weights)
    assert max(int(np.abs(w).max()) for w in weights) > 32  # the range is used, not collapsed
    prepared = deviations.prepare(qdq, plugin="npu", attributes={"int8_pairs_saturate": True})
    assert prepared.model == qdq


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


def test_cpu_reports_whether_int8_pairs_saturate(dev: Device) -> None:
    """int8_pairs_saturate (read by nx_hal.onnx.deviations): true on x86-64
    without AVX512-VNNI and AVX-VNNI, where OpenVINO's int8 kernels sum u8 x s8
    pairs in 16 bits; false elsewhere; only on the CPU device."""
    import platform
    from pathlib import Path

    import nx_hal

    value = dev.attributes["int8_pairs_saturate"]
    assert isinstance(value, bool)
    if platform.machine() not in ("x86_64", "AMD64"):
        assert value is False
    elif Path("/proc/cpuinfo").exists():
        assert value is _expected_on_x86(dict(os.environ)), sorted(_cpu_flags() & {"avx2", "avx512f"})
    for other in nx_hal.registry().records["npu"].devices:
        if other.kind != "cpu":
            assert "int8_pairs_saturate" not in other.attributes


def _cpu_flags() -> set[str]:
    from pathlib import Path

    return {f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
            for f in line.split(":", 1)[1].split()}


def _expected_on_x86(env: dict[str, str]) -> bool:
    """Saturating unless the CPU has VNNI and oneDNN may use it: a cap below
    VNNI (ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA) makes it saturate anyway."""
    cap = env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or ""
    if cap.upper() in ("SSE41", "AVX", "AVX2", "AVX512_CORE"):
        return True
    return not (_cpu_flags() & {"avx512_vnni", "avx_vnni"})


@pytest.mark.parametrize("env", [
    {"ONEDNN_MAX_CPU_ISA": "avx2"},
    {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"},
    {"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "AVX512_CORE"},
    {"DNNL_MAX_CPU_ISA": "ALL"},
])
def test_an_isa_cap_below_vnni_is_reported_as_saturating(dev: Device, env: dict[str, str]) -> None:
    """On a VNNI machine run with oneDNN capped at AVX2, OpenVINO takes the
    saturating kernels: the attribute must say so, or int8 results are
    silently wrong. Asked of a fresh process, where the plugin reads the
    environment as it starts."""
    import platform
    import subprocess
    import sys

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86 ISA cap")
    child_env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    child_env.update(env)
    code = ("import nx_hal; nx_hal.configure(no_config=True); "
            "print(nx_hal.device('npu:cpu').attributes['int8_pairs_saturate'])")
    out = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(_expected_on_x86(child_env))
