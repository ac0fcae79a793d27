"""ONNX → ONNX rewrites (nx_hal.onnx.rewrites) of LSTM, GRU, RNN, Resize,
If and QuantizeLinear / DequantizeLinear, checked two ways:

- the rewritten model run by onnxruntime against the original run by
  onnxruntime (random inputs, many attribute combinations), and against the
  expected outputs of the ONNX node tests of those operators;
- end to end on XLA CPU (tpu:cpu): the rewritten model converted to
  StableHLO, compiled and run, against onnxruntime on the original.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the oracle)")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from nx_hal.onnx import conformance as oc  # noqa: E402
from nx_hal.onnx import rewrites  # noqa: E402
from nx_hal.onnx.convert import ConversionError  # noqa: E402
from tests.rewrite_checks import assert_refused, assert_rewritten_same, ops, ort_run  # noqa: E402

_RNG = np.random.default_rng(7)
FAMILIES = ("LSTM", "GRU", "RNN", "Resize", "If", "QuantizeLinear", "DequantizeLinear")

# ---------------------------------------------------------------- helpers


def _vi(name: str, shape: list[int] | None, dtype: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, dtype, shape)


def _init(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: Sequence[Any] = (), *,
           opset: int = 21) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


_run = ort_run
_ops = ops


def _assert_same(model: Any, feeds: dict[str, np.ndarray], *, rtol: float = 1e-5, atol: float = 1e-6,
                 want: list[Any] | None = None) -> Any:
    """Rewrites ``model``: no rewritten family is left and onnxruntime (or ``want``) agrees."""
    return assert_rewritten_same(model, feeds, FAMILIES, rtol=rtol, atol=atol, want=want)


def _refused(model: Any, *words: str, reason: str = "unsupported-operator") -> ConversionError:
    error: ConversionError = assert_refused(model, *words, reason=reason)
    return error


# ---------------------------------------------------------------- the entry point


def test_a_model_without_those_operators_is_returned_as_it_is() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    before = model.SerializeToString()
    assert rewrites.apply(model) is model
    assert model.SerializeToString() == before
    assert rewrites.rewritten_ops(model) == []


def test_apply_leaves_its_input_alone() -> None:
    model = _recurrent("GRU", "bidirectional")
    before = model.SerializeToString()
    rewritten = rewrites.apply(model)
    assert model.SerializeToString() == before
    assert rewritten is not model and "GRU" in _ops(model) and "GRU" not in _ops(rewritten)
    assert rewrites.rewritten_ops(model) == ["GRU"]


def test_apply_takes_only_a_model() -> None:
    with pytest.raises(ConversionError, match="takes an onnx.ModelProto, got bytes") as err:
        rewrites.apply(b"not a model")  # type: ignore[arg-type]
    assert err.value.reason == "malformed"


def test_every_intermediate_has_a_static_shape() -> None:
    """The lowering needs a shape on every value: apply infers them again."""
    rewritten = rewrites.apply(_recurrent("LSTM", "bidirectional"))
    known = {v.name: v for v in (*rewritten.graph.value_info, *rewritten.graph.output)}
    inits = {i.name for i in rewritten.graph.initializer}
    for node in rewritten.graph.node:
        for name in node.output:
            assert name in known or name in inits, name
            dims = known[name].type.tensor_type.shape.dim
            assert all(d.HasField("dim_value") for d in dims), name


def test_added_constants_nobody_reads_are_dropped() -> None:
    rewritten = rewrites.apply(_recurrent("LSTM", "forward", initial=True))
    used = {i for n in rewritten.graph.node for i in n.input}
    assert all(init.name in used for init in rewritten.graph.initializer)


# ---------------------------------------------------------------- LSTM, GRU, RNN

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _recurrent(kind: str, direction: str, *, layout: int = 0, bias: bool = True, initial: bool = False,
               peepholes: bool = False, seq: int = 4, batch: int = 2, size: int = 3, hidden: int = 5,
               weights_as_inputs: bool = False, values: dict[str, np.ndarray] | None = None, **attrs: Any) -> Any:
    """A model of one recurrent node; W, R, B are initializers (as torch
    exports them) unless ``weights_as_inputs``; initial states are inputs."""
    dirs = 2 if direction == "bidirectional" else 1
    g = _GATES[kind]
    x_shape = [batch, seq, size] if layout else [seq, batch, size]
    state_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    values = values or {"W": _RNG.standard_normal((dirs, g * hidden, size)).astype(np.float32) * 0.5,
              "R": _RNG.standard_normal((dirs, g * hidden, hidden)).astype(np.float32) * 0.5,
              "B": _RNG.standard_normal((dirs, 2 * g * hidden)).astype(np.float32) * 0.5}
    names = ["X", "W", "R", "B" if bias else "", "", "h0" if initial else ""]
    inputs = [_vi("X", x_shape)]
    if kind == "LSTM":
        names += ["c0" if initial else "", "P" if peepholes else ""]
        values.setdefault("P", _RNG.standard_normal((dirs, 3 * hidden)).astype(np.float32) * 0.5)
    if initial:
        inputs += [_vi("h0", state_shape)] + ([_vi("c0", state_shape)] if kind == "LSTM" else [])
    used = [n for n in ("W", "R", "B", "P") if n in names]
    if weights_as_inputs:
        inputs += [_vi(n, list(values[n].shape)) for n in used]
    inits = [] if weights_as_inputs else [_init(n, values[n]) for n in used]
    outs = ["Y", "Y_h", "Y_c"][:3 if kind == "LSTM" else 2]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(kind, names, outs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    outputs = [_vi("Y", y_shape)] + [_vi(n, state_shape) for n in outs[1:]]
    model = _model([node], inputs, outputs, inits)
    model.doc_string = "weights: " + ", ".join(values)
    return model


def _weights(model: Any) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def _feeds(model: Any) -> dict[str, np.ndarray]:
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in inits:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = _RNG.standard_normal(shape).astype(np.float32)
    return feeds


_RECURRENT = [
    (kind, direction, layout, bias, initial)
    for kind in ("LSTM", "GRU", "RNN")
    for direction in ("forward", "reverse", "bidirectional")
    for layout, bias, initial in ((0, True, False), (0, False, True), (1, True, True))
]


@pytest.mark.parametrize(("kind", "direction", "layout", "bias", "initial"), _RECURRENT)
def test_recurrent_matches_onnxruntime(kind: str, direction: str, layout: int, bias: bool, initial: bool) -> None:
    model = _recurrent(kind, direction, layout=layout, bias=bias, initial=initial)
    if layout == 0:
        rewritten = _assert_same(model, _feeds(model))
        assert {"MatMul", "Gather"} <= _ops(rewritten)
        return
    # onnxruntime runs no layout=1 (batch first) recurrent op: the oracle is
    # the same weights in layout 0, inputs and outputs transposed around it.
    time_major = _recurrent(kind, direction, layout=0, bias=bias, initial=initial, values=_weights(model))
    feeds = _feeds(model)
    want = _run(time_major, {k: v.transpose(1, 0, 2) for k, v in feeds.items()})
    got = _run(rewrites.apply(model), feeds)
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(g, w.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset(direction: str, linear_before_reset: int) -> None:
    model = _recurrent("GRU", direction, initial=True, linear_before_reset=linear_before_reset)
    _assert_same(model, _feeds(model))


def test_lstm_peepholes_and_clip() -> None:
    model = _recurrent("LSTM", "bidirectional", initial=True, peepholes=True, clip=0.7)
    _assert_same(model, _feeds(model))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_activations(kind: str) -> None:
    per = {"LSTM": ["Sigmoid", "Relu", "Softsign"], "GRU": ["Softsign", "Relu"], "RNN": ["Relu"]}[kind]
    other = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}[kind]
    model = _recurrent(kind, "bidirectional", activations=per + other)
    _assert_same(model, _feeds(model))


def test_weights_that_are_graph_inputs() -> None:
    model = _recurrent("LSTM", "bidirectional", weights_as_inputs=True, initial=True)
    feeds = _feeds(model)
    _assert_same(model, feeds)


def test_sequence_lens_full_length_is_accepted() -> None:
    model = _recurrent("RNN", "forward")
    node = model.graph.node[0]
    node.input[:] = [*node.input[:4], "lens"][:4] + ["lens"]
    model.graph.initializer.append(_init("lens", np.array([4, 4], np.int32)))
    _assert_same(model, _feeds(model))


@pytest.mark.parametrize(("change", "words"), [
    ({"input_forget": 1}, ["input_forget"]),
    ({"activation_alpha": [0.5]}, ["activation_alpha"]),
    ({"activations": ["Sigmoid", "Tanh", "HardSigmoid"]}, ["HardSigmoid"]),
])
def test_what_is_not_covered_is_refused_by_name(change: dict[str, Any], words: list[str]) -> None:
    model = _recurrent("LSTM", "forward")
    model.graph.node[0].name = "encoder/lstm0"
    model.graph.node[0].attribute.extend(helper.make_attribute(k, v) for k, v in change.items())
    error = _refused(model, "LSTM node 'encoder/lstm0'", *words,
                     "(inputs: X float[4, 2, 3], W float[1, 20, 3] (constant), R float[1, 20, 5] (constant)")
    assert error.operators == ("LSTM",)


def test_sequences_shorter_than_the_input_are_refused() -> None:
    model = _recurrent("GRU", "forward")
    node = model.graph.node[0]
    node.input[:] = [*node.input[:4], "lens"]
    model.graph.initializer.append(_init("lens", np.array([4, 2], np.int32)))
    _refused(model, "sequence_lens")


def test_dynamic_shapes_are_refused() -> None:
    model = _recurrent("RNN", "forward")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    del model.graph.value_info[:]
    model.graph.output[0].type.tensor_type.ClearField("shape")
    _refused(model, "RNN node", "the shape of 'X' is not static", "(inputs: X float[T, 2, 3]",
             reason="dynamic-shape")


# ---------------------------------------------------------------- Resize

_NEAREST = [
    ("asymmetric", "floor"),  # torch's nearest
    ("half_pixel", "round_prefer_floor"),
    ("pytorch_half_pixel", "round_prefer_floor"),
    ("half_pixel", "round_prefer_ceil"),
    ("align_corners", "round_prefer_floor"),
    ("asymmetric", "ceil"),
    ("half_pixel_symmetric", "floor"),
]
_LINEAR_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
_SCALES = [(2.0, 2.0), (0.5, 0.5), (1.7, 0.6), (3.0, 1.0)]


def _resize(attrs: dict[str, Any], *, scales: tuple[float, ...] | None = None, sizes: tuple[int, ...] | None = None,
            shape: tuple[int, ...] = (1, 2, 5, 7), dtype: int = TensorProto.FLOAT, roi: list[float] | None = None,
            axes: list[int] | None = None) -> Any:
    inits, names = [], ["X", "", "", ""]
    if roi is not None:
        inits.append(_init("roi", np.array(roi, np.float32)))
        names[1] = "roi"
    if scales is not None:
        full = scales if axes is not None else (1.0,) * (len(shape) - len(scales)) + scales
        inits.append(_init("scales", np.array(full, np.float32)))
        names[2] = "scales"
    if sizes is not None:
        full_sizes = sizes if axes is not None else tuple(shape[:len(shape) - len(sizes)]) + sizes
        inits.append(_init("sizes", np.array(full_sizes, np.int64)))
        names[3] = "sizes"
    while not names[-1]:
        names.pop()
    extra: dict[str, Any] = {"axes": axes} if axes is not None else {}
    node = helper.make_node("Resize", names, ["Y"], name="up1", **attrs, **extra)
    return _model([node], [_vi("X", list(shape), dtype)], [_vi("Y", None, dtype)], inits)


def _image(shape: tuple[int, ...] = (1, 2, 5, 7)) -> dict[str, np.ndarray]:
    return {"X": _RNG.standard_normal(shape).astype(np.float32)}


def _ambiguous(ctm: str, scales: tuple[float, ...], mode: str = "nearest") -> bool:
    """Modes that divide by the output length, where it is not scale * length
    (half_pixel_symmetric only where the reference gives the coefficients)."""
    lengths = [float(np.float32(s)) * n for s, n in zip(scales, (5, 7), strict=True)]
    modes = ("align_corners", "half_pixel_symmetric") if mode == "cubic" else ("align_corners",)
    return ctm in modes and any(x != int(x) for x in lengths)


@pytest.mark.parametrize(("ctm", "nearest_mode"), _NEAREST)
@pytest.mark.parametrize("scales", _SCALES)
def test_resize_nearest_matches_onnxruntime(ctm: str, nearest_mode: str, scales: tuple[float, float]) -> None:
    model = _resize({"mode": "nearest", "coordinate_transformation_mode": ctm, "nearest_mode": nearest_mode},
                    scales=scales)
    if _ambiguous(ctm, scales):
        _refused(model, "Resize node 'up1'", ctm, "disagree")
        return
    rewritten = _assert_same(model, _image(), rtol=0, atol=0)
    assert "Gather" in _ops(rewritten) and "MatMul" not in _ops(rewritten)


@pytest.mark.parametrize("ctm", _LINEAR_MODES)
@pytest.mark.parametrize("scales", _SCALES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_linear_and_cubic_match_onnxruntime(mode: str, ctm: str, scales: tuple[float, float]) -> None:
    model = _resize({"mode": mode, "coordinate_transformation_mode": ctm}, scales=scales)
    if _ambiguous(ctm, scales, mode):
        _refused(model, "Resize node 'up1'", ctm, "disagree")
        return
    # The coefficients come in float64 from ONNX's reference; onnxruntime's are float32.
    rewritten = _assert_same(model, _image(), rtol=1e-4, atol=1e-5)
    assert "MatMul" in _ops(rewritten)


@pytest.mark.parametrize("sizes", [(10, 14), (3, 4), (8, 3)])
@pytest.mark.parametrize("attrs", [
    {"mode": "nearest"},
    {"mode": "nearest", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "antialias": 1},
    {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    {"mode": "cubic", "antialias": 1},
])
def test_resize_to_sizes(attrs: dict[str, Any], sizes: tuple[int, int]) -> None:
    model = _resize(attrs, sizes=sizes)
    _assert_same(model, _image(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sizes", [(10, 14), (3, 4), (8, 3)])
@pytest.mark.parametrize("attrs", [
    {"mode": "nearest", "keep_aspect_ratio_policy": "not_larger"},
    {"mode": "nearest", "keep_aspect_ratio_policy": "not_smaller"},
    {"mode": "linear", "keep_aspect_ratio_policy": "not_smaller"},
    {"mode": "linear", "keep_aspect_ratio_policy": "not_larger"},
])
def test_resize_keeping_the_aspect_ratio(attrs: dict[str, Any], sizes: tuple[int, int]) -> None:
    model = _resize(attrs, sizes=sizes, axes=[2, 3])
    _assert_same(model, _image(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_crop_and_resize_extrapolates(mode: str) -> None:
    model = _resize({"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                     "extrapolation_value": 9.5}, sizes=(6, 6),
                    roi=[0, 0, -0.25, 0.3, 1, 1, 0.85, 1.4])
    rewritten = _assert_same(model, _image())
    assert "Where" in _ops(rewritten)
    assert np.count_nonzero(_run(rewritten, _image())[0] == np.float32(9.5)) > 0


def test_resize_along_any_axis_and_rank() -> None:
    """Axes that are neither of the last two go through a Transpose."""
    model = _resize({"mode": "linear"}, scales=(1.0, 1.5, 2.0, 1.0), shape=(2, 4, 5, 3))
    rewritten = _assert_same(model, _image((2, 4, 5, 3)))
    assert "Transpose" in _ops(rewritten)
    model = _resize({"mode": "nearest"}, scales=(1.5, 0.5), axes=[1, 3], shape=(2, 3, 4, 6))
    _assert_same(model, _image((2, 3, 4, 6)), rtol=0, atol=0)
    model = _resize({"mode": "nearest"}, scales=(2.0, 1.0, 0.5), shape=(4, 3, 6))
    _assert_same(model, _image((4, 3, 6)), rtol=0, atol=0)


def test_resize_nearest_of_integers() -> None:
    model = _resize({"mode": "nearest"}, scales=(2.0, 1.5), dtype=TensorProto.UINT8)
    image = {"X": _RNG.integers(0, 255, (1, 2, 5, 7)).astype(np.uint8)}
    _assert_same(model, image, rtol=0, atol=0)


def test_resize_needs_constant_scales() -> None:
    node = helper.make_node("Resize", ["X", "", "scales"], ["Y"], name="up2")
    model = _model([node], [_vi("X", [1, 1, 2, 2]), _vi("scales", [4])], [_vi("Y", None)])
    _refused(model, "Resize node 'up2'", "scales", "not a constant")


def test_resize_linear_of_integers_is_refused() -> None:
    _refused(_resize({"mode": "linear"}, scales=(2.0, 2.0), dtype=TensorProto.UINT8), "linear", "uint8")


# ---------------------------------------------------------------- If


def _branch(name: str, op: str) -> Any:
    return helper.make_graph([helper.make_node(op, ["x"], ["t"]), helper.make_node("Add", ["t", "k"], [name])],
                             name, [], [_vi(name, [3])], [_init("k", np.array([1, 2, 3], np.float32))])


@pytest.mark.parametrize("condition", [True, False])
@pytest.mark.parametrize("as_constant_node", [True, False])
def test_if_with_a_constant_condition_is_inlined(condition: bool, as_constant_node: bool) -> None:
    """The branch reads the main graph's x and has an initializer of its own."""
    nodes = [helper.make_node("Neg", ["x"], ["u"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=_branch("a", "Abs"),
                              else_branch=_branch("b", "Exp"))]
    inits = [_init("k0", np.array([5, 5, 5], np.float32))]
    if as_constant_node:
        nodes.insert(0, helper.make_node("Constant", [], ["cond"], value=_init("c", np.array(condition))))
    else:
        inits.append(_init("cond", np.array(condition)))
    nodes.append(helper.make_node("Add", ["y", "u"], ["z"]))
    nodes.append(helper.make_node("Add", ["z", "k0"], ["w"]))
    model = _model(nodes, [_vi("x", [3])], [_vi("w", [3])], inits)
    rewritten = _assert_same(model, {"x": np.array([-1.5, 0.25, 2.0], np.float32)})
    assert "If" not in _ops(rewritten) and ("Abs" if condition else "Exp") in _ops(rewritten)


def test_two_inlined_branches_with_the_same_inner_names() -> None:
    """Both Ifs' branches define 't' and 'k': the second is renamed. (ONNX's
    reference runs the original; onnxruntime rejects the name reuse.)"""
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node("If", ["c1"], ["y1"], then_branch=_branch("a", "Abs"), else_branch=_branch("b", "Exp")),
             helper.make_node("If", ["c2"], ["y2"], then_branch=_branch("d", "Sin"), else_branch=_branch("e", "Cos")),
             helper.make_node("Add", ["y1", "y2"], ["y"])]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])],
                   [_init("c1", np.array(True)), _init("c2", np.array(False))])
    rewritten = rewrites.apply(model)
    onnx.checker.check_model(rewritten, full_check=True)
    x = np.array([-1.5, 0.25, 2.0], np.float32)
    reference: Any = ReferenceEvaluator(model).run(None, {"x": x})
    got = _run(rewritten, {"x": x})[0]
    np.testing.assert_allclose(got, reference[0], rtol=1e-6)
    np.testing.assert_allclose(got, np.abs(x) + np.cos(x) + 2 * np.array([1, 2, 3], np.float32), rtol=1e-6)


