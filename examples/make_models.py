"""Writes the example models under examples/ (run once; the results are committed
because they are small): ``mlp.onnx``, a 64-32-10 classifier with fixed
seeded weights, the model the README's first command runs, and
``mlp_reference.txt``, a fixed input and the output numpy computes for it from
the model's own weights, which ``examples/cpp/run_model`` checks a device against."""

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


def mlp_reference_input() -> np.ndarray:
    """The fixed [1, 64] float32 input of the reference."""
    return np.random.default_rng(64).standard_normal((1, 64)).astype(np.float32)


def mlp_forward(model: onnx.ModelProto, image: np.ndarray) -> np.ndarray:
    """The MLP's output for `image`, computed with numpy (in float64, from the
    model's float32 initializers) and rounded to float32."""
    weights = {init.name: numpy_helper.to_array(init).astype(np.float64) for init in model.graph.initializer}
    hidden = np.maximum(image.astype(np.float64) @ weights["w1"] + weights["b1"], 0.0)
    logits = hidden @ weights["w2"] + weights["b2"]
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)


def _tensor_text(role: str, name: str, array: np.ndarray, per_line: int = 8) -> str:
    """One tensor in the reference format: a header line, then its values
    (each float32's shortest decimal form, which reads back to the same float)."""
    lines = [f"{role} {name} f32 {array.ndim} {' '.join(str(d) for d in array.shape)}"]
    flat = [str(v) for v in array.astype(np.float32).reshape(-1)]
    lines += [" ".join(flat[i:i + per_line]) for i in range(0, len(flat), per_line)]
    return "\n".join(lines) + "\n"


def reference_text(model: onnx.ModelProto, model_name: str = "mlp.onnx") -> str:
    """The reference file for `model`: its input and numpy's output, as text a
    C++ program reads with iostream (format in examples/cpp/run_model.cpp)."""
    image = mlp_reference_input()
    graph = model.graph
    return (
        f"# Reference for {model_name}, written by examples/make_models.py: a fixed input and\n"
        "# the output numpy computes from the model's weights.\n"
        "# Each tensor: input|output NAME DTYPE RANK DIM..., then its values in row-major order.\n"
        + _tensor_text("input", graph.input[0].name, image)
        + _tensor_text("output", graph.output[0].name, mlp_forward(model, image))
    )


if __name__ == "__main__":
    model_path = HERE / "mlp.onnx"
    data = mlp().SerializeToString()
    if model_path.exists() and model_path.read_bytes() == data:
        print(f"{model_path} is up to date")
    else:
        model_path.write_bytes(data)
        print(f"wrote {model_path}")
    # From the file on disk, so the reference always matches the committed model.
    (HERE / "mlp_reference.txt").write_text(reference_text(onnx.load(model_path)))
    print(f"wrote {HERE / 'mlp_reference.txt'}")
