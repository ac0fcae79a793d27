"""The pipeline: each stage in order, each named for its module."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal.compile import donate, memo, shortcut
from nx_hal.compile.convert import convert
from nx_hal.compile.load import converts_onnx, load
from nx_hal.compile.native import compile_native
from nx_hal.compile.prepare import prepare
from nx_hal.compile.request import Request, split
from nx_hal.compile.stablehlo import compile_stablehlo, verify
from nx_hal.compile.target import Target
from nx_hal.converter import PreparedOnnx
from nx_hal.errors import InvalidArgumentError
from nx_hal.store import digest_scope

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

if TYPE_CHECKING:
    from nx_hal import frontends
    from nx_hal.dynamic import DynamicExecutable
    from nx_hal.executable import Executable

__all__ = ["compile_program"]


def compile_program(target: Target, program: object, format: str | None, *, cache: bool,
                    options: dict[str, object]) -> Executable | DynamicExecutable:
    """``Device.compile``: the executable of ``program`` on ``target``."""
    request = split(options, cache=cache, plugin=target.plugin, converts=converts_onnx(target))
    remembered = memo.key_of(target, program, format, request)
    exe = memo.get(remembered, target)
    if exe is not None:
        return exe
    found = shortcut.find(target, remembered)  # a file compiled before, unchanged: no stage runs
    if found is not None:
        memo.put(remembered, found[1], found[0])
        return found[0]
    with digest_scope():  # the keys of every stage hash the model's bytes once
        return _compile(target, program, format, request, remembered)


def _compile(target: Target, program: object, format: str | None, request: Request,
             remembered: tuple[object, ...] | None) -> Executable | DynamicExecutable:
    started = time.time_ns()
    prog = load(target, program, format, request.example_args)
    sources = memo.snapshot(prog.sources)
    origin = prog.origin
    prog, prepared = prepare(target, prog, request.cache)
    made = _per_shape(target, prog, request, prepared)
    if made is None:
        made, stored_as = _finish(target, prog, request, prepared, origin)
        shortcut.record(target, remembered, stored_as, made, sources, started)
    memo.put(remembered, sources, made)
    return made


def _finish(target: Target, prog: programs.Program, request: Request, prepared: PreparedOnnx | None,
            origin: frontends.Origin | None) -> tuple[Executable, str]:
    """Stages 3 and 4 for one shape, the executable named as its model names
    things; with the compile cache's key it is stored under ("": none)."""
    prog, converted = convert(target, prog, request)
    inputs = list(origin.inputs) if origin is not None else prepared.names[0] if prepared and prepared.names else None
    donated = donate.positions(target, request.donate_argnums, inputs)
    exe, stored_as = _compiled(target, prog, request, converted, donated)
    names = _framework_names(exe, origin) if origin is not None else prepared.names if prepared else None
    if names is not None:
        exe.rename(*names)
    if prepared is not None and prepared.index_checks:
        exe.check_inputs(prepared.index_checks)
    return exe, stored_as


def _per_shape(target: Target, prog: programs.Program, request: Request,
               prepared: PreparedOnnx | None) -> Executable | DynamicExecutable | None:
    """An ONNX model with dynamic dims where the device compiles one shape at
    a time and no ``input_shapes`` fixes them, or one with ``shape_buckets``:
    compiled per shape, on first call (nx_hal.dynamic); else None. A JAX
    export of symbolic shapes is compiled per shape the same way."""
    if prog.origin is not None and prog.origin.specialize is not None:
        return _per_shape_framework(target, prog.origin, request)
    if prepared is None or prepared.names is None or prepared.shapes is None:
        if request.shape_buckets is not None:
            raise InvalidArgumentError("option 'shape_buckets' applies to ONNX models whose inputs' dims it can read",
                                       plugin=target.plugin)
        return None
    from nx_hal.dynamic import DynamicExecutable, has_dynamic_dims

    native = prog.format in target.formats
    if native or request.input_shapes is not None or not has_dynamic_dims(prepared.shapes[0]):
        if request.shape_buckets is None:
            return None
        one = _finish(target, prog, request, prepared, None)[0]
        return DynamicExecutable(target, prepared.names, prepared.shapes, request.shape_buckets, lambda _: one)
    fixed = dataclasses.replace(request, shape_buckets=None)

    def compile_for(shapes: dict[str, list[int]]) -> Executable:
        return _finish(target, prog, dataclasses.replace(fixed, input_shapes=shapes), prepared, None)[0]

    return DynamicExecutable(target, prepared.names, prepared.shapes, request.shape_buckets, compile_for)


