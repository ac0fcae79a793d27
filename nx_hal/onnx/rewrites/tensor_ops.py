"""Standard operators torch-mlir's StableHLO lowering lacks or gets stuck on
(found by the ONNX node tests on XLA CPU), in standard operators it lowers:

- NegativeLogLikelihoodLoss: ``torch.aten.nll_loss_forward`` has no
  lowering; written as GatherElements of the target class, Neg, the class
  weights gathered by target, ``ignore_index`` masked with Where, and the
  reduction as ReduceSum / Div (mean = sum over the sum of applied weights);
- SoftmaxCrossEntropyLoss: its lowering leaves ``torch.constant`` ops
  behind; written as LogSoftmax over the classes (the ``log_prob`` output)
  and the NegativeLogLikelihoodLoss above, the operator's ONNX definition.
  Rewritten here, before ``nx_hal.onnx.guards`` runs: the guard's own
  weighted-mean rewrite (into a NegativeLogLikelihoodLoss that does not
  lower) then never sees one;
- Hardmax: its lowering fails on an index type; written as a one-hot of
  ArgMax (the first maximum, as ``np.argmax``) with Equal and Cast;
- Dropout at inference (training_mode absent or a constant false, or a
  constant ratio of 0): Identity, the mask all true (opset 12 on: before,
  its value at inference is unspecified and refused); training with a
  non-zero ratio is random, and refused;
- CenterCropPad with a constant shape: Slice to crop, Pad with zeros to
  grow, the odd element at the end as ONNX's reference puts it;
- Trilu: Where on a constant mask of column minus row against k, which
  need not be a constant (the lowering wants a constant k).

Anything else about these operators is refused by name (``refuse``) so
that the device falls back, rather than lowered into wrong values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
from onnx import TensorProto

from nx_hal.onnx.rewrites._graph import Block, Model, input_name, known_attributes, np_dtype, output, refuse

__all__ = ["TENSOR_REWRITES", "dropout_needs_rewrite", "trilu_needs_rewrite"]

_FLOATS: Final = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
_INDICES: Final = {TensorProto.INT32, TensorProto.INT64}
_AXES_AS_INPUT: Final = 13  # Squeeze / Unsqueeze take axes as an input from opset 13
_SOFTMAX_PER_AXIS: Final = 13  # (Log)Softmax and Hardmax work along one axis from opset 13 (2-D before)
_DROPOUT_NO_IS_TEST: Final = 7  # Dropout's is_test attribute went away in opset 7
_DROPOUT_RATIO_INPUT: Final = 12  # its ratio is an input from opset 12 (an attribute before)
_MATRIX: Final = 2




def _float_type(m: Model, node: Any, name: str) -> int:
    elem = m.elem_type(node, name)
    if elem not in _FLOATS:
        raise refuse(node, f"input '{name}' of type {TensorProto.DataType.Name(elem).lower()} "
                           "(float16, float and double are rewritten)")
    return elem


def _unsqueeze(b: Block, data: str, axis: int) -> str:
    if b.model.opset >= _AXES_AS_INPUT:
        return b.unsqueeze(data, [axis])
    return b.op("Unsqueeze", data, axes=[axis])


def _squeeze(b: Block, data: str, axis: int, out: str | None = None) -> str:
    if b.model.opset >= _AXES_AS_INPUT:
        return b.op("Squeeze", data, b.ints([axis]), out=out)
    return b.op("Squeeze", data, axes=[axis], out=out)


# ---------------------------------------------------------------- losses

_LOSS_ATTRIBUTES: Final = {"reduction", "ignore_index"}


def _loss_settings(m: Model, node: Any) -> tuple[str, int | None]:
    """The reduction and ignore_index of a loss node, after checking the
    shapes and types the rewrite relies on."""
    attrs = known_attributes(node, _LOSS_ATTRIBUTES)
    reduction = str(attrs.get("reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise refuse(node, f"reduction '{reduction}'")
    scores, target = node.input[0], node.input[1]
    shape, target_shape = m.shape(node, scores), m.shape(node, target)
    if len(shape) < 2 or target_shape != shape[:1] + shape[2:]:
        raise refuse(node, f"scores of shape {list(shape)} with a target of shape {list(target_shape)} "
                           "(expected [N, C, d...] and [N, d...])")
    if m.elem_type(node, target) not in _INDICES:
        raise refuse(node, "a target that is not int32 or int64")
    weight = input_name(node, 2)
    if weight is not None and m.shape(node, weight) != shape[1:2]:
        raise refuse(node, f"class weights of shape {list(m.shape(node, weight))} for {shape[1]} classes")
    ignore = attrs.get("ignore_index")
    return reduction, None if ignore is None else int(ignore)


def _nll(m: Model, b: Block, node: Any, log_prob: str, reduction: str, ignore: int | None) -> None:
    """NegativeLogLikelihoodLoss of ``log_prob`` against the node's target
    (input 1) and optional class weights (input 2), into the node's output 0.

    ``loss[n, d] = -log_prob[n, target[n, d], d] * w[n, d]`` with ``w`` the
    class weight of the target (1 without weights), 0 where the target is
    ``ignore_index``; the mean divides by the sum of ``w``, as the operator's
    definition and onnxruntime (ONNX's reference evaluator divides by the
    element count where ignore_index is -1 and there are no weights)."""
    dtype = np_dtype(_float_type(m, node, node.input[0]))
    target = b.op("Cast", node.input[1], to=TensorProto.INT64)
    ignored = None
    if ignore is not None:
        # The ignored class may lie outside [0, C): gathered as class 0, then zeroed.
        ignored = b.op("Equal", target, b.const(ignore, np.int64))
        target = b.op("Where", ignored, b.const(0, np.int64), target)
    picked = b.op("GatherElements", log_prob, _unsqueeze(b, target, 1), axis=1)
    loss = b.op("Neg", _squeeze(b, picked, 1))
    weight = input_name(node, 2)
    applied = None  # the weight of each element, None where all are 1
    if weight is not None:
        applied = b.op("Gather", weight, target, axis=0)
        if ignored is not None:
            applied = b.op("Where", ignored, b.const(0, dtype), applied)
    elif ignored is not None:
        applied = b.op("Where", ignored, b.const(0, dtype), b.const(1, dtype))
    final = node.output[0]
    if applied is not None:
        loss = b.op("Mul", loss, applied, out=final if reduction == "none" else None)
    elif reduction == "none":
        loss = b.op("Identity", loss, out=final)
    if reduction == "sum":
        b.op("ReduceSum", loss, keepdims=0, out=final)
    elif reduction == "mean" and applied is None:
        b.op("ReduceMean", loss, keepdims=0, out=final)
    elif reduction == "mean":
        assert applied is not None
        b.op("Div", b.op("ReduceSum", loss, keepdims=0), b.op("ReduceSum", applied, keepdims=0), out=final)


def rewrite_negative_log_likelihood_loss(m: Model, node: Any) -> list[Any]:
    reduction, ignore = _loss_settings(m, node)
    b = Block(m, node)
    _nll(m, b, node, node.input[0], reduction, ignore)
    return b.nodes


def _log_softmax_over_classes(m: Model, b: Block, node: Any, out: str | None) -> str:
    """LogSoftmax along axis 1 of input 0. Before opset 13 LogSoftmax
    flattens everything from its axis on: the classes are moved last."""
    x = node.input[0]
    rank = len(m.shape(node, x))
    if m.opset >= _SOFTMAX_PER_AXIS or rank == _MATRIX:
        return b.op("LogSoftmax", x, axis=1, out=out)
    last = [0, *range(2, rank), 1]
    back = [0, rank - 1, *range(1, rank - 1)]
    moved = b.op("LogSoftmax", b.op("Transpose", x, perm=last), axis=rank - 1)
    return b.op("Transpose", moved, perm=back, out=out)


def rewrite_softmax_cross_entropy_loss(m: Model, node: Any) -> list[Any]:
    """LogSoftmax over the classes, then NegativeLogLikelihoodLoss, as the
    operator is defined; the log-probabilities are output 1 when wanted."""
    reduction, ignore = _loss_settings(m, node)
    b = Block(m, node)
    log_prob = _log_softmax_over_classes(m, b, node, output(node, 1))
    _nll(m, b, node, log_prob, reduction, ignore)
    return b.nodes


# ---------------------------------------------------------------- Hardmax


def _hardmax_along(b: Block, x: str, shape: tuple[int, ...], axis: int, dtype: Any, out: str) -> None:
    """One where ``x`` has its first maximum along ``axis``, 0 elsewhere."""
    first = b.op("ArgMax", x, axis=axis, keepdims=1)  # the first maximum (select_last_index=0)
    positions = [1] * len(shape)
    positions[axis] = shape[axis]
    iota = b.const(np.arange(shape[axis], dtype=np.int64).reshape(positions))
    b.op("Cast", b.op("Equal", iota, first), to=dtype, out=out)


def rewrite_hardmax(m: Model, node: Any) -> list[Any]:
    attrs = known_attributes(node, {"axis"})
    x = node.input[0]
    elem = _float_type(m, node, x)
    shape = m.shape(node, x)
    per_axis = m.opset >= _SOFTMAX_PER_AXIS
    rank = len(shape)
    axis = int(attrs.get("axis", -1 if per_axis else 1))
    if not -rank <= axis < rank:
        raise refuse(node, f"axis {axis} for rank {rank}")
    axis %= rank
    b = Block(m, node)
    if 0 in shape:  # nothing to set: the empty input is the output
        b.op("Identity", x, out=node.output[0])
    elif per_axis:
        _hardmax_along(b, x, shape, axis, elem, node.output[0])
    else:
        # Before opset 13: the hardmax of each row of x flattened to 2-D at axis.
        rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
        flat = b.op("Reshape", x, b.ints([rows, cols]))
        hard = m.fresh("hardmax_2d")
        _hardmax_along(b, flat, (rows, cols), 1, elem, hard)
        b.op("Reshape", hard, b.ints(shape), out=node.output[0])
    return b.nodes


# ---------------------------------------------------------------- Dropout


def _check_identity(m: Model, node: Any) -> None:
    """Refuses a Dropout that may drop: one training (not the default) with
    a drop ratio that is not a constant 0, or one that may train (a
    training_mode computed at run time)."""
    attrs = known_attributes(node, {"seed", "ratio", "is_test"})
    if m.opset < _DROPOUT_NO_IS_TEST:
        training = not int(attrs.get("is_test", 0))
    else:
        mode = input_name(node, 2)
        value = None if mode is None else m.value(mode)
        if mode is not None and value is None:
            raise refuse(node, f"training_mode '{mode}' is not a constant")
        training = value is not None and bool(np.asarray(value).item())
    if not training:
        return
    ratio_name = input_name(node, 1) if m.opset >= _DROPOUT_RATIO_INPUT else None
    ratio = m.value(ratio_name) if ratio_name is not None else np.asarray(attrs.get("ratio", 0.5))
    if ratio is not None and float(np.asarray(ratio).item()) == 0.0:
        return
    raise refuse(node, "training mode with a drop ratio that is not a constant 0 (random values)")


def rewrite_dropout(m: Model, node: Any) -> list[Any]:
    """Identity, and the mask (if wanted) all true."""
    _check_identity(m, node)
    x = node.input[0]
    mask = output(node, 1)
    if mask is not None and m.opset < _DROPOUT_RATIO_INPUT:
        # Unspecified before opset 12: onnxruntime gives all false (zeros), ONNX's reference all true.
        raise refuse(node, f"the mask output at opset {m.opset} (its value at inference is unspecified "
                           f"before opset {_DROPOUT_RATIO_INPUT})")
    b = Block(m, node)
    b.op("Identity", x, out=node.output[0])
    if mask is not None:
        b.op("Expand", b.const(np.asarray(True)), b.ints(m.shape(node, x)), out=mask)
    return b.nodes


# ---------------------------------------------------------------- CenterCropPad


def rewrite_center_crop_pad(m: Model, node: Any) -> list[Any]:
    """Per axis: a centred Slice where the input is larger than the wanted
    size, a centred zero Pad where it is smaller; an odd difference puts the
    extra element at the end (ONNX's reference implementation)."""
    attrs = known_attributes(node, {"axes"})
    x, size_name = node.input[0], node.input[1]
    wanted = m.value(size_name)
    if wanted is None:
        raise refuse(node, f"shape '{size_name}' is not a constant")
    shape = m.shape(node, x)
    rank = len(shape)
    axes = [int(a) for a in attrs.get("axes", range(rank))]
    sizes = [int(s) for s in np.asarray(wanted).reshape(-1)]
    if len(sizes) != len(axes) or any(not -rank <= a < rank for a in axes) or any(s < 0 for s in sizes):
        raise refuse(node, f"shape {sizes} for axes {axes} of an input of rank {rank}")
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        raise refuse(node, f"repeated axes {axes}")
    b = Block(m, node)
    crop = [(a, (shape[a] - s) // 2, s) for a, s in zip(axes, sizes, strict=True) if s < shape[a]]
    grow = [(a, (s - shape[a]) // 2, s - shape[a]) for a, s in zip(axes, sizes, strict=True) if s > shape[a]]
    value = x
    if crop:
        value = b.op("Slice", value, b.ints([start for _, start, _ in crop]),
                     b.ints([start + size for _, start, size in crop]), b.ints([a for a, _, _ in crop]))
    if grow:
        pads = [0] * (2 * rank)
        for a, before, total in grow:
            pads[a], pads[rank + a] = before, total - before
        value = b.op("Pad", value, b.ints(pads), b.const(np.zeros((), np_dtype(m.elem_type(node, x)))))
    b.op("Identity", value, out=node.output[0])
    return b.nodes


# ---------------------------------------------------------------- Trilu


def dropout_needs_rewrite(m: Model, node: Any) -> bool:
    """Only a Dropout given a training_mode or a computed ratio: torch-mlir
    lowers the inference form with a constant ratio (which the version
    converter adds to old exports) and a mask output."""
    ratio = input_name(node, 1)
    return input_name(node, 2) is not None or (ratio is not None and m.value(ratio) is None)


def trilu_needs_rewrite(m: Model, node: Any) -> bool:
    """Only a Trilu whose k is computed: torch-mlir lowers one with a constant
    k (or none), shapes unknown included."""
    k_name = input_name(node, 1)
    return k_name is not None and m.value(k_name) is None


def rewrite_trilu(m: Model, node: Any) -> list[Any]:
    """Where(mask, x, 0), the mask ``col - row <= k`` (lower) or ``>= k``
    (upper) over the last two axes, from a constant of ``col - row``; k (0
    when left out) may be computed at run time."""
    attrs = known_attributes(node, {"upper"})
    x = node.input[0]
    shape = m.shape(node, x)
    if len(shape) < _MATRIX:
        raise refuse(node, f"an input of rank {len(shape)} (Trilu needs 2 or more)")
    rows, cols = shape[-2:]
    b = Block(m, node)
    diagonal = b.const(np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None])
    k_name = input_name(node, 1)
    k = b.const(0, np.int64) if k_name is None else b.op("Cast", k_name, to=TensorProto.INT64)
    compare = "GreaterOrEqual" if int(attrs.get("upper", 1)) else "LessOrEqual"
    mask = b.op(compare, diagonal, k)
    zero = b.const(np.zeros((), np_dtype(m.elem_type(node, x))))
    b.op("Where", mask, x, zero, out=node.output[0])
    return b.nodes


# (domain, op type) -> rewrite (see nx_hal.onnx.rewrites.Rewrite).
TENSOR_REWRITES: Final[dict[tuple[str, str], Callable[[Model, Any], list[Any]]]] = {
    ("", "NegativeLogLikelihoodLoss"): rewrite_negative_log_likelihood_loss,
    ("", "SoftmaxCrossEntropyLoss"): rewrite_softmax_cross_entropy_loss,
    ("", "Hardmax"): rewrite_hardmax,
    ("", "Dropout"): rewrite_dropout,
    ("", "CenterCropPad"): rewrite_center_crop_pad,
    ("", "Trilu"): rewrite_trilu,
}
