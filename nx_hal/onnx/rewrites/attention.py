"""ONNX's own transformer operators (opset 23 and later) -- Attention,
RMSNormalization and RotaryEmbedding -- spelt out in standard operators.

torch-mlir's ONNX importer has no lowering for them, while the operators
they are made of (MatMul, Softmax, Where, Gather, ReduceMean...) lower well;
exporters (torch.onnx with opset 23+) write them for every transformer
layer, so without this a whole model falls back to the host.

The semantics are those of ONNX's reference implementation
(``onnx.reference.ops.op_attention`` and friends), shapes static: masks
that depend only on shapes (causal, sliding window) become constants, and
only what depends on input values (``attn_mask``, ``nonpad_kv_seqlen``)
is computed in the graph. What is not covered is refused, never guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from onnx import TensorProto

from nx_hal.onnx.rewrites._graph import Block, Model, input_name, known_attributes, np_dtype, output, refuse

__all__ = ["ATTENTION_REWRITES", "rewrite_attention", "rewrite_rms_normalization", "rewrite_rotary_embedding"]

_FLOATS: Final = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
_ATTENTION_ATTRIBUTES: Final = {"scale", "is_causal", "q_num_heads", "kv_num_heads", "softcap", "softmax_precision",
                                "qk_matmul_output_mode", "left_window_size", "right_window_size"}
_RANK_3D: Final = 3
_RANK_4D: Final = 4
_MAX_MASK_RANK: Final = 4
_MODE_RAW, _MODE_SOFTCAP, _MODE_BIAS, _MODE_SOFTMAX = 0, 1, 2, 3




def _float_type(m: Model, node: Any, name: str) -> int:
    """The element type of ``name``, refused unless float, float16 or double
    (the types nx_hal runs; bfloat16 and the float8s it has no dtype for)."""
    elem = m.elem_type(node, name)
    if elem not in _FLOATS:
        raise refuse(node, f"'{name}' of element type {TensorProto.DataType.Name(elem).lower()}")
    return elem


# ---------------------------------------------------------------- Attention


@dataclasses.dataclass(frozen=True)
class _Shapes:
    """What the rewrite of one Attention node needs to know of its shapes."""

    rank: int  # of Q, K and V: 3 (heads packed in the last axis) or 4
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    new_len: int  # keys and values of this step
    past_len: int  # keys and values in past_key / past_value
    head_size: int  # of Q and K
    v_head_size: int

    @property
    def kv_len(self) -> int:
        return self.past_len + self.new_len


def _heads(node: Any, attrs: dict[str, Any], q: tuple[int, ...], k: tuple[int, ...],
           v: tuple[int, ...]) -> tuple[int, int]:
    """(query heads, key/value heads): the attributes for 3-D inputs, axis 1 for 4-D."""
    if len(q) == _RANK_4D:
        return _heads_4d(node, attrs, q, k, v)
    q_heads, kv_heads = int(attrs.get("q_num_heads", 0)), int(attrs.get("kv_num_heads", 0))
    if q_heads <= 0 or kv_heads <= 0:
        raise refuse(node, "3-D inputs without q_num_heads and kv_num_heads")
    if q[2] % q_heads or k[2] % kv_heads or v[2] % kv_heads:
        raise refuse(node, f"hidden sizes {q[2]}, {k[2]}, {v[2]} not divisible by {q_heads} and {kv_heads} heads")
    return q_heads, kv_heads


def _heads_4d(node: Any, attrs: dict[str, Any], q: tuple[int, ...], k: tuple[int, ...],
              v: tuple[int, ...]) -> tuple[int, int]:
    if v[1] != k[1]:
        raise refuse(node, f"K with {k[1]} heads but V with {v[1]}")
    for name, value in (("q_num_heads", q[1]), ("kv_num_heads", k[1])):
        if name in attrs and int(attrs[name]) != value:
            raise refuse(node, f"{name} {attrs[name]} for 4-D inputs of {value} heads")
    return q[1], k[1]


def _shapes(m: Model, node: Any, attrs: dict[str, Any]) -> _Shapes:
    q, k, v = (m.shape(node, node.input[i]) for i in range(3))
    if len(q) not in (_RANK_3D, _RANK_4D) or len(k) != len(q) or len(v) != len(q):
        raise refuse(node, f"Q, K, V of ranks {len(q)}, {len(k)}, {len(v)} (3-D or 4-D alike are rewritten)")
    q_heads, kv_heads = _heads(node, attrs, q, k, v)
    if q_heads % kv_heads:
        raise refuse(node, f"{q_heads} query heads for {kv_heads} key/value heads (not a multiple)")
    # Sizes per head: the last axis of 4-D inputs, a share of the last axis of 3-D ones.
    sizes = (q[-1], k[-1], v[-1]) if len(q) == _RANK_4D else (q[2] // q_heads, k[2] // kv_heads, v[2] // kv_heads)
    if sizes[1] != sizes[0]:
        raise refuse(node, f"Q heads of size {sizes[0]} but K heads of size {sizes[1]}")
    seq = len(q) - 2
    shapes = _Shapes(rank=len(q), batch=q[0], q_heads=q_heads, kv_heads=kv_heads, q_len=q[seq], new_len=k[seq],
                     past_len=0, head_size=sizes[0], v_head_size=sizes[2])
    return dataclasses.replace(shapes, past_len=_past_len(m, node, shapes))


def _past_len(m: Model, node: Any, s: _Shapes) -> int:
    past_key, past_value = input_name(node, 4), input_name(node, 5)
    if (past_key is None) != (past_value is None):
        raise refuse(node, "past_key without past_value or the other way round")
    if past_key is None or past_value is None:
        return 0
    key, value = m.shape(node, past_key), m.shape(node, past_value)
    want_key, want_value = (s.batch, s.kv_heads, s.head_size), (s.batch, s.kv_heads, s.v_head_size)
    if len(key) != _RANK_4D or len(value) != _RANK_4D or key[2] != value[2] \
            or (key[0], key[1], key[3]) != want_key or (value[0], value[1], value[3]) != want_value:
        raise refuse(node, f"past_key {list(key)} and past_value {list(value)} that do not fit K and V")
    return key[2]


def _refuse_unsupported(m: Model, node: Any, attrs: dict[str, Any]) -> None:
    """Refuses what the rewrite does not spell out, or where ONNX's reference and
    its specification disagree (no value a model could rely on)."""
    if output(node, 3) is not None:
        _refuse_qk_output(node, attrs)
    precision = attrs.get("softmax_precision")
    if precision is not None and int(precision) not in _FLOATS:
        raise refuse(node, f"softmax_precision {TensorProto.DataType.Name(int(precision)).lower()}")
    nonpad = input_name(node, 6)
    if nonpad is not None:
        if input_name(node, 4) is not None:
            raise refuse(node, "nonpad_kv_seqlen together with past_key")
        if m.elem_type(node, nonpad) != TensorProto.INT64:
            raise refuse(node, "nonpad_kv_seqlen not of type int64")
    if len(node.input) > 7 or len(node.output) > 4:  # noqa: PLR2004 -- the operator's own arity
        raise refuse(node, "inputs or outputs beyond the operator's")


def _refuse_qk_output(node: Any, attrs: dict[str, Any]) -> None:
    mode = int(attrs.get("qk_matmul_output_mode", _MODE_RAW))
    if mode not in (_MODE_RAW, _MODE_SOFTCAP, _MODE_BIAS, _MODE_SOFTMAX):
        raise refuse(node, f"qk_matmul_output_mode {mode}")
    if mode == _MODE_RAW and float(attrs.get("softcap", 0.0)) > 0:
        # The specification says the raw product; the reference gives it soft-capped.
        raise refuse(node, "qk_matmul_output_mode 0 with softcap (the reference and the specification disagree)")


def _to_4d(b: Block, x: str, s: _Shapes, heads: int, seq: int) -> str:
    """A 3-D [batch, seq, heads * size] input as [batch, heads, seq, size]."""
    if s.rank == _RANK_4D:
        return x
    return b.op("Transpose", b.op("Reshape", x, b.ints([s.batch, seq, heads, -1])), perm=[0, 2, 1, 3])


def _cache(b: Block, node: Any, k: str, v: str) -> tuple[str, str]:
    """Keys and values with the past ones in front; present_key and
    present_value (outputs 1 and 2) name them where wanted."""
    past = (input_name(node, 4), input_name(node, 5))
    joined = []
    for new, old, index in ((k, past[0], 1), (v, past[1], 2)):
        out = output(node, index)
        if old is not None:
            joined.append(b.op("Concat", old, new, axis=2, out=out))
        elif out is not None:
            joined.append(b.op("Identity", new, out=out))
        else:
            joined.append(new)
    return joined[0], joined[1]


def _repeat_heads(b: Block, x: str, s: _Shapes) -> str:
    """Grouped-query attention: each key/value head repeated for the query
    heads of its group, in place ([h0, h0, h1, h1], as numpy's repeat)."""
    groups = s.q_heads // s.kv_heads
    if groups == 1:
        return x
    return b.op("Gather", x, b.ints(np.repeat(np.arange(s.kv_heads), groups)), axis=1)


def _static_allowed(s: _Shapes, causal: bool, left: int, right: int) -> np.ndarray | None:
    """The [q, kv] keys a query may attend by shapes alone (causal and sliding
    window, offset by the past), None when that is every key."""
    i = np.arange(s.q_len).reshape(-1, 1)
    j = np.arange(s.kv_len).reshape(1, -1)
    distance = i + s.past_len - j  # how far key j lies behind query i's absolute position
    allowed = np.ones((s.q_len, s.kv_len), bool)
    if causal:
        allowed &= distance >= 0
    if left >= 0:
        allowed &= distance <= left
    if right >= 0:
        allowed &= distance >= -right
    return None if allowed.all() else allowed


def _nonpad_allowed(b: Block, nonpad: str, s: _Shapes, causal: bool, left: int, right: int) -> str:
    """The [batch, 1, q, kv] keys a query may attend with an external cache of
    ``nonpad_kv_seqlen`` valid keys per batch: the causal frontier and window
    offset by nonpad - q per batch, the padding behind the valid keys masked."""
    valid = b.op("Reshape", nonpad, b.ints([s.batch, 1, 1, 1]))
    allowed = b.op("Less", b.ints(np.arange(s.kv_len).reshape(1, 1, 1, -1)), valid)
    i = np.arange(s.q_len).reshape(-1, 1)
    j = np.arange(s.kv_len).reshape(1, -1)
    distance = b.op("Add", b.ints(i - j - s.q_len), valid)  # i + (nonpad - q) - j
    limits = [("Less", 0)] if causal else []
    limits += [("Greater", left)] if left >= 0 else []
    limits += [("Less", -right)] if right >= 0 else []
    for compare, limit in limits:
        outside = b.op(compare, distance, b.const(limit, np.int64))
        allowed = b.op("And", allowed, b.op("Not", outside))
    return allowed


def _mask_bias(m: Model, b: Block, node: Any, mask: str, s: _Shapes, compute: int) -> str:
    """attn_mask as an additive bias: a boolean one 0 where True and -inf where
    False, a float one as it is; one shorter than the keys padded with keys masked out."""
    shape = m.shape(node, mask)
    elem = m.elem_type(node, mask)
    dtype = np_dtype(compute)
    if not shape or len(shape) > _MAX_MASK_RANK or shape[-1] > s.kv_len:
        raise refuse(node, f"attn_mask of shape {list(shape)} for {s.kv_len} keys")
    if elem == TensorProto.BOOL:
        bias = b.op("Where", mask, b.const(0, dtype), b.const(-np.inf, dtype))
    elif elem == m.elem_type(node, node.input[0]):
        bias = mask if elem == compute else b.op("Cast", mask, to=compute)
    else:
        raise refuse(node, f"attn_mask of element type {TensorProto.DataType.Name(elem).lower()} unlike Q's")
    if shape[-1] < s.kv_len:
        pad = np.full((*shape[:-1], s.kv_len - shape[-1]), -np.inf, dtype)
        bias = b.op("Concat", bias, b.const(pad), axis=-1)
    return bias


def _bias(m: Model, b: Block, node: Any, s: _Shapes, attrs: dict[str, Any],
          compute: int) -> tuple[str | None, str | None]:
    """The additive bias of the scores (None: none) and where a query row has
    no key left to attend (None: no such row), whose outputs are zero."""
    dtype = np_dtype(compute)
    causal = bool(attrs.get("is_causal", 0))
    left, right = int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1))
    mask, nonpad = input_name(node, 3), input_name(node, 6)
    parts = []
    if mask is not None:
        parts.append(_mask_bias(m, b, node, mask, s, compute))
    allowed: np.ndarray | str | None
    if nonpad is not None:
        allowed = _nonpad_allowed(b, nonpad, s, causal, left, right)
    else:
        allowed = _static_allowed(s, causal, left, right)
    if isinstance(allowed, str):
        parts.append(b.op("Where", allowed, b.const(0, dtype), b.const(-np.inf, dtype)))
    elif allowed is not None:
        parts.append(b.const(np.where(allowed, 0, -np.inf).astype(dtype)))
    if not parts:
        return None, None
    bias = parts[0]
    for part in parts[1:]:
        bias = b.op("Add", bias, part)
    if mask is None and isinstance(allowed, np.ndarray):
        # Known now: a constant, or nothing when every query keeps a key.
        empty = ~allowed.any(axis=-1, keepdims=True)
        return bias, (b.const(empty) if empty.any() else None)
    # A softmax over a row of -inf is NaN; the operator makes that row 0.
    highest = b.op("ReduceMax", bias, b.ints([-1]), keepdims=1)
    return bias, b.op("Equal", highest, b.const(-np.inf, dtype))


