"""The standard's creation functions. Values that start on the host (Python
objects, numpy arrays, DLPack capsules, filled shapes) are made there and
put on the device once; functions of arrays run on the arrays' device."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array, _device_of
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym

__all__ = ["arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like", "linspace",
           "meshgrid", "ones", "ones_like", "tril", "triu", "zeros", "zeros_like"]


def _dtype_arg(dtype: object, device: Any) -> np.dtype[Any] | None:
    if dtype is None:
        return None
    dt = _dtypes.as_dtype(dtype)
    _dtypes.check_dtype(dt, device)
    return dt


def _host(values: np.ndarray[Any, Any], device: Any) -> Array:
    _dtypes.check_dtype(values.dtype, device)
    return Array._from_host(values, device)


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def _infer(obj: object, device: Any) -> np.dtype[Any]:
    """The standard's default dtype for Python values: bool, then the device's default int, then float."""
    flat = np.asarray(obj, dtype=object).reshape(-1)
    if flat.size and all(isinstance(v, (bool, np.bool_)) for v in flat):
        return _dtypes.bool_
    if flat.size and all(isinstance(v, (bool, int, np.bool_, np.integer)) for v in flat):
        return _dtypes.default_int(device)
    if any(isinstance(v, complex) for v in flat):
        return _dtypes.complex64 if _dtypes.narrow(device) else _dtypes.complex128
    return _dtypes.default_float(device)


def asarray(obj: object, /, *, dtype: object = None, device: object = None, copy: bool | None = None) -> Array:
    """An array on ``device`` (a Device, a selector such as "npu:cpu", or the
    default device) from an array, a numpy array, a buffer, a Python scalar or
    nested sequences."""
    if isinstance(obj, Array):
        target = obj._device if device is None else _device_of(device)
        dt = _dtype_arg(dtype, target)
        if copy is False and ((dt is not None and dt != obj._dtype) or target is not obj._device):
            raise ValueError("asarray(copy=False): the array would have to be copied")
        out = obj.to_device(target) if target is not obj._device else obj
        if dt is not None and dt != out._dtype:
            from nx_hal.array_api._data_types import astype

            return astype(out, dt)
        if copy:
            return Array._from_host(np.array(out._host()), target)
        return out
    dev = _device_of(device)
    if copy is False:
        raise ValueError("asarray(copy=False): host values are always copied onto the device")
    dt = _dtype_arg(dtype, dev)
    if isinstance(obj, np.ndarray) or hasattr(obj, "__array_interface__") or hasattr(obj, "__dlpack__"):
        host = np.asarray(obj)
        if dt is None and host.dtype.kind in "iu" and host.dtype not in _dtypes.DTYPES.values():
            dt = _dtypes.default_int(dev)
        host = host.astype(dt) if dt is not None else host
    else:
        if isinstance(obj, (bytes, str)):
            raise TypeError(f"asarray: cannot make an array of {type(obj).__name__}")
        if dt is None:
            dt = _infer(obj, dev)
        if dt.kind in "iu":
            _check_int_range(obj, dt)
        host = np.asarray(obj, dtype=dt)
    return _host(np.asarray(host), dev)


def _check_int_range(obj: object, dt: np.dtype[Any]) -> None:
    info = np.iinfo(dt)
    for v in np.asarray(obj, dtype=object).reshape(-1):
        if isinstance(v, int) and not isinstance(v, bool) and not info.min <= v <= info.max:
            raise OverflowError(f"asarray: Python int {v} does not fit {dt}")


def _filled(shape: int | tuple[int, ...], value: object, dtype: object, device: object) -> Array:
    dev = _device_of(device)
    dt = _dtype_arg(dtype, dev)
    if dt is None:
        dt = _infer(value, dev)
    return _host(np.full(_shape(shape), value, dtype=dt), dev)


def zeros(shape: int | tuple[int, ...], *, dtype: object = None, device: object = None) -> Array:
    """An array of zeros (the device's default float unless ``dtype``)."""
    return _filled(shape, 0.0 if dtype is None else 0, dtype, device)


def ones(shape: int | tuple[int, ...], *, dtype: object = None, device: object = None) -> Array:
    """An array of ones."""
    return _filled(shape, 1.0 if dtype is None else 1, dtype, device)


def empty(shape: int | tuple[int, ...], *, dtype: object = None, device: object = None) -> Array:
    """An array of the shape (zeroed: the device's memory is never read uninitialized)."""
    return zeros(shape, dtype=dtype, device=device)


def full(shape: int | tuple[int, ...], fill_value: bool | int | float, *, dtype: object = None,
         device: object = None) -> Array:
    """An array filled with ``fill_value``."""
    dev = _device_of(device)
    dt = _dtype_arg(dtype, dev)
    if dt is not None and dt.kind in "iu":
        _check_int_range(fill_value, dt)
    return _filled(shape, fill_value, dt, dev)


def _like(x: Array, value: object, dtype: object, device: object) -> Array:
    return _filled(x._shape, value, x._dtype if dtype is None else dtype, x._device if device is None else device)


def zeros_like(x: Array, /, *, dtype: object = None, device: object = None) -> Array:
    """Zeros of ``x``'s shape (and dtype and device unless given)."""
    return _like(x, 0, dtype, device)


def ones_like(x: Array, /, *, dtype: object = None, device: object = None) -> Array:
    """Ones of ``x``'s shape."""
    return _like(x, 1, dtype, device)


def empty_like(x: Array, /, *, dtype: object = None, device: object = None) -> Array:
    """An array of ``x``'s shape (zeroed)."""
    return _like(x, 0, dtype, device)


def full_like(x: Array, /, fill_value: bool | int | float, *, dtype: object = None, device: object = None) -> Array:
    """``fill_value`` in ``x``'s shape."""
    return _like(x, fill_value, dtype, device)


def arange(start: int | float, /, stop: int | float | None = None, step: int | float = 1, *,
           dtype: object = None, device: object = None) -> Array:
    """Evenly spaced values in [start, stop)."""
    dev = _device_of(device)
    if stop is None:
        start, stop = 0, start
    dt = _dtype_arg(dtype, dev)
    if dt is None:
        dt = _infer([start, stop, step], dev)
    if step == 0:
        raise ValueError("arange: step must not be 0")
    n = max(0, math.ceil((stop - start) / step))
    steps: np.ndarray[Any, Any] = np.arange(n, dtype=np.float64 if dt.kind == "f" else np.int64)
    values = (steps * step + start).astype(dt)
    return _host(values, dev)


def linspace(start: int | float, stop: int | float, /, num: int, *, dtype: object = None, device: object = None,
             endpoint: bool = True) -> Array:
    """``num`` evenly spaced values from start to stop."""
    dev = _device_of(device)
    dt = _dtype_arg(dtype, dev) or _dtypes.default_float(dev)
    return _host(np.linspace(start, stop, num, endpoint=endpoint, dtype=np.float64).astype(dt), dev)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: object = None,
        device: object = None) -> Array:
    """A 2-d array with ones on the k-th diagonal."""
    dev = _device_of(device)
    dt = _dtype_arg(dtype, dev) or _dtypes.default_float(dev)
    return _host(np.eye(n_rows, n_cols, k=k, dtype=dt), dev)


