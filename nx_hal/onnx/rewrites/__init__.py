"""ONNX → ONNX rewrites of the operators torch-mlir's StableHLO lowering
lacks, into operators it lowers correctly:

- LSTM, GRU, RNN: unrolled over the static sequence length (``recurrent``);
- Resize: per-axis index maps (nearest) or interpolation matrices (linear,
  cubic), their coefficients computed by ONNX's reference implementation
  (``resize``);
- If with a constant condition: the taken branch inlined (``branches``);
- QuantizeLinear / DequantizeLinear: the same arithmetic in float, and
  QLinearMatMul as its reference computes it (``quantize``);
- onnxruntime's fused operators (``com.microsoft`` Attention, Gelu, BiasGelu, FastGelu,
  QuickGelu, SkipLayerNormalization, SkipSimplifiedLayerNormalization):
  spelt out in standard operators (``fused``);
- DFT with a constant axis and length: MatMuls with the maps ONNX's
  reference computes (``spectral``);
- AveragePool with auto_pad SAME_*, dilations or three spatial axes (which
  the lowering gets wrong or crashes on): a depthwise Conv of ones times the
  scale ONNX's reference gives (``pooling``);
- Conv with a kernel larger than its input, and depthwise or 3-D Convs for a
  CPU: im2col and a MatMul, or for a depthwise Conv the sum over its taps,
  where XLA's CPU backend runs 3-10x slower (``conv``; only the Convs
  ``WHEN`` selects).
- MatMul of A[..., M, K] by a matrix, for a CPU: one 2-D MatMul over the
  rows, where torch-mlir's batched form has XLA copy the weights to every
  batch index (``matmul``; convnext_tiny 10x faster on tpu:cpu).

    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    model = rewrites.apply(model)

``apply`` needs static shapes (shape inference run on fixed input shapes)
and constant scales, sizes and conditions; a node it cannot rewrite raises
``ConversionError`` (reason ``unsupported-operator``) naming the node and
what stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import onnx

from nx_hal.onnx.convert import ConversionError
from nx_hal.onnx.rewrites._graph import Model, ShapeUnknown
from nx_hal.onnx.rewrites.attention import ATTENTION_REWRITES
from nx_hal.onnx.rewrites.branches import rewrite_if
from nx_hal.onnx.rewrites.control import CONTROL_REWRITES
from nx_hal.onnx.rewrites.conv import conv_needs_rewrite, rewrite_conv
from nx_hal.onnx.rewrites.fused import (
    FUSED,
    rewrite_attention,
    rewrite_fast_gelu,
    rewrite_gelu,
    rewrite_quick_gelu,
    rewrite_skip_layer_norm,
)
from nx_hal.onnx.rewrites.matmul import matmul_needs_rewrite, rewrite_matmul
from nx_hal.onnx.rewrites.pooling import average_pool_needs_rewrite, rewrite_average_pool
from nx_hal.onnx.rewrites.quantize import (
    rewrite_dequantize_linear,
    rewrite_qlinear_matmul,
    rewrite_quantize_linear,
)
from nx_hal.onnx.rewrites.recurrent import rewrite_gru, rewrite_lstm, rewrite_rnn
from nx_hal.onnx.rewrites.resize import rewrite_resize
from nx_hal.onnx.rewrites.spectral import rewrite_dft
from nx_hal.onnx.rewrites.tensor_ops import TENSOR_REWRITES, dropout_needs_rewrite, trilu_needs_rewrite

__all__ = ["REWRITES", "WHEN", "Rewrite", "apply", "rewritten_ops"]

Rewrite = Callable[[Model, Any], list[Any]]
"""Takes the model's context and one node; returns the nodes replacing it
(whose outputs include the node's own output names)."""

# (domain, op type) → rewrite; "" is the standard domain.
REWRITES: Final[dict[tuple[str, str], Rewrite]] = {
    ("", "LSTM"): rewrite_lstm,
    ("", "GRU"): rewrite_gru,
    ("", "RNN"): rewrite_rnn,
    ("", "Resize"): rewrite_resize,
    ("", "If"): rewrite_if,
    ("", "QuantizeLinear"): rewrite_quantize_linear,
    ("", "DequantizeLinear"): rewrite_dequantize_linear,
    ("", "QLinearMatMul"): rewrite_qlinear_matmul,
    (FUSED, "Attention"): rewrite_attention,
    (FUSED, "Gelu"): rewrite_gelu,
    (FUSED, "BiasGelu"): rewrite_gelu,
    (FUSED, "FastGelu"): rewrite_fast_gelu,
    (FUSED, "QuickGelu"): rewrite_quick_gelu,
    (FUSED, "SkipLayerNormalization"): rewrite_skip_layer_norm,
    (FUSED, "SkipSimplifiedLayerNormalization"): rewrite_skip_layer_norm,
    ("", "Conv"): rewrite_conv,
    ("", "MatMul"): rewrite_matmul,
    ("", "DFT"): rewrite_dft,
    ("", "AveragePool"): rewrite_average_pool,
    **ATTENTION_REWRITES,
    **TENSOR_REWRITES,
    **CONTROL_REWRITES,
}

# Rewrites of operators torch-mlir does lower, for speed: only the nodes
# their predicate selects (by shapes and types) are rewritten.
WHEN: Final[dict[tuple[str, str], Callable[[Model, Any], bool]]] = {
    ("", "Conv"): conv_needs_rewrite,
    ("", "MatMul"): matmul_needs_rewrite,
    ("", "AveragePool"): average_pool_needs_rewrite,
    ("", "Trilu"): trilu_needs_rewrite,
    ("", "Dropout"): dropout_needs_rewrite,
}

# Inlined branches may hold If nodes of their own: a bound on the nodes
# rewritten rather than trust that the nesting ends.
_MAX_NODES_REWRITTEN: Final = 100_000
# Rounds of rewriting and inferring shapes (each rewrites at least one node).
_MAX_ROUNDS: Final = 16


def _key(node: Any) -> tuple[str, str]:
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


def _rewritable(node: Any) -> bool:
    return _key(node) in REWRITES


def _drop_unused(graph: onnx.GraphProto, added: set[str]) -> None:
    """Removes the initializers the rewrites added but no node reads (a zero
    state where the node had an initial one, an inlined branch's leftovers)."""
    # Only the rewrites' own nodes, all in the main graph, read what they added.
    used = {name for node in graph.node for name in node.input}
    used.update(o.name for o in graph.output)
    kept = [init for init in graph.initializer if init.name in used or init.name not in added]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def rewritten_ops(model: onnx.ModelProto, platform: str | None = None) -> list[str]:
    """The op types in ``model``'s main graph that ``apply`` rewrites (those of
    another domain than the standard one prefixed with it: ``com.microsoft.Gelu``);
    those rewritten only when ``WHEN`` selects them (for ``platform``) are
    listed if a node is selected."""
    keys = {_key(n) for n in model.graph.node if _rewritable(n) and _key(n) not in WHEN}
    conditional = [n for n in model.graph.node if _key(n) in WHEN]
    if conditional:
        context = Model(model, platform)
        keys.update(_key(n) for n in conditional if WHEN[_key(n)](context, n))
    return sorted(".".join(filter(None, key)) for key in keys)


def apply(model: onnx.ModelProto, platform: str | None = None) -> onnx.ModelProto:
    """``model`` with every LSTM, GRU, RNN, Resize, If (constant condition),
    QuantizeLinear, DequantizeLinear and fused onnxruntime node of its main
    graph replaced by operators the StableHLO lowering supports, shapes
    inferred again.

    Pure: ``model`` is not changed, and a model without such nodes is
    returned as it is. Expects a shape-inferred model with static shapes.
    Raises ConversionError naming the node, its inputs as inferred and what
    stops it: reason ``unsupported-operator`` for an attribute or input no
    rewrite covers, ``dynamic-shape`` for a shape that is unknown or not
    static. ``platform`` (a device kind: "cpu", "gpu", ...) adds the
    rewrites ``WHEN`` selects for that platform only."""
    if not isinstance(model, onnx.ModelProto):
        raise ConversionError(f"rewrites.apply takes an onnx.ModelProto, got {type(model).__name__}",
                              reason="malformed")
    if not rewritten_ops(model, platform):
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    # A node whose input shapes are unknown (they come out of a fused
    # operator that inference does not know) waits for the next round, after
    # the nodes before it are rewritten and shapes inferred again.
    for _ in range(_MAX_ROUNDS):
        result, waiting, progress = _round(result, platform)
        if not waiting:
            return result
        if not progress:
            break
    raise waiting[0][1]


def _round(model: onnx.ModelProto, platform: str | None
           ) -> tuple[onnx.ModelProto, list[tuple[Any, ConversionError]], int]:
    """One pass over the main graph: the model with what could be rewritten
    rewritten and shapes inferred, the nodes left waiting for shapes, and
    how many nodes were rewritten."""
    context = Model(model, platform)
    # A stack, the next node on top: copies, as the graph's own list is cleared below.
    pending = []
    for original in reversed(model.graph.node):
        node = onnx.NodeProto()
        node.CopyFrom(original)
        pending.append(node)
    done: list[Any] = []
    waiting: list[tuple[Any, ConversionError]] = []
    rewritten = 0
    while pending:
        node = pending.pop()
        when = WHEN.get(_key(node))
        if not _rewritable(node) or (when is not None and not when(context, node)):
            done.append(node)
            continue
        try:
            replacement = REWRITES[_key(node)](context, node)
        except ShapeUnknown as exc:
            waiting.append((node, _with_inputs(exc, context, node)))
            done.append(node)
            continue
        except ConversionError as exc:
            raise _with_inputs(exc, context, node) from None
        rewritten += 1
        if rewritten > _MAX_NODES_REWRITTEN:
            raise ConversionError(f"more than {_MAX_NODES_REWRITTEN} nodes to rewrite (nested If branches?)",
                                  reason="unsupported-operator", operators=[node.op_type])
        # The replacement is looked at again: an inlined branch may hold nodes to rewrite.
        pending.extend(reversed(replacement))
    if not rewritten:
        return model, waiting, 0  # every node waits: nothing new to infer
    del model.graph.node[:]
    model.graph.node.extend(done)
    _drop_unused(model.graph, context.added)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # onnx raises InferenceError or a plain RuntimeError
        ops = sorted({n.op_type for n in done})
        raise ConversionError(f"ONNX shape inference failed after the rewrites: {str(exc).strip()}",
                              reason="converter-error", operators=ops) from None
    return inferred, waiting, rewritten


def _with_inputs(error: ConversionError, context: Model, node: Any) -> ConversionError:
    """``error`` with the node's inputs as inferred, to see what the refusal is about."""
    return ConversionError(f"{error.message} (inputs: {context.describe_inputs(node)})", reason=error.reason,
                           operators=error.operators)
