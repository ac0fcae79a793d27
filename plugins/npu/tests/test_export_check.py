"""OpenVINO 2026.4's CPU plugin exports forward and reverse LSTM, GRU and
RNN models whose import computes other values, without an error. The
plugin imports each stream it exports and runs both on one fixed input;
a stream that differs is not serialized, so neither the compile cache nor
the sandbox's hand-over from its child can load a wrong executable."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ATOL, RTOL, ort_run
from models import recurrent

import nx_hal
from nx_hal.device import Device


def _check_serialized(dev: Device, exe: nx_hal.Executable, x: np.ndarray, want: np.ndarray) -> None:
    """A stream the plugin hands out must compute what the model does; one
    it refuses must say why."""
    try:
        blob = exe.serialize()
    except nx_hal.UnimplementedError as exc:
        assert "computes other values once imported" in str(exc)
        assert "output 'y' differs" in str(exc)
        return
    np.testing.assert_allclose(dev.load_executable(blob)(x)[0].to_numpy(), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_models_never_load_wrong(dev: Device, op: str, direction: str) -> None:
    model = recurrent(op, direction).SerializeToString()
    x = np.random.default_rng(5).standard_normal((6, 2, 4)).astype(np.float32)
    want = ort_run(model, x)[0]
    # The user's path: the first compile goes through the sandbox's child
    # (whose stream this process would load), the second hits the cache.
    for _ in range(2):
        got = dev.compile(model)(x)[0].to_numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    exe = dev.compile(model, cache=False, verify="off")
    assert isinstance(exe, nx_hal.Executable)
    _check_serialized(dev, exe, x, want)


def test_the_forward_lstm_is_refused_while_openvino_gets_it_wrong(dev: Device) -> None:
    """The refusal is the plugin's, measured: if OpenVINO's own round trip of
    this model is right, a refusal would be needless (and this test says so)."""
    ov = pytest.importorskip("openvino")
    model = recurrent("LSTM", "forward").SerializeToString()
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model, b""), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    imported = core.import_model(compiled.export_model(), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = np.random.default_rng(6).standard_normal((6, 2, 4)).astype(np.float32)
    vendor_wrong = not np.allclose(compiled({0: x})[0], imported({0: x})[0], rtol=RTOL, atol=ATOL)
    exe = dev.compile(model, cache=False, verify="off")
    if vendor_wrong:
        with pytest.raises(nx_hal.UnimplementedError, match="computes other values once imported"):
            exe.serialize()
    else:
        assert dev.load_executable(exe.serialize())(x)[0].to_numpy().shape == (6, 1, 2, 8)
