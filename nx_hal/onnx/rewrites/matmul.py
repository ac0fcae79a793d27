"""MatMul of stacked rows by one matrix, as one 2-D MatMul, for CPUs.

A Linear layer over a rank-3 or rank-4 activation is ONNX ``MatMul(A, W)``
with A ``[..., M, K]`` and W ``[K, N]``: transformers' ``[batch, tokens,
features]``, ConvNeXt's and Swin's channels-last ``[N, H, W, C]``.
torch-mlir lowers it as a batched dot_general over A's leading axes, with W
broadcast to every batch index first, and XLA's CPU backend writes that
copy of the weights out on every call: convnext_tiny (64x64 images) moved
about 300 MB per inference and took 104 ms on tpu:cpu, where onnxruntime
takes 5 ms. Folding the leading axes into the rows leaves one 2-D MatMul,
one GEMM over the weights as they are; the Reshapes around it are free on
row-major data.

Only for ``Model.platform == "cpu"``, where it is measured; GPUs and TPUs
keep the MatMul (their layouts may make a Reshape a copy).
"""

from __future__ import annotations

import math
from typing import Any

from nx_hal.onnx.rewrites._graph import Block, Model

__all__ = ["matmul_needs_rewrite", "rewrite_matmul"]


def matmul_needs_rewrite(model: Model, node: Any) -> bool:
    """For a CPU: A of rank 3 or more, W a matrix, both shapes static and
    not empty (a 0 in Reshape's shape copies the input's axis before opset
    14's allowzero, and an empty product has nothing to gain)."""
    if model.platform != "cpu":
        return False
    shapes = model.static_shapes(node, node.input[0], node.input[1])
    if shapes is None or len(shapes[0]) < 3 or len(shapes[1]) != 2:
        return False
    return all(d > 0 for d in (*shapes[0], *shapes[1]))


def rewrite_matmul(model: Model, node: Any) -> list[Any]:
    """``Y = MatMul(A, W)`` as Reshape(A, [rows, K]), MatMul, Reshape to ``[..., M, N]``."""
    a, w = model.static_shapes(node, node.input[0], node.input[1]) or ((), ())
    block = Block(model, node)
    rows = block.op("Reshape", node.input[0], block.ints([math.prod(a[:-1]), a[-1]]))
    product = block.op("MatMul", rows, node.input[1])
    block.op("Reshape", product, block.ints([*a[:-1], w[1]]), out=node.output[0])
    return block.nodes