def from_dlpack(x: object, /, *, device: object = None, copy: bool | None = None) -> Array:
    """An array from any DLPack producer (numpy, torch, jax, another array)."""
    if isinstance(x, Array):
        return asarray(x, device=device, copy=copy)
    host = np.from_dlpack(x)  # type: ignore[arg-type]
    dev = _device_of(device)
    return _host(np.asarray(host), dev)


def _tri(g: Graph, x: Sym, k: int, upper: bool) -> Sym:
    rows, cols = x.shape[-2:]
    shape = (rows, cols)
    r = g.iota("int64", shape, 0)
    c = g.iota("int64", shape, 1)
    diff = g.binary("sub", c, r)
    kk = g.broadcast(g.constant(k, "int64"), shape)
    keep = g.compare("ge", diff, kk) if upper else g.compare("le", diff, kk)
    keep = g.broadcast(keep, x.shape)
    return g.select(keep, x, g.broadcast(g.constant(0, x.dtype), x.shape))


def tril(x: Array, /, *, k: int = 0) -> Array:
    """``x`` with the elements above the k-th diagonal zeroed."""
    if x.ndim < 2:
        raise ValueError("tril needs an array of at least 2 dimensions")
    return apply(_tri, (x,), int(k), False)  # type: ignore[no-any-return]


def triu(x: Array, /, *, k: int = 0) -> Array:
    """``x`` with the elements below the k-th diagonal zeroed."""
    if x.ndim < 2:
        raise ValueError("triu needs an array of at least 2 dimensions")
    return apply(_tri, (x,), int(k), True)  # type: ignore[no-any-return]


def _grid(g: Graph, x: Sym, shape: tuple[int, ...], axis: int) -> Sym:
    return g.broadcast(x, shape, (axis,))


def meshgrid(*arrays: Array, indexing: str = "xy") -> list[Array]:
    """Coordinate grids from 1-d arrays (``indexing`` "xy" or "ij")."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    if not arrays:
        return []
    dtypes = {a._dtype for a in arrays}
    if len(dtypes) > 1:
        raise TypeError("meshgrid: the arrays must share one dtype")
    sizes = [a.size for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    shape = tuple(sizes)
    out = []
    for i, a in enumerate(arrays):
        axis = i
        if indexing == "xy" and len(arrays) > 1 and i < 2:
            axis = 1 - i
        flat = a if a.ndim == 1 else apply(_flatten, (a,))
        out.append(apply(_grid, (flat,), shape, axis))
    return out


def _flatten(g: Graph, x: Sym) -> Sym:
    return g.reshape(x, (x.size,))