def _scores(b: Block, q: str, k: str, s: _Shapes, attrs: dict[str, Any], compute: int) -> str:
    """Q K^T times the scale, each factor scaled by its square root (as the
    operator does against overflow), soft-capped if asked."""
    dtype = np_dtype(compute)
    scale = float(attrs["scale"]) if "scale" in attrs else 1 / np.sqrt(s.head_size)
    root = b.const(np.sqrt(np.float64(scale)), dtype)
    scores = b.op("MatMul", b.op("Mul", q, root), b.op("Transpose", b.op("Mul", k, root), perm=[0, 1, 3, 2]))
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        cap = b.const(softcap, dtype)
        scores = b.op("Mul", b.op("Tanh", b.op("Div", scores, cap)), cap)
    return scores


def _softmax(b: Block, logits: str, empty: str | None, attrs: dict[str, Any], elem: int, compute: int) -> str:
    """Softmax over the keys in softmax_precision (a float16 one of a float16
    node: float32, as the rest), rows with no key zero."""
    precision = int(attrs.get("softmax_precision", compute))
    precision = compute if precision == elem else precision
    if precision != compute:
        logits = b.op("Cast", logits, to=precision)
    probs = b.op("Softmax", logits, axis=-1)
    if empty is not None:
        probs = b.op("Where", empty, b.const(0, np_dtype(precision)), probs)
    return b.op("Cast", probs, to=compute) if precision != compute else probs


