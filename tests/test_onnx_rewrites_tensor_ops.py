"""ONNX → ONNX rewrites (nx_hal.onnx.rewrites.tensor_ops) of
NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, Hardmax, Dropout,
CenterCropPad and Trilu: the rewritten model run by onnxruntime against the
original run by onnxruntime (or ONNX's reference evaluator), and what the
rewrites do not cover refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the oracle)")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from nx_hal.onnx import guards, rewrites  # noqa: E402
from tests.rewrite_checks import assert_refused, assert_rewritten_same, ops, ort_run  # noqa: E402

_RNG = np.random.default_rng(11)
_REWRITTEN = {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Hardmax", "Dropout", "CenterCropPad", "Trilu"}

# ---------------------------------------------------------------- helpers


def _vi(name: str, shape: Sequence[int | str] | None, dtype: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _init(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: Sequence[Any] = (), *,
           opset: int = 21) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8  # noqa: PLR2004 -- onnxruntime takes IR 8 with old opsets
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


_ort = ort_run
_ops = ops


def _reference(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


def _assert_same(model: Any, feeds: dict[str, np.ndarray], *, oracle: str = "onnxruntime") -> Any:
    """Rewrites ``model``: none of the rewritten operators is left, and
    onnxruntime on the rewritten model gives the oracle's outputs on the original."""
    want = _reference(model, feeds) if oracle == "reference" else None
    return assert_rewritten_same(model, feeds, _REWRITTEN, want=want, atol=1e-5)


_refused = assert_refused