def test_nested_constant_ifs_are_inlined() -> None:
    inner = helper.make_node("If", ["c2"], ["r"], then_branch=_branch("p", "Sin"), else_branch=_branch("q", "Cos"))
    then = helper.make_graph([inner, helper.make_node("Identity", ["r"], ["o"])], "then", [], [_vi("o", [3])])
    model = _model([helper.make_node("If", ["c1"], ["y"], then_branch=then, else_branch=_branch("e", "Abs"))],
                   [_vi("x", [3])], [_vi("y", [3])], [_init("c1", np.array(True)), _init("c2", np.array(False))])
    rewritten = _assert_same(model, {"x": np.array([-1.5, 0.25, 2.0], np.float32)})
    assert "Cos" in _ops(rewritten) and "If" not in _ops(rewritten)


def test_if_on_a_computed_condition_is_refused() -> None:
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], name="branchy", then_branch=_branch("a", "Abs"),
                              else_branch=_branch("b", "Exp"))]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])], [_init("zero", np.float32(0))])
    _refused(model, "If node 'branchy'", "condition 'cond' is not a constant")


# ---------------------------------------------------------------- QuantizeLinear, DequantizeLinear


def _dequantize(dtype: Any, scale: Any, zero: np.ndarray | None, shape: tuple[int, ...], **attrs: Any) -> Any:
    inits = [_init("s", scale)] + ([_init("z", zero.astype(dtype))] if zero is not None else [])
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"] if zero is not None else ["x", "s"], ["y"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return _model([node], [_vi("x", list(shape), elem)], [_vi("y", list(shape))], inits)