def rewrite_attention(m: Model, node: Any) -> list[Any]:
    """Attention (opset 23+): softmax(Q K^T scale + bias) V per head, with the
    key/value cache, grouped-query heads, causal and sliding-window masks,
    attn_mask, nonpad_kv_seqlen, softcap and the qk_matmul_output output."""
    attrs = known_attributes(node, _ATTENTION_ATTRIBUTES)
    for index in range(3):
        _float_type(m, node, node.input[index])
    _refuse_unsupported(m, node, attrs)
    s = _shapes(m, node, attrs)
    b = Block(m, node)
    q = _to_4d(b, node.input[0], s, s.q_heads, s.q_len)
    k, v = (_to_4d(b, node.input[i], s, s.kv_heads, s.new_len) for i in (1, 2))
    k, v = _cache(b, node, k, v)
    # float16 is computed in float32 and rounded once at the end: the
    # reference's float16 steps round differently from XLA's, by more than
    # the node tests allow, while a float32 result is within their tolerance.
    elem = m.elem_type(node, node.input[0])
    compute = TensorProto.FLOAT if elem == TensorProto.FLOAT16 else elem
    q, k, v = (x if compute == elem else b.op("Cast", x, to=compute) for x in (q, k, v))
    k, v = _repeat_heads(b, k, s), _repeat_heads(b, v, s)
    scores = _scores(b, q, k, s, attrs, compute)
    bias, empty = _bias(m, b, node, s, attrs, compute)
    logits = scores if bias is None else b.op("Add", scores, bias)
    probs = _softmax(b, logits, empty, attrs, elem, compute)
    qk_output = output(node, 3)
    if qk_output is not None:
        mode = int(attrs.get("qk_matmul_output_mode", _MODE_RAW))
        _as(b, {_MODE_BIAS: logits, _MODE_SOFTMAX: probs}.get(mode, scores), compute, elem, qk_output)
    context = b.op("MatMul", probs, v)
    if s.rank == _RANK_3D:
        heads_last = b.op("Transpose", context, perm=[0, 2, 1, 3])
        context = b.op("Reshape", heads_last, b.ints([s.batch, s.q_len, s.q_heads * s.v_head_size]))
    _as(b, context, compute, elem, node.output[0])
    return b.nodes


