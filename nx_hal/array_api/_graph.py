"""The programs array operations are built as: a small typed graph, one per
operation (eager) or per traced function (``jit``), written out for a device
as StableHLO (PJRT) or ONNX (OpenVINO, PopART) by ``_stablehlo`` and ``_onnx``.

Every node states its result's dtype and shape, so both writers stay simple
and the graph's structure is its cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Graph", "Node", "Sym", "UNARY", "BINARY", "COMPARE", "REDUCE"]

# Elementwise operations both writers implement; each keeps its input's dtype
# (comparisons and the is* predicates give bool).
UNARY = frozenset({
    "neg", "abs", "sign", "floor", "ceil", "round", "sqrt", "exp", "expm1", "log", "log1p",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "not", "isnan", "isinf", "isfinite", "erf",
})
BINARY = frozenset({"add", "sub", "mul", "div", "pow", "max", "min", "atan2", "rem", "and", "or", "xor",
                    "shl", "shr", "nextafter"})
COMPARE = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
REDUCE = frozenset({"sum", "prod", "max", "min", "all", "any"})
_PREDICATES = frozenset({"isnan", "isinf", "isfinite"})
COMPLEX_PART = {"complex64": "float32", "complex128": "float64"}


class Node(NamedTuple):
    """One operation: its name, input ids, static attributes (hashable), result type."""

    op: str
    inputs: tuple[int, ...]
    attrs: tuple[Any, ...]
    dtype: str
    shape: tuple[int, ...]


class Sym:
    """A value of a graph being built: its id, numpy dtype name and shape."""

    __slots__ = ("graph", "id", "dtype", "shape")

    def __init__(self, graph: Graph, id: int, dtype: str, shape: tuple[int, ...]) -> None:
        self.graph = graph
        self.id = id
        self.dtype = dtype
        self.shape = shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class Graph:
    """Parameters, nodes and outputs; ``key()`` identifies its structure.

    Not thread-safe: one graph is built by one thread.
    """

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.params: list[int] = []
        self.outputs: list[int] = []

    def _add(self, node: Node) -> Sym:
        self.nodes.append(node)
        return Sym(self, len(self.nodes) - 1, node.dtype, node.shape)

    def param(self, dtype: str, shape: tuple[int, ...]) -> Sym:
        sym = self._add(Node("param", (), (len(self.params),), dtype, tuple(shape)))
        self.params.append(sym.id)
        return sym

    def used_params(self) -> tuple[int, ...]:
        """The positions of the params some node or output uses (an SDK may
        drop an unused input, so only these are passed)."""
        used = {i for node in self.nodes for i in node.inputs} | set(self.outputs)
        return tuple(k for k, index in enumerate(self.params) if index in used)

    def key(self) -> tuple[Any, ...]:
        return (tuple(self.nodes), tuple(self.outputs))

    def node(self, sym: Sym) -> Node:
        return self.nodes[sym.id]

    # -- operations (each checks what the writers rely on) ---------------------------------

    def op(self, op: str, inputs: Sequence[Sym], attrs: tuple[Any, ...], dtype: str,
           shape: tuple[int, ...]) -> Sym:
        return self._add(Node(op, tuple(s.id for s in inputs), attrs, dtype, tuple(int(d) for d in shape)))

    def constant(self, value: Any, dtype: str) -> Sym:
        """A constant (scalar or small array) of ``dtype``; the value is part of the key."""
        arr = np.asarray(value, dtype=dtype)
        return self.op("constant", (), (arr.tobytes(),), dtype, arr.shape)

    def unary(self, op: str, x: Sym) -> Sym:
        assert op in UNARY, op
        if x.dtype.startswith("uint") and op in ("abs", "sign"):  # no signed kernels for unsigned types
            if op == "abs":
                return x
            zero = self.broadcast(self.constant(0, x.dtype), x.shape)
            return self.convert(self.compare("ne", x, zero), x.dtype)
        dtype = "bool" if op in _PREDICATES else x.dtype
        if op == "abs" and x.dtype in COMPLEX_PART:  # |z| is real
            dtype = COMPLEX_PART[x.dtype]
        return self.op(op, (x,), (), dtype, x.shape)

    def real(self, x: Sym) -> Sym:
        return self.op("real", (x,), (), COMPLEX_PART[x.dtype], x.shape) if x.dtype in COMPLEX_PART else x

    def imag(self, x: Sym) -> Sym:
        return self.op("imag", (x,), (), COMPLEX_PART[x.dtype], x.shape)

    def complex(self, re: Sym, im: Sym) -> Sym:
        assert re.dtype == im.dtype and re.shape == im.shape
        return self.op("complex", (re, im), (), "complex64" if re.dtype == "float32" else "complex128", re.shape)

    def binary(self, op: str, x: Sym, y: Sym) -> Sym:
        assert op in BINARY and x.dtype == y.dtype and x.shape == y.shape, (op, x.dtype, y.dtype, x.shape, y.shape)
        return self.op(op, (x, y), (), x.dtype, x.shape)

    def compare(self, op: str, x: Sym, y: Sym) -> Sym:
        assert op in COMPARE and x.dtype == y.dtype and x.shape == y.shape
        return self.op(op, (x, y), (), "bool", x.shape)

    def convert(self, x: Sym, dtype: str) -> Sym:
        return x if x.dtype == dtype else self.op("convert", (x,), (), dtype, x.shape)

    def select(self, cond: Sym, x: Sym, y: Sym) -> Sym:
        assert cond.dtype == "bool" and cond.shape == x.shape == y.shape and x.dtype == y.dtype
        return self.op("select", (cond, x, y), (), x.dtype, x.shape)

    def broadcast(self, x: Sym, shape: tuple[int, ...], dims: tuple[int, ...] | None = None) -> Sym:
        """``x`` broadcast to ``shape``; ``dims`` maps x's axes to the result's
        (numpy's trailing alignment when None)."""
        shape = tuple(int(d) for d in shape)
        if dims is None:
            dims = tuple(range(len(shape) - x.ndim, len(shape)))
        if x.shape == shape and dims == tuple(range(len(shape))):
            return x
        return self.op("broadcast", (x,), (dims,), x.dtype, shape)

    def reshape(self, x: Sym, shape: tuple[int, ...]) -> Sym:
        shape = tuple(int(d) for d in shape)
        return x if x.shape == shape else self.op("reshape", (x,), (), x.dtype, shape)

    def transpose(self, x: Sym, perm: tuple[int, ...]) -> Sym:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(x.ndim)):
            return x
        return self.op("transpose", (x,), (perm,), x.dtype, tuple(x.shape[p] for p in perm))

    def slice(self, x: Sym, start: tuple[int, ...], limit: tuple[int, ...], stride: tuple[int, ...]) -> Sym:
        """A strided slice with positive strides and 0 <= start <= limit <= dim."""
        shape = tuple(max(0, -(-(hi - lo) // st)) for lo, hi, st in zip(start, limit, stride, strict=True))
        if shape == x.shape:
            return x
        return self.op("slice", (x,), (tuple(start), tuple(limit), tuple(stride)), x.dtype, shape)

    def reverse(self, x: Sym, dims: tuple[int, ...]) -> Sym:
        dims = tuple(d for d in dims if x.shape[d] > 1)
        return self.op("reverse", (x,), (dims,), x.dtype, x.shape) if dims else x

    def concat(self, xs: Sequence[Sym], axis: int) -> Sym:
        if len(xs) == 1:
            return xs[0]
        shape = list(xs[0].shape)
        shape[axis] = sum(s.shape[axis] for s in xs)
        return self.op("concat", xs, (axis,), xs[0].dtype, tuple(shape))

    def reduce(self, kind: str, x: Sym, axes: tuple[int, ...]) -> Sym:
        """Reduces ``axes`` away (no kept dims)."""
        assert kind in REDUCE
        if not axes:
            return x
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return self.op("reduce", (x,), (kind, tuple(sorted(axes))), x.dtype, shape)

    def dot(self, x: Sym, y: Sym, batch: tuple[tuple[int, ...], tuple[int, ...]],
            contract: tuple[tuple[int, ...], tuple[int, ...]]) -> Sym:
        """stablehlo.dot_general: result axes are batch, x's free, y's free."""
        xb, yb = batch
        xc, yc = contract
        xf = [d for i, d in enumerate(x.shape) if i not in xb and i not in xc]
        yf = [d for i, d in enumerate(y.shape) if i not in yb and i not in yc]
        shape = tuple(x.shape[i] for i in xb) + tuple(xf) + tuple(yf)
        return self.op("dot", (x, y), (xb, yb, xc, yc), x.dtype, shape)

    def iota(self, dtype: str, shape: tuple[int, ...], dim: int) -> Sym:
        return self.op("iota", (), (dim,), dtype, shape)

    def sort(self, x: Sym, axis: int, descending: bool, indices: bool) -> Sym:
        """Stable sort along ``axis``: the values, or with ``indices`` the int64 permutation."""
        return self.op("sort", (x,), (axis, descending, indices), "int64" if indices else x.dtype, x.shape)

    def cumsum(self, x: Sym, axis: int, kind: str = "sum") -> Sym:
        """Running sums (or products, ``kind`` "prod") along ``axis``."""
        return self.op("cumsum", (x,), (axis, kind), x.dtype, x.shape)

    def argreduce(self, kind: str, x: Sym, axis: int) -> Sym:
        """First index of the maximum (``kind`` "max") or minimum along ``axis``, as int64."""
        shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
        return self.op("argreduce", (x,), (kind, axis), "int64", shape)

    def dynamic_slice(self, x: Sym, starts: Sequence[Sym], sizes: tuple[int, ...]) -> Sym:
        """A slice at run-time int64 scalar ``starts`` (clamped into range), of ``sizes``."""
        return self.op("dynamic_slice", (x, *starts), (tuple(sizes),), x.dtype, tuple(sizes))

    def dynamic_update_slice(self, x: Sym, update: Sym, starts: Sequence[Sym]) -> Sym:
        return self.op("dynamic_update_slice", (x, update, *starts), (), x.dtype, x.shape)

    def fft(self, x: Sym, kind: str, length: int) -> Sym:
        """stablehlo.fft over the last axis: FFT, IFFT (scaled by 1/n), RFFT (real in, n//2+1 out) or IRFFT."""
        if kind == "RFFT":
            dtype, last = ("complex64" if x.dtype == "float32" else "complex128"), length // 2 + 1
        elif kind == "IRFFT":
            dtype, last = COMPLEX_PART[x.dtype], length
        else:
            dtype, last = x.dtype, length
        return self.op("fft", (x,), (kind, length), dtype, x.shape[:-1] + (last,))

    def take(self, x: Sym, indices: Sym, axis: int) -> Sym:
        """Elements of ``x`` along ``axis`` at int64 ``indices`` (in range, non-negative)."""
        shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
        return self.op("take", (x, indices), (axis,), x.dtype, shape)