def _quantize(dtype: Any, scale: Any, zero: np.ndarray | None, shape: tuple[int, ...], **attrs: Any) -> Any:
    inits = [_init("s", scale)] + ([_init("z", zero.astype(dtype))] if zero is not None else [])
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"] if zero is not None else ["x", "s"], ["y"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return _model([node], [_vi("x", list(shape))], [_vi("y", list(shape), elem)], inits)


_GRANULARITY: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    ("tensor", {}, ()),
    ("axis 1", {"axis": 1}, (4,)),
    ("axis 0", {"axis": 0}, (3,)),
    ("axis -1", {"axis": -1}, (6,)),
    ("blocked", {"axis": 2, "block_size": 4}, (3, 4, 2)),
]


@pytest.mark.parametrize(("label", "attrs", "scale_shape"), _GRANULARITY, ids=[g[0] for g in _GRANULARITY])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("zero", [True, False])
def test_dequantize_linear_matches_onnxruntime(label: str, attrs: dict[str, Any], scale_shape: tuple[int, ...],
                                               dtype: Any, zero: bool) -> None:
    info = np.iinfo(dtype)
    scale = (_RNG.random(scale_shape) * 0.1 + 0.01).astype(np.float32)
    zp = _RNG.integers(info.min // 4, info.max // 4, scale_shape) if zero else None
    model = _dequantize(dtype, scale, zp, (3, 4, 6), **attrs)
    _assert_same(model, {"x": _RNG.integers(info.min, info.max, (3, 4, 6), endpoint=True).astype(dtype)})


def test_dequantize_linear_of_int32() -> None:
    model = _dequantize(np.int32, np.float32(0.003), None, (5,))
    _assert_same(model, {"x": np.array([-(2 ** 20), -7, 0, 9, 2 ** 20], np.int32)})


@pytest.mark.parametrize(("label", "attrs", "scale_shape"), _GRANULARITY, ids=[g[0] for g in _GRANULARITY])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("zero", [True, False])
def test_quantize_linear_matches_onnxruntime(label: str, attrs: dict[str, Any], scale_shape: tuple[int, ...],
                                             dtype: Any, zero: bool) -> None:
    """Values on the .5 ties (round half to even) and beyond the range
    (saturation); without a zero point the type is output_dtype's."""
    if not zero:
        attrs = {**attrs, "output_dtype": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))}
    info = np.iinfo(dtype)
    scale = np.full(scale_shape, 0.5, np.float32) if scale_shape else np.float32(0.5)
    zp = _RNG.integers(-3, 3, scale_shape) + (0 if info.min < 0 else 10) if zero else None
    ties = (np.arange(-36, 36).reshape(3, 4, 6) + 0.5).astype(np.float32) * 0.5
    wide = np.linspace(info.min * 0.6, info.max * 0.6, 72, dtype=np.float32).reshape(3, 4, 6)
    model = _quantize(dtype, scale, zp, (3, 4, 6), **attrs)
    for x in (ties, wide, _RNG.standard_normal((3, 4, 6)).astype(np.float32) * 40):
        _assert_same(model, {"x": x}, rtol=0, atol=0)


