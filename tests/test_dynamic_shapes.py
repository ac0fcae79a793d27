"""Models with dynamic dims (issue #31): on a device that compiles one shape at
a time (tpu:cpu, XLA) they compile per input shape on first call, without
``input_shapes``; ``shape_buckets`` pads named dims up to a bucket and cuts
the outputs back, bounding the compiles; on npu:cpu (OpenVINO's own dynamic
shapes) the buckets pad the same way. Checked against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal.errors import InvalidArgumentError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TPU, NPU = "tpu:cpu", "npu:cpu"


def _available(selector: str) -> bool:
    try:
        return nx_hal.device(selector) is not None
    except nx_hal.NxHalError:
        return False


def _on(*selectors: str) -> list[Any]:
    return [pytest.param(s, marks=pytest.mark.skipif(not _available(s), reason=f"no {s} device")) for s in selectors]


def _model(out_dims: list[Any] | None = None, *, second: bool = False) -> bytes:
    """x[batch, seq, 8] @ W, then a softmax over the last axis (each position
    on its own, so padding along batch or seq changes no kept result);
    with ``second``, y = that + z[batch, seq, 4]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Softmax", ["h"], ["s" if second else "y"], axis=-1)]
    if second:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 4]))
        nodes.append(helper.make_node("Add", ["s", "z"], ["y"]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims or ["batch", "seq", 4])
    graph = helper.make_graph(nodes, "dynamic", inputs, [out], [w])
    model: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return model


def _x(batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, seq, 8)).astype(np.float32)


def _reference(model: bytes, **feeds: np.ndarray) -> np.ndarray:
    return np.asarray(ort.InferenceSession(model).run(None, feeds)[0])


@pytest.mark.parametrize("selector", _on(TPU))
def test_compiled_per_shape_on_first_call(selector: str) -> None:
    model = _model()
    exe = nx_hal.device(selector).compile(model)
    assert isinstance(exe, nx_hal.DynamicExecutable)
    assert [(s.name, s.dtype, s.shape) for s in exe.inputs] == [("x", "f32", (None, None, 8))]
    assert [(s.name, s.shape) for s in exe.outputs] == [("y", (None, None, 4))]
    shapes = [(1, 5), (3, 5), (8, 5), (3, 2), (3, 11)]  # three batches, three lengths
    for batch, seq in shapes:
        x = _x(batch, seq, seed=batch * 100 + seq)
        (y,) = exe(x)
        assert y.shape == (batch, seq, 4)
        np.testing.assert_allclose(y.to_numpy(), _reference(model, x=x), rtol=1e-5, atol=1e-6)
    assert exe.shapes == [{"x": (b, s, 8)} for b, s in shapes]
    # A shape met before runs its executable again: no new compile.
    first = exe.executable_for(_x(3, 5))
    exe(_x(3, 5, seed=9))
    assert exe.executable_for(_x(3, 5)) is first and len(exe.shapes) == len(shapes)


@pytest.mark.parametrize("selector", _on(TPU, NPU))
def test_buckets_bound_the_compiles(selector: str) -> None:
    model = _model(second=True)
    exe = nx_hal.device(selector).compile(model, shape_buckets={"seq": [4, 16, 32]})
    assert isinstance(exe, nx_hal.DynamicExecutable)
    assert exe.buckets == {"seq": (4, 16, 32)}
    lengths = [1, 3, 4, 5, 9, 15, 16, 17, 25, 32]  # ten lengths, three buckets
    for seq in lengths:
        x = _x(2, seq, seed=seq)
        z = np.random.default_rng(seq).standard_normal((2, seq, 4)).astype(np.float32)
        (y,) = exe(x, z)
        assert y.shape == (2, seq, 4)  # cut back from the bucket
        np.testing.assert_allclose(y.to_numpy(), _reference(model, x=x, z=z), rtol=1e-5, atol=1e-6)
    assert len(exe.shapes) <= 3
    assert {s["x"][1] for s in exe.shapes} <= {4, 16, 32}
    with pytest.raises(InvalidArgumentError, match=r"dim 'seq' is 33, over the largest of its shape_buckets \[4, 16, 32\]"):
        exe(_x(2, 33), np.zeros((2, 33, 4), np.float32))


