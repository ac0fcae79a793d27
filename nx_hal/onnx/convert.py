"""ONNX → StableHLO for PJRT devices, through torch-mlir in a child process.

    result = onnx_to_stablehlo(model_bytes, input_shapes={"x": (1, 3, 224, 224)},
                               target_version=device.attributes["stablehlo_version"])
    result.module          # MLIR text (or portable bytecode with bytecode=True)

The converter runs in ``python -m nx_hal.onnx._child``: some inputs crash
torch-mlir's process, and that must not take the caller with it. Results are
kept in the store's ``stablehlo`` section (nx_hal.store), keyed by the model's
bytes, the shapes, the target, torch-mlir's version and this package's code. ``nx-hal convert``'s output is an
ordinary file, with the mode ``open()`` would give it.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nx_hal.child import OUT_OF_MEMORY, Child, out_of_memory_error, ran_out_of_memory, work_dir
from nx_hal.child import memory_limit as child_memory_limit
from nx_hal.converter import STABLEHLO_VERSION, check_input_shapes, check_precision, target_version_of
from nx_hal.errors import DeadlineExceededError, InvalidArgumentError, ResourceExhaustedError, UnavailableError
from nx_hal.files import atomic_write
from nx_hal.store import DEFAULT_CACHE_MAX_BYTES, Store, content_digest, default_cache_dir, limits
from nx_hal.store.recent import Recent
from nx_hal.version import __version__

__all__ = [
    "ConversionError",
    "ConversionResult",
    "ConverterWorker",
    "using",
    "active_worker",
    "shared_worker",
    "onnx_to_stablehlo",
    "reserialize_stablehlo",
    "convert_cli",
    "target_version_of",
    "converter_available",
    "parse_input_shapes",
    "summary_text",
    "check_input_shapes",
]

# Bump when the child's output for the same input changes, to retire old cache entries.
_CACHE_SCHEMA: Final = 3  # 3: ONNX pre-passes (shape folding, rewrites, guards)
SECTION: Final = "stablehlo"
_VERSION: Final = STABLEHLO_VERSION
# A device kind as Device.kind spells it.
_PLATFORM: Final = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_TAIL: Final = 1500
# What each request kind is, in errors.
_WHAT: Final = {
    "onnx": "ONNX → StableHLO conversion",
    "stablehlo": "writing the StableHLO program for the backend's version",
    "verify": "verifying the StableHLO program",
}


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
    aliases: dict[int, int] = field(default_factory=dict)  # donated input -> the output that takes its memory

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
    return check_input_shapes(input_shapes)


@functools.cache
def _code_digest() -> str:
    """A digest of this package's sources (``nx_hal/onnx``: the pre-passes,
    rewrites and the child that converts). A conversion cached by other code
    is not this code's conversion: after an upgrade, or a fixed rewrite, the
    cache must not keep serving the old output."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    try:
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:  # sources not readable as files: the installed version stands in
        return "version " + __version__
    return digest.hexdigest()[:16]


def _cache_key(model: bytes, shapes: dict[str, list[int]], target: str | None, bytecode: bool, tm: str,
               platform: str | None = None, precision: str | None = None) -> str:
    digest = hashlib.sha256()
    digest.update(content_digest(model))  # the model's bytes hashed once per compile (nx_hal.store.digest_scope)
    facts: list[Any] = [shapes, target, bytecode, tm, _CACHE_SCHEMA, _code_digest()]
    if platform is not None:  # keys without a platform read as they did before platforms
        facts.append(platform)
    if precision is not None:  # nor without a precision
        facts.append({"precision": precision})
    digest.update(json.dumps(facts, sort_keys=True).encode())
    return digest.hexdigest()


def _cache_read(store: Store, key: str) -> tuple[bytes, dict[str, Any]] | None:
    entry = store.get(SECTION, key)
    return (entry.payload, entry.meta) if entry is not None else None


def _cache_write(store: Store, key: str, data: bytes, info: dict[str, Any]) -> None:
    store.put(SECTION, key, data, info)  # an unwritable store costs a conversion next time, nothing more


# Conversions that failed, by cache key, in this process: selection tries
# every device of a plugin in turn (tpu:cpu:0, :1, ...) and each would run the
# converter again only to fail the same way. Timeouts are not remembered.
_FAILURES: Recent[str, ConversionError] = Recent(256)


def _failure_lookup(key: str) -> ConversionError | None:
    known = _FAILURES.get(key)
    if known is None:
        return None
    # A fresh exception each time: raising one object twice chains tracebacks.
    return ConversionError(known.message, reason=known.reason, operators=known.operators,
                           leftover_ops=known.leftover_ops)


