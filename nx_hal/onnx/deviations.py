"""Where a backend computes an ONNX operator differently from ONNX's
reference, per plugin: the pattern rewritten so the result matches, or
refused by name, or checked at run time, never silently wrong. The same
policy as ``nx_hal.onnx.guards`` (which covers torch-mlir's lowering, for
every StableHLO backend), applied to what each backend itself does:

    prepared = prepare(model_bytes, plugin="npu")   # a PreparedOnnx

``KNOWN`` lists every deviation measured (against onnxruntime and ONNX's
reference implementation) with what nx_hal does about it; ``nx-hal
conformance`` prints it. ``Device.compile`` calls ``prepare`` for every ONNX
program (through ``nx_hal.converter.Converter.prepare_onnx``), before the
compile cache, the sandbox and the converter see it: their keys hold the
rewritten bytes. A model none of this touches keeps its own bytes.

The NaN rewrites test ``IsNaN(x)``, not ``Equal(x, x)`` (which XLA folds
to true), so they need the element type: ONNX's type inference runs once
where the model does not say it, on a copy without the large initializers,
and a model that is rewritten has only its nodes written again (its weights
are copied as bytes), so that a large model's compile pays milliseconds.

Some deviations depend on the machine, not only the plugin: ``prepare`` is
given the compiling device's attributes, and on an npu CPU device whose
``int8_pairs_saturate`` is true (x86 without VNNI) folds int8 weights that
would saturate OpenVINO's u8 x s8 pair sums into float initializers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nx_hal._warnings import warn_at_caller
from nx_hal.converter import Dim, PortShape, PreparedOnnx
from nx_hal.errors import InvalidArgumentError
from nx_hal.index_checks import Extent, IndexCheck
from nx_hal.onnx.prepass import FreshNames

__all__ = ["KNOWN", "MEASURED_ON", "Deviation", "known_deviations", "prepare"]

_FLOATS: Final = (1, 10, 11, 16)  # float32, float16, float64, bfloat16
_BFLOAT16: Final = 16


@dataclass(frozen=True)
class Deviation:
    """One way a backend departs from ONNX, and what nx_hal does about it."""

    ops: tuple[str, ...]
    what: str  # what the backend computes
    handling: str  # "rewritten", "refused", "checked at run time" or "not corrected"
    how: str  # how, or why not

    def to_dict(self) -> dict[str, object]:
        return {"ops": list(self.ops), "what": self.what, "handling": self.handling, "how": self.how}


# Ops each backend gets wrong for NaN (or infinite) inputs, rewritten by
# prepare() for that plugin's devices.
_NAN_OPS: Final[dict[str, frozenset[str]]] = {
    "npu": frozenset({"Relu", "Clip", "HardSigmoid", "Celu", "Exp", "Max", "Min", "ThresholdedRelu", "Shrink",
                      "Softmax", "LogSoftmax", "ReduceMax", "ReduceMin", "ReduceLogSumExp", "ArgMin",
                      "GlobalMaxPool"}),
    "tpu": frozenset({"Max", "Min", "Sign", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "GlobalMaxPool"}),
}

_INDICES: Final = (
    "Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
)

_OUT_OF_RANGE_NPU: Final = Deviation(
    _INDICES, "constant indices out of range: Gather and GatherND give zeros, ScatterElements writes a negative "
    "one elsewhere, the others fail at run time with an internal error (onnxruntime refuses them all)",
    "refused", "at compile time: InvalidArgumentError naming the node, the index and the axis size")
_OUT_OF_RANGE_TPU: Final = Deviation(
    _INDICES, "constant indices out of range are clamped into range (Gather, GatherElements, GatherND), or the "
    "update is dropped or lands elsewhere (ScatterElements, ScatterND), with no error", "refused",
    _OUT_OF_RANGE_NPU.how)
_INPUT_INDICES: Final = Deviation(
    _INDICES, "the same for indices fed from a graph input (directly, or through Identity, integer Casts, "
    "Reshape, Squeeze, Unsqueeze, Flatten, Transpose)", "checked at run time",
    "on the host before each run: InvalidArgumentError naming the input, the node and the index, as "
    "onnxruntime refuses them (Executable.check_inputs)")
_MAX_POOL: Final = Deviation(
    ("MaxPool",), "a NaN in a window is skipped", "not corrected",
    "ONNX leaves it open: its reference implementation and onnxruntime both give NaN or not depending on where "
    "in the window the NaN is, so there is no one result to match")
_COMPUTED_INDICES: Final = Deviation(
    _INDICES, "indices computed inside the graph (not a constant, not a graph input) cannot be checked before "
    "the run: out of range, they give what the rows above say", "not corrected",
    "known deviation: no ONNX operator can fail a run, so there is nothing to rewrite them into")

_INT8_PAIRS: Final = Deviation(
    ("DequantizeLinear", "Conv", "MatMul", "Gemm"),
    "on x86 CPUs without AVX512-VNNI or AVX-VNNI (the device attribute int8_pairs_saturate), int8 QDQ layers "
    "run as u8 x s8 multiply-adds whose 16-bit pair sums saturate once weights leave [-64, 64]: an int8 QDQ "
    "CNN came out 11% off ONNX's reference", "rewritten",
    "on those devices each DequantizeLinear of a constant int8 weight with a value outside [-64, 64] becomes a "
    "float initializer of its dequantized values (per tensor, per axis or per block); the activations' Q/DQ "
    "stay, so those layers run in float on dequantized activations, as ONNX's reference computes them, and "
    "at float's speed, not int8's (that CNN, one thread: 228 -> 299 us); weights within [-64, 64] keep int8")

KNOWN: Final[dict[str, tuple[Deviation, ...]]] = {
    "npu": (
        Deviation(("Relu", "Clip", "HardSigmoid", "Celu"), "NaN in gives a number out (Relu, Clip: the lower "
                  "bound or 0; HardSigmoid: 1; Celu: 0)", "rewritten", "Where(IsNaN(x), x, op(x))"),
        Deviation(("Exp",), "Exp(NaN) gives +inf", "rewritten", "Where(IsNaN(x), x, Exp(x))"),
        Deviation(("Max", "Min"), "a NaN in the first operand is dropped (the other operand comes out)",
                  "rewritten", "each operand that is NaN is put back into the result with Where"),
        Deviation(("ThresholdedRelu", "Shrink"), "NaN in gives NaN where ONNX gives 0; Shrink(+-inf) gives NaN",
                  "rewritten", "spelt out as ONNX defines them, with Less, Greater and Where"),
        Deviation(("Softmax", "LogSoftmax"), "a NaN or +inf along the axis leaves the rest of the row finite "
                  "where ONNX makes the whole row NaN", "rewritten",
                  "rows whose result holds a NaN are made all NaN (opset >= 13, or a known rank)"),
        Deviation(("ReduceMax", "ReduceMin", "ReduceLogSumExp", "GlobalMaxPool"),
                  "NaN is skipped (the result is a number, +-inf or +-FLT_MAX)", "rewritten",
                  "a sum of the NaNs (zero elsewhere) is added to the result"),
        Deviation(("ArgMin",), "NaN is skipped where ONNX's reference gives the first NaN's index", "rewritten",
                  "the index of the first (last, with select_last_index) NaN where there is one"),
        _INT8_PAIRS,
        _MAX_POOL,
        _OUT_OF_RANGE_NPU,
        _INPUT_INDICES,
        _COMPUTED_INDICES,
    ),
    "tpu": (
        Deviation(("Max", "Min"), "a NaN in the second operand is dropped", "rewritten",
                  "each operand that is NaN is put back into the result with Where"),
        Deviation(("Sign",), "Sign(NaN) gives 0", "rewritten", "Where(IsNaN(x), x, Sign(x))"),
        Deviation(("ReduceMax", "ReduceMin", "GlobalMaxPool"), "NaN is skipped", "rewritten",
                  "a sum of the NaNs (zero elsewhere) is added to the result"),
        Deviation(("ArgMax", "ArgMin"), "NaN is skipped where ONNX's reference gives the first NaN's index",
                  "rewritten", "the index of the first (last, with select_last_index) NaN where there is one"),
        Deviation(("Hardmax",), "a row holding NaN gets its 1 at another place than ONNX's reference (which "
                  "puts it at the first NaN; onnxruntime gives a row of zeros)", "not corrected",
                  "known deviation: the reference and onnxruntime disagree, and the op is rare"),
        _MAX_POOL,
        _OUT_OF_RANGE_TPU,
        _INPUT_INDICES,
        _COMPUTED_INDICES,
    ),
}

#: The devices and versions KNOWN was measured on.
MEASURED_ON: Final[dict[str, str]] = {
    "npu": "npu:cpu (OpenVINO 2026.4 CPU plugin)",
    "tpu": "tpu:cpu (XLA CPU through PJRT, after torch-mlir's lowering)",
}


def known_deviations(plugin: str) -> list[dict[str, object]]:
    """KNOWN for ``plugin`` as JSON-ready data ([] for a plugin not measured)."""
    return [d.to_dict() for d in KNOWN.get(plugin, ())]


_warned = False


def prepare(data: bytes, *, plugin: str, attributes: Mapping[str, object] | None = None) -> PreparedOnnx:
    """``data`` (ONNX bytes) as a device of ``plugin`` should compile it: the
    NaN patterns ``KNOWN`` lists rewritten, constant indices out of range
    refused (InvalidArgumentError naming the node, the index and the axis
    size), the checks for indices fed from graph inputs, and the graph's
    input and output names (one parse for all). ``attributes`` are the
    device's (``Device.attributes``): the facts of the one device compiling,
    where a deviation depends on the machine (``int8_pairs_saturate``, which
    the npu plugin reports for its CPU device). Bytes that do not parse are
    returned as they are, for the compile to say why."""
    global _warned
    try:
        onnx = importlib.import_module("onnx")
    except ImportError:
        if not _warned:
            _warned = True
            warn_at_caller("nx_hal: the onnx package is not installed, so ONNX models are compiled without the "
                           "corrections for known backend deviations (NaN through Relu, out-of-range indices: "
                           "see nx-hal conformance); pip install 'nx-hal[onnx]'", RuntimeWarning)
        return PreparedOnnx(data)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf's DecodeError, or worse on damaged bytes
        return PreparedOnnx(data)
    names = _io_names(model.graph)
    shapes = _io_shapes(model.graph, names)
    fixes = _NAN_OPS.get(plugin, frozenset())
    ops = {n.op_type for n in _all_nodes(model.graph) if n.domain in ("", "ai.onnx")}
    fold = "DequantizeLinear" in ops and _int8_pairs_saturate(plugin, attributes)
    if not ops & fixes and not ops & set(_INDICES) and not fold:
        return PreparedOnnx(data, names=names, shapes=shapes)
    try:
        context = _Context(model, plugin)
        checks = _index_checks(context) if ops & set(_INDICES) else ()
        changed = _rewrite(context, model.graph, fixes) if ops & fixes else 0
        # Last: the NaN rewrites may infer types, on a copy without the large initializers.
        changed += _fold_int8_weights(context) if fold else 0
    except InvalidArgumentError:
        raise
    except Exception:  # a damaged model (an attribute of no type, say): the compile refuses it by name
        return PreparedOnnx(data, names=names, shapes=shapes)
    # protobuf writes the whole model again: on 100 MB of weights about 20% more
    # than splicing the new nodes into the old bytes by hand, which it replaced.
    return PreparedOnnx(model.SerializeToString() if changed else data, tuple(checks), names, shapes)


def _io_names(graph: Any) -> tuple[list[str], list[str]]:
    """The graph's input (initializers excluded) and output names."""
    inits = {i.name for i in graph.initializer}
    return [x.name for x in graph.input if x.name not in inits], [y.name for y in graph.output]


