"""ONNX → ONNX rewrites of the opset-23+ Attention, RMSNormalization and
RotaryEmbedding (nx_hal.onnx.rewrites.attention): the rewritten model run
by onnxruntime against ONNX's reference implementation on the original, for
each feature the rewrite covers, and the refusals of what it does not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (runs the rewritten model)")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from tests.rewrite_checks import assert_refused, assert_rewritten_same, ort_run  # noqa: E402

_RNG = np.random.default_rng(23)
_OPS = {"Attention", "RMSNormalization", "RotaryEmbedding"}
_NP_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.BOOL: np.bool_,
             TensorProto.INT64: np.int64}

# ---------------------------------------------------------------- helpers


def _model(op: str, inputs: Mapping[str, tuple[list[int], int]], outputs: list[str], *, opset: int = 23,
           order: list[str] | None = None, **attrs: Any) -> Any:
    """One ``op`` node whose inputs are graph inputs (``order``, where "" leaves
    one out: the node's inputs; else those of ``inputs``); outputs' shapes are
    left to inference."""
    node = helper.make_node(op, order or list(inputs), outputs, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, (s, t) in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def _feeds(model: Any, values: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    feeds = dict(values or {})
    for value in model.graph.input:
        if value.name in feeds:
            continue
        elem = value.type.tensor_type.elem_type
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if elem == TensorProto.BOOL:
            feeds[value.name] = _RNG.random(shape) < 0.7  # noqa: PLR2004
        else:
            feeds[value.name] = _RNG.standard_normal(shape).astype(_NP_TYPES[elem])
    return feeds


_run = ort_run


def _assert_same(model: Any, values: dict[str, np.ndarray] | None = None, *, rtol: float = 1e-5,
                 atol: float = 1e-5) -> Any:
    """Rewrites ``model``: the operator is gone, and onnxruntime on the
    rewritten model gives ONNX's reference outputs."""
    feeds = _feeds(model, values)
    want = list(ReferenceEvaluator(model).run(None, feeds))
    return assert_rewritten_same(model, feeds, _OPS, want=want, rtol=rtol, atol=atol)


def _refused(model: Any, *words: str) -> None:
    assert_refused(model, *words)


F = TensorProto.FLOAT


def _qkv4(q_heads: int = 4, kv_heads: int = 4, q_len: int = 3, kv_len: int = 5, size: int = 8,
          v_size: int = 8, elem: int = F) -> dict[str, tuple[list[int], int]]:
    return {"Q": ([2, q_heads, q_len, size], elem), "K": ([2, kv_heads, kv_len, size], elem),
            "V": ([2, kv_heads, kv_len, v_size], elem)}


def _qkv3(q_heads: int, kv_heads: int, q_len: int = 3, kv_len: int = 5, size: int = 4,
          v_size: int = 6) -> dict[str, tuple[list[int], int]]:
    return {"Q": ([2, q_len, q_heads * size], F), "K": ([2, kv_len, kv_heads * size], F),
            "V": ([2, kv_len, kv_heads * v_size], F)}


# ---------------------------------------------------------------- Attention


@pytest.mark.parametrize("attrs", [{}, {"scale": 0.3}, {"is_causal": 1}, {"softcap": 1.5}], ids=str)
def test_attention_4d(attrs: dict[str, Any]) -> None:
    rewritten = _assert_same(_model("Attention", _qkv4(v_size=6), ["Y"], **attrs))
    assert {"MatMul", "Softmax"} <= {n.op_type for n in rewritten.graph.node}


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(4, 4), (6, 2), (4, 1)])
def test_attention_3d_and_grouped_query_heads(q_heads: int, kv_heads: int) -> None:
    _assert_same(_model("Attention", _qkv3(q_heads, kv_heads), ["Y"], q_num_heads=q_heads, kv_num_heads=kv_heads,
                        is_causal=1))


def test_attention_4d_grouped_query_heads_repeat_each_head_in_place() -> None:
    _assert_same(_model("Attention", _qkv4(q_heads=6, kv_heads=3), ["Y"]))


@pytest.mark.parametrize("shape", [[3, 5], [2, 1, 3, 5], [4, 3, 5], [5], [3, 2]], ids=str)
@pytest.mark.parametrize("elem", [F, TensorProto.BOOL], ids=["float", "bool"])
def test_attention_masks_broadcast_and_short_ones_padded(shape: list[int], elem: int) -> None:
    inputs = {**_qkv4(), "attn_mask": (shape, elem)}
    _assert_same(_model("Attention", inputs, ["Y"]))


def test_attention_causal_with_a_mask() -> None:
    inputs = {**_qkv4(), "attn_mask": ([2, 1, 3, 5], TensorProto.BOOL)}
    _assert_same(_model("Attention", inputs, ["Y"], is_causal=1))


def test_attention_fully_masked_rows_are_zero() -> None:
    inputs = {**_qkv4(), "attn_mask": ([3, 5], TensorProto.BOOL)}
    mask = np.ones((3, 5), bool)
    mask[1] = False
    model = _model("Attention", inputs, ["Y", "", "", "P"], qk_matmul_output_mode=3)
    _assert_same(model, {"attn_mask": mask})
    # More queries than keys, causal: the first rows see a key each, none is empty.
    _assert_same(_model("Attention", _qkv4(q_len=6, kv_len=4), ["Y"], is_causal=1))


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_cache_in_and_out(causal: int) -> None:
    inputs = {**_qkv3(4, 2, kv_len=3), "attn_mask": ([3, 7], F), "past_key": ([2, 2, 4, 4], F),
              "past_value": ([2, 2, 4, 6], F)}
    rewritten = _assert_same(_model("Attention", inputs, ["Y", "present_key", "present_value"], is_causal=causal,
                                    q_num_heads=4, kv_num_heads=2))
    assert "Concat" in {n.op_type for n in rewritten.graph.node}


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_matmul_output_modes(mode: int) -> None:
    inputs = {**_qkv4(), "attn_mask": ([3, 5], F)}
    attrs: dict[str, Any] = {"qk_matmul_output_mode": mode} | ({"softcap": 2.0} if mode else {})
    _assert_same(_model("Attention", inputs, ["Y", "", "", "qk"], is_causal=1, **attrs))


