"""A graph (``_graph``) written out as an ONNX model for devices that read
ONNX (OpenVINO's, PopART's).

Opset 18 (ReduceMax and friends take their axes as an input, the Bitwise*
operators exist). Where ONNX has no operator for a StableHLO op the same
result is composed from ones it has (expm1, log1p, atan2, isfinite, shifts of
signed integers), and that composition is this file's concern alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nx_hal.array_api._graph import Graph, Node

__all__ = ["write", "OPSET", "Unsupported"]

OPSET = 18
_UNARY = {
    "neg": "Neg", "abs": "Abs", "sign": "Sign", "floor": "Floor", "ceil": "Ceil", "round": "Round",
    "sqrt": "Sqrt", "exp": "Exp", "log": "Log", "sin": "Sin", "cos": "Cos", "tan": "Tan", "asin": "Asin",
    "acos": "Acos", "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh", "tanh": "Tanh", "asinh": "Asinh",
    "acosh": "Acosh", "atanh": "Atanh", "isnan": "IsNaN", "isinf": "IsInf", "erf": "Erf",
}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "max": "Max", "min": "Min"}
_LOGIC = {"and": ("And", "BitwiseAnd"), "or": ("Or", "BitwiseOr"), "xor": ("Xor", "BitwiseXor")}
# Greater and GreaterOrEqual are written as Less and LessOrEqual with the
# operands swapped: OpenVINO's CPU plugin answers true for NaN > 0 (measured).
_COMPARE = {"eq": ("Equal", False), "lt": ("Less", False), "le": ("LessOrEqual", False), "gt": ("Less", True),
            "ge": ("LessOrEqual", True)}
_REDUCE = {"sum": "ReduceSum", "prod": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin",
           "all": "ReduceMin", "any": "ReduceMax"}


class _Unsupported(Exception):
    """An operation this writer cannot express in ONNX; the message says why."""


def _elem(dtype: str) -> int:
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


class _Writer:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[onnx.NodeProto] = []
        self.count = 0

    def temp(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def add(self, op: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        out = output or self.temp()
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def const(self, value: object, dtype: str) -> str:
        arr = np.asarray(value, dtype=dtype)
        return self.add("Constant", [], value=numpy_helper.from_array(arr))

    def reshape(self, x: str, rank: int, shape: tuple[int, ...] | list[int], output: str | None = None) -> str:
        # To 0-d by Squeeze of every (size-1) axis: OpenVINO's CPU plugin
        # crashed (SIGSEGV) compiling MatMul -> Reshape(shape=[]). The axes are
        # named: without them it cannot tell the rank of a run-time slice.
        if len(shape) == 0:
            return self.add("Squeeze", [x, self.ints(list(range(rank)))], output) if rank else self.add(
                "Identity", [x], output)
        return self.add("Reshape", [x, self.ints(list(shape))], output)

    def ints(self, values: tuple[int, ...] | list[int]) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "int64")

    def write(self) -> bytes:
        g = self.graph
        inputs = []
        used = {g.params[k] for k in g.used_params()}
        for index, node in enumerate(g.nodes):
            if node.op == "param":
                if index in used:
                    inputs.append(helper.make_tensor_value_info(f"v{index}", _elem(node.dtype), list(node.shape)))
            else:
                self.node(index, node)
        outputs = []
        for k, index in enumerate(g.outputs):
            node = g.nodes[index]
            # An output may be a param or feed another output: each gets its own name.
            self.add("Identity", [f"v{index}"], f"out{k}")
            outputs.append(helper.make_tensor_value_info(f"out{k}", _elem(node.dtype), list(node.shape)))
        model = helper.make_model(helper.make_graph(self.nodes, "nx_hal_array", inputs, outputs),
                                  opset_imports=[helper.make_opsetid("", OPSET)], producer_name="nx_hal.array_api")
        model.ir_version = 8
        return bytes(model.SerializeToString())

    def node(self, index: int, node: Node) -> None:  # noqa: C901 - one case per op
        out = f"v{index}"
        args = [f"v{i}" for i in node.inputs]
        src = [self.graph.nodes[i] for i in node.inputs]
        op = node.op
        if op in _UNARY:
            self.add(_UNARY[op], args, out)
        elif op == "expm1":
            self.add("Sub", [self.add("Exp", args), self.const(1, node.dtype)], out)
        elif op == "log1p":
            self.add("Log", [self.add("Add", [args[0], self.const(1, node.dtype)])], out)
        elif op == "isfinite":
            bad = self.add("Or", [self.add("IsNaN", args), self.add("IsInf", args)])
            self.add("Not", [bad], out)
        elif op == "not":
            self.add("Not" if node.dtype == "bool" else "BitwiseNot", args, out)
        elif op in ("max", "min") and node.dtype.startswith("float"):
            # The standard's maximum and minimum propagate NaN; OpenVINO's Max drops a NaN first operand.
            either = self.add("Or", [self.add("IsNaN", [args[0]]), self.add("IsNaN", [args[1]])])
            both = self.add(_BINARY[op], args)
            self.add("Where", [either, self.const(np.nan, node.dtype), both], out)
        elif op in _BINARY:
            self.add(_BINARY[op], args, out)
        elif op == "rem":  # C's fmod for floats and truncating ints, as stablehlo.remainder
            self.add("Mod", args, out, fmod=1)
        elif op in _LOGIC:
            boolean, bitwise = _LOGIC[op]
            self.add(boolean if node.dtype == "bool" else bitwise, args, out)
        elif op in ("shl", "shr"):
            self.shift(op, node, args, out)
        elif op == "nextafter":
            raise _Unsupported("nextafter: ONNX cannot step a float by one unit in the last place (no bit casts)")
        elif op == "atan2":
            self.atan2(node, args, out)
        elif op in _COMPARE:
            name, swap = _COMPARE[op]
            self.add(name, args[::-1] if swap else args, out)
        elif op == "ne":
            self.add("Not", [self.add("Equal", args)], out)
        elif op == "constant":
            arr = np.frombuffer(node.attrs[0], dtype=node.dtype).reshape(node.shape)
            self.add("Constant", [], out, value=numpy_helper.from_array(np.array(arr)))
        elif op == "convert":
            self.add("Cast", args, out, to=_elem(node.dtype))
        elif op == "select":
            self.add("Where", args, out)
        elif op == "broadcast":
            (dims,) = node.attrs
            lifted = [1] * len(node.shape)
            for axis, dim in zip(dims, src[0].shape, strict=True):
                lifted[axis] = dim
            if sorted(dims) != list(dims):  # broadcast_in_dim may also permute
                order = sorted(range(len(dims)), key=lambda k: dims[k])
                args = [self.add("Transpose", args, perm=order)]
            shaped = self.add("Reshape", [args[0], self.ints(lifted)])
            self.add("Expand", [shaped, self.ints(node.shape)], out)
        elif op == "reshape":
            self.reshape(args[0], len(src[0].shape), node.shape, out)
        elif op == "transpose":
            self.add("Transpose", args, out, perm=list(node.attrs[0]))
        elif op == "slice":
            start, limit, stride = node.attrs
            axes = list(range(len(start)))
            self.add("Slice", [args[0], self.ints(start), self.ints(limit), self.ints(axes), self.ints(stride)], out)
        elif op == "reverse":
            (dims,) = node.attrs
            big = np.iinfo(np.int64).min
            self.add("Slice", [args[0], self.ints([-1] * len(dims)), self.ints([big] * len(dims)),
                               self.ints(dims), self.ints([-1] * len(dims))], out)
        elif op == "concat":
            self.add("Concat", args, out, axis=node.attrs[0])
        elif op == "reduce":
            self.reduce(node, args, out)
        elif op == "dot":
            self.dot(node, src, args, out)
        elif op == "iota":
            (dim,) = node.attrs
            n = node.shape[dim]
            line = self.add("Range", [self.const(0, node.dtype), self.const(n, node.dtype), self.const(1, node.dtype)])
            lifted = [n if i == dim else 1 for i in range(len(node.shape))]
            self.add("Expand", [self.add("Reshape", [line, self.ints(lifted)]), self.ints(node.shape)], out)
        elif op == "sort":
            self.sort(node, src, args, out)
        elif op == "cumsum":
            axis, kind = node.attrs
            if kind != "sum":
                raise _Unsupported("cumulative_prod: ONNX has no running product (CumSum only)")
            self.add("CumSum", [args[0], self.const(axis, "int64")], out)
        elif op == "argreduce":
            kind, axis = node.attrs
            self.add("ArgMax" if kind == "max" else "ArgMin", args, out, axis=axis, keepdims=0)
        elif op == "dynamic_slice":
            self.dynamic_slice(node, src, args, out)
        elif op == "dynamic_update_slice":
            self.dynamic_update(node, src, args, out)
        elif op == "take":
            self.add("Gather", args, out, axis=node.attrs[0])
        else:  # pragma: no cover - every op of _graph is handled above
            raise NotImplementedError(op)

    def shift(self, op: str, node: Node, args: list[str], out: str) -> None:
        # ONNX's BitShift takes unsigned integers only: a signed left shift is
        # the same bits; a signed right shift is a floor division by 2**y.
        dtype = node.dtype
        if dtype.startswith("uint"):
            self.add("BitShift", args, out, direction="LEFT" if op == "shl" else "RIGHT")
            return
        if op == "shl":
            udt = "u" + dtype
            ux = self.add("Cast", [args[0]], to=_elem(udt))
            uy = self.add("Cast", [args[1]], to=_elem(udt))
            self.add("Cast", [self.add("BitShift", [ux, uy], direction="LEFT")], out, to=_elem(dtype))
            return
        as_float = self.add("Cast", [args[0]], to=TensorProto.DOUBLE)
        power = self.add("Pow", [self.const(2.0, "float64"), self.add("Cast", [args[1]], to=TensorProto.DOUBLE)])
        self.add("Cast", [self.add("Floor", [self.add("Div", [as_float, power])])], out, to=_elem(dtype))

    def atan2(self, node: Node, args: list[str], out: str) -> None:
        # atan(y/x) moved into the right quadrant: + pi where x < 0 (by y's sign),
        # and +-pi/2 where x == 0.
        y, x = args
        dt = node.dtype
        zero = self.const(0, dt)
        base = self.add("Atan", [self.add("Div", [y, x])])
        sign_y = self.add("Where", [self.add("Less", [y, zero]), self.const(-np.pi, dt), self.const(np.pi, dt)])
        neg_x = self.add("Less", [x, zero])
        fixed = self.add("Where", [neg_x, self.add("Add", [base, sign_y]), base])
        self.add("Where", [self.add("Equal", [x, zero]),
                           self.add("Mul", [self.add("Sign", [y]), self.const(np.pi / 2, dt)]), fixed], out)

    def reduce(self, node: Node, args: list[str], out: str) -> None:
        kind, axes = node.attrs
        x = args[0]
        if node.dtype == "bool":
            x = self.add("Cast", [x], to=TensorProto.INT32)
            red = self.add(_REDUCE[kind], [x, self.ints(axes)], keepdims=0)
            self.add("Cast", [red], out, to=TensorProto.BOOL)
        else:
            self.add(_REDUCE[kind], [x, self.ints(axes)], out, keepdims=0)

    def dot(self, node: Node, src: list[Node], args: list[str], out: str) -> None:
        # Always a 3-d MatMul (batch, rows, contracted) x (batch, contracted, cols):
        # OpenVINO's Einsum crashed its CPU plugin's compile (SIGSEGV) in
        # graphs as small as reshape -> Einsum -> reshape-to-scalar.
        xb, yb, xc, yc = node.attrs
        xs, ys = src[0].shape, src[1].shape
        xf = [i for i in range(len(xs)) if i not in xb and i not in xc]
        yf = [i for i in range(len(ys)) if i not in yb and i not in yc]
        batch = int(np.prod([xs[i] for i in xb], dtype=np.int64))
        k = int(np.prod([xs[i] for i in xc], dtype=np.int64))
        m = int(np.prod([xs[i] for i in xf], dtype=np.int64))
        n = int(np.prod([ys[i] for i in yf], dtype=np.int64))
        x, y = args
        xperm, yperm = list(xb) + xf + list(xc), list(yb) + list(yc) + yf
        if xperm != sorted(xperm):
            x = self.add("Transpose", [x], perm=xperm)
        if yperm != sorted(yperm):
            y = self.add("Transpose", [y], perm=yperm)
        x = self.add("Reshape", [x, self.ints([batch, m, k])])
        y = self.add("Reshape", [y, self.ints([batch, k, n])])
        self.reshape(self.add("MatMul", [x, y]), 3, node.shape, out)

    def sort(self, node: Node, src: list[Node], args: list[str], out: str) -> None:
        axis, descending, indices = node.attrs
        k = self.ints([src[0].shape[axis]])
        # TopK keeps equal elements in index order (ONNX's tie rule): a stable sort.
        values, order = self.temp(), self.temp()
        self.nodes.append(helper.make_node("TopK", [args[0], k], [values, order], axis=axis,
                                           largest=int(descending), sorted=1))
        self.add("Identity", [order if indices else values], out)

    def _starts(self, starts: list[str]) -> str:
        return self.add("Concat", [self.add("Reshape", [s, self.ints([1])]) for s in starts], axis=0)

    def dynamic_slice(self, node: Node, src: list[Node], args: list[str], out: str) -> None:
        (sizes,) = node.attrs
        shape = src[0].shape
        # Clamped into range, as stablehlo.dynamic_slice clamps.
        lo = self.add("Max", [self._starts(args[1:]), self.ints([0] * len(sizes))])
        starts = self.add("Min", [lo, self.ints([d - s for d, s in zip(shape, sizes, strict=True)])])
        ends = self.add("Add", [starts, self.ints(sizes)])
        self.add("Slice", [args[0], starts, ends, self.ints(list(range(len(sizes))))], out)

    def dynamic_update(self, node: Node, src: list[Node], args: list[str], out: str) -> None:
        shape, ushape = src[0].shape, src[1].shape
        lo = self.add("Max", [self._starts(args[2:]), self.ints([0] * len(shape))])
        starts = self.add("Min", [lo, self.ints([d - s for d, s in zip(shape, ushape, strict=True)])])
        # Every position of the update: its index grid plus the start, scattered in.
        grids = []
        for axis, n in enumerate(ushape):
            line = self.add("Range", [self.const(0, "int64"), self.const(n, "int64"), self.const(1, "int64")])
            lifted = [n if i == axis else 1 for i in range(len(ushape))] + [1]
            grids.append(self.add("Expand", [self.add("Reshape", [line, self.ints(lifted)]),
                                             self.ints(list(ushape) + [1])]))
        if not grids:  # a 0-d update: one position
            index = starts
        else:
            grid = self.add("Concat", grids, axis=-1) if len(grids) > 1 else grids[0]
            index = self.add("Add", [grid, starts])
        self.add("ScatterND", [args[0], index, args[1]], out)


Unsupported = _Unsupported


def write(graph: Graph) -> bytes:
    """The graph as a serialized ONNX model whose inputs are the params in order."""
    return _Writer(graph).write()
