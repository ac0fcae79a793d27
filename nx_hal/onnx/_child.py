"""ONNX → StableHLO in a child process: ``python -m nx_hal.onnx._child``.

Runs apart from the caller because some inputs crash torch-mlir's process
(AveragePool with three spatial dims segfaults it). The parent sends one JSON
request on stdin::

    {"model": PATH, "output": PATH, "input_shapes": {NAME: [DIMS]} | null,
     "target_version": "1.9.0" | null, "bytecode": false}

(with ``"kind": "stablehlo"`` the input is a StableHLO module instead, written
again as a portable artifact for ``target_version``; with ``"kind": "verify"``
a StableHLO module from the user, only parsed and verified)

and reads one JSON line from stdout: ``{"ok": true, ...info}`` with the module
written to ``output``, or ``{"ok": false, "reason": ..., "message": ...,
"operators": [...], "leftover_ops": [...]}``. Progress lines ``stage: NAME``
go to stderr, so that a crash can be reported with the step that crashed.

``python -m nx_hal.onnx._child --serve`` converts many models in
sequence: one request per stdin line, one reply per stdout line, torch-mlir
imported once (the start-up is most of a small conversion's time).
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nx_hal.child import OUT_OF_MEMORY
from nx_hal.onnx import guards, precision, prepass
from nx_hal.programs import stablehlo_artifact_version

MIN_OPSET: Final = 17
PIPELINES: Final = (
    "torch-onnx-to-torch-backend-pipeline",
    "torch-backend-to-stablehlo-backend-pipeline",
)
# Operations PJRT compiles: StableHLO ops in func.func bodies.
_ALLOWED_PREFIXES: Final = ("stablehlo.", "func.")
_ALLOWED_OPS: Final = {"builtin.module"}
_QUANT_TYPE: Final = "!quant."
_LOC_NAME: Final = re.compile(r'"((?:[^"\\]|\\.)*)"')
_NODE_TAG: Final = "nxhal#"
_VERSION: Final = re.compile(r"^\d+\.\d+\.\d+$")
_GLUE_PREFIXES: Final = ("torch_c.", "arith.", "torch.constant.", "torch.prim.ListConstruct")
_QDQ_OPS: Final = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
_QDQ_HINT: Final = "int8 QDQ quantization is not supported by the StableHLO lowering; "
_KNOWN_UNSUPPORTED: Final = {
    "Resize", "If", "Loop", "Scan", "QuantizeLinear", "DequantizeLinear", "QLinearConv",
    "QLinearMatMul", "DynamicQuantizeLinear", "NonZero", "Unique",
}


@dataclass
class Failure(Exception):
    """A conversion that cannot succeed, with what the user needs to fix it."""

    reason: str  # malformed | dynamic-shape | unsupported-operator | serialize | converter-error
    message: str
    operators: list[str] = field(default_factory=list)
    leftover_ops: list[str] = field(default_factory=list)


def _stage(name: str) -> None:
    print(f"stage: {name}", file=sys.stderr, flush=True)


def _onnx() -> Any:
    return importlib.import_module("onnx")


def _default_opset(model: Any) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return int(opset.version)
    return 1


def load_model(data: bytes) -> Any:
    onnx = _onnx()
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf raises DecodeError or RuntimeWarning subclasses
        raise Failure("malformed", f"not an ONNX model: {exc}") from None
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise Failure("malformed", "not an ONNX model: it has no graph nodes")
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise Failure("malformed", f"invalid ONNX model: {str(exc).strip()}") from None
    return model


def upgrade_opset(model: Any, notes: list[str]) -> Any:
    """Opset >= 17: the ONNX lowering in torch-mlir is written against it."""
    onnx = _onnx()
    version = _default_opset(model)
    if version >= MIN_OPSET:
        return model
    try:
        upgraded = onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:
        notes.append(f"opset {version} kept: upgrade to {MIN_OPSET} failed ({str(exc).strip()[:200]})")
        return model
    notes.append(f"opset upgraded from {version} to {MIN_OPSET}")
    return upgraded


def fix_input_shapes(model: Any, shapes: dict[str, list[int]]) -> None:
    """Replaces every dynamic input dim by its given size; the error names the
    input and the dim when a size is missing or contradicts a fixed one."""
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in initializers]
    names = [vi.name for vi in inputs]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise Failure(
            "dynamic-shape",
            f"input_shapes names unknown input(s) {', '.join(map(repr, unknown))}; "
            f"the model's inputs are {', '.join(map(repr, names))}",
        )
    for vi in inputs:
        ttype = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise Failure("dynamic-shape", f"input '{vi.name}' is not a tensor")
        given = shapes.get(vi.name)
        if not ttype.HasField("shape"):
            if given is None:
                raise Failure(
                    "dynamic-shape",
                    f"input '{vi.name}' has no shape (unknown rank); pass input_shapes={{'{vi.name}': (...)}}",
                )
            for size in given:
                ttype.shape.dim.add().dim_value = size
            continue
        dims = ttype.shape.dim
        if given is not None and len(given) != len(dims):
            raise Failure(
                "dynamic-shape",
                f"input '{vi.name}' has rank {len(dims)} but input_shapes gives {tuple(given)}",
            )
        for axis, dim in enumerate(dims):
            fixed = dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None
            label = f"'{dim.dim_param}'" if dim.HasField("dim_param") and dim.dim_param else "unnamed"
            if given is None:
                if fixed is None:
                    raise Failure(
                        "dynamic-shape",
                        f"input '{vi.name}' dim {axis} ({label}) is dynamic; "
                        f"pass input_shapes={{'{vi.name}': (...)}} with concrete sizes",
                    )
                continue
            size = int(given[axis])
            if size < 0:  # 0 is an empty tensor, a shape like any other
                raise Failure("dynamic-shape", f"input '{vi.name}' dim {axis}: size {size} must not be negative")
            if fixed is not None and fixed != size:
                raise Failure(
                    "dynamic-shape",
                    f"input '{vi.name}' dim {axis} is fixed to {fixed} in the model "
                    f"but input_shapes gives {size}",
                )
            dim.Clear()
            dim.dim_value = size
    # Declared outputs and intermediates may carry the old symbolic dims; let
    # shape inference recompute them from the now concrete inputs.
    for vi in graph.output:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            if any(not (d.HasField("dim_value") and d.dim_value > 0) for d in vi.type.tensor_type.shape.dim):
                vi.type.tensor_type.ClearField("shape")
    del graph.value_info[:]


def infer_shapes(model: Any) -> Any:
    onnx = _onnx()
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:
        raise Failure("malformed", f"ONNX shape inference failed: {str(exc).strip()}") from None


def tag_nodes(model: Any, described: dict[str, str] | None = None) -> dict[str, str]:
    """Gives every node a unique name (the importer turns it into the op's
    location) and returns name → ONNX op type, to blame leftover ops on nodes.
    ``described`` receives name → the node in the user's terms (its own
    name, op type and inferred input shapes), for error messages."""
    owners: dict[str, str] = {}
    shapes = prepass.shapes_by_name(model) if described is not None else {}

    def visit(graph: Any, prefix: str) -> None:
        for index, node in enumerate(graph.node):
            name = f"{_NODE_TAG}{prefix}{index}:{node.op_type}"
            if described is not None:
                described[name] = prepass.describe_node(node, node.name, shapes)
            node.name = name
            owners[name] = node.op_type
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g, f"{prefix}{index}.")
                for sub in attr.graphs:
                    visit(sub, f"{prefix}{index}.")

    visit(model.graph, "")
    return owners


def _context(ir: Any) -> Any:
    """A new MLIR context without its thread pool. The pass manager runs in
    parallel only over sibling functions, and an ONNX model is one function:
    the pool only costs its start (about 40 of 200 ms a small model's
    conversion took, measured with the pass manager's timing)."""
    context = ir.Context()
    context.enable_multithreading(False)
    return context


def _torch_mlir(name: str) -> Any:
    return importlib.import_module(f"torch_mlir.{name}")


def _output_dynamic(model: Any) -> list[str]:
    bad = []
    for vi in model.graph.output:
        ttype = vi.type.tensor_type
        if not ttype.HasField("shape") or any(not d.HasField("dim_value") for d in ttype.shape.dim):
            bad.append(vi.name)
    return bad


def _walk(op: Any, out: list[Any]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                out.append(inner)
                _walk(inner.operation, out)


def _all_ops(module: Any) -> list[Any]:
    ops: list[Any] = []
    _walk(module.operation, ops)
    return [o.operation for o in ops]


def _blame(ops: list[Any], owners: dict[str, str]) -> list[str]:
    found: list[str] = []
    for op in ops:
        for name in _LOC_NAME.findall(str(op.location)):
            owner = owners.get(name)
            if owner is not None and owner not in found:
                found.append(owner)
    return found


def _is_quantized(op: Any) -> bool:
    types = [str(r.type) for r in op.results] + [str(o.type) for o in op.operands]
    return any(_QUANT_TYPE in t for t in types)


def _disallowed(ops: list[Any]) -> list[Any]:
    return [
        op for op in ops
        if not (op.name.startswith(_ALLOWED_PREFIXES) or op.name in _ALLOWED_OPS) or _is_quantized(op)
    ]


@dataclass
class Context:
    """What a failure message needs to speak of the user's model: tag →
    node description, and whether inference left any tensor without a shape."""

    described: dict[str, str] = field(default_factory=dict)
    any_shapeless: bool = False

    def nodes(self, tags: list[str], limit: int = 3) -> str:
        """``" at node 'x' (Op; inputs: ...)"`` for the first ``limit`` tags known."""
        found = [self.described[t] for t in dict.fromkeys(tags) if t in self.described]
        if not found:
            return ""
        more = f" and {len(found) - limit} more" if len(found) > limit else ""
        return " at " + "; ".join(found[:limit]) + more

    def words(self, text: str) -> str:
        """torch-mlir's types in ONNX terms."""
        return prepass.mlir_types_in_onnx_terms(text, self.any_shapeless)


def _diagnosed(error: str, owners: dict[str, str], leftover: list[str], model_ops: list[str],
               context: Context | None = None) -> Failure | None:
    """A pass failure whose error lines are located at tagged ONNX nodes
    blames those nodes; the first such line is the reason."""
    context = context or Context()
    blamed: list[str] = []
    tags: list[str] = []
    first = ""
    for line in error.splitlines():
        line = line.strip()
        if not line.startswith("error:"):
            continue
        found = [n for n in _LOC_NAME.findall(line) if n in owners]
        names = [owners[n] for n in found]
        if names and not first:
            first = line
            tags += found
        blamed += [n for n in names if n not in blamed]
    if not blamed:
        return None
    detail = first.removeprefix("error:").strip()
    detail = context.words(re.sub(r'^"[^"]*":\s*', "", detail))
    hint = ""
    if any(o in _QDQ_OPS for o in blamed):
        hint = _QDQ_HINT
        # Q/DQ fail as a family: the first to trip is not the only one to
        # replace, so name every Q/DQ operator the model has.
        blamed += [o for o in _QDQ_OPS if o in model_ops and o not in blamed]
    return Failure(
        "unsupported-operator",
        f"{hint}ONNX operator(s) {', '.join(blamed)} failed to lower to StableHLO{context.nodes(tags)}: "
        f"{detail[:500]}",
        operators=blamed,
        leftover_ops=leftover,
    )


def _tags(ops: list[Any], owners: dict[str, str]) -> list[str]:
    return list(dict.fromkeys(n for op in ops for n in _LOC_NAME.findall(str(op.location)) if n in owners))


def _unsupported(ops: list[Any], owners: dict[str, str], model_ops: list[str], why: str,
                 context: Context | None = None) -> Failure:
    names = sorted({op.name for op in ops})
    if any(_is_quantized(op) for op in ops):
        names = sorted(set(names) | {"quantized types (!quant.uniform)"})
    # Glue ops (casts, scalar constants, lists) sit next to every unconverted
    # op; blame the ops that carry the computation when there are any.
    primary = [op for op in ops if not op.name.startswith(_GLUE_PREFIXES) and not op.name.endswith(".yield")]
    blamed = _blame(primary or ops, owners)
    if not blamed:
        # No location survived: name the model's ops that this lowering is known to reject.
        blamed = [o for o in model_ops if o in _KNOWN_UNSUPPORTED]
    quantized = [o for o in blamed if o in _QDQ_OPS]
    if quantized:
        quantized += [o for o in _QDQ_OPS if o in model_ops and o not in quantized]
        # Fused QDQ patterns drag their float neighbours in; name Q/DQ first.
        blamed = quantized + [o for o in blamed if o not in _QDQ_OPS]
    hint = _QDQ_HINT if quantized else ""
    # The ops doing the computation first: they say what is missing.
    shown = sorted({op.name for op in primary}) + [n for n in names if n not in {op.name for op in primary}]
    listed = f"{', '.join(shown[:12])}{' ...' if len(shown) > 12 else ''}"
    subject = f"ONNX operator(s) {', '.join(blamed)}" if blamed else "this model"
    where = (context or Context()).nodes(_tags(primary or ops, owners))
    message = f"{hint}{subject} not supported by the StableHLO lowering{where}: {why} {listed}"
    return Failure("unsupported-operator", message, operators=blamed, leftover_ops=names)


_UNSIGNED: Final = re.compile(r"^tensor<(?:[0-9?]+x)*ui\d+>$")


def _unsigned_compares(module: Any, ir: Any) -> int:
    """``stablehlo.compare`` on unsigned integers with comparison type SIGNED
    (what torch-mlir emits for every integer) is rejected by XLA's verifier:
    it must say UNSIGNED. The ordering of ui values is unsigned anyway, so
    this only states what the op already means."""
    fixed = 0
    unsigned = ir.Attribute.parse("#stablehlo<comparison_type UNSIGNED>")
    for op in _all_ops(module):
        if op.name != "stablehlo.compare" or not op.operands:
            continue
        if _UNSIGNED.match(str(op.operands[0].type)) and "compare_type" in op.attributes:
            if str(op.attributes["compare_type"]) != str(unsigned):
                op.attributes["compare_type"] = unsigned
                fixed += 1
    return fixed


def _constants_to_stablehlo(module: Any, ir: Any) -> int:
    """Leftover tensor ``arith.constant`` ops become ``stablehlo.constant``:
    portable serialisation (VHLO) has no arith dialect."""
    replaced = 0
    for op in _all_ops(module):
        if op.name != "arith.constant" or len(op.results) != 1:
            continue
        result = op.results[0]
        if not str(result.type).startswith("tensor<"):
            continue
        with ir.InsertionPoint(op), op.location:
            new = ir.Operation.create(
                "stablehlo.constant", results=[result.type], attributes={"value": op.attributes["value"]}
            )
        result.replace_all_uses_with(new.results[0])
        op.erase()
        replaced += 1
    return replaced


def _rewritten(model: Any, notes: list[str], platform: str | None) -> Any:
    """``prepass.apply_rewrites`` with its ConversionError (raised in
    nx_hal.onnx.rewrites, the parent's exception class) as this child's
    Failure reply."""
    try:
        return prepass.apply_rewrites(model, notes, platform=platform)
    except Failure:
        raise
    except Exception as exc:
        reason = getattr(exc, "reason", None)
        if reason is None:
            raise Failure("converter-error", f"ONNX rewrite before lowering failed: "
                          f"{type(exc).__name__}: {str(exc).strip()[:1000]}") from None
        raise Failure(str(reason), str(getattr(exc, "message", exc)),
                      operators=[str(o) for o in getattr(exc, "operators", ())],
                      leftover_ops=[str(o) for o in getattr(exc, "leftover_ops", ())]) from None


def _guarded(model: Any, notes: list[str]) -> Any:
    """``guards.apply``: patterns the lowering gets silently wrong rewritten
    (shapes inferred again for the new nodes), or refused by name."""
    count = len(notes)
    model, refusals = guards.apply(model, notes)
    if refusals:
        ops = list(dict.fromkeys(r.op_type for r in refusals))
        shown = "; ".join(f"{r.node}: {r.why}" for r in refusals[:3])
        more = f" (and {len(refusals) - 3} more)" if len(refusals) > 3 else ""
        raise Failure("unsupported-operator",
                      f"ONNX operator(s) {', '.join(ops)} refused: the StableHLO lowering would compute wrong "
                      f"values at {shown}{more}", operators=ops)
    return infer_shapes(model) if len(notes) > count else model


def convert(request: dict[str, Any]) -> dict[str, Any]:
    notes: list[str] = []
    _stage("load")
    model = load_model(Path(request["model"]).read_bytes())
    model_ops = sorted({n.op_type for n in model.graph.node})
    print(f"onnx-ops: {','.join(model_ops)}", file=sys.stderr, flush=True)
    _stage("upgrade-opset")
    model = upgrade_opset(model, notes)
    _stage("fix-shapes")
    fix_input_shapes(model, {k: list(v) for k, v in (request.get("input_shapes") or {}).items()})
    _stage("shape-inference")
    model = infer_shapes(model)
    # ONNX → ONNX pre-passes, in this order: shape computations folded to
    # constants (static shapes for what follows), then the operator rewrites,
    # then the guards against patterns the lowering gets silently wrong.
    _stage("fold-shapes")
    model = prepass.fold_shapes(model, notes)
    _stage("rewrites")
    model = _rewritten(model, notes, request.get("platform"))  # HOOK: nx_hal.onnx.rewrites.apply, when that package is there
    _stage("guards")
    model = _guarded(model, notes)
    if request.get("precision") not in (None, "f32"):
        _stage("precision")
        model = infer_shapes(precision.apply(model, str(request["precision"]), notes))
    dynamic = _output_dynamic(model)
    if dynamic:
        raise Failure(
            "dynamic-shape",
            f"output(s) {', '.join(map(repr, dynamic))} keep a dynamic shape after fixing the inputs "
            "(a data-dependent shape); PJRT needs static shapes",
        )
    model.graph.name = "main"
    about = Context(any_shapeless=bool(prepass.shapeless(model)))
    owners = tag_nodes(model, about.described)

    ir = _torch_mlir("ir")
    passmanager = _torch_mlir("passmanager")
    importer = _torch_mlir("extras.onnx_importer")
    torch_dialect = _torch_mlir("dialects.torch")
    stablehlo = importlib.import_module("torch_mlir._mlir_libs._stablehlo")

    _stage("import")
    context = _context(ir)
    torch_dialect.register_dialect(context)
    stablehlo.register_dialect(context)
    try:
        info = importer.ModelInfo(model)
        module_obj = info.create_module(context=context)
        module = module_obj.operation
        importer.NodeImporter.define_function(info.main_graph, module).import_all()
    except Exception as exc:
        raise Failure("converter-error", f"torch-mlir ONNX import failed: {str(exc).strip()}") from None

    with context:
        for pipeline in PIPELINES:
            _stage(pipeline)
            try:
                passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module)
            except Exception as exc:
                left = _disallowed(_all_ops(module))
                diagnosed = _diagnosed(str(exc), owners, sorted({op.name for op in left}), model_ops, about)
                if diagnosed is not None:
                    raise diagnosed from None
                # No node named in the error (it tripped on a constant with
                # no location): the leftover ops say what is missing.
                if left:
                    raise _unsupported(left, owners, model_ops, "no lowering for:", about) from None
                raise Failure("converter-error",
                              f"{pipeline} failed: {about.words(str(exc).strip())[:2000]}") from None
        _stage("constants")
        replaced = _constants_to_stablehlo(module, ir)
        if replaced:
            notes.append(f"{replaced} arith.constant op(s) rewritten as stablehlo.constant")
        fixed = _unsigned_compares(module, ir)
        if fixed:
            notes.append(f"{fixed} stablehlo.compare op(s) on unsigned integers given comparison type UNSIGNED")
        _stage("check")
        ops = _all_ops(module)
        left = _disallowed(ops)
        if left:
            raise _unsupported(left, owners, model_ops, "left operations PJRT cannot compile:", about)
        counts = Counter(op.name for op in ops if op.name.startswith("stablehlo."))
        _stage("serialize")
        current = str(stablehlo.get_current_version())
        minimum = str(stablehlo.get_minimum_version())
        target = request.get("target_version")
        portable = False
        version = current
        if target is not None:
            if not _VERSION.match(target):
                raise Failure("serialize", f"target_version {target!r} is not a version like 1.9.0")
            version = str(stablehlo.get_smaller_version(target, current))
            if version != target:
                notes.append(
                    f"target StableHLO {target} is newer than torch-mlir's {current}: serialised for {current}"
                )
            if str(stablehlo.get_smaller_version(version, minimum)) == version and version != minimum:
                raise Failure(
                    "serialize",
                    f"target StableHLO {target} is older than the oldest this torch-mlir can write ({minimum})",
                )
        text = module.get_asm(enable_debug_info=False)
        if request.get("bytecode") or target is not None:
            try:
                artifact = bytes(stablehlo.serialize_portable_artifact(module_obj, version))
            except Exception as exc:
                raise Failure(
                    "serialize", f"StableHLO portable serialisation for {version} failed: {exc}"
                ) from None
            portable = True
        if request.get("bytecode"):
            data = artifact
        else:
            data = text.encode()
            if portable:
                notes.append(f"text output checked to serialise as portable StableHLO {version}")
            else:
                notes.append("text output (MLIR assembly of torch-mlir's StableHLO, not version-checked)")
    Path(request["output"]).write_bytes(data)
    return {
        "ok": True,
        "onnx_ops": model_ops,
        "stablehlo_ops": dict(sorted(counts.items())),
        "stablehlo_version": version if portable else None,
        "torch_mlir_stablehlo_version": current,
        "portable": portable,
        "bytecode": bool(request.get("bytecode")),
        "opset": _default_opset(model),
        "notes": notes,
    }


def reserialize(request: dict[str, Any]) -> dict[str, Any]:
    """A StableHLO module (MLIR text, MLIR bytecode or a portable artifact)
    written again as a portable artifact for ``target_version``: the
    backend's own version, which its deserializer is guaranteed to read."""
    _stage("read")
    ir = _torch_mlir("ir")
    stablehlo = importlib.import_module("torch_mlir._mlir_libs._stablehlo")
    data = Path(request["model"]).read_bytes()
    current = str(stablehlo.get_current_version())
    minimum = str(stablehlo.get_minimum_version())
    target = request.get("target_version")
    if not isinstance(target, str) or not _VERSION.match(target):
        raise Failure("serialize", f"target_version {target!r} is not a version like 1.9.0")
    source = stablehlo_artifact_version(data)
    notes: list[str] = []
    context = _context(ir)
    stablehlo.register_dialect(context)
    diagnostics: list[str] = []  # MLIR's own words on what failed, for the message

    def keep(diagnostic: Any) -> bool:
        diagnostics.append(str(diagnostic.message).strip())
        return True

    context.attach_diagnostic_handler(keep)
    _stage("parse")
    with context:
        try:
            if source is not None:
                module = stablehlo.deserialize_portable_artifact(context, data)
            else:
                module = ir.Module.parse(data)
        except Exception as exc:
            what = f"a StableHLO {source} portable artifact" if source else "StableHLO MLIR"
            detail = "; ".join(diagnostics[-3:]) or str(exc).strip()
            raise Failure("malformed", f"cannot read the program as {what} "
                          f"(torch-mlir's StableHLO {current}): {detail[:2000]}") from None
        version = str(stablehlo.get_smaller_version(target, current))
        if version != target:
            notes.append(f"backend StableHLO {target} is newer than torch-mlir's {current}: written for {current}")
        if str(stablehlo.get_smaller_version(version, minimum)) == version and version != minimum:
            raise Failure("serialize", f"the backend's StableHLO {target} is older than the oldest "
                          f"torch-mlir's StableHLO {current} can write ({minimum})")
        aliases = _donate(module, ir, [int(i) for i in request.get("donate") or ()])
        # Counted first: serialising rewrites the module into VHLO in place.
        counts = Counter(op.name for op in _all_ops(module) if op.name.startswith("stablehlo."))
        _stage("serialize")
        try:
            artifact = bytes(stablehlo.serialize_portable_artifact(module, version))
        except Exception as exc:
            detail = "; ".join(diagnostics[-3:]) or str(exc).strip()
            raise Failure("serialize", f"the program cannot be written for StableHLO {version}: "
                          f"{detail[:2000]}") from None
    Path(request["output"]).write_bytes(artifact)
    return {
        "ok": True,
        "onnx_ops": [],
        "stablehlo_ops": dict(sorted(counts.items())),
        "stablehlo_version": version,
        "source_stablehlo_version": source,
        "torch_mlir_stablehlo_version": current,
        "portable": True,
        "bytecode": True,
        "notes": notes,
        "aliases": {str(k): v for k, v in aliases.items()},
    }


#: The argument attribute by which a donated input names the output that takes its memory (JAX's).
_ALIAS: Final = "tf.aliasing_output"


def _donate(module: Any, ir: Any, donate: list[int]) -> dict[int, int]:
    """Marks each input of ``main`` in ``donate`` with the first output of
    its type that no input has yet (as JAX matches ``donate_argnums``);
    returns {input: output}, without the inputs no output matched. Marks
    already there are kept."""
    if not donate:
        return {}
    main = next((op for op in module.body.operations if op.operation.name == "func.func"
                 and ir.StringAttr(op.attributes["sym_name"]).value == "main"), None)
    if main is None:
        raise Failure("donate", "donate_argnums: the program has no function 'main'")
    kind = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    inputs, results = [str(t) for t in kind.inputs], [str(t) for t in kind.results]
    past = [i for i in donate if not 0 <= i < len(inputs)]
    if past:
        raise Failure("donate", f"donate_argnums names input {past[0]}; the program takes {len(inputs)} "
                      f"input(s) (0 to {len(inputs) - 1})")
    attrs = ([ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes["arg_attrs"])]
             if "arg_attrs" in main.attributes else [ir.DictAttr.get({}) for _ in inputs])
    entries = [{a.name: a.attr for a in (d[k] for k in range(len(d)))} for d in attrs]
    taken = {ir.IntegerAttr(e[_ALIAS]).value for e in entries if _ALIAS in e}
    aliases = {}
    for i in sorted(set(donate)):
        if _ALIAS in entries[i]:
            aliases[i] = ir.IntegerAttr(entries[i][_ALIAS]).value
            continue
        match = next((j for j, t in enumerate(results) if t == inputs[i] and j not in taken), None)
        if match is None:
            continue
        taken.add(match)
        aliases[i] = match
        entries[i][_ALIAS] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), match)
    main.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(e) for e in entries])
    return aliases


