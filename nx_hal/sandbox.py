"""Programs a vendor reads natively are compiled first in a child process.

    exe = sandbox.compile(device, program, options, policy="auto")

ONNX goes to OpenVINO (the npu plugin), and other native formats to their
vendor, as the user gave them; those readers and compilers crash and hang on
damaged models (fuzzing found SIGSEGV on a Conv with one input, SIGFPE on a
MaxPool stride of 2**40, an endless loop on an unsorted graph with a
cycle). So the first compile of a program happens in a long-lived child
(``nx_hal._sandbox_child``) that loads the same plugin with the same client
options and compiles on the same device: a crash or hang there becomes
InvalidArgumentError / DeadlineExceededError here, and this process never
hands the program to the vendor. On success the child serializes the
executable and this process loads it (the plugin checks the blob's digest;
a plugin that cannot serialize is asked to compile again, now known safe).

Verdicts are cached by the SHA-256 of everything a compile depends on (the
plugin library's identity, client options, device, format, program bytes and
compile options): in memory, and in the store's ``compile-verdicts`` section
(nx_hal.store: authenticated entries under a directory only the user owns). A
program known good compiles in this process with no child; a program known
bad is refused at the cost of a digest. Time-outs and errors the plugin
reports cleanly are not cached.

Policy (the core compile option ``verify``): "auto" falls back to an
in-process compile, warning once, when the child cannot load the plugin
(a device another process may not open, say); "require" refuses instead;
"off" skips the child (trusted programs, least latency).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from nx_hal._warnings import warn_at_caller
from nx_hal.child import (
    OUT_OF_MEMORY,
    TIMED_OUT,
    Child,
    memory_limit,
    out_of_memory_error,
    ran_out_of_memory,
    work_dir,
)
from nx_hal.errors import (
    _BY_CODE,
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    NxHalError,
    ResourceExhaustedError,
    UnavailableError,
)
from nx_hal.held import HeldOn
from nx_hal.store import Store, limits
from nx_hal.store import digest as store_digest
from nx_hal.store.recent import Recent

if TYPE_CHECKING:
    from nx_hal.executable import Executable
    from nx_hal.programs import Program

__all__ = ["Verdict", "compile", "DEFAULT_TIMEOUT", "children_started", "close_all"]


class Device(HeldOn, Protocol):
    """What a sandboxed compile needs of its device (nx_hal.device.Device has it)."""

    def _compile(self, prog: Program, options: dict[str, object]) -> Executable: ...

    def _deserialize(self, data: bytes | memoryview) -> Executable: ...

#: Seconds a first compile may take in the child before it counts as a hang.
#: Generous: a large model on an NPU compiles for minutes.
DEFAULT_TIMEOUT: Final = 900.0
_SCHEMA: Final = 1
SECTION: Final = "compile-verdicts"
_CACHED: Final = frozenset({"ok", "malformed", "crash"})
_MEMORY_MAX: Final = 4096
_MAX_WORKERS: Final = 4


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # ok | malformed | crash; timed-out | out-of-memory (nx_hal.child: not remembered)
    message: str


_memory: Recent[str, Verdict] = Recent(_MEMORY_MAX)
_workers: dict[str, _Worker] = {}
_workers_lock = threading.Lock()
_warned = False
children_started = 0  # tests assert a known program starts no child


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class _Worker:
    """One child per plugin library and client options; requests serialised."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.child: Child | None = None
        self.tmp = work_dir("nxhal-sandbox-")
        self.stderr_path = Path(self.tmp.name) / "stderr.log"
        self.stderr: Any = None

    def start(self) -> Child:
        global children_started
        children_started += 1
        # Append mode: truncating between requests keeps one request's stage lines.
        self.stderr = open(self.stderr_path, "ab+")
        self.child = Child("nx_hal._sandbox_child", what="compiling the program in the child that compiles it first",
                           stderr=self.stderr, cwd=self.tmp.name)
        return self.child

    def stop(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            child.close()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None

    def close(self) -> None:
        # The directory goes with the object (TemporaryDirectory's finalizer):
        # a thread still holding this worker starts a child again if it must.
        with self.lock:
            self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:
            pass

    def _stderr(self) -> bytes:
        self.stderr.flush()
        self.stderr.seek(0)
        return bytes(self.stderr.read())

    def _stage(self, stderr: bytes) -> str:
        stages = re.findall(rb"^stage: (.+)$", stderr, flags=re.MULTILINE)
        return stages[-1].decode(errors="replace") if stages else "start-up"

    def run(self, request: dict[str, Any], program: Program, timeout: float) -> tuple[dict[str, Any], bytes | None]:
        """The child's reply (and the blob it wrote). A crash is a reply with
        reason "crash", a child killed at ``timeout`` one with reason
        "timed-out", one that ran out of memory "out-of-memory"; each names
        the stage and the limit."""
        with self.lock:
            if self.child is not None and not self.child.alive():
                self.stop()
            child = self.child or self.start()
            folder = Path(self.tmp.name)
            (folder / "program").write_bytes(program.data)
            if program.extra is not None:
                (folder / "program2").write_bytes(program.extra)
            output = folder / "executable"
            output.unlink(missing_ok=True)
            self.stderr.truncate(0)
            request = {**request, "program": str(folder / "program"), "output": str(output),
                       "program2": str(folder / "program2") if program.extra is not None else None}
            try:
                line = child.read_line(timeout) if child.send((json.dumps(request) + "\n").encode()) else None
            except DeadlineExceededError:  # the child is killed already
                stage = self._stage(self._stderr())
                self.stop()
                return {"ok": False, "reason": TIMED_OUT, "stage": stage, "limit": timeout}, None
            if line is None:
                code = child.wait(10)
                stderr = self._stderr()
                self.stop()
                if ran_out_of_memory(stderr.decode(errors="replace")):
                    return {"ok": False, "reason": OUT_OF_MEMORY, "stage": self._stage(stderr),
                            "limit": child.memory_limit}, None
                how = _signal_name(code) if code < 0 else f"exit status {code}"
                return {"ok": False, "reason": "crash", "stage": self._stage(stderr), "how": how}, None
            reply = json.loads(line)
            if reply.get("reason") == OUT_OF_MEMORY or (reply.get("code") == "RESOURCE_EXHAUSTED"
                                                         and child.memory_limit > 0):
                reply = {**reply, "reason": OUT_OF_MEMORY, "stage": self._stage(self._stderr()),
                         "limit": child.memory_limit}
            blob = output.read_bytes() if reply.get("ok") and reply.get("blob") else None
            return reply, blob


def close_all() -> None:
    """Ends every sandbox child (at exit; tests)."""
    with _workers_lock:
        workers = list(_workers.values())
        _workers.clear()
    for worker in workers:
        worker.close()


atexit.register(close_all)


def _worker(key: str) -> _Worker:
    """The child for one plugin library and client options. A few are kept
    (each holds a vendor runtime's memory); the least recently used goes."""
    retired = []
    with _workers_lock:
        worker = _workers.pop(key, None) or _Worker()
        _workers[key] = worker  # most recently used last
        while len(_workers) > _MAX_WORKERS:
            retired.append(_workers.pop(next(iter(_workers))))
    for old in retired:
        old.close()  # waits for a compile in flight on it to finish
    return worker


def _library_identity(path: str) -> list[object]:
    try:
        info = os.stat(path)
    except OSError:
        return [path]
    return [os.path.realpath(path), info.st_size, info.st_mtime_ns, info.st_ino]


def _digest(device: Device, program: Program, options: dict[str, object]) -> str:
    head = json.dumps([_SCHEMA, _library_identity(device.link.library), device.plugin,
                       device.link.client_options, device.index, device.compat_key, program.format,
                       options], sort_keys=True, default=repr)
    return store_digest(head, program.data, program.extra or b"")


def _verdict_store(device: Device) -> Store | None:
    cache = device.link.compile_cache
    return cache.store if cache is not None else None


def _lookup(digest: str, store: Store | None) -> Verdict | None:
    known = _memory.get(digest)
    if known is not None:
        return known
    info = store.get_json(SECTION, digest) if store is not None else None
    if info is None or info.get("schema") != _SCHEMA or info.get("reason") not in _CACHED:
        return None
    verdict = Verdict(info["reason"] == "ok", str(info["reason"]), str(info.get("message", "")))
    _remember(digest, verdict, None)
    return verdict


def _remember(digest: str, verdict: Verdict, store: Store | None) -> None:
    _memory.put(digest, verdict)
    if store is not None:  # a store that cannot be written costs a child compile next time
        store.put_json(SECTION, digest, {"schema": _SCHEMA, "reason": verdict.reason, "message": verdict.message})


def clear_memory() -> None:
    """Forgets the in-memory verdicts (tests, benchmarks)."""
    _memory.clear()


def _error_named(code: str, message: str, plugin: str) -> NxHalError:
    for cls in _BY_CODE.values():
        if cls.code == code:
            return cls(message, plugin=plugin)
    return InternalError(f"{code}: {message}", plugin=plugin)


def _over_limit(reply: dict[str, Any]) -> Verdict:
    """The verdict on a compile that the child's deadline or memory limit
    stopped (reason "timed-out" or "out-of-memory"), naming the limit."""
    if reply["reason"] == TIMED_OUT:
        return Verdict(False, TIMED_OUT,
                       f"compiling the program took longer than {reply['limit']:g} s (in {reply['stage']}) in the "
                       "child that compiles it first; the child was stopped (compile option 'verify_timeout' sets "
                       "the limit)")
    said = f": the plugin says {reply['code']}: {reply['message']}" if reply.get("code") else ""
    error = out_of_memory_error(f"compiling the program (in {reply['stage']}{said})", int(reply["limit"]))
    return Verdict(False, OUT_OF_MEMORY, error.message)


def _limit_error(device: Device, verdict: Verdict) -> NxHalError:
    if verdict.reason == TIMED_OUT:
        return DeadlineExceededError(verdict.message)
    return ResourceExhaustedError(verdict.message, plugin=device.plugin)


def _refusal(device: Device, verdict: Verdict) -> InvalidArgumentError:
    return InvalidArgumentError(f"compile failed: rejected before this process's {device.plugin} backend saw it "
                                f"({verdict.reason}): {verdict.message}", plugin=device.plugin)


def _unsandboxed(device: Device, program: Program, options: dict[str, object], policy: str,
                 why: str) -> Executable:
    global _warned
    if policy == "require":
        raise UnavailableError(f"option verify='require': programs in '{program.format}' are compiled first in a "
                               f"child process, and {why}", plugin=device.plugin)
    if not _warned:
        _warned = True
        warn_at_caller(f"nx_hal: '{program.format}' programs go to the {device.plugin} backend without a trial "
                       f"compile in a child process ({why}); a damaged program may then crash this process",
                       RuntimeWarning)
    return device._compile(program, options)


def compile(device: Device, program: Program, options: dict[str, object], *, policy: str = "auto",
            timeout: float = DEFAULT_TIMEOUT) -> Executable:
    """``device._compile(program, options)``, with the first compile of each
    program done in a child (see the module's docstring)."""
    if policy == "off":
        return device._compile(program, options)
    store = _verdict_store(device)
    digest = _digest(device, program, options)
    known = _lookup(digest, store)
    if known is not None:
        if not known.ok:
            raise _refusal(device, known)
        return device._compile(program, options)
    limit = memory_limit()
    hit = limits.known(store, SECTION, digest, timeout=timeout, memory_limit=limit, plugin=device.plugin)
    if hit is not None:
        raise hit
    try:
        json.dumps(options)
        request = {"library": device.link.library, "plugin": device.plugin,
                   "client_options": device.link.client_options, "device": device.index,
                   "format": program.format, "options": options, "cwd": os.getcwd(), "serialize": True}
        json.dumps(request)
    except (TypeError, ValueError):
        return _unsandboxed(device, program, options, policy, "its options cannot be sent to the child")
    # A child runs under the memory limit it started with: another limit, another child.
    worker = _worker(json.dumps([request["library"], device.plugin, request["client_options"], limit],
                                sort_keys=True))
    reply, blob = worker.run(request, program, timeout)
    if reply.get("ok"):
        _remember(digest, Verdict(True, "ok", ""), store)
        if blob is not None:
            try:
                return device._deserialize(blob)  # our own child's, through a private directory
            except NxHalError:
                pass  # a blob this process cannot load: compile here, the program is known good
        return device._compile(program, options)
    reason = str(reply.get("reason"))
    if reason == "crash":
        verdict = Verdict(False, "crash", f"it crashed the {device.plugin} backend's compiler in a child process "
                          f"({reply['how']}, in {reply['stage']}): a damaged or hostile program, or a bug in the "
                          "vendor's compiler; it was kept from this process")
    elif reason == "malformed":
        verdict = Verdict(False, "malformed", str(reply.get("message")))
    elif reason == "no-sandbox":
        return _unsandboxed(device, program, options, policy,
                            f"the child could not open the device: {reply.get('code')}: {reply.get('message')}")
    elif reason in (TIMED_OUT, OUT_OF_MEMORY):
        # Kept with the limit it hit: the same limit fails at once next time, a larger one tries again.
        error = _limit_error(device, _over_limit(reply))
        limits.remember(store, SECTION, digest, error, timeout if reason == TIMED_OUT else int(reply["limit"]))
        raise error
    else:  # the plugin's own clean error: the same error here, without compiling again
        raise _error_named(str(reply.get("code")), str(reply.get("message")), device.plugin)
    _remember(digest, verdict, store)
    raise _refusal(device, verdict)
