"""DFT with a constant axis and length, as MatMuls with constant matrices.

torch-mlir has no lowering for ONNX's DFT. Along its axis a DFT is a fixed
linear map of the real and imaginary parts, so with static shapes it is
two or four MatMuls. The maps are not derived here: they are read off
ONNX's reference implementation (``onnx.reference``) by transforming unit
vectors, so that ``onesided``, ``inverse`` (its 1/n), the inverse of a
one-sided spectrum (irfft) and ``dft_length`` (zero padding or truncation)
mean what the operator's definition says.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, input_name, refuse

__all__ = ["rewrite_dft", "dft_maps"]

_FLOATS: Final = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}
# Dense n x n maps: 1024 samples make four 8 MB matrices; a longer DFT is refused.
_MAX_SAMPLES: Final = 1024


def dft_maps(n: int, parts: int, attrs: dict[str, Any], length: int | None,
             opset: int) -> tuple[list[list[np.ndarray]], int]:
    """The [output, input] matrices from each input part (real, imaginary)
    to each output part, for a signal of ``n`` samples, and how many parts
    the output has (1 for an inverse of a one-sided spectrum)."""
    from onnx.reference import ReferenceEvaluator

    # A batch of unit vectors: probe[k, k, p] = 1 transforms into column k of
    # the maps from part p.
    inputs = ["x", "length" if length is not None else ""]
    kept = {k: v for k, v in attrs.items() if k in ("inverse", "onesided")}
    inits = [onnx.numpy_helper.from_array(np.asarray(length, np.int64), "length")] if length is not None else []
    if opset >= 20:
        inputs.append("axis")
        inits.append(onnx.numpy_helper.from_array(np.asarray(1, np.int64), "axis"))
    else:
        kept["axis"] = 1
    graph = helper.make_graph(
        [helper.make_node("DFT", inputs, ["y"], **kept)], "dft_map",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n, n, parts])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 17))])
    evaluator = ReferenceEvaluator(model)
    maps: list[list[np.ndarray]] = []
    out_parts = 0
    for part in range(parts):
        probe = np.zeros((n, n, parts), np.float64)
        probe[np.arange(n), np.arange(n), part] = 1.0
        (result,) = evaluator.run(None, {"x": probe})
        result = np.asarray(result, np.float64)  # [n (unit vectors), out length, out parts]
        out_parts = result.shape[-1]
        maps.append([result[:, :, q].T for q in range(out_parts)])
    return maps, out_parts


def _constant_int(m: Model, node: Any, index: int, what: str) -> int | None:
    name = input_name(node, index)
    if name is None:
        return None
    value = m.value(name)
    if value is None or value.size != 1:
        raise refuse(node, f"its {what} ('{name}') is not a constant")
    return int(value.reshape(-1)[0])


def rewrite_dft(m: Model, node: Any) -> list[Any]:
    """``DFT(x)`` along a constant axis: per output part, the sum of MatMuls of
    the input parts (moved to the last axis) with constant maps."""
    shape = m.shape(node, node.input[0])
    elem = m.elem_type(node, node.input[0])
    if elem not in _FLOATS:
        raise refuse(node, f"input type {onnx.TensorProto.DataType.Name(elem)} is not float")
    attrs = attributes(node)
    rank = len(shape)
    if m.opset >= 20:
        axis = _constant_int(m, node, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(attrs.get("axis", 1))
    axis %= rank
    parts = shape[-1]
    if parts not in (1, 2) or axis in (0, rank - 1):
        raise refuse(node, f"axis {axis} of a shape {list(shape)} is not a signal axis")
    length = _constant_int(m, node, 1, "dft_length")
    if max(shape[axis], length or 0) > _MAX_SAMPLES:
        raise refuse(node, f"a signal of more than {_MAX_SAMPLES} samples (its dense matrices would be too large)")
    maps, out_parts = dft_maps(shape[axis], parts, attrs, length, m.opset)
    b = Block(m, node)
    # Summed in float64: a transform adds n products per value, and values
    # that should cancel to zero (the imaginary part of a real signal's
    # inverse) keep float32's rounding of the large ones otherwise.
    wide = b.op("Cast", node.input[0], to=TensorProto.DOUBLE)
    # The signal axis last: [..., n], one tensor per input part.
    perm = [d for d in range(rank - 1) if d != axis] + [axis]
    moved = b.op("Transpose", b.op("Squeeze", wide, b.ints([rank - 1])) if parts == 1 else wide,
                 perm=perm + ([rank - 1] if parts == 2 else []))
    inputs = [moved] if parts == 1 else [
        b.op("Squeeze", b.slice(moved, rank - 1, p, p + 1), b.ints([rank - 1])) for p in range(2)]
    outputs = []
    for q in range(out_parts):
        terms = [b.op("MatMul", inputs[p], b.const(maps[p][q].T.astype(np.float64))) for p in range(parts)]
        outputs.append(terms[0] if len(terms) == 1 else b.op("Add", *terms))
    # Back to the input's layout, parts last.
    inverse = [perm.index(d) for d in range(rank - 1)]
    back = [b.unsqueeze(b.op("Transpose", o, perm=inverse), [rank - 1]) for o in outputs]
    b.op("Cast", b.concat(back, axis=rank - 1), to=elem, out=node.output[0])
    return b.nodes
