"""Selection: preference order, loud fallback, strict explicit choices,
required entries, format awareness, and the explain report."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import nx_hal
from nx_hal import api
from nx_hal.registry import Registry
from tests.cbuild import build_fixture
from tests.plugin_env import fixture_registry


@pytest.fixture
def reg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    r = fixture_registry(tmp_path, "hostmem", "other_major", prefer=["npu", "fixture-hostmem:cpu"])
    r.load_all()
    monkeypatch.setattr(api, "_registry", r)
    monkeypatch.setattr(api, "_default", None)
    return r


def test_fallback_is_loud(reg: Registry) -> None:
    with pytest.warns(nx_hal.FallbackWarning, match="skipped npu: no npu device: plugin 'npu' not installed"):
        dev = nx_hal.device()
    assert dev.selector == "fixture-hostmem:cpu:0"
    report = nx_hal.explain()
    assert report.chosen is dev and report.chosen_by == "fixture-hostmem:cpu"
    assert [s.selector for s in report.skipped] == ["npu"]
    text = str(report)
    assert "skipped npu" in text and "chosen fixture-hostmem:cpu:0" in text
    assert "fixture-other_major: failed: ABI_MISMATCH" in text
    d = report.to_dict()
    assert d["chosen"]["selector"] == "fixture-hostmem:cpu:0" and not d["explicit"]


def test_explicit_selector_is_strict(reg: Registry) -> None:
    with pytest.raises(nx_hal.UnavailableError, match="plugin 'tpu' is not installed"):
        nx_hal.device("tpu:cpu")
    with pytest.raises(nx_hal.UnavailableError, match="ABI_MISMATCH"):
        nx_hal.device("fixture-other_major")
    with pytest.raises(nx_hal.UnavailableError, match="index 3 out of range"):
        nx_hal.device("fixture-hostmem:cpu:3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact hit warns about nothing
        assert nx_hal.device("cpu").plugin == "fixture-hostmem"
    with pytest.raises(nx_hal.InvalidArgumentError):
        nx_hal.device("a:b:c:d")


def test_required_preference_stops_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = fixture_registry(tmp_path, "hostmem", prefer=["gpu!", "cpu"])
    r.load_all()
    monkeypatch.setattr(api, "_registry", r)
    with pytest.raises(nx_hal.UnavailableError, match="gpu!"):
        nx_hal.device()
    assert nx_hal.explain().chosen is None


def test_format_aware(reg: Registry) -> None:
    with pytest.raises(nx_hal.UnavailableError, match="not 'onnx'"):
        nx_hal.device("fixture-hostmem", program_format="onnx")
    assert nx_hal.explain(program_format="fixture-elementwise").chosen is not None
    assert not nx_hal.is_available("gpu")
    assert nx_hal.is_available("cpu")


def test_devices_and_kinds(reg: Registry) -> None:
    assert [d.selector for d in nx_hal.devices()] == ["fixture-hostmem:cpu:0"]
    assert nx_hal.devices("gpu") == []
    with pytest.raises(nx_hal.InvalidArgumentError, match="unknown device kind"):
        nx_hal.devices("warp")


def test_default_device_and_context(reg: Registry, tmp_path: Path) -> None:
    with pytest.warns(nx_hal.FallbackWarning):
        default = nx_hal.default_device()
    assert default.plugin == "fixture-hostmem"
    exe = nx_hal.compile(b"mul f32 3", "fixture-elementwise")
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), x * x)
    other = fixture_registry(tmp_path / "b", "hostmem")
    other.load_all()
    second = other.devices()[0]
    with second as dev:
        assert nx_hal.default_device() is dev
        assert nx_hal.put(x).device is second
    assert nx_hal.default_device() is default
    nx_hal.set_default_device(second)
    assert nx_hal.default_device() is second


def test_device_info_and_program_loading(reg: Registry, tmp_path: Path) -> None:
    dev = nx_hal.device("cpu")
    info = dev.info()
    assert info["kind"] == "cpu" and info["formats"] == ["fixture-elementwise"]
    prog = tmp_path / "p.txt"
    prog.write_text("neg i32 2,2")
    exe = dev.compile(prog)  # the device's only format
    x = np.array([[1, -2], [3, 4]], np.int32)
    np.testing.assert_array_equal(exe(x)[0].to_numpy(), -x)
    with pytest.raises(nx_hal.InvalidArgumentError, match="expected 1 inputs"):
        exe(x, x)
    with pytest.raises(nx_hal.InvalidArgumentError, match="cannot read program"):
        dev.compile(tmp_path / "missing.onnx")
    with pytest.raises(nx_hal.InvalidArgumentError, match="complex128"):
        dev.put(np.zeros(2, np.complex128))
    buf = dev.put(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(np.from_dlpack(buf), np.arange(3))
    np.testing.assert_array_equal(np.asarray(buf), np.arange(3))


@pytest.mark.parametrize(("prefer", "message"), [
    (["garbage", "cpu"], "'garbage' names no device kind (cpu, gpu, tpu, npu, ipu, other) and no plugin nx_hal "
                         "knows (fixture_hostmem, fixture_other_major, graphcore, npu, tpu)"),
    (["gpus", "cpu"], "'gpus' names no device kind (cpu, gpu, tpu, npu, ipu, other) and no plugin nx_hal "
                      "knows (fixture_hostmem, fixture_other_major, graphcore, npu, tpu); did you mean 'gpu'?"),
    (["cpu", "fixture_hostmen:cpu"], "'fixture_hostmen:cpu' names no device kind (cpu, gpu, tpu, npu, ipu, other) "
                                     "and no plugin nx_hal knows (fixture_hostmem, fixture_other_major, graphcore, "
                                     "npu, tpu); did you mean 'fixture_hostmem'?"),
])
def test_a_preference_naming_no_known_plugin_is_a_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefer: list[str], message: str) -> None:
    """Not a preference skipped with "pip install nx-hal-garbage": a typo, said
    at configure() with where it was set, even after a match; the registry
    in use stays."""
    libs = tmp_path / "libs"
    for name in ("hostmem", "other_major"):
        build_fixture(name, libs)
    monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(libs))
    monkeypatch.setenv("NX_HAL_DISABLE", "npu,tpu,graphcore")
    monkeypatch.setenv("NX_HAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(api, "_registry", None)
    monkeypatch.setattr(api, "_default", None)
    before = nx_hal.configure(no_config=True, prefer=["cpu"])
    with pytest.raises(nx_hal.ConfigError) as err:
        nx_hal.configure(no_config=True, prefer=prefer)
    assert err.value.message == f"prefer (argument 'prefer'): {message}"
    assert api.registry() is before
    assert nx_hal.device().plugin == "fixture_hostmem"


def test_preferences_may_name_nx_hals_own_plugins_when_not_installed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    r = fixture_registry(tmp_path, "hostmem", prefer=["graphcore", "tpu:gpu", "npu:npu!", "fixture-hostmem"])
    r.load_all()
    monkeypatch.setattr(api, "_registry", r)
    report = nx_hal.explain()
    assert [s.selector for s in report.skipped] == ["graphcore", "tpu:gpu", "npu:npu!"]
    assert report.chosen is None  # the required npu:npu! ends the walk, with its reason


def test_an_explicit_selector_naming_nothing_known_is_an_invalid_argument(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = fixture_registry(tmp_path, "hostmem")
    r.load_all()
    monkeypatch.setattr(api, "_registry", r)
    with pytest.raises(nx_hal.InvalidArgumentError) as err:
        nx_hal.device("fixture-hostmen:cpu")
    assert err.value.message.startswith("'fixture-hostmen:cpu' names no device kind")
    assert err.value.message.endswith("; did you mean 'fixture-hostmem'?")
    with pytest.raises(nx_hal.InvalidArgumentError, match="did you mean 'gpu'"):
        nx_hal.explain("gpus")
    assert not nx_hal.is_available("graphcore")  # nx_hal's own plugin, not installed: known, not a typo

