"""Operator patterns that torch-mlir's StableHLO lowering gets silently
wrong (found by the ONNX node tests on XLA CPU against their reference
outputs): rewritten into standard operators it lowers correctly, or refused
by name so that ``compile_anywhere`` falls back to a device that runs them.

Rewritten:

- ``Mod`` with ``fmod=0`` (the default, Python's sign-of-divisor remainder):
  lowered as C's ``fmod`` whatever the attribute says, so the result is
  corrected where it is non-zero and its sign differs from the divisor's;
- ``SpaceToDepth``: its lowering orders the channels wrongly; written out
  as the Reshape → Transpose → Reshape of the ONNX definition;
- ``MaxPool`` with ``ceil_mode=1``: the lowering floors the output size;
  the same windows come from extra end padding (MaxPool pads with -inf)
  and ``ceil_mode=0``;
- ``ReduceMax`` / ``ReduceMin`` over ``bool``: reduced as float and
  compared with zero (empty reductions included);
- float ``Mod`` (either ``fmod``) gives NaN for a finite dividend over an
  infinite divisor: the dividend is put back there, as C's fmod gives it;
- ``LpNormalization``: an all-zero slice gives NaN (0/0) instead of 0;
- ``SoftmaxCrossEntropyLoss`` with class weights and ``reduction="mean"``:
  its weighted mean comes out infinite; written as LogSoftmax and
  NegativeLogLikelihoodLoss, as ONNX defines it (whose lowering is right).

Refused (reason ``unsupported-operator``), what no rewrite here fixes:

- ``SoftmaxCrossEntropyLoss`` with class weights and ``reduction="mean"``
  (the weighted mean comes out infinite) that the rewrite below leaves;
- ``MaxPool`` with ``ceil_mode=1`` that the rewrite above cannot take;
- ``GridSample`` with ``mode="nearest"``: halfway coordinates round the
  other way;
- ``LpPool`` over three spatial dimensions: wrong values;
- ``SplitToSequence`` of an empty tensor: the wrong number of pieces;
- ``ReduceMax`` / ``ReduceMin`` over ``bool`` with axes from a graph input
  (the rewrite needs them constant).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from nx_hal.onnx import prepass

__all__ = ["Refusal", "apply"]

_BOOL: Final = 9
_FLOAT: Final = 1
_FLOATS: Final = (1, 10, 11, 16)  # float32, float16, float64, bfloat16
_UNSIGNED: Final = (2, 4, 12, 13)  # uint8, uint16, uint32, uint64


@dataclass(frozen=True)
class Refusal:
    """A node the lowering would get wrong and no rewrite fixes."""

    op_type: str
    node: str  # the node in the user's terms (prepass.describe_node)
    why: str


class _Builder:
    """Fresh names and constants for the nodes a rewrite adds."""

    def __init__(self, model: Any) -> None:
        self.onnx = importlib.import_module("onnx")
        self.helper = self.onnx.helper
        self.model = model
        self.used = {n for node in model.graph.node for n in (*node.input, *node.output)}
        self.used |= {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input}
        self.name = prepass.FreshNames(self.used, "nxhal_guard_{hint}_{n}")

    def const(self, base: str, values: list[int] | float, *, int64: bool = True) -> str:
        numpy_helper = importlib.import_module("onnx.numpy_helper")
        np = importlib.import_module("numpy")
        name = self.name(base)
        array = np.asarray(values, dtype=np.int64 if int64 else np.float32)
        self.model.graph.initializer.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> Any:
        return self.helper.make_node(op, inputs, outputs or [self.name(op.lower())], **attrs)


def _attr(node: Any, name: str, default: Any) -> Any:
    onnx = importlib.import_module("onnx")
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def _static_shape(model: Any, name: str) -> list[int] | None:
    graph = model.graph
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.name == name and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return [int(d.dim_value) for d in dims]
            return None
    for init in graph.initializer:
        if init.name == name:
            return [int(d) for d in init.dims]
    return None


def _elem_type(model: Any, name: str) -> int | None:
    graph = model.graph
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.name == name and vi.type.HasField("tensor_type"):
            return int(vi.type.tensor_type.elem_type)
    for init in graph.initializer:
        if init.name == name:
            return int(init.data_type)
    return None


def _mod(b: _Builder, node: Any) -> list[Any] | None:
    fmod = _attr(node, "fmod", 0) != 0
    dtype = _elem_type(b.model, node.input[0])
    floats = dtype in _FLOATS
    if dtype in _UNSIGNED or (fmod and not floats):
        return None  # unsigned: both remainders agree; integer fmod is lowered right
    a, d = node.input[0], node.input[1]
    r = b.name("fmod")
    nodes = [b.node("Mod", [a, d], [r], fmod=1)]
    if floats:
        # fmod(finite, ±inf) is the dividend; the lowering gives NaN.
        nodes += [b.node("IsInf", [d]), b.node("IsInf", [a])]
        nodes += [b.node("Not", [nodes[-1].output[0]])]
        nodes += [b.node("And", [nodes[-3].output[0], nodes[-1].output[0]])]
        nodes += [b.node("Where", [nodes[-1].output[0], a, r], [node.output[0]] if fmod else None)]
        if fmod:
            return nodes
        r = nodes[-1].output[0]
    zero = b.const("zero", 0.0, int64=False)
    nodes.append(b.node("CastLike", [zero, r]))
    z = nodes[-1].output[0]
    nodes += [b.node("Less", [r, z]), b.node("Less", [d, z])]
    nodes.append(b.node("Xor", [nodes[-2].output[0], nodes[-1].output[0]]))
    differ = nodes[-1].output[0]
    nodes += [b.node("Equal", [r, z])]
    nodes += [b.node("Not", [nodes[-1].output[0]])]
    nodes += [b.node("And", [differ, nodes[-1].output[0]])]
    fix = nodes[-1].output[0]
    nodes += [b.node("Add", [r, d])]
    nodes.append(b.node("Where", [fix, nodes[-1].output[0], r], [node.output[0]]))
    return nodes


def _space_to_depth(b: _Builder, node: Any) -> list[Any] | None:
    shape = _static_shape(b.model, node.input[0])
    size = int(_attr(node, "blocksize", 0))
    if shape is None or len(shape) != 4 or size <= 0 or shape[2] % size or shape[3] % size:
        return None
    n, c, h, w = shape
    split = b.const("shape", [n, c, h // size, size, w // size, size])
    merged = b.const("shape", [n, c * size * size, h // size, w // size])
    mode = _attr(node, "mode", b"DCR")
    crd = (mode.decode() if isinstance(mode, bytes) else str(mode)) == "CRD"
    nodes = [b.node("Reshape", [node.input[0], split])]
    nodes.append(b.node("Transpose", [nodes[-1].output[0]], perm=[0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4]))
    nodes.append(b.node("Reshape", [nodes[-1].output[0], merged], [node.output[0]]))
    return nodes


def _max_pool(b: _Builder, node: Any) -> list[Any] | None:
    if _attr(node, "ceil_mode", 0) != 1:
        return None
    shape = _static_shape(b.model, node.input[0])
    auto_pad = _attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if shape is None or auto_pad != "NOTSET" or len([o for o in node.output if o]) != 1:
        return None
    kernel = list(_attr(node, "kernel_shape", []))
    rank = len(kernel)
    strides = list(_attr(node, "strides", [1] * rank))
    dilations = list(_attr(node, "dilations", [1] * rank))
    pads = list(_attr(node, "pads", [0] * (2 * rank)))
    spatial = shape[2:]
    if len(spatial) != rank:
        return None
    ends = pads[rank:]
    for axis in range(rank):
        extent = (kernel[axis] - 1) * dilations[axis] + 1
        padded = spatial[axis] + pads[axis] + pads[rank + axis]
        out = -(-(padded - extent) // strides[axis]) + 1  # ceil
        # A last window that would start in the end padding is dropped (ONNX, PyTorch).
        if (out - 1) * strides[axis] >= spatial[axis] + pads[axis]:
            out -= 1
        ends[axis] += max(0, (out - 1) * strides[axis] + extent - padded)
    attrs = {a.name: importlib.import_module("onnx").helper.get_attribute_value(a) for a in node.attribute}
    attrs.update(ceil_mode=0, pads=pads[:rank] + ends)
    return [b.node("MaxPool", list(node.input), list(node.output), **attrs)]


def _constant_axes(model: Any, node: Any) -> bool:
    """Whether a reduction's axes are known before it runs (attribute, initializer or none)."""
    if len(node.input) < 2 or not node.input[1]:
        return True
    return node.input[1] in {init.name for init in model.graph.initializer}


