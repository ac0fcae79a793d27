"""Indexing: ``x[key]``, ``x[key] = value`` and ``take``.

Integers, slices, ``...`` and ``None`` are the standard's basic indexing: a
slice of the device's buffer, with integer positions passed at run time so
that reading element after element compiles once. Boolean masks and integer
arrays are positions known only from data: they are read, turned into flat
positions, and gathered on the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nx_hal.array_api._array import Array, scalar_array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym
from nx_hal.array_api._manipulation import normalize_axis

__all__ = ["getitem", "setitem", "take"]


def _expand(key: Any, ndim: int) -> list[Any]:
    items = list(key) if isinstance(key, tuple) else [key]
    # A boolean array index covers as many dimensions as it has (a 0-d mask none).
    used = sum(k.ndim if isinstance(k, Array) and k._dtype.kind == "b" else 1
               for k in items if k is not None and k is not Ellipsis)
    if any(isinstance(k, Array) and k._dtype.kind == "b" for k in items):
        if used > ndim:
            raise IndexError(f"too many indices: {used} for a {ndim}-d array")
        return items
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError("an index can have only one ellipsis ('...')")
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices: {used} for a {ndim}-d array")
    if Ellipsis in [k for k in items if not isinstance(k, Array)]:
        at = next(i for i, k in enumerate(items) if k is Ellipsis)
        items[at:at + 1] = [slice(None)] * (ndim - used)
    else:
        items += [slice(None)] * (ndim - used)
    return items


def _is_basic(items: list[Any]) -> bool:
    for k in items:
        if isinstance(k, Array):
            if k.ndim != 0 or k._dtype.kind not in "iu":
                return False
        elif not (k is None or isinstance(k, (slice, int, np.integer))) or isinstance(k, bool):
            return False
    return True


def _basic(g: Graph, x: Sym, *args: Any) -> Sym:
    *starts, plan = args
    # One dynamic slice for the integer axes (size 1 there), then static slices, then the new shape.
    zero = g.constant(0, "int64")
    it = iter(starts)
    dyn = []
    sizes = []
    axis = 0
    for item in plan:
        if item[0] == "n":
            continue
        if item[0] == "i":
            dyn.append(next(it))
            sizes.append(1)
        else:
            dyn.append(zero)
            sizes.append(x.shape[axis])
        axis += 1
    out = g.dynamic_slice(x, dyn, tuple(sizes)) if starts else x
    start, limit, stride, flips = [], [], [], []
    axis = 0
    for item in plan:
        if item[0] == "n":
            continue
        if item[0] == "s":
            _, lo, hi, step = item
            if step < 0:  # read reversed: the same elements, positive stride
                flips.append(axis)
            start.append(lo)
            limit.append(hi)
            stride.append(abs(step))
        else:
            start.append(0)
            limit.append(1)
            stride.append(1)
        axis += 1
    if flips:
        out = g.reverse(out, tuple(flips))
    out = g.slice(out, tuple(start), tuple(limit), tuple(stride))
    shape = []
    axis = 0
    for item in plan:
        if item[0] == "n":
            shape.append(1)
            continue
        if item[0] == "s":
            shape.append(out.shape[axis])
        axis += 1
    return g.reshape(out, tuple(shape))


def _slice_plan(s: slice, dim: int) -> tuple[Any, ...]:
    lo, hi, step = s.indices(dim)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if step > 0:
        n = max(0, -(-(hi - lo) // step))
        return ("s", lo, lo + (n - 1) * step + 1 if n else lo, step)
    n = max(0, -(-(lo - hi) // -step))
    # Reversed axis: element i of the reverse is dim - 1 - i.
    first = dim - 1 - lo
    return ("s", first, first + (n - 1) * (-step) + 1 if n else first, step)


def getitem(x: Array, key: Any) -> Array:
    """``x[key]``."""
    items = _expand(key, x.ndim)
    if not _is_basic(items):
        return _gather(x, key)
    plan: list[tuple[Any, ...]] = []
    starts: list[Array] = []
    axis = 0
    for k in items:
        if k is None:
            plan.append(("n",))
            continue
        dim = x._shape[axis]
        if isinstance(k, slice):
            plan.append(_slice_plan(k, dim))
        else:
            i = int(k)
            if not -dim <= i < dim:
                raise IndexError(f"index {i} is out of bounds for axis {axis} of size {dim}")
            plan.append(("i",))
            starts.append(scalar_array(i % dim, np.dtype("int64"), x._device))
        axis += 1
    return apply(_basic, (x, *starts), tuple(plan))  # type: ignore[no-any-return]


def _positions(x: Array, key: Any) -> np.ndarray[Any, Any]:
    """The flat positions ``key`` selects, in the result's shape (read on the host)."""
    items = list(key) if isinstance(key, tuple) else [key]
    host_key = tuple(np.asarray(k._host()) if isinstance(k, Array) else k for k in items)
    try:
        positions: np.ndarray[Any, Any] = np.arange(x.size, dtype=np.int64).reshape(x._shape)[host_key]
        return positions
    except IndexError as exc:
        raise IndexError(f"index {key!r} does not apply to shape {x._shape}: {exc}") from None