def test_quantize_to_float8_is_refused_by_name() -> None:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q8")
    zero = numpy_helper.from_array(np.zeros((), np.float32), "z")
    zero.data_type = TensorProto.FLOAT8E4M3FN
    zero.ClearField("float_data")
    zero.raw_data = b"\x00"
    model = _model([node], [_vi("x", [4])], [_vi("y", [4], TensorProto.FLOAT8E4M3FN)],
                   [_init("s", np.float32(0.1)), zero])
    _refused(model, "QuantizeLinear node 'q8'", "float8e4m3fn")


def qdq_model(tmp_path: Path) -> Any:
    """A QDQ int8 Conv → Relu → MatMul as onnxruntime's quantize_static writes it."""
    quantization = pytest.importorskip("onnxruntime.quantization", reason="needs onnxruntime.quantization")
    from onnxruntime.quantization import CalibrationDataReader

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["y"])]
    inits = [_init("w", _RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3),
             _init("b", _RNG.standard_normal(4).astype(np.float32) * 0.1),
             _init("shape", np.array([2, 64], np.int64)),
             _init("m", _RNG.standard_normal((64, 5)).astype(np.float32) * 0.2)]
    source, quantized = tmp_path / "f32.onnx", tmp_path / "int8.onnx"
    onnx.save(_model(nodes, [_vi("x", [2, 3, 4, 4])], [_vi("y", [2, 5])], inits, opset=17), str(source))

    class Reader(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no type information
        def __init__(self) -> None:
            self.batches = iter([{"x": _RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantization.quantize_static(str(source), str(quantized), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8, per_channel=True)
    model = onnx.load(str(quantized))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def test_a_quantize_static_model_runs_in_float(tmp_path: Path) -> None:
    model = qdq_model(tmp_path)
    assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(model)
    feeds = {"x": _RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)}
    _assert_same(model, feeds, rtol=1e-5, atol=1e-5, want=_qdq_reference(model, feeds))


def _qdq_reference(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX's reference evaluator on a QDQ model, exact by definition:
    onnxruntime's own int8 kernels are not one on x86 CPUs without VNNI,
    where its u8s8 products saturate (they moved outputs by up to three
    quantization steps). Rounding to int8 in both, the outputs agree to the
    float error of a tie falling the other way."""
    from onnx.reference import ReferenceEvaluator

    # Its QuantizeLinear/DequantizeLinear start at opset 19, whose int8
    # semantics are those of 13 (19 added float8 types): a copy says 19.
    newer = onnx.ModelProto()
    newer.CopyFrom(model)
    for entry in newer.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = max(entry.version, 19)
    return list(ReferenceEvaluator(newer).run(None, feeds))


# ---------------------------------------------------------------- onnxruntime's fused operators


def _fused(op: str, inputs: list[str], extra: dict[str, np.ndarray], outputs: Sequence[str] = ("y",),
           opset: int = 17, **attrs: Any) -> Any:
    node = helper.make_node(op, inputs, list(outputs), domain="com.microsoft", name="fused1", **attrs)
    graph = helper.make_graph([node], "g", [_vi("x", [2, 5, 8])], [_vi(o, None) for o in outputs if o],
                              [_init(k, v) for k, v in extra.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def _vector(seed: int, size: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(size).astype(np.float32)


_FUSED_CASES: dict[str, Any] = {
    "Gelu": lambda: _fused("Gelu", ["x"], {}),
    "BiasGelu": lambda: _fused("BiasGelu", ["x", "b"], {"b": _vector(1)}),
    "FastGelu": lambda: _fused("FastGelu", ["x"], {}),
    "FastGelu-bias": lambda: _fused("FastGelu", ["x", "b"], {"b": _vector(2)}),
    "QuickGelu": lambda: _fused("QuickGelu", ["x"], {}, alpha=1.5),
    "SkipLayerNormalization": lambda: _fused(
        "SkipLayerNormalization", ["x", "s", "g", "b", "bias"],
        {"s": _RNG.standard_normal((2, 5, 8)).astype(np.float32), "g": _vector(3), "b": _vector(4),
         "bias": _vector(5)}, outputs=("y", "", "", "sum"), epsilon=1e-5),
    "SkipLayerNormalization-defaults": lambda: _fused(
        "SkipLayerNormalization", ["x", "s", "g"], {"s": _RNG.standard_normal((2, 5, 8)).astype(np.float32),
                                                     "g": _vector(6)}),
    "SkipSimplifiedLayerNormalization": lambda: _fused(
        "SkipSimplifiedLayerNormalization", ["x", "s", "g", "bias"],
        {"s": _RNG.standard_normal((2, 5, 8)).astype(np.float32), "g": _vector(7), "bias": _vector(8)},
        outputs=("y", "", "", "sum"), epsilon=1e-6),
    "SkipSimplifiedLayerNormalization-opset18": lambda: _fused(
        "SkipSimplifiedLayerNormalization", ["x", "s", "g"],
        {"s": _RNG.standard_normal((2, 5, 8)).astype(np.float32), "g": _vector(9)}, opset=18),
}


@pytest.mark.parametrize("name", sorted(_FUSED_CASES))
def test_fused_operators_match_onnxruntime(name: str) -> None:
    model = _FUSED_CASES[name]()
    rewritten = _assert_same(model, {"x": _RNG.standard_normal((2, 5, 8)).astype(np.float32)})
    assert all(n.domain in ("", "ai.onnx") for n in rewritten.graph.node)


def _attention(mask: bool = False, sizes: tuple[int, int, int] = (16, 16, 16), **attrs: Any) -> Any:
    width = sum(sizes)
    inits = [_init("w", _RNG.standard_normal((16, width)).astype(np.float32) * 0.3),
             _init("b", _RNG.standard_normal(width).astype(np.float32) * 0.1)]
    if sizes[2] != 16 or len(set(sizes)) > 1:
        attrs["qkv_hidden_sizes"] = list(sizes)
    node = helper.make_node("Attention", ["x", "w", "b", "mask" if mask else ""], ["y"], domain="com.microsoft",
                            name="attn", num_heads=4, **attrs)
    inputs = [_vi("x", [2, 5, 16])] + ([_vi("mask", [2, 5], TensorProto.INT32)] if mask else [])
    graph = helper.make_graph([node], "g", inputs, [_vi("y", None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


_ATTENTION: dict[str, Any] = {
    "plain": lambda: _attention(),
    "key-mask": lambda: _attention(mask=True),
    "causal": lambda: _attention(unidirectional=1),
    "causal-key-mask-scale": lambda: _attention(mask=True, unidirectional=1, scale=0.3, mask_filter_value=-1e4),
    "qkv-sizes": lambda: _attention(sizes=(16, 16, 8)),
}


def _attention_feeds(model: Any) -> dict[str, np.ndarray]:
    feeds = {"x": _RNG.standard_normal((2, 5, 16)).astype(np.float32)}
    if any(v.name == "mask" for v in model.graph.input):
        feeds["mask"] = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    return feeds


@pytest.mark.parametrize("name", sorted(_ATTENTION))
def test_attention_matches_onnxruntime(name: str) -> None:
    model = _ATTENTION[name]()
    rewritten = _assert_same(model, _attention_feeds(model))
    assert "Softmax" in _ops(rewritten)


def test_attention_with_a_cache_is_refused() -> None:
    model = _attention()
    model.graph.node[0].output.append("present")
    _refused(model, "Attention node 'attn'", "present")


def test_fused_operators_in_a_chain() -> None:
    """Shape inference knows no fused operator: the Attention after a
    SkipLayerNormalization gets its input's shape once that is rewritten."""
    attention = _attention()
    inits = list(attention.graph.initializer) + [
        _init("skip", _RNG.standard_normal((2, 5, 16)).astype(np.float32)), _init("gamma", np.ones(16, np.float32))]
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["n"], domain="com.microsoft"),
             helper.make_node("Attention", ["n", "w", "b"], ["a"], domain="com.microsoft", num_heads=4),
             helper.make_node("FastGelu", ["a"], ["y"], domain="com.microsoft")]
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 5, 16])], [_vi("y", [2, 5, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    assert not any(v.name == "n" for v in model.graph.value_info)  # unknown to inference
    _assert_same(model, {"x": _RNG.standard_normal((2, 5, 16)).astype(np.float32)})


def test_fused_statistics_outputs_are_refused() -> None:
    model = _fused("SkipLayerNormalization", ["x", "s", "g"],
                   {"s": np.zeros((2, 5, 8), np.float32), "g": _vector(3)}, outputs=("y", "mean"))
    _refused(model, "SkipLayerNormalization node 'fused1'", "mean")


# ---------------------------------------------------------------- the ONNX node tests


def node_cases() -> list[oc.Case]:
    return [c for c in oc.collect(["node"]) if c.op_types and c.op_types[0] in FAMILIES]


def prepared(case: oc.Case) -> oc.Case:
    """The case as the converter would see it: input shapes fixed from the
    data, opset 17 or newer, shapes inferred, then rewritten. Inputs that a
    static-shape program cannot take as data (Resize's roi, scales and sizes,
    If's condition, sequence_lens) become initializers holding the test's
    values, as shape folding makes them in exported models."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inits = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    kept, index = [], []
    for k, (value, data) in enumerate(zip(inputs, case.data_sets[0][0], strict=False)):
        data = oc._as_array(data)
        if (case.op_types[0] == "Resize" and k > 0) or case.op_types[0] == "If" or value.name == "sequence_lens":
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(data), value.name))
            continue
        kept.append(value)
        index.append(k)
        dims = value.type.tensor_type.shape
        del dims.dim[:]
        for size in np.shape(data):
            dims.dim.add().dim_value = size
    del model.graph.input[:]
    model.graph.input.extend(kept)
    if model.opset_import[0].version < 17:
        model = onnx.version_converter.convert_version(model, 17)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    model = rewrites.apply(model)
    data_sets = [([ins[k] for k in index], outs) for ins, outs in case.data_sets]
    return dataclasses.replace(case, model=model, data_sets=data_sets)


# Cases whose types nx_hal cannot carry (float8, int4, int2, float4) or whose
# outputs are sequences and optionals: refused or not run, by design.
_NOT_TENSORS = ("e4m3fn", "e5m2", "int4", "int2", "float4", "test_if_seq", "test_if_opt")
# align_corners by scales whose output length is not scale * length: the ONNX
# reference divides by the unrounded length, onnxruntime and torch by the
# length (onnxruntime fails these two node tests): refused as ambiguous.
_AMBIGUOUS = ("test_resize_downsample_scales_linear_align_corners",
              "test_resize_downsample_scales_cubic_align_corners")


def _ids(cases: list[oc.Case]) -> list[str]:
    return [c.name for c in cases]


_CASES = node_cases()


@pytest.mark.parametrize("case", _CASES, ids=_ids(_CASES))
def test_onnx_node_tests_on_onnxruntime(case: oc.Case) -> None:
    if any(word in case.name for word in _NOT_TENSORS):
        if "test_if" not in case.name:
            with pytest.raises(ConversionError, match="node"):
                prepared(case)
        return
    if case.name in _AMBIGUOUS:
        with pytest.raises(ConversionError, match="onnxruntime and the ONNX reference disagree"):
            prepared(case)
        return
    outcome = oc.run_onnxruntime(prepared(case))
    assert outcome.status == "pass", outcome.message


# ---------------------------------------------------------------- Conv larger than its input


def _conv(x: tuple[int, ...], w: tuple[int, ...], *, bias: bool = True, weights_input: bool = False,
          **attrs: Any) -> Any:
    rng = np.random.default_rng(11)
    inits = [] if weights_input else [_init("W", rng.standard_normal(w).astype(np.float32))]
    ins = [_vi("X", list(x))] + ([_vi("W", list(w))] if weights_input else [])
    names = ["X", "W"]
    if bias:
        inits.append(_init("B", rng.standard_normal(w[0]).astype(np.float32)))
        names.append("B")
    return _model([helper.make_node("Conv", names, ["Y"], **attrs)], ins, [_vi("Y", None)], inits)


_CONVS: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    # resnet18's last stage at 64x64 images: the XLA CPU case the rewrite is for.
    "3x3-over-2x2": ((1, 16, 2, 2), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "no-bias": ((2, 4, 2, 2), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "bias": False}),
    "strided": ((1, 4, 2, 3), (8, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "asymmetric-pads": ((1, 3, 2, 2), (5, 3, 3, 3), {"pads": [0, 1, 2, 1]}),
    "dilated": ((1, 3, 4, 4), (4, 3, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "grouped": ((1, 8, 2, 2), (12, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
    "depthwise": ((1, 6, 2, 2), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),
    "same-upper": ((1, 3, 2, 3), (4, 3, 3, 4), {"auto_pad": "SAME_UPPER"}),
    "same-lower-strided": ((1, 3, 3, 2), (4, 3, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    "1-d": ((2, 3, 2), (4, 3, 5), {"pads": [2, 2]}),
    "3-d": ((1, 2, 2, 2, 2), (3, 2, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
    "weights-as-input": ((1, 4, 2, 2), (4, 4, 3, 3), {"pads": [1, 1, 1, 1], "weights_input": True}),
}


@pytest.mark.parametrize("case", list(_CONVS))
def test_conv_larger_than_its_input_is_im2col(case: str) -> None:
    x, w, attrs = _CONVS[case]
    attrs = dict(attrs)
    model = _conv(x, w, bias=attrs.pop("bias", True), weights_input=attrs.pop("weights_input", False), **attrs)
    feeds = {"X": np.random.default_rng(12).standard_normal(x).astype(np.float32)}
    if case == "weights-as-input":
        feeds["W"] = np.random.default_rng(13).standard_normal(w).astype(np.float32)
    assert rewrites.rewritten_ops(model) == ["Conv"]
    rewritten = rewrites.apply(model)
    assert "Conv" not in _ops(rewritten) and "MatMul" in _ops(rewritten)
    want, got = _run(model, feeds), _run(rewritten, feeds)
    assert got[0].shape == want[0].shape
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x", "w"), [((1, 4, 8, 8), (4, 4, 3, 3)), ((1, 4, 3, 3), (4, 4, 3, 3))])
def test_conv_no_larger_than_its_input_is_left_alone(x: tuple[int, ...], w: tuple[int, ...]) -> None:
    model = _conv(x, w, pads=[1, 1, 1, 1])
    assert rewrites.rewritten_ops(model) == []
    assert rewrites.apply(model) is model


_DEPTHWISE: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    "3x3": ((2, 6, 9, 9), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),
    "strided-same": ((1, 8, 11, 10), (8, 1, 5, 5), {"auto_pad": "SAME_UPPER", "strides": [2, 2], "group": 8}),
    "dilated": ((1, 4, 12, 12), (4, 1, 3, 3), {"dilations": [2, 2], "group": 4, "bias": False}),
    "1-d": ((1, 5, 20), (5, 1, 3), {"pads": [1, 1], "group": 5}),
}


@pytest.mark.parametrize(("x", "w", "group"), [
    ((1, 8, 8, 8), (8, 4, 3, 3), 2),     # grouped, 4 channels a group
    ((1, 8, 8, 8), (16, 1, 3, 3), 8),    # depthwise with a multiplier: still one input channel a group
    ((1, 4, 8, 8), (4, 4, 3, 3), 1),     # dense
])
def test_other_convs_stay_convs_for_a_cpu(x: tuple[int, ...], w: tuple[int, ...], group: int) -> None:
    model = _conv(x, w, pads=[1, 1, 1, 1], group=group)
    expected = ["Conv"] if w[1] == 1 else []
    assert rewrites.rewritten_ops(model, "cpu") == expected
    if expected:
        np.testing.assert_allclose(_run(rewrites.apply(model, platform="cpu"), {"X": np.ones(x, np.float32)})[0],
                                   _run(model, {"X": np.ones(x, np.float32)})[0], rtol=1e-5, atol=1e-5)


def test_huge_depthwise_conv_stays_a_conv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gathered columns past the bound (taps x the output's elements) keep
    the Conv; the sum over taps gathers nothing, so that bound is not its."""
    from nx_hal.onnx.rewrites import conv

    model = _conv((1, 6, 9, 9), (12, 1, 3, 3), pads=[1, 1, 1, 1], group=6)  # a multiplier: gathered
    monkeypatch.setattr(conv, "_MAX_COLUMNS", 6 * 9 * 81 - 1)
    assert rewrites.rewritten_ops(model, "cpu") == []
    summed = _conv((1, 6, 9, 9), (6, 1, 3, 3), pads=[1, 1, 1, 1], group=6)
    assert rewrites.rewritten_ops(summed, "cpu") == ["Conv"]
    monkeypatch.setattr(conv, "_MAX_COLUMNS", 6 * 9 * 81)
    assert rewrites.rewritten_ops(model, "cpu") == ["Conv"]


def test_depthwise_kernel_past_the_most_taps_is_gathered() -> None:
    """A 6x6 depthwise kernel (36 taps, past _MAX_TAPS) takes the gather and
    the MatMul; a 5x5 one (25) the sum. Both compute onnxruntime's values."""
    from nx_hal.onnx.rewrites import conv

    assert 5 * 5 <= conv._MAX_TAPS < 6 * 6  # the two kernels below sit either side of the limit
    x = np.random.default_rng(22).standard_normal((1, 3, 12, 12)).astype(np.float32)
    for k, op in ((6, "MatMul"), (5, "Mul")):
        model = _conv((1, 3, 12, 12), (3, 1, k, k), pads=[3, 3, 2, 2], group=3)
        rewritten = rewrites.apply(model, platform="cpu")
        assert "Conv" not in _ops(rewritten) and op in _ops(rewritten)
        assert ("MatMul" in _ops(rewritten)) is (op == "MatMul")
        np.testing.assert_allclose(_run(rewritten, {"X": x})[0], _run(model, {"X": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_depthwise_conv_of_other_floats(elem: int) -> None:
    """f64 is summed over its taps like f32; f16 keeps the gathered MatMul
    (a sum of f16 products would round at every tap)."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(23)
    model = _model([helper.make_node("Conv", ["X", "W", "B"], ["Y"], group=4, pads=[1, 1, 1, 1])],
                   [_vi("X", [1, 4, 6, 6], elem)], [_vi("Y", None, elem)],
                   [_init("W", rng.standard_normal((4, 1, 3, 3)).astype(dtype)),
                    _init("B", rng.standard_normal(4).astype(dtype))])
    rewritten = rewrites.apply(model, platform="cpu")
    assert "Conv" not in _ops(rewritten)
    assert ("MatMul" in _ops(rewritten)) is (elem == TensorProto.FLOAT16)
    x = rng.standard_normal((1, 4, 6, 6)).astype(dtype)
    # onnxruntime has no f64 Conv: ONNX's reference runs the original.
    want = np.asarray(cast(list[Any], ReferenceEvaluator(model).run(None, {"X": x}))[0])
    # f16: each of the nine products and the sum may round (2**-11 each) on a
    # CPU whose MatMul accumulates in f16; the outputs are of order 3.
    tolerance = 1e-2 if elem == TensorProto.FLOAT16 else 1e-12
    np.testing.assert_allclose(_run(rewritten, {"X": x})[0], want, rtol=tolerance, atol=tolerance)


_VOLUMETRIC: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    # r3d_18's stem: a (3, 7, 7) kernel, spatial stride 2.
    "stem": ((1, 3, 4, 12, 12), (8, 3, 3, 7, 7), {"pads": [1, 3, 3, 1, 3, 3], "strides": [1, 2, 2]}),
    "3x3x3": ((2, 4, 3, 6, 5), (6, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
    "grouped-strided": ((1, 6, 5, 7, 7), (4, 3, 3, 3, 3), {"strides": [2, 2, 2], "group": 2, "bias": False}),
    "dilated": ((1, 2, 6, 6, 6), (3, 2, 2, 3, 3), {"pads": [0, 2, 2, 1, 2, 2], "dilations": [1, 2, 2]}),
    "same-upper": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 1, 2]}),
}


_CPU_ONLY = {**{f"depthwise-{k}": v for k, v in _DEPTHWISE.items()}, **{f"3d-{k}": v for k, v in _VOLUMETRIC.items()}}


@pytest.mark.parametrize("case", list(_CPU_ONLY))
def test_cpu_only_conv_is_rewritten(case: str) -> None:
    """Depthwise Convs (XLA CPU's grouped convolution is slow) and 3-D Convs (XLA
    CPU has no fast kernel for them; r3d_18: 46 ms, 24 ms rewritten, in one run):
    for platform "cpu" they become the sum over the kernel's taps (depthwise)
    or the gather and a MatMul (3-D), values as onnxruntime's; converting for
    any other platform (or none) keeps them."""
    x, w, attrs = _CPU_ONLY[case]
    attrs = dict(attrs)
    model = _conv(x, w, bias=attrs.pop("bias", True), **attrs)
    feeds = {"X": np.random.default_rng(21).standard_normal(x).astype(np.float32)}
    for platform in (None, "gpu", "tpu"):
        assert rewrites.rewritten_ops(model, platform) == []
        assert rewrites.apply(model, platform=platform) is model
    assert rewrites.rewritten_ops(model, "cpu") == ["Conv"]
    rewritten = rewrites.apply(model, platform="cpu")
    # A depthwise Conv is the sum over its taps (elementwise), a 3-D one the MatMul.
    assert "Conv" not in _ops(rewritten) and ("MatMul" in _ops(rewritten)) is case.startswith("3d-")
    want, got = _run(model, feeds), _run(rewritten, feeds)
    assert got[0].shape == want[0].shape
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", ["constant", "input", "none"])
def test_depthwise_conv_with_weights_as_inputs_is_summed(bias: str) -> None:
    """Weights (and a bias) given at run time are sliced per tap in the graph."""
    rng = np.random.default_rng(24)
    names = ["X", "W"] + (["B"] if bias != "none" else [])
    ins = [_vi("X", [2, 5, 7, 6]), _vi("W", [5, 1, 3, 2])] + ([_vi("B", [5])] if bias == "input" else [])
    inits = [_init("B", rng.standard_normal(5).astype(np.float32))] if bias == "constant" else []
    model = _model([helper.make_node("Conv", names, ["Y"], group=5, pads=[1, 0, 1, 1], strides=[2, 1])],
                   ins, [_vi("Y", None)], inits)
    feeds = {"X": rng.standard_normal((2, 5, 7, 6)).astype(np.float32),
             "W": rng.standard_normal((5, 1, 3, 2)).astype(np.float32)}
    if bias == "input":
        feeds["B"] = rng.standard_normal(5).astype(np.float32)
    rewritten = rewrites.apply(model, platform="cpu")
    assert "Conv" not in _ops(rewritten) and "MatMul" not in _ops(rewritten)
    np.testing.assert_allclose(_run(rewritten, feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-5)


def test_huge_3d_conv_stays_a_conv(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bound on the gathered columns: batch x channels x taps x output positions."""
    from nx_hal.onnx.rewrites import conv

    model = _conv((1, 2, 4, 5, 5), (3, 2, 3, 3, 3), pads=[1, 1, 1, 1, 1, 1])
    columns = 1 * 2 * 27 * 4 * 5 * 5
    monkeypatch.setattr(conv, "_MAX_COLUMNS", columns - 1)
    assert rewrites.rewritten_ops(model, "cpu") == []
    monkeypatch.setattr(conv, "_MAX_COLUMNS", columns)
    assert rewrites.rewritten_ops(model, "cpu") == ["Conv"]


def test_integer_conv_is_left_alone() -> None:
    model = _model([helper.make_node("ConvInteger", ["X", "W"], ["Y"], pads=[1, 1, 1, 1])],
                   [_vi("X", [1, 2, 2, 2], TensorProto.UINT8)], [_vi("Y", None, TensorProto.INT32)],
                   [_init("W", np.ones((2, 2, 3, 3), np.uint8))])
    assert rewrites.apply(model) is model


# ---------------------------------------------------------------- MatMul (rows by a matrix)


_MATMULS: dict[str, tuple[tuple[int, ...], tuple[int, ...], int, bool]] = {
    # A's shape, W's shape, element type, W a constant
    "tokens": ((2, 12, 64), (64, 128), TensorProto.FLOAT, True),
    "channels-last": ((1, 4, 4, 96), (96, 384), TensorProto.FLOAT, True),
    "rank-5": ((2, 1, 3, 2, 5), (5, 7), TensorProto.FLOAT, True),
    "weights-as-input": ((3, 4, 8), (8, 6), TensorProto.FLOAT, False),
    "int64": ((2, 3, 4), (4, 5), TensorProto.INT64, True),
}


def _matmul(a: tuple[int, ...], w: tuple[int, ...], dtype: int, constant: bool) -> Any:
    values = np.random.default_rng(31).standard_normal(w) * 3
    inits = [_init("W", values.astype(np.float32 if dtype == TensorProto.FLOAT else np.int64))] if constant else []
    ins = [_vi("A", list(a), dtype)] + ([] if constant else [_vi("W", list(w), dtype)])
    return _model([helper.make_node("MatMul", ["A", "W"], ["Y"])], ins, [_vi("Y", None, dtype)], inits)


@pytest.mark.parametrize("case", list(_MATMULS))
def test_matmul_of_stacked_rows_is_one_2d_matmul_for_a_cpu_only(case: str) -> None:
    """torch-mlir lowers A[..., K] @ W[K, N] as a batched dot with W broadcast to
    every batch index (convnext_tiny on tpu:cpu: 104 ms, 9 ms rewritten): for a
    CPU the leading axes fold into rows; values as onnxruntime's."""
    a, w, dtype, constant = _MATMULS[case]
    model = _matmul(a, w, dtype, constant)
    rng = np.random.default_rng(32)
    np_type = np.float32 if dtype == TensorProto.FLOAT else np.int64
    feeds = {"A": (rng.standard_normal(a) * 3).astype(np_type)}
    if not constant:
        feeds["W"] = rng.standard_normal(w).astype(np_type)
    for platform in (None, "gpu", "tpu"):
        assert rewrites.rewritten_ops(model, platform) == []
    assert rewrites.rewritten_ops(model, "cpu") == ["MatMul"]
    rewritten = rewrites.apply(model, platform="cpu")
    assert Counter(n.op_type for n in rewritten.graph.node) == Counter({"Reshape": 2, "MatMul": 1})
    matmul = next(n for n in rewritten.graph.node if n.op_type == "MatMul")
    inferred = onnx.shape_inference.infer_shapes(rewritten, data_prop=True).graph.value_info
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred}
    assert shapes[matmul.input[0]] == [int(np.prod(a[:-1])), a[-1]]  # one matrix of rows
    want, got = _run(model, feeds), _run(rewritten, feeds)
    assert got[0].shape == want[0].shape == (*a[:-1], w[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("a", "w"), [
    ((4, 8), (8, 3)),            # already one matrix
    ((2, 4, 8), (2, 8, 3)),      # a batch of matrices on both sides
    ((2, 4, 8), (1, 8, 3)),      # W broadcast from a batch of one
    ((4, 8), (2, 8, 3)),         # rows against a batch
    ((2, 4, 8), (8,)),           # by a vector
    ((2, 0, 8), (8, 3)),         # no rows: nothing to gain, and Reshape reads a 0 as "keep"
    ((2, 4, 0), (0, 3)),         # nothing to sum
])
def test_other_matmuls_stay_for_a_cpu(a: tuple[int, ...], w: tuple[int, ...]) -> None:
    model = _model([helper.make_node("MatMul", ["A", "W"], ["Y"])], [_vi("A", list(a)), _vi("W", list(w))],
                   [_vi("Y", None)])
    assert rewrites.rewritten_ops(model, "cpu") == []
    assert rewrites.apply(model, platform="cpu") is model


def test_matmul_of_unknown_shape_stays() -> None:
    symbolic = helper.make_tensor_value_info("A", TensorProto.FLOAT, ["b", 4, 8])
    model = _model([helper.make_node("MatMul", ["A", "W"], ["Y"])], [symbolic, _vi("W", [8, 3])], [_vi("Y", None)])
    assert rewrites.rewritten_ops(model, "cpu") == []


# ---------------------------------------------------------------- DFT


def _dft(shape: tuple[int, ...], *, opset: int, axis: int, length: int | None = None, **attrs: Any) -> Any:
    inputs = ["x", "n" if length is not None else ""]
    inits = [_init("n", np.asarray(length, np.int64))] if length is not None else []
    if opset >= 20:
        inputs.append("axis")
        inits.append(_init("axis", np.asarray(axis, np.int64)))
    else:
        attrs["axis"] = axis
    return _model([helper.make_node("DFT", inputs, ["y"], **attrs)], [_vi("x", list(shape))], [_vi("y", None)],
                  inits, opset=opset)


_DFTS: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "real": ((2, 8, 1), {"axis": 1}),
    "complex": ((2, 8, 2), {"axis": 1}),
    "inner-axis": ((2, 3, 5, 2), {"axis": 2}),
    "negative-axis": ((2, 6, 3, 2), {"axis": -3}),
    "onesided": ((1, 9, 1), {"axis": 1, "onesided": 1}),
    "inverse": ((2, 7, 2), {"axis": 1, "inverse": 1}),
    "irfft": ((1, 5, 2), {"axis": 1, "inverse": 1, "onesided": 1}),
    "padded": ((1, 6, 2), {"axis": 1, "length": 10}),
    "truncated": ((1, 6, 1), {"axis": 1, "length": 4}),
}


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("case", list(_DFTS))
def test_dft_matches_the_reference(case: str, opset: int) -> None:
    from onnx.reference import ReferenceEvaluator

    shape, attrs = _DFTS[case]
    model = _dft(shape, opset=opset, **dict(attrs))
    x = np.random.default_rng(14).standard_normal(shape).astype(np.float32)
    rewritten = rewrites.apply(model)
    assert "DFT" not in _ops(rewritten)
    want = np.asarray(list(ReferenceEvaluator(model).run(None, {"x": x}))[0])
    (got,) = _run(rewritten, {"x": x})
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dft_with_an_input_axis_is_refused() -> None:
    model = _dft((1, 8, 1), opset=20, axis=1)
    graph = model.graph
    del graph.initializer[:]
    graph.input.append(_vi("axis", [], TensorProto.INT64))
    _refused(model, "axis", "is not a constant")


# ---------------------------------------------------------------- AveragePool the lowering gets wrong


_POOLS: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "same-upper": ((1, 2, 7, 6), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    "same-lower": ((1, 2, 6, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
    "dilated": ((1, 1, 6, 7), {"kernel_shape": [2, 2], "dilations": [2, 3]}),
    "dilated-ceil-pads": ((2, 3, 7, 7), {"kernel_shape": [3, 3], "dilations": [2, 2], "strides": [2, 2],
                                         "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "dilated-count-pads": ((1, 2, 6, 6), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 2, 1],
                                          "count_include_pad": 1}),
    "3-d": ((1, 2, 5, 4, 6), {"kernel_shape": [2, 2, 3]}),
    "3-d-ceil-count-pads": ((1, 1, 5, 5, 5), {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2],
                                              "pads": [1, 1, 1, 1, 1, 1], "ceil_mode": 1,
                                              "count_include_pad": 1}),
}


@pytest.mark.parametrize("case", list(_POOLS))
def test_average_pool_matches_the_reference(case: str) -> None:
    from onnx.reference import ReferenceEvaluator

    shape, attrs = _POOLS[case]
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)], [_vi("x", list(shape))],
                   [_vi("y", None)], opset=19)
    x = np.random.default_rng(16).standard_normal(shape).astype(np.float32)
    rewritten = rewrites.apply(model)
    assert "AveragePool" not in _ops(rewritten)
    want = np.asarray(list(ReferenceEvaluator(model).run(None, {"x": x}))[0])
    (got,) = _run(rewritten, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_average_pool_the_lowering_takes_is_left_alone() -> None:
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])],
                   [_vi("x", [1, 2, 5, 5])], [_vi("y", None)], opset=19)
    assert rewrites.apply(model) is model