# ONNX TensorProto element types -> nx_hal's dtype names.
_ONNX_DTYPES: Final = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 9: "bool", 10: "f16",
                       11: "f64", 12: "u32", 13: "u64", 16: "bf16"}


def _io_shapes(graph: Any, names: tuple[list[str], list[str]]) -> tuple[tuple[PortShape, ...], tuple[PortShape, ...]]:
    """The declared element type and dims of each input (initializers
    excluded) and output, in ``names``' order."""
    values = {v.name: v for v in (*graph.input, *graph.output)}

    def port(name: str) -> PortShape:
        value = values.get(name)
        if value is None or not value.type.HasField("tensor_type"):
            return ("?", None)
        tensor = value.type.tensor_type
        elem = int(tensor.elem_type)
        dtype = _ONNX_DTYPES.get(elem, f"onnx:{elem}")
        if not tensor.HasField("shape"):
            return (dtype, None)
        dims: list[Dim] = []
        for d in tensor.shape.dim:
            kind = d.WhichOneof("value")
            if kind == "dim_value":
                dims.append(int(d.dim_value) if d.dim_value >= 0 else None)
            else:
                dims.append((d.dim_param or None) if kind == "dim_param" else None)
        return (dtype, tuple(dims))

    return tuple(port(n) for n in names[0]), tuple(port(n) for n in names[1])