def test_attention_float16_is_computed_in_float32() -> None:
    inputs = {**_qkv4(elem=TensorProto.FLOAT16), "attn_mask": ([3, 5], TensorProto.FLOAT16)}
    rewritten = _assert_same(_model("Attention", inputs, ["Y"], is_causal=1), rtol=2e-3, atol=2e-3)
    assert {"Cast"} <= {n.op_type for n in rewritten.graph.node}


def test_attention_softmax_precision() -> None:
    inputs = {**_qkv4(elem=TensorProto.FLOAT16), "attn_mask": ([3, 5], TensorProto.BOOL)}
    _assert_same(_model("Attention", inputs, ["Y", "", "", "P"], opset=24, qk_matmul_output_mode=3,
                        softmax_precision=TensorProto.FLOAT), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}], ids=str)
def test_attention_nonpad_kv_seqlen(attrs: dict[str, Any]) -> None:
    inputs = {**_qkv4(q_len=2, kv_len=6), "attn_mask": ([2, 1, 2, 6], TensorProto.BOOL),
              "lens": ([2], TensorProto.INT64)}
    order = ["Q", "K", "V", "attn_mask", "", "", "lens"]
    model = _model("Attention", inputs, ["Y"], opset=24, order=order, **attrs)
    _assert_same(model, {"lens": np.array([4, 1], np.int64), "attn_mask": np.ones((2, 1, 2, 6), bool)})


def test_attention_refusals_name_what_is_not_covered() -> None:
    _refused(_model("Attention", _qkv4(q_heads=4, kv_heads=3), ["Y"]), "4 query heads for 3")
    with_qk = _model("Attention", _qkv4(), ["Y", "", "", "qk"], softcap=2.0)
    _refused(with_qk, "qk_matmul_output_mode 0 with softcap")
    wide = {**_qkv4(), "attn_mask": ([3, 6], F)}
    _refused(_model("Attention", wide, ["Y"]), "attn_mask of shape [3, 6] for 5 keys")


def test_attention_refuses_bfloat16() -> None:
    bf16 = _qkv4(elem=TensorProto.BFLOAT16)
    _refused(_model("Attention", bf16, ["Y"]), "'Q' of element type bfloat16")


# ---------------------------------------------------------------- RMSNormalization


@pytest.mark.parametrize(("shape", "axis"), [([2, 3, 5], -1), ([2, 3, 5], 1), ([2, 3, 4, 5], 0), ([3, 4], -2)])
def test_rms_normalization(shape: list[int], axis: int) -> None:
    inputs = {"X": (shape, F), "W": (shape[axis:] if axis else shape, F)}
    rewritten = _assert_same(_model("RMSNormalization", inputs, ["Y"], axis=axis, epsilon=0.1))
    assert "ReduceMean" in {n.op_type for n in rewritten.graph.node}


def test_rms_normalization_float16_and_default_axis() -> None:
    inputs = {"X": ([2, 3, 8], TensorProto.FLOAT16), "W": ([8], TensorProto.FLOAT16)}
    _assert_same(_model("RMSNormalization", inputs, ["Y"]), rtol=2e-3, atol=2e-3)


def test_rms_normalization_refuses_another_stash_type() -> None:
    inputs = {"X": ([2, 3], F), "W": ([3], F)}
    _refused(_model("RMSNormalization", inputs, ["Y"], stash_type=0), "stash_type 0")


# ---------------------------------------------------------------- RotaryEmbedding


_ROTARY = [(interleaved, dim) for interleaved in (0, 1) for dim in (0, 4)]


@pytest.mark.parametrize(("interleaved", "dim"), _ROTARY)
def test_rotary_embedding_4d_with_positions(interleaved: int, dim: int) -> None:
    half = (dim or 8) // 2
    inputs = {"x": ([2, 4, 3, 8], F), "cos": ([10, half], F), "sin": ([10, half], F),
              "pos": ([2, 3], TensorProto.INT64)}
    model = _model("RotaryEmbedding", inputs, ["y"], interleaved=interleaved, rotary_embedding_dim=dim)
    _assert_same(model, {"pos": _RNG.integers(0, 10, (2, 3))})


@pytest.mark.parametrize(("interleaved", "dim"), _ROTARY)
def test_rotary_embedding_3d_without_positions(interleaved: int, dim: int) -> None:
    half = (dim or 8) // 2
    inputs = {"x": ([2, 3, 32], F), "cos": ([2, 3, half], F), "sin": ([2, 3, half], F)}
    _assert_same(_model("RotaryEmbedding", inputs, ["y"], interleaved=interleaved, rotary_embedding_dim=dim,
                        num_heads=4))


def test_rotary_embedding_refusals() -> None:
    odd_dim = {"x": ([2, 4, 3, 8], F), "cos": ([2, 3, 1], F), "sin": ([2, 3, 1], F)}
    _refused(_model("RotaryEmbedding", odd_dim, ["y"], rotary_embedding_dim=3), "rotary_embedding_dim 3")
    odd = {"x": ([2, 4, 3, 8], F), "cos": ([2, 3, 2], F), "sin": ([2, 3, 2], F)}
    _refused(_model("RotaryEmbedding", odd, ["y"], rotary_embedding_dim=6), "a cache of shape [2, 3, 2]")
