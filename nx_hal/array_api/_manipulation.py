"""The standard's manipulation functions, each one graph on the arrays' device."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym

__all__ = ["broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis", "permute_dims",
           "repeat", "reshape", "roll", "squeeze", "stack", "tile", "unstack", "normalize_axis"]


def normalize_axis(axis: int, ndim: int, name: str) -> int:
    if not -ndim <= axis < ndim:
        raise IndexError(f"{name}: axis {axis} is out of range for a {ndim}-d array")
    return axis % ndim


def _axes(axis: int | Sequence[int] | None, ndim: int, name: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    out = tuple(normalize_axis(a, ndim, name) for a in axis)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: repeated axis in {tuple(axis)}")
    return out


def _reshape(g: Graph, x: Sym, shape: tuple[int, ...]) -> Sym:
    return g.reshape(x, shape)


def reshape(x: Array, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Array:
    """``x`` with a new shape of the same size (one dimension may be -1)."""
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ValueError("reshape: at most one dimension may be -1")
    if -1 in shape:
        rest = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if rest == 0 or x.size % rest:
            raise ValueError(f"reshape: cannot reshape {x._shape} into {shape}")
        shape = tuple(x.size // rest if d == -1 else d for d in shape)
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ValueError(f"reshape: cannot reshape {x._shape} into {shape}")
    if copy is False and shape != x._shape:
        pass  # a reshape never copies the device's buffer in place: a new one is as cheap
    return apply(_reshape, (x,), shape)  # type: ignore[no-any-return]


def _transpose(g: Graph, x: Sym, perm: tuple[int, ...]) -> Sym:
    return g.transpose(x, perm)


def permute_dims(x: Array, /, axes: tuple[int, ...]) -> Array:
    """``x`` with its axes in the order ``axes``."""
    perm = tuple(normalize_axis(int(a), x.ndim, "permute_dims") for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: {tuple(axes)} is not a permutation of {x.ndim} axes")
    return apply(_transpose, (x,), perm)  # type: ignore[no-any-return]


def _broadcast(g: Graph, x: Sym, shape: tuple[int, ...]) -> Sym:
    return g.broadcast(x, shape)


def broadcast_to(x: Array, /, shape: tuple[int, ...]) -> Array:
    """``x`` broadcast to ``shape``."""
    shape = tuple(int(d) for d in shape)
    try:
        if tuple(np.broadcast_shapes(x._shape, shape)) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"broadcast_to: {x._shape} does not broadcast to {shape}") from None
    return apply(_broadcast, (x,), shape)  # type: ignore[no-any-return]


def broadcast_arrays(*arrays: Array) -> list[Array]:
    """The arrays broadcast to one shape."""
    shape = tuple(np.broadcast_shapes(*[a._shape for a in arrays]))
    return [broadcast_to(a, shape) for a in arrays]


def _concat(g: Graph, *xs: Any) -> Sym:
    *syms, axis, dtype = xs
    if axis is None:
        syms = [g.reshape(s, (s.size,)) for s in syms]
        axis = 0
    return g.concat([g.convert(s, dtype) for s in syms], axis)


def _result_dtype(arrays: Sequence[Array], name: str) -> np.dtype[Any]:
    dtype = arrays[0]._dtype
    for a in arrays[1:]:
        dtype = _dtypes.promote(dtype, a._dtype)
    return dtype


def concat(arrays: Sequence[Array], /, *, axis: int | None = 0) -> Array:
    """The arrays joined along ``axis`` (flattened first where None)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("concat needs at least one array")
    dtype = _result_dtype(arrays, "concat")
    if axis is not None:
        ndim = arrays[0].ndim
        if ndim == 0:
            raise ValueError("concat: 0-d arrays cannot be joined along an axis")
        axis = normalize_axis(axis, ndim, "concat")
        for a in arrays:
            if a.ndim != ndim or any(d != e for i, (d, e) in enumerate(zip(a._shape, arrays[0]._shape, strict=True))
                                     if i != axis):
                raise ValueError(f"concat: shapes {[b._shape for b in arrays]} differ off axis {axis}")
    return apply(_concat, arrays, axis, dtype.name)  # type: ignore[no-any-return]


