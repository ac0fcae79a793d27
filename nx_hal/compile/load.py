"""Stage 1, load: what the user passed as a programs.Program (nx_hal.programs: the
bytes read once, external data put inside), checked against the formats
the device compiles, natively or through the ONNX converter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal.compile.target import Target

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

__all__ = ["load", "converts_onnx", "accepted"]


def converts_onnx(target: Target) -> bool:
    """Whether ONNX reaches ``target`` as StableHLO (PJRT devices)."""
    return "stablehlo" in target.formats and "onnx" not in target.formats


def accepted(target: Target) -> tuple[str, ...]:
    return target.formats + (("onnx",) if converts_onnx(target) else ())


def load(target: Target, program: object, format: str | None, example_args: object = None) -> programs.Program:
    prog = programs.load(program, format, accepted(target), example_args)
    if prog.origin is not None:
        _check_platform(target, prog.origin.platforms)
        # A program of symbolic shapes is never compiled: each shape's program comes through here.
        if (prog.origin.framework == "jax" and prog.origin.specialize is None
                and target.attributes.get("donation") == "copy"):
            prog = _without_donation(prog)
    return prog


def _without_donation(prog: programs.Program) -> programs.Program:
    """A device that copies donated inputs (an XLA CPU older than StableHLO
    1.20: its in-place update of a donated parameter is wrong) runs a JAX
    program better without them: the copy made each donated step 0.84x
    jax's, no donation 0.93x (bench/train_step.py), and both leave the
    inputs valid."""
    from nx_hal.frontends import from_jax

    data = from_jax.without_donation(prog.data, programs.stablehlo_artifact_version(prog.data))
    return prog if data is prog.data else programs.Program(prog.format, data, origin=prog.origin)


def _check_platform(target: Target, platforms: tuple[str, ...]) -> None:
    """A framework's program lowered for another platform (a CPU lowering on
    a GPU) may call that platform's kernels (LAPACK custom calls): refused
    by name before the device's compiler sees it."""
    platform = str(target.attributes.get("platform_name", "")).lower()
    if platforms and platform and platform not in platforms:
        from nx_hal.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"this program was lowered for {', '.join(platforms)}, and {target.selector} runs '{platform}': "
            f"lower or export it for '{platform}' (jax.export.export(jax.jit(f), platforms=['{platform}']))",
            plugin=target.plugin)