def _reduce_bool(b: _Builder, node: Any) -> list[Any] | None:
    """Max (min) over bool reduced as float, then compared with zero: the
    empty reduction's -inf (+inf) gives its identity, False (True)."""
    if _elem_type(b.model, node.input[0]) != _BOOL or not _constant_axes(b.model, node):
        return None
    attrs = {a.name: importlib.import_module("onnx").helper.get_attribute_value(a) for a in node.attribute}
    nodes = [b.node("Cast", [node.input[0]], to=_FLOAT)]
    nodes.append(b.node(node.op_type, [nodes[-1].output[0], *node.input[1:]], **attrs))
    nodes.append(b.node("Greater", [nodes[-1].output[0], b.const("zero", 0.0, int64=False)], list(node.output)))
    return nodes


def _lp_normalization(b: _Builder, node: Any) -> list[Any] | None:
    """x / norm where a zero norm (an all-zero slice) divides by one: ONNX
    gives 0 there, the lowering NaN."""
    p = int(_attr(node, "p", 2))
    if p not in (1, 2):
        return None
    axis = b.const("axes", [int(_attr(node, "axis", -1))])
    x = node.input[0]
    nodes = [b.node("ReduceL2" if p == 2 else "ReduceL1", [x, axis], keepdims=1)]
    norm = nodes[-1].output[0]
    zero = b.const("zero", 0.0, int64=False)
    one = b.const("one", 1.0, int64=False)
    nodes += [b.node("CastLike", [zero, norm]), b.node("CastLike", [one, norm])]
    nodes += [b.node("Equal", [norm, nodes[-2].output[0]])]
    nodes += [b.node("Where", [nodes[-1].output[0], nodes[-2].output[0], norm])]
    nodes.append(b.node("Div", [x, nodes[-1].output[0]], list(node.output)))
    return nodes


