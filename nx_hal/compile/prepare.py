"""Stage 2, prepare: an ONNX model as this backend should run it. What the
backend computes differently from ONNX is rewritten or refused, and the
index inputs to check at each run are found (Converter.prepare_onnx, given
the device's attributes: some deviations depend on the machine); the
model's input and output names are kept, since a converted module calls
them arg0... and an SDK may report another name for a tensor."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal.compile.target import Target
from nx_hal.converter import PreparedOnnx

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

__all__ = ["prepare"]


def prepare(target: Target, prog: programs.Program, cache: bool) -> tuple[programs.Program, PreparedOnnx | None]:
    """(the program to compile, what preparing an ONNX model found: its
    names, shapes and index checks); kept in the compile cache's store when
    ``cache``."""
    if prog.format != "onnx":
        return prog, None
    compile_cache = target.link.compile_cache if cache else None
    prepared: PreparedOnnx = target.link.converter.prepare_onnx(
        prog.data, plugin=target.plugin, attributes=target.attributes,
        store=compile_cache.store if compile_cache is not None else None)
    return dataclasses.replace(prog, data=prepared.model), prepared