def _all_nodes(graph: Any) -> Iterator[Any]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _all_nodes(attr.g)
            for sub in attr.graphs:
                yield from _all_nodes(sub)


class _Context:
    """Names, types, constants and the opset of one model, for the rewrites."""

    def __init__(self, model: Any, plugin: str) -> None:
        self.onnx = importlib.import_module("onnx")
        self.np = importlib.import_module("numpy")
        self.model = model
        self.plugin = plugin
        self.opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.taken: set[str] = set()
        self.types: dict[str, Any] = {}
        self.constants: dict[str, Any] = {}
        self._inferred = False
        self.fresh = FreshNames(self.taken, "{hint}__nxhal{n}")
        self._collect(model.graph)

    def _collect(self, graph: Any) -> None:
        numpy_helper = self.onnx.numpy_helper
        for value in (*graph.input, *graph.value_info, *graph.output):
            self.taken.add(value.name)
            if value.type.HasField("tensor_type"):
                self.types.setdefault(value.name, value.type.tensor_type)
        for init in graph.initializer:
            self.taken.add(init.name)
            if not init.data_location:  # external data is not read here: its indices stay unchecked
                self.constants[init.name] = init
        for node in graph.node:
            self.taken.update(node.input)
            self.taken.update(node.output)
            self.taken.add(node.name)
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
                for attr in node.attribute:
                    if attr.name == "value":
                        self.constants[node.output[0]] = attr.t
                    elif attr.name in ("value_int", "value_ints"):
                        value = attr.i if attr.name == "value_int" else list(attr.ints)
                        self.constants[node.output[0]] = numpy_helper.from_array(self.np.asarray(value, "int64"))
            for attr in node.attribute:
                if attr.HasField("g"):
                    self._collect(attr.g)
                for sub in attr.graphs:
                    self._collect(sub)

    def value(self, name: str) -> Any:
        """The constant's value as numpy, or None."""
        tensor = self.constants.get(name)
        if tensor is None:
            return None
        try:
            return self.np.asarray(self.onnx.numpy_helper.to_array(tensor))
        except Exception:  # a damaged tensor: the compile says so
            return None

    def tensor_type(self, name: str) -> Any:
        """The value's tensor type (elem_type, shape), inferring once if needed."""
        if name not in self.types and name not in self.constants and not self._inferred:
            self._inferred = True
            try:
                inferred = self.onnx.shape_inference.infer_shapes(_without_weights(self.model))
            except Exception:  # a model inference rejects: only less is known
                return None
            self._typed(inferred.graph)
        return self.types.get(name)

    def _typed(self, graph: Any) -> None:
        for value in (*graph.value_info, *graph.output):
            if value.type.HasField("tensor_type"):
                self.types.setdefault(value.name, value.type.tensor_type)
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    self._typed(sub)

    def elem_type(self, name: str) -> int | None:
        if name in self.constants:
            return int(self.constants[name].data_type)
        found = self.tensor_type(name)
        return int(found.elem_type) if found is not None and found.elem_type else None

    def dims(self, name: str) -> list[int | str | None] | None:
        """The value's dims (an int, a symbol, or None), or None for an unknown rank."""
        if name in self.constants:
            return [int(d) for d in self.constants[name].dims]
        found = self.tensor_type(name)
        if found is None or not found.HasField("shape"):
            return None
        return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in found.shape.dim]


