"""The converter's ONNX pre-passes (nx_hal.onnx.prepass, nx_hal.onnx.guards)
and its errors in ONNX terms, against onnxruntime and ONNX's reference
implementation.

- Shape folding: graphs that compute their shapes as torch.onnx writes them
  (Shape → Gather → Unsqueeze → Concat → Reshape, Range over a computed
  length, Expand / Slice / Tile / ConstantOfShape fed by computed shapes),
  with dynamic batch and sequence dims, convert on XLA CPU and match.
- Guards: each operator pattern the lowering got silently wrong on the ONNX
  node tests is either right now (value against the oracle) or refused by
  name.
- Errors name the node, its op type and its inferred input shapes; MLIR
  types do not leak; compile_anywhere names a plugin once with its count.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

import numpy as np
import pytest

try:
    import torch_mlir  # noqa: F401
except ImportError as exc:
    pytest.skip(f"ONNX → StableHLO needs torch-mlir: {exc}", allow_module_level=True)
onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the oracle)")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import nx_hal  # noqa: E402
from nx_hal.onnx import guards, prepass  # noqa: E402
from nx_hal.onnx.convert import ConversionError, onnx_to_stablehlo  # noqa: E402
from tests import onnx_models  # noqa: E402
from tests.onnx_models import _c, _vi  # noqa: E402
from tests.plugin_env import device_available  # noqa: E402

TPU, NPU = "tpu:cpu", "npu:cpu"
_RNG = np.random.default_rng(11)
n = helper.make_node


needs_tpu = pytest.mark.skipif(not device_available(TPU), reason="needs the tpu plugin's XLA CPU device (tpu:cpu)")
needs_both = pytest.mark.skipif(not (device_available(TPU) and device_available(NPU)), reason="needs tpu:cpu and npu:cpu")


# ---------------------------------------------------------------- models


def _w(name: str, shape: tuple[int, ...]) -> Any:
    return numpy_helper.from_array((_RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any], opset: int = 17) -> bytes:
    return onnx_models._model(nodes, inputs, outputs, inits, opset, name="torch_jit")  # as torch.onnx names it


def attention_block(d: int = 8, heads: int = 2) -> bytes:
    """Multi-head self-attention as torch.onnx exports it, batch and sequence
    dynamic: every view's target is computed from Shape (the head dim as
    ``size(-1) // heads``, GPT-2's ``Where(Equal(shape, -1), 1, shape)``
    guard), and position ids come from ``Range(0, seq)``."""
    inits = [
        _w("Wq", (d, d)), _w("Wk", (d, d)), _w("Wv", (d, d)), _w("Wo", (d, d)), _w("pos", (16, d)),
        _c("i0", np.int64(0)), _c("i1", np.int64(1)), _c("i2", np.int64(2)), _c("m1", np.int64(-1)),
        _c("ax0", np.array([0], np.int64)), _c("heads", np.array([heads], np.int64)),
        _c("heads_s", np.int64(heads)), _c("dm", np.array([d], np.int64)),
        _c("scale", np.float32(1 / np.sqrt(d // heads))),
    ]
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    nodes = [
        n("Shape", ["x"], ["shp"], name="/attn/Shape"), n("Gather", ["shp", "i0"], ["b"], axis=0),
        n("Gather", ["shp", "i1"], ["s"], axis=0), n("Gather", ["shp", "i2"], ["dd"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Unsqueeze", ["s", "ax0"], ["su"]),
        n("Div", ["dd", "heads_s"], ["hd0"]), n("Cast", ["hd0"], ["hd1"], to=TensorProto.INT64),
        n("Unsqueeze", ["hd1", "ax0"], ["hdu"]),
        n("Concat", ["bu", "su", "heads", "hdu"], ["split0"], axis=0),
        n("Shape", ["split0"], ["split_len"]), n("ConstantOfShape", ["split_len"], ["ones"], value=one),
        n("Mul", ["ones", "m1"], ["negs"]), n("Equal", ["split0", "negs"], ["is_neg"]),
        n("Where", ["is_neg", "ones", "split0"], ["split"]),
        n("Concat", ["bu", "su", "dm"], ["merge"], axis=0),
        n("Range", ["i0", "s", "i1"], ["ids"]), n("Gather", ["pos", "ids"], ["pe"], axis=0),
        n("Add", ["x", "pe"], ["xp"]),
        n("MatMul", ["xp", "Wq"], ["q0"]), n("MatMul", ["xp", "Wk"], ["k0"]), n("MatMul", ["xp", "Wv"], ["v0"]),
        n("Reshape", ["q0", "split"], ["q1"]), n("Reshape", ["k0", "split"], ["k1"]),
        n("Reshape", ["v0", "split"], ["v1"]),
        n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]), n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["sc0"]), n("Mul", ["sc0", "scale"], ["sc"]), n("Softmax", ["sc"], ["p"], axis=-1),
        n("MatMul", ["p", "v"], ["a0"]), n("Transpose", ["a0"], ["a1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["a1", "merge"], ["a2"], name="/attn/Reshape_merge"),
        n("MatMul", ["a2", "Wo"], ["o"]), n("Add", ["o", "x"], ["y"]),
    ]
    return _model(nodes, [_vi("x", ["batch", "seq", d])], [_vi("y", ["batch", "seq", d])], inits)


def vit_stem(d: int = 8) -> bytes:
    """A ViT's token stem: the class token expanded to the batch
    (``Expand`` to ``Concat(batch, 1, 1)``), a ``Slice`` whose end comes from
    Shape, a ``Tile`` with computed repeats and a ``ConstantOfShape`` mask.
    Without folding the output keeps a dynamic shape."""
    inits = [
        _w("cls", (1, 1, d)), _w("W", (d, d)), _c("i0", np.int64(0)), _c("i1", np.int64(1)),
        _c("ax0", np.array([0], np.int64)), _c("one", np.array([1], np.int64)),
        _c("start", np.array([1], np.int64)), _c("axis1", np.array([1], np.int64)),
    ]
    half = helper.make_tensor("half", TensorProto.FLOAT, [1], [0.5])
    nodes = [
        n("Shape", ["x"], ["shp"]), n("Gather", ["shp", "i0"], ["b"], axis=0), n("Unsqueeze", ["b", "ax0"], ["bu"]),
        n("Concat", ["bu", "one", "one"], ["eshape"], axis=0), n("Expand", ["cls", "eshape"], ["clsb"]),
        n("Concat", ["clsb", "x"], ["tok"], axis=1),
        n("Shape", ["tok"], ["tshp"]), n("Gather", ["tshp", "i1"], ["t"], axis=0), n("Unsqueeze", ["t", "ax0"], ["tu"]),
        n("Slice", ["tok", "start", "tu", "axis1"], ["patches"]), n("MatMul", ["patches", "W"], ["h"]),
        n("Shape", ["h"], ["hshp"]), n("ConstantOfShape", ["hshp"], ["mask"], value=half),
        n("Mul", ["h", "mask"], ["hm"]),
        n("Concat", ["one", "tu", "one"], ["reps"], axis=0), n("Tile", ["clsb", "reps"], ["clst"]),
        n("ReduceMean", ["clst"], ["cm"], axes=[1], keepdims=1), n("Add", ["hm", "cm"], ["y"]),
    ]
    return _model(nodes, [_vi("x", ["batch", "seq", d])], [_vi("y", ["batch", "seq", d])], inits)


def _single(op: str, inputs: list[Any], outputs: list[Any], inits: tuple[Any, ...] = (), opset: int = 18,
            **attrs: Any) -> bytes:
    names = [i.name for i in inputs] + [i.name for i in inits]
    node = n(op, names, [o.name for o in outputs], name=f"the_{op.lower()}", **attrs)
    return _model([node], inputs, outputs, list(inits), opset=opset)


def _oracle(model: bytes, feeds: dict[str, np.ndarray], reference: bool = False) -> list[np.ndarray]:
    if reference:
        return [np.asarray(o) for o in ReferenceEvaluator(onnx.load_model_from_string(model)).run(None, feeds)]
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, feeds)]


def _on_tpu(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    exe = nx_hal.device(TPU).compile(model, "onnx", cache=False, input_shapes=shapes)
    return [o.to_numpy() for o in exe(*[feeds[s.name] for s in exe.inputs])]


def _fixed(model: bytes, shapes: dict[str, list[int]]) -> Any:
    """The model as the child sees it before folding: inputs fixed, shapes inferred."""
    from nx_hal.onnx import _child

    proto = _child.load_model(model)
    _child.fix_input_shapes(proto, shapes)
    return _child.infer_shapes(proto)


# ---------------------------------------------------------------- shape folding


def test_folding_gives_every_tensor_a_static_shape() -> None:
    for build in (attention_block, vit_stem):
        data = build()  # built once: each build draws new weights
        model = _fixed(data, {"x": [2, 5, 8]})
        before = prepass.shapeless(model)
        assert len(before) >= 7, before  # data propagation alone leaves these
        notes: list[str] = []
        folded = prepass.fold_shapes(model, notes)
        assert prepass.shapeless(folded) == []
        assert {"Shape", "ConstantOfShape", "Range", "Expand", "Tile"}.isdisjoint(
            node.op_type for node in folded.graph.node)
        assert any("folded" in note and f"{len(before)} -> 0" in note for note in notes), notes
        # Folding computes what the graph computed: same outputs.
        x = _RNG.standard_normal((2, 5, 8)).astype(np.float32)
        want = _oracle(data, {"x": x})[0]
        got = _oracle(folded.SerializeToString(), {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_folding_leaves_static_models_alone() -> None:
    model = _fixed(_single("Relu", [_vi("x", [2, 3])], [_vi("y", [2, 3])]), {})
    notes: list[str] = []
    assert prepass.fold_shapes(model, notes) is model
    assert notes == []


def test_folding_that_onnxruntime_cannot_load_is_skipped_with_a_note() -> None:
    # A shape computed from an op onnxruntime has no kernel for (an unknown domain).
    model = _fixed(vit_stem(), {"x": [1, 3, 8]})
    model.graph.node[0].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    notes: list[str] = []
    assert prepass.fold_shapes(model, notes) is model
    assert len(notes) == 1 and notes[0].startswith("shape folding skipped: onnxruntime could not"), notes


@needs_tpu
@pytest.mark.parametrize("build", [attention_block, vit_stem], ids=["attention", "vit-stem"])
@pytest.mark.parametrize("shape", [(2, 5, 8), (1, 7, 8)], ids=["2x5", "1x7"])
def test_shape_computing_exports_convert_and_match_onnxruntime(build: Any, shape: tuple[int, ...]) -> None:
    model = build()
    x = _RNG.standard_normal(shape).astype(np.float32)
    want = _oracle(model, {"x": x})[0]
    got = _on_tpu(model, {"x": x})[0]
    assert got.shape == want.shape == shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(want).max() > 1e-2  # not a comparison of zeros


def test_the_conversion_says_it_folded() -> None:
    result = onnx_to_stablehlo(vit_stem(), input_shapes={"x": [2, 5, 8]}, use_cache=False)
    assert any(note.startswith("shape computations folded") for note in result.notes), result.notes
    assert "Shape" in result.onnx_ops  # onnx_ops lists the model as given


# ---------------------------------------------------------------- the rewrites hook


def test_rewrites_hook_calls_apply_and_infers_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    platforms: list[str | None] = []

    def apply(model: Any, **kwargs: Any) -> Any:
        seen.append(model)
        platforms.append(kwargs.get("platform"))
        out = onnx.ModelProto()
        out.CopyFrom(model)
        node = out.graph.node[0]
        node.op_type = "Sigmoid"  # stands for a lowering written in standard operators
        del out.graph.value_info[:]
        return out

    monkeypatch.setitem(sys.modules, "nx_hal.onnx.rewrites", types.SimpleNamespace(apply=apply))
    model = _fixed(_model([n("Relu", ["x"], ["h"]), n("Neg", ["h"], ["y"])], [_vi("x", [2, 3])],
                          [_vi("y", [2, 3])], []), {})
    notes: list[str] = []
    out = prepass.apply_rewrites(model, notes)
    assert seen == [model]
    assert [node.op_type for node in out.graph.node] == ["Sigmoid", "Neg"]
    assert notes == ["rewritten into standard operators before lowering: Relu"]
    assert prepass.shapeless(out) == []  # inferred again
    prepass.apply_rewrites(model, [], platform="cpu")
    assert platforms == [None, "cpu"]


def test_rewrites_hook_without_the_module_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nx_hal.onnx.rewrites", None)  # import raises ImportError
    model = _fixed(_single("Relu", [_vi("x", [2])], [_vi("y", [2])]), {})
    notes: list[str] = []
    assert prepass.apply_rewrites(model, notes) is model
    assert notes == []


# ---------------------------------------------------------------- never silently wrong


def _mod(fmod: int, dtype: Any) -> tuple[bytes, dict[str, np.ndarray]]:
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    a = np.array([-4, 7, 5, 4, -7, 8, 0, -3], dtype)
    b = np.array([2, -3, 8, -2, 3, 5, 3, 5], dtype)
    model = _single("Mod", [_vi("a", [8], onnx_type), _vi("b", [8], onnx_type)], [_vi("y", [8], onnx_type)],
                    fmod=fmod)
    return model, {"a": a, "b": b}


@needs_tpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.float32, np.float64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_mixed_signs(dtype: Any, fmod: int) -> None:
    model, feeds = _mod(fmod, dtype)
    want = np.fmod(feeds["a"], feeds["b"]) if fmod else np.mod(feeds["a"], feeds["b"])
    np.testing.assert_array_equal(_oracle(model, feeds, reference=True)[0], want)
    got = _on_tpu(model, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@needs_tpu
@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod_edge_cases(fmod: int) -> None:
    a = np.array([-2, 2, 2, -2, 3, -1, 0.5, -0.5, np.inf, 4], np.float32)
    b = np.array([np.inf, np.inf, -np.inf, -np.inf, 2, 3, -2, 2, 3, np.nan], np.float32)
    model = _single("Mod", [_vi("a", [10]), _vi("b", [10])], [_vi("y", [10])], fmod=fmod)
    with np.errstate(invalid="ignore"):
        want = np.fmod(a, b) if fmod else np.mod(a, b)
    got = _on_tpu(model, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, want)  # NaN where NaN, inf where inf


@needs_tpu
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth(mode: str) -> None:
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    attrs: dict[str, Any] = {"blocksize": 2} | ({"mode": mode} if mode == "CRD" else {})
    opset = 28 if mode == "CRD" else 18  # SpaceToDepth's mode is opset 28's
    model = _single("SpaceToDepth", [_vi("x", [2, 3, 4, 6])], [_vi("y", [2, 12, 2, 3])], opset=opset, **attrs)
    b = 2
    split = x.reshape(2, 3, 2, b, 3, b)
    want = (split.transpose(0, 1, 3, 5, 2, 4) if mode == "CRD" else split.transpose(0, 3, 5, 1, 2, 4)).reshape(
        2, 12, 2, 3)
    np.testing.assert_array_equal(_oracle(model, {"x": x}, reference=True)[0], want)
    np.testing.assert_array_equal(_on_tpu(model, {"x": x})[0], want)


@needs_tpu
@pytest.mark.parametrize(("size", "kernel", "strides", "pads", "dilations"), [
    (4, 3, 2, [0, 0, 0, 0], [1, 1]),  # onnx's test_maxpool_2d_ceil
    (7, 3, 2, [1, 1, 1, 1], [1, 1]),
    (9, 2, 2, [0, 0, 0, 0], [2, 2]),
    (5, 2, 2, [0, 0, 0, 0], [1, 1]),  # the last window would start in the padding: dropped
])
def test_max_pool_ceil_mode(size: int, kernel: int, strides: int, pads: list[int], dilations: list[int]) -> None:
    x = _RNG.standard_normal((1, 2, size, size)).astype(np.float32)
    ref = ReferenceEvaluator(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[kernel] * 2,
                                              strides=[strides] * 2, pads=pads, dilations=dilations, ceil_mode=1))
    run: Any = ref.run  # typed as returning a dict or a list
    want = np.asarray(run(None, {"x": x})[0])
    model = _single("MaxPool", [_vi("x", list(x.shape))], [_vi("y", list(want.shape))], kernel_shape=[kernel] * 2,
                    strides=[strides] * 2, pads=pads, dilations=dilations, ceil_mode=1)
    np.testing.assert_array_equal(_oracle(model, {"x": x})[0], want)  # onnxruntime agrees
    got = _on_tpu(model, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@needs_tpu
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 0)], ids=["4x3", "empty"])
def test_bool_reductions(op: str, shape: tuple[int, ...]) -> None:
    x = _RNG.random(shape) > 0.6
    x[0, :] = True if shape[1] else x[0, :]
    model = _single(op, [_vi("x", list(shape), TensorProto.BOOL)], [_vi("y", [shape[0], 1], TensorProto.BOOL)],
                    (_c("axes", np.array([1], np.int64)),), keepdims=1)
    want = (x.any(axis=1, keepdims=True) if op == "ReduceMax" else x.all(axis=1, keepdims=True))
    np.testing.assert_array_equal(_oracle(model, {"x": x}, reference=True)[0], want)
    got = _on_tpu(model, {"x": x})[0]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)


@needs_tpu
def test_l2_normalization_of_a_zero_slice_is_zero() -> None:
    x = np.array([[[1, 2, 2], [3, 4, 0]], [[0, 5, 5], [6, 8, 0]]], np.float32)
    model = _single("LpNormalization", [_vi("x", [2, 2, 3])], [_vi("y", [2, 2, 3])], opset=17, axis=0, p=2)
    want = _oracle(model, {"x": x})[0]
    assert want[0, 1, 2] == 0  # 0/0 is 0 in ONNX
    np.testing.assert_allclose(_on_tpu(model, {"x": x})[0], want, rtol=1e-6, atol=1e-7)


@needs_tpu
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_weighted_softmax_cross_entropy_mean(ignore_index: int | None) -> None:
    scores = _RNG.standard_normal((6, 5)).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 4, 2], np.int64)
    weights = np.array([0.9, 0.7, 0.8, 0.9, 0.2], np.float32)
    attrs: dict[str, Any] = {"reduction": "mean"}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    model = _single("SoftmaxCrossEntropyLoss", [_vi("s", [6, 5]), _vi("l", [6], TensorProto.INT64),
                                                _vi("w", [5])], [_vi("loss", [])], **attrs)
    feeds: dict[str, np.ndarray] = {"s": scores, "l": labels, "w": weights}
    want = _oracle(model, feeds)[0]
    assert np.isfinite(want) and want > 0.1
    np.testing.assert_allclose(_on_tpu(model, feeds)[0], want, rtol=1e-5)


def _refused(model: bytes, shapes: dict[str, list[int]]) -> ConversionError:
    with pytest.raises(ConversionError) as info:
        onnx_to_stablehlo(model, input_shapes=shapes, use_cache=False)
    return info.value


@pytest.mark.parametrize(("model", "shapes", "op", "words"), [
    (lambda: _single("LpPool", [_vi("x", [1, 1, 4, 4, 4])], [_vi("y", [1, 1, 3, 3, 3])], kernel_shape=[2, 2, 2], p=3),
     {}, "LpPool", "'x' float32[1, 1, 4, 4, 4]"),
    (lambda: _single("GridSample", [_vi("x", [1, 1, 3, 2]), _vi("g", [1, 2, 4, 2])], [_vi("y", [1, 1, 2, 4])],
                     opset=20, mode="nearest"), {}, "GridSample", "'g' float32[1, 2, 4, 2]"),
    (lambda: _single("ReduceMax", [_vi("x", [4, 2], TensorProto.BOOL), _vi("axes", [1], TensorProto.INT64)],
                     [_vi("y", [4, 1], TensorProto.BOOL)], keepdims=1), {}, "ReduceMax", "'x' bool[4, 2]"),
    (lambda: _model([n("SplitToSequence", ["x", "s"], ["q"], name="the_splittosequence"),
                     n("SequenceLength", ["q"], ["y"])], [_vi("x", [0]), _vi("s", [3], TensorProto.INT64)],
                    [_vi("y", [], TensorProto.INT64)], []), {"x": [0]}, "SplitToSequence", "'x' float32[0]"),
], ids=["LpPool-3d", "GridSample-nearest", "bool-ReduceMax-axes-input", "SplitToSequence-empty"])
def test_patterns_without_a_fix_are_refused_by_name(model: Any, shapes: dict[str, list[int]], op: str,
                                                    words: str) -> None:
    error = _refused(model(), shapes)
    assert error.reason == "unsupported-operator"
    assert error.operators == (op,)
    message = str(error)
    assert f"node 'the_{op.lower()}' ({op}; inputs: " in message and words in message
    assert "wrong values" in message


def test_guards_leave_correct_patterns_alone() -> None:
    """Integer fmod=1, unsigned Mod, reductions over numbers, MaxPool without
    ceil_mode, summed losses: untouched."""
    cases = [
        _single("Mod", [_vi("a", [3], TensorProto.INT32), _vi("b", [3], TensorProto.INT32)],
                [_vi("y", [3], TensorProto.INT32)], fmod=1),
        _single("Mod", [_vi("a", [3], TensorProto.UINT8), _vi("b", [3], TensorProto.UINT8)],
                [_vi("y", [3], TensorProto.UINT8)]),
        _single("ReduceMax", [_vi("x", [3, 2])], [_vi("y", [3, 1])], (_c("axes", np.array([1], np.int64)),)),
        _single("MaxPool", [_vi("x", [1, 1, 4, 4])], [_vi("y", [1, 1, 2, 2])], kernel_shape=[2, 2], strides=[2, 2]),
        _single("SoftmaxCrossEntropyLoss", [_vi("s", [3, 5]), _vi("l", [3], TensorProto.INT64), _vi("w", [5])],
                [_vi("loss", [])], reduction="sum"),
    ]
    for model in cases:
        proto = _fixed(model, {})
        before = [node.op_type for node in proto.graph.node]
        notes: list[str] = []
        out, refusals = guards.apply(proto, notes)
        assert [node.op_type for node in out.graph.node] == before
        assert refusals == [] and notes == []


# ---------------------------------------------------------------- errors in ONNX terms


def test_a_lowering_failure_names_the_node_and_its_inferred_shapes() -> None:
    # MaxPool's Indices output with strides: no lowering (onnx's test_maxpool_with_argmax_2d_precomputed_strides).
    node = n("MaxPool", ["x"], ["y", "z"], name="/features/pool_2", kernel_shape=[2, 2], strides=[2, 2],
             storage_order=1)
    model = _model([node], [_vi("x", [1, 1, 5, 5])], [_vi("y", [1, 1, 2, 2]), _vi("z", [1, 1, 2, 2], TensorProto.INT64)],
                   [])
    error = _refused(model, {})
    message = str(error)
    assert error.operators == ("MaxPool",)
    assert "node '/features/pool_2' (MaxPool; inputs: 'x' float32[1, 1, 5, 5])" in message, message
    assert "failed to lower to StableHLO" in message
    assert "!torch.vtensor" not in message


def test_mlir_types_are_written_in_onnx_terms() -> None:
    text = "operand #0 must be !torch.vtensor<[],f32>, got !torch.vtensor<[2,?,4],si64> or !torch.vtensor<*,f16>"
    assert prepass.mlir_types_in_onnx_terms(text, any_shapeless=True) == (
        "operand #0 must be f32 (shape unknown, or a scalar), got si64[2, ?, 4] or f16 (shape unknown)")
    assert prepass.mlir_types_in_onnx_terms("!torch.vtensor<[],f32>", any_shapeless=False) == "f32 scalar"


def test_node_descriptions_use_the_models_names_and_inferred_shapes() -> None:
    model = _fixed(attention_block(), {"x": [2, 5, 8]})
    shapes = prepass.shapes_by_name(model)
    merge = next(node for node in model.graph.node if node.name == "/attn/Reshape_merge")
    described = prepass.describe_node(merge, merge.name, shapes)
    # The Reshape's data input has no static shape before folding: said so, not as a scalar.
    assert described.startswith("node '/attn/Reshape_merge' (Reshape; inputs: 'a1' float32[")
    assert "'merge' int64[3]" in described
    assert shapes["x"] == "float32[2, 5, 8]" and shapes["Wq"] == "float32[8, 8]"
    unnamed = helper.make_node("Relu", ["nowhere"], ["r"])
    assert prepass.describe_node(unnamed, "", shapes) == "node (unnamed) (Relu; inputs: 'nowhere' (shape unknown))"


@needs_both
def test_fallback_names_the_plugin_once_with_its_device_count() -> None:
    model = _single("LpPool", [_vi("x", [1, 1, 4, 4, 4])], [_vi("y", [1, 1, 3, 3, 3])], kernel_shape=[2, 2, 2], p=3)
    tpu_count = len([d for d in nx_hal.devices() if d.plugin == "tpu"])
    nx_hal.configure({"prefer": [TPU, NPU]})
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exe, report = nx_hal.compile_anywhere(model, "onnx", cache=False)
    finally:
        nx_hal.configure()
    assert report.chosen is not None and report.chosen.plugin == "npu"
    lines = [s for s in report.skipped if "cannot compile" in s.reason]
    assert len(lines) == 1, report.skipped
    reason = lines[0].reason
    if tpu_count > 1:
        assert reason.startswith(f"tpu ({tpu_count} devices: tpu:cpu:0, tpu:cpu:1")
    assert reason.count("LpPool refused") == 1
    fallbacks = [w for w in caught if issubclass(w.category, nx_hal.FallbackWarning)]
    assert len(fallbacks) == 1
    text = str(fallbacks[0].message)
    assert text.startswith(f"nx_hal fell back to {report.chosen.selector} ")
    assert text.count("cannot compile this program") == 1
    # And the device it fell back to computes LpPool right.
    x = _RNG.standard_normal((1, 1, 4, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0].to_numpy(), _oracle(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
