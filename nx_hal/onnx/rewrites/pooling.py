"""AveragePool that torch-mlir lowers wrongly or not at all, as a sum and a
constant scale.

torch-mlir's AveragePool lowering gets the output shape wrong with
``auto_pad`` SAME_UPPER/SAME_LOWER and with dilations (its reduce_window
disagrees with the node's shape), and crashes (SIGSEGV) on 3-D pooling.
An average pool is linear: the sum over each window (a depthwise Conv with
a kernel of ones, zero padding, the node's strides and dilations, extra end
padding for ``ceil_mode``) times a per-position constant. That constant is
read off ONNX's reference implementation: pooling a tensor of ones gives
(valid elements in the window) / (the count the node divides by), and the
Conv of ones gives the valid elements, so their ratio is 1 / count, for
every ``count_include_pad`` and ``ceil_mode``. Only the AveragePools the
lowering gets wrong are rewritten (``average_pool_needs_rewrite``).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from onnx import TensorProto, helper

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, np_dtype, refuse

__all__ = ["average_pool_needs_rewrite", "rewrite_average_pool"]

_FLOATS: Final = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}
# The per-position scale is computed in this process, one window at a time.
_MAX_POSITIONS: Final = 1 << 18


def average_pool_needs_rewrite(m: Model, node: Any) -> bool:
    """auto_pad SAME_*, a dilation above 1, or a 3-D pool (see the module docstring)."""
    attrs = attributes(node)
    if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
        return True
    if any(int(d) > 1 for d in attrs.get("dilations", [])):
        return True
    return len(attrs.get("kernel_shape", [])) == 3


def _reference_pool(node: Any, shape: tuple[int, ...], opset: int) -> np.ndarray:
    """ONNX's reference AveragePool of ones shaped like one channel of the input."""
    from onnx.reference import ReferenceEvaluator

    probe = helper.make_node("AveragePool", ["x"], ["y"], **attributes(node))
    graph = helper.make_graph([probe], "pool_scale", [helper.make_tensor_value_info("x", TensorProto.DOUBLE,
                                                                                   list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 19))])
    (result,) = ReferenceEvaluator(model).run(None, {"x": np.ones(shape, np.float64)})
    return np.asarray(result, np.float64)


def _window_sums(ones: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int],
                 pads: list[int], out: tuple[int, ...]) -> np.ndarray:
    """How many input (not padding) elements each output window covers."""
    rank = len(kernel)
    padded = np.pad(ones, [(0, 0), (0, 0)] + [(pads[i], pads[rank + i]) for i in range(rank)])
    sums = np.zeros(out, np.float64)
    for index in np.ndindex(*out[2:]):
        window = tuple(slice(index[i] * strides[i], index[i] * strides[i] + (kernel[i] - 1) * dilations[i] + 1,
                             dilations[i]) for i in range(rank))
        sums[(slice(None), slice(None), *index)] = padded[(slice(None), slice(None), *window)].sum()
    return sums


def _pads(attrs: dict[str, Any], x: tuple[int, ...], y: tuple[int, ...], kernel: list[int], strides: list[int],
          dilations: list[int]) -> list[int]:
    """Begin then end pads, the end ones grown until a floor-mode Conv gives ``y``'s length."""
    rank = len(kernel)
    auto = attrs.get("auto_pad", "NOTSET")
    begin, end = [0] * rank, [0] * rank
    for i in range(rank):
        span = (kernel[i] - 1) * dilations[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max(0, (y[2 + i] - 1) * strides[i] + span - x[2 + i])
            small, large = total // 2, total - total // 2
            begin[i], end[i] = (large, small) if auto == "SAME_LOWER" else (small, large)
        elif auto in ("NOTSET", ""):
            explicit = list(attrs.get("pads") or [0] * (2 * rank))
            begin[i], end[i] = explicit[i], explicit[rank + i]
        needed = (y[2 + i] - 1) * strides[i] + span  # ceil_mode's last window may overhang
        end[i] += max(0, needed - (x[2 + i] + begin[i] + end[i]))
    return begin + end


def rewrite_average_pool(m: Model, node: Any) -> list[Any]:
    """``AveragePool(x)`` as ``Conv(x, ones, group=C) * scale (+ offset)``."""
    x = m.shape(node, node.input[0])
    y = m.shape(node, node.output[0])
    elem = m.elem_type(node, node.input[0])
    if elem not in _FLOATS:
        raise refuse(node, "input is not float")
    if len(node.output) > 1 and node.output[1]:
        raise refuse(node, "a second output")
    attrs = attributes(node)
    if "kernel_shape" not in attrs:
        raise refuse(node, "no kernel_shape")
    kernel = [int(k) for k in attrs["kernel_shape"]]
    rank = len(kernel)
    strides = [int(s) for s in attrs.get("strides") or [1] * rank]
    dilations = [int(d) for d in attrs.get("dilations") or [1] * rank]
    pads = _pads(attrs, x, y, kernel, strides, dilations)
    positions = int(np.prod(y[2:], dtype=np.int64))
    if positions > _MAX_POSITIONS or int(np.prod(x[2:], dtype=np.int64)) > _MAX_POSITIONS:
        raise refuse(node, f"more than {_MAX_POSITIONS} positions per channel (its scale is computed here)")
    one_channel = (1, 1, *x[2:])
    sums = _window_sums(np.ones(one_channel), kernel, strides, dilations, pads, (1, 1, *y[2:]))
    reference = _reference_pool(node, one_channel, m.opset)
    if reference.shape != sums.shape:
        raise refuse(node, f"output shape {list(reference.shape)} not reproduced ({list(sums.shape)})")
    covered = sums > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(covered, reference / np.where(covered, sums, 1), 0.0)
    dtype = np_dtype(elem)
    b = Block(m, node)
    ones = b.const(np.ones((x[1], 1, *kernel), dtype))
    summed = b.op("Conv", node.input[0], ones, group=x[1], kernel_shape=kernel, strides=strides,
                  dilations=dilations, pads=pads)
    if covered.all():
        b.op("Mul", summed, b.const(scale.astype(dtype)), out=node.output[0])
    else:  # windows wholly in padding: the reference's own value there (0, or NaN)
        offset = np.where(covered, 0.0, reference)
        b.op("Add", b.op("Mul", summed, b.const(scale.astype(dtype))), b.const(offset.astype(dtype)),
             out=node.output[0])
    return b.nodes
