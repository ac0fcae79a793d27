"""Resize with constant scales or sizes, one axis at a time: resizing is
separable, and along one axis it is a fixed linear map of the input. Nearest
becomes a Gather with a constant index list (exact for every dtype), linear
and cubic a MatMul with a constant interpolation matrix.

Nearest indices and linear weights are computed here in float32, as
onnxruntime computes them: a coordinate on the edge of a rounding step
(3 / 0.6) must round the same way. The cubic and antialiased maps are not
re-derived: they are read off ONNX's reference implementation
(``onnx.reference``) by resizing an identity matrix along one axis, so that
cubic coefficients, ``exclude_outside`` and antialias mean what the
operator's definition says (continuous in the coordinates: float64 against
float32 moves them by rounding error only). Positions that
``tf_crop_and_resize`` puts outside the input take ``extrapolation_value``
through a Where."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, input_name, np_dtype, refuse

__all__ = ["rewrite_resize", "axis_map"]

_KNOWN: Final = {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                 "extrapolation_value", "antialias", "keep_aspect_ratio_policy", "axes"}
_FLOATS: Final = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
_REFERENCE_OPSET: Final = 19  # Resize-19: every attribute above, half_pixel_symmetric included


def axis_map(size: int, attrs: dict[str, Any], *, scale: float | None = None, out: int | None = None,
             roi: tuple[float, float] | None = None, companion: tuple[int, int] | None = None) -> np.ndarray:
    """The [output, input] matrix of a 1-D Resize of ``size`` elements with the
    node's attributes, by ``scale`` or to ``out`` elements; a row of NaN marks
    an output position that takes ``extrapolation_value``. ``companion``
    (input size, output size) is the axis whose ratio ``keep_aspect_ratio_policy``
    picks for every axis: it is resized alongside, as in the node. Raises what
    ONNX's reference raises."""
    from onnx.reference import ReferenceEvaluator

    kept = {k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    kept["extrapolation_value"] = float("nan")
    inputs: dict[str, np.ndarray] = {
        "roi": np.asarray([0.0, roi[0], 1.0, roi[1]] if roi is not None else [], np.float32),
        "scales": np.asarray([1.0, scale] if scale is not None else [], np.float32),
        "sizes": np.asarray([size, out] if out is not None else [], np.int64),
    }
    # x is the identity, so that y holds the map's columns: y[k] = map @ e_k.
    data = np.eye(size, dtype=np.float64)
    if companion is not None:
        # [size, companion, size], constant along the middle axis: the map's
        # columns come out at y[:, 0, :] (each output along it is that constant).
        data = np.repeat(data[:, None, :], companion[0], axis=1)
        inputs["sizes"] = np.asarray([companion[1], out], np.int64)
        kept["axes"] = [1, 2]
        kept["keep_aspect_ratio_policy"] = attrs["keep_aspect_ratio_policy"]
    names = ["x"] + [name if inputs[name].size else "" for name in ("roi", "scales", "sizes")]
    node = helper.make_node("Resize", names, ["y"], **kept)
    graph = helper.make_graph(
        [node], "axis_map",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(data.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in inputs.items() if v.size],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _REFERENCE_OPSET)])
    (result,) = ReferenceEvaluator(model).run(None, {"x": data})
    result = np.asarray(result, np.float64)
    return (result[:, 0, :] if companion is not None else result).T


# Where the output length differs from scale * input length, these modes
# divide by one (onnxruntime, torch) or the other (ONNX's reference and its
# node tests): such a Resize is refused rather than be wrong by one account.
_LENGTH_MODES: Final = ("align_corners", "tf_crop_and_resize")