def _take_flat(g: Graph, x: Sym, positions: Sym) -> Sym:
    return g.take(g.reshape(x, (x.size,)), positions, 0)


def _gather(x: Array, key: Any) -> Array:
    positions = _positions(x, key)
    return apply(_take_flat, (x, Array._from_host(positions, x._device)))  # type: ignore[no-any-return]


def _scatter(g: Graph, x: Sym, value: Sym, source: Sym, region: tuple[int, ...]) -> Sym:
    # source[i]: where element i of x takes its new value from (in the flat
    # broadcast value), or -1 to keep x's own.
    flat = g.reshape(x, (x.size,))
    values = g.reshape(g.broadcast(g.convert(value, x.dtype), region), (int(np.prod(region, dtype=np.int64)),))
    zero = g.broadcast(g.constant(0, "int64"), source.shape)
    keep = g.compare("lt", source, zero)
    if values.size:
        picked = g.take(values, g.select(keep, zero, source), 0)
        flat = g.select(keep, flat, picked)
    return g.reshape(flat, x.shape)


def setitem(x: Array, key: Any, value: Any) -> None:
    """``x[key] = value``: the array's buffer is replaced by the updated one."""
    from nx_hal.array_api._elementwise import operands

    if x._sym is not None:
        raise TypeError("x[key] = value inside jit is not traced (arrays there are values, not storage)")
    positions = _positions(x, key)
    region = positions.shape
    if isinstance(value, Array):
        val = value
    else:
        _, val = operands(x, value, "setitem")
    if val.ndim > len(region) or tuple(np.broadcast_shapes(val._shape, region)) != tuple(region):
        raise ValueError(f"setitem: a value of shape {val._shape} does not broadcast to the selection {region}")
    source = np.full(x.size, -1, dtype=np.int64)
    source[positions.reshape(-1)] = np.arange(positions.size, dtype=np.int64)
    src = Array._from_host(source, x._device)
    result = apply(_scatter, (x, val, src), tuple(region))
    x._buf = result._buf


def _take(g: Graph, x: Sym, indices: Sym, axis: int) -> Sym:
    dim = g.broadcast(g.constant(x.shape[axis], "int64"), indices.shape)
    idx = g.convert(indices, "int64")
    zero = g.broadcast(g.constant(0, "int64"), indices.shape)
    idx = g.select(g.compare("lt", idx, zero), g.binary("add", idx, dim), idx)
    return g.take(x, idx, axis)


def take(x: Array, indices: Array, /, *, axis: int | None = None) -> Array:
    """The elements of ``x`` at the integer ``indices`` along ``axis`` (negative ones count from the end)."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError("take: axis is required for arrays of more than 1 dimension")
        axis = 0
    axis = normalize_axis(axis, x.ndim, "take")
    if indices._dtype.kind not in "iu":
        raise TypeError(f"take: indices must be integers, not {indices._dtype}")
    if x._shape[axis] == 0 and indices.size:
        raise IndexError("take: cannot take from an empty axis")
    return apply(_take, (x, indices), axis)  # type: ignore[no-any-return]


def _along(g: Graph, x: Sym, indices: Sym, axis: int) -> Sym:
    # Flat positions: every axis but ``axis`` from its own index, that one from ``indices``.
    shape = tuple(max(a, b) for a, b in zip(x.shape[:axis] + (indices.shape[axis],) + x.shape[axis + 1:],
                                            indices.shape, strict=True))
    idx = g.broadcast(g.convert(indices, "int64"), shape)
    dim = g.broadcast(g.constant(x.shape[axis], "int64"), shape)
    zero = g.broadcast(g.constant(0, "int64"), shape)
    idx = g.select(g.compare("lt", idx, zero), g.binary("add", idx, dim), idx)
    strides = np.cumprod((1,) + x.shape[::-1][:-1])[::-1] if x.ndim else ()
    flat = None
    for d in range(x.ndim):
        part = idx if d == axis else g.iota("int64", shape, d)
        term = g.binary("mul", part, g.broadcast(g.constant(int(strides[d]), "int64"), shape))
        flat = term if flat is None else g.binary("add", flat, term)
    assert flat is not None
    return g.take(g.reshape(x, (x.size,)), flat, 0)


def take_along_axis(x: Array, indices: Array, /, *, axis: int = -1) -> Array:
    """Elements of ``x`` at ``indices`` along ``axis``, the other axes matched (broadcast) with ``indices``'."""
    if x.ndim == 0 or indices.ndim != x.ndim:
        raise ValueError("take_along_axis: x and indices must have the same number of dimensions (>= 1)")
    if indices._dtype.kind not in "iu":
        raise TypeError(f"take_along_axis: indices must be integers, not {indices._dtype}")
    axis = normalize_axis(axis, x.ndim, "take_along_axis")
    for i, (a, b) in enumerate(zip(x._shape, indices._shape, strict=True)):
        if i != axis and a != b and 1 not in (a, b):
            raise ValueError(f"take_along_axis: shapes {x._shape} and {indices._shape} do not broadcast off the axis")
    if x._shape[axis] == 0 and indices.size:
        raise IndexError("take_along_axis: cannot take from an empty axis")
    return apply(_along, (x, indices), axis)  # type: ignore[no-any-return]
