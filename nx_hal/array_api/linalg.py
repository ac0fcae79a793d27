"""The standard's linear algebra extension (``xp.linalg``).

Products, norms, diagonals and traces run on any device. Decompositions and
solvers need kernels that neither StableHLO's portable op set (beyond
Cholesky) nor ONNX offers: those functions exist, and say so by name.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array
from nx_hal.array_api._dispatch import OperationError, apply
from nx_hal.array_api._graph import Graph, Sym
from nx_hal.array_api._linalg import matmul, matrix_transpose, tensordot, vecdot
from nx_hal.array_api._manipulation import _axes
from nx_hal.array_api._statistics import _keep, _sum_dtype

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
           "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]


def _diagonal(g: Graph, x: Sym, offset: int) -> Sym:
    *batch, n, m = x.shape
    count = builtins.max(0, builtins.min(n, m - offset) if offset >= 0 else builtins.min(n + offset, m))
    flat = g.reshape(x, (*batch, n * m))
    start = offset if offset >= 0 else -offset * m
    if count == 0:
        return g.slice(flat, (0,) * len(batch) + (0,), (*batch, 0), (1,) * (len(batch) + 1))
    # The diagonal's elements are m + 1 apart in the flattened matrix.
    return g.slice(flat, (0,) * len(batch) + (start,), (*batch, start + (count - 1) * (m + 1) + 1),
                   (1,) * len(batch) + (m + 1,))


def diagonal(x: Array, /, *, offset: int = 0) -> Array:
    """The ``offset`` diagonal of each matrix (the last two axes)."""
    if x.ndim < 2:
        raise ValueError("diagonal needs an array of at least 2 dimensions")
    return apply(_diagonal, (x,), int(offset))  # type: ignore[no-any-return]


def _trace(g: Graph, x: Sym, offset: int, dtype: str) -> Sym:
    d = _diagonal(g, g.convert(x, dtype), offset)
    return g.reduce("sum", d, (d.ndim - 1,))


def trace(x: Array, /, *, offset: int = 0, dtype: object = None) -> Array:
    """The sum of each matrix's ``offset`` diagonal."""
    if x.ndim < 2:
        raise ValueError("trace needs an array of at least 2 dimensions")
    return apply(_trace, (x,), int(offset), _sum_dtype(x, dtype).name)  # type: ignore[no-any-return]


