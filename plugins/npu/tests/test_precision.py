"""The ``precision`` option (issue #14): f32 (the default), bf16, f16 and
auto (OpenVINO's own choice), checked against numpy in float64 and against
OpenVINO's own Python API, through every path a compiled model takes (the
sandboxed first compile, the compile cache, serialize and load)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import models
import numpy as np
import onnx
import pytest
from nx_hal_npu import LIBRARY
from onnx import numpy_helper
from test_errors import raw_compile

import nx_hal
from nx_hal.device import Device
from nx_hal.library import open_library

CHOICES = ("f32", "bf16", "f16", "auto")


def _capabilities() -> list[str]:
    import openvino as ov

    return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


CAPS = _capabilities()
HAS_BF16 = "BF16" in CAPS
HAS_F16 = "FP16" in CAPS
NEEDS_BF16 = pytest.mark.skipif(not HAS_BF16, reason=f"the CPU has no bf16 units (OpenVINO: {CAPS})")


def _model(seed: int) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """A 256-deep matmul whose weights and inputs are not representable in
    bf16 or f16, so reduced precision must show; its float64 result."""
    model = models.matmul(8, 256, 64, seed=seed)
    weight = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    x = np.random.default_rng(seed).standard_normal((8, 256)).astype(np.float32)
    return model, x, x.astype(np.float64) @ weight


def _error(out: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(out.astype(np.float64) - expected)))


def _openvino(model: onnx.ModelProto, x: np.ndarray, hint: str | None = None) -> np.ndarray:
    """OpenVINO's CPU through its own Python API; no hint is its own choice,
    what "auto" must give."""
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": hint} if hint is not None else {}
    compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU", config)
    return np.asarray(compiled(x)[0])


def _assert_names_choices(error: BaseException) -> None:
    text = str(error)
    missing = [c for c in CHOICES if c not in text]
    assert not missing, f"{text!r} does not name {missing}"


@pytest.fixture(scope="module")
def errors(dev: Device) -> dict[str, float]:
    """Max abs error vs float64 per precision, one model for all tests."""
    model, x, expected = _model(seed=41)
    return {p: _error(dev.compile(model, precision=p)(x)[0].to_numpy(), expected) for p in CHOICES}


def test_f32_matches_numpy(dev: Device) -> None:
    model, x, expected = _model(seed=42)
    option_sets: list[dict[str, Any]] = [{}, {"precision": "f32"}]
    for options in option_sets:  # f32 is the default
        out = dev.compile(model, **options)(x)[0].to_numpy()
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "f16"])
def test_reduced_precision_within_tolerance(errors: dict[str, float], precision: str) -> None:
    # Output values are ~N(0, 1); bf16 keeps 8 mantissa bits, f16 11.
    assert errors[precision] < 0.1, errors
    assert errors[precision] >= errors["f32"], errors


@NEEDS_BF16
def test_bf16_rounding_shows(errors: dict[str, float]) -> None:
    # A 256-term dot product of bf16-rounded operands is off by ~1e-2;
    # f32 by ~1e-6. An error this small means the hint was not applied.
    assert errors["bf16"] > 1e-3 > errors["f32"], errors


@pytest.mark.skipif(not (HAS_BF16 and HAS_F16), reason=f"needs bf16 and f16 units (OpenVINO: {CAPS})")
def test_f16_is_its_own_precision(errors: dict[str, float]) -> None:
    # f16's 11 mantissa bits: between f32 and bf16, so neither was run instead.
    assert errors["f32"] < errors["f16"] < errors["bf16"], errors


def test_auto_is_openvinos_own_choice(dev: Device) -> None:
    model, x, expected = _model(seed=43)
    out = dev.compile(model, precision="auto")(x)[0].to_numpy()
    own = _openvino(model, x)
    np.testing.assert_allclose(out, own, rtol=0, atol=1e-6)
    if HAS_BF16:  # OpenVINO's CPU picks bf16 here: auto must not be f32
        assert _error(out, expected) > 1e-3


@pytest.mark.parametrize("precision", CHOICES)
def test_every_path_keeps_the_precision(dev: Device, precision: str) -> None:
    """The first compile runs in a sandbox child and is loaded here from its
    blob; the second comes from the compile cache; a blob loaded again must
    run at the precision it was compiled with, not the client's f32."""
    model, x, _ = _model(seed=44)
    direct = dev.compile(model, precision=precision, verify="off", cache=False)(x)[0].to_numpy()
    first = dev.compile(model, precision=precision)
    again = dev.compile(model, precision=precision)
    loaded = dev.load_executable(first.serialize())
    for exe in (first, again, loaded):
        np.testing.assert_array_equal(exe(x)[0].to_numpy(), direct)
    assert isinstance(first, nx_hal.Executable)
    code = int.from_bytes(first._serialize()[20:24], "little")  # the plugin header's precision field
    assert code == CHOICES.index(precision) + 1
    # Without a precision of its own, a blob runs at the loading client's (f32).
    plain = dev.compile(model)
    assert isinstance(plain, nx_hal.Executable)
    assert int.from_bytes(plain._serialize()[20:24], "little") == 0


