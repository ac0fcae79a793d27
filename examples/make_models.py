"""Writes the example models under examples/ (run once; the results are committed
because they are small): ``mlp.onnx``, a 64-32-10 classifier with fixed
seeded weights, the model the README's first command runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def mlp(batch: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(2026)
    w1 = (rng.standard_normal((64, 32)) / np.sqrt(64)).astype(np.float32)
    b1 = (rng.standard_normal(32) * 0.01).astype(np.float32)
    w2 = (rng.standard_normal((32, 10)) / np.sqrt(32)).astype(np.float32)
    b2 = (rng.standard_normal(10) * 0.01).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [
        helper.make_node("Gemm", ["image", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "main",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="nx_hal examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(mlp(), HERE / "mlp.onnx")
    print(f"wrote {HERE / 'mlp.onnx'}")
