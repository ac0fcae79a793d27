"""The standard's statistical and utility functions (reductions)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym
from nx_hal.array_api._manipulation import _axes, normalize_axis

__all__ = ["all", "any", "count_nonzero", "cumulative_prod", "cumulative_sum", "diff", "max", "mean", "min", "prod", "std", "sum", "var"]


def _keep(g: Graph, out: Sym, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Sym:
    if not keepdims:
        return out
    return g.reshape(out, tuple(1 if i in axes else d for i, d in enumerate(shape)))


def _reduce(g: Graph, x: Sym, kind: str, axes: tuple[int, ...], keepdims: bool, dtype: str) -> Sym:
    x = g.convert(x, dtype)
    out = g.reduce(kind, x, axes)
    if kind in ("max", "min") and dtype.startswith("float") and axes:
        # A NaN anywhere makes the result NaN (XLA's CPU reduction can skip it).
        nan = g.reduce("any", g.unary("isnan", x), axes)
        out = g.select(nan, g.broadcast(g.constant(np.nan, dtype), out.shape), out)
    return _keep(g, out, x.shape, axes, keepdims)


def _sum_dtype(x: Array, dtype: object) -> np.dtype[Any]:
    if dtype is not None:
        dt = _dtypes.as_dtype(dtype)
        _dtypes.check_dtype(dt, x._device)
        return dt
    if x._dtype.kind == "b":
        return _dtypes.default_int(x._device)
    if x._dtype.kind == "i":
        return x._dtype if x._dtype.itemsize >= _dtypes.default_int(x._device).itemsize else \
            _dtypes.default_int(x._device)
    if x._dtype.kind == "u":
        wide = np.dtype(f"uint{_dtypes.default_int(x._device).itemsize * 8}")
        return x._dtype if x._dtype.itemsize >= wide.itemsize else wide
    return x._dtype


def sum(x: Array, /, *, axis: int | tuple[int, ...] | None = None, dtype: object = None,
        keepdims: bool = False) -> Array:
    """The sum over ``axis`` (integers accumulate in the default integer type)."""
    axes = _axes(axis, x.ndim, "sum")
    return apply(_reduce, (x,), "sum", axes, keepdims, _sum_dtype(x, dtype).name)  # type: ignore[no-any-return]


def prod(x: Array, /, *, axis: int | tuple[int, ...] | None = None, dtype: object = None,
         keepdims: bool = False) -> Array:
    """The product over ``axis``."""
    axes = _axes(axis, x.ndim, "prod")
    return apply(_reduce, (x,), "prod", axes, keepdims, _sum_dtype(x, dtype).name)  # type: ignore[no-any-return]


def _extreme(x: Array, kind: str, axis: int | tuple[int, ...] | None, keepdims: bool) -> Array:
    if x._dtype.kind == "b":
        raise TypeError(f"{kind} takes numeric arrays, not bool")
    axes = _axes(axis, x.ndim, kind)
    if builtins.any(x._shape[a] == 0 for a in axes):
        raise ValueError(f"{kind}: a reduction over an empty axis has no identity")
    return apply(_reduce, (x,), kind, axes, keepdims, x._dtype.name)  # type: ignore[no-any-return]


def max(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """The maximum over ``axis`` (NaN if any element is NaN)."""
    return _extreme(x, "max", axis, keepdims)


def min(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """The minimum over ``axis`` (NaN if any element is NaN)."""
    return _extreme(x, "min", axis, keepdims)


def _mean(g: Graph, x: Sym, axes: tuple[int, ...], keepdims: bool) -> Sym:
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = g.reduce("sum", x, axes)
    out = g.binary("div", total, g.broadcast(g.constant(count, x.dtype), total.shape))
    return _keep(g, out, x.shape, axes, keepdims)


def mean(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """The arithmetic mean over ``axis`` (float arrays)."""
    if x._dtype.kind != "f":
        raise TypeError(f"mean takes float arrays, not {x._dtype}")
    return apply(_mean, (x,), _axes(axis, x.ndim, "mean"), keepdims)  # type: ignore[no-any-return]


def _var(g: Graph, x: Sym, axes: tuple[int, ...], correction: float, keepdims: bool, root: bool) -> Sym:
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = g.reduce("sum", x, axes)
    mean = g.binary("div", total, g.broadcast(g.constant(count, x.dtype), total.shape))
    centered = g.binary("sub", x, g.broadcast(g.reshape(mean, tuple(1 if i in axes else d
                                                                   for i, d in enumerate(x.shape))), x.shape))
    squares = g.reduce("sum", g.binary("mul", centered, centered), axes)
    denom = g.broadcast(g.constant(max_(count - correction, 0), x.dtype), squares.shape)
    out = g.binary("div", squares, denom)
    if root:
        out = g.unary("sqrt", out)
    return _keep(g, out, x.shape, axes, keepdims)


def max_(a: float, b: float) -> float:
    return a if a > b else b


def var(x: Array, /, *, axis: int | tuple[int, ...] | None = None, correction: int | float = 0.0,
        keepdims: bool = False) -> Array:
    """The variance over ``axis`` (``correction`` 1 for the sample variance)."""
    if x._dtype.kind != "f":
        raise TypeError(f"var takes float arrays, not {x._dtype}")
    return apply(_var, (x,), _axes(axis, x.ndim, "var"), float(correction), keepdims, False)  # type: ignore


def std(x: Array, /, *, axis: int | tuple[int, ...] | None = None, correction: int | float = 0.0,
        keepdims: bool = False) -> Array:
    """The standard deviation over ``axis``."""
    if x._dtype.kind != "f":
        raise TypeError(f"std takes float arrays, not {x._dtype}")
    return apply(_var, (x,), _axes(axis, x.ndim, "std"), float(correction), keepdims, True)  # type: ignore


def _logical(g: Graph, x: Sym, kind: str, axes: tuple[int, ...], keepdims: bool) -> Sym:
    return _keep(g, g.reduce(kind, g.convert(x, "bool"), axes), x.shape, axes, keepdims)


def all(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """Whether every element over ``axis`` is true (nonzero)."""
    return apply(_logical, (x,), "all", _axes(axis, x.ndim, "all"), keepdims)  # type: ignore[no-any-return]


def any(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """Whether any element over ``axis`` is true (nonzero)."""
    return apply(_logical, (x,), "any", _axes(axis, x.ndim, "any"), keepdims)  # type: ignore[no-any-return]


def _cumsum(g: Graph, x: Sym, axis: int, dtype: str, include_initial: bool, kind: str = "sum") -> Sym:
    x = g.convert(x, dtype)
    out = g.cumsum(x, axis, kind) if x.shape[axis] else x
    if include_initial:
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
        out = g.concat([g.broadcast(g.constant(0 if kind == "sum" else 1, dtype), shape), out], axis)
    return out


def _cumulative(x: Array, axis: int | None, dtype: object, include_initial: bool, kind: str, name: str) -> Array:
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"{name}: axis is required for arrays of more than 1 dimension")
        axis = 0
    axis = normalize_axis(axis, x.ndim, name)
    return apply(_cumsum, (x,), axis, _sum_dtype(x, dtype).name, bool(include_initial), kind)  # type: ignore


def cumulative_sum(x: Array, /, *, axis: int | None = None, dtype: object = None,
                   include_initial: bool = False) -> Array:
    """Running sums along ``axis`` (may be None for 1-d arrays)."""
    return _cumulative(x, axis, dtype, include_initial, "sum", "cumulative_sum")


def cumulative_prod(x: Array, /, *, axis: int | None = None, dtype: object = None,
                    include_initial: bool = False) -> Array:
    """Running products along ``axis`` (may be None for 1-d arrays; PJRT devices: ONNX has no CumProd)."""
    return _cumulative(x, axis, dtype, include_initial, "prod", "cumulative_prod")


def _count(g: Graph, x: Sym, axes: tuple[int, ...], keepdims: bool, dtype: str) -> Sym:
    nonzero = g.convert(g.convert(x, "bool"), dtype)
    return _keep(g, g.reduce("sum", nonzero, axes), x.shape, axes, keepdims)


def count_nonzero(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """How many elements over ``axis`` are nonzero (the default integer dtype)."""
    axes = _axes(axis, x.ndim, "count_nonzero")
    return apply(_count, (x,), axes, keepdims, _dtypes.default_int(x._device).name)  # type: ignore[no-any-return]


def _diff(g: Graph, *args: Any) -> Sym:
    *syms, axis, n, dtype = args
    x = g.concat([g.convert(s, dtype) for s in syms], axis) if len(syms) > 1 else g.convert(syms[0], dtype)
    for _ in range(n):
        size = x.shape[axis]
        if size == 0:
            break
        start = [0] * x.ndim
        limit = list(x.shape)
        ones = (1,) * x.ndim
        limit[axis] = size - 1
        head = g.slice(x, tuple(start), tuple(limit), ones)
        start[axis], limit[axis] = 1, size
        tail = g.slice(x, tuple(start), tuple(limit), ones)
        x = g.compare("ne", tail, head) if dtype == "bool" else g.binary("sub", tail, head)
    return x


def diff(x: Array, /, *, axis: int = -1, n: int = 1, prepend: Array | None = None,
         append: Array | None = None) -> Array:
    """The ``n``-th forward difference along ``axis`` (after prepend and append)."""
    axis = normalize_axis(axis, x.ndim, "diff")
    if n < 0:
        raise ValueError("diff: n must be >= 0")
    parts = [p for p in (prepend, x, append) if p is not None]
    dtype = x._dtype
    for p in parts:
        dtype = _dtypes.promote(dtype, p._dtype)
        if p.ndim != x.ndim or builtins.any(d != e for i, (d, e) in enumerate(zip(p._shape, x._shape, strict=True))
                                   if i != axis):
            raise ValueError("diff: prepend and append must match x's shape off the axis")
    return apply(_diff, parts, axis, int(n), dtype.name)  # type: ignore[no-any-return]

