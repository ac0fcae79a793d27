"""JAX programs: a lowering, an export, or an export's serialized bytes, as
the StableHLO module JAX made for them.

The module's arguments are the function's flattened arguments
(``jax.tree.leaves((args, kwargs))``) and its results the flattened results:
an executable is called with the leaves, in that order, and returns them.
What such a module cannot be run as here is refused before any compile,
saying what to do instead: unused arguments JAX left out (the executable's
inputs would not be the leaves), effects (token arguments), several
devices, several platforms in one export, a lowering of symbolic shapes.

An export of symbolic shapes (``jax.export.symbolic_shape("b")``) compiles
per concrete shape on first call (nx_hal.dynamic): for each shape JAX itself
lowers ``exported.call`` with those arguments and refines the module's
shapes, as it does to run an export, so JAX checks the shapes against the
export's constraints and says what broke them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from nx_hal.errors import InvalidArgumentError
from nx_hal.frontends.origin import Lowered, Origin

__all__ = ["lowered", "without_donation"]


def lowered(program: Any, format: str | None) -> Lowered:
    """``program`` (jax.stages.Lowered, jax.export.Exported or serialized
    export bytes with format ``"jax-export"``) as StableHLO."""
    kind = type(program).__name__
    if format == "jax-export" and isinstance(program, (bytes, bytearray, memoryview)):
        from jax import export

        try:
            program = export.deserialize(bytearray(program))
        except Exception:  # noqa: BLE001 -- flatbuffers' and JAX's own errors: all mean "not an export"
            raise InvalidArgumentError("not a serialized JAX export (the bytes of jax.export.Exported.serialize() "
                                       "do not parse)") from None
        kind = "Exported"
    if kind == "Exported":
        return _from_export(program)
    if kind == "Lowered":
        return _from_lowering(program)
    raise InvalidArgumentError(
        f"cannot compile a {type(program).__module__}.{kind}: pass jax.jit(f).lower(*args), "
        "jax.export.export(jax.jit(f))(*args), or its serialize() bytes with format='jax-export'")


def _from_export(exported: Any) -> Lowered:
    what = "this export"
    if exported.nr_devices != 1:
        raise InvalidArgumentError(f"{what} is for {exported.nr_devices} devices; nx_hal runs JAX exports "
                                   "for one device")
    if len(exported.platforms) != 1:
        raise InvalidArgumentError(
            f"{what} was lowered for several platforms {tuple(exported.platforms)}: export for the one the "
            "device runs, jax.export.export(jax.jit(f), platforms=['cpu']) (or 'cuda', 'tpu')")
    _no_effects(what, exported.ordered_effects, exported.unordered_effects)
    _all_kept(what, exported.module_kept_var_idx, len(exported.in_avals), "jax.export.export(jax.jit(f, "
              "keep_unused=True))(*args)")
    inputs = _names(exported.in_tree, args=True)
    origin = Origin("jax", inputs, _names(exported.out_tree, args=False), tuple(exported.platforms))
    if _symbolic(exported.in_avals):
        ports = (tuple(_port(a) for a in exported.in_avals), tuple(_port(a) for a in exported.out_avals))
        origin = dataclasses.replace(origin, ports=ports,
                                     specialize=lambda shapes: _specialized(exported, inputs, shapes))
    return Lowered("stablehlo", bytes(exported.mlir_module_serialized), origin)


def _symbolic(avals: Any) -> bool:
    return any(not isinstance(d, int) for aval in avals for d in getattr(aval, "shape", ()))


def _port(aval: Any) -> tuple[str, tuple[int | str, ...]]:
    """An argument's or result's (dtype name, dims): a symbolic dim as its
    text ("b", "2*b"), which names it for nx_hal.dynamic."""
    import numpy as np

    return np.dtype(aval.dtype).name, tuple(d if isinstance(d, int) else str(d) for d in aval.shape)


def _specialized(exported: Any, inputs: tuple[str, ...], shapes: dict[str, list[int]]) -> Lowered:
    """``exported`` for the concrete ``shapes`` (by input name): JAX lowers
    a call of it with those arguments, for the export's own platform, and
    refines its shapes (what JAX does before compiling such a call)."""
    import jax

    struct: Any = jax.ShapeDtypeStruct  # untyped in JAX's stubs
    leaves = [struct(tuple(shapes[name]), aval.dtype)
              for name, aval in zip(inputs, exported.in_avals, strict=True)]
    args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, leaves)
    try:
        lowering = jax.jit(exported.call, keep_unused=True).trace(*args, **kwargs).lower(
            lowering_platforms=tuple(exported.platforms))
        text = _refined(lowering.compiler_ir("stablehlo"))
    except ValueError as exc:  # JAX's own words: which dim broke which constraint
        raise InvalidArgumentError(f"the inputs' shapes do not fit this export: {exc}") from None
    found = _from_lowering(lowering, text)
    return Lowered(found.format, found.data, dataclasses.replace(found.origin, inputs=inputs,
                                                                 outputs=_names(exported.out_tree, args=False),
                                                                 platforms=tuple(exported.platforms)))


def _refined(module: Any) -> str:
    """A lowering's module with the export's symbolic shapes refined to the
    call's: JAX's own pass, run by JAX before it compiles such a call (not
    public API; without it the module goes as it is, and the device's
    compiler refines what it can)."""
    try:
        from jax._src.interpreters.mlir import refine_polymorphic_shapes
    except ImportError:
        return str(module)
    return str(refine_polymorphic_shapes(module))


def _from_lowering(lowering: Any, text: str | None = None) -> Lowered:
    what = "this lowering"
    # Lowered keeps these in compile_args, which JAX documents nowhere:
    # read defensively, and the executable's input count is checked too.
    args: dict[str, Any] = getattr(getattr(lowering, "_lowering", None), "compile_args", None) or {}
    if args.get("num_devices", 1) != 1:
        raise InvalidArgumentError(f"{what} is for {args['num_devices']} devices; nx_hal runs JAX "
                                   "lowerings for one device")
    if args.get("host_callbacks"):
        raise InvalidArgumentError(f"{what} calls back into Python on the host (jax.debug.print, "
                                   "jax.pure_callback, io_callback), which a compiled program cannot do here")
    _no_effects(what, args.get("ordered_effects", ()), args.get("unordered_effects", ()))
    n = lowering.in_tree.num_leaves
    _static(what, args.get("global_in_avals", ()))
    kept = args.get("kept_var_idx")
    if kept is not None:
        _all_kept(what, kept, n, "jax.jit(f, keep_unused=True).lower(*args)")
    backend = args.get("backend")
    platform = getattr(backend, "platform", None)
    if text is None:
        text = lowering.as_text(dialect="stablehlo")
    return Lowered("stablehlo", text.encode(),
                   Origin("jax", _names(lowering.in_tree, args=True), _names(lowering.out_tree, args=False),
                          (str(platform),) if platform else ()))


def _no_effects(what: str, ordered: Any, unordered: Any) -> None:
    effects = [*ordered, *unordered]
    if effects:
        raise InvalidArgumentError(f"{what} has side effects ({', '.join(map(str, effects))}), which take token "
                                   "arguments nx_hal does not pass")


def _static(what: str, avals: Any) -> None:
    for i, aval in enumerate(avals):
        shape = getattr(aval, "shape", ())
        if any(not isinstance(d, int) for d in shape):
            raise InvalidArgumentError(
                f"{what} has symbolic dimensions (argument {i}: {aval}), and a lowering cannot be lowered again "
                "for each concrete shape: export it, jax.export.export(jax.jit(f))(*args), and nx_hal compiles "
                "the export per shape on first call")


def _all_kept(what: str, kept: Any, total: int, instead: str) -> None:
    dropped = sorted(set(range(total)) - set(kept))
    if dropped:
        raise InvalidArgumentError(
            f"JAX left unused argument(s) {', '.join(map(str, dropped))} (of the {total} flattened ones) out of "
            f"{what}, so its inputs would not be the function's arguments: make it with {instead}")


def _names(tree: Any, *, args: bool) -> tuple[str, ...]:
    """Each leaf's path, as the executable's input or output name: the
    arguments' as ``arg0.w`` (positional) or ``name.w`` (keyword), the
    results' as ``0``, ``y`` or ``result`` (a single array)."""
    from jax import tree_util

    leaves = tree_util.tree_flatten_with_path(tree.unflatten(range(tree.num_leaves)))[0]
    names = []
    for path, _ in leaves:
        parts = [_key(k) for k in path]
        if args and len(parts) >= 2:  # ((args...), {kwargs...})
            parts = ([f"arg{parts[1]}"] if parts[0] == "0" else [parts[1]]) + parts[2:]
        names.append(".".join(parts) or "result")
    return tuple(names)


