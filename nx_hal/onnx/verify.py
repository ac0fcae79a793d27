"""StableHLO from the user is parsed and verified in a child before any vendor parser sees it.

    verdict = verify.stablehlo(program_bytes, cache_dir=...)
    verdict.ok, verdict.reason, verdict.message

A vendor's StableHLO parser (XLA's, inside the tpu plugin) can crash the
process on a damaged program (fuzzing found SIGSEGV, heap corruption and
``std::length_error`` in 18 of 3,000 mutated bytecode programs). The program
is read first by torch-mlir's MLIR parser and verifier in the long-lived
converter child (``nx_hal.onnx._child``, request kind "verify"): a crash
there kills the child, not the caller, and becomes a verdict.

Verdicts are cached by the program's SHA-256: in memory for this process, and
in the store's ``verdicts`` section (nx_hal.store: authenticated entries in a
directory only the user owns and can write). A repeated program -- good or bad -- costs a digest and a lookup.
Time-outs are not cached: they may be the machine's load, not the program.

Without torch-mlir nothing can be verified; ``policy="auto"`` then warns once
and passes programs through unverified (the vendor parser's robustness is all
there is), ``policy="require"`` refuses them with UnavailableError.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nx_hal._warnings import warn_at_caller
from nx_hal.child import OUT_OF_MEMORY, TIMED_OUT
from nx_hal.errors import DeadlineExceededError, InvalidArgumentError, ResourceExhaustedError, UnavailableError
from nx_hal.onnx import convert
from nx_hal.store import Store
from nx_hal.store import digest as store_digest
from nx_hal.store.recent import Recent

__all__ = ["Verdict", "stablehlo", "check_stablehlo", "clear_memory"]

# Bump when the child's verdict for the same bytes may change.
_SCHEMA: Final = 2
SECTION: Final = "verdicts"
# Reasons that are a property of the bytes (and this torch-mlir), so may be remembered.
_CACHED_REASONS: Final = frozenset({"ok", "malformed", "crash", "unverifiable"})
_MEMORY_MAX: Final = 4096
_SIGNAL: Final = re.compile(r"\((SIG\w+|signal -?\d+)\)")


@dataclass(frozen=True)
class Verdict:
    """What the verifying parser said about one program."""

    ok: bool
    reason: str  # ok | malformed | crash | unverifiable | converter-error; timed-out | out-of-memory (raised)
    message: str
    digest: str
    unverified_ops: tuple[str, ...] = ()  # ops of dialects torch-mlir lacks (read, not verified)
    cached: bool = False


_memory: Recent[str, Verdict] = Recent(_MEMORY_MAX)
_warned = False


def clear_memory() -> None:
    """Forgets the in-memory verdicts (tests, benchmarks)."""
    _memory.clear()


def _key(digest: str, tm: str) -> str:
    """A verdict holds for these bytes read by this torch-mlir and schema."""
    return store_digest(digest, tm, str(_SCHEMA))


def _disk_read(store: Store, digest: str, tm: str) -> Verdict | None:
    info = store.get_json(SECTION, _key(digest, tm))
    if info is None or info.get("reason") not in _CACHED_REASONS:
        return None
    return Verdict(ok=info["reason"] == "ok", reason=str(info["reason"]), message=str(info.get("message", "")),
                   digest=digest, unverified_ops=tuple(str(o) for o in info.get("unverified_ops", ())),
                   cached=True)


def _disk_write(store: Store, digest: str, tm: str, verdict: Verdict) -> None:
    """A store that cannot be written costs a parse next time, nothing more."""
    store.put_json(SECTION, _key(digest, tm), {"reason": verdict.reason, "message": verdict.message,
                                               "unverified_ops": list(verdict.unverified_ops)})


def _remember(digest: str, verdict: Verdict) -> None:
    _memory.put(digest, verdict)


def _ask_child(data: bytes, digest: str, timeout: float, worker: convert.ConverterWorker | None) -> Verdict:
    active = worker or convert.active_worker() or convert.shared_worker()
    try:
        _, info = active.run(data, {}, None, False, timeout, kind="verify")
    except DeadlineExceededError:  # the child is killed already
        return Verdict(ok=False, reason=TIMED_OUT, digest=digest, message=(
            f"verifying the StableHLO program took longer than {timeout:g} s; the verifier was stopped"))
    except ResourceExhaustedError as exc:
        return Verdict(ok=False, reason=OUT_OF_MEMORY, message=exc.message, digest=digest)
    except convert.ConversionError as exc:
        if exc.reason == "crash":
            found = _SIGNAL.search(exc.message)
            message = (f"the program crashed torch-mlir's StableHLO parser "
                       f"({found.group(1) if found else 'killed'}); it is damaged or hostile, "
                       "and was kept from the backend's parser")
        else:
            message = exc.message
        return Verdict(ok=False, reason=exc.reason, message=message, digest=digest,
                       unverified_ops=exc.leftover_ops)
    return Verdict(ok=True, reason="ok", message="", digest=digest,
                   unverified_ops=tuple(str(o) for o in info.get("unverified_ops", ())))


def stablehlo(data: bytes, *, cache_dir: Path | None = None, timeout: float = 60,
              worker: convert.ConverterWorker | None = None) -> Verdict:
    """The verdict on one StableHLO program (text, bytecode or portable
    artifact). Cached in memory, and in the store at ``cache_dir`` when given.
    Raises UnavailableError without torch-mlir, DeadlineExceededError when
    the parse takes longer than ``timeout`` seconds, ResourceExhaustedError
    when it runs out of memory under the setting child_memory_limit."""
    digest = hashlib.sha256(data).hexdigest()
    known = _memory.get(digest)
    if known is not None:
        return known
    missing = convert.converter_available()
    if missing is not None:
        raise UnavailableError(missing)
    tm = convert._torch_mlir_version()
    store = Store.at(cache_dir) if cache_dir is not None else None
    verdict = _disk_read(store, digest, tm) if store is not None else None
    if verdict is None:
        verdict = _ask_child(bytes(data), digest, timeout, worker)
        # The child's limits, not the program: not remembered (another limit may let it through).
        if verdict.reason == TIMED_OUT:
            raise DeadlineExceededError(verdict.message)
        if verdict.reason == OUT_OF_MEMORY:
            raise ResourceExhaustedError(verdict.message)
        if verdict.reason not in _CACHED_REASONS:
            return verdict
        if store is not None:
            _disk_write(store, digest, tm, verdict)
    _remember(digest, verdict)
    return verdict


def check_stablehlo(data: bytes, *, policy: str = "auto", cache_dir: Path | None = None,
                    plugin: str | None = None) -> Verdict | None:
    """Device.compile's gate: returns when the program may go to the plugin
    (the verdict, or None when it went unverified), else raises
    InvalidArgumentError naming what failed. ``policy`` "auto" passes
    programs through unverified when torch-mlir is missing or cannot read
    an op's custom syntax (warning once); "require" refuses them instead."""
    global _warned
    try:
        verdict = stablehlo(data, cache_dir=cache_dir)
    except UnavailableError as exc:
        if policy == "require":
            raise UnavailableError(
                f"option verify='require': StableHLO programs are verified before the backend parses "
                f"them, and {exc.message}", plugin=plugin) from None
        if not _warned:
            _warned = True
            warn_at_caller(
                f"nx_hal: StableHLO programs go to the backend unverified: {exc.message}; "
                "a damaged program may then crash this process", RuntimeWarning)
        return None
    if verdict.ok:
        return verdict
    if verdict.reason == "unverifiable" and policy != "require":
        return None  # as without torch-mlir: the backend's parser is all there is
    raise InvalidArgumentError(f"StableHLO compile failed: rejected before the backend's parser "
                               f"({verdict.reason}): {verdict.message}", plugin=plugin)
