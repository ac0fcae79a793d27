"""ONNX → ONNX passes the converter child runs before torch-mlir imports a
model: folding of shape computations, the operator rewrites of
``nx_hal.onnx.rewrites`` (when that package is present), and the words a
failure uses to name a node (its name, op type and inferred input shapes).

Shape folding: exporters compute shapes in the graph (torch.onnx writes
``Shape → Gather → Unsqueeze → Concat → Reshape`` for every ``view``), and
ONNX shape inference, data propagation included, leaves tensors downstream
of them without static shapes (``Expand``, ``Tile``, ``Slice`` or
``ConstantOfShape`` fed by a computed shape); torch-mlir's lowering then
fails or keeps a dynamic shape. Once the inputs are fixed those shapes are
constants, and onnxruntime's offline basic graph optimizations (constant
folding and redundant-node elimination, all in standard ONNX operators)
fold them. Chosen by measurement against onnxscript's optimizer and onnxsim
on a torch-style attention block and a ViT token stem: onnxruntime folded
every shape in both (onnxsim too; onnxscript left 11 of 36 tensors without
a shape), in 4-12 ms against 30-60 ms, and onnxruntime is already a
dependency (the quantize extra's, the tests' oracle); without it the model
is lowered unfolded, with a note saying so. Models whose shapes inference
already settles are not touched.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import re
import tempfile
from typing import Any, Final

__all__ = ["FreshNames", "shapeless", "fold_shapes", "apply_rewrites", "shapes_by_name", "describe_node",
           "mlir_types_in_onnx_terms"]


class FreshNames:
    """Names for what a pass adds to a model that nothing in it uses yet:
    ``form`` (a str.format of ``hint`` and a counter ``n``) with the counter
    raised past every name in ``taken``; a name given is taken from then on.
    ``taken`` is the caller's set, which it may still fill."""

    def __init__(self, taken: set[str], form: str) -> None:
        self.taken = taken
        self._form = form
        self._count = itertools.count(1)

    def __call__(self, hint: str) -> str:
        while True:
            name = self._form.format(hint=hint, n=next(self._count))
            if name not in self.taken:
                self.taken.add(name)
                return name

_DTYPE_NAMES: Final = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
}

_VTENSOR: Final = re.compile(r"!torch\.vtensor<(\[[^\]]*\]|\*),(\w+)>")


def _static(value_type: Any) -> bool:
    if not value_type.HasField("tensor_type"):
        return True  # sequences, maps, optionals: not ours to fold
    tensor = value_type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)


def shapeless(model: Any) -> list[str]:
    """Names of node outputs (top-level graph) that shape inference left
    without a fully static shape, in graph order."""
    graph = model.graph
    types = {vi.name: vi.type for vi in (*graph.value_info, *graph.output)}
    missing: list[str] = []
    for node in graph.node:
        for name in node.output:
            if name and (name not in types or not _static(types[name])):
                missing.append(name)
    return missing


def _infer(model: Any) -> Any:
    onnx = importlib.import_module("onnx")
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def _computed_shapes(model: Any) -> int:
    return sum(node.op_type in ("Shape", "Size") for node in model.graph.node)


