"""The standard's linear algebra functions of the main namespace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym
from nx_hal.array_api._manipulation import normalize_axis

__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot"]


def _matmul(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    x, y = g.convert(x, dtype), g.convert(y, dtype)
    xv, yv = x.ndim == 1, y.ndim == 1
    if xv:
        x = g.reshape(x, (1, x.shape[0]))
    if yv:
        y = g.reshape(y, (y.shape[0], 1))
    batch = tuple(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    x = g.broadcast(x, batch + x.shape[-2:])
    y = g.broadcast(y, batch + y.shape[-2:])
    nb = len(batch)
    out = g.dot(x, y, (tuple(range(nb)), tuple(range(nb))), ((nb + 1,), (nb,)))
    shape = batch + (() if xv else (x.shape[-2],)) + (() if yv else (y.shape[-1],))
    return g.reshape(out, shape)


def _promote(x1: Array, x2: Array, name: str) -> np.dtype[Any]:
    if x1._device is not x2._device:
        raise ValueError(f"{name}: arrays on different devices ({x1._device.selector}, {x2._device.selector})")
    if x1._dtype.kind == "b" or x2._dtype.kind == "b":
        raise TypeError(f"{name} takes numeric arrays")
    return _dtypes.promote(x1._dtype, x2._dtype)


# Operand dtypes and shapes already checked -> matmul's static argument.
_checked: dict[tuple[Any, ...], str] = {}


def matmul(x1: Array, x2: Array, /) -> Array:
    """The matrix product (1-d operands are vectors; leading axes broadcast)."""
    if x1._device is x2._device:
        found = _checked.get((x1._dtype, x1._shape, x2._dtype, x2._shape))
        if found is not None:
            return apply(_matmul, (x1, x2), found)  # type: ignore[no-any-return]
    dtype = _promote(x1, x2, "matmul")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: operands must have at least 1 dimension")
    k1 = x1._shape[-1]
    k2 = x2._shape[0] if x2.ndim == 1 else x2._shape[-2]
    if k1 != k2:
        raise ValueError(f"matmul: shapes {x1._shape} and {x2._shape} do not align ({k1} != {k2})")
    try:
        np.broadcast_shapes(x1._shape[:-2], x2._shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch shapes of {x1._shape} and {x2._shape} do not broadcast") from None
    if len(_checked) < 4096:
        _checked[(x1._dtype, x1._shape, x2._dtype, x2._shape)] = dtype.name
    return apply(_matmul, (x1, x2), dtype.name)  # type: ignore[no-any-return]


def _mT(g: Graph, x: Sym) -> Sym:
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return g.transpose(x, perm)


def matrix_transpose(x: Array, /) -> Array:
    """``x`` with its last two axes swapped."""
    if x.ndim < 2:
        raise ValueError("matrix_transpose needs an array of at least 2 dimensions")
    return apply(_mT, (x,))  # type: ignore[no-any-return]


def _tensordot(g: Graph, x: Sym, y: Sym, xa: tuple[int, ...], ya: tuple[int, ...], dtype: str) -> Sym:
    return g.dot(g.convert(x, dtype), g.convert(y, dtype), ((), ()), (xa, ya))


def tensordot(x1: Array, x2: Array, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2) -> Array:
    """Sums of products over ``axes`` (the last n of x1 with the first n of x2, or two lists)."""
    dtype = _promote(x1, x2, "tensordot")
    if isinstance(axes, int):
        if axes < 0 or axes > min(x1.ndim, x2.ndim):
            raise ValueError(f"tensordot: axes={axes} is out of range")
        xa = tuple(range(x1.ndim - axes, x1.ndim))
        ya = tuple(range(axes))
    else:
        xa = tuple(normalize_axis(a, x1.ndim, "tensordot") for a in axes[0])
        ya = tuple(normalize_axis(a, x2.ndim, "tensordot") for a in axes[1])
    if len(xa) != len(ya) or any(x1._shape[a] != x2._shape[b] for a, b in zip(xa, ya, strict=True)):
        raise ValueError(f"tensordot: axes {xa} of {x1._shape} and {ya} of {x2._shape} do not match")
    return apply(_tensordot, (x1, x2), xa, ya, dtype.name)  # type: ignore[no-any-return]


def _vecdot(g: Graph, x: Sym, y: Sym, axis: int, dtype: str) -> Sym:
    shape = tuple(np.broadcast_shapes(x.shape, y.shape))
    x = g.convert(x, dtype)
    if dtype.startswith("complex"):  # the standard's vecdot conjugates its first operand
        x = g.complex(g.real(x), g.unary("neg", g.imag(x)))
    x = g.broadcast(x, shape)
    y = g.broadcast(g.convert(y, dtype), shape)
    axis = axis % len(shape)
    return g.reduce("sum", g.binary("mul", x, y), (axis,))


def vecdot(x1: Array, x2: Array, /, *, axis: int = -1) -> Array:
    """Dot products of vectors along ``axis``, broadcasting the others."""
    dtype = _promote(x1, x2, "vecdot")
    try:
        shape = tuple(np.broadcast_shapes(x1._shape, x2._shape))
    except ValueError:
        raise ValueError(f"vecdot: shapes {x1._shape} and {x2._shape} do not broadcast") from None
    if not -len(shape) <= axis < 0 and not 0 <= axis < min(x1.ndim, x2.ndim):
        raise ValueError(f"vecdot: axis {axis} is out of range")
    a = axis % len(shape)
    if x1._shape[a - len(shape) + x1.ndim] != x2._shape[a - len(shape) + x2.ndim]:
        raise ValueError(f"vecdot: the vectors along axis {axis} differ in length")
    return apply(_vecdot, (x1, x2), a - len(shape), dtype.name)  # type: ignore[no-any-return]
