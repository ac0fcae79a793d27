"""Writes the generated members of the seed corpus (ONNX models, StableHLO
bytecode); the hand-written ones (text, JSON, TOML) are committed as they are.

    python -m tests.fuzz.make_corpus      # needs onnx, and torch-mlir for bytecode
"""

from __future__ import annotations

import numpy as np

from tests.fuzz.targets import CORPUS


def _onnx_models() -> dict[str, bytes]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              inits: list[onnx.TensorProto]) -> bytes:
        g = helper.make_graph(nodes, "main", inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        serialized: bytes = m.SerializeToString()  # protobuf ships no type information
        return serialized

    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(3, np.float32), "b")
    k = numpy_helper.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "k")
    shape = numpy_helper.from_array(np.array([2, 6], np.int64), "shape")
    return {
        "add.onnx": model([helper.make_node("Add", ["x", "y"], ["z"])],
                          [vi("x", f, [4]), vi("y", f, [4])], [vi("z", f, [4])], []),
        "mlp.onnx": model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
                           helper.make_node("Relu", ["a"], ["z"])],
                          [vi("x", f, [2, 4])], [vi("z", f, [2, 3])], [w, b]),
        "conv.onnx": model([helper.make_node("Conv", ["x", "k"], ["y"], pads=[1, 1, 1, 1], strides=[1, 1]),
                            helper.make_node("MaxPool", ["y"], ["z"], kernel_shape=[2, 2], strides=[2, 2])],
                           [vi("x", f, [1, 1, 4, 4])], [vi("z", f, [1, 2, 2, 2])], [k]),
        "reshape.onnx": model([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                               helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
                               helper.make_node("Softmax", ["t"], ["z"], axis=1)],
                              [vi("x", f, [3, 4])], [vi("z", f, [6, 2])], [shape]),
    }


def main() -> None:
    (CORPUS / "onnx").mkdir(parents=True, exist_ok=True)
    for name, data in _onnx_models().items():
        (CORPUS / "onnx" / name).write_bytes(data)
    from nx_hal.onnx import convert

    out = CORPUS / "stablehlo-bytecode"
    out.mkdir(parents=True, exist_ok=True)
    for text in sorted((CORPUS / "stablehlo-text").glob("*.mlir")):
        result = convert.reserialize_stablehlo(text.read_bytes(), "1.0.0")
        (out / (text.stem + ".mlirbc")).write_bytes(result.module)
    print("written under", CORPUS)


if __name__ == "__main__":
    main()
