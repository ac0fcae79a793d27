"""Argument types: each checks what the user typed when the line is read,
so a mistake is reported by argparse as one line naming the argument."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["existing_file", "positive_int", "percent_or_count", "shape_spec", "input_spec", "parse_shape",
           "selector"]


class UsageError(Exception):
    """A mistake on the command line or in a command's input, found before
    any work: exit status 2 (nx_hal.cli.app). Here, below the app and the
    commands, so both can raise it without importing each other."""


def existing_file(text: str) -> Path:
    """A path that names a readable file."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {text}")
    return path


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A duration in seconds, above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text}")
    return value


def percent_or_count(text: str) -> tuple[float, bool]:
    """``95%`` (a pass rate) or ``1400`` (a count of passing cases), as
    (value, is_percent)."""
    is_percent = text.endswith("%")
    number = text[:-1] if is_percent else text
    try:
        value = float(number) if is_percent else int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is neither a count of passing cases (1400) nor a pass rate (95%)") from None
    if value < 0 or (is_percent and value > 100):
        raise argparse.ArgumentTypeError(f"'{text}' is out of range")
    return float(value), is_percent


def output_file(text: str) -> Path:
    """A file to write, in a directory that exists: like ``cp``, no
    directory is made for it (a typo in one is an error, before any work)."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: no directory {path.parent}")
    return path


def target_spec(text: str) -> str:
    """A plugin's name or a StableHLO version (MAJOR.MINOR.PATCH): one that
    starts with a digit is meant as a version and must be one."""
    from nx_hal.converter import STABLEHLO_VERSION

    if text[:1].isdigit() and not STABLEHLO_VERSION.match(text):
        raise argparse.ArgumentTypeError(f"'{text}': not a StableHLO version (MAJOR.MINOR.PATCH, e.g. 1.9.0) "
                                         "or a plugin's name")
    return text


def selector(text: str) -> str:
    """A device selector as written (``npu``, ``tpu:cpu:0``, ``cpu!``): its
    syntax here; whether it names anything installed, once plugins are found
    (nx_hal.cli.commands)."""
    from nx_hal.api import _validation_reason
    from nx_hal.selectors import Selector

    try:
        Selector.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(_validation_reason(exc)) from None
    return text


def parse_shape(dims: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` or ``"1x3x224x224"`` (empty: a scalar); every
    dimension a whole number of at least 1."""
    if not dims.strip():
        return ()
    # One separator throughout: "1,x" is a dimension 'x', not 1 and two empty ones.
    parts = dims.split(",") if "," in dims else dims.split("x")
    shape = []
    for part in parts:
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"dimension '{part}' is not a whole number of at least 1")
        shape.append(int(part))
    return tuple(shape)


def shape_spec(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D0,D1,...``."""
    name, sep, dims = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"'{text}': expected NAME=D0,D1,... (e.g. image=1,3,224,224)")
    try:
        return name, parse_shape(dims)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{text}': {exc}") from None


def input_spec(text: str) -> tuple[str, Path]:
    """``NAME=FILE.npy``, the file existing."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"'{text}': expected NAME=FILE.npy")
    return name, existing_file(path)