def _as(b: Block, x: str, compute: int, elem: int, out: str) -> None:
    """``x`` (of type ``compute``) as the output ``out`` of type ``elem``."""
    if compute == elem:
        b.op("Identity", x, out=out)
    else:
        b.op("Cast", x, to=elem, out=out)


# ---------------------------------------------------------------- RMSNormalization


def rewrite_rms_normalization(m: Model, node: Any) -> list[Any]:
    """RMSNormalization: X / sqrt(mean(X^2) + epsilon) * scale, the mean over
    the axes from ``axis`` on, in float32 for a float16 X (stash_type 1)."""
    attrs = known_attributes(node, {"axis", "epsilon", "stash_type"})
    if int(attrs.get("stash_type", 1)) != 1:
        raise refuse(node, f"stash_type {attrs['stash_type']} (float32 computation is rewritten)")
    x, scale = node.input[0], node.input[1]
    elem = _float_type(m, node, x)
    if m.elem_type(node, scale) != elem:
        raise refuse(node, "a scale of another element type than X")
    rank = len(m.shape(node, x))
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise refuse(node, f"axis {axis} of a rank-{rank} input")
    axis %= rank
    b = Block(m, node)
    # float16 is computed in float32, as stash_type 1 asks; float and double as they are.
    compute = TensorProto.FLOAT if elem == TensorProto.FLOAT16 else elem
    dtype = np_dtype(compute)
    if compute != elem:
        x = b.op("Cast", x, to=compute)
    mean = b.op("ReduceMean", b.op("Mul", x, x), b.ints(range(axis, rank)), keepdims=1)
    rms = b.op("Sqrt", b.op("Add", mean, b.const(float(attrs.get("epsilon", 1e-5)), dtype)))
    normed = b.op("Mul", x, b.op("Reciprocal", rms))
    if compute != elem:
        normed = b.op("Cast", normed, to=elem)
    b.op("Mul", normed, scale, out=node.output[0])
    return b.nodes


