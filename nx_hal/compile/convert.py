"""Stage 3, convert: ONNX → StableHLO for a device that compiles StableHLO
(PJRT), by the converter its plugin was given, written for the backend's
own StableHLO version; other formats the device does not take are refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal.compile.load import accepted, converts_onnx
from nx_hal.compile.request import Request
from nx_hal.compile.target import Target
from nx_hal.converter import target_version_of
from nx_hal.errors import InvalidArgumentError

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

__all__ = ["convert"]


def convert(target: Target, prog: programs.Program, request: Request) -> tuple[programs.Program, bool]:
    """(the program in a format ``target`` compiles, whether it was converted)."""
    if request.precision is not None and prog.format != "onnx":
        raise InvalidArgumentError(f"option 'precision' applies to ONNX models, which {target.selector} converts; "
                                   f"a {prog.format} program computes in the types it was written in (cast it where "
                                   "it is made: jnp.bfloat16 in JAX)", plugin=target.plugin)
    if prog.format in target.formats:
        return prog, False
    if prog.format != "onnx" or not converts_onnx(target):
        raise InvalidArgumentError(f"device {target.selector} does not accept '{prog.format}' programs "
                                   f"(accepts: {', '.join(accepted(target)) or 'none'})", plugin=target.plugin)
    cache = target.link.compile_cache if request.cache else None
    module = target.link.converter.to_stablehlo(
        prog.data, input_shapes=request.input_shapes or {}, target_version=target_version_of(target),
        cache_dir=cache.store.root if cache is not None else None, use_cache=cache is not None,
        platform=target.kind, precision=request.precision)
    return programs.Program("stablehlo", module), True