@pytest.mark.parametrize("selector", _on(TPU))
def test_inputs_that_break_the_declared_shapes_are_refused(selector: str) -> None:
    exe = nx_hal.device(selector).compile(_model(second=True))
    assert isinstance(exe, nx_hal.DynamicExecutable)
    z = np.zeros((2, 5, 4), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"input 'x' has shape \(2, 5\); the model declares rank 3 "
                                                   r"\(batch, seq, 8\)"):
        exe(np.zeros((2, 5), np.float32), z)
    with pytest.raises(InvalidArgumentError, match=r"input 'x' has shape \(2, 5, 7\); the model declares "
                                                   r"\(batch, seq, 8\)"):
        exe(np.zeros((2, 5, 7), np.float32), z)
    with pytest.raises(InvalidArgumentError, match=r"inputs 'x' and 'z' disagree on dim 'seq': 5 and 6"):
        exe(_x(2, 5), np.zeros((2, 6, 4), np.float32))
    with pytest.raises(InvalidArgumentError, match=r"expected 2 inputs \(x, z\), got 1"):
        exe(_x(2, 5))
    assert exe.shapes == []  # nothing was compiled for a refused call
    with pytest.raises(InvalidArgumentError, match="one executable per input shape"):
        exe.serialize()


@pytest.mark.parametrize(("buckets", "message"), [
    ({"len": [8]}, r"shape_buckets names 'len', which no input's dims name; the model's dynamic dims: 'batch', 'seq'"),
    ({"seq": []}, r"option 'shape_buckets': 'seq' must name a dim and give sizes >= 1"),
    ({"seq": [0, 8]}, r"option 'shape_buckets': 'seq' must name a dim and give sizes >= 1"),
    ({"seq": [True]}, r"option 'shape_buckets': 'seq' must name a dim and give sizes >= 1"),
    ({"seq": "8"}, r"option 'shape_buckets': 'seq' must name a dim and give sizes >= 1"),
    ([8, 16], r"option 'shape_buckets': expected a mapping of dim names to sizes"),
    ({}, r"option 'shape_buckets': expected a mapping of dim names to sizes"),
])
@pytest.mark.parametrize("selector", _on(TPU, NPU))
def test_bad_buckets_are_refused_at_compile(selector: str, buckets: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        nx_hal.device(selector).compile(_model(), shape_buckets=buckets)


@pytest.mark.parametrize("selector", _on(TPU, NPU))
def test_buckets_refuse_outputs_they_could_not_cut_back(selector: str) -> None:
    # The output's second dim is named by no input: padded, it could not be cut.
    with pytest.raises(InvalidArgumentError, match=r"output 'y' has dims \(batch, n, 4\) that the model "
                                                   r"does not tie to an input's"):
        nx_hal.device(selector).compile(_model(["batch", "n", 4]), shape_buckets={"seq": [8]})
    with pytest.raises(InvalidArgumentError, match="'input_shapes' and 'shape_buckets' exclude each other"):
        nx_hal.device(selector).compile(_model(), shape_buckets={"seq": [8]}, input_shapes={"x": [1, 8, 8]})


@pytest.mark.parametrize("selector", _on(TPU))
def test_input_shapes_still_fix_one_shape(selector: str) -> None:
    model = _model()
    exe = nx_hal.device(selector).compile(model, input_shapes={"x": [2, 3, 8]})
    assert isinstance(exe, nx_hal.Executable)
    x = _x(2, 3)
    np.testing.assert_allclose(exe(x)[0].to_numpy(), _reference(model, x=x), rtol=1e-5, atol=1e-6)
