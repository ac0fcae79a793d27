"""QuantizeLinear and DequantizeLinear as the float arithmetic they stand
for, so that QDQ int8 models run in float on PJRT (torch-mlir's lowering
makes quantized types that the StableHLO backends here do not take):

- DequantizeLinear: ``(Cast(x) - Cast(zero_point)) * scale``;
- QuantizeLinear: ``Cast(Clip(Round(x / scale) + zero_point, lo, hi))``,
  Round being ONNX's round-half-to-even, as the operator's definition.

Per-tensor, per-axis and blocked scales (``axis``, ``block_size``).
QLinearMatMul as its reference computes it, in float64 (exact integer
products)."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from onnx import TensorProto

from nx_hal.onnx.rewrites._graph import (
    Block,
    Model,
    attributes,
    input_name,
    np_dtype,
    refuse,
    tensor_type_name,
)

__all__ = ["rewrite_dequantize_linear", "rewrite_quantize_linear", "rewrite_qlinear_matmul"]

# Integer types whose every value a float32 holds exactly.
_INTEGERS: Final = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16}
_FLOATS: Final = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
_KNOWN: Final = {"axis", "block_size", "output_dtype", "saturate", "precision"}


def _broadcastable(b: Block, node: Any, name: str, x_shape: tuple[int, ...], axis: int, block: int) -> str:
    """``name`` (a scale or zero point) shaped to broadcast against x."""
    shape = b.model.shape(node, name)
    rank = len(x_shape)
    if len(shape) == 0:
        return name
    if not 0 <= axis < rank:
        raise refuse(node, f"axis out of range for rank {rank}")
    if block > 0:
        if len(shape) != rank:
            raise refuse(node, f"blocked quantization needs a scale of rank {rank}, got shape {shape}")
        dim = x_shape[axis]
        if shape[axis] != -(-dim // block):
            raise refuse(node, f"scale has {shape[axis]} blocks on axis {axis}, expected ceil({dim}/{block})")
        return b.op("Gather", name, b.const(np.arange(dim) // block, np.int64), axis=axis)
    if len(shape) != 1:
        raise refuse(node, f"scale or zero point of shape {shape} without block_size")
    if shape[0] != x_shape[axis] and shape[0] != 1:
        raise refuse(node, f"{shape[0]} scales for axis {axis} of size {x_shape[axis]}")
    target = [1] * rank
    target[axis] = shape[0]
    return b.op("Reshape", name, b.ints(target))


def _common(m: Model, node: Any) -> tuple[Block, dict[str, Any], tuple[int, ...], int, int]:
    attrs = attributes(node)
    unknown = sorted(set(attrs) - _KNOWN)
    if unknown:
        raise refuse(node, f"attribute(s) {', '.join(unknown)}")
    if attrs.get("precision", 0):
        raise refuse(node, "attribute precision")
    x_shape = m.shape(node, node.input[0])
    rank = len(x_shape)
    axis = int(attrs.get("axis", 1))
    block = int(attrs.get("block_size", 0))
    # A per-tensor scale ignores axis, whatever the rank (the default 1 on a 1-D input).
    return Block(m, node), attrs, x_shape, axis + rank if -rank <= axis < 0 else axis, block


def rewrite_dequantize_linear(m: Model, node: Any) -> list[Any]:
    """DequantizeLinear as Cast, Sub and Mul."""
    b, attrs, x_shape, axis, block = _common(m, node)
    x, scale, zero = node.input[0], node.input[1], input_name(node, 2)
    x_type = m.elem_type(node, x)
    if x_type not in _INTEGERS and x_type != TensorProto.INT32:
        raise refuse(node, f"input of type {tensor_type_name(x_type)} (only int8, uint8, int16, "
                                 "uint16 and int32 are rewritten)")
    float_type = m.elem_type(node, scale)
    if float_type not in _FLOATS:
        raise refuse(node, f"scale of type {tensor_type_name(float_type)}")
    out_type = int(attrs.get("output_dtype", 0)) or float_type
    value = b.op("Cast", x, to=float_type)
    if zero is not None:
        value = b.op("Sub", value, b.op("Cast", _broadcastable(b, node, zero, x_shape, axis, block), to=float_type))
    final = node.output[0] if out_type == float_type else None
    value = b.op("Mul", value, _broadcastable(b, node, scale, x_shape, axis, block), out=final)
    if final is None:
        b.op("Cast", value, to=out_type, out=node.output[0])
    return b.nodes


def rewrite_quantize_linear(m: Model, node: Any) -> list[Any]:
    """QuantizeLinear as Div, Round, Add, Clip and Cast."""
    b, attrs, x_shape, axis, block = _common(m, node)
    x, scale, zero = node.input[0], node.input[1], input_name(node, 2)
    x_type = m.elem_type(node, x)
    if x_type not in _FLOATS:
        raise refuse(node, f"input of type {tensor_type_name(x_type)}")
    out_type = m.elem_type(node, zero) if zero is not None else int(attrs.get("output_dtype", 0)) or TensorProto.UINT8
    if out_type not in _INTEGERS:
        raise refuse(node, f"output type {tensor_type_name(out_type)} (only int8, uint8, int16 and "
                                 "uint16 are rewritten)")
    info = np.iinfo(np_dtype(out_type))
    if x_type != TensorProto.FLOAT and x_type != TensorProto.DOUBLE and info.bits > 8:
        raise refuse(node, f"{tensor_type_name(out_type)} output from {tensor_type_name(x_type)} input")
    scale_b = _broadcastable(b, node, scale, x_shape, axis, block)
    if m.elem_type(node, scale) != x_type:
        scale_b = b.op("Cast", scale_b, to=x_type)
    value = b.op("Round", b.op("Div", x, scale_b))
    if zero is not None:
        value = b.op("Add", value, b.op("Cast", _broadcastable(b, node, zero, x_shape, axis, block), to=x_type))
    dtype = np_dtype(x_type)
    value = b.op("Clip", value, b.const(info.min, dtype), b.const(info.max, dtype))
    b.op("Cast", value, to=out_type, out=node.output[0])
    return b.nodes


def rewrite_qlinear_matmul(m: Model, node: Any) -> list[Any]:
    """QLinearMatMul as its reference computes it: the integer product of
    the zero-point-shifted operands (exact in float64), times
    ``a_scale * b_scale / y_scale`` (in the scales' type), plus the output
    zero point, rounded half to even and saturated."""
    names = [input_name(node, i) for i in range(8)]
    a, a_scale, a_zero, b_in, b_scale, b_zero, y_scale, y_zero = names
    if a is None or b_in is None or a_scale is None or b_scale is None or y_scale is None:
        raise refuse(node, "an operand or scale is missing")
    out_type = m.elem_type(node, y_zero) if y_zero is not None else m.elem_type(node, a)
    if out_type not in _INTEGERS or m.elem_type(node, a) not in _INTEGERS or m.elem_type(node, b_in) not in _INTEGERS:
        raise refuse(node, "operands or output are not 8- or 16-bit integers")
    blk = Block(m, node)
    double = TensorProto.DOUBLE

    def shifted(x: str, zero: str | None) -> str:
        wide = blk.op("Cast", x, to=double)
        return wide if zero is None else blk.op("Sub", wide, blk.op("Cast", zero, to=double))

    product = blk.op("MatMul", shifted(a, a_zero), shifted(b_in, b_zero))
    factor = blk.op("Div", blk.op("Mul", a_scale, b_scale), y_scale)
    value = blk.op("Mul", product, blk.op("Cast", factor, to=double))
    if y_zero is not None:
        value = blk.op("Add", value, blk.op("Cast", y_zero, to=double))
    info = np.iinfo(np_dtype(out_type))
    value = blk.op("Clip", blk.op("Round", value), blk.const(info.min, np.float64), blk.const(info.max, np.float64))
    blk.op("Cast", value, to=out_type, out=node.output[0])
    return blk.nodes