# ---------------------------------------------------------------- QLinearMatMul


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("scale_type", [np.float32, np.float16])
def test_qlinear_matmul_is_exact(dtype: Any, scale_type: Any) -> None:
    rng = np.random.default_rng(15)
    info = np.iinfo(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [_init("as", np.asarray(0.05, scale_type)), _init("az", np.asarray(3, dtype)),
             _init("b", rng.integers(info.min, info.max, (40, 6), endpoint=True).astype(dtype)),
             _init("bs", np.asarray(0.02, scale_type)), _init("bz", np.asarray(-2 if info.min < 0 else 7, dtype)),
             _init("ys", np.asarray(0.3, scale_type)), _init("yz", np.asarray(5, dtype))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = _model([node], [_vi("a", [3, 40], elem)], [_vi("y", None, elem)], inits)
    a = rng.integers(info.min, info.max, (3, 40), endpoint=True).astype(dtype)
    rewritten = rewrites.apply(model)
    assert "QLinearMatMul" not in _ops(rewritten)
    want, got = _run(model, {"a": a})[0], _run(rewritten, {"a": a})[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- end to end on XLA CPU


def _xla_cpu() -> Any:
    pytest.importorskip("nx_hal_tpu", reason="the tpu plugin is not installed")
    pytest.importorskip("torch_mlir", reason="ONNX → StableHLO needs torch-mlir")
    import nx_hal

    try:
        return nx_hal.device("tpu:cpu")
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no XLA CPU device: {exc}")


@pytest.fixture(scope="module")
def worker() -> Iterator[Any]:
    from nx_hal.onnx import convert

    with convert.ConverterWorker(timeout=300) as shared:
        yield shared


def _on_xla_cpu(model: Any, feeds: dict[str, np.ndarray], worker: Any, tmp_path: Path,
                want: list[np.ndarray] | None = None) -> None:
    """Converts ``rewrites.apply(model)``, runs it on XLA CPU and compares with
    onnxruntime on ``model`` (or with ``want``)."""
    from nx_hal.onnx.convert import onnx_to_stablehlo, target_version_of

    dev = _xla_cpu()
    rewritten = rewrites.apply(model)
    result = onnx_to_stablehlo(rewritten.SerializeToString(), target_version=target_version_of(dev),
                               cache_dir=tmp_path / "stablehlo", worker=worker)
    exe = dev.compile(result.module, format="stablehlo")
    names = [v.name for v in rewritten.graph.input if v.name not in {i.name for i in rewritten.graph.initializer}]
    got = [o.to_numpy() for o in exe(*[dev.put(feeds[n]) for n in names])]
    want = want if want is not None else _run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * float(np.abs(w).max(initial=1.0)))


_END_TO_END: dict[str, Any] = {
    "averagepool-3d-dilated": lambda: _model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2], dilations=[2, 1, 1])],
        [_vi("x", [1, 2, 5, 4, 4])], [_vi("y", None)], opset=19),
    "dft-complex": lambda: _dft((2, 8, 2), opset=20, axis=1),
    "dft-irfft": lambda: _dft((1, 5, 2), opset=17, axis=1, inverse=1, onesided=1),
    "conv-3x3-over-2x2": lambda: _conv((1, 16, 2, 2), (16, 16, 3, 3), pads=[1, 1, 1, 1]),
    "conv-grouped-over-2x2": lambda: _conv((1, 8, 2, 2), (12, 4, 3, 3), pads=[1, 1, 1, 1], group=2),
    "lstm-bidirectional": lambda: _recurrent("LSTM", "bidirectional", initial=True, seq=6),
    "gru-bidirectional": lambda: _recurrent("GRU", "bidirectional", linear_before_reset=1, initial=True),
    "gru-reverse": lambda: _recurrent("GRU", "reverse", linear_before_reset=0),
    "rnn-bidirectional": lambda: _recurrent("RNN", "bidirectional", initial=True),
    "resize-nearest-torch": lambda: _resize({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                             "nearest_mode": "floor"}, scales=(2.0, 2.0)),
    "resize-bilinear-align-corners": lambda: _resize({"mode": "linear",
                                                      "coordinate_transformation_mode": "align_corners"},
                                                     scales=(2.0, 2.0)),
    "resize-bilinear-pytorch": lambda: _resize({"mode": "linear",
                                                "coordinate_transformation_mode": "pytorch_half_pixel"},
                                               sizes=(9, 3)),
    "resize-bicubic": lambda: _resize({"mode": "cubic", "cubic_coeff_a": -0.75}, scales=(1.5, 2.0)),
    "resize-crop": lambda: _resize({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
                                   sizes=(6, 6), roi=[0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4]),
    "fused-skip-layer-norm": lambda: _FUSED_CASES["SkipLayerNormalization"](),
    "fused-skip-rms-norm": lambda: _FUSED_CASES["SkipSimplifiedLayerNormalization-opset18"](),
    "fused-gelu": lambda: _FUSED_CASES["BiasGelu"](),
    "fused-fast-gelu": lambda: _FUSED_CASES["FastGelu-bias"](),
    "fused-attention": lambda: _ATTENTION["causal-key-mask-scale"](),
    "dequantize-per-axis": lambda: _dequantize(np.int8, np.array([0.1, 0.2, 0.05, 0.3], np.float32),
                                               np.array([1, -2, 0, 3], np.int8), (3, 4, 6), axis=1),
}


