"""The standard's searching, sorting and set functions.

Functions whose result's shape depends on the data (``nonzero``, the
``unique_*`` family) read that data once to learn the shape, as JAX's eager
mode does; the rest run on the device.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._elementwise import Scalar, _result, operands
from nx_hal.array_api._graph import Graph, Sym
from nx_hal.array_api._manipulation import normalize_axis

__all__ = ["argmax", "argmin", "argsort", "nonzero", "searchsorted", "sort", "unique_all", "unique_counts",
           "unique_inverse", "unique_values", "where"]


def _argreduce(g: Graph, x: Sym, kind: str, axis: int | None, keepdims: bool, index: str) -> Sym:
    shape = x.shape
    if axis is None:
        x = g.reshape(x, (x.size,))
        out = g.argreduce(kind, x, 0)
        if keepdims:
            out = g.reshape(out, (1,) * len(shape))
    else:
        out = g.argreduce(kind, x, axis)
        if keepdims:
            out = g.reshape(out, tuple(1 if i == axis else d for i, d in enumerate(shape)))
    return g.convert(out, index)


def _arg(x: Array, kind: str, axis: int | None, keepdims: bool) -> Array:
    name = "arg" + kind
    if x._dtype.kind == "b":
        raise TypeError(f"{name} takes numeric arrays")
    if axis is not None:
        axis = normalize_axis(axis, x.ndim, name)
    if x.size == 0 or (axis is not None and x._shape[axis] == 0):
        raise ValueError(f"{name} of an empty array (or axis) has no answer")
    index = _dtypes.default_int(x._device).name
    return apply(_argreduce, (x,), kind, axis, keepdims, index)  # type: ignore[no-any-return]


def argmax(x: Array, /, *, axis: int | None = None, keepdims: bool = False) -> Array:
    """The index of the first maximum along ``axis`` (of the flattened array where None)."""
    return _arg(x, "max", axis, keepdims)


def argmin(x: Array, /, *, axis: int | None = None, keepdims: bool = False) -> Array:
    """The index of the first minimum along ``axis``."""
    return _arg(x, "min", axis, keepdims)


def _where(g: Graph, c: Sym, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = tuple(np.broadcast_shapes(c.shape, x.shape, y.shape))
    return g.select(g.broadcast(g.convert(c, "bool"), shape), g.broadcast(g.convert(x, dtype), shape),
                    g.broadcast(g.convert(y, dtype), shape))


def where(condition: Array, x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
    """``x1`` where ``condition`` is true, else ``x2`` (all broadcast)."""
    a, b = operands(x1, x2, "where")
    if condition._device is not a._device:
        raise ValueError("where: the condition is on another device than the values")
    return apply(_where, (condition, a, b), _result(a, b, "where").name)  # type: ignore[no-any-return]


def nonzero(x: Array, /) -> tuple[Array, ...]:
    """The indices of the nonzero elements, one array per axis (reads ``x``: the count decides the shape)."""
    if x.ndim == 0:
        raise ValueError("nonzero of a 0-d array is not defined; use nonzero on a 1-d array")
    index = _dtypes.default_int(x._device)
    return tuple(Array._from_host(i.astype(index), x._device) for i in np.nonzero(np.asarray(x._host())))


def _sort(g: Graph, x: Sym, axis: int, descending: bool, indices: bool, index: str) -> Sym:
    if x.shape[axis] <= 1:
        if indices:
            return g.convert(g.iota("int64", x.shape, axis), index)
        return x
    out = g.sort(x, axis, descending, indices)
    return g.convert(out, index) if indices else out


def sort(x: Array, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Array:
    """``x`` sorted along ``axis`` (stable; NaNs last)."""
    if x.ndim == 0:
        raise ValueError("sort needs an array of at least 1 dimension")
    axis = normalize_axis(axis, x.ndim, "sort")
    return apply(_sort, (x,), axis, bool(descending), False, "")  # type: ignore[no-any-return]


def argsort(x: Array, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Array:
    """The indices that sort ``x`` along ``axis`` (stable)."""
    if x.ndim == 0:
        raise ValueError("argsort needs an array of at least 1 dimension")
    axis = normalize_axis(axis, x.ndim, "argsort")
    index = _dtypes.default_int(x._device).name
    return apply(_sort, (x,), axis, bool(descending), True, index)  # type: ignore[no-any-return]


def _searchsorted(g: Graph, x1: Sym, x2: Sym, right: bool, dtype: str, index: str) -> Sym:
    a, v = g.convert(x1, dtype), g.convert(x2, dtype)
    shape = v.shape + a.shape
    aa = g.broadcast(a, shape, (len(shape) - 1,))
    vv = g.broadcast(v, shape, tuple(range(v.ndim)))
    below = g.compare("le" if right else "lt", aa, vv)
    counts = g.reduce("sum", g.convert(below, "int64"), (len(shape) - 1,))
    return g.convert(counts, index)


def searchsorted(x1: Array, x2: Array, /, *, side: str = "left", sorter: Array | None = None) -> Array:
    """Where to insert ``x2`` into the sorted 1-d ``x1`` to keep it sorted."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if x1.ndim != 1:
        raise ValueError("searchsorted: x1 must be 1-d")
    if sorter is not None:
        from nx_hal.array_api._indexing import take

        x1 = take(x1, sorter)
    dtype = _result(x1, x2, "searchsorted")
    index = _dtypes.default_int(x1._device).name
    return apply(_searchsorted, (x1, x2), side == "right", dtype.name, index)  # type: ignore[no-any-return]


