"""The compile option ``precision`` where the core converts ONNX (issue #31):
"bf16" and "f16" compute a model's products (MatMul, Gemm, Conv, Einsum) in
that type, the rest in float32, with the npu plugin's names; checked
against onnxruntime in float32, and against the float32 compile to show the
products really changed type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal import examples
from nx_hal.errors import InvalidArgumentError
from tests.plugin_env import device_available

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch_mlir")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nx_hal.onnx import precision  # noqa: E402

TPU, NPU = "tpu:cpu", "npu:cpu"
#: Relative to the output's largest magnitude: bf16 keeps 8 bits of mantissa, f16 11.
BOUND = {"f32": 1e-5, "bf16": 3e-2, "f16": 4e-3}


def _tpu() -> nx_hal.Device:
    if not device_available(TPU):
        pytest.skip(f"no {TPU} device")
    return nx_hal.device(TPU)


def _oracle(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {session.get_inputs()[0].name: x})[0])


def _matmuls(seed: int = 0) -> bytes:
    """x[4, 64] @ w1 -> Relu -> @ w2 inside an If's branch: products at the top and in a subgraph."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 8)) * 0.3).astype(np.float32), "w2")
    branch = helper.make_graph([helper.make_node("MatMul", ["h", "w2"], ["y_then"])], "then", [],
                               [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, [4, 8])])
    other = helper.make_graph([helper.make_node("MatMul", ["h", "w2"], ["y_else"])], "else", [],
                              [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [4, 8])])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["m"]), helper.make_node("Relu", ["m"], ["h"]),
         helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
         helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(onnx.shape_inference.infer_shapes(model).SerializeToString())


@pytest.mark.parametrize("name", ["mlp", "cnn", "attention"])
def test_each_precision_against_onnxruntime(name: str) -> None:
    dev = _tpu()
    path = examples.path(name)
    first = onnx.load(str(path)).graph.input[0]
    shape = [d.dim_value or 1 for d in first.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = _oracle(path, x)
    got = {}
    for p in ("f32", "bf16", "f16"):
        exe = dev.compile(path, precision=p)
        assert [s.dtype for s in exe.inputs] == ["f32"] and exe.outputs[0].dtype == "f32"  # the model's types kept
        got[p] = exe(x)[0].to_numpy()
        err = float(np.abs(got[p] - want).max() / np.abs(want).max())
        assert err <= BOUND[p], (p, err)
    # The products really ran in 16 bits: not the float32 result.
    assert not np.array_equal(got["bf16"], got["f32"]) and not np.array_equal(got["f16"], got["f32"])
    assert not np.array_equal(got["bf16"], got["f16"])


def test_products_in_subgraphs_too(tmp_path: Path) -> None:
    data = _matmuls()
    notes: list[str] = []
    cast = precision.apply(onnx.load_from_string(data), "bf16", notes)
    casts = [n for n in cast.graph.node if n.op_type == "Cast"]
    inner = [n for n in cast.graph.node[-1].attribute[0].g.node if n.op_type == "Cast"]
    assert len(casts) == 3 and len(inner) == 3  # two operands in, the result out; at both levels
    assert {a.i for n in casts for a in n.attribute} == {TensorProto.BFLOAT16, TensorProto.FLOAT}
    assert notes and "3 product(s)" in notes[0]  # the top one, and one in each branch
    assert precision.apply(onnx.load_from_string(data), "f32", []) is not None  # the model as it is

    dev = _tpu()
    (tmp_path / "m.onnx").write_bytes(data)
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    want = _oracle(tmp_path / "m.onnx", x)
    exact = dev.compile(tmp_path / "m.onnx")(x)[0].to_numpy()
    low = dev.compile(tmp_path / "m.onnx", precision="bf16")(x)[0].to_numpy()
    assert np.abs(exact - want).max() <= 1e-5 * np.abs(want).max()
    assert 0 < np.abs(low - want).max() <= BOUND["bf16"] * np.abs(want).max()


def test_the_same_file_at_two_precisions_is_two_executables() -> None:
    """The memo and the store keep each precision apart: a second compile at
    another precision is not the first one's executable."""
    dev = _tpu()
    path = examples.path("mlp")
    first = dev.compile(path, precision="bf16")
    assert dev.compile(path, precision="bf16") is first
    assert dev.compile(path) is not first and dev.compile(path, precision="f16") is not first
    from nx_hal.onnx.convert import _cache_key

    keys = {_cache_key(b"m", {}, "1.9.0", True, "tm", "cpu", p) for p in (None, "bf16", "f16")}
    assert len(keys) == 3
    assert _cache_key(b"m", {}, "1.9.0", True, "tm", "cpu") == _cache_key(b"m", {}, "1.9.0", True, "tm", "cpu", None)


@pytest.mark.parametrize("value", ["fp8", "F16", "", 16, None, True])
def test_a_bad_precision_is_refused_by_name(value: Any) -> None:
    dev = _tpu()
    with pytest.raises(InvalidArgumentError, match=r"option 'precision': expected one of f32, bf16, f16"):
        dev.compile(examples.path("mlp"), precision=value)


def test_precision_is_for_onnx_models() -> None:
    dev = _tpu()
    jax = pytest.importorskip("jax")
    lowered = jax.jit(lambda a: a @ a).lower(np.ones((4, 4), np.float32))
    with pytest.raises(InvalidArgumentError, match="applies to ONNX models.*types it was written in"):
        dev.compile(lowered, precision="bf16")
    assert dev.compile(lowered, precision="f32") is not None  # f32: the program's own types


def test_the_npu_plugin_keeps_its_own_option() -> None:
    """On OpenVINO the option is the plugin's (OpenVINO's inference precision), as before."""
    if not device_available(NPU):
        pytest.skip(f"no {NPU} device")
    dev = nx_hal.device(NPU)
    x = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
    want = _oracle(examples.path("mlp"), x)
    got = dev.compile(examples.path("mlp"), precision="f32")(x)[0].to_numpy()
    assert np.abs(got - want).max() <= 1e-5
    with pytest.raises(InvalidArgumentError, match="precision"):
        dev.compile(examples.path("mlp"), precision="fp8")


def test_nodes_of_the_same_name_get_casts_of_their_own() -> None:
    """ONNX does not ask node names to be unique: two products named alike, reading the same
    input, still make a graph whose every value has one producer."""
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"), helper.make_node("MatMul", ["x", "w"], ["b"], name="mm"),
         helper.make_node("Add", ["a", "b"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    cast = precision.apply(model, "f16", [])
    onnx.checker.check_model(cast, full_check=True)
    # onnxruntime refuses such a model outright; the device compiles it.
    x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    got = _tpu().compile(model.SerializeToString(), format="onnx", precision="f16")(x)[0].to_numpy()
    np.testing.assert_allclose(got, 2 * x.astype(np.float16).astype(np.float32), rtol=1e-3)
