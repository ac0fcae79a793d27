"""ONNX → StableHLO for PJRT devices, through torch-mlir in a child process.

    result = onnx_to_stablehlo(model_bytes, input_shapes={"x": (1, 3, 224, 224)},
                               target_version=device.attributes["stablehlo_version"])
    result.module          # MLIR text (or portable bytecode with bytecode=True)

The converter runs in ``python -m nx_hal._convert_child``: some inputs crash
torch-mlir's process, and that must not take the caller with it. Results are
cached by content under ``cache_dir``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nx_hal.config import default_cache_dir
from nx_hal.errors import DeadlineExceededError, InvalidArgumentError, NxHalError, UnavailableError

__all__ = [
    "ConversionError",
    "ConversionResult",
    "onnx_to_stablehlo",
    "convert_cli",
    "target_version_of",
    "converter_available",
    "parse_input_shapes",
]

# Bump when the child's output for the same input changes, to retire old cache entries.
_CACHE_SCHEMA: Final = 1
_VERSION: Final = re.compile(r"^\d+\.\d+\.\d+$")
_TAIL: Final = 1500


class ConversionError(InvalidArgumentError):
    """The ONNX model cannot become StableHLO. ``operators`` lists the ONNX op
    types responsible when known, ``leftover_ops`` the MLIR ops the lowering
    left behind, ``reason`` one of ``malformed``, ``dynamic-shape``,
    ``unsupported-operator``, ``serialize``, ``converter-error``, ``crash``.

    Its code is INVALID_ARGUMENT."""

    code = "INVALID_ARGUMENT"

    def __init__(
        self,
        message: str,
        *,
        reason: str = "converter-error",
        operators: Sequence[str] = (),
        leftover_ops: Sequence[str] = (),
        plugin: str | None = None,
    ) -> None:
        self.reason = reason
        self.operators = tuple(operators)
        self.leftover_ops = tuple(leftover_ops)
        super().__init__(message, plugin=plugin)


@dataclass(frozen=True)
class ConversionResult:
    """A converted module and what happened on the way."""

    module: bytes  # MLIR text (UTF-8) or portable StableHLO bytecode
    bytecode: bool
    stablehlo_version: str | None  # version it was serialised for; None: text not version-checked
    portable: bool  # serialised (or checked to serialise) as a portable artifact
    onnx_ops: tuple[str, ...]  # ONNX op types in the model
    stablehlo_ops: dict[str, int]  # op name → count in the output
    cache_hit: bool
    seconds: float  # wall time of this call (conversion, or cache lookup on a hit)
    cache_key: str
    torch_mlir_version: str
    notes: tuple[str, ...] = field(default=())
    format: str = "stablehlo"

    @property
    def text(self) -> str:
        """The module as MLIR text; bytecode has no text form here."""
        if self.bytecode:
            raise InvalidArgumentError("this result holds bytecode; convert with bytecode=False for text")
        return self.module.decode()


def converter_available() -> str | None:
    """None when the converter can run, else why not (for selection reports)."""
    for module, package in (("torch_mlir", "torch-mlir"), ("onnx", "onnx")):
        if importlib.util.find_spec(module) is None:
            return f"ONNX → StableHLO needs the '{package}' package (pip install {package})"
    return None


def _torch_mlir_version() -> str:
    try:
        return importlib.metadata.version("torch-mlir")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _normalise_shapes(input_shapes: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for name, dims in (input_shapes or {}).items():
        try:
            shapes[str(name)] = [int(d) for d in dims]
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"input_shapes['{name}'] must be a sequence of ints, got {dims!r}"
            ) from None
    return dict(sorted(shapes.items()))


def _cache_key(model: bytes, shapes: dict[str, list[int]], target: str | None, bytecode: bool, tm: str) -> str:
    digest = hashlib.sha256()
    digest.update(model)
    digest.update(json.dumps([shapes, target, bytecode, tm, _CACHE_SCHEMA], sort_keys=True).encode())
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cache_paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    folder = cache_dir / key[:2]
    return folder / f"{key}.module", folder / f"{key}.json"


def _cache_read(cache_dir: Path, key: str) -> tuple[bytes, dict[str, Any]] | None:
    module_path, info_path = _cache_paths(cache_dir, key)
    try:
        info = json.loads(info_path.read_text())
        data = module_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("sha256") != hashlib.sha256(data).hexdigest():
        return None  # torn or foreign entry: convert again
    return data, info


def _cache_write(cache_dir: Path, key: str, data: bytes, info: dict[str, Any]) -> None:
    module_path, info_path = _cache_paths(cache_dir, key)
    try:
        # The module first, then the info that names its hash: a reader that
        # sees the info sees the whole module.
        _atomic_write(module_path, data)
        _atomic_write(info_path, json.dumps({**info, "sha256": hashlib.sha256(data).hexdigest()}).encode())
    except OSError:
        pass  # an unwritable cache costs a conversion next time, nothing more


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_stage(stderr: str) -> str | None:
    stages = re.findall(r"^stage: (\S+)$", stderr, flags=re.MULTILINE)
    return stages[-1] if stages else None


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child must import this very nx_hal, installed or not.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _run_child(model: bytes, shapes: dict[str, list[int]], target: str | None, bytecode: bool,
               timeout: float) -> tuple[bytes, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="nxhal-convert-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        output_path = Path(tmp) / "module.out"
        model_path.write_bytes(model)
        request = {
            "model": str(model_path),
            "output": str(output_path),
            "input_shapes": shapes or None,
            "target_version": target,
            "bytecode": bytecode,
        }
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "nx_hal._convert_child"],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                timeout=timeout,
                env=_child_env(),
                cwd=tmp,
            )
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            stage = _last_stage(stderr)
            raise DeadlineExceededError(
                f"ONNX → StableHLO conversion took longer than {timeout:g} s"
                + (f" (in {stage})" if stage else "")
                + "; the converter was stopped"
            ) from None
        stage = _last_stage(proc.stderr)
        if proc.returncode < 0:
            found = re.findall(r"^onnx-ops: (.*)$", proc.stderr, flags=re.MULTILINE)
            ops = f" (model's ONNX ops: {found[-1].replace(',', ', ')})" if found and found[-1] else ""
            raise ConversionError(
                f"converter crashed ({_signal_name(proc.returncode)}) in {stage or 'start-up'}: "
                f"torch-mlir {_torch_mlir_version()} cannot convert this model{ops}; "
                "the calling process is unaffected",
                reason="crash",
            )
        reply_line = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
        try:
            reply = json.loads(reply_line[0]) if reply_line else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            tail = proc.stderr.strip()[-_TAIL:]
            raise ConversionError(
                f"converter failed (exit status {proc.returncode}) in {stage or 'start-up'}:\n{tail}",
                reason="converter-error",
            )
        if not reply.get("ok"):
            raise ConversionError(
                str(reply.get("message", "conversion failed")),
                reason=str(reply.get("reason", "converter-error")),
                operators=[str(o) for o in reply.get("operators", [])],
                leftover_ops=[str(o) for o in reply.get("leftover_ops", [])],
            )
        return output_path.read_bytes(), reply


def _result(
    data: bytes, info: dict[str, Any], *, hit: bool, seconds: float, key: str, tm: str
) -> ConversionResult:
    return ConversionResult(
        module=data,
        bytecode=bool(info.get("bytecode")),
        stablehlo_version=info.get("stablehlo_version"),
        portable=bool(info.get("portable")),
        onnx_ops=tuple(info.get("onnx_ops", ())),
        stablehlo_ops={str(k): int(v) for k, v in info.get("stablehlo_ops", {}).items()},
        cache_hit=hit,
        seconds=seconds,
        cache_key=key,
        torch_mlir_version=tm,
        notes=tuple(info.get("notes", ())),
    )


def onnx_to_stablehlo(
    model: bytes,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    target_version: str | None = None,
    bytecode: bool = False,
    timeout: float = 300,
    cache_dir: Path | None = None,
    use_cache: bool = True,
) -> ConversionResult:
    """Converts an ONNX model to StableHLO with entry function ``main``.

    ``input_shapes`` fixes dynamic input dims (every dynamic dim needs one);
    ``target_version`` is the backend's ``stablehlo_current_version``: the
    module is serialised (bytecode) or checked to serialise (text) for it.
    Raises ConversionError (malformed model, dynamic dims without sizes,
    unsupported operators, converter crash), DeadlineExceededError after
    ``timeout`` seconds, UnavailableError when torch-mlir is not installed.
    """
    started = time.perf_counter()
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    if not isinstance(model, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"model must be ONNX bytes, got {type(model).__name__}")
    model = bytes(model)
    if target_version is not None and not _VERSION.match(target_version):
        raise InvalidArgumentError(f"target_version {target_version!r} is not a StableHLO version like 1.9.0")
    if timeout <= 0:
        raise InvalidArgumentError(f"timeout must be positive, got {timeout}")
    shapes = _normalise_shapes(input_shapes)
    missing = converter_available()
    if missing is not None:
        raise UnavailableError(missing)
    tm = _torch_mlir_version()
    key = _cache_key(model, shapes, target_version, bytecode, tm)
    folder = cache_dir if cache_dir is not None else default_cache_dir() / "stablehlo"
    if use_cache:
        cached = _cache_read(folder, key)
        if cached is not None:
            data, info = cached
            return _result(data, info, hit=True, seconds=time.perf_counter() - started, key=key, tm=tm)
    data, info = _run_child(model, shapes, target_version, bytecode, timeout)
    if use_cache:
        _cache_write(folder, key, data, info)
    return _result(data, info, hit=False, seconds=time.perf_counter() - started, key=key, tm=tm)


def target_version_of(device: object) -> str | None:
    """The StableHLO version a device's backend reads (the tpu plugin's
    ``stablehlo_version`` attribute), or None when it does not say."""
    attributes = getattr(device, "attributes", None)
    if isinstance(attributes, Mapping):
        for name in ("stablehlo_version", "stablehlo_current_version"):
            value = attributes.get(name)
            if isinstance(value, str) and _VERSION.match(value):
                return value
    return None


def _resolve_target(target: str | None) -> str | None:
    if target is None or _VERSION.match(target):
        return target
    from nx_hal import api  # late: the registry loads plugins

    candidates = [d for d in api.devices() if d.plugin == target]
    if not candidates:
        raise InvalidArgumentError(
            f"--target {target!r}: no device of plugin '{target}' is available; "
            "pass a StableHLO version (e.g. 1.9.0) instead"
        )
    for dev in candidates:
        version = target_version_of(dev)
        if version is not None:
            return version
    raise InvalidArgumentError(f"--target {target!r}: plugin '{target}' does not state a StableHLO version")


def convert_cli(
    model_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    target: str | None = None,
    bytecode: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    timeout: float = 300,
) -> str:
    """``nx-hal convert MODEL.onnx -o MODEL.mlir [--target PLUGIN|VERSION]``:
    writes the module and returns a one-paragraph summary for the terminal."""
    source = Path(model_path)
    try:
        model = source.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {source}: {exc.strerror}") from None
    version = _resolve_target(target)
    result = onnx_to_stablehlo(model, input_shapes=input_shapes, target_version=version, bytecode=bytecode,
                               timeout=timeout)
    destination = Path(output_path)
    try:
        _atomic_write(destination, result.module)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {destination}: {exc.strerror}") from None
    kind = "portable bytecode" if result.bytecode else "MLIR text"
    serialised = f"StableHLO {result.stablehlo_version}" if result.stablehlo_version else "unversioned"
    ops = sum(result.stablehlo_ops.values())
    lines = [
        f"wrote {destination} ({len(result.module)} bytes, {kind}, {serialised}, {ops} StableHLO ops)",
        f"ONNX ops: {', '.join(result.onnx_ops)}",
        f"{'cache hit' if result.cache_hit else 'converted'} in {result.seconds:.2f} s "
        f"(torch-mlir {result.torch_mlir_version})",
    ]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """CLI helper: ``["x=1,3,224,224", "mask=1,128"]`` → ``{"x": (1, 3, 224, 224), ...}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise InvalidArgumentError(
                f"--input-shape {spec!r}: expected NAME=D0,D1,... (e.g. x=1,3,224,224)"
            ) from None
    return shapes