class UniqueAllResult(NamedTuple):
    """``unique_all``'s four arrays."""

    values: Array
    indices: Array
    inverse_indices: Array
    counts: Array


class UniqueCountsResult(NamedTuple):
    """``unique_counts``'s two arrays."""

    values: Array
    counts: Array


class UniqueInverseResult(NamedTuple):
    """``unique_inverse``'s two arrays."""

    values: Array
    inverse_indices: Array


def _unique(x: Array) -> tuple[Any, ...]:
    host = np.asarray(x._host())
    flat = host.reshape(-1)
    values, indices, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    if flat.dtype.kind == "f":
        # The standard counts every NaN as distinct; numpy merges them.
        nan = np.isnan(values)
        if nan.any():
            keep = ~nan
            nans = np.flatnonzero(np.isnan(flat))
            values = np.concatenate([values[keep], flat[nans]])
            indices = np.concatenate([indices[keep], nans])
            counts = np.concatenate([counts[keep], np.ones(nans.size, dtype=counts.dtype)])
            inverse = inverse.copy()
            inverse[nans] = np.arange(keep.sum(), keep.sum() + nans.size)
    index = _dtypes.default_int(x._device)

    def put(a: np.ndarray[Any, Any]) -> Array:
        return Array._from_host(np.asarray(a), x._device)

    return (put(values.astype(host.dtype)), put(indices.astype(index)),
            put(inverse.reshape(host.shape).astype(index)), put(counts.astype(index)))


def unique_all(x: Array, /) -> UniqueAllResult:
    """The distinct values, the first index of each, the inverse and the counts (reads ``x``)."""
    return UniqueAllResult(*_unique(x))


def unique_counts(x: Array, /) -> UniqueCountsResult:
    """The distinct values and how often each occurs (reads ``x``)."""
    values, _, _, counts = _unique(x)
    return UniqueCountsResult(values, counts)


def unique_inverse(x: Array, /) -> UniqueInverseResult:
    """The distinct values and, for each element, the index of its value (reads ``x``)."""
    values, _, inverse, _ = _unique(x)
    return UniqueInverseResult(values, inverse)


def unique_values(x: Array, /) -> Array:
    """The distinct values (reads ``x``)."""
    return _unique(x)[0]  # type: ignore[no-any-return]
