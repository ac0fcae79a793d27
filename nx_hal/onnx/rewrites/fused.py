"""onnxruntime's fused operators (domain ``com.microsoft``) that its offline
optimizer and the transformers optimizer write into exported models, spelt
out in standard operators: Attention (self-attention without a key/value
cache), Gelu, BiasGelu, FastGelu, QuickGelu, SkipLayerNormalization,
SkipSimplifiedLayerNormalization. (The standard
LayerNormalization and Gelu lower as they are.)"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from nx_hal.onnx.rewrites._graph import Block, Model, input_name, known_attributes, np_dtype, output, refuse

__all__ = ["FUSED", "rewrite_attention", "rewrite_fast_gelu", "rewrite_gelu", "rewrite_quick_gelu",
           "rewrite_skip_layer_norm"]

FUSED: Final = "com.microsoft"
_STANDARD_LAYER_NORM: Final = 17  # LayerNormalization joined the standard opset at 17
_REDUCE_AXES_AS_INPUT: Final = 18  # ReduceMean takes axes as an input from opset 18


def _dtype(m: Model, node: Any) -> Any:
    return np_dtype(m.elem_type(node, node.input[0]))




def rewrite_gelu(m: Model, node: Any) -> list[Any]:
    """Gelu and BiasGelu: 0.5 x (1 + erf(x / sqrt 2)), x plus the bias first."""
    known_attributes(node, set())
    b = Block(m, node)
    dtype = _dtype(m, node)
    x = node.input[0]
    if node.op_type == "BiasGelu":
        x = b.op("Add", x, node.input[1])
    erf = b.op("Erf", b.op("Mul", x, b.const(1 / math.sqrt(2), dtype)))
    b.op("Mul", b.op("Mul", x, b.const(0.5, dtype)), b.op("Add", erf, b.const(1, dtype)), out=node.output[0])
    return b.nodes


def rewrite_fast_gelu(m: Model, node: Any) -> list[Any]:
    """FastGelu: Gelu's tanh approximation, of x plus the optional bias."""
    known_attributes(node, set())
    b = Block(m, node)
    dtype = _dtype(m, node)
    x = node.input[0]
    bias = input_name(node, 1)
    if bias is not None:
        x = b.op("Add", x, bias)
    cube = b.op("Mul", b.op("Mul", x, x), x)
    inner = b.op("Mul", b.op("Add", x, b.op("Mul", cube, b.const(0.044715, dtype))),
                 b.const(math.sqrt(2 / math.pi), dtype))
    half = b.op("Mul", x, b.const(0.5, dtype))
    b.op("Mul", half, b.op("Add", b.op("Tanh", inner), b.const(1, dtype)), out=node.output[0])
    return b.nodes


def rewrite_quick_gelu(m: Model, node: Any) -> list[Any]:
    """QuickGelu: x sigmoid(alpha x)."""
    attrs = known_attributes(node, {"alpha"})
    b = Block(m, node)
    x = node.input[0]
    scaled = b.op("Mul", x, b.const(float(attrs.get("alpha", 1.702)), _dtype(m, node)))
    b.op("Mul", x, b.op("Sigmoid", scaled), out=node.output[0])
    return b.nodes


def _rms_norm(m: Model, b: Block, node: Any, x: str, scale: str, epsilon: float, out: str) -> None:
    dtype = _dtype(m, node)
    square = b.op("Mul", x, x)
    if m.opset >= _REDUCE_AXES_AS_INPUT:
        mean = b.op("ReduceMean", square, b.ints([-1]), keepdims=1)
    else:
        mean = b.op("ReduceMean", square, axes=[-1], keepdims=1)
    norm = b.op("Div", x, b.op("Sqrt", b.op("Add", mean, b.const(epsilon, dtype))))
    b.op("Mul", norm, scale, out=out)


