"""ONNX models the converter and fallback tests share, built with onnx.helper
(weights from a fixed seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_RNG = np.random.default_rng(0)

def _w(name: str, shape: tuple[int, ...], scale: float = 0.3) -> Any:
    return numpy_helper.from_array((_RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _c(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _vi(name: str, shape: list[Any], dtype: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any], opset: int = 17,
           name: str = "g") -> bytes:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def mlp(batch: Any = "N", features: int = 4, opset: int = 13) -> bytes:
    """Dynamic batch ('N') and opset 13 by default: exercises the opset upgrade too."""
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "B1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "W2", "B2"], ["y"]),
    ]
    inits = [_w("W1", (features, 16)), _w("B1", (16,)), _w("W2", (16, 3)), _w("B2", (3,))]
    return _model(nodes, [_vi("x", [batch, features])], [_vi("y", [batch, 3])], inits, opset=opset)


def cnn() -> bytes:
    nodes = [
        helper.make_node("Conv", ["x", "K", "KB"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "W", "B"], ["y"], transB=1),
    ]
    inits = [
        _w("K", (4, 3, 3, 3)), _w("KB", (4,)), _c("s", np.linspace(0.5, 1.5, 4, dtype=np.float32)),
        _w("b", (4,)), _w("m", (4,)), _c("v", np.linspace(0.5, 2.0, 4, dtype=np.float32)),
        _w("W", (5, 4)), _w("B", (5,)),
    ]
    return _model(nodes, [_vi("x", [2, 3, 8, 8])], [_vi("y", [2, 5])], inits)


def transformer_block() -> bytes:
    """Self-attention, residual, LayerNormalization, Erf-based GELU MLP."""
    d = 8
    inits = [
        _w("Wq", (d, d)), _w("Wk", (d, d)), _w("Wv", (d, d)), _c("scale", np.float32(1 / np.sqrt(d))),
        _c("g", np.ones(d, np.float32)), _c("b", np.zeros(d, np.float32)), _w("W1", (d, 16)), _w("W2", (16, d)),
        _c("sqrt2", np.float32(np.sqrt(2))), _c("one", np.float32(1)), _c("half", np.float32(0.5)),
    ]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "Wq"], ["q"]), n("MatMul", ["x", "Wk"], ["k"]), n("MatMul", ["x", "Wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q", "kt"], ["s0"]),
        n("Mul", ["s0", "scale"], ["s"]), n("Softmax", ["s"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["a"]),
        n("Add", ["a", "x"], ["r"]), n("LayerNormalization", ["r", "g", "b"], ["ln"], axis=-1),
        n("MatMul", ["ln", "W1"], ["f1"]), n("Div", ["f1", "sqrt2"], ["e0"]), n("Erf", ["e0"], ["e1"]),
        n("Add", ["e1", "one"], ["e2"]), n("Mul", ["f1", "e2"], ["e3"]), n("Mul", ["e3", "half"], ["gelu"]),
        n("MatMul", ["gelu", "W2"], ["f2"]), n("Add", ["f2", "ln"], ["y"]),
    ]
    return _model(nodes, [_vi("x", [2, 4, d])], [_vi("y", [2, 4, d])], inits)


def resize() -> bytes:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    return _model([node], [_vi("x", [1, 1, 4, 4])], [_vi("y", [1, 1, 8, 8])],
                  [_c("scales", np.array([1, 1, 2, 2], np.float32))])


def if_model() -> bytes:
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t", [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [_vi("e", [2])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
    ]
    return _model(nodes, [_vi("x", [2])], [_vi("y", [2])], [_c("zero", np.float32(0))])


def qdq_int8() -> bytes:
    """Int8 QDQ around a MatMul, as onnxruntime's quantize_static writes it."""
    n = helper.make_node
    nodes = [
        n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        n("DequantizeLinear", ["Wq", "ws", "wz"], ["wd"]), n("MatMul", ["xd", "wd"], ["y"]),
    ]
    inits = [
        _c("xs", np.float32(0.05)), _c("xz", np.int8(0)), _c("ws", np.float32(0.02)), _c("wz", np.int8(0)),
        _c("Wq", _RNG.integers(-100, 100, (4, 3)).astype(np.int8)),
    ]
    return _model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 3])], inits)


def maxpool_uint8() -> bytes:
    """MaxPool over uint8: segfaults torch-mlir's lowering (20261001; a 3-D
    AveragePool did too, before nx_hal.onnx.rewrites.pooling rewrote it)."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])
    return _model([node], [_vi("x", [1, 1, 4, 4], TensorProto.UINT8)], [_vi("y", [1, 1, 3, 3], TensorProto.UINT8)], [])


def weighted_file(folder: Path, weight: float, *, external: bool = False, gather: bool = False) -> Path:
    """``folder/model.onnx``: x * W (x: f32[4]), or with ``gather`` W indexed
    by an int64 input ``idx`` (node 'lookup', its indices checked before each
    run); W is four times ``weight``, in ``weights.bin`` beside it with
    ``external``. Rewritten in place by a second call: same size, same inode."""
    from onnx.external_data_helper import convert_model_to_external_data

    w = numpy_helper.from_array(np.full(4, weight, np.float32), "W")
    if gather:
        x = _vi("idx", [4], TensorProto.INT64)
        node = helper.make_node("Gather", ["W", "idx"], ["y"], name="lookup")
    else:
        x = _vi("x", [4])
        node = helper.make_node("Mul", ["x", "W"], ["y"])
    model = helper.make_model(helper.make_graph([node], "g", [x], [_vi("y", [4])], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    if external:
        convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    path = folder / "model.onnx"
    onnx.save_model(model, path)
    return path
