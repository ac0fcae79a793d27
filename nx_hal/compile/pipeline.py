"""The pipeline: each stage in order, each named for its module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal.compile import memo
from nx_hal.compile.convert import convert
from nx_hal.compile.load import load
from nx_hal.compile.native import compile_native
from nx_hal.compile.prepare import prepare
from nx_hal.compile.request import Request, split
from nx_hal.compile.stablehlo import compile_stablehlo, verify
from nx_hal.compile.target import Target

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

if TYPE_CHECKING:
    from nx_hal import frontends
    from nx_hal.executable import Executable

__all__ = ["compile_program"]


def compile_program(target: Target, program: object, format: str | None, *, cache: bool,
                    options: dict[str, object]) -> Executable:
    """``Device.compile``: the executable of ``program`` on ``target``."""
    request = split(options, cache=cache, plugin=target.plugin)
    remembered = memo.key_of(target, program, format, request)
    exe = memo.get(remembered, target)
    if exe is not None:
        return exe
    prog = load(target, program, format)
    sources = memo.snapshot(prog.sources)
    origin = prog.origin
    prog, names, index_checks = prepare(target, prog, request.cache)
    prog, converted = convert(target, prog, request)
    exe = _compiled(target, prog, request, converted)
    if origin is not None:
        names = _framework_names(exe, origin)
    if names is not None:
        exe.rename(*names)
    if index_checks:
        exe.check_inputs(index_checks)
    memo.put(remembered, sources, exe)
    return exe


def _framework_names(exe: Executable, origin: frontends.Origin) -> tuple[list[str], list[str]]:
    """The framework's names for the executable's inputs and outputs; an
    executable that does not take the function's flattened arguments is refused."""
    if len(exe.inputs) != len(origin.inputs) or len(exe.outputs) != len(origin.outputs):
        from nx_hal.errors import InvalidArgumentError

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


def _compiled(target: Target, prog: programs.Program, request: Request, converted: bool) -> Executable:
    """From the store (keyed by every byte the executable depends on), else
    checked and compiled natively, then stored."""
    options = _options(target, request)
    store = target.link.compile_cache if request.cache else None
    key = store.key(target, prog, options) if store is not None else ""
    exe = store.load(target, key) if store is not None else None
    if exe is not None:
        return exe
    if prog.format == "stablehlo":
        if not converted and request.verify != "off":
            verify(target, prog, request)
        # A converted module is already written for this backend's version.
        exe = compile_stablehlo(target, prog, options, "never" if converted else request.reserialize)
    else:
        exe = compile_native(target, prog, options, request)
    if store is not None:
        store.store_executable(key, exe)
    return exe