# ---------------------------------------------------------------- NaN rewrites


class _Block:
    """The nodes replacing one node; the last one writes the node's output."""

    def __init__(self, context: _Context, node: Any) -> None:
        self.c = context
        self.node = node
        self.nodes: list[Any] = []
        self.hint = (node.name or node.op_type).replace("/", "_")

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        output = out or self.c.fresh(f"{self.hint}_{op_type}")
        self.nodes.append(self.c.onnx.helper.make_node(op_type, list(inputs), [output],
                                                       name=self.c.fresh(f"{self.hint}_{op_type}"), **attrs))
        return output

    def original(self) -> str:
        """The node itself, writing a new name that the fix then reads."""
        copy = self.c.onnx.NodeProto()
        copy.CopyFrom(self.node)
        copy.output[0] = self.c.fresh(f"{self.hint}_raw")
        self.nodes.append(copy)
        return str(copy.output[0])

    def const(self, value: Any, dtype: str) -> str:
        array = self.c.np.asarray(value, dtype=dtype)
        return self.op("Constant", value=self.c.onnx.numpy_helper.from_array(array))

    def like(self, value: float, name: str) -> str | None:
        """A scalar ``value`` of ``name``'s element type, or None when that is unknown."""
        elem = self.c.elem_type(name)
        if elem:
            dtype = self.c.onnx.helper.tensor_dtype_to_np_dtype(elem)
            return self.const(value, dtype)
        if self.c.opset >= 15:
            return self.op("CastLike", self.const(value, "float32"), name)
        return None

    def reduce(self, op_type: str, data: str, axes: list[int] | None, keepdims: int, axes_input: str = "",
               noop: int = 0) -> str:
        """``op_type`` over ``axes`` (None: every axis), in the form this opset
        takes (axes an input from opset 13 for ReduceSum, 18 for the others)."""
        from_opset = 13 if op_type == "ReduceSum" else 18
        attrs: dict[str, Any] = {"keepdims": keepdims}
        if self.c.opset >= from_opset:
            if noop:
                attrs["noop_with_empty_axes"] = noop
            if axes is not None:
                axes_input = self.const(axes, "int64")
            return self.op(op_type, data, *([axes_input] if axes_input else []), **attrs)
        if axes is not None:
            attrs["axes"] = axes
        return self.op(op_type, data, **attrs)


