"""Conv whose kernel is larger than its input, as im2col and one MatMul.

torch-mlir lowers such a Conv correctly, but XLA's CPU backend runs it
through a pathological path: when the kernel exceeds the input (a 3x3
kernel over resnet18's 2x2 last stage at 64x64 images) it swaps the
operands, making the weights the image, and Eigen runs that at about
0.3 GFLOP/s (measured: one 512-channel 3x3 conv over 2x2, 41 ms; the three
of them were 80-95% of resnet18's 43 ms, which took 8 ms after this
rewrite, where onnxruntime takes 1.7 ms). Padding the input explicitly is
not enough: XLA folds the pad back into the convolution. A gather of the
kernel's taps (one strided Slice each) and a MatMul leave it no convolution
to swap, and on these small inputs cost little on any backend.

Only Convs that would take that path are rewritten: float, constant-free
rules (any group count, dilation, stride, padding and auto_pad), and an
input smaller than the kernel along some spatial axis.

On CPUs (``Model.platform == "cpu"``) depthwise Convs are rewritten too
(one input channel per group): XLA CPU runs them as a grouped convolution
several times slower (in one run of ``bench/models.py --portable`` on
tpu:cpu: mobilenet_v2 8.3 ms, 3.6 ms as the gather and batched MatMul;
efficientnet_b0 10.2 ms, 6.8 ms). One output channel per input channel, in
f32 or f64, with at most _MAX_TAPS taps, becomes a sum over the kernel's
taps of a strided Slice times that tap's weight per channel: elementwise
work XLA fuses into one loop, where the gather and the batched MatMul of
one row per channel were ~11 kernels (140 of mobilenet_v2's ~280 were
Slices) and a dot run element by element (two runs each, bench/models.py
on tpu:cpu: mobilenet_v2 3.2-4.0 ms, 2.2 ms as the sum; efficientnet_b0
6.5-8.2, 4.7-5.8 ms; lraspp_mobilenet_v3 3.6, 2.7-2.8 ms). Others (a
channel multiplier, f16, more than _MAX_TAPS taps) keep the gather.
GPUs and TPUs have depthwise kernels of their own and keep the Conv. 3-D
Convs are gathered too, for which XLA CPU has no fast kernel at all
(r3d_18 on 4x32x32 clips: 46 ms as convolutions, 24 ms rewritten, in one
run of ``bench/models.py --portable``). The gathered columns hold one
element per batch, channel, kernel tap and output position, so a Conv whose
columns would pass _MAX_COLUMNS keeps the Conv; the sum holds nothing more
than its output.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Final

from onnx import TensorProto

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, input_name

__all__ = ["rewrite_conv", "conv_needs_rewrite"]

_FLOATS: Final = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
# The most elements the gathered columns of a depthwise Conv may hold (1 GiB of f32).
_MAX_COLUMNS: Final = 1 << 28
# The most kernel taps a depthwise Conv is summed over (a 5x5 kernel): past
# that the gather won, convnext_tiny's 7x7 kernels 2-7% faster gathered
# (paired runs, one process, 2026-11-29).
_MAX_TAPS: Final = 25
_SUMMED: Final = {TensorProto.FLOAT, TensorProto.DOUBLE}


def conv_needs_rewrite(model: Model, node: Any) -> bool:
    """Whether ``node`` (a Conv) has float data, static shapes, and a kernel
    larger than its input along a spatial axis or, for a CPU, one input
    channel per group or three spatial axes."""
    shapes = model.static_shapes(node, node.input[0], node.input[1], node.output[0])
    if shapes is None:
        return False
    x, w, y = shapes
    if len(x) < 3 or len(w) != len(x) or len(y) != len(x):
        return False
    try:
        if model.elem_type(node, node.input[0]) not in _FLOATS:
            return False
    except Exception:  # noqa: BLE001 - unknown type: leave the node alone
        return False
    attrs = attributes(node)
    dilations = attrs.get("dilations") or [1] * (len(x) - 2)
    extent = [(k - 1) * d + 1 for k, d in zip(w[2:], dilations, strict=False)]
    if any(e > size for e, size in zip(extent, x[2:], strict=False)):
        return True
    if model.platform != "cpu":
        return False
    group = int(attrs.get("group", 1))
    return _summed(model, node, group, x, w) or _depthwise(group, x, w, y) or _volumetric(x, w, y)


def _volumetric(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]) -> bool:
    """Three spatial axes, with columns of a bounded size."""
    return len(x) == 5 and math.prod((x[0], x[1], *w[2:], *y[2:])) <= _MAX_COLUMNS


def _summed(model: Model, node: Any, group: int, x: tuple[int, ...], w: tuple[int, ...]) -> bool:
    """A depthwise Conv with one output channel per input channel, f32 or
    f64, and at most _MAX_TAPS taps: rewritten as the sum over its taps."""
    if model.platform != "cpu" or group <= 1 or not group == x[1] == w[0] or w[1] != 1:
        return False
    if math.prod(w[2:]) > _MAX_TAPS:
        return False
    return model.elem_type(node, node.input[0]) in _SUMMED


def _depthwise(group: int, x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]) -> bool:
    """One input channel per group, with columns of a bounded size."""
    if group <= 1 or group != x[1] or w[1] != 1:
        return False
    return math.prod((x[0], x[1], *w[2:], *y[2:])) <= _MAX_COLUMNS


def _pads(attrs: dict[str, Any], x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]) -> list[int]:
    """Begin pads then end pads (ONNX's layout) for every spatial axis."""
    rank = len(x) - 2
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(attrs.get("pads") or [0] * (2 * rank))
    if auto == "VALID":
        return [0] * (2 * rank)
    strides = attrs.get("strides") or [1] * rank
    dilations = attrs.get("dilations") or [1] * rank
    begin, end = [], []
    for i in range(rank):
        total = max(0, (y[2 + i] - 1) * strides[i] + (w[2 + i] - 1) * dilations[i] + 1 - x[2 + i])
        small, large = total // 2, total - total // 2
        begin.append(large if auto == "SAME_LOWER" else small)
        end.append(small if auto == "SAME_LOWER" else large)
    return begin + end


def rewrite_conv(model: Model, node: Any) -> list[Any]:
    """``Y = Conv(X, W, B)`` as Pad, one strided Slice per kernel tap, then
    the sum over taps (_summed) or Concat and a grouped MatMul with W
    reshaped to [group, out/group, in/group * taps]."""
    x, w, y = model.static_shapes(node, node.input[0], node.input[1], node.output[0]) or ((), (), ())
    attrs = attributes(node)
    rank = len(x) - 2
    group = int(attrs.get("group", 1))
    strides = list(attrs.get("strides") or [1] * rank)
    dilations = list(attrs.get("dilations") or [1] * rank)
    pads = _pads(attrs, x, w, y)
    n, c = x[0], x[1]
    o = w[0]
    out_spatial = y[2:]
    taps = 1
    for k in w[2:]:
        taps *= k
    block = Block(model, node)
    data = node.input[0]
    if any(pads):
        data = block.op("Pad", data, block.ints([0, 0, *pads[:rank], 0, 0, *pads[rank:]]))
    axes = list(range(2, 2 + rank))
    parts = {}
    for tap in itertools.product(*(range(k) for k in w[2:])):
        starts = [t * d for t, d in zip(tap, dilations, strict=True)]
        ends = [s + (size - 1) * st + 1 for s, size, st in zip(starts, out_spatial, strides, strict=True)]
        parts[tap] = block.op("Slice", data, block.ints(starts), block.ints(ends), block.ints(axes),
                              block.ints(strides))
    if _summed(model, node, group, x, w):
        return _tap_sum(model, block, node, parts, rank)
    columns = [block.unsqueeze(part, [2]) for part in parts.values()]
    stacked = block.concat(columns, axis=2)  # [N, C, taps, *out]: W's (C, k...) order
    length = 1
    for size in out_spatial:
        length *= size
    cols = block.op("Reshape", stacked, block.ints([n, group, (c // group) * taps, length]))
    shape = [group, o // group, (c // group) * taps]
    constant = model.value(node.input[1])
    # Constant weights are reshaped here: XLA folds a Reshape of a large
    # constant slowly (seconds for resnet18's 9 MB kernels).
    weights = (block.const(constant.reshape(shape)) if constant is not None
               else block.op("Reshape", node.input[1], block.ints(shape)))
    product = block.op("MatMul", weights, cols)  # [N, group, O / group, length]
    shaped = block.op("Reshape", product, block.ints([n, o, *out_spatial]))
    return _biased(model, block, node, shaped, [o] + [1] * rank)


def _tap_sum(model: Model, block: Block, node: Any, parts: dict[tuple[int, ...], str], rank: int) -> list[Any]:
    """``Y = sum over taps of X's strided Slice for the tap * W[:, 0, tap]``,
    each weight a column broadcast over the batch and positions."""
    channels = [1, -1] + [1] * rank
    constant = model.value(node.input[1])
    by_tap = None if constant is None else constant.reshape(constant.shape[0], -1)  # taps in parts' (C) order
    total = None
    for index, (tap, part) in enumerate(parts.items()):
        if by_tap is not None:
            weight = block.const(by_tap[:, index].reshape(channels))
        else:
            one = block.op("Slice", node.input[1], block.ints([0, *tap]), block.ints([1, *(t + 1 for t in tap)]),
                           block.ints(range(1, 2 + rank)))
            weight = block.op("Reshape", one, block.ints(channels))
        term = block.op("Mul", part, weight)
        total = term if total is None else block.op("Add", total, term)
    assert total is not None  # a kernel has at least one tap
    return _biased(model, block, node, total, channels)


def _biased(model: Model, block: Block, node: Any, value: str, shape: list[int]) -> list[Any]:
    """``value`` plus the Conv's bias (its input 2, when given) reshaped to
    ``shape``, as the Conv's own output."""
    bias = input_name(node, 2)
    if bias is None:
        block.op("Identity", value, out=node.output[0])
        return block.nodes
    constant = model.value(bias)
    shaped_bias = (block.const(constant.reshape(shape)) if constant is not None
                   else block.op("Reshape", bias, block.ints(shape)))
    block.op("Add", value, shaped_bias, out=node.output[0])
    return block.nodes