# ---------------------------------------------------------------- RotaryEmbedding


def _rotary_layout(m: Model, node: Any, attrs: dict[str, Any]) -> tuple[tuple[int, ...], int, int]:
    """(input shape, heads, head size) of a 3-D [batch, seq, hidden] or a
    4-D [batch, heads, seq, head size] input."""
    shape = m.shape(node, node.input[0])
    heads = int(attrs.get("num_heads", 0))
    if len(shape) == _RANK_4D:
        if heads and heads != shape[1]:
            raise refuse(node, f"num_heads {heads} for a 4-D input of {shape[1]} heads")
        return shape, shape[1], shape[3]
    if len(shape) != _RANK_3D or heads <= 0 or shape[2] % heads:
        raise refuse(node, f"an input of shape {list(shape)} with num_heads {heads}")
    return shape, heads, shape[2] // heads


def _rotary_tables(m: Model, b: Block, node: Any, batch: int, seq: int, half: int) -> tuple[str, str]:
    """cos and sin as [batch, seq, 1, half]: the caches' rows at position_ids,
    or the caches themselves when they are per batch and position already."""
    positions = input_name(node, 3)
    want = (batch, seq, half)
    tables = []
    for cache in (node.input[1], node.input[2]):
        shape = m.shape(node, cache)
        if positions is not None:
            if len(shape) != 2 or shape[1] != half or m.shape(node, positions) != (batch, seq):  # noqa: PLR2004
                raise refuse(node, f"a cache of shape {list(shape)} for position_ids of {batch}x{seq}, {half} wide")
            cache = b.op("Gather", cache, positions, axis=0)
        elif shape != want:
            raise refuse(node, f"a cache of shape {list(shape)} without position_ids ({list(want)} is rewritten)")
        tables.append(b.unsqueeze(cache, [2]))
    return tables[0], tables[1]