def _attr(node: Any, name: str, default: Any) -> Any:
    for attr in node.attribute:
        if attr.name == name:
            value = importlib.import_module("onnx").helper.get_attribute_value(attr)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _floating(b: _Block, x: str) -> bool:
    """Whether ``x`` may hold NaN and IsNaN takes it in this opset (False
    where its type is unknown: the node is then left as it is)."""
    elem = b.c.elem_type(x)
    return b.c.opset >= 9 and elem in _FLOATS and (elem != _BFLOAT16 or b.c.opset >= 13)


def _keep_nan(b: _Block) -> bool:
    """op(x) where x is a number, x (NaN) where it is not."""
    x = b.node.input[0]
    if not _floating(b, x):
        return False
    raw = b.original()
    b.op("Where", b.op("IsNaN", x), x, raw, out=b.node.output[0])
    return True


def _max_min(b: _Block) -> bool:
    """Each operand's NaNs put back into the result (Where broadcasts them)."""
    operands = [x for x in dict.fromkeys(name for name in b.node.input if name) if _floating(b, x)]
    if len(operands) < 2:
        return False  # one operand: Max is the identity; integers: no NaN
    result = b.original()
    for i, x in enumerate(operands):
        last = i == len(operands) - 1
        result = b.op("Where", b.op("IsNaN", x), x, result, out=b.node.output[0] if last else None)
    return True


def _thresholded_relu(b: _Block) -> bool:
    x = b.node.input[0]
    alpha, zero = b.like(float(_attr(b.node, "alpha", 1.0)), x), b.like(0.0, x)
    if alpha is None or zero is None:
        return False
    b.op("Where", b.op("Greater", x, alpha), x, zero, out=b.node.output[0])
    return True


def _shrink(b: _Block) -> bool:
    x = b.node.input[0]
    if b.c.elem_type(x) not in _FLOATS:  # integers have no NaN or infinity to get wrong
        return False
    lambd, bias = float(_attr(b.node, "lambd", 0.5)), float(_attr(b.node, "bias", 0.0))
    low, high, shift, zero = (b.like(v, x) for v in (-lambd, lambd, bias, 0.0))
    if low is None or high is None or shift is None or zero is None:
        return False
    above = b.op("Where", b.op("Greater", x, high), b.op("Sub", x, shift), zero)
    b.op("Where", b.op("Less", x, low), b.op("Add", x, shift), above, out=b.node.output[0])
    return True


def _softmax(b: _Block) -> bool:
    """The backend leaves a NaN in each row it gets wrong: a row whose sum is
    NaN is made all NaN, as ONNX defines it."""
    x = b.node.input[0]
    if b.c.opset >= 13:
        axes = [int(_attr(b.node, "axis", -1))]
    else:  # the input taken as 2-D: every axis from ``axis`` on
        dims = b.c.dims(x)
        if not dims:  # an unknown rank (or a scalar, which ONNX refuses anyway)
            return False
        axes = list(range(int(_attr(b.node, "axis", 1)) % len(dims), len(dims)))
    if not _floating(b, x):
        return False
    raw = b.original()
    total = b.reduce("ReduceSum", raw, axes, 1)
    b.op("Where", b.op("IsNaN", total), total, raw, out=b.node.output[0])
    return True


def _nan_sum(b: _Block, x: str) -> str | None:
    """NaN where ``x`` is, 0 elsewhere (its sum is NaN exactly where a NaN
    is); None for a tensor that cannot hold NaN."""
    zero = b.like(0.0, x) if _floating(b, x) else None
    return None if zero is None else b.op("Where", b.op("IsNaN", x), x, zero)


