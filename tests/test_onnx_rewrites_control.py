"""Scan and Loop unrolled by nx_hal.onnx.rewrites (``control``): small
models built here, the rewritten model run by onnxruntime against the
original run by onnxruntime (or numpy, where onnxruntime is wrong); every
refusal, by what it names; and a few end to end on XLA CPU (tpu:cpu)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the oracle)")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nx_hal.onnx import rewrites  # noqa: E402
from tests.rewrite_checks import assert_refused, assert_rewritten_same, ops, ort_run  # noqa: E402

_RNG = np.random.default_rng(5)
F = TensorProto.FLOAT

# ---------------------------------------------------------------- helpers


def _vi(name: str, shape: Sequence[int | str] | None, dtype: int = F) -> Any:
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _init(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: Sequence[Any] = (), *,
           opset: int = 21, strict: bool = True) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=strict, data_prop=True)


_run = ort_run
_ops = ops


def _assert_same(model: Any, feeds: dict[str, np.ndarray]) -> Any:
    """Rewrites ``model``: no Scan or Loop is left, and onnxruntime agrees."""
    return assert_rewritten_same(model, feeds, {"Scan", "Loop"})


_refused = assert_refused


def _random(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- Scan


def _sum_body(width: list[int]) -> Any:
    """The running sum: state out = state + slice, scan output = the state."""
    return helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "sum", [_vi("s_in", width), _vi("x_t", width)], [_vi("s_out", width), _vi("y_t", width)])


def _scan_sum(x_shape: Sequence[int | str], width: list[int], **attrs: Any) -> Any:
    scan = helper.make_node("Scan", ["s0", "x"], ["s", "y"], num_scan_inputs=1, body=_sum_body(width), **attrs)
    return _model([scan], [_vi("s0", width), _vi("x", x_shape)], [_vi("s", None), _vi("y", None)])


@pytest.mark.parametrize("attrs", [
    {},
    {"scan_input_directions": [1]},
    {"scan_output_directions": [1]},
    {"scan_input_directions": [1], "scan_output_directions": [1]},
], ids=["forward", "reverse-input", "prepending-output", "both-reversed"])
def test_running_sum(attrs: dict[str, Any]) -> None:
    rewritten = _assert_same(_scan_sum([4, 3], [3], **attrs), {"s0": _random(3), "x": _random(4, 3)})
    assert sum(n.op_type == "Add" for n in rewritten.graph.node) == 4


@pytest.mark.parametrize("attrs", [
    {"scan_input_axes": [1]},
    {"scan_input_axes": [-1], "scan_output_axes": [1]},
    {"scan_input_axes": [1], "scan_output_axes": [-1], "scan_output_directions": [1]},
])
def test_scan_over_axis_1(attrs: dict[str, Any]) -> None:
    _assert_same(_scan_sum([2, 5], [2], **attrs), {"s0": _random(2), "x": _random(2, 5)})


def test_scalar_states_and_slices() -> None:
    _assert_same(_scan_sum([6], []), {"s0": _random(), "x": _random(6)})


def test_running_sum_and_product() -> None:
    """Two states, two scan inputs (one reversed), two scan outputs."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "a_t"], ["sum_out"]),
         helper.make_node("Mul", ["prod_in", "b_t"], ["prod_out"]),
         helper.make_node("Sub", ["sum_out", "prod_out"], ["diff"]),
         helper.make_node("Identity", ["sum_out"], ["sum_scan"])],
        "body", [_vi("sum_in", [2]), _vi("prod_in", [2]), _vi("a_t", [2]), _vi("b_t", [2])],
        [_vi("sum_out", [2]), _vi("prod_out", [2]), _vi("diff", [2]), _vi("sum_scan", [2])])
    scan = helper.make_node("Scan", ["s0", "p0", "a", "b"], ["s", "p", "d", "all"], num_scan_inputs=2, body=body,
                            scan_input_directions=[0, 1], scan_output_directions=[0, 1])
    model = _model([scan], [_vi("s0", [2]), _vi("p0", [2]), _vi("a", [3, 2]), _vi("b", [3, 2])],
                   [_vi(n, None) for n in ("s", "p", "d", "all")])
    _assert_same(model, {"s0": _random(2), "p0": _random(2), "a": _random(3, 2), "b": _random(3, 2)})