def _normal(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- the losses

_LOSS_SHAPES = [(4, 3), (3, 5, 2), (2, 4, 3, 2)]


def _loss_model(op: str, shape: tuple[int, ...], reduction: str, weighted: bool, ignore: int | None, *,
                log_prob: bool = False, target_type: int = TensorProto.INT64, opset: int = 21) -> Any:
    attrs: dict[str, Any] = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    inputs = ["x", "t"] + (["w"] if weighted else [])
    outputs = ["loss"] + (["log_prob"] if log_prob else [])
    node = helper.make_node(op, inputs, outputs, **attrs)
    target_shape = shape[:1] + shape[2:]
    loss_shape = target_shape if reduction == "none" else ()
    graph_inputs = [_vi("x", shape), _vi("t", target_shape, target_type)]
    graph_inputs += [_vi("w", shape[1:2])] if weighted else []
    graph_outputs = [_vi("loss", loss_shape)] + ([_vi("log_prob", shape)] if log_prob else [])
    return _model([node], graph_inputs, graph_outputs, opset=opset)


def _loss_feeds(shape: tuple[int, ...], weighted: bool, ignore: int | None,
                target_dtype: Any = np.int64) -> dict[str, np.ndarray]:
    classes = shape[1]
    target = _RNG.integers(0, classes, shape[:1] + shape[2:])
    if ignore is not None:  # a few ignored targets, whatever ignore_index (in range or not)
        target.reshape(-1)[::3] = ignore
    feeds = {"x": _normal(*shape), "t": target.astype(target_dtype)}
    if weighted:
        feeds["w"] = _RNG.uniform(0.2, 2.0, classes).astype(np.float32)
    return feeds


_LOSS_CASES = [(reduction, weighted, ignore, shape)
               for reduction in ("none", "sum", "mean")
               for weighted in (False, True)
               for ignore in (None, 1, -1)
               for shape in _LOSS_SHAPES]


@pytest.mark.parametrize(("reduction", "weighted", "ignore", "shape"), _LOSS_CASES)
def test_negative_log_likelihood_loss(reduction: str, weighted: bool, ignore: int | None,
                                      shape: tuple[int, ...]) -> None:
    model = _loss_model("NegativeLogLikelihoodLoss", shape, reduction, weighted, ignore)
    rewritten = _assert_same(model, _loss_feeds(shape, weighted, ignore))
    assert "GatherElements" in _ops(rewritten)


def test_negative_log_likelihood_loss_with_an_int32_target() -> None:
    model = _loss_model("NegativeLogLikelihoodLoss", (3, 4, 2), "mean", True, 2, target_type=TensorProto.INT32)
    _assert_same(model, _loss_feeds((3, 4, 2), True, 2, np.int32))


@pytest.mark.parametrize(("reduction", "weighted", "ignore", "shape"), _LOSS_CASES[::2])
def test_softmax_cross_entropy_loss(reduction: str, weighted: bool, ignore: int | None,
                                    shape: tuple[int, ...]) -> None:
    model = _loss_model("SoftmaxCrossEntropyLoss", shape, reduction, weighted, ignore, log_prob=True)
    rewritten = _assert_same(model, _loss_feeds(shape, weighted, ignore))
    assert "LogSoftmax" in _ops(rewritten)


@pytest.mark.parametrize("shape", _LOSS_SHAPES)
def test_softmax_cross_entropy_loss_at_opset_12(shape: tuple[int, ...]) -> None:
    """LogSoftmax flattens from its axis on before opset 13: the classes are moved last."""
    model = _loss_model("SoftmaxCrossEntropyLoss", shape, "mean", True, 0, log_prob=True, opset=12)
    _assert_same(model, _loss_feeds(shape, True, 0))


def test_the_weighted_mean_cross_entropy_leaves_nothing_for_the_guards() -> None:
    """The guards (run after the rewrites) rewrite or refuse a weighted-mean
    SoftmaxCrossEntropyLoss: after the rewrite there is none left for them."""
    rewritten = rewrites.apply(_loss_model("SoftmaxCrossEntropyLoss", (3, 5, 2), "mean", True, None))
    notes: list[str] = []
    _, refusals = guards.apply(rewritten, notes)
    assert refusals == [] and notes == []
    assert not _ops(rewritten) & {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}


def test_a_loss_of_unknown_shape_waits_then_is_refused() -> None:
    model = _loss_model("NegativeLogLikelihoodLoss", (3, 5), "sum", False, None)
    for value in (*model.graph.input, *model.graph.value_info):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    _refused(model, "NegativeLogLikelihoodLoss", "not static", reason="dynamic-shape")


# ---------------------------------------------------------------- Hardmax


@pytest.mark.parametrize(("shape", "axis", "opset"), [
    ((4, 4), None, 21), ((3, 4, 5), 0, 21), ((3, 4, 5), 1, 21), ((3, 4, 5), -2, 21), ((3, 4, 5), None, 13),
    ((3, 4, 5), 1, 11), ((3, 4, 5), None, 11), ((3, 4, 5), 2, 11),
])
def test_hardmax(shape: tuple[int, ...], axis: int | None, opset: int) -> None:
    attrs: dict[str, Any] = {} if axis is None else {"axis": axis}
    model = _model([helper.make_node("Hardmax", ["x"], ["y"], **attrs)], [_vi("x", shape)], [_vi("y", shape)],
                   opset=opset)
    x = _RNG.integers(0, 3, shape).astype(np.float32)  # many ties: the first maximum wins
    rewritten = _assert_same(model, {"x": x})
    assert "ArgMax" in _ops(rewritten)


def test_hardmax_of_an_empty_tensor() -> None:
    model = _model([helper.make_node("Hardmax", ["x"], ["y"])], [_vi("x", (2, 0))], [_vi("y", (2, 0))])
    _assert_same(model, {"x": np.zeros((2, 0), np.float32)}, oracle="reference")


# ---------------------------------------------------------------- Dropout


def _dropout(inputs: list[str], *, mask: bool, inits: Sequence[Any] = (), opset: int = 21,
             extra: Sequence[Any] = (), **attrs: Any) -> Any:
    node = helper.make_node("Dropout", ["x", *inputs], ["y", "mask"] if mask else ["y"], **attrs)
    mask_type = TensorProto.BOOL if opset >= 10 else TensorProto.FLOAT  # noqa: PLR2004 -- bool from opset 10
    outputs = [_vi("y", (3, 4))] + ([_vi("mask", (3, 4), mask_type)] if mask else [])
    return _model([node], [_vi("x", (3, 4)), *extra], outputs, inits, opset=opset)


@pytest.mark.parametrize("mask", [False, True])
def test_dropout_given_a_constant_false_training_mode_is_the_identity(mask: bool) -> None:
    inits = [_init("r", np.float32(0.3)), _init("t", np.bool_(False))]
    rewritten = _assert_same(_dropout(["r", "t"], mask=mask, inits=inits), {"x": _normal(3, 4)})
    assert "Identity" in _ops(rewritten)


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize(("inputs", "inits"), [([], []), (["r"], [_init("r", np.float32(0.3))])])
def test_dropout_the_lowering_takes_is_left_alone(inputs: list[str], inits: list[Any], mask: bool) -> None:
    """torch-mlir lowers inference Dropout with a constant ratio (or none)."""
    model = _dropout(inputs, mask=mask, inits=inits)
    assert rewrites.apply(model) is model


def test_dropout_ratio_as_a_graph_input_does_not_matter_at_inference() -> None:
    model = _dropout(["r"], mask=True, extra=[_vi("r", (), TensorProto.FLOAT)])
    _assert_same(model, {"x": _normal(3, 4), "r": np.asarray(0.4, np.float32)})


@pytest.mark.parametrize("opset", [7, 10])
@pytest.mark.parametrize("mask", [False, True])
def test_dropout_of_older_opsets_is_left_alone(opset: int, mask: bool) -> None:
    """No training_mode before opset 12: the lowering's to take (a mask output's
    value at inference is unspecified there: onnxruntime gives all false, ONNX's
    reference all true)."""
    model = _dropout([], mask=mask, opset=opset, ratio=0.25)
    assert rewrites.apply(model) is model


def test_dropout_in_training_is_refused() -> None:
    inits = [_init("r", np.float32(0.5)), _init("t", np.bool_(True))]
    _refused(_dropout(["r", "t"], mask=True, inits=inits), "Dropout", "training mode", "random")


def test_dropout_whose_training_mode_is_computed_is_refused() -> None:
    model = _dropout(["", "t"], mask=False, extra=[_vi("t", (), TensorProto.BOOL)])
    _refused(model, "Dropout", "training_mode 't' is not a constant")


# ---------------------------------------------------------------- CenterCropPad


@pytest.mark.parametrize(("shape", "size", "axes"), [
    ((20, 10, 3), (10, 7, 3), None),  # crop, an odd difference on axis 1
    ((10, 7, 3), (20, 10, 3), None),  # pad, an odd difference on axis 1
    ((20, 8, 3), (10, 9, 3), None),  # crop one axis, pad another (odd)
    ((20, 8, 3), (11, 10), (0, 1)),
    ((3, 20, 8), (11, 9), (-2, -1)),
    ((4, 5), (4, 5), None),  # nothing to do
])
def test_center_crop_pad(shape: tuple[int, ...], size: tuple[int, ...], axes: tuple[int, ...] | None) -> None:
    attrs: dict[str, Any] = {} if axes is None else {"axes": list(axes)}
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)
    model = _model([node], [_vi("x", shape)], [_vi("y", None)], [_init("s", np.asarray(size, np.int64))])
    x = _normal(*shape)
    _assert_same(model, {"x": x}, oracle="reference")
    _assert_same(model, {"x": x})


