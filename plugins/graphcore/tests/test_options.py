"""Option checks: the C library (through client_create / executable_compile)
and the pydantic models must refuse the same bad values, naming the option."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import Build, run_driver
from nx_hal_graphcore.options import GraphcoreCompileOptions, GraphcoreOptions
from pydantic import ValidationError

KNOWN = "num_ipus, precision, available_memory_proportion, half_partials, compile_only, ipu_model"


def c_create(build: Build, *options: str) -> dict[str, str]:
    return run_driver(build, build.library, "create", *options)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("i:num_ipus=3", "option 'num_ipus' must be a power of two from 1 to 64, got 3"),
        ("i:num_ipus=0", "option 'num_ipus' must be from 1 to 64, got 0"),
        ("i:num_ipus=-4", "option 'num_ipus' must be from 1 to 64, got -4"),
        ("i:num_ipus=128", "option 'num_ipus' must be from 1 to 64, got 128"),
        ("s:num_ipus=4", "option 'num_ipus' must be int64, got string"),
        ("d:available_memory_proportion=0", "option 'available_memory_proportion' must be in (0, 1], got 0"),
        ("d:available_memory_proportion=1.5", "option 'available_memory_proportion' must be in (0, 1], got 1.5"),
        ("d:available_memory_proportion=-0.2", "option 'available_memory_proportion' must be in (0, 1], got -0.2"),
        ("d:available_memory_proportion=nan", "option 'available_memory_proportion' must be in (0, 1], got nan"),
        ("i:available_memory_proportion=1", "option 'available_memory_proportion' must be double, got int64"),
        ("s:precision=float8", "option 'precision' must be \"float16\" or \"float32\", got \"float8\""),
        ("s:precision=FLOAT16", "option 'precision' must be \"float16\" or \"float32\", got \"FLOAT16\""),
        ("b:half_partials=2", "option 'half_partials' must be 0 or 1, got 2"),
        ("s:compile_only=yes", "option 'compile_only' must be bool, got string"),
        ("i:ipu_model=1", "option 'ipu_model' must be bool, got int64"),
        ("i:num_ipu=4", f"unknown option 'num_ipu' (known: {KNOWN})"),
    ],
)
def test_c_rejects_bad_client_option(build: Build, option: str, message: str) -> None:
    out = c_create(build, option)
    assert out["create.status"] == "INVALID_ARGUMENT"
    assert out["create.message"] == message
    assert out["client"] == "NULL"


def test_c_rejects_compile_only_with_ipu_model(build: Build) -> None:
    out = c_create(build, "b:compile_only=1", "b:ipu_model=1")
    assert out["create.status"] == "INVALID_ARGUMENT"
    assert out["create.message"].startswith(
        "options 'compile_only' and 'ipu_model' cannot both be true")


def test_c_rejects_repeated_option(build: Build) -> None:
    out = c_create(build, "i:num_ipus=2", "i:num_ipus=4")
    assert out["create.message"] == "option 'num_ipus' is given more than once"


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("i:num_ipus=1",),
        ("i:num_ipus=64",),
        ("d:available_memory_proportion=1.0",),
        ("d:available_memory_proportion=0.3", "s:precision=float16", "b:half_partials=1"),
        ("s:precision=float32", "b:compile_only=1"),
        ("b:ipu_model=1", "i:num_ipus=2"),
    ],
)
def test_c_valid_options_reach_the_probe(build: Build, options: tuple[str, ...]) -> None:
    """Valid options pass the checks; this machine then has no SDK."""
    out = c_create(build, *options)
    assert out["create.status"] == "UNAVAILABLE", out
    assert "the Poplar backend was not built (no Poplar SDK" in out["create.message"]


def run_with_compile_options(build: Build, *options: str) -> dict[str, str]:
    return run_driver(build, build.testhooks, "run", "add 1 f32 2", *options,
                      env={"NXHAL_GRAPHCORE_TEST_BACKEND": str(build.fake_backend)})


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("Cs:precision=float8", "option 'precision' must be \"float16\" or \"float32\", got \"float8\""),
        ("Cd:available_memory_proportion=2", "option 'available_memory_proportion' must be in (0, 1], got 2"),
        ("Cb:compile_only=1", "unknown option 'compile_only' (known: precision, available_memory_proportion, half_partials)"),
    ],
)
def test_c_rejects_bad_compile_option(build: Build, option: str, message: str) -> None:
    out = run_with_compile_options(build, option)
    assert out["compile.status"] == "INVALID_ARGUMENT"
    assert out["compile.message"] == message


def test_c_accepts_compile_options(build: Build) -> None:
    out = run_with_compile_options(build, "Cs:precision=float16", "Cd:available_memory_proportion=0.6",
                                   "Cb:half_partials=1")
    assert out["compile.status"] == "OK"


# --- pydantic ---------------------------------------------------------------


def field_errors(exc: ValidationError) -> dict[str, str]:
    return {".".join(str(p) for p in e["loc"]): e["msg"] for e in exc.errors()}


@pytest.mark.parametrize("value", [3, 0, -2, 6, 128])
def test_model_num_ipus_power_of_two(value: int) -> None:
    with pytest.raises(ValidationError) as info:
        GraphcoreOptions(num_ipus=value)
    assert field_errors(info.value) == {
        "num_ipus": f"Value error, num_ipus must be a power of two from 1 to 64, got {value}"}


def test_model_num_ipus_not_bool() -> None:
    with pytest.raises(ValidationError) as info:
        GraphcoreOptions(num_ipus=True)
    assert "num_ipus" in field_errors(info.value)


@pytest.mark.parametrize("value", [0, 0.0, -0.5, 1.0001, 2, math.nan])
def test_model_available_memory_proportion_range(value: float) -> None:
    with pytest.raises(ValidationError) as info:
        GraphcoreOptions(available_memory_proportion=value)
    assert list(field_errors(info.value)) == ["available_memory_proportion"]


def test_model_precision_literal() -> None:
    with pytest.raises(ValidationError) as info:
        GraphcoreOptions(precision="bfloat16")  # type: ignore[arg-type]
    assert list(field_errors(info.value)) == ["precision"]


def test_model_forbids_unknown_options() -> None:
    with pytest.raises(ValidationError) as info:
        GraphcoreOptions(num_ipu=4)  # type: ignore[call-arg]
    assert list(field_errors(info.value)) == ["num_ipu"]
    with pytest.raises(ValidationError):
        GraphcoreCompileOptions(ipu_model=True)  # type: ignore[call-arg]


def test_model_valid_values_and_types() -> None:
    opts = GraphcoreOptions(num_ipus=8, precision="float16", available_memory_proportion=1,
                            half_partials=True, compile_only=False, ipu_model=False)
    dumped = opts.model_dump(exclude_none=True)
    assert dumped == {"num_ipus": 8, "precision": "float16", "available_memory_proportion": 1.0,
                      "half_partials": True, "compile_only": False, "ipu_model": False}
    # The core maps float -> DOUBLE, int -> INT64, bool -> BOOL: the C side's types.
    assert type(dumped["available_memory_proportion"]) is float
    assert type(dumped["num_ipus"]) is int
    assert GraphcoreOptions().model_dump(exclude_none=True) == {}


def test_model_accepts_environment_strings() -> None:
    """Values from NX_HAL_* variables arrive as text."""
    opts = GraphcoreOptions.model_validate({"num_ipus": "16", "available_memory_proportion": "0.25",
                                            "ipu_model": "true"})
    assert (opts.num_ipus, opts.available_memory_proportion, opts.ipu_model) == (16, 0.25, True)


def test_model_and_c_agree_on_field_names(build: Build) -> None:
    """Every model field is an option the C library knows, and the reverse."""
    out = run_driver(build, build.library, "create", "i:no_such_option=1")
    known = out["create.message"].split("(known: ", 1)[1].rstrip(")").split(", ")
    assert sorted(known) == sorted(GraphcoreOptions.model_fields)
    assert set(GraphcoreCompileOptions.model_fields) <= set(known)


def test_models_are_importable_without_the_core() -> None:
    import nx_hal_graphcore

    assert Path(nx_hal_graphcore.__file__).parent.name == "nx_hal_graphcore"