def test_a_body_output_listed_twice() -> None:
    """The state is also the scan output, by the same name (onnxruntime
    gets this wrong: its final state comes out zero): against numpy."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"])], "b",
                             [_vi("s_in", [2]), _vi("x_t", [2])], [_vi("s_out", [2]), _vi("s_out", [2])])
    scan = helper.make_node("Scan", ["s0", "x"], ["s", "y"], num_scan_inputs=1, body=body)
    model = _model([scan], [_vi("s0", [2]), _vi("x", [3, 2])], [_vi("s", None), _vi("y", None)])
    s0, x = _random(2), _random(3, 2)
    final, stacked = _run(rewrites.apply(model), {"s0": s0, "x": x})
    np.testing.assert_allclose(stacked, s0 + np.cumsum(x, axis=0), rtol=1e-6)
    np.testing.assert_allclose(final, stacked[-1], rtol=1e-6)


def test_scan_body_reads_the_outer_graph_and_has_initializers() -> None:
    """The body reads the main graph's W (by name) and has its own bias;
    the last state is not a graph output."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("Add", ["hw", "x_t"], ["pre"]),
         helper.make_node("Add", ["pre", "bias"], ["pre_b"]), helper.make_node("Tanh", ["pre_b"], ["h_out"])],
        "rnn", [_vi("h_in", [1, 4]), _vi("x_t", [1, 4])], [_vi("h_out", [1, 4]), _vi("pre_b", [1, 4])],
        [_init("bias", _random(4))])
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("Scan", ["h0", "xr"], ["h_last", "hs"], num_scan_inputs=1, body=body)]
    model = _model(nodes, [_vi("h0", [1, 4]), _vi("x", [5, 1, 4])], [_vi("hs", None)], [_init("W", _random(4, 4))])
    rewritten = _assert_same(model, {"h0": _random(1, 4), "x": _random(5, 1, 4)})
    assert all(init.name in {i for n in rewritten.graph.node for i in n.input} for init in rewritten.graph.initializer)


def test_scan_without_scan_outputs() -> None:
    body = helper.make_graph([helper.make_node("Max", ["m_in", "x_t"], ["m_out"])], "max",
                             [_vi("m_in", [3]), _vi("x_t", [3])], [_vi("m_out", [3])])
    scan = helper.make_node("Scan", ["m0", "x"], ["m"], num_scan_inputs=1, body=body)
    _assert_same(_model([scan], [_vi("m0", [3]), _vi("x", [7, 3])], [_vi("m", None)]),
                 {"m0": _random(3), "x": _random(7, 3)})


def _nested_scans() -> Any:
    """A Scan whose body scans the rows of its slice: the inner Scan is
    inlined with the outer body, then unrolled in a later round."""
    inner = helper.make_node("Scan", ["acc_in", "row"], ["acc_out", "partial"], num_scan_inputs=1,
                             body=_sum_body([]))
    body = helper.make_graph([inner], "outer", [_vi("acc_in", []), _vi("row", [3])],
                             [_vi("acc_out", []), _vi("partial", [3])])
    scan = helper.make_node("Scan", ["a0", "x"], ["a", "y"], num_scan_inputs=1, body=body)
    return _model([scan], [_vi("a0", []), _vi("x", [2, 3])], [_vi("a", None), _vi("y", None)])


def test_nested_scans() -> None:
    _assert_same(_nested_scans(), {"a0": _random(), "x": _random(2, 3)})


def test_a_zero_length_scan_without_scan_outputs_passes_the_state_through() -> None:
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"])], "b",
                             [_vi("s_in", [2]), _vi("x_t", [2])], [_vi("s_out", [2])])
    scan = helper.make_node("Scan", ["s0", "x"], ["s"], num_scan_inputs=1, body=body)
    rewritten = rewrites.apply(_model([scan], [_vi("s0", [2]), _vi("x", [0, 2])], [_vi("s", None)]))
    assert _ops(rewritten) == {"Identity"}
    s0 = _random(2)  # onnxruntime fails on the original: against the state itself
    np.testing.assert_array_equal(_run(rewritten, {"s0": s0, "x": _random(0, 2)})[0], s0)


# ---------------------------------------------------------------- Scan refused


def test_scan_of_a_dynamic_length_is_refused() -> None:
    _refused(_scan_sum(["n", 3], [3]), "Scan node", "not static", reason="dynamic-shape")


def test_scan_inputs_of_different_lengths_are_refused() -> None:
    body = helper.make_graph([helper.make_node("Add", ["a_t", "b_t"], ["y_t"])], "b",
                             [_vi("a_t", [2]), _vi("b_t", [2])], [_vi("y_t", [2])])
    scan = helper.make_node("Scan", ["a", "b"], ["y"], num_scan_inputs=2, body=body, scan_input_axes=[0, 1])
    # (ONNX's strict shape inference rejects it as well)
    model = _model([scan], [_vi("a", [3, 2]), _vi("b", [2, 4])], [_vi("y", None)], strict=False)
    _refused(model, "scan inputs of different lengths [3, 4]")