def _reduce(b: _Block) -> bool:
    """The reduction plus the sum of ``x``'s NaNs over the same axes."""
    x = b.node.input[0]
    nans = _nan_sum(b, x)
    if nans is None:
        return False
    raw = b.original()
    keepdims = int(_attr(b.node, "keepdims", 1))
    if b.c.opset >= 18:  # axes are an input of both reductions
        axes_input = b.node.input[1] if len(b.node.input) > 1 else ""
        total = b.reduce("ReduceSum", nans, None, keepdims, axes_input,
                         int(_attr(b.node, "noop_with_empty_axes", 0)))
    else:
        axes = _attr(b.node, "axes", None)
        total = b.reduce("ReduceSum", nans, None if axes is None else list(axes), keepdims)
    b.op("Add", raw, total, out=b.node.output[0])
    return True


def _global_max_pool(b: _Block) -> bool:
    x = b.node.input[0]
    nans = _nan_sum(b, x)
    if nans is None:
        return False
    raw = b.original()
    rows = b.reduce("ReduceSum", b.op("Flatten", nans, axis=2), [1], 1)  # (N*C, 1)
    b.op("Add", raw, b.op("Reshape", rows, b.op("Shape", raw)), out=b.node.output[0])
    return True


def _arg(b: _Block) -> bool:
    """Where a NaN is along the axis: the index of the first (last) one."""
    x = b.node.input[0]
    if not _floating(b, x):
        return False
    axis, keepdims = int(_attr(b.node, "axis", 0)), int(_attr(b.node, "keepdims", 1))
    last = int(_attr(b.node, "select_last_index", 0))
    raw = b.original()
    nan = b.op("Cast", b.op("IsNaN", x), to=1)  # float 1 at NaN
    attrs: dict[str, Any] = {"axis": axis, "keepdims": keepdims}
    if last:  # an attribute from opset 12 on
        attrs["select_last_index"] = last
    where = b.op("ArgMax", nan, **attrs)
    found = b.op("Greater", b.reduce("ReduceMax", nan, [axis], keepdims), b.const(0.0, "float32"))
    b.op("Where", found, where, raw, out=b.node.output[0])
    return True


_FIXES: Final[dict[str, Callable[[_Block], bool]]] = {
    "Relu": _keep_nan, "Clip": _keep_nan, "HardSigmoid": _keep_nan, "Celu": _keep_nan, "Exp": _keep_nan,
    "Sign": _keep_nan, "Max": _max_min, "Min": _max_min, "ThresholdedRelu": _thresholded_relu, "Shrink": _shrink,
    "Softmax": _softmax, "LogSoftmax": _softmax, "ReduceMax": _reduce, "ReduceMin": _reduce,
    "ReduceLogSumExp": _reduce, "GlobalMaxPool": _global_max_pool, "ArgMax": _arg, "ArgMin": _arg,
}


def _rewrite(context: _Context, graph: Any, fixes: frozenset[str]) -> int:
    """Rewrites ``graph``'s nodes (and its subgraphs') whose op is in
    ``fixes``; returns how many."""
    count = 0
    nodes: list[Any] = []
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                count += _rewrite(context, attr.g, fixes)
            for sub in attr.graphs:
                count += _rewrite(context, sub, fixes)
        if node.domain in ("", "ai.onnx") and node.op_type in fixes and node.output and node.output[0]:
            block = _Block(context, node)
            if _FIXES[node.op_type](block):
                nodes.extend(block.nodes)
                count += 1
                continue
        nodes.append(node)
    if count:
        del graph.node[:]
        graph.node.extend(nodes)
    return count


# ---------------------------------------------------------------- indices

# Ops that pass every value of their input through unchanged, only
# rearranged: indices fed through them still come from the graph input.
_REARRANGE: Final = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose"})
_INTS: Final = {3: 1, 5: 2, 6: 4, 7: 8, 2: 1, 4: 2, 12: 4, 13: 8}  # int8, int16, int32, int64, uint*: bytes


