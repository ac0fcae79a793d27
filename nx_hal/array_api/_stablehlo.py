"""A graph (``_graph``) written out as StableHLO text for PJRT devices.

Generic MLIR op syntax throughout: one form for every op, with or without
attributes and regions. CHLO ops (asin, erf, ...) are legal in what PJRT
compiles: XLA legalizes them, as it does for JAX's own modules.
"""

from __future__ import annotations

import numpy as np

from nx_hal.array_api._graph import Graph, Node

__all__ = ["write"]

_ELEMENT = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "float16": "f16", "float32": "f32", "float64": "f64", "complex64": "complex<f32>", "complex128": "complex<f64>",
}
_PART = {"complex64": "float32", "complex128": "float64"}
_UNARY = {
    "neg": "stablehlo.negate", "abs": "stablehlo.abs", "sign": "stablehlo.sign", "floor": "stablehlo.floor",
    "ceil": "stablehlo.ceil", "round": "stablehlo.round_nearest_even", "sqrt": "stablehlo.sqrt",
    "exp": "stablehlo.exponential", "expm1": "stablehlo.exponential_minus_one", "log": "stablehlo.log",
    "log1p": "stablehlo.log_plus_one", "sin": "stablehlo.sine", "cos": "stablehlo.cosine", "tan": "chlo.tan",
    "tanh": "stablehlo.tanh", "asin": "chlo.asin", "acos": "chlo.acos", "atan": "chlo.atan",
    "sinh": "chlo.sinh", "cosh": "chlo.cosh", "asinh": "chlo.asinh", "acosh": "chlo.acosh",
    "atanh": "chlo.atanh", "not": "stablehlo.not", "isfinite": "stablehlo.is_finite", "isinf": "chlo.is_inf",
    "erf": "chlo.erf",
}
_BINARY = {
    "add": "stablehlo.add", "sub": "stablehlo.subtract", "mul": "stablehlo.multiply",
    "div": "stablehlo.divide", "pow": "stablehlo.power", "max": "stablehlo.maximum",
    "min": "stablehlo.minimum", "atan2": "stablehlo.atan2", "rem": "stablehlo.remainder",
    "and": "stablehlo.and", "or": "stablehlo.or", "xor": "stablehlo.xor", "shl": "stablehlo.shift_left",
    "nextafter": "chlo.next_after",
}
_DIRECTION = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}
_REDUCER = {"sum": "stablehlo.add", "prod": "stablehlo.multiply", "max": "stablehlo.maximum",
            "min": "stablehlo.minimum", "all": "stablehlo.and", "any": "stablehlo.or"}


def tensor(dtype: str, shape: tuple[int, ...]) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{_ELEMENT[dtype]}>"


def _compare_type(dtype: str) -> str:
    if dtype.startswith(("float", "complex")):
        return "FLOAT"
    return "UNSIGNED" if dtype.startswith("uint") or dtype == "bool" else "SIGNED"


def _scalar_literal(value: object, dtype: str) -> str:
    arr = np.asarray(value, dtype=dtype)
    if dtype == "bool":
        return "true" if bool(arr) else "false"
    if dtype.startswith("float"):
        bits = arr.view(np.uint16 if dtype == "float16" else np.uint32 if dtype == "float32" else np.uint64)
        return f"0x{int(bits):0{arr.itemsize * 2}X}"
    if dtype in _PART:
        part = _PART[dtype]
        return f"({_scalar_literal(arr.real, part)}, {_scalar_literal(arr.imag, part)})"
    return str(int(arr))