def test_too_long_a_scan_is_refused() -> None:
    _refused(_scan_sum([1025, 2], [2]), "1025 iterations")


def test_too_large_an_unrolled_scan_is_refused() -> None:
    nodes = [helper.make_node("Identity", ["s_in"], ["v0"])]
    nodes += [helper.make_node("Identity", [f"v{i}"], [f"v{i + 1}"]) for i in range(200)]
    nodes.append(helper.make_node("Add", ["v200", "x_t"], ["s_out"]))
    body = helper.make_graph(nodes, "long",
                             [_vi("s_in", [2]), _vi("x_t", [2])], [_vi("s_out", [2])])
    scan = helper.make_node("Scan", ["s0", "x"], ["s"], num_scan_inputs=1, body=body)
    model = _model([scan], [_vi("s0", [2]), _vi("x", [600, 2])], [_vi("s", None)])
    _refused(model, "600 iterations of a body of 202 nodes", "100000 inlined nodes")


def test_zero_length_scan_with_scan_outputs_is_refused() -> None:
    _refused(_scan_sum([0, 3], [3]), "zero iterations with scan outputs")


def test_scan_below_opset_13_is_refused() -> None:
    body = _sum_body([3])
    body.node[1].op_type = "Identity"
    scan = helper.make_node("Scan", ["s0", "x"], ["s", "y"], num_scan_inputs=1, body=body)
    model = _model([scan], [_vi("s0", [3]), _vi("x", [4, 3])], [_vi("s", None), _vi("y", None)], opset=11)
    _refused(model, "opset 11: upgrade")


# ---------------------------------------------------------------- Loop


