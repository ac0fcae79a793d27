"""The converter interface (nx_hal.converter): the stand-in used where no
converter was given, a device's StableHLO version, and the one check of the
``input_shapes`` compile option."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nx_hal.converter import NO_CONVERTER, PreparedOnnx, check_input_shapes, check_precision, target_version_of
from nx_hal.errors import InvalidArgumentError, UnavailableError

WHY = "ONNX → StableHLO needs a converter, and this plugin record was given none"


# -- NO_CONVERTER --------------------------------------------------------------------


def test_no_converter_says_why_it_is_unavailable() -> None:
    assert NO_CONVERTER.available() == WHY
    assert NO_CONVERTER.prepare_onnx(b"\x08\x07", plugin="tpu") == PreparedOnnx(b"\x08\x07")


def test_a_prepared_model_cannot_be_changed_in_place() -> None:
    # One PreparedOnnx is shared by every compile that meets it in the memo
    # in front of the store: a change made through one would reach the others.
    prepared = NO_CONVERTER.prepare_onnx(b"\x08\x07", plugin="tpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.model = b"other"  # type: ignore[misc]
    assert prepared.model == b"\x08\x07"


def test_no_converter_cannot_convert(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError) as err:
        NO_CONVERTER.to_stablehlo(b"onnx", input_shapes={}, target_version="1.9.0", cache_dir=tmp_path,
                                  use_cache=True)
    assert (err.value.message, err.value.plugin) == (WHY, None)
    with pytest.raises(UnavailableError) as err:
        NO_CONVERTER.reserialize(b"module", "1.9.0", plugin="tpu")
    assert (err.value.message, err.value.plugin) == (WHY, "tpu")
    assert str(err.value) == f"[tpu] UNAVAILABLE: {WHY}"
    with pytest.raises(UnavailableError) as err:
        NO_CONVERTER.donate(b"module", "1.9.0", (0,), plugin="tpu")
    assert (err.value.message, err.value.plugin) == (f"donate_argnums needs the program rewritten: {WHY}", "tpu")


def test_no_converter_passes_stablehlo_unless_verification_is_required() -> None:
    NO_CONVERTER.check_stablehlo(b"module", policy="auto", plugin="tpu", cache_dir=None)  # no error
    with pytest.raises(UnavailableError) as err:
        NO_CONVERTER.check_stablehlo(b"module", policy="require", plugin="tpu", cache_dir=None)
    assert (err.value.message, err.value.plugin) == (f"cannot verify the program: {WHY}", "tpu")


def test_no_converter_compiles_onnx_as_given() -> None:
    """Without nx_hal.onnx's converter nothing reads the model: no rewrite, no index checks."""
    prepared = NO_CONVERTER.prepare_onnx(b"\x08\x07onnx", plugin="npu")
    assert prepared.model == b"\x08\x07onnx" and prepared.index_checks == ()


# -- target_version_of -----------------------------------------------------------------


class Dev:
    def __init__(self, attributes: Any) -> None:
        self.attributes = attributes


@pytest.mark.parametrize(
    ("attributes", "version"),
    [
        ({"stablehlo_version": "1.9.3"}, "1.9.3"),
        ({"stablehlo_current_version": "1.10.0"}, "1.10.0"),  # the other name a plugin may use
        ({"stablehlo_version": "1.9.3", "stablehlo_current_version": "1.10.0"}, "1.9.3"),
        ({"stablehlo_version": "latest", "stablehlo_current_version": "1.8.2"}, "1.8.2"),
        ({"stablehlo_version": 1.9, "stablehlo_current_version": "1.8.2"}, "1.8.2"),
        ({"stablehlo_version": "1.9"}, None),
        ({"stablehlo_version": "v1.9.3"}, None),
        ({"stablehlo_version": "1.9.3-rc1"}, None),
        ({"stablehlo_version": b"1.9.3"}, None),
        ({"vendor": "1.9.3"}, None),
        ({}, None),
        (None, None),
        ([("stablehlo_version", "1.9.3")], None),  # not a mapping
    ],
)
def test_target_version_of(attributes: Mapping[str, object] | None, version: str | None) -> None:
    assert target_version_of(Dev(attributes)) == version