# Custom syntax of an op whose dialect torch-mlir lacks (chlo, sdy, mhlo); an
# unknown op of a dialect it has (stablehlo.nonsense) is plainly malformed.
_UNKNOWN_DIALECT_OP: Final = re.compile(r"Dialect `[\w.$-]+' not found for custom op '([\w.$-]+)'")


def verify(request: dict[str, Any]) -> dict[str, Any]:
    """Parses and verifies a StableHLO program from the user (MLIR text, MLIR
    bytecode or a portable artifact) before any vendor parser sees it. Ops of
    dialects torch-mlir lacks (chlo, sdy, mhlo) are read in their generic
    form and listed in the reply as not verified; text that spells such an
    op in its custom syntax cannot be read here at all, and is reported as
    reason "unverifiable" rather than "malformed"."""
    _stage("read")
    ir = _torch_mlir("ir")
    stablehlo = importlib.import_module("torch_mlir._mlir_libs._stablehlo")
    data = Path(request["model"]).read_bytes()
    source = stablehlo_artifact_version(data)
    context = _context(ir)
    stablehlo.register_dialect(context)
    context.allow_unregistered_dialects = True
    diagnostics: list[str] = []

    def keep(diagnostic: Any) -> bool:
        diagnostics.append(str(diagnostic.message).strip())
        return True

    context.attach_diagnostic_handler(keep)
    _stage("parse")
    bytecode = data.startswith(b"ML\xefR")
    with context:
        module = None
        detail = ""
        # Bytecode is read as a portable artifact first whatever its producer
        # string says, as XLA does (a damaged producer string does not stop
        # XLA's deserializer), then as plain MLIR bytecode.
        for reader in ("artifact", "mlir") if bytecode else ("mlir",):
            diagnostics.clear()
            try:
                if reader == "artifact":
                    module = stablehlo.deserialize_portable_artifact(context, data)
                else:
                    module = ir.Module.parse(data)
                break
            except MemoryError:  # the child's limit, not the program's fault (_answer says so)
                raise
            except Exception as exc:
                detail = detail or "; ".join(diagnostics[-3:]) or str(exc).strip()
        if module is None:
            unknown = sorted(set(_UNKNOWN_DIALECT_OP.findall(detail)))
            if unknown and not bytecode:
                raise Failure("unverifiable", f"torch-mlir cannot read {', '.join(unknown)} in custom "
                              f"syntax: {detail[:500]}", leftover_ops=unknown)
            what = f"a StableHLO {source} portable artifact" if source else (
                "MLIR bytecode" if bytecode else "MLIR text")
            raise Failure("malformed", f"cannot read the program as {what}: {detail[:2000]}")
        _stage("verify")
        try:
            module.operation.verify()
        except Exception as exc:
            detail = "; ".join(diagnostics[-3:]) or str(exc).strip()
            raise Failure("malformed", f"the program does not verify: {detail[:2000]}") from None
        ops = _all_ops(module)
        unverified = sorted({op.name for op in ops if not context.is_registered_operation(op.name)})
        counts = Counter(op.name for op in ops if op.name.startswith("stablehlo."))
    Path(request["output"]).write_bytes(b"")
    return {
        "ok": True,
        "stablehlo_ops": dict(sorted(counts.items())),
        "unverified_ops": unverified,
        "source_stablehlo_version": source,
        "torch_mlir_stablehlo_version": str(stablehlo.get_current_version()),
    }


