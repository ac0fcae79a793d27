"""Stage 5 for StableHLO: verified in a child before the backend's parser
sees it (nx_hal.onnx.verify, through the converter), then compiled, written
again for the backend's StableHLO version where it must be."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal.compile.request import Request
from nx_hal.compile.target import Target
from nx_hal.converter import target_version_of
from nx_hal.errors import InvalidArgumentError, InvalidProgramError

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

if TYPE_CHECKING:
    from nx_hal.executable import Executable

__all__ = ["compile_stablehlo", "verify"]


def verify(target: Target, prog: programs.Program, request: Request) -> None:
    """Vendor parsers crash on damaged bytecode: a bad program is
    InvalidArgumentError naming what failed. Without torch-mlir, "auto"
    passes it through (warning once) and "require" refuses it."""
    cache = target.link.compile_cache
    target.link.converter.check_stablehlo(prog.data, policy=request.verify, plugin=target.plugin,
                                            cache_dir=cache.store.root if cache is not None else None)


def _rewritten(target: Target, prog: programs.Program, version: str) -> programs.Program:
    return programs.Program("stablehlo", target.link.converter.reserialize(prog.data, version, plugin=target.plugin))


def compile_stablehlo(target: Target, prog: programs.Program, options: dict[str, object], policy: str) -> Executable:
    """A portable artifact newer than the backend's StableHLO version is
    written again for it (its deserializer only reads its own version and
    older); text the backend fails to parse is retried that way, since text
    printed by a newer StableHLO may use syntax its parser predates.
    ``policy`` "always" rewrites every module, "never" none. Rewriting needs
    torch-mlir; without it a failure says what would have helped."""
    converter = target.link.converter
    version = target_version_of(target)
    if version is None or policy == "never":
        return target._compile(prog, options)
    source = programs.stablehlo_artifact_version(prog.data)
    newer = source is not None and programs.version_tuple(source) > programs.version_tuple(version)
    if policy == "always" or (newer and converter.available() is None):
        return target._compile(_rewritten(target, prog, version), options)
    try:
        return target._compile(prog, options)
    except InvalidArgumentError as first:
        if newer:  # and no torch-mlir to write it again
            raise type(first)(f"{first.message} (the program is a StableHLO {source} artifact and the backend "
                              f"reads StableHLO {version}; with torch-mlir installed (pip install 'nx-hal[onnx]') "
                              "nx_hal writes it again for the backend's version)", plugin=target.plugin) from first
        # Only a program the backend could not parse (INVALID_PROGRAM): other
        # errors (a bad option, too many replicas) would fail the same again.
        if source is not None or not isinstance(first, InvalidProgramError) or converter.available() is not None:
            raise
        return _retry(target, prog, options, version, first)


def _retry(target: Target, prog: programs.Program, options: dict[str, object], version: str,
           first: InvalidArgumentError) -> Executable:
    # Whatever else goes wrong, the error on the program as given leads.
    try:
        return target._compile(_rewritten(target, prog, version), options)
    except InvalidArgumentError as exc:
        raise type(first)(f"{first.message} (written again as a StableHLO {version} artifact through torch-mlir, "
                          f"it failed too: {exc.message})", plugin=target.plugin) from first