def _dense(raw: bytes, dtype: str, shape: tuple[int, ...]) -> str:
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    flat = arr.reshape(-1)
    if flat.size and (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all():
        return f"dense<{_scalar_literal(flat[0], dtype)}>"
    if flat.size == 0:
        return "dense<>" if arr.ndim else "dense<0>"
    if dtype == "bool":
        return f"dense<\"0x{arr.astype(np.uint8).tobytes().hex().upper()}\">"
    if dtype in _PART:
        items = ", ".join(_scalar_literal(v, dtype) for v in flat)
        return f"dense<[{items}]>" if arr.ndim == 1 else f"dense<{_scalar_literal(flat[0], dtype)}>"
    return f"dense<\"0x{arr.tobytes().hex().upper()}\">"


def _i64s(values: tuple[int, ...]) -> str:
    return f"array<i64{': ' if values else ''}{', '.join(str(v) for v in values)}>"


class _Writer:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.lines: list[str] = []
        self.count = 0

    def name(self, index: int) -> str:
        return f"%v{index}"

    def ty(self, index: int) -> str:
        node = self.graph.nodes[index]
        return tensor(node.dtype, node.shape)

    def emit(self, result: str, op: str, args: list[str], types: list[str], out: str, attrs: str = "",
             region: str = "") -> None:
        attr = f" {{{attrs}}}" if attrs else ""
        reg = f" ({{\n{region}\n  }})" if region else ""
        self.lines.append(f"    {result} = \"{op}\"({', '.join(args)}){reg}{attr} : "
                          f"({', '.join(types)}) -> {out}")

    def temp(self) -> str:
        self.count += 1
        return f"%t{self.count}"

    def scalar(self, value: object, dtype: str) -> str:
        name = self.temp()
        self.emit(name, "stablehlo.constant", [], [], tensor(dtype, ()),
                  f"value = dense<{_scalar_literal(value, dtype)}> : {tensor(dtype, ())}")
        return name

    def write(self) -> str:
        g = self.graph
        params = []
        for k in g.used_params():
            index = g.params[k]
            node = g.nodes[index]
            if node.dtype in _PART:  # a complex array's buffer holds (real, imag) float pairs
                params.append(f"%p{index}: {tensor(_PART[node.dtype], node.shape + (2,))}")
                self.unpack(index, node)
            else:
                params.append(f"%v{index}: {self.ty(index)}")
        for index, node in enumerate(g.nodes):
            if node.op != "param":
                self.node(index, node)
        rets, rtypes = [], []
        for index in g.outputs:
            node = g.nodes[index]
            if node.dtype in _PART:
                rets.append(self.pack(index, node))
                rtypes.append(tensor(_PART[node.dtype], node.shape + (2,)))
            else:
                rets.append(self.name(index))
                rtypes.append(self.ty(index))
        params_text = ", ".join(params)
        outs = ", ".join(rtypes)
        body = "\n".join(self.lines)
        return (f"module @nx_hal_array {{\n  func.func public @main({params_text}) -> ({outs}) {{\n{body}\n"
                f"    \"func.return\"({', '.join(rets)}) : ({outs}) -> ()\n  }}\n}}\n")

    def unpack(self, index: int, node: Node) -> None:
        part, shape, rank = _PART[node.dtype], node.shape, len(node.shape)
        pairs = tensor(part, shape + (2,))
        halves = []
        for k in range(2):
            cut = self.temp()
            self.emit(cut, "stablehlo.slice", [f"%p{index}"], [pairs], tensor(part, shape + (1,)),
                      f"start_indices = {_i64s((0,) * rank + (k,))}, limit_indices = {_i64s(shape + (k + 1,))}, "
                      f"strides = {_i64s((1,) * (rank + 1))}")
            flat = self.temp()
            self.emit(flat, "stablehlo.reshape", [cut], [tensor(part, shape + (1,))], tensor(part, shape))
            halves.append(flat)
        self.emit(self.name(index), "stablehlo.complex", halves, [tensor(part, shape)] * 2, self.ty(index))

    def pack(self, index: int, node: Node) -> str:
        part, shape = _PART[node.dtype], node.shape
        halves = []
        for op in ("stablehlo.real", "stablehlo.imag"):
            half = self.temp()
            self.emit(half, op, [self.name(index)], [self.ty(index)], tensor(part, shape))
            col = self.temp()
            self.emit(col, "stablehlo.reshape", [half], [tensor(part, shape)], tensor(part, shape + (1,)))
            halves.append(col)
        out = self.temp()
        self.emit(out, "stablehlo.concatenate", halves, [tensor(part, shape + (1,))] * 2, tensor(part, shape + (2,)),
                  f"dimension = {len(shape)} : i64")
        return out

    def node(self, index: int, node: Node) -> None:  # noqa: C901 - one case per op
        res, out = self.name(index), tensor(node.dtype, node.shape)
        args = [self.name(i) for i in node.inputs]
        types = [self.ty(i) for i in node.inputs]
        op = node.op
        if op in _UNARY:
            self.emit(res, _UNARY[op], args, types, out)
        elif op == "isnan":
            self.emit(res, "stablehlo.compare", args * 2, types * 2, out,
                      "comparison_direction = #stablehlo<comparison_direction NE>")
        elif op in _BINARY:
            self.emit(res, _BINARY[op], args, types, out)
        elif op == "shr":
            dtype = self.graph.nodes[node.inputs[0]].dtype
            kind = "logical" if dtype.startswith("uint") else "arithmetic"
            self.emit(res, f"stablehlo.shift_right_{kind}", args, types, out)
        elif op in _DIRECTION:
            dtype = self.graph.nodes[node.inputs[0]].dtype
            self.emit(res, "stablehlo.compare", args, types, out,
                      f"comparison_direction = #stablehlo<comparison_direction {_DIRECTION[op]}>, "
                      f"compare_type = #stablehlo<comparison_type {_compare_type(dtype)}>")
        elif op == "fft":
            kind, length = node.attrs
            self.emit(res, "stablehlo.fft", args, types, out,
                      f"fft_type = #stablehlo<fft_type {kind}>, fft_length = {_i64s((length,))}")
        elif op in ("real", "imag", "complex"):
            self.emit(res, f"stablehlo.{op}", args, types, out)
        elif op == "constant":
            self.emit(res, "stablehlo.constant", [], [], out, f"value = {_dense(node.attrs[0], node.dtype, node.shape)} : {out}")
        elif op == "convert":
            self.emit(res, "stablehlo.convert", args, types, out)
        elif op == "select":
            self.emit(res, "stablehlo.select", args, types, out)
        elif op == "broadcast":
            self.emit(res, "stablehlo.broadcast_in_dim", args, types, out,
                      f"broadcast_dimensions = {_i64s(node.attrs[0])}")
        elif op == "reshape":
            self.emit(res, "stablehlo.reshape", args, types, out)
        elif op == "transpose":
            self.emit(res, "stablehlo.transpose", args, types, out, f"permutation = {_i64s(node.attrs[0])}")
        elif op == "slice":
            start, limit, stride = node.attrs
            self.emit(res, "stablehlo.slice", args, types, out,
                      f"start_indices = {_i64s(start)}, limit_indices = {_i64s(limit)}, strides = {_i64s(stride)}")
        elif op == "reverse":
            self.emit(res, "stablehlo.reverse", args, types, out, f"dimensions = {_i64s(node.attrs[0])}")
        elif op == "concat":
            self.emit(res, "stablehlo.concatenate", args, types, out, f"dimension = {node.attrs[0]} : i64")
        elif op == "reduce":
            self.reduce(res, node, args[0], types[0], out)
        elif op == "dot":
            xb, yb, xc, yc = node.attrs
            self.emit(res, "stablehlo.dot_general", args, types, out,
                      "dot_dimension_numbers = #stablehlo.dot<"
                      f"lhs_batching_dimensions = [{', '.join(map(str, xb))}], "
                      f"rhs_batching_dimensions = [{', '.join(map(str, yb))}], "
                      f"lhs_contracting_dimensions = [{', '.join(map(str, xc))}], "
                      f"rhs_contracting_dimensions = [{', '.join(map(str, yc))}]>")
        elif op == "iota":
            self.emit(res, "stablehlo.iota", [], [], out, f"iota_dimension = {node.attrs[0]} : i64")
        elif op == "sort":
            self.sort(res, node, args[0], types[0])
        elif op == "cumsum":
            self.cumsum(res, node, args[0], types[0], out)
        elif op == "argreduce":
            self.argreduce(res, node, args[0], types[0], out)
        elif op == "dynamic_slice":
            self.emit(res, "stablehlo.dynamic_slice", args, types, out, f"slice_sizes = {_i64s(node.attrs[0])}")
        elif op == "dynamic_update_slice":
            self.emit(res, "stablehlo.dynamic_update_slice", args, types, out)
        elif op == "take":
            self.take(res, node, args, types, out)
        else:  # pragma: no cover - every op of _graph is handled above
            raise NotImplementedError(op)

    def region(self, dtypes: list[str], body: list[str], ret: str, rtype: str) -> str:
        params = ", ".join(f"%r{i}: {tensor(d, ())}" for i, d in enumerate(dtypes))
        inner = "\n".join(f"      {line.strip()}" for line in body)
        return (f"    ^bb0({params}):\n{inner}\n      \"stablehlo.return\"({ret}) : ({rtype}) -> ()")

    def _init(self, kind: str, dtype: str) -> object:
        if kind == "sum" or kind == "any":
            return 0
        if kind == "prod" or kind == "all":
            return 1
        if dtype.startswith("float"):
            return -np.inf if kind == "max" else np.inf
        info = np.iinfo(dtype) if dtype != "bool" else None
        if info is None:
            return 0 if kind == "max" else 1
        return info.min if kind == "max" else info.max

    def reduce(self, res: str, node: Node, arg: str, ty: str, out: str) -> None:
        kind, axes = node.attrs
        dtype = node.dtype
        init = self.scalar(self._init(kind, dtype), dtype)
        st = tensor(dtype, ())
        body = [f"%s = \"{_REDUCER[kind]}\"(%r0, %r1) : ({st}, {st}) -> {st}"]
        self.emit(res, "stablehlo.reduce", [arg, init], [ty, st], out, f"dimensions = {_i64s(axes)}",
                  self.region([dtype, dtype], body, "%s", st))

    def sort(self, res: str, node: Node, arg: str, ty: str) -> None:
        axis, descending, indices = node.attrs
        src = self.graph.nodes[node.inputs[0]]
        iota_ty = tensor("int64", src.shape)
        iota = self.temp()
        self.emit(iota, "stablehlo.iota", [], [], iota_ty, f"iota_dimension = {axis} : i64")
        st = tensor(src.dtype, ())
        direction = "GT" if descending else "LT"
        # TOTALORDER puts NaN last ascending (and first descending) as numpy's sort does for the former.
        ctype = "TOTALORDER" if src.dtype.startswith("float") else _compare_type(src.dtype)
        body = [f"%p = \"stablehlo.compare\"(%r0, %r1) {{comparison_direction = #stablehlo<comparison_direction "
                f"{direction}>, compare_type = #stablehlo<comparison_type {ctype}>}} : ({st}, {st}) -> tensor<i1>"]
        both = self.temp()
        region = self.region([src.dtype, src.dtype, "int64", "int64"], body, "%p", "tensor<i1>")
        self.lines.append(f"    {both}:2 = \"stablehlo.sort\"({arg}, {iota}) ({{\n{region}\n  }}) "
                          f"{{dimension = {axis} : i64, is_stable = true}} : ({ty}, {iota_ty}) -> ({ty}, {iota_ty})")
        pick = f"{both}#1" if indices else f"{both}#0"
        out = iota_ty if indices else ty
        self.emit(res, "stablehlo.reshape", [pick], [out], out)

    def cumsum(self, res: str, node: Node, arg: str, ty: str, out: str) -> None:
        axis, kind = node.attrs
        shape = node.shape
        dtype = node.dtype
        init = self.scalar(0 if kind == "sum" else 1, dtype)
        st = tensor(dtype, ())
        window = tuple(shape[axis] if i == axis else 1 for i in range(len(shape)))
        pad = ", ".join(f"[{shape[axis] - 1 if i == axis else 0}, 0]" for i in range(len(shape)))
        body = [f"%s = \"{_REDUCER[kind]}\"(%r0, %r1) : ({st}, {st}) -> {st}"]
        padding = f"dense<[{pad}]> : tensor<{len(shape)}x2xi64>"
        self.emit(res, "stablehlo.reduce_window", [arg, init], [ty, st], out,
                  f"window_dimensions = {_i64s(window)}, padding = {padding}",
                  self.region([dtype, dtype], body, "%s", st))

    def argreduce(self, res: str, node: Node, arg: str, ty: str, out: str) -> None:
        kind, axis = node.attrs
        src = self.graph.nodes[node.inputs[0]]
        dtype = src.dtype
        iota_ty = tensor("int64", src.shape)
        iota = self.temp()
        self.emit(iota, "stablehlo.iota", [], [], iota_ty, f"iota_dimension = {axis} : i64")
        init_v = self.scalar(self._init(kind, dtype), dtype)
        init_i = self.scalar(0, "int64")
        st, it, bt = tensor(dtype, ()), tensor("int64", ()), "tensor<i1>"
        direction = "GT" if kind == "max" else "LT"
        ctype = _compare_type(dtype)
        def compare(name: str, a: str, b: str, direction: str, ctype: str, t: str) -> str:
            return (f"%{name} = \"stablehlo.compare\"({a}, {b}) {{comparison_direction = #stablehlo<comparison_direction "
                    f"{direction}>, compare_type = #stablehlo<comparison_type {ctype}>}} : ({t}, {t}) -> {bt}")

        def logic(name: str, op: str, *xs: str) -> str:
            return f"%{name} = \"stablehlo.{op}\"({', '.join(xs)}) : ({', '.join([bt] * len(xs))}) -> {bt}"

        # (value, index) pairs: a NaN wins (numpy returns the first NaN), then
        # the better value, then on a tie the lower index; symmetric, so the
        # order in which XLA combines pairs does not matter.
        body = [
            compare("na", "%r0", "%r0", "NE", ctype, st), compare("nb", "%r1", "%r1", "NE", ctype, st),
            compare("lo", "%r2", "%r3", "LT", "SIGNED", it), compare("gt", "%r0", "%r1", direction, ctype, st),
            compare("eq", "%r0", "%r1", "EQ", ctype, st), logic("el", "and", "%eq", "%lo"),
            logic("better", "or", "%gt", "%el"), logic("nnb", "not", "%nb"), logic("k", "or", "%nnb", "%lo"),
            logic("nw", "and", "%na", "%k"), logic("any", "or", "%na", "%nb"),
            f"%w = \"stablehlo.select\"(%any, %nw, %better) : ({bt}, {bt}, {bt}) -> {bt}",
            f"%v = \"stablehlo.select\"(%w, %r0, %r1) : ({bt}, {st}, {st}) -> {st}",
            f"%i = \"stablehlo.select\"(%w, %r2, %r3) : ({bt}, {it}, {it}) -> {it}",
        ]
        both = self.temp()
        vals_ty = tensor(dtype, node.shape)
        # Region parameter order of a variadic reduce: (acc values..., new values...).
        params = f"%r0: {st}, %r2: {it}, %r1: {st}, %r3: {it}"
        inner = "\n".join(f"      {line}" for line in body)
        region = f"    ^bb0({params}):\n{inner}\n      \"stablehlo.return\"(%v, %i) : ({st}, {it}) -> ()"
        self.lines.append(f"    {both}:2 = \"stablehlo.reduce\"({arg}, {iota}, {init_v}, {init_i}) ({{\n{region}\n  }}) "
                          f"{{dimensions = {_i64s((axis,))}}} : ({ty}, {iota_ty}, {st}, {it}) -> ({vals_ty}, {out})")
        self.emit(res, "stablehlo.reshape", [f"{both}#1"], [out], out)

    def take(self, res: str, node: Node, args: list[str], types: list[str], out: str) -> None:
        (axis,) = node.attrs
        x = self.graph.nodes[node.inputs[0]]
        idx = self.graph.nodes[node.inputs[1]]
        # Indices get a trailing index-vector dim of 1; offset dims are x's other axes.
        idx_shape = idx.shape + (1,)
        col = self.temp()
        self.emit(col, "stablehlo.reshape", [args[1]], [types[1]], tensor(idx.dtype, idx_shape))
        sizes = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
        offset = tuple(i for i in range(len(node.shape)) if i < axis or i >= axis + len(idx.shape))
        dims = (f"#stablehlo.gather<offset_dims = [{', '.join(map(str, offset))}], collapsed_slice_dims = [{axis}], "
                f"start_index_map = [{axis}], index_vector_dim = {len(idx.shape)}>")
        self.emit(res, "stablehlo.gather", [args[0], col], [types[0], tensor(idx.dtype, idx_shape)], out,
                  f"dimension_numbers = {dims}, slice_sizes = {_i64s(sizes)}, indices_are_sorted = false")


def write(graph: Graph) -> bytes:
    """The graph as a StableHLO module (text) whose @main takes the params in order."""
    return _Writer(graph).write().encode()