def fold_shapes(model: Any, notes: list[str]) -> Any:
    """``model`` with its shape computations folded into constants by
    onnxruntime's offline basic optimizations, shapes inferred again; the
    model itself when every tensor already has a static shape and no shape
    is computed in the graph, when onnxruntime is not installed or cannot
    load the model (each says why in ``notes``), or when folding settles
    nothing more. Computed shapes are folded even when inference settles
    every shape: a lowering may need the value as a constant (Resize's
    ``sizes`` from ``Shape → Slice → Concat``, as torch's ``interpolate(size=)``
    exports it), not only its shape."""
    before = shapeless(model)
    computed = _computed_shapes(model)
    if not before and not computed:
        return model
    if importlib.util.find_spec("onnxruntime") is None:
        notes.append(f"{len(before)} tensor(s) without a static shape; shape folding needs onnxruntime "
                     "(pip install onnxruntime)")
        return model
    ort = importlib.import_module("onnxruntime")
    onnx = importlib.import_module("onnx")
    with tempfile.TemporaryDirectory(prefix="nxhal-fold-") as tmp:
        path = os.path.join(tmp, "folded.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = path
        options.log_severity_level = 4  # a refusal comes back as the exception below
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            folded = onnx.load_model(path)
            folded = _infer(folded)
        except Exception as exc:  # onnxruntime lacks a kernel, or its output does not infer: lower unfolded
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            notes.append(f"shape folding skipped: onnxruntime could not optimise the model ({first[:200]})")
            return model
    after = shapeless(folded)
    if len(after) > len(before) or (len(after) == len(before) and _computed_shapes(folded) >= computed):
        return model
    notes.append(f"shape computations folded (onnxruntime basic optimizations): tensors without a static "
                 f"shape {len(before)} -> {len(after)}, Shape/Size nodes {computed} -> {_computed_shapes(folded)}, "
                 f"nodes {len(model.graph.node)} -> {len(folded.graph.node)}")
    return folded


def _constant_initializers(model: Any) -> Any:
    """``model`` with IR version 4's meaning of an initializer: a constant.

    Before IR version 4 every initializer is also listed as a graph input
    (old exports and the onnx wheel's model corpus do so), and ONNX's shape
    inference then reads none of them as constants, the ones a rewrite adds
    included: the shapes and axes the rewrites write would be unknown. No
    caller feeds them (nx_hal takes only the inputs without an initializer),
    so they are made plain initializers."""
    if model.ir_version >= 4:
        return model
    onnx = importlib.import_module("onnx")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    initializers = {init.name for init in copy.graph.initializer}
    kept = [value for value in copy.graph.input if value.name not in initializers]
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    copy.ir_version = 4
    return copy


def apply_rewrites(model: Any, notes: list[str], platform: str | None = None) -> Any:
    """HOOK for ``nx_hal.onnx.rewrites.apply`` (ONNX → ONNX lowerings of
    LSTM/GRU/RNN, Resize, If with a constant condition, QDQ and fused
    operators), run after shape folding on a shape-inferred model. The
    import is guarded: without that package the model goes on unchanged.
    Its ConversionError propagates (the caller turns it into the child's
    failure reply). ``platform``: the target device's kind, for the
    rewrites ``WHEN`` applies on some platforms only."""
    try:
        rewrites = importlib.import_module("nx_hal.onnx.rewrites")
    except ImportError:
        return model
    apply = getattr(rewrites, "apply", None)
    if apply is None:
        return model
    before = [n.op_type for n in model.graph.node]
    normal = _constant_initializers(model)
    # The platform only where there is one: an ``apply`` without the keyword still serves.
    rewritten = apply(normal) if platform is None else apply(normal, platform=platform)
    if rewritten is normal:
        return model
    gone = sorted(set(before) - {n.op_type for n in rewritten.graph.node})
    if gone:
        notes.append(f"rewritten into standard operators before lowering: {', '.join(gone)}")
    return _infer(rewritten)


def shapes_by_name(model: Any) -> dict[str, str]:
    """Every typed value of the top-level graph (inputs, initializers,
    inferred intermediates, outputs) → its type in ONNX terms, e.g.
    ``float32[2, 5, 8]``, ``int64[?, 4]`` or ``float32 (shape unknown)``."""
    graph = model.graph
    found: dict[str, str] = {}
    for init in graph.initializer:
        found[init.name] = f"{_DTYPE_NAMES.get(init.data_type, f'type {init.data_type}')}[{', '.join(map(str, init.dims))}]"
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tensor = vi.type.tensor_type
        dtype = _DTYPE_NAMES.get(tensor.elem_type, f"type {tensor.elem_type}")
        if not tensor.HasField("shape"):
            found[vi.name] = f"{dtype} (shape unknown)"
            continue
        dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        found[vi.name] = f"{dtype}[{', '.join(dims)}]"
    return found


def describe_node(node: Any, original_name: str, shapes: dict[str, str]) -> str:
    """``node 'attn/Reshape_3' (Reshape; inputs: 'q0' float32[2, 5, 8], 'shape' int64[4])``:
    a node as the user's model names it, with the input shapes inference gave."""
    inputs = [f"'{name}' {shapes.get(name, '(shape unknown)')}" for name in node.input if name]
    label = f"'{original_name}'" if original_name else "(unnamed)"
    return f"node {label} ({node.op_type}; inputs: {', '.join(inputs) or 'none'})"


def mlir_types_in_onnx_terms(text: str, any_shapeless: bool) -> str:
    """torch-mlir's ``!torch.vtensor<[2,?],f32>`` written as ``f32[2, ?]``.
    The importer writes a tensor whose shape ONNX inference left unknown as
    ``!torch.vtensor<[],f32>``, the spelling of a scalar: where the model has
    such tensors it is said as ``f32 (shape unknown, or a scalar)``."""

    def spell(match: re.Match[str]) -> str:
        dims, dtype = match.group(1), match.group(2)
        if dims == "*":
            return f"{dtype} (shape unknown)"
        if dims == "[]":
            return f"{dtype} (shape unknown, or a scalar)" if any_shapeless else f"{dtype} scalar"
        return f"{dtype}[{', '.join(dims[1:-1].split(','))}]"

    return _VTENSOR.sub(spell, text)