def _per_axis(m: Model, node: Any, attrs: dict[str, Any], in_shape: tuple[int, ...]) -> list[_Axis]:
    """What each axis the node resizes needs: sizes, scale, roi."""
    rank = len(in_shape)
    values = {}
    for index, what in ((1, "roi"), (2, "scales"), (3, "sizes")):
        name = input_name(node, index)
        if name is None:
            continue
        value = m.value(name)
        if value is None:
            if what == "roi" and attrs.get("coordinate_transformation_mode") != "tf_crop_and_resize":
                continue  # read only by tf_crop_and_resize
            raise refuse(node, f"input {what} ('{name}') is not a constant")
        if value.size:
            values[what] = value.astype(np.float64).reshape(-1)
    axes = [int(a) % rank for a in attrs.get("axes", range(rank))]
    if ("scales" in values) == ("sizes" in values):
        raise refuse(node, "needs exactly one of scales and sizes")
    count = len(axes)
    for what in ("scales", "sizes"):
        if what in values and values[what].size != count:
            raise refuse(node, f"{what} has {values[what].size} values for {count} axes")
    roi = values.get("roi")
    crop = attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    if crop and (roi is None or roi.size != 2 * count):
        raise refuse(node, "tf_crop_and_resize needs a constant roi of 2 values per axis")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    companion: tuple[int, int] | None = None
    if "sizes" in values and policy != "stretch":
        ratios = [values["sizes"][i] / in_shape[a] for i, a in enumerate(axes)]
        pick = int(np.argmin(ratios) if policy == "not_larger" else np.argmax(ratios))
        companion = (in_shape[axes[pick]], int(values["sizes"][pick]))
    out_shape = m.shape(node, node.output[0])
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    plans: list[_Axis] = []
    for i, axis in enumerate(axes):
        out = out_shape[axis]
        if "scales" in values:
            scale = np.float32(values["scales"][i])
            reference = attrs.get("mode") == "cubic" or attrs.get("antialias", 0)
            if (ctm in _LENGTH_MODES or (reference and ctm == "half_pixel_symmetric")) and \
                    float(scale) * in_shape[axis] != out:
                raise refuse(node, f"{ctm} with scale {float(scale):g} on axis {axis} of length {in_shape[axis]}: "
                                   f"the output length {out} is not scale * length, where onnxruntime and the "
                                   "ONNX reference disagree (give sizes instead of scales)")
        elif companion is not None:
            scale = np.float32(companion[1]) / np.float32(companion[0])
        else:
            scale = np.float32(out) / np.float32(in_shape[axis])
        plans.append(_Axis(axis, in_shape[axis], out, scale, "sizes" in values,
                           (float(roi[i]), float(roi[count + i])) if crop and roi is not None else None, companion))
    return plans