def rewrite_skip_layer_norm(m: Model, node: Any) -> list[Any]:
    """SkipLayerNormalization and SkipSimplifiedLayerNormalization: the sum
    of input, skip and bias, normalised over the last axis (LayerNormalization,
    or root mean square for the simplified one)."""
    attrs = known_attributes(node, {"epsilon"})
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    # Inputs: input, skip, gamma, [beta,] bias -- the simplified one has no beta.
    bias = input_name(node, 3 if simplified else 4)
    beta = None if simplified else input_name(node, 3)
    wanted = [k for k in (1, 2) if output(node, k) is not None]
    if wanted:
        raise refuse(node, "outputs mean / inv_std_var (statistics for training)")
    epsilon = float(attrs.get("epsilon", 1e-12))  # onnxruntime's default for both
    b = Block(m, node)
    total = b.op("Add", node.input[0], node.input[1])
    if bias is not None:
        total = b.op("Add", total, bias)
    summed = output(node, 3)
    if summed is not None:
        total = b.op("Identity", total, out=summed)
    if simplified:
        _rms_norm(m, b, node, total, node.input[2], epsilon, node.output[0])
        return b.nodes
    if m.opset < _STANDARD_LAYER_NORM:
        raise refuse(node, f"opset {m.opset}: upgrade the model to opset {_STANDARD_LAYER_NORM} or newer first")
    inputs = [total, node.input[2]] + ([beta] if beta is not None else [])
    b.op("LayerNormalization", *inputs, axis=-1, epsilon=epsilon, out=node.output[0])
    return b.nodes


_ATTENTION_ATTRIBUTES: Final = {"num_heads", "unidirectional", "qkv_hidden_sizes", "scale", "mask_filter_value",
                                "do_rotary", "past_present_share_buffer"}


def rewrite_attention(m: Model, node: Any) -> list[Any]:
    """Attention (the transformers optimizer's fused self-attention): the
    input's Q, K and V projections in one MatMul, scaled dot products per
    head, an optional 0/1 key mask of shape [batch, sequence] and the causal
    mask of ``unidirectional``, softmax, the weighted sum of V."""
    attrs = known_attributes(node, _ATTENTION_ATTRIBUTES)
    if attrs.get("do_rotary", 0):
        raise refuse(node, "attribute do_rotary")
    for index, what in ((4, "past"), (5, "attention_bias"), (6, "past_sequence_length")):
        if input_name(node, index) is not None:
            raise refuse(node, f"input {what}")
    if output(node, 1) is not None:
        raise refuse(node, "output present (a key/value cache)")
    x, weights = node.input[0], node.input[1]
    batch, seq, _ = m.shape(node, x)
    heads = int(attrs["num_heads"]) if "num_heads" in attrs else 0
    width = m.shape(node, weights)[1]
    sizes = [int(s) for s in attrs.get("qkv_hidden_sizes", [width // 3] * 3)]
    if heads <= 0 or sum(sizes) != width or sizes[0] != sizes[1] or any(s % heads for s in sizes):
        raise refuse(node, f"num_heads {heads} with Q, K, V widths {sizes} of a {width}-wide projection")
    dtype = _dtype(m, node)
    b = Block(m, node)
    qkv = b.op("MatMul", x, weights)
    bias = input_name(node, 2)
    if bias is not None:
        qkv = b.op("Add", qkv, bias)

    def heads_first(start: int, size: int) -> str:  # [batch, heads, seq, size / heads]
        part = b.slice(qkv, 2, start, start + size)
        return b.op("Transpose", b.op("Reshape", part, b.ints([batch, seq, heads, size // heads])),
                    perm=[0, 2, 1, 3])

    q = heads_first(0, sizes[0])
    k = heads_first(sizes[0], sizes[1])
    v = heads_first(sizes[0] + sizes[1], sizes[2])
    scale = float(attrs.get("scale", 0.0)) or 1 / math.sqrt(sizes[0] // heads)
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), b.const(scale, dtype))
    masked = float(attrs.get("mask_filter_value", -10000.0))
    mask = input_name(node, 3)
    if mask is not None:
        if m.shape(node, mask) != (batch, seq):
            raise refuse(node, f"mask_index of shape {m.shape(node, mask)} (a [batch, sequence] 0/1 mask is rewritten)")
        # 0 where a key is kept, mask_filter_value where it is masked out, broadcast over heads and queries.
        keep = b.op("Cast", b.op("Reshape", mask, b.ints([batch, 1, 1, seq])), to=m.elem_type(node, x))
        scores = b.op("Add", scores, b.op("Mul", b.op("Sub", b.const(1, dtype), keep), b.const(masked, dtype)))
    if attrs.get("unidirectional", 0):
        future = np.triu(np.ones((seq, seq), bool), k=1)
        scores = b.op("Add", scores, b.const(np.where(future, masked, 0.0).astype(dtype)))
    context = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
    b.op("Reshape", b.op("Transpose", context, perm=[0, 2, 1, 3]), b.ints([batch, seq, sizes[2]]),
         out=node.output[0])
    return b.nodes