def _key(entry: Any) -> str:
    for attribute in ("key", "idx", "name"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


#: The argument attributes by which JAX marks a donated input: the input's buffer becomes an
#: output's (input-output aliasing) or may be reused for one.
_DONATION: Final = ("tf.aliasing_output", "jax.buffer_donor")


def without_donation(data: bytes, version: str | None = None) -> bytes:
    """A JAX program (MLIR text, or an export's StableHLO portable artifact)
    with its donation marks taken off ``main``'s arguments: for a device that
    copies donated inputs (its attribute ``donation`` is "copy"), where the
    copy costs a step's worth of parameter traffic and computes the same as
    no donation at all (bench/train_step.py). A program without them is
    returned as it is; an artifact is written again for ``version`` (its
    own: nx_hal.programs.stablehlo_artifact_version), else JAX's current."""
    if not any(mark.encode() in data for mark in _DONATION):
        return data
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo

    try:  # JAX's own context, with every dialect its programs use: not public API
        from jax._src.interpreters.mlir import make_ir_context
    except ImportError:
        return data  # the device's copy keeps it correct, only slower
    artifact = data.startswith(b"ML\xefR")
    with make_ir_context() as context:
        module = (stablehlo.deserialize_portable_artifact(context, data) if artifact
                  else ir.Module.parse(data.decode()))
        for op in module.body.operations:
            if op.operation.name == "func.func" and "arg_attrs" in op.attributes:
                _strip(op, ir)
        if not artifact:
            return str(module).encode()
        return bytes(stablehlo.serialize_portable_artifact(module, version or str(stablehlo.get_current_version())))


def _strip(op: Any, ir: Any) -> None:
    kept = [ir.DictAttr.get({a.name: a.attr for a in ir.DictAttr(d) if a.name not in _DONATION})
            for d in ir.ArrayAttr(op.attributes["arg_attrs"])]
    op.attributes["arg_attrs"] = ir.ArrayAttr.get(kept)