@dataclass(frozen=True)
class _Axis:
    """One resized axis: its sizes, its scale as onnxruntime computes it
    (float32; out / in when sizes are given), the roi's part for it."""

    axis: int
    size: int
    out: int
    scale: np.float32
    by_sizes: bool
    roi: tuple[float, float] | None
    companion: tuple[int, int] | None

    def matrix(self, attrs: dict[str, Any]) -> np.ndarray:
        """The linear or cubic map, from ONNX's reference. The reference
        divides by the unrounded output length (scale * in) where
        align_corners and tf_crop_and_resize divide by the output's length;
        onnxruntime and torch use the length: it is passed as sizes there."""
        ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
        try:
            if self.by_sizes or ctm in ("align_corners", "tf_crop_and_resize"):
                return axis_map(self.size, attrs, out=self.out, roi=self.roi, companion=self.companion)
            return axis_map(self.size, attrs, scale=float(self.scale), roi=self.roi)
        except Exception as exc:  # the reference raises what numpy raises on attributes it cannot take
            raise ValueError(f"ONNX's reference Resize rejects these attributes: {exc}") from None

    def coordinates(self, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The input coordinate of each output position, and where it is
        outside the input (tf_crop_and_resize), in float32 arithmetic as
        onnxruntime computes them: a coordinate on the edge of a rounding
        step (3 / 0.6) must fall on the same side."""
        f = np.float32
        y = np.arange(self.out, dtype=f)
        size, out, scale = f(self.size), f(self.out), self.scale
        ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
        with np.errstate(divide="ignore", invalid="ignore"):
            if ctm == "asymmetric":
                x = y / scale
            elif ctm == "half_pixel":
                x = (y + f(0.5)) / scale - f(0.5)
            elif ctm == "pytorch_half_pixel":
                x = (y + f(0.5)) / scale - f(0.5) if self.out > 1 else np.zeros(1, f)
            elif ctm == "half_pixel_symmetric":
                adjustment = out / (scale * size)
                offset = size / f(2) * (f(1) - adjustment)
                x = offset + (y + f(0.5)) / scale - f(0.5)
            elif ctm == "align_corners":
                x = y * (size - f(1)) / (out - f(1)) if self.out > 1 else np.zeros(1, f)
            elif ctm == "tf_crop_and_resize" and self.roi is not None:
                start, end = f(self.roi[0]), f(self.roi[1])
                x = (start * (size - f(1)) + y * (end - start) * (size - f(1)) / (out - f(1)) if self.out > 1
                     else np.full(1, f(0.5) * (start + end) * (size - f(1)), f))
            else:
                raise ValueError(f"coordinate_transformation_mode {ctm!r}")
        x = x.astype(f)
        outside = (x < 0) | (x > size - 1) if ctm == "tf_crop_and_resize" else np.zeros(self.out, bool)
        return x, outside

    def nearest(self, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Input index of each output position, and where it is outside."""
        f = np.float32
        x, outside = self.coordinates(attrs)
        mode = attrs.get("nearest_mode", "round_prefer_floor")
        if mode == "round_prefer_floor":
            index = np.where(x == np.floor(x) + f(0.5), np.floor(x), np.round(x))
        elif mode == "round_prefer_ceil":
            index = np.where(x == np.floor(x) + f(0.5), np.ceil(x), np.round(x))
        elif mode == "floor":
            index = np.floor(x)
        elif mode == "ceil":
            index = np.ceil(x)
        else:
            raise ValueError(f"nearest_mode {mode!r}")
        return np.clip(np.nan_to_num(index), 0, self.size - 1).astype(np.int64), outside

    def linear(self, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The [out, in] map of linear interpolation (two taps, the coordinate
        held to the input's edges), and where positions are outside."""
        f = np.float32
        x, outside = self.coordinates(attrs)
        x = np.clip(np.nan_to_num(x), f(0), f(self.size - 1))
        low = np.minimum(np.floor(x), f(self.size - 1)).astype(np.int64)
        high = np.minimum(low + 1, self.size - 1)
        weight_high = (x - low.astype(f)).astype(f)
        weight_low = (high.astype(f) - x).astype(f)
        same = low == high  # on the last element: half of it twice
        weight_low[same] = f(0.5)
        weight_high[same] = f(0.5)
        matrix = np.zeros((self.out, self.size), f)
        rows = np.arange(self.out)
        np.add.at(matrix, (rows, low), weight_low)
        np.add.at(matrix, (rows, high), weight_high)
        return matrix, outside


def _apply_matrix(b: Block, value: str, matrix: np.ndarray, axis: int, rank: int) -> str:
    """``matrix`` [out, in] applied along ``axis``."""
    if axis == rank - 1:
        return b.op("MatMul", value, b.const(np.ascontiguousarray(matrix.T)))
    if axis == rank - 2:
        return b.op("MatMul", b.const(matrix), value)
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = b.op("MatMul", b.op("Transpose", value, perm=perm), b.const(np.ascontiguousarray(matrix.T)))
    return b.op("Transpose", moved, perm=[int(p) for p in np.argsort(perm)])


def rewrite_resize(m: Model, node: Any) -> list[Any]:
    """Resize as Gather (nearest) or MatMul (linear, cubic) per resized axis."""
    attrs = attributes(node)
    unknown = sorted(set(attrs) - _KNOWN)
    if unknown:
        raise refuse(node, f"attribute(s) {', '.join(unknown)}")
    if m.opset < 11:
        raise refuse(node, f"opset {m.opset}: upgrade the model to opset 11 or newer first")
    x = node.input[0]
    in_shape = m.shape(node, x)
    rank = len(in_shape)
    elem = m.elem_type(node, x)
    mode = attrs.get("mode", "nearest")
    if mode != "nearest" and elem not in _FLOATS:
        raise refuse(node, f"mode {mode} on {onnx.TensorProto.DataType.Name(elem).lower()} data")
    dtype = np_dtype(elem)
    b = Block(m, node)
    value = x
    for plan in _per_axis(m, node, attrs, in_shape):
        axis = plan.axis
        try:
            if mode == "nearest":
                index, outside = plan.nearest(attrs)
                if not outside.any() and np.array_equal(index, np.arange(plan.size)):
                    continue  # this axis is left as it is
                value = b.op("Gather", value, b.const(index, np.int64), axis=axis)
            elif mode == "linear" and not attrs.get("antialias", 0):
                matrix, outside = plan.linear(attrs)
                if not outside.any() and np.array_equal(matrix, np.eye(plan.size)):
                    continue
                value = _apply_matrix(b, value, np.where(outside[:, None], 0, matrix).astype(dtype), axis, rank)
            else:
                matrix = plan.matrix(attrs)
                if matrix.shape[0] != plan.out:
                    raise ValueError(f"axis {axis} resizes to {matrix.shape[0]}, but the inferred output has "
                                     f"{plan.out}")
                outside = plan.coordinates(attrs)[1]
                if not np.array_equal(outside, np.isnan(matrix).any(axis=1)):
                    raise ValueError(f"a tf_crop_and_resize coordinate on axis {axis} falls on the edge of the "
                                     "input, where float32 and float64 disagree on extrapolating")
                if not outside.any() and np.array_equal(matrix, np.eye(plan.size)):
                    continue
                value = _apply_matrix(b, value, np.where(outside[:, None], 0.0, matrix).astype(dtype), axis, rank)
        except ValueError as exc:  # the reference's own error on attributes it rejects, or ours
            raise refuse(node, f"{exc}") from None
        if outside.any():
            mask_shape = [1] * rank
            mask_shape[axis] = len(outside)
            fill = b.const(attrs.get("extrapolation_value", 0.0), dtype)
            value = b.op("Where", b.const(outside.reshape(mask_shape)), fill, value)
    b.op("Identity", value, out=node.output[0])
    return b.nodes