def _ran_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, a MemoryError: a
    failure the child's memory limit caused is not the model's verdict."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        if request.get("kind") == "verify":
            return verify(request)
        if request.get("kind") == "stablehlo":
            return reserialize(request)
        return convert(request)
    except MemoryError:
        return {"ok": False, "reason": OUT_OF_MEMORY, "message": "out of memory"}
    except Failure as failure:
        if _ran_out_of_memory(failure):
            return {"ok": False, "reason": OUT_OF_MEMORY, "message": f"out of memory ({failure.message[:500]})"}
        return {
            "ok": False,
            "reason": failure.reason,
            "message": failure.message,
            "operators": failure.operators,
            "leftover_ops": failure.leftover_ops,
        }


def serve() -> int:
    """``--serve``: one request per stdin line, one reply per line on the
    original stdout, until stdin closes. Stray prints (the converter's C code
    writes to fd 1) are sent to stderr so that they cannot corrupt replies."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # The MLIR core once, before the first request; the ONNX importer (and
    # onnx) with the first ONNX request: a worker that only verifies or
    # rewrites StableHLO, restarted after a parser crash, starts faster.
    _torch_mlir("ir")
    importlib.import_module("torch_mlir._mlir_libs._stablehlo")
    for line in sys.stdin:
        if not line.strip():
            continue
        _stage("begin")
        try:
            reply = _answer(json.loads(line))
        except Exception as exc:  # a bug here must not take the other requests down
            reason = OUT_OF_MEMORY if _ran_out_of_memory(exc) else "converter-error"
            reply = {"ok": False, "reason": reason, "message": f"{type(exc).__name__}: {exc}"}
        _stage("done")
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


def main() -> int:
    faulthandler.enable()
    if "--serve" in sys.argv[1:]:
        return serve()
    reply = _answer(json.loads(sys.stdin.read()))
    _stage("done")
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