def stack(arrays: Sequence[Array], /, *, axis: int = 0) -> Array:
    """The arrays (of one shape) joined along a new axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("stack needs at least one array")
    shape = arrays[0]._shape
    if any(a._shape != shape for a in arrays):
        raise ValueError(f"stack: shapes differ: {[a._shape for a in arrays]}")
    axis = normalize_axis(axis, len(shape) + 1, "stack")
    lifted = [expand_dims(a, axis=axis) for a in arrays]
    return concat(lifted, axis=axis)


def expand_dims(x: Array, /, axis: int = 0) -> Array:
    """``x`` with a new axis of length 1 at ``axis``."""
    axis = normalize_axis(axis, x.ndim + 1, "expand_dims")
    shape = x._shape[:axis] + (1,) + x._shape[axis:]
    return apply(_reshape, (x,), shape)  # type: ignore[no-any-return]


def squeeze(x: Array, /, axis: int | tuple[int, ...]) -> Array:
    """``x`` without the length-1 axes ``axis``."""
    axes = _axes(axis, x.ndim, "squeeze")
    for a in axes:
        if x._shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has length {x._shape[a]}, not 1")
    shape = tuple(d for i, d in enumerate(x._shape) if i not in axes)
    return apply(_reshape, (x,), shape)  # type: ignore[no-any-return]


def _flip(g: Graph, x: Sym, axes: tuple[int, ...]) -> Sym:
    return g.reverse(x, axes)


def flip(x: Array, /, *, axis: int | tuple[int, ...] | None = None) -> Array:
    """``x`` with the order of elements along ``axis`` (every axis by default) reversed."""
    return apply(_flip, (x,), _axes(axis, x.ndim, "flip"))  # type: ignore[no-any-return]


def moveaxis(x: Array, source: int | tuple[int, ...], destination: int | tuple[int, ...], /) -> Array:
    """``x`` with the axes ``source`` moved to ``destination``."""
    src = _axes(source, x.ndim, "moveaxis")
    dst = _axes(destination, x.ndim, "moveaxis")
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination must have the same number of axes")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return permute_dims(x, tuple(order))


def _roll(g: Graph, x: Sym, shifts: tuple[int, ...], axes: tuple[int, ...] | None) -> Sym:
    if axes is None:
        flat = g.reshape(x, (x.size,))
        return g.reshape(_roll(g, flat, shifts, (0,)), x.shape)
    out = x
    for shift, axis in zip(shifts, axes, strict=True):
        n = x.shape[axis]
        if n == 0:
            continue
        k = shift % n
        if k == 0:
            continue
        start = [0] * x.ndim
        limit = list(out.shape)
        ones = [1] * x.ndim
        limit[axis] = n - k
        head = g.slice(out, tuple(start), tuple(limit), tuple(ones))
        start[axis], limit[axis] = n - k, n
        tail = g.slice(out, tuple(start), tuple(limit), tuple(ones))
        out = g.concat([tail, head], axis)
    return out


def roll(x: Array, /, shift: int | tuple[int, ...], *, axis: int | tuple[int, ...] | None = None) -> Array:
    """``x`` with its elements shifted along ``axis`` (flattened where None), wrapping around."""
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    if axis is None:
        if len(shifts) != 1:
            raise ValueError("roll: one shift without axes")
        return apply(_roll, (x,), shifts, None)  # type: ignore[no-any-return]
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(normalize_axis(a, x.ndim, "roll") for a in axes)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ValueError("roll: shift and axis must have the same length")
    return apply(_roll, (x,), shifts, axes)  # type: ignore[no-any-return]


def _tile(g: Graph, x: Sym, reps: tuple[int, ...]) -> Sym:
    ndim = max(len(reps), x.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - x.ndim) + x.shape
    x = g.reshape(x, shape)
    # Each axis becomes (rep, dim): broadcast into the interleaved shape, then merge.
    big = tuple(v for r, d in zip(reps, shape, strict=True) for v in (r, d))
    dims = tuple(2 * i + 1 for i in range(ndim))
    out = g.broadcast(x, big, dims)
    return g.reshape(out, tuple(r * d for r, d in zip(reps, shape, strict=True)))


def tile(x: Array, repetitions: tuple[int, ...], /) -> Array:
    """``x`` repeated ``repetitions`` times along each axis."""
    reps = tuple(int(r) for r in repetitions)
    if any(r < 0 for r in reps):
        raise ValueError("tile: repetitions must be >= 0")
    return apply(_tile, (x,), reps)  # type: ignore[no-any-return]


def _repeat(g: Graph, x: Sym, repeats: int, axis: int | None) -> Sym:
    if axis is None:
        x = g.reshape(x, (x.size,))
        axis = 0
    shape = x.shape[:axis + 1] + (repeats,) + x.shape[axis + 1:]
    dims = tuple(range(axis + 1)) + tuple(range(axis + 2, len(shape)))
    out = g.broadcast(x, shape, dims)
    return g.reshape(out, x.shape[:axis] + (x.shape[axis] * repeats,) + x.shape[axis + 1:])


def repeat(x: Array, repeats: int | Array, /, *, axis: int | None = None) -> Array:
    """Each element of ``x`` repeated ``repeats`` times (an int, or an array of counts per element)."""
    if isinstance(repeats, Array):
        counts = np.asarray(repeats._host()).astype(np.int64)
        if counts.ndim == 0 or counts.size == 1:
            repeats = int(counts.reshape(-1)[0])
        else:
            # Counts known only at run time give a shape known only then: read, as numpy's own repeat does.
            host = np.repeat(np.asarray(x._host()), counts, axis=axis)
            return Array._from_host(host, x._device)
    if repeats < 0:
        raise ValueError("repeat: repeats must be >= 0")
    if axis is not None:
        axis = normalize_axis(axis, x.ndim, "repeat")
    return apply(_repeat, (x,), int(repeats), axis)  # type: ignore[no-any-return]


def _take_one(g: Graph, x: Sym, axis: int, index: int) -> Sym:
    start = [0] * x.ndim
    limit = list(x.shape)
    start[axis], limit[axis] = index, index + 1
    part = g.slice(x, tuple(start), tuple(limit), (1,) * x.ndim)
    return g.reshape(part, x.shape[:axis] + x.shape[axis + 1:])


def _unstack(g: Graph, x: Sym, axis: int) -> tuple[Sym, ...]:
    return tuple(_take_one(g, x, axis, i) for i in range(x.shape[axis]))


def unstack(x: Array, /, *, axis: int = 0) -> tuple[Array, ...]:
    """The slices of ``x`` along ``axis``, as a tuple of arrays."""
    if x.ndim == 0:
        raise ValueError("unstack needs an array of at least 1 dimension")
    axis = normalize_axis(axis, x.ndim, "unstack")
    if x._shape[axis] == 0:
        return ()
    out = apply(_unstack, (x,), axis)
    return out if isinstance(out, tuple) else (out,)