def _softmax_cross_entropy(b: _Builder, node: Any) -> list[Any] | None:
    """With class weights and a mean: LogSoftmax over the classes, then
    NegativeLogLikelihoodLoss (the operator's own ONNX definition), whose
    lowering weighs the mean correctly."""
    weighted = len(node.input) > 2 and bool(node.input[2])
    if not weighted or _text(node, "reduction", "mean") != "mean":
        return None
    log_prob = node.output[1] if len(node.output) > 1 and node.output[1] else b.name("log_prob")
    attrs: dict[str, Any] = {"reduction": "mean"}
    ignore = _attr(node, "ignore_index", None)
    if ignore is not None:
        attrs["ignore_index"] = int(ignore)
    return [b.node("LogSoftmax", [node.input[0]], [log_prob], axis=1),
            b.node("NegativeLogLikelihoodLoss", [log_prob, *node.input[1:3]], [node.output[0]], **attrs)]


_REWRITES: Final[dict[str, Callable[[_Builder, Any], list[Any] | None]]] = {
    "Mod": _mod,
    "SpaceToDepth": _space_to_depth,
    "MaxPool": _max_pool,
    "ReduceMax": _reduce_bool,
    "ReduceMin": _reduce_bool,
    "LpNormalization": _lp_normalization,
    "SoftmaxCrossEntropyLoss": _softmax_cross_entropy,
}


def _text(node: Any, name: str, default: str) -> str:
    value = _attr(node, name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _refusal(model: Any, node: Any) -> str | None:
    """Why ``node`` (left after the rewrites) would come out wrong, or None."""
    op = node.op_type
    if op == "SoftmaxCrossEntropyLoss":
        weighted = len(node.input) > 2 and bool(node.input[2])
        if weighted and _text(node, "reduction", "mean") == "mean":
            return "the class-weighted mean comes out infinite"
    if op == "MaxPool" and _attr(node, "ceil_mode", 0) == 1:
        return "ceil_mode=1 is lowered as ceil_mode=0 (rewritten only with static shapes, explicit pads, no Indices)"
    if op == "GridSample" and _text(node, "mode", "linear") == "nearest":
        return "mode 'nearest' rounds halfway coordinates differently from ONNX"
    if op in ("ReduceMax", "ReduceMin") and _elem_type(model, node.input[0]) == _BOOL:
        return "a bool reduction over axes computed at run time gives wrong values"
    if op == "SplitToSequence":
        shape = _static_shape(model, node.input[0])
        if shape is None or 0 in shape:
            return "splitting an empty tensor (or one of unknown shape) gives the wrong number of pieces"
    if op == "LpPool":
        shape = _static_shape(model, node.input[0])
        if shape is None or len(shape) > 4:
            return "three spatial dimensions (or an unknown rank) are pooled wrongly"
    return None


def apply(model: Any, notes: list[str]) -> tuple[Any, list[Refusal]]:
    """Rewrites the top-level graph's patterns above in place (``notes``
    says which) and returns the model with the nodes it must refuse."""
    builder = _Builder(model)
    rewritten: list[Any] = []
    done: dict[str, int] = {}
    for node in model.graph.node:
        rewrite = _REWRITES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        replacement = rewrite(builder, node) if rewrite is not None else None
        if replacement is None:
            rewritten.append(node)
            continue
        done[node.op_type] = done.get(node.op_type, 0) + 1
        rewritten.extend(replacement)
    if done:
        del model.graph.node[:]
        model.graph.node.extend(rewritten)
        notes.append("rewritten around lowering bugs: " + ", ".join(f"{op} x{n}" for op, n in sorted(done.items())))
    shapes = prepass.shapes_by_name(model)
    refusals = []
    for node in model.graph.node:
        why = _refusal(model, node) if node.domain in ("", "ai.onnx") else None
        if why is not None:
            refusals.append(Refusal(node.op_type, prepass.describe_node(node, node.name, shapes), why))
    return model, refusals