def _per_shape_framework(target: Target, origin: frontends.Origin,
                         request: Request) -> Executable | DynamicExecutable:
    """A framework's program of symbolic shapes: each concrete shape's
    program made by the framework (``origin.specialize``), then compiled as
    any of its programs (the store keeps each); with ``input_shapes``, the
    one shape they give."""
    from nx_hal.dynamic import DynamicExecutable

    specialize, ports = origin.specialize, origin.ports
    assert specialize is not None and ports is not None

    def compile_for(shapes: dict[str, list[int]]) -> Executable:
        made = specialize(shapes)
        prog = load(target, programs.Program(made.format, made.data, origin=made.origin), None)
        return _finish(target, prog, request, None, made.origin)[0]

    if request.input_shapes is not None:
        return compile_for(_fixed_shapes(origin.inputs, ports[0], request.input_shapes, target.plugin))
    return DynamicExecutable(target, (list(origin.inputs), list(origin.outputs)), ports, request.shape_buckets,
                             compile_for)


def _fixed_shapes(names: tuple[str, ...], ports: tuple[tuple[str, tuple[int | str, ...]], ...],
                  given: dict[str, list[int]], plugin: str) -> dict[str, list[int]]:
    """Every input's shape from ``input_shapes`` (those with symbolic dims
    must be named; the others may be, with their own dims)."""
    from nx_hal.dynamic import _declared
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise InvalidArgumentError(f"input_shapes names {', '.join(map(repr, unknown))}, which this program does not "
                                   f"take; its inputs: {', '.join(names)}", plugin=plugin)
    shapes = {}
    for name, (_, dims) in zip(names, ports, strict=True):
        want = given.get(name)
        declared = _declared(dims)
        if want is None and any(isinstance(d, str) for d in dims):
            raise InvalidArgumentError(f"input_shapes gives no shape for '{name}', whose dims {declared} are symbolic",
                                       plugin=plugin)
        if want is not None and (len(want) != len(dims) or any(
                isinstance(d, int) and d != w for d, w in zip(dims, want, strict=True))):
            raise InvalidArgumentError(f"input_shapes gives '{name}' the shape {list(want)}; the program declares "
                                       f"{declared}", plugin=plugin)
        shapes[name] = list(want) if want is not None else [int(d) for d in dims]
    return shapes


def _framework_names(exe: Executable, origin: frontends.Origin) -> tuple[list[str], list[str]]:
    """The framework's names for the executable's inputs and outputs; an
    executable that does not take the function's flattened arguments is refused."""
    if len(exe.inputs) != len(origin.inputs) or len(exe.outputs) != len(origin.outputs):
        raise InvalidArgumentError(
            f"the {origin.framework} program compiled to {len(exe.inputs)} inputs and {len(exe.outputs)} outputs, "
            f"where its function takes {len(origin.inputs)} arguments and returns {len(origin.outputs)} arrays "
            "(flattened)", plugin=exe.device.plugin)
    return list(origin.inputs), list(origin.outputs)


def _options(target: Target, request: Request) -> dict[str, object]:
    model = target.link.spec.compile_options_model if target.link.spec else None
    if model is not None and request.options:
        return programs.validate_options(model, request.options, target.plugin)
    return request.options


def _compiled(target: Target, prog: programs.Program, request: Request, converted: bool,
              donated: tuple[int, ...] = ()) -> tuple[Executable, str]:
    """From the store (keyed by every byte the executable depends on), else
    checked and compiled natively, then stored; with its key ("": no store).
    ``donated``: the inputs marked donated first (nx_hal.compile.donate)."""
    options = _options(target, request)
    store = target.link.compile_cache if request.cache else None
    keyed = {**options, "donate_argnums": list(donated)} if donated else options
    key = store.key(target, prog, keyed) if store is not None else ""
    exe = store.load(target, key) if store is not None else None
    if exe is not None:
        return exe, key
    if prog.format == "stablehlo":
        if not converted and request.verify != "off":
            verify(target, prog, request)
        prog, rewritten = donate.apply(target, prog, donated)
        # A converted module is already written for this backend's version.
        exe = compile_stablehlo(target, prog, options, "never" if converted or rewritten else request.reserialize)
    else:
        exe = compile_native(target, prog, options, request)
    if store is not None and not store.store_executable(key, exe):
        key = ""
    return exe, key