def _matmul_body(cond_out: list[Any] | None = None) -> Any:
    """h = h @ W + i (W read from the main graph, i the iteration number);
    the scan output is the new h; the condition is passed through unless
    ``cond_out`` (nodes making 'cond_out') says otherwise."""
    nodes = cond_out if cond_out is not None else [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    nodes = [*nodes,
             helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
             helper.make_node("Cast", ["i"], ["i_f"], to=F),
             helper.make_node("Add", ["hw", "i_f"], ["h_out"]),
             helper.make_node("Identity", ["h_out"], ["h_scan"])]
    return helper.make_graph(nodes, "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                                             _vi("h_in", [2, 3])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("h_out", [2, 3]), _vi("h_scan", [2, 3])])


def _loop(body: Any, trip: int | None, cond: bool | None, *, dynamic: str = "") -> Any:
    """A Loop over ``body``; ``trip`` and ``cond`` as constants (None: left
    out), unless ``dynamic`` names one of them ("M", "cond") made a graph input."""
    inits = [_init("W", _random(3, 3) * 0.5)]
    inputs = [_vi("h0", [2, 3])]
    for name, value, dtype in (("M", trip, TensorProto.INT64), ("cond", cond, TensorProto.BOOL)):
        if name == dynamic:
            inputs.append(_vi(name, [], dtype))
        elif value is not None:
            inits.append(_init(name, np.asarray(value, helper.tensor_dtype_to_np_dtype(dtype))))
    names = ["M" if trip is not None or dynamic == "M" else "", "cond" if cond is not None or dynamic == "cond" else ""]
    loop = helper.make_node("Loop", [*names, "h0"], ["h", "hs"], body=body)
    return _model([loop], inputs, [_vi("h", None), _vi("hs", None)], inits)


def test_loop_with_a_matmul_body_and_the_iteration_number() -> None:
    rewritten = _assert_same(_loop(_matmul_body(), 4, True), {"h0": _random(2, 3)})
    assert sum(n.op_type == "MatMul" for n in rewritten.graph.node) == 4


def test_loop_without_a_condition_is_a_for_loop() -> None:
    _assert_same(_loop(_matmul_body(), 3, None), {"h0": _random(2, 3)})


def test_loop_whose_body_sets_a_constant_true_condition() -> None:
    true = [helper.make_node("Constant", [], ["cond_out"], value=_init("t", np.array(True)))]
    _assert_same(_loop(_matmul_body(true), 3, True), {"h0": _random(2, 3)})


def test_loop_whose_body_sets_a_constant_false_condition_runs_once() -> None:
    false = [helper.make_node("Constant", [], ["cond_out"], value=_init("f", np.array(False)))]
    rewritten = _assert_same(_loop(_matmul_body(false), 5, True), {"h0": _random(2, 3)})
    assert sum(n.op_type == "MatMul" for n in rewritten.graph.node) == 1


def test_loop_of_zero_iterations_without_scan_outputs() -> None:
    body = _matmul_body()
    del body.output[2]
    del body.node[-1]
    loop = helper.make_node("Loop", ["M", "cond", "h0"], ["h"], body=body)
    model = _model([loop], [_vi("h0", [2, 3])], [_vi("h", None)],
                   [_init("M", np.int64(0)), _init("cond", np.array(True)), _init("W", _random(3, 3))])
    _assert_same(model, {"h0": _random(2, 3)})


def test_loop_with_a_nested_if_reading_the_body_state() -> None:
    """The nested If's branches read the body's h_in and i: renamed in every copy."""
    then = helper.make_graph([helper.make_node("Neg", ["h_in"], ["r"])], "then", [], [_vi("r", [2, 3])])
    other = helper.make_graph([helper.make_node("Abs", ["h_in"], ["q"])], "else", [], [_vi("q", [2, 3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("If", ["flag"], ["picked"], then_branch=then, else_branch=other),
         helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Add", ["picked", "i_f"], ["h_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("h_in", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("h_out", [2, 3])])
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h"], body=body)
    model = _model([loop], [_vi("h0", [2, 3])], [_vi("h", None)],
                   [_init("M", np.int64(3)), _init("flag", np.array(True))])
    rewritten = _assert_same(model, {"h0": _random(2, 3)})
    assert "If" not in _ops(rewritten)


_SLICED = np.arange(1, 6, dtype=np.float32)


def _slicing_loop() -> Any:
    """Like ONNX's test_loop11 (its inputs constant): a Slice whose start is
    the iteration number, a constant once unrolled."""
    x = _SLICED
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Constant", [], ["x"], value=_init("xv", x)),
         helper.make_node("Constant", [], ["one"], value=_init("ov", np.int64(1))),
         helper.make_node("Constant", [], ["zero"], value=_init("zv", np.array([0], np.int64))),
         helper.make_node("Add", ["i", "one"], ["end"]),
         helper.make_node("Unsqueeze", ["i", "zero"], ["start_1d"]),
         helper.make_node("Unsqueeze", ["end", "zero"], ["end_1d"]),
         helper.make_node("Slice", ["x", "start_1d", "end_1d"], ["piece"]),
         helper.make_node("Add", ["y_in", "piece"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["y_scan"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("y_in", [1])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("y_out", [1]), _vi("y_scan", [1])])
    loop = helper.make_node("Loop", ["M", "cond", "y"], ["res_y", "res_scan"], body=body)
    return _model([loop], [_vi("y", [1])], [_vi("res_y", None), _vi("res_scan", None)],
                  [_init("M", np.int64(5)), _init("cond", np.array(True))])


def test_a_body_that_slices_by_the_iteration_number() -> None:
    rewritten = _assert_same(_slicing_loop(), {"y": np.array([-2], np.float32)})
    got = _run(rewritten, {"y": np.array([-2], np.float32)})
    np.testing.assert_array_equal(got[1].ravel(), -2 + np.cumsum(_SLICED))


def _range_loop(start: str = "start") -> Any:
    """ONNX's expanded Range: the trip count and condition computed as
    Ceil((limit - start) / delta), folded when start, limit, delta are constants."""
    nodes = [helper.make_node("Sub", ["limit", start], ["span"]),
             helper.make_node("Cast", ["span"], ["span_f"], to=F),
             helper.make_node("Cast", ["delta"], ["delta_f"], to=F),
             helper.make_node("Div", ["span_f", "delta_f"], ["ratio"]),
             helper.make_node("Ceil", ["ratio"], ["ceiling"]),
             helper.make_node("Relu", ["ceiling"], ["n_f"]),
             helper.make_node("Cast", ["n_f"], ["n"], to=TensorProto.INT64),
             helper.make_node("Cast", ["n_f"], ["go"], to=TensorProto.BOOL)]
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["prev", "delta"], ["cur"]),
         helper.make_node("Identity", ["prev"], ["item"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                 _vi("prev", [], TensorProto.INT32)],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("cur", [], TensorProto.INT32), _vi("item", [], TensorProto.INT32)])
    nodes.append(helper.make_node("Loop", ["n", "go", start], ["last", "out"], body=body))
    inits = [_init("limit", np.int32(10)), _init("delta", np.int32(-3))]
    inputs = [_vi("start", [], TensorProto.INT32)] if start == "start" else []
    if start != "start":
        inits.append(_init(start, np.int32(20)))
    return _model(nodes, inputs, [_vi("out", None, TensorProto.INT32)], inits)


def test_loop_whose_trip_count_is_computed_from_constants() -> None:
    rewritten = _assert_same(_range_loop("first"), {})
    np.testing.assert_array_equal(_run(rewritten, {})[0], np.arange(20, 10, -3, dtype=np.int32))


# ---------------------------------------------------------------- Loop refused


def test_loop_with_a_dynamic_trip_count_is_refused() -> None:
    _refused(_loop(_matmul_body(), None, True, dynamic="M"), "Loop node", "trip count 'M' is not a constant")


def test_loop_with_a_trip_count_computed_from_an_input_is_refused() -> None:
    _refused(_range_loop(), "trip count 'n' is not a constant")


def test_loop_with_a_dynamic_condition_is_refused() -> None:
    _refused(_loop(_matmul_body(), 3, None, dynamic="cond"), "condition 'cond' is not a constant")


def test_loop_whose_body_computes_its_condition_is_refused() -> None:
    computed = [helper.make_node("Less", ["i", "two"], ["cond_out"])]
    body = _matmul_body(computed)
    body.initializer.append(_init("two", np.int64(2)))
    _refused(_loop(body, 5, True), "computes its condition output 'cond_out'", "data-dependent")


def test_loop_without_a_condition_whose_body_computes_one_is_refused() -> None:
    """The spec ignores the body's condition then, onnxruntime does not."""
    false = [helper.make_node("Constant", [], ["cond_out"], value=_init("f", np.array(False)))]
    _refused(_loop(_matmul_body(false), 3, None), "no condition input", "runtimes disagree")


def test_an_endless_loop_is_refused() -> None:
    _refused(_loop(_matmul_body(), None, True), "an endless loop")
    _refused(_loop(_matmul_body(), None, None), "an endless loop")


def test_too_long_a_loop_is_refused() -> None:
    _refused(_loop(_matmul_body(), 2000, True), "2000 iterations", "more than 1024")


def test_zero_iteration_loop_with_scan_outputs_is_refused() -> None:
    _refused(_loop(_matmul_body(), 3, False), "zero iterations with scan outputs")


# ---------------------------------------------------------------- end to end on XLA CPU


_END_TO_END: dict[str, Any] = {
    "scan-reversed-axis-1": lambda: (_scan_sum([2, 5], [2], scan_input_axes=[1], scan_output_axes=[-1],
                                               scan_input_directions=[1], scan_output_directions=[1]),
                                     {"s0": _random(2), "x": _random(2, 5)}),
    "nested-scans": lambda: (_nested_scans(), {"a0": _random(), "x": _random(2, 3)}),
    "loop-matmul": lambda: (_loop(_matmul_body(), 4, True), {"h0": _random(2, 3)}),
    "loop-slicing": lambda: (_slicing_loop(), {"y": np.array([-2], np.float32)}),
}


@pytest.fixture(scope="module")
def xla_cpu() -> Iterator[tuple[Any, Any]]:
    pytest.importorskip("nx_hal_tpu", reason="the tpu plugin is not installed")
    pytest.importorskip("torch_mlir", reason="ONNX → StableHLO needs torch-mlir")
    import nx_hal
    from nx_hal.onnx import convert

    try:
        device = nx_hal.device("tpu:cpu")
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no XLA CPU device: {exc}")
    with convert.ConverterWorker(timeout=300) as worker:
        yield device, worker


@pytest.mark.parametrize("name", sorted(_END_TO_END))
def test_end_to_end_on_xla_cpu(name: str, xla_cpu: tuple[Any, Any], tmp_path: Path) -> None:
    """The unrolled model converted to StableHLO, compiled and run on XLA
    CPU, against onnxruntime on the original."""
    from nx_hal.onnx.convert import onnx_to_stablehlo, target_version_of

    device, worker = xla_cpu
    model, feeds = _END_TO_END[name]()
    rewritten = rewrites.apply(model)
    result = onnx_to_stablehlo(rewritten.SerializeToString(), target_version=target_version_of(device),
                               cache_dir=tmp_path / "stablehlo", worker=worker)
    exe = device.compile(result.module, format="stablehlo")
    constants = {i.name for i in rewritten.graph.initializer}
    names = [v.name for v in rewritten.graph.input if v.name not in constants]
    got = [o.to_numpy() for o in exe(*[device.put(feeds[n]) for n in names])]
    want = _run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
