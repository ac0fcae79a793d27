"""The ONNX models bundled in the ``onnx`` wheel (onnx/backend/test/data), as
(name, model bytes, inputs, reference outputs) cases."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["Case", "SUITES", "cases", "data_root"]

SUITES = ("light", "pytorch-converted", "pytorch-operator", "simple")


@dataclass
class Case:
    suite: str
    name: str
    model: bytes
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def data_root() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _read_tensor(path: str) -> np.ndarray:
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def _light_input(info: onnx.ValueInfoProto) -> np.ndarray:
    # The inputs onnx's own runner feeds these models (runner.generate_dummy_data
    # with random=False): 0, 1/n, 2/n, ... in the input's shape.
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in info.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def cases() -> Iterator[Case]:
    root = data_root()
    for path in sorted(glob.glob(os.path.join(root, "light", "light_*.onnx"))):
        name = os.path.basename(path)[len("light_"):-len(".onnx")]
        outputs = sorted(glob.glob(path[:-len(".onnx")] + "_output_*.pb"))
        model = onnx.load(path)
        inits = {i.name for i in model.graph.initializer}
        inputs = [_light_input(i) for i in model.graph.input if i.name not in inits]
        with open(path, "rb") as f:
            yield Case("light", name, f.read(), inputs, [_read_tensor(p) for p in outputs])
    for suite in SUITES[1:]:
        for model_dir in sorted(glob.glob(os.path.join(root, suite, "*"))):
            model_path = os.path.join(model_dir, "model.onnx")
            data_dirs = sorted(glob.glob(os.path.join(model_dir, "test_data_set_*")))
            if not os.path.exists(model_path) or not data_dirs:
                continue
            data = data_dirs[0]
            n_in = len(glob.glob(os.path.join(data, "input_*.pb")))
            n_out = len(glob.glob(os.path.join(data, "output_*.pb")))
            with open(model_path, "rb") as f:
                yield Case(
                    suite, os.path.basename(model_dir), f.read(),
                    [_read_tensor(os.path.join(data, f"input_{i}.pb")) for i in range(n_in)],
                    [_read_tensor(os.path.join(data, f"output_{i}.pb")) for i in range(n_out)],
                )