def _outer(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = x.shape + y.shape
    return g.binary("mul", g.broadcast(g.convert(x, dtype), shape, (0,)), g.broadcast(g.convert(y, dtype), shape, (1,)))


def outer(x1: Array, x2: Array, /) -> Array:
    """The outer product of two 1-d arrays."""
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError("outer takes two 1-d arrays")
    return apply(_outer, (x1, x2), _dtypes.promote(x1._dtype, x2._dtype).name)  # type: ignore[no-any-return]


def _cross(g: Graph, x: Sym, y: Sym, axis: int, dtype: str) -> Sym:
    shape = tuple(np.broadcast_shapes(x.shape, y.shape))
    x, y = g.broadcast(g.convert(x, dtype), shape), g.broadcast(g.convert(y, dtype), shape)
    axis %= len(shape)

    def part(v: Sym, k: int) -> Sym:
        start = [0] * len(shape)
        limit = list(shape)
        start[axis], limit[axis] = k, k + 1
        return g.slice(v, tuple(start), tuple(limit), (1,) * len(shape))

    xs = [part(x, k) for k in range(3)]
    ys = [part(y, k) for k in range(3)]
    out = [g.binary("sub", g.binary("mul", xs[(k + 1) % 3], ys[(k + 2) % 3]),
                    g.binary("mul", xs[(k + 2) % 3], ys[(k + 1) % 3])) for k in range(3)]
    return g.concat(out, axis)


def cross(x1: Array, x2: Array, /, *, axis: int = -1) -> Array:
    """The cross product of 3-vectors along ``axis``."""
    if not -builtins.min(x1.ndim, x2.ndim) <= axis < 0 and not 0 <= axis < builtins.min(x1.ndim, x2.ndim):
        raise ValueError(f"cross: axis {axis} is out of range")
    if x1._shape[axis] != 3 or x2._shape[axis] != 3:
        raise ValueError("cross: the vectors along axis must have 3 elements")
    try:
        shape = tuple(np.broadcast_shapes(x1._shape, x2._shape))
    except ValueError:
        raise ValueError(f"cross: shapes {x1._shape} and {x2._shape} do not broadcast") from None
    axis = axis - len(shape) if axis >= 0 else axis
    return apply(_cross, (x1, x2), axis, _dtypes.promote(x1._dtype, x2._dtype).name)  # type: ignore


def _vector_norm(g: Graph, x: Sym, axes: tuple[int, ...], keepdims: bool, ord: float, dtype: str) -> Sym:
    a = g.convert(g.unary("abs", x), dtype)
    shape = x.shape
    if ord == math.inf:
        out = g.reduce("max", a, axes)
    elif ord == -math.inf:
        out = g.reduce("min", a, axes)
    elif ord == 0:
        zero = g.broadcast(g.constant(0, dtype), a.shape)
        out = g.reduce("sum", g.convert(g.compare("ne", a, zero), dtype), axes)
    elif ord == 1:
        out = g.reduce("sum", a, axes)
    elif ord == 2:
        out = g.unary("sqrt", g.reduce("sum", g.binary("mul", a, a), axes))
    else:
        p = g.broadcast(g.constant(ord, dtype), a.shape)
        total = g.reduce("sum", g.binary("pow", a, p), axes)
        out = g.binary("pow", total, g.broadcast(g.constant(1.0 / ord, dtype), total.shape))
    return _keep(g, out, shape, axes, keepdims)


def vector_norm(x: Array, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False,
                ord: int | float = 2) -> Array:
    """The vector ``ord``-norm over ``axis`` (every axis by default)."""
    if x._dtype.kind not in "fc":
        raise TypeError(f"vector_norm takes float arrays, not {x._dtype}")
    real = _dtypes.as_dtype("float32" if x._dtype in (_dtypes.float32, _dtypes.complex64) else "float64")
    axes = _axes(axis, x.ndim, "vector_norm")
    return apply(_vector_norm, (x,), axes, keepdims, float(ord), real.name)  # type: ignore[no-any-return]


def _matrix_norm(g: Graph, x: Sym, keepdims: bool, ord: Any, dtype: str) -> Sym:
    a = g.convert(g.unary("abs", x), dtype)
    rows, cols = x.ndim - 2, x.ndim - 1
    if ord == "fro":
        out = g.unary("sqrt", g.reduce("sum", g.binary("mul", a, a), (rows, cols)))
    elif ord in (1, -1):
        sums = g.reduce("sum", a, (rows,))
        out = g.reduce("max" if ord == 1 else "min", sums, (sums.ndim - 1,))
    else:
        sums = g.reduce("sum", a, (cols,))
        out = g.reduce("max" if ord == math.inf else "min", sums, (sums.ndim - 1,))
    return _keep(g, out, x.shape, (rows, cols), keepdims)


def matrix_norm(x: Array, /, *, keepdims: bool = False, ord: Any = "fro") -> Array:
    """The matrix norm of each matrix: "fro", 1, -1, inf or -inf (2, -2 and "nuc" need an SVD)."""
    if x.ndim < 2:
        raise ValueError("matrix_norm needs an array of at least 2 dimensions")
    if ord not in ("fro", 1, -1, math.inf, -math.inf):
        raise OperationError(f"linalg.matrix_norm(ord={ord!r}) needs singular values, which no nx_hal device "
                             "computes (no SVD kernel in StableHLO or ONNX); use 'fro', 1, -1, inf or -inf")
    real = _dtypes.as_dtype("float32" if x._dtype in (_dtypes.float32, _dtypes.complex64) else "float64")
    return apply(_matrix_norm, (x,), keepdims, ord, real.name)  # type: ignore[no-any-return]


def matrix_power(x: Array, n: int, /) -> Array:
    """``x`` multiplied by itself ``n`` >= 0 times (by squaring)."""
    if x.ndim < 2 or x._shape[-1] != x._shape[-2]:
        raise ValueError("matrix_power needs square matrices")
    if n < 0:
        raise OperationError("linalg.matrix_power with n < 0 needs an inverse, which no nx_hal device computes")
    from nx_hal.array_api._creation import eye
    from nx_hal.array_api._manipulation import broadcast_to

    result = broadcast_to(eye(x._shape[-1], dtype=x._dtype, device=x._device), x._shape)
    base = x
    while n:
        if n & 1:
            result = matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def _refuse(name: str) -> OperationError:
    return OperationError(f"linalg.{name} is not computed by nx_hal devices: {_NO_KERNEL}")


_NO_KERNEL = ("StableHLO's portable op set and ONNX have no kernel for it (compute it with numpy or scipy on "
              "np.asarray(x))")


def cholesky(x: Array, /, *, upper: bool = False) -> Array:
    """``linalg.cholesky``: not offered (no kernel on the devices)."""
    raise _refuse("cholesky")


def det(x: Array, /) -> Array:
    """``linalg.det``: not offered (no kernel on the devices)."""
    raise _refuse("det")


def eigh(x: Array, /) -> tuple[Array, Array]:
    """``linalg.eigh``: not offered (no kernel on the devices)."""
    raise _refuse("eigh")


def eigvalsh(x: Array, /) -> Array:
    """``linalg.eigvalsh``: not offered (no kernel on the devices)."""
    raise _refuse("eigvalsh")


def inv(x: Array, /) -> Array:
    """``linalg.inv``: not offered (no kernel on the devices)."""
    raise _refuse("inv")


def matrix_rank(x: Array, /, *, rtol: float | Array | None = None) -> Array:
    """``linalg.matrix_rank``: not offered (no kernel on the devices)."""
    raise _refuse("matrix_rank")


def pinv(x: Array, /, *, rtol: float | Array | None = None) -> Array:
    """``linalg.pinv``: not offered (no kernel on the devices)."""
    raise _refuse("pinv")


def qr(x: Array, /, *, mode: str = "reduced") -> tuple[Array, Array]:
    """``linalg.qr``: not offered (no kernel on the devices)."""
    raise _refuse("qr")


def slogdet(x: Array, /) -> tuple[Array, Array]:
    """``linalg.slogdet``: not offered (no kernel on the devices)."""
    raise _refuse("slogdet")


def solve(x1: Array, x2: Array, /) -> Array:
    """``linalg.solve``: not offered (no kernel on the devices)."""
    raise _refuse("solve")


def svd(x: Array, /, *, full_matrices: bool = True) -> tuple[Array, Array, Array]:
    """``linalg.svd``: not offered (no kernel on the devices)."""
    raise _refuse("svd")


def svdvals(x: Array, /) -> Array:
    """``linalg.svdvals``: not offered (no kernel on the devices)."""
    raise _refuse("svdvals")