def _failure_store(key: str, error: ConversionError) -> None:
    _FAILURES.put(key, error)


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


def _interpret(returncode: int | None, stderr: str, reply_text: str, *, kind: str = "onnx",
               memory_limit: int = 0) -> dict[str, Any]:
    """The child's reply as info, or the ConversionError its exit or reply says
    (ResourceExhaustedError when the child ran out of memory under
    ``memory_limit``). ``returncode`` is None while the child lives (a worker
    that replied)."""
    stage = _last_stage(stderr)
    if returncode is not None and returncode < 0 and ran_out_of_memory(stderr):
        raise _out_of_memory(kind, stage, memory_limit)
    if returncode is not None and returncode < 0:
        found = re.findall(r"^onnx-ops: (.*)$", stderr, flags=re.MULTILINE)
        ops = f" (model's ONNX ops: {found[-1].replace(',', ', ')})" if found and found[-1] else ""
        raise ConversionError(
            f"converter crashed ({_signal_name(returncode)}) in {stage or 'start-up'}: "
            f"torch-mlir {_torch_mlir_version()} cannot convert this model{ops}; "
            "the calling process is unaffected",
            reason="crash",
        )
    reply_line = reply_text.strip().splitlines()[-1:] if reply_text.strip() else []
    try:
        reply = json.loads(reply_line[0]) if reply_line else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict) and ran_out_of_memory(stderr):  # a MemoryError before any reply
        raise _out_of_memory(kind, stage, memory_limit)
    if not isinstance(reply, dict):
        tail = stderr.strip()[-_TAIL:]
        status = f"exit status {returncode}" if returncode is not None else "no reply"
        raise ConversionError(
            f"converter failed ({status}) in {stage or 'start-up'}:\n{tail}",
            reason="converter-error",
        )
    if reply.get("reason") == OUT_OF_MEMORY:
        raise _out_of_memory(kind, stage, memory_limit)
    if not reply.get("ok"):
        raise ConversionError(
            str(reply.get("message", "conversion failed")),
            reason=str(reply.get("reason", "converter-error")),
            operators=[str(o) for o in reply.get("operators", [])],
            leftover_ops=[str(o) for o in reply.get("leftover_ops", [])],
        )
    return reply


def _request(model_path: Path, output_path: Path, shapes: dict[str, list[int]], target: str | None,
             bytecode: bool, kind: str, platform: str | None = None, precision: str | None = None,
             donate: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "donate": list(donate),
        "kind": kind,
        "model": str(model_path),
        "output": str(output_path),
        "input_shapes": shapes or None,
        "target_version": target,
        "bytecode": bytecode,
        "platform": platform,
        "precision": precision,
    }


def _timed_out(timeout: float, stderr: str, kind: str = "onnx") -> DeadlineExceededError:
    stage = _last_stage(stderr)
    return DeadlineExceededError(
        f"{_WHAT.get(kind, _WHAT['onnx'])} took longer than {timeout:g} s"
        + (f" (in {stage})" if stage else "")
        + "; the converter was stopped"
    )


def _out_of_memory(kind: str, stage: str | None, memory_limit: int) -> ResourceExhaustedError:
    what = _WHAT.get(kind, _WHAT["onnx"]) + (f" (in {stage})" if stage else "")
    return out_of_memory_error(what, memory_limit)