def test_center_crop_pad_to_a_computed_shape_is_refused() -> None:
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"])
    model = _model([node], [_vi("x", (4, 5)), _vi("s", (2,), TensorProto.INT64)], [_vi("y", None)])
    _refused(model, "CenterCropPad", "shape 's' is not a constant")


# ---------------------------------------------------------------- Trilu


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize(("shape", "k"), [
    ((4, 5), None), ((4, 5), 2), ((4, 5), -1), ((2, 3, 5, 4), 1), ((3, 4), 7), ((3, 4), -7), ((1, 5), -1),
])
def test_trilu_with_a_constant_k(upper: int, shape: tuple[int, ...], k: int | None) -> None:
    inputs = ["x"] if k is None else ["x", "k"]
    inits = [] if k is None else [_init("k", np.int64(k))]
    model = _model([helper.make_node("Trilu", inputs, ["y"], upper=upper)], [_vi("x", shape)], [_vi("y", shape)],
                   inits)
    # torch-mlir lowers a Trilu whose k is constant (or left out): left alone.
    assert rewrites.apply(model) is model


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_with_k_computed_at_run_time(upper: int) -> None:
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    model = _model([node], [_vi("x", (3, 4), TensorProto.INT32), _vi("k", (), TensorProto.INT64)],
                   [_vi("y", (3, 4), TensorProto.INT32)])
    x = _RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    for k in (-2, 0, 1, 5):
        _assert_same(model, {"x": x, "k": np.asarray(k, np.int64)})


