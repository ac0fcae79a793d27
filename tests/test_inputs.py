"""Small input checks on the Python API (issue #11, item 9): a DLPack export
to a device the buffer is not on, a memory limit that is not a whole number
of bytes, and an ``input_shapes`` compile option of the wrong shape. Run on
the npu plugin's CPU device and tpu:cpu, each skipped with the reason when
it is not installed or not usable here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal.converter import check_input_shapes
from nx_hal.device import Device
from nx_hal.errors import InvalidArgumentError
from tests.onnx_models import mlp
from tests.plugin_env import installed_device

SELECTORS = ["npu:cpu", "tpu:cpu"]


@pytest.fixture(params=SELECTORS)
def device(request: pytest.FixtureRequest) -> Device:
    return installed_device(request.param)


# -- Buffer.__dlpack__(dl_device=...) ---------------------------------------------


@pytest.mark.parametrize("dl_device", [(2, 0), (1, 1), (13, 0)])
@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_dlpack_to_another_device_raises(device: Device, dl_device: tuple[int, int],
                                         max_version: tuple[int, int] | None) -> None:
    buf = device.put(np.arange(6, dtype=np.float32))
    with pytest.raises(BufferError, match=rf"device \({dl_device[0]}, {dl_device[1]}\)"):
        buf.__dlpack__(dl_device=dl_device, max_version=max_version)


def test_dlpack_to_the_host_still_exports(device: Device) -> None:
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = device.put(host)
    assert type(buf.__dlpack__(dl_device=(1, 0), max_version=(1, 0))).__name__ == "PyCapsule"
    np.testing.assert_array_equal(np.from_dlpack(buf), host)


# -- Device.set_memory_limit -------------------------------------------------------


@pytest.mark.parametrize("limit", [1.5, 4096.0, "4096", True, b"1"])
def test_memory_limit_must_be_an_int(device: Device, limit: Any) -> None:
    with pytest.raises(TypeError, match="int number of bytes"):
        device.set_memory_limit(limit)
    assert device.memory_stats().bytes_limit is None, "a refused limit must not be applied"


@pytest.mark.parametrize("limit", [-1, 0, 2**64])
def test_memory_limit_out_of_range(device: Device, limit: int) -> None:
    with pytest.raises(InvalidArgumentError, match="memory limit"):
        device.set_memory_limit(limit)
    assert device.memory_stats().bytes_limit is None


def test_memory_limit_accepts_ints(device: Device) -> None:
    try:
        # numpy ints are whole numbers too (accepted through __index__; the annotation says int)
        device.set_memory_limit(np.int64(1 << 30))  # type: ignore[arg-type]
        assert device.memory_stats().bytes_limit == 1 << 30
        device.set_memory_limit(4096)
        assert device.memory_stats().bytes_limit == 4096
    finally:
        device.set_memory_limit(None)
    assert device.memory_stats().bytes_limit is None


# -- compile(input_shapes=...) -------------------------------------------------------


@pytest.mark.parametrize(
    "shapes,message",
    [
        ("garbage", "must be a mapping"),
        ([("x", [2, 4])], "must be a mapping"),
        ({"x": "2,4"}, r"input_shapes\['x'\] must be a sequence of ints"),
        ({"x": 2}, r"input_shapes\['x'\] must be a sequence of ints"),
        ({"x": [2.5, 4]}, r"input_shapes\['x'\] must be a sequence of ints"),
        ({"x": [True, 4]}, r"input_shapes\['x'\] must be a sequence of ints"),
        ({"x": [-2, 4]}, r"input_shapes\['x'\] has dimension -2"),
        ({0: [2, 4]}, "keys must be input names"),
    ],
)
def test_compile_rejects_bad_input_shapes(device: Device, shapes: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        device.compile(mlp(), "onnx", cache=False, input_shapes=shapes)
    assert info.value.plugin == device.plugin


def test_input_shapes_normalised() -> None:
    shapes = {"b": (2,), "a": [np.int64(3), 4], "c": ()}
    assert check_input_shapes(shapes) == {"a": [3, 4], "b": [2], "c": []}
    assert list(check_input_shapes(shapes)) == ["a", "b", "c"]  # sorted: a stable cache key
    assert check_input_shapes(None) == {}


def test_npu_still_compiles_with_good_input_shapes(device: Device) -> None:
    """npu reads ONNX itself and ignores input_shapes; a valid value must not
    be refused there (tpu would convert through torch-mlir: not needed here)."""
    if not device.selector.startswith("npu"):
        pytest.skip("only npu compiles ONNX without torch-mlir")
    exe = device.compile(mlp(), "onnx", cache=False, input_shapes={"x": [2, 4]})
    out = exe(np.ones((2, 4), np.float32))
    assert np.asarray(out[0] if isinstance(out, (list, tuple)) else out).shape == (2, 3)


# Found by tests/fuzz: inputs that escaped as raw Python errors.
@pytest.mark.parametrize("value, message", [
    (2**64, "does not fit in a signed 64-bit integer"),
    ([1, -(2**70)], "does not fit in a signed 64-bit integer"),
    ("a\0b", "NUL character"),
    ("\udc80", "not encodable as UTF-8"),
])
def test_option_values_c_cannot_hold(value: object, message: str) -> None:
    from nx_hal.options import to_c_options

    with pytest.raises(nx_hal.InvalidArgumentError, match=message):
        to_c_options({"num_replicas": value})
    assert to_c_options({"num_replicas": 2**63 - 1}).count == 1


def test_config_sources_that_are_not_tables_or_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nx_hal.config import load_config

    monkeypatch.setenv("NX_HAL_PLUGINS", '{"npu": 3}')
    with pytest.raises(nx_hal.ConfigError, match="environment variable NX_HAL_PLUGINS.*plugins.npu"):
        load_config(no_config=True)
    monkeypatch.delenv("NX_HAL_PLUGINS")
    bad = tmp_path / "nx_hal.toml"
    bad.write_bytes(b'prefer = "\xff\xfe"\n')
    with pytest.raises(nx_hal.ConfigError, match="not valid TOML: not UTF-8"):
        load_config(config_file=bad)


def test_config_file_name_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by tests/fuzz: an OSError other than 'missing' from the named file."""
    from nx_hal.config import load_config

    monkeypatch.setenv("NX_HAL_CONFIG_FILE", "A" * 300)
    with pytest.raises(nx_hal.ConfigError, match="File name too long"):
        load_config()