@pytest.mark.parametrize("name", sorted(_END_TO_END))
def test_end_to_end_on_xla_cpu(name: str, worker: Any, tmp_path: Path) -> None:
    model = _END_TO_END[name]()
    if "dequantize" in name:
        feeds = {"x": _RNG.integers(-128, 127, (3, 4, 6), endpoint=True).astype(np.int8)}
    elif "attention" in name:
        feeds = _attention_feeds(model)
    else:
        feeds = _feeds(model)
    _on_xla_cpu(model, feeds, worker, tmp_path)


def test_batch_first_lstm_end_to_end(worker: Any, tmp_path: Path) -> None:
    model = _recurrent("LSTM", "bidirectional", layout=1, initial=True)
    time_major = _recurrent("LSTM", "bidirectional", layout=0, initial=True, values=_weights(model))
    feeds = _feeds(model)
    want = _run(time_major, {k: v.transpose(1, 0, 2) for k, v in feeds.items()})
    _on_xla_cpu(model, feeds, worker, tmp_path,
                want=[want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]])


def test_quantize_static_model_end_to_end(worker: Any, tmp_path: Path) -> None:
    model = qdq_model(tmp_path)
    feeds = {"x": _RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)}
    _on_xla_cpu(model, feeds, worker, tmp_path, want=_qdq_reference(model, feeds))