def _run_child(model: bytes, shapes: dict[str, list[int]], target: str | None, bytecode: bool,
               timeout: float, kind: str = "onnx", platform: str | None = None,
               memory_limit: int | None = None, precision: str | None = None) -> tuple[bytes, dict[str, Any]]:
    with work_dir("nxhal-convert-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        output_path = Path(tmp) / "module.out"
        model_path.write_bytes(model)
        request = _request(model_path, output_path, shapes, target, bytecode, kind, platform, precision)
        child = Child("nx_hal.onnx._child", what=_WHAT.get(kind, _WHAT["onnx"]), memory_limit=memory_limit,
                      env=_child_env(), cwd=tmp)
        try:
            stdout = child.communicate(json.dumps(request).encode(), timeout)
        except DeadlineExceededError:  # the child is killed already
            raise _timed_out(timeout, child.stderr_text, kind) from None
        reply = _interpret(child.returncode, child.stderr_text, stdout.decode(errors="replace"), kind=kind,
                           memory_limit=child.memory_limit)
        return output_path.read_bytes(), reply


class ConverterWorker:
    """One long-lived converter child that converts many models in sequence
    (``python -m nx_hal.onnx._child --serve``), for callers that convert
    hundreds of models (the ONNX conformance run): torch-mlir is imported once
    instead of once per model.

    A model that crashes the child, one that times out (the child is killed)
    or one that runs out of memory fails alone with the same ConversionError
    / DeadlineExceededError / ResourceExhaustedError as a one-shot child; the
    next request starts a fresh child. The child is also replaced every
    ``max_requests`` conversions, to bound what torch-mlir leaks; ``timeout``
    caps every request's own timeout; ``memory_limit`` bounds the child's
    data in bytes (None: the setting child_memory_limit; 0: none). Thread-safe
    (requests are serialised); close() or ``with`` ends the child.

        with convert.ConverterWorker() as worker, convert.using(worker):
            dev.compile(onnx_model)   # Device.compile converts through worker
    """

    def __init__(self, *, max_requests: int = 200, timeout: float | None = None,
                 memory_limit: int | None = None) -> None:
        self._lock = threading.Lock()
        self._child: Child | None = None
        self._memory_limit = memory_limit  # None: the setting child_memory_limit at each start
        self._stderr: Any = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._served = 0
        self._max_requests = max(1, max_requests)
        self._timeout = timeout  # caps each request's timeout (a conformance run's budget per model)
        self.started = 0  # children started so far (restarts included)
        self.closed = False

    def __enter__(self) -> ConverterWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stop()
        except Exception:
            pass

    def close(self) -> None:
        with self._lock:
            self._stop()
            self.closed = True
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    def _start(self) -> Child:
        if self._tmp is None:
            self._tmp = work_dir("nxhal-convert-worker-")
        # stderr to a file in append mode: the child's writes always land at
        # the end, so truncating it between requests is safe and keeps one
        # request's stage lines for a crash report.
        self._stderr = open(Path(self._tmp.name) / "stderr.log", "ab+")
        self._child = Child("nx_hal.onnx._child", "--serve", what="the converter", memory_limit=self._memory_limit,
                            stderr=self._stderr, env=_child_env(), cwd=self._tmp.name)
        self._served = 0
        self.started += 1
        return self._child

    @property
    def pid(self) -> int | None:
        """The process id of the child now running, if any."""
        return self._child.pid if self._child is not None else None

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return str(self._stderr.read().decode(errors="replace"))

    def run(self, model: bytes, shapes: dict[str, list[int]], target: str | None, bytecode: bool,
            timeout: float, kind: str = "onnx", platform: str | None = None,
            precision: str | None = None, donate: tuple[int, ...] = ()) -> tuple[bytes, dict[str, Any]]:
        """Same contract as one child per call (``_run_child``)."""
        if self._timeout is not None:
            timeout = min(timeout, self._timeout)
        with self._lock:
            if self.closed:
                raise InvalidArgumentError("this ConverterWorker is closed")
            if self._child is not None and (not self._child.alive() or self._served >= self._max_requests):
                self._stop()
            child = self._child or self._start()
            assert self._tmp is not None
            self._served += 1
            folder = Path(self._tmp.name)
            model_path, output_path = folder / "model.onnx", folder / "module.out"
            model_path.write_bytes(model)
            output_path.unlink(missing_ok=True)
            self._stderr.truncate(0)
            request = _request(model_path, output_path, shapes, target, bytecode, kind, platform, precision, donate)
            try:
                sent = child.send((json.dumps(request) + "\n").encode())
                line = child.read_line(timeout) if sent else None
            except DeadlineExceededError:  # the child is killed already
                stderr = self._stderr_text()
                self._stop()
                raise _timed_out(timeout, stderr, kind) from None
            if line is None:  # the child died on this model: report it, restart on the next
                returncode: int | None = child.wait(10)
                stderr = self._stderr_text()
                self._stop()
                _interpret(returncode, stderr, "", kind=kind, memory_limit=child.memory_limit)
                raise AssertionError("unreachable")  # _interpret raises without a reply
            reply = _interpret(None, self._stderr_text(), line.decode(errors="replace"), kind=kind,
                               memory_limit=child.memory_limit)
            return output_path.read_bytes(), reply


_WORKER: contextvars.ContextVar[ConverterWorker | None] = contextvars.ContextVar("nx_hal_convert_worker",
                                                                               default=None)


_SHARED: ConverterWorker | None = None
_SHARED_LOCK = threading.Lock()


def active_worker() -> ConverterWorker | None:
    """The worker a ``using`` block set, unless it is closed."""
    active = _WORKER.get()
    return None if active is None or active.closed else active


def shared_worker() -> ConverterWorker:
    """The process's own long-lived converter child, started on first use:
    StableHLO verification and re-serialisation go through it, so torch-mlir
    is imported once per process rather than once per program."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED.closed:
            _SHARED = ConverterWorker()
            atexit.register(_SHARED.close)
        return _SHARED


@contextlib.contextmanager
def using(worker: ConverterWorker | None) -> Iterator[ConverterWorker | None]:
    """Within the block, onnx_to_stablehlo (and so Device.compile of ONNX on
    a StableHLO device) converts through ``worker`` instead of one child per
    call."""
    token = _WORKER.set(worker)
    try:
        yield worker
    finally:
        _WORKER.reset(token)


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
        aliases={int(k): int(v) for k, v in info.get("aliases", {}).items()},
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
    worker: ConverterWorker | None = None,
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
    platform: str | None = None,
    memory_limit: int | None = None,
    precision: str | None = None,
) -> ConversionResult:
    """Converts an ONNX model to StableHLO with entry function ``main``.

    ``input_shapes`` fixes dynamic input dims (every dynamic dim needs one);
    ``target_version`` is the backend's ``stablehlo_current_version``: the
    module is serialised (bytecode) or checked to serialise (text) for it.
    Raises ConversionError (malformed model, dynamic dims without sizes,
    unsupported operators, converter crash), DeadlineExceededError after
    ``timeout`` seconds (the child killed), ResourceExhaustedError when the
    child ran out of memory under ``memory_limit`` bytes (None: the setting
    child_memory_limit; 0: no limit), UnavailableError when torch-mlir is
    not installed. ``worker`` (or one set by ``using``) converts in a
    long-lived child, under its own limit, instead of a new child per call;
    results and errors are the same.
    ``cache_dir`` is the store's root (default: the default cache_dir);
    conversions go to its ``stablehlo`` section, and a store evicts the
    least recently used entries of the whole root past ``cache_max_bytes``
    (0: no limit). ``platform`` is the target device's
    kind ("cpu", "gpu", ...): rewrites that pay off only there are applied
    for it (``nx_hal.onnx.rewrites.WHEN``), and it is part of the cache key;
    None converts for any platform. ``precision`` ("f32", "bf16", "f16";
    None: "f32") is the type the products compute in (nx_hal.onnx.precision).
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
    if platform is not None and not (isinstance(platform, str) and _PLATFORM.match(platform)):
        raise InvalidArgumentError(f"platform {platform!r} is not a device kind like 'cpu' or 'gpu'")
    shapes = _normalise_shapes(input_shapes)
    missing = converter_available()
    if missing is not None:
        raise UnavailableError(missing)
    tm = _torch_mlir_version()
    precision = check_precision(precision)
    key = _cache_key(model, shapes, target_version, bytecode, tm, platform, precision)
    store = Store.at(cache_dir if cache_dir is not None else default_cache_dir(), max_bytes=cache_max_bytes)
    active = worker
    if active is None:
        active = _WORKER.get()
        if active is not None and active.closed:
            active = None  # a ``using`` block outliving its worker: one child per call
    limit = _effective_limit(active, memory_limit)
    if use_cache:
        cached = _cache_read(store, key)
        if cached is not None:
            data, info = cached
            return _result(data, info, hit=True, seconds=time.perf_counter() - started, key=key, tm=tm)
        failed = _failure_lookup(key) or limits.known(store, SECTION, key, timeout=timeout, memory_limit=limit)
        if failed is not None:
            raise failed
    try:
        if active is not None:
            data, info = active.run(model, shapes, target_version, bytecode, timeout, platform=platform,
                                    precision=precision)
        else:
            data, info = _run_child(model, shapes, target_version, bytecode, timeout, platform=platform,
                                    memory_limit=memory_limit, precision=precision)
    except ConversionError as exc:
        if use_cache:
            _failure_store(key, exc)
        raise
    except (DeadlineExceededError, ResourceExhaustedError) as exc:
        if use_cache:  # the limit it hit, so the same limit fails at once next time
            limits.remember(store, SECTION, key, exc, timeout if isinstance(exc, DeadlineExceededError) else limit)
        raise
    if use_cache:
        _cache_write(store, key, data, info)
    return _result(data, info, hit=False, seconds=time.perf_counter() - started, key=key, tm=tm)


def _effective_limit(worker: ConverterWorker | None, memory_limit: int | None) -> int:
    """The memory limit the conversion's child runs under (its worker's, else the argument's, else the setting's)."""
    limit = worker._memory_limit if worker is not None else memory_limit
    return child_memory_limit() if limit is None else limit


def reserialize_stablehlo(
    module: bytes,
    target_version: str,
    *,
    timeout: float = 120,
    worker: ConverterWorker | None = None,
    donate: tuple[int, ...] = (),
) -> ConversionResult:
    """A StableHLO module (MLIR text or bytecode, or a portable artifact of
    any version torch-mlir reads) written again as a portable artifact for
    ``target_version`` -- a backend's ``stablehlo_version``, which its
    deserializer is guaranteed to read. ``donate``: the inputs of ``main``
    (by position) whose memory an output of the same type may take
    (input-output aliasing, as JAX's ``donate_argnums`` marks it); the
    result's ``aliases`` says which output each one got, and an input no
    output matches is left out of it. Raises ConversionError when the
    module does not parse (reason "malformed"), uses what that version
    cannot express ("serialize") or ``donate`` names no input ("donate");
    UnavailableError without torch-mlir."""
    started = time.perf_counter()
    if not _VERSION.match(target_version):
        raise InvalidArgumentError(f"target_version {target_version!r} is not a StableHLO version like 1.9.0")
    missing = converter_available()
    if missing is not None:
        raise UnavailableError(missing)
    tm = _torch_mlir_version()
    active = worker or active_worker() or shared_worker()
    data, info = active.run(bytes(module), {}, target_version, True, timeout, kind="stablehlo", donate=donate)
    return _result(data, info, hit=False, seconds=time.perf_counter() - started, key="", tm=tm)


def _resolve_target(target: str | None, devices: Callable[[], Iterable[object]] | None) -> str | None:
    if target is None or _VERSION.match(target):
        return target
    # A plugin name: the devices come from the caller (the CLI passes
    # nx_hal.api.devices), since this package sits below the registry.
    candidates = [d for d in (devices() if devices is not None else ()) if getattr(d, "plugin", None) == target]
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
    devices: Callable[[], Iterable[object]] | None = None,
    cache_dir: Path | None = None,
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
    platform: str | None = None,
) -> dict[str, Any]:
    """``nx-hal convert MODEL.onnx -o MODEL.mlir [--target PLUGIN|VERSION] [--platform KIND]``:
    writes the module and returns what happened, as fields (``--json``;
    ``summary_text`` makes the terminal's paragraph of them).
    A plugin name as ``target`` is looked up among ``devices()``. The output
    gets the mode ``open(path, "w")`` would give it (0666 less the umask, or
    the existing file's), written atomically. ``cache_dir`` and
    ``cache_max_bytes``: as onnx_to_stablehlo's (the settings' cache_dir
    and cache_max_bytes)."""
    source = Path(model_path)
    try:
        model = source.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {source}: {exc.strerror}") from None
    version = _resolve_target(target, devices)
    result = onnx_to_stablehlo(model, input_shapes=input_shapes, target_version=version, bytecode=bytecode,
                               timeout=timeout, cache_dir=cache_dir, cache_max_bytes=cache_max_bytes,
                               platform=platform)
    destination = Path(output_path)  # its directory checked before any work by the CLI (cli.args.output_file)
    try:
        atomic_write(destination, result.module, mode=0o666)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {destination}: {exc.strerror}") from None
    return {"output": str(destination), "bytes": len(result.module), "bytecode": result.bytecode,
            "stablehlo_version": result.stablehlo_version, "stablehlo_ops": dict(result.stablehlo_ops),
            "onnx_ops": list(result.onnx_ops), "cache_hit": result.cache_hit, "seconds": round(result.seconds, 3),
            "torch_mlir_version": result.torch_mlir_version, "notes": list(result.notes)}


def summary_text(summary: Mapping[str, Any]) -> str:
    """convert_cli's fields as the terminal's paragraph."""
    kind = "portable bytecode" if summary["bytecode"] else "MLIR text"
    version = summary["stablehlo_version"]
    serialised = f"StableHLO {version}" if version else "unversioned"
    ops = sum(summary["stablehlo_ops"].values())
    lines = [
        f"wrote {summary['output']} ({summary['bytes']} bytes, {kind}, {serialised}, {ops} StableHLO ops)",
        f"ONNX ops: {', '.join(summary['onnx_ops'])}",
        f"{'cache hit' if summary['cache_hit'] else 'converted'} in {summary['seconds']:.2f} s "
        f"(torch-mlir {summary['torch_mlir_version']})",
    ]
    lines += [f"note: {n}" for n in summary["notes"]]
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
