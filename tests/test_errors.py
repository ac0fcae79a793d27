"""Errors: the exception class for each ABI status code, and the text a user sees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nx_hal.errors import (
    AbiMismatchError,
    CancelledError,
    ConfigError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    InvalidProgramError,
    NotFoundError,
    NxHalError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
    error_for_code,
)

# nxhal_status_code_t (include/nx_hal/nx_hal.h): value, the class, its code name.
ABI_CODES = [
    (1, InvalidArgumentError, "INVALID_ARGUMENT"),
    (2, NotFoundError, "NOT_FOUND"),
    (3, UnimplementedError, "UNIMPLEMENTED"),
    (4, UnavailableError, "UNAVAILABLE"),
    (5, ResourceExhaustedError, "RESOURCE_EXHAUSTED"),
    (6, FailedPreconditionError, "FAILED_PRECONDITION"),
    (7, DeadlineExceededError, "DEADLINE_EXCEEDED"),
    (8, InternalError, "INTERNAL"),
    (9, AbiMismatchError, "ABI_MISMATCH"),
    (10, CancelledError, "CANCELLED"),
    (11, InvalidProgramError, "INVALID_PROGRAM"),
]


@pytest.mark.parametrize(("code", "cls", "name"), ABI_CODES)
def test_error_for_code(code: int, cls: type[NxHalError], name: str) -> None:
    err = error_for_code(code, "it went wrong", plugin="npu")
    assert type(err) is cls
    assert err.code == name
    assert err.message == "it went wrong"
    assert err.plugin == "npu"
    assert str(err) == f"[npu] {name}: it went wrong"


@pytest.mark.parametrize(("code", "cls", "name"), ABI_CODES)
def test_error_for_code_from_the_core(code: int, cls: type[NxHalError], name: str) -> None:
    err = error_for_code(code, "no plugin said this")
    assert type(err) is cls
    assert err.plugin is None
    assert str(err) == f"{name}: no plugin said this"


def test_table_matches_the_abi_header() -> None:
    header = (Path(__file__).parents[1] / "include" / "nx_hal" / "nx_hal.h").read_text()
    body = header[header.index("NXHAL_OK = 0"):]
    body = body[:body.index("}")]
    values = {int(v): name for name, v in re.findall(r"NXHAL_([A-Z_]+) = (\d+)", body)}
    assert values == {0: "OK"} | {code: name for code, _, name in ABI_CODES}


@pytest.mark.parametrize("code", [0, 12, 99, -1])
def test_unknown_code_is_internal(code: int) -> None:
    err = error_for_code(code, "strange", plugin="tpu")
    assert type(err) is InternalError
    assert err.plugin == "tpu"
    assert err.message == f"unknown status code {code}: strange"
    assert str(err) == f"[tpu] INTERNAL: unknown status code {code}: strange"


def test_raised_error_shows_plugin_and_code() -> None:
    with pytest.raises(NotFoundError) as info:
        raise NotFoundError("no device 'npu:3'", plugin="npu")
    assert str(info.value) == "[npu] NOT_FOUND: no device 'npu:3'"
    assert info.value.args == ("[npu] NOT_FOUND: no device 'npu:3'",)


def test_empty_plugin_name_gives_no_brackets() -> None:
    assert str(UnavailableError("nothing to run on", plugin="")) == "UNAVAILABLE: nothing to run on"
    assert str(UnavailableError("nothing to run on")) == "UNAVAILABLE: nothing to run on"


@pytest.mark.parametrize(("cls", "builtin"), [
    (InvalidArgumentError, ValueError),
    (InvalidProgramError, ValueError),
    (ConfigError, ValueError),
    (NotFoundError, LookupError),
    (UnimplementedError, NotImplementedError),
    (ResourceExhaustedError, MemoryError),
    (DeadlineExceededError, TimeoutError),
])
def test_errors_are_also_builtin_kinds(cls: type[NxHalError], builtin: type[Exception]) -> None:
    with pytest.raises(builtin):
        raise cls("boom", plugin="x")


def test_invalid_program_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        raise error_for_code(11, "cannot parse the model", plugin="npu")
    assert str(info.value) == "[npu] INVALID_PROGRAM: cannot parse the model"


def test_config_error_code() -> None:
    assert str(ConfigError("bad value")) == "INVALID_ARGUMENT: bad value"
