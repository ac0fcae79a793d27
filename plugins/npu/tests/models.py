"""Small ONNX test models built with ``onnx.helper`` (deterministic weights).

Each builder returns an ``onnx.ModelProto`` that passes ``onnx.checker``.
Shared with the lead for ``examples/``; depends only on onnx and numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["mlp", "cnn", "transformer_block", "matmul", "add_two", "OPSET"]

OPSET = 20  # Gelu needs 20; LayerNormalization 17


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    # numpy scalars promote float32 to float64; every weight here is float32.
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def _model(graph: onnx.GraphProto, opset: int = OPSET) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="nx_hal tests")
    model.ir_version = 9  # readable by onnxruntime and OpenVINO alike
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(in_features: int = 16, hidden: int = 32, out_features: int = 8,
        batch: int | str = "N", seed: int = 0) -> onnx.ModelProto:
    """x[batch, in] -> Gemm -> Relu -> Gemm -> y[batch, out]; ``batch`` a
    number or a symbolic (dynamic) dimension name."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((in_features, hidden)).astype(np.float32) / np.sqrt(in_features)
    b1 = rng.standard_normal(hidden).astype(np.float32) * 0.1
    w2 = rng.standard_normal((hidden, out_features)).astype(np.float32) / np.sqrt(hidden)
    b2 = rng.standard_normal(out_features).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, in_features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, out_features])],
        [_init("w1", w1), _init("b1", b1), _init("w2", w2), _init("b2", b2)],
    )
    return _model(graph)


def cnn(channels: int = 3, size: int = 16, classes: int = 10, seed: int = 1) -> onnx.ModelProto:
    """x[1, C, H, W] -> Conv -> BatchNormalization -> Relu -> MaxPool ->
    Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> y[1, classes]."""
    rng = np.random.default_rng(seed)
    c1, c2 = 8, 16
    inits = [
        _init("k1", rng.standard_normal((c1, channels, 3, 3)).astype(np.float32) * 0.3),
        _init("kb1", rng.standard_normal(c1).astype(np.float32) * 0.1),
        _init("scale", rng.uniform(0.5, 1.5, c1).astype(np.float32)),
        _init("bias", rng.standard_normal(c1).astype(np.float32) * 0.1),
        _init("mean", rng.standard_normal(c1).astype(np.float32) * 0.1),
        _init("var", rng.uniform(0.5, 2.0, c1).astype(np.float32)),
        _init("k2", rng.standard_normal((c2, c1, 3, 3)).astype(np.float32) * 0.2),
        _init("kb2", rng.standard_normal(c2).astype(np.float32) * 0.1),
        _init("fc", rng.standard_normal((classes, c2)).astype(np.float32) * 0.3),
        _init("fcb", rng.standard_normal(classes).astype(np.float32) * 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "k1", "kb1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["bn"],
                         epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "k2", "kb2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])],
        inits,
    )
    return _model(graph)


def transformer_block(seq: int = 8, dim: int = 32, ffn: int = 64, seed: int = 2) -> onnx.ModelProto:
    """One pre-norm single-head transformer block on x[1, seq, dim]:
    LayerNormalization -> Q/K/V MatMul -> softmax(QK^T/sqrt(d)) V -> MatMul
    + residual -> LayerNormalization -> MatMul -> Gelu -> MatMul + residual."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        weights: np.ndarray = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        return weights

    inits = [
        _init("g1", rng.uniform(0.8, 1.2, dim).astype(np.float32)),
        _init("be1", rng.standard_normal(dim).astype(np.float32) * 0.1),
        _init("wq", w(dim, dim)), _init("wk", w(dim, dim)), _init("wv", w(dim, dim)),
        _init("wo", w(dim, dim)),
        _init("scale", np.array(1.0 / np.sqrt(dim), dtype=np.float32)),
        _init("g2", rng.uniform(0.8, 1.2, dim).astype(np.float32)),
        _init("be2", rng.standard_normal(dim).astype(np.float32) * 0.1),
        _init("w1", w(dim, ffn)), _init("w2", w(ffn, dim)),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g1", "be1"], ["n1"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["n1", "wq"], ["q"]),
        helper.make_node("MatMul", ["n1", "wk"], ["k"]),
        helper.make_node("MatMul", ["n1", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["a"], axis=-1),
        helper.make_node("MatMul", ["a", "v"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["h1"]),
        helper.make_node("LayerNormalization", ["h1", "g2", "be2"], ["n2"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["n2", "w1"], ["f1"]),
        helper.make_node("Gelu", ["f1"], ["f2"]),
        helper.make_node("MatMul", ["f2", "w2"], ["f3"]),
        helper.make_node("Add", ["h1", "f3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])],
        inits,
    )
    return _model(graph)


def matmul(m: int = 1, k: int = 64, n: int = 64, seed: int = 3) -> onnx.ModelProto:
    """y[m, n] = x[m, k] · W[k, n] (the benchmark's tiny and large models)."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [_init("w", weight)],
    )
    return _model(graph)


def add_two(shape: tuple[int, ...] = (2, 3)) -> onnx.ModelProto:
    """z = a + b * 2 over two float inputs (input-count and naming tests)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["b", "two"], ["b2"]), helper.make_node("Add", ["a", "b2"], ["z"])],
        "add_two",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(shape)),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, list(shape))],
        [_init("two", np.array(2.0, dtype=np.float32))],
    )
    return _model(graph)


def recurrent(op: str = "LSTM", direction: str = "forward", seq: int = 6, batch: int = 2, features: int = 4,
              hidden: int = 8, seed: int = 4) -> onnx.ModelProto:
    """One ONNX LSTM, GRU or RNN node (its Y output), weights from ``seed``."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seed)

    def weights(name: str, *shape: int) -> onnx.TensorProto:
        return _init(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))

    graph = helper.make_graph(
        [helper.make_node(op, ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction=direction)],
        f"{op.lower()}_{direction}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, dirs, batch, hidden])],
        [weights("W", dirs, gates * hidden, features), weights("R", dirs, gates * hidden, hidden),
         weights("B", dirs, 2 * gates * hidden)],
    )
    return _model(graph)