# ---------------------------------------------------------------- end to end on XLA CPU


def _xla_cpu() -> Any:
    pytest.importorskip("nx_hal_tpu", reason="the tpu plugin is not installed")
    pytest.importorskip("torch_mlir", reason="ONNX → StableHLO needs torch-mlir")
    import nx_hal

    try:
        return nx_hal.device("tpu:cpu")
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no XLA CPU device: {exc}")


def _trilu_with_k_as_input() -> tuple[Any, dict[str, np.ndarray]]:
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)
    model = _model([node], [_vi("x", (2, 3, 4)), _vi("k", (), TensorProto.INT64)], [_vi("y", (2, 3, 4))])
    return model, {"x": _normal(2, 3, 4), "k": np.asarray(-1, np.int64)}


def _loss(op: str, opset: int) -> tuple[Any, dict[str, np.ndarray]]:
    shape = (3, 4, 2, 3)
    model = _loss_model(op, shape, "mean", True, 1, log_prob=op == "SoftmaxCrossEntropyLoss", opset=opset)
    return model, _loss_feeds(shape, True, 1)


def _hardmax_2d() -> tuple[Any, dict[str, np.ndarray]]:
    model = _model([helper.make_node("Hardmax", ["x"], ["y"], axis=1)], [_vi("x", (2, 3, 4))],
                   [_vi("y", (2, 3, 4))], opset=11)
    return model, {"x": _RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)}


def _center_crop_pad() -> tuple[Any, dict[str, np.ndarray]]:
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[-2, -1])
    model = _model([node], [_vi("x", (2, 7, 4))], [_vi("y", None)], [_init("s", np.asarray([4, 7], np.int64))])
    return model, {"x": _normal(2, 7, 4)}


def _dropout_with_mask() -> tuple[Any, dict[str, np.ndarray]]:
    return _dropout(["r"], mask=True, inits=[_init("r", np.float32(0.3))]), {"x": _normal(3, 4)}


_END_TO_END: dict[str, Any] = {
    "trilu-k-as-input": _trilu_with_k_as_input,
    "nll-weighted-mean-ignore": lambda: _loss("NegativeLogLikelihoodLoss", 21),
    "sce-opset-12-log-prob": lambda: _loss("SoftmaxCrossEntropyLoss", 12),
    "hardmax-opset-11": _hardmax_2d,
    "center-crop-pad": _center_crop_pad,
    "dropout-mask": _dropout_with_mask,
}


def test_end_to_end_on_xla_cpu(tmp_path: Any) -> None:
    """Each rewritten model converted to StableHLO, run on XLA CPU, against
    onnxruntime on the original (one converter for all: torch-mlir starts once)."""
    dev = _xla_cpu()
    from nx_hal.onnx import convert

    with convert.ConverterWorker(timeout=300) as worker:
        for name, make in _END_TO_END.items():
            model, feeds = make()
            rewritten = rewrites.apply(model)
            result = convert.onnx_to_stablehlo(rewritten.SerializeToString(),
                                               target_version=convert.target_version_of(dev),
                                               cache_dir=tmp_path / "stablehlo", worker=worker)
            exe = dev.compile(result.module, format="stablehlo")
            inits = {i.name for i in rewritten.graph.initializer}
            names = [v.name for v in rewritten.graph.input if v.name not in inits]
            got = [o.to_numpy() for o in exe(*[dev.put(feeds[n]) for n in names])]
            want = _ort(model, feeds)
            assert len(got) == len(want), name
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype, (name, g.dtype, w.dtype)
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