def _index_checks(context: _Context) -> list[IndexCheck]:
    """Checks for the Gather-family nodes of the main graph whose indices come
    from a graph input; raises for constant indices out of range."""
    graph = context.model.graph
    producers = {o: n for n in graph.node for o in n.output}
    inputs = [v.name for v in graph.input if v.name not in {i.name for i in graph.initializer}]
    checks: list[IndexCheck] = []
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _INDICES or len(node.input) < 2:
            continue
        per_last = node.op_type in ("GatherND", "ScatterND")
        source = _source(context, node.input[1], producers, rearranged=not per_last)
        if source is None:
            continue
        indexed = _extents(context, node, inputs)
        if indexed is None:
            continue
        axes, extents = indexed
        label = _describe(node)
        check = IndexCheck(source, label, axes, extents, per_last)
        value = context.value(source)
        if source in inputs:
            checks.append(check)
        elif value is not None and value.dtype.kind in "iu":
            found = check.out_of_range(value, lambda _name: None)
            if found is not None:
                index, axis, size = found
                raise InvalidArgumentError(
                    f"{label} has a constant index out of range: {index} along axis {axis} of its data, of size "
                    f"{size} (ONNX allows [-{size}, {size}); onnxruntime refuses it when the model runs, where "
                    "backends give zeros or clamp it)", plugin=context.plugin)
    return checks


def _source(context: _Context, name: str, producers: dict[str, Any], *, rearranged: bool) -> str | None:
    """The graph input or constant whose values ``name`` carries unchanged
    (through Identity, integer Casts that cannot wrap, and, with
    ``rearranged``, ops that only reshape or permute), or None."""
    for _ in range(64):  # a bound, not trust, on the chain's length
        node = producers.get(name)
        if node is None or (node.op_type == "Constant" and node.domain in ("", "ai.onnx")):
            return name
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Cast":
            source, target = context.elem_type(node.input[0]), int(_attr(node, "to", 0))
            if source not in _INTS or target not in _INTS or _INTS[target] < _INTS[source]:
                return None
        elif node.op_type != "Identity" and not (rearranged and node.op_type in _REARRANGE):
            return None
        name = node.input[0]
    return None


def _extents(context: _Context, node: Any, inputs: list[str]
             ) -> tuple[tuple[int, ...], tuple[Extent | None, ...]] | None:
    """The data axes the node's indices run along and their sizes: one, or
    for GatherND and ScatterND every data axis from the first indexed one."""
    dims = context.dims(node.input[0])
    if dims is None:
        return None
    rank = len(dims)
    if node.op_type in ("GatherND", "ScatterND"):
        first = int(_attr(node, "batch_dims", 0))
        axes = list(range(first, rank))
    else:
        axis = int(_attr(node, "axis", 0))
        if not -rank <= axis < rank:
            return None  # an invalid model: the compile says so
        axes = [axis % rank]
    extents = tuple(_extent(context, node.input[0], dims, axis, inputs) for axis in axes)
    return (tuple(axes), extents) if any(e is not None for e in extents) else None


def _extent(context: _Context, data: str, dims: list[int | str | None], axis: int,
            inputs: list[str]) -> Extent | None:
    """The size of ``data``'s ``axis``: a number, or a graph input's axis
    with the same symbol (read in each run), or None."""
    dim = dims[axis]
    if isinstance(dim, int):
        return dim
    if dim is None:
        return None
    if data in inputs:
        return (data, axis)
    for name in inputs:
        found = context.dims(name) or []
        if dim in found:
            return (name, found.index(dim))
    return None


def _describe(node: Any) -> str:
    return f"{node.op_type} node '{node.name}'" if node.name else f"{node.op_type} node (unnamed, output '{node.output[0]}')"


# ---------------------------------------------------------------- int8 weights

# Weights within [-64, 64] cannot saturate a pair sum: 2 * 255 * 64 < 2**15 - 1 (onnxruntime's reduce_range gives such weights).
_INT8_SAFE: Final = (-64, 64)
_INT8: Final = 3


def _int8_pairs_saturate(plugin: str, attributes: Mapping[str, object] | None) -> bool:
    """Whether this device's int8 kernels saturate (the npu plugin says so
    for its CPU device, on x86 CPUs without VNNI)."""
    return plugin == "npu" and attributes is not None and attributes.get("int8_pairs_saturate") is True


