"""The compile option ``precision`` for ONNX models converted to StableHLO
(PJRT devices), with the npu plugin's names: "f32" (the model's own types),
"bf16" and "f16".

What it changes is the precision of the products: the inputs of MatMul,
Gemm, Conv, ConvTranspose and Einsum are cast to the chosen type and their
results back to float32, and everything else (additions, normalisations,
softmax, reductions) stays in float32. That is what a TPU's matrix unit
does with bfloat16 and what OpenVINO's ``INFERENCE_PRECISION_HINT`` does on
a CPU with AMX: the products, which hold nearly all the work and all the
weights, in 16 bits, the rest where 16 bits lose accuracy. The inputs and
outputs of the model keep their types, and so do its weights, which reach
their products through a cast (XLA's CPU keeps them in float32 in the
executable). onnxconverter-common's whole-graph float16 conversion is not
this: it clamps values past 1e4 and has no bfloat16.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

from nx_hal.converter import PRECISIONS

__all__ = ["PRECISIONS", "apply"]

#: The operators whose products change precision, and which of their inputs are operands.
_PRODUCTS: Final = {"MatMul": (0, 1), "Gemm": (0, 1, 2), "Conv": (0, 1, 2), "ConvTranspose": (0, 1, 2),
                    "Einsum": None}


def apply(model: Any, precision: str, notes: list[str]) -> Any:
    """``model`` (an onnx.ModelProto, shapes inferred) with its float32
    products computed in ``precision``; returned as it is for "f32"."""
    if precision == "f32":
        return model
    from onnx import TensorProto

    to = {"bf16": TensorProto.BFLOAT16, "f16": TensorProto.FLOAT16}[precision]
    count = _graph(model.graph, to, _float32_names(model.graph), itertools.count())
    if count:
        notes.append(f"precision {precision}: the operands of {count} product(s) (MatMul, Gemm, Conv, Einsum) "
                     "cast to it, the results back to float32")
    return model


def _float32_names(graph: Any) -> set[str]:
    """The names of this graph's float32 tensors: inputs, initializers, inferred values, outputs."""
    from onnx import TensorProto

    names = {t.name for t in graph.initializer if t.data_type == TensorProto.FLOAT}
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type == TensorProto.FLOAT:
            names.add(info.name)
    return names


def _graph(graph: Any, to: int, floats: set[str], serial: itertools.count[int]) -> int:
    """Casts around each float32 product of ``graph`` and its subgraphs; how many."""
    from onnx import AttributeProto

    count = 0
    nodes = []
    for node in graph.node:
        for attr in node.attribute:  # If, Loop, Scan bodies: products there too
            for sub in [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs):
                count += _graph(sub, to, floats | _float32_names(sub), serial)
        operands = _operands(node, floats)
        if not operands:
            nodes.append(node)
            continue
        count += 1
        nodes.extend(_cast(node, operands, to, next(serial)))
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def _operands(node: Any, floats: set[str]) -> list[int]:
    """The float32 operands of a product whose results are all float32 (else none)."""
    which = _PRODUCTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
    indices = range(len(node.input)) if which is None else [i for i in which if i < len(node.input)]
    if not all(o in floats for o in node.output):
        return []
    return [i for i in indices if node.input[i] and node.input[i] in floats]


def _cast(node: Any, operands: list[int], to: int, n: int) -> list[Any]:
    """``node`` between casts: its operands to ``to``, its results back to float32. ``n`` keeps
    the new names unique (a node's name need not be)."""
    from onnx import TensorProto, helper

    before, after = [], []
    for i in operands:
        low = f"{node.input[i]}__nxhal_{to}_{n}_{i}"
        before.append(helper.make_node("Cast", [node.input[i]], [low], to=to))
        node.input[i] = low
    for j, name in enumerate(node.output):
        low = f"{name}__nxhal_{to}_{n}_out{j}"
        node.output[j] = low
        after.append(helper.make_node("Cast", [low], [name], to=TensorProto.FLOAT))
    return [*before, node, *after]