def rewrite_rotary_embedding(m: Model, node: Any) -> list[Any]:
    """RotaryEmbedding: the first rotary_embedding_dim features of each head
    rotated as (x1, x2) pairs -- halves, or neighbours when interleaved -- by
    the cos and sin of their position; the rest passed through."""
    attrs = known_attributes(node, {"interleaved", "rotary_embedding_dim", "num_heads"})
    _float_type(m, node, node.input[0])
    shape, heads, size = _rotary_layout(m, node, attrs)
    batch, seq = shape[0], shape[2] if len(shape) == _RANK_4D else shape[1]
    dim = int(attrs.get("rotary_embedding_dim", 0)) or size
    if dim % 2 or dim > size:
        raise refuse(node, f"rotary_embedding_dim {dim} for heads of size {size}")
    half, interleaved = dim // 2, bool(attrs.get("interleaved", 0))
    b = Block(m, node)
    cos, sin = _rotary_tables(m, b, node, batch, seq, half)
    x = node.input[0]  # as [batch, seq, heads, size]
    if len(shape) == _RANK_4D:
        x = b.op("Transpose", x, perm=[0, 2, 1, 3])
    else:
        x = b.op("Reshape", x, b.ints([batch, seq, heads, size]))
    rotated = b.slice(x, 3, 0, dim)
    if interleaved:  # pairs (0, 1), (2, 3)...: the pair as a last axis of 2
        pairs = b.op("Reshape", rotated, b.ints([batch, seq, heads, half, 2]))
        x1, x2 = b.take(pairs, 0, axis=4), b.take(pairs, 1, axis=4)
    else:  # pairs (i, i + half)
        x1, x2 = b.slice(rotated, 3, 0, half), b.slice(rotated, 3, half, dim)
    real = b.op("Sub", b.op("Mul", cos, x1), b.op("Mul", sin, x2))
    imag = b.op("Add", b.op("Mul", sin, x1), b.op("Mul", cos, x2))
    if interleaved:
        both = b.op("Concat", b.unsqueeze(real, [4]), b.unsqueeze(imag, [4]), axis=4)
        rotated = b.op("Reshape", both, b.ints([batch, seq, heads, dim]))
    else:
        rotated = b.op("Concat", real, imag, axis=3)
    if dim < size:
        rotated = b.op("Concat", rotated, b.slice(x, 3, dim, size), axis=3)
    if len(shape) == _RANK_4D:
        b.op("Transpose", rotated, perm=[0, 2, 1, 3], out=node.output[0])
    else:
        b.op("Reshape", rotated, b.ints(shape), out=node.output[0])
    return b.nodes


# (domain, op type) -> rewrite (see nx_hal.onnx.rewrites.Rewrite).
ATTENTION_REWRITES: Final[dict[tuple[str, str], Callable[[Model, Any], list[Any]]]] = {
    ("", "Attention"): rewrite_attention,
    ("", "RMSNormalization"): rewrite_rms_normalization,
    ("", "RotaryEmbedding"): rewrite_rotary_embedding,
}