def test_constant_if_end_to_end(worker: Any, tmp_path: Path) -> None:
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=_branch("a", "Abs"), else_branch=_branch("b", "Exp"))]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])], [_init("cond", np.array(True))])
    _on_xla_cpu(model, {"x": np.array([-1.5, 0.25, 2.0], np.float32)}, worker, tmp_path)


# Measured (onnx 1.23.2 node tests, torch-mlir 20261001, XLA CPU): of the 87
# cases of these families, 0 passed before the rewrites and 64 after; of the
# other 23, 16 have types nx_hal does not carry (float8, int4, int2, float4),
# 2 sequences or optionals, 3 quantize to int16 / uint16 (torch-mlir's Cast
# lowering lacks those types) and 2 are the ambiguous align_corners cases.
NODE_FLOOR = 64


def test_onnx_node_tests_on_xla_cpu() -> None:
    dev = _xla_cpu()
    cases = []
    for case in _CASES:
        try:
            cases.append(prepared(case))
        except ConversionError:
            continue
    outcomes = list(oc.run_cases(dev, cases))
    counts = Counter(o.status for o in outcomes)
    failed = [f"{o.case}: {o.message}" for o in outcomes if o.status == "fail"]
    assert not failed, failed  # never silently wrong
    assert counts["pass"] >= NODE_FLOOR, [f"{o.case}: {o.message}" for o in outcomes if o.status != "pass"]
    by_family = Counter(o.op_types[0] for o in outcomes if o.status == "pass")
    for family in ("LSTM", "GRU", "RNN"):
        assert by_family[family] == 6, by_family
    assert by_family["Resize"] == 39 - len(_AMBIGUOUS), by_family

