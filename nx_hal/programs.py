"""Programs: turning what a user passes to ``compile`` into ``{format, bytes}``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from nx_hal import external_data, frontends
from nx_hal.errors import InvalidArgumentError

__all__ = ["Program", "load", "format_of_path", "validate_options", "stablehlo_artifact_version"]

_SUFFIX_FORMATS: Final = {
    ".onnx": "onnx",
    ".mlir": "stablehlo",
    ".mlirbc": "stablehlo",
    ".xml": "openvino-ir",
    ".popef": "popef",
}
KNOWN_FORMATS: Final = tuple(dict.fromkeys(_SUFFIX_FORMATS.values()))
_MLIR_BYTECODE_MAGIC: Final = b"ML\xefR"
_VERSION: Final = re.compile(r"\d+\.\d+\.\d+")


@dataclass(frozen=True)
class Program:
    format: str
    data: bytes
    extra: bytes | None = None  # second file of two-file formats (IR weights)
    # The files read for it (real paths): the program, its weights, its
    # external data; a compile of the same files unchanged is a lookup.
    sources: tuple[str, ...] = field(default=(), compare=False)
    # For a framework's program (a JAX lowering or export): its flattened
    # inputs' and outputs' names and the platforms it was lowered for.
    origin: frontends.Origin | None = field(default=None, compare=False)


def format_of_path(path: Path) -> str | None:
    return _SUFFIX_FORMATS.get(path.suffix.lower())


def _is_file(path: Path) -> bool:
    """Whether ``path`` names a file; False for text that cannot be a name
    (one line of a program longer than a file name may be)."""
    try:
        return path.is_file()
    except OSError:
        return False


def sniff(data: bytes) -> str | None:
    """The format that a program's first bytes show, or None."""
    if data.startswith(_MLIR_BYTECODE_MAGIC):
        return "stablehlo"
    head = data[:4096].lstrip()
    if head.startswith((b"module", b"func.func", b"#loc", b"\"builtin.module\"")):
        return "stablehlo"
    if head.startswith(b"<?xml") or head.startswith(b"<net"):
        return "openvino-ir"
    if data[:1] == b"\x08":  # ONNX ModelProto: field 1 (ir_version), varint
        return "onnx"
    return None


def onnx_problem(data: bytes) -> str | None:
    """Why ``data`` is no ONNX model at all (empty, not a ModelProto, a
    ModelProto without a graph), or None. Said once, before any device is
    tried, by those that try several (compile_anywhere, ``nx-hal run``): each
    device would only fail it in its own words. Without the onnx package only
    emptiness is seen; the devices' own parsers say the rest."""
    if not data.strip():
        return "it is empty"
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 -- protobuf's DecodeError and friends: all mean "not ONNX"
        return "its bytes are not an ONNX model (ModelProto)"
    if not model.HasField("graph") or not model.graph.node and not model.graph.output:
        return "it holds no ONNX graph"
    return None


def load(program: object, format: str | None, accepted: tuple[str, ...], example_args: object = None) -> Program:
    """Bytes, text, a path, an ``onnx.ModelProto``, a JAX lowering or
    export, or a torch module (with ``example_args``) or export
    (nx_hal.frontends) as a Program. The format comes from ``format``, else
    the path's suffix, else the content."""
    extra: bytes | None = None
    if isinstance(program, Program) and example_args is None:
        return program if format is None or format == program.format else Program(format, program.data, program.extra)
    from_framework = frontends.recognize(program, format, example_args)
    if from_framework is not None:
        return Program(from_framework.format, from_framework.data, origin=from_framework.origin)
    if hasattr(program, "SerializeToString") and type(program).__name__ == "ModelProto":
        data = program.SerializeToString()
        return Program(format or "onnx", external_data.inline(data, None)[0] if format in (None, "onnx") else data)
    path: Path | None = None
    sources: list[str] = []
    if isinstance(program, PathLike):
        path = Path(program)
    elif isinstance(program, str) and "\n" not in program and len(program) < 4096:
        candidate = Path(program)
        if candidate.suffix.lower() in _SUFFIX_FORMATS or _is_file(candidate):
            path = candidate
    if path is not None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read program {path}: {exc.strerror}") from None
        format = format or format_of_path(path) or sniff(data)
        sources.append(os.path.realpath(path))
        if format == "openvino-ir":
            weights = path.with_suffix(".bin")
            extra = weights.read_bytes() if weights.is_file() else None
            if extra is not None:
                sources.append(os.path.realpath(weights))
    elif isinstance(program, str):
        data = program.encode()
    elif isinstance(program, (bytes, bytearray, memoryview)):
        data = bytes(program)
    else:
        raise InvalidArgumentError(
            f"cannot compile a {type(program).__name__}: pass bytes, text, a path, an onnx.ModelProto, "
            "jax.jit(f).lower(*args) or a jax.export.Exported"
        )
    if format is None:
        format = sniff(data) or (accepted[0] if len(accepted) == 1 else None)
    if format == "onnx":
        data, external = external_data.inline(data, path)
        sources.extend(external)
    if format is None:
        known = accepted or KNOWN_FORMATS
        what = f"{path}" if path is not None else "the program"
        raise InvalidArgumentError(
            f"cannot tell what kind of program {what} is: neither its name nor its first bytes are "
            f"those of a format nx_hal knows; pass format= (one of: {', '.join(known)})"
        )
    return Program(format, data, extra, tuple(sources))


def validate_options(model: type[BaseModel], options: dict[str, Any], plugin: str) -> dict[str, object]:
    """Validates compile options with a plugin's model; errors name the option."""
    try:
        validated = model.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(
            f"option '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}" for err in exc.errors()
        )
        raise InvalidArgumentError(problems, plugin=plugin) from None
    return validated.model_dump(exclude_unset=True)


def stablehlo_artifact_version(data: bytes) -> str | None:
    """The StableHLO version a portable artifact was written for: its MLIR
    bytecode producer string reads "StableHLO_vX.Y.Z". None for MLIR text,
    plain MLIR bytecode or anything else."""
    if not data.startswith(_MLIR_BYTECODE_MAGIC):
        return None
    start = data.find(b"StableHLO_v", 4, 64)
    end = data.find(b"\x00", start) if start >= 0 else -1
    if end < 0:
        return None
    version = data[start + len("StableHLO_v"):end].decode(errors="replace")
    return version if _VERSION.fullmatch(version) else None


def version_tuple(version: str) -> tuple[int, ...]:
    """"1.13.3" as (1, 13, 3), for comparing StableHLO versions."""
    return tuple(int(part) for part in version.split("."))
