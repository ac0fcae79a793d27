"""Writes the example models nx_hal ships (nx_hal/examples/, package data;
``examples/mlp.onnx`` and ``examples/mlp_reference.txt`` link there). Run once;
the results are committed because they are small. For each model, a fixed
input and the output numpy computes for it from the model's own weights, in
float64, as ``NAME_reference.txt``: ``nx-hal run --example NAME`` and
``examples/cpp/run_model`` check a device against it.

Each model's weights come from a seeded generator and the file is written
only when its bytes changed, so running this again changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "nx_hal" / "examples"
Weights = dict[str, np.ndarray]


def _model(name: str, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], weights: Weights) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()]
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="nx_hal examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def _weights(model: onnx.ModelProto) -> Weights:
    """The initializers as float64: the reference computes from the model's own float32 values."""
    return {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}


# -- mlp: the README's model ----------------------------------------------------------------------

def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(2026)
    weights = {"w1": rng.standard_normal((64, 32)) / np.sqrt(64), "b1": rng.standard_normal(32) * 0.01,
               "w2": rng.standard_normal((32, 10)) / np.sqrt(32), "b2": rng.standard_normal(10) * 0.01}
    nodes = [
        helper.make_node("Gemm", ["image", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
    ]
    return _model("main", nodes, [_f32("image", [1, 64])], [_f32("probabilities", [1, 10])], weights)


def mlp_forward(w: Weights, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    hidden = np.maximum(x["image"] @ w["w1"] + w["b1"], 0.0)
    return {"probabilities": _softmax(hidden @ w["w2"] + w["b2"])}


# -- cnn: convolutions and pooling ----------------------------------------------------------------

def cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(2027)
    weights = {"c1": rng.standard_normal((4, 1, 3, 3)) / 3, "c1b": rng.standard_normal(4) * 0.1,
               "c2": rng.standard_normal((8, 4, 3, 3)) / 6, "c2b": rng.standard_normal(8) * 0.1,
               "fc": rng.standard_normal((8, 10)) / np.sqrt(8), "fcb": rng.standard_normal(10) * 0.1}
    nodes = [
        helper.make_node("Conv", ["image", "c1", "c1b"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2", "c2b"], ["a2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
    ]
    return _model("cnn", nodes, [_f32("image", [1, 1, 16, 16])], [_f32("probabilities", [1, 10])], weights)


def _conv3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NCHW convolution, 3x3 kernels, padding 1, stride 1."""
    windows = sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w) + b[None, :, None, None]  # type: ignore[no-any-return]


def cnn_forward(w: Weights, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    r1 = np.maximum(_conv3x3(x["image"], w["c1"], w["c1b"]), 0.0)
    n, c, h, wd = r1.shape
    p1 = r1.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    r2 = np.maximum(_conv3x3(p1, w["c2"], w["c2b"]), 0.0)
    return {"probabilities": _softmax(r2.mean(axis=(2, 3)) @ w["fc"] + w["fcb"])}


# -- attention: one transformer block's self-attention --------------------------------------------

def attention() -> onnx.ModelProto:
    rng = np.random.default_rng(2028)
    d = 16
    weights = {n: rng.standard_normal((d, d)) / np.sqrt(d) for n in ("wq", "wk", "wv", "wo")}
    weights.update({"scale": np.array(1 / np.sqrt(d)), "gamma": 1 + rng.standard_normal(d) * 0.1,
                    "beta": rng.standard_normal(d) * 0.1})
    nodes = [
        helper.make_node("MatMul", ["tokens", "wq"], ["q"]),
        helper.make_node("MatMul", ["tokens", "wk"], ["k"]),
        helper.make_node("MatMul", ["tokens", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["mixed"]),
        helper.make_node("MatMul", ["mixed", "wo"], ["projected"]),
        helper.make_node("Add", ["projected", "tokens"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["hidden"], axis=-1, epsilon=1e-5),
    ]
    return _model("attention", nodes, [_f32("tokens", [1, 6, d])], [_f32("hidden", [1, 6, d])], weights)


def attention_forward(w: Weights, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    t = x["tokens"]
    q, k, v = t @ w["wq"], t @ w["wk"], t @ w["wv"]
    attn = _softmax(q @ k.transpose(0, 2, 1) * w["scale"])
    r = attn @ v @ w["wo"] + t
    norm = (r - r.mean(axis=-1, keepdims=True)) / np.sqrt(r.var(axis=-1, keepdims=True) + 1e-5)
    return {"hidden": norm * w["gamma"] + w["beta"]}


# Each example: its model, its numpy forward pass, and the seed of its reference input.
MODELS: dict[str, tuple[Callable[[], onnx.ModelProto],
                        Callable[[Weights, dict[str, np.ndarray]], dict[str, np.ndarray]], int]] = {
    "mlp": (mlp, mlp_forward, 64),
    "cnn": (cnn, cnn_forward, 65),
    "attention": (attention, attention_forward, 66),
}


def reference_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """A fixed float32 input per model input."""
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _tensor_text(role: str, name: str, array: np.ndarray, per_line: int = 8) -> str:
    """One tensor in the reference format: a header line, then its values
    (each float32's shortest decimal form, which reads back to the same float)."""
    lines = [f"{role} {name} f32 {array.ndim} {' '.join(str(d) for d in array.shape)}"]
    flat = [str(v) for v in array.astype(np.float32).reshape(-1)]
    lines += [" ".join(flat[i:i + per_line]) for i in range(0, len(flat), per_line)]
    return "\n".join(lines) + "\n"


def reference_text(name: str, model: onnx.ModelProto) -> str:
    """The reference file for example ``name``: its inputs and numpy's outputs,
    as text a C++ program reads with iostream (format in examples/cpp/run_model.cpp)."""
    _, forward, seed = MODELS[name]
    inputs = reference_inputs(model, seed)
    outputs = forward(_weights(model), {k: v.astype(np.float64) for k, v in inputs.items()})
    return (f"# Reference for {name}.onnx, written by examples/make_models.py: a fixed input and\n"
            "# the output numpy computes from the model's weights.\n"
            "# Each tensor: input|output NAME DTYPE RANK DIM..., then its values in row-major order.\n"
            + "".join(_tensor_text("input", k, v) for k, v in inputs.items())
            + "".join(_tensor_text("output", o.name, outputs[o.name]) for o in model.graph.output))


def _write(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        print(f"{path} is up to date")
    else:
        path.write_bytes(data)
        print(f"wrote {path}")


if __name__ == "__main__":
    for example, (make, _forward, _seed) in MODELS.items():
        model_path = OUT / f"{example}.onnx"
        _write(model_path, make().SerializeToString())
        # From the file on disk, so the reference always matches the committed model.
        _write(OUT / f"{example}_reference.txt", reference_text(example, onnx.load(model_path)).encode())
