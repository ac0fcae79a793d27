"""The standard's data type functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym

__all__ = ["astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]


def _convert(g: Graph, x: Sym, dtype: str) -> Sym:
    return g.convert(x, dtype)


def astype(x: Array, dtype: object, /, *, copy: bool = True, device: object = None) -> Array:
    """``x`` converted to ``dtype`` (on ``device`` if given)."""
    dt = _dtypes.as_dtype(dtype)
    if device is not None:
        x = x.to_device(device)
    _dtypes.check_dtype(dt, x._device)
    if dt == x._dtype and not copy:
        return x
    return apply(_convert, (x,), dt.name)  # type: ignore[no-any-return]


def _dtype_of(value: Any) -> np.dtype[Any]:
    return value._dtype if isinstance(value, Array) else _dtypes.as_dtype(value)


def can_cast(from_: object, to: object, /) -> bool:
    """Whether the standard's promotion rules turn ``from_`` into ``to``."""
    a, b = _dtype_of(from_), _dtypes.as_dtype(to)
    try:
        return bool(_dtypes.promote(a, b) == b)
    except TypeError:
        return False


class finfo_object(NamedTuple):
    """Machine limits of a float dtype."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype[Any]


class iinfo_object(NamedTuple):
    """Machine limits of an integer dtype."""

    bits: int
    max: int
    min: int
    dtype: np.dtype[Any]


def finfo(type: object, /) -> finfo_object:
    """Limits of a float dtype (or of an array's dtype)."""
    dt = _dtype_of(type)
    if dt.kind not in "fc":
        raise ValueError(f"finfo takes a float or complex dtype, not {dt}")
    # A complex dtype's limits are its real component's (the standard's rule).
    real = np.dtype(dt.char.lower()) if dt.kind == "c" else dt
    info = np.finfo(real)
    return finfo_object(int(info.bits), float(info.eps), float(info.max), float(info.min),
                        float(info.smallest_normal), real)


def iinfo(type: object, /) -> iinfo_object:
    """Limits of an integer dtype (or of an array's dtype)."""
    dt = _dtype_of(type)
    if dt.kind not in "iu":
        raise ValueError(f"iinfo takes an integer dtype, not {dt}")
    info = np.iinfo(dt)
    return iinfo_object(int(info.bits), int(info.max), int(info.min), dt)


_KINDS: dict[str, Callable[[np.dtype[Any]], bool]] = {
    "bool": lambda d: d.kind == "b",
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": lambda d: d.kind == "f",
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d.kind in "iufc",
}


def isdtype(dtype: object, kind: object) -> bool:
    """Whether ``dtype`` is of ``kind`` (a dtype, a kind name, or a tuple of them)."""
    dt = _dtypes.as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r} (one of {', '.join(_KINDS)})")
        return bool(_KINDS[kind](dt))
    return bool(dt == _dtypes.as_dtype(kind))


def result_type(*arrays_and_dtypes: object) -> np.dtype[Any]:
    """The dtype the standard's promotion gives for the arrays, dtypes and scalars."""
    dtypes = [_dtype_of(v) for v in arrays_and_dtypes if not isinstance(v, (bool, int, float, complex))]
    scalars = [v for v in arrays_and_dtypes if isinstance(v, (bool, int, float, complex))]
    if not dtypes:
        raise ValueError("result_type needs at least one array or dtype")
    out = dtypes[0]
    for d in dtypes[1:]:
        out = _dtypes.promote(out, d)
    for s in scalars:
        kind = _dtypes.kind_of(out)
        if isinstance(s, complex) or (isinstance(s, float) and kind != "float") or (
                isinstance(s, int) and not isinstance(s, bool) and kind == "bool"):
            raise TypeError(f"result_type: a Python {type(s).__name__} does not promote with {out}")
    return out