@pytest.fixture
def configured() -> Iterator[None]:
    yield
    nx_hal.configure(no_config=True)


@pytest.mark.parametrize("client", ["auto", "bf16"])
def test_client_precision_and_compile_override(configured: None, client: str) -> None:
    reg = nx_hal.configure({"plugins": {"npu": {"precision": client}}}, no_config=True)
    dev = next(d for d in reg.devices() if d.plugin == "npu" and d.kind == "cpu")
    model, x, expected = _model(seed=45)
    own = _openvino(model, x)
    bf16 = _openvino(model, x, "bf16")
    default = dev.compile(model)(x)[0].to_numpy()
    np.testing.assert_allclose(default, own if client == "auto" else bf16, rtol=0, atol=1e-6)
    # A compile's own precision wins over the client's, both ways.
    f32 = dev.compile(model, precision="f32")(x)[0].to_numpy()
    np.testing.assert_allclose(f32, expected, rtol=1e-5, atol=1e-5)
    auto = dev.compile(model, precision="auto")(x)[0].to_numpy()
    np.testing.assert_allclose(auto, own, rtol=0, atol=1e-6)


def test_client_precision_does_not_leak_through_the_cache(configured: None) -> None:
    """The compile cache keys entries by compile options, not client ones:
    an entry made under a bf16 client must run at the loading client's f32."""
    model, x, expected = _model(seed=46)
    reg = nx_hal.configure({"plugins": {"npu": {"precision": "bf16"}}}, no_config=True)
    dev = next(d for d in reg.devices() if d.plugin == "npu" and d.kind == "cpu")
    assert _error(dev.compile(model)(x)[0].to_numpy(), expected) > (1e-3 if HAS_BF16 else -1)
    reg = nx_hal.configure(no_config=True)
    dev = next(d for d in reg.devices() if d.plugin == "npu" and d.kind == "cpu")
    np.testing.assert_allclose(dev.compile(model)(x)[0].to_numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", ["fp32", "", "F32", "int8"])
def test_invalid_precision_names_the_choices(dev: Device, bad: str) -> None:
    model = models.matmul().SerializeToString()
    with pytest.raises(nx_hal.InvalidArgumentError, match="precision") as through_python:
        dev.compile(model, format="onnx", precision=bad)  # the pydantic model
    _assert_names_choices(through_python.value)
    with pytest.raises(nx_hal.InvalidArgumentError, match="option 'precision'") as compile_c:
        raw_compile(dev, model, precision=bad)  # the plugin's compile option
    _assert_names_choices(compile_c.value)
    with pytest.raises(nx_hal.InvalidArgumentError, match="option 'precision'") as client_c:
        open_library(str(LIBRARY), "npu").create_client({"precision": bad}, "npu")  # client option
    _assert_names_choices(client_c.value)
