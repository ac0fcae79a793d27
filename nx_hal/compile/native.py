"""Stage 5 for the formats a vendor reads itself (ONNX and OpenVINO IR on
the npu plugin, popef, ...): the first compile happens in the sandbox's
child (nx_hal.sandbox), since those readers crash and hang on damaged input."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nx_hal import sandbox
from nx_hal._lazy import LazyModule
from nx_hal.compile.request import Request

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

if TYPE_CHECKING:
    from nx_hal.executable import Executable

__all__ = ["compile_native"]


def compile_native(target: Any, prog: programs.Program, options: dict[str, object], request: Request) -> Executable:
    return sandbox.compile(target, prog, options, policy=request.verify,
                           timeout=float(request.verify_timeout or sandbox.DEFAULT_TIMEOUT))