def test_target_version_of_a_device_without_attributes() -> None:
    assert target_version_of(object()) is None


# -- check_input_shapes ------------------------------------------------------------------


def test_input_shapes_sorted_and_made_lists() -> None:
    shapes = check_input_shapes({"mask": (1, 128), "x": [np.int64(2), 3], "scalar": ()})
    assert shapes == {"mask": [1, 128], "scalar": [], "x": [2, 3]}
    assert list(shapes) == ["mask", "scalar", "x"]
    assert all(type(d) is int for dims in shapes.values() for d in dims)
    assert check_input_shapes(None) == {}
    assert check_input_shapes({}) == {}


def test_zero_is_a_dimension_and_minus_one_is_not() -> None:
    assert check_input_shapes({"x": [0, 4]}) == {"x": [0, 4]}
    with pytest.raises(InvalidArgumentError) as err:
        check_input_shapes({"x": [2, -1]}, plugin="tpu")
    assert (err.value.message, err.value.plugin) == ("input_shapes['x'] has dimension -1, expected >= 0", "tpu")


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ("garbage", "input_shapes must be a mapping of input names to dims, like {'x': (1, 3, 224, 224)}, "
                    "got str 'garbage'"),
        ([("x", [2, 4])], "input_shapes must be a mapping of input names to dims, like {'x': (1, 3, 224, 224)}, "
                          "got list [('x', [2, 4])]"),
        ({0: [2, 4]}, "input_shapes keys must be input names, got 0"),
        ({"x": "2,4"}, "input_shapes['x'] must be a sequence of ints, got '2,4'"),
        ({"x": b"\x02\x04"}, "input_shapes['x'] must be a sequence of ints, got b'\\x02\\x04'"),
        ({"x": 2}, "input_shapes['x'] must be a sequence of ints, got 2"),
        ({"x": [2.0, 4]}, "input_shapes['x'] must be a sequence of ints, got [2.0, 4]"),
        ({"x": [True, 4]}, "input_shapes['x'] must be a sequence of ints, got [True, 4]"),
        ({"a": [1], "x": [2, -3]}, "input_shapes['x'] has dimension -3, expected >= 0"),
    ],
)
def test_bad_input_shapes(shapes: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        check_input_shapes(shapes, plugin="npu")
    assert (err.value.message, err.value.plugin) == (message, "npu")


def test_long_values_are_cut_in_the_message() -> None:
    with pytest.raises(InvalidArgumentError) as err:
        check_input_shapes("x" * 200)
    assert err.value.message == ("input_shapes must be a mapping of input names to dims, like "
                                 f"{{'x': (1, 3, 224, 224)}}, got str '{'x' * 79}")
    assert err.value.plugin is None
    with pytest.raises(InvalidArgumentError) as err:
        check_input_shapes({"x": [1] * 40 + [1.5]})
    assert err.value.message == "input_shapes['x'] must be a sequence of ints, got [" + "1, " * 26 + "1"


def test_precision_is_checked_and_f32_means_the_models_own_types() -> None:
    assert check_precision(None) is None  # not given
    assert check_precision("f32") is None and check_precision("f32", given=True) is None
    assert check_precision("bf16") == "bf16" and check_precision("f16", given=True) == "f16"
    for bad in ("fp8", "F16", "", 16, True):
        with pytest.raises(InvalidArgumentError, match=r"option 'precision': expected one of f32, bf16, f16, got"):
            check_precision(bad, plugin="tpu")
    with pytest.raises(InvalidArgumentError, match="got None") as raised:
        check_precision(None, plugin="tpu", given=True)  # a user's explicit None
    assert raised.value.plugin == "tpu"
