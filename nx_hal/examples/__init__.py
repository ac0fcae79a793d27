"""The example models that ship with nx_hal, each with a reference: a fixed
input and the output numpy computes for it from the model's own weights.

``nx-hal run --example NAME`` runs one on the best device present and checks
it against its reference. The files are package data (``NAME.onnx`` and
``NAME_reference.txt`` beside this module), written by
``examples/make_models.py`` in the repository.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["NAMES", "describe", "path", "reference"]

_HERE = Path(__file__).resolve().parent

# Each example and what it is (`nx-hal run --help` and the docs' examples index list them).
_ABOUT = {
    "mlp": "a 64-32-10 classifier (Gemm, Relu, Softmax): image f32[1, 64] -> probabilities f32[1, 10]",
    "cnn": "a small image classifier (Conv, Relu, MaxPool, GlobalAveragePool, Gemm, Softmax): "
           "image f32[1, 1, 16, 16] -> probabilities f32[1, 10]",
    "attention": "one transformer block's self-attention (MatMul, Softmax, residual, LayerNormalization): "
                 "tokens f32[1, 6, 16] -> hidden f32[1, 6, 16]",
}
NAMES: tuple[str, ...] = tuple(_ABOUT)
"""The examples' names: ``mlp``, ``cnn``, ``attention``."""
_DTYPES = {"f32": np.float32}


def describe(name: str) -> str:
    """One line saying what the example ``name`` is."""
    return _ABOUT[_known(name)]


def path(name: str) -> Path:
    """The installed ONNX file of the example ``name`` (one of NAMES)."""
    return _HERE / f"{_known(name)}.onnx"


def reference(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The example's reference: its inputs and numpy's outputs for them, by name.

    The file is text a C++ program reads with iostream: ``#`` starts a
    comment; each tensor is ``input|output NAME DTYPE RANK DIM...`` followed
    by its values in row-major order."""
    tensors: dict[str, dict[str, np.ndarray]] = {"input": {}, "output": {}}
    header: list[str] = []
    values: list[float] = []

    def close() -> None:
        if header:
            role, tensor, dtype, rank = header[0], header[1], header[2], int(header[3])
            shape = tuple(int(d) for d in header[4:4 + rank])
            tensors[role][tensor] = np.array(values, _DTYPES[dtype]).reshape(shape)

    for line in (_HERE / f"{_known(name)}_reference.txt").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0] in tensors:
            close()
            header, values = words, []
        elif words:
            values.extend(float(v) for v in words)
    close()
    return tensors["input"], tensors["output"]


def _known(name: str) -> str:
    if name not in _ABOUT:
        raise ValueError(f"no example '{name}' (examples: {', '.join(NAMES)})")
    return name