def _fold_int8_weights(context: _Context) -> int:
    """Each DequantizeLinear of the main graph reading a constant int8 weight
    with a value outside [-64, 64] replaced by a float initializer of its
    dequantized values, named as its output; the int8 initializers nothing
    reads any more dropped. Returns how many. (Subgraphs are left: QDQ
    exporters write weights into the main graph.)"""
    graph = context.model.graph
    outputs = {o.name for o in graph.output}
    folded: list[Any] = []
    nodes: list[Any] = []
    for node in graph.node:
        if (node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx") and len(node.input) >= 2
                and node.output and node.output[0] and node.output[0] not in outputs):
            value = _dequantized(context, node)
            if value is not None:
                folded.append(context.onnx.numpy_helper.from_array(value, node.output[0]))
                continue
        nodes.append(node)
    if not folded:
        return 0
    del graph.node[:]
    graph.node.extend(nodes)
    read = {name for n in _all_nodes(graph) for name in n.input} | outputs | {v.name for v in graph.input}
    kept = [init for init in graph.initializer if init.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept + folded)
    if context.model.ir_version < 4:  # initializers were graph inputs then
        for init in folded:
            graph.input.append(context.onnx.helper.make_tensor_value_info(init.name, init.data_type,
                                                                           list(init.dims)))
    return len(folded)


def _dequantized(context: _Context, node: Any) -> Any:
    """``node``'s output as ONNX's reference computes it, when its input is a
    constant int8 weight reaching outside [-64, 64] and its scale and zero
    point are constants of the shapes ONNX allows; else None (left as it is:
    an invalid one is the compile's to refuse)."""
    np = context.np
    source = context.constants.get(node.input[0])
    if source is None or int(source.data_type) != _INT8:
        return None
    x, scale = context.value(node.input[0]), context.value(node.input[1])
    zero = context.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if x is None or scale is None or (len(node.input) > 2 and node.input[2] and zero is None):
        return None
    if x.size == 0 or (int(x.min()) >= _INT8_SAFE[0] and int(x.max()) <= _INT8_SAFE[1]):
        return None
    if scale.dtype.kind != "f" and "float" not in str(scale.dtype):  # bfloat16 is ml_dtypes'
        return None
    if zero is not None and (zero.dtype != x.dtype or zero.shape != scale.shape):
        return None
    block = int(_attr(node, "block_size", 0))
    axis = int(_attr(node, "axis", 1))
    shaped = _quantization_shape(np, x.shape, scale.shape, axis, block)
    if shaped is None:
        return None
    dx = x.astype(np.float32)
    if zero is not None:
        dx = dx - shaped(zero).astype(np.float32)
    y = dx * shaped(scale)
    output_dtype = int(_attr(node, "output_dtype", 0))
    dtype = context.onnx.helper.tensor_dtype_to_np_dtype(output_dtype) if output_dtype else scale.dtype
    return np.ascontiguousarray(y.astype(dtype))


def _quantization_shape(np: Any, shape: tuple[int, ...], param: tuple[int, ...], axis: int,
                        block: int) -> Callable[[Any], Any] | None:
    """How a scale (or zero point) of shape ``param`` spreads over a weight of
    ``shape``: per tensor, per ``axis`` or per block of ``block`` along it;
    None for a shape ONNX does not allow."""
    size = 1
    for d in param:
        size *= d
    if size == 1 and len(param) <= 1 and not block:
        return lambda p: p.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        return None
    axis %= rank
    if not block:
        if len(param) != 1 or param[0] != shape[axis]:
            return None
        along = [1] * rank
        along[axis] = shape[axis]
        return lambda p: p.reshape(along)
    if block < 0:
        return None
    blocks = -(-shape[axis] // block)
    if len(param) != rank or any(
            p != (blocks if i == axis else d) for i, (p, d) in enumerate(zip(param, shape, strict=True))):
        return None
    return lambda p: np.repeat(p, block, axis=axis).take(np.arange(shape[axis]), axis=axis)


# ---------------------------------------------------------------- writing the model

# Initializers with more elements than this are left out of the copy that
# type inference reads (declared as inputs of their type and shape instead):
# inference needs only the small ones' values (shapes, axes).
_INFERENCE_MAX_ELEMENTS: Final = 1024


def _without_weights(model: Any) -> Any:
    """A copy of ``model`` for type inference, its large initializers
    replaced by inputs of the same type and shape (inference copies the
    whole model into C++: a 100 MB model took a second)."""
    onnx = importlib.import_module("onnx")
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    graph = model.graph
    light.graph.name = graph.name
    light.graph.node.extend(graph.node)
    light.graph.input.extend(graph.input)
    light.graph.output.extend(graph.output)
    light.graph.value_info.extend(graph.value_info)
    declared = {v.name for v in graph.input}
    for init in graph.initializer:
        count = 1
        for dim in init.dims:
            count *= int(dim)
        if count <= _INFERENCE_MAX_ELEMENTS and not init.data_location:
            light.graph.initializer.append(init)
        elif init.name not in declared:
            light.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return light
