"""Child processes: the one way nx_hal starts them, for the probe, the
sandbox, the ONNX converter and the StableHLO verifier.

Every child

- imports exactly the nx_hal this process imported: ``python -m nx_hal.x``
  would put the child's working directory first on its import path (run from
  a source checkout after ``pip install .``, the uncompiled source tree), so
  the child gets this process's ``sys.path`` before it imports anything;
- dies with this process: its first act is ``prctl(PR_SET_PDEATHSIG,
  SIGKILL)``, then it checks that its parent is still the process that
  started it (the parent may have died before the prctl took effect). The
  kernel sends that signal when the *thread* that started the child ends, so
  children are started from one long-lived thread of this process, never
  from the caller's (a worker thread that ends would take a sandbox child
  with it in the middle of another thread's compile). A thread in the child
  that watches its parent's pid is the backstop where the prctl is missing;
  it needs the child's GIL, the kernel's signal does not;
- runs in a process group of its own, so that a kill at a deadline takes
  whatever it started too;
- runs under a memory limit (the setting ``child_memory_limit``): its data
  (``RLIMIT_DATA``: private writable mappings, which is what an allocation
  takes) may not grow past it. Not ``RLIMIT_AS``: the address space the
  vendor runtimes reserve without using it (XLA's and OpenVINO's thread
  pools, each thread with a malloc arena of 64 MiB reserved; CUDA's unified
  address space) grows with the machine's cores and GPUs, not with the work;
- is killed, not abandoned, at its deadline: every wait here has one, after
  which the child's group is SIGKILLed and reaped and the caller gets
  DeadlineExceededError.

A child that runs out of memory says so where it can (a MemoryError becomes
an "out-of-memory" reply, :data:`OUT_OF_MEMORY`); one that the allocation
failure killed (``std::bad_alloc`` aborts) is recognised by its last words
(:func:`ran_out_of_memory`); either way the caller raises
:func:`out_of_memory_error`, which names the limit and the setting.

The long-lived children (the converter, the sandbox) speak a line protocol:
one JSON request per line on stdin, one reply per line on stdout.
"""

from __future__ import annotations

import functools
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Final

from nx_hal._config_defaults import default_child_memory_limit
from nx_hal.errors import DeadlineExceededError, ResourceExhaustedError

if TYPE_CHECKING:  # a warm start imports this module and spawns nothing
    import subprocess
    import tempfile

__all__ = [
    "Child", "module_command", "memory_limit", "set_memory_limit", "ran_out_of_memory", "out_of_memory_error",
    "work_dir", "OUT_OF_MEMORY", "TIMED_OUT", "MEMORY_SETTING",
]

#: The outcome, reply reason or verdict reason of work that ran out of memory in its child.
OUT_OF_MEMORY: Final = "out-of-memory"
#: The outcome, or verdict reason, of work killed at its deadline.
TIMED_OUT: Final = "timed-out"
#: How a user changes the limit, for messages.
MEMORY_SETTING: Final = "setting child_memory_limit / NX_HAL_CHILD_MEMORY_LIMIT; 0: no limit"

# The child's first lines, before anything else is imported: the import path,
# then the death signal and the check that closes its race, the memory limit,
# the watch on the parent. 1 and 9: PR_SET_PDEATHSIG, SIGKILL. The watch
# kills the child's whole group (it leads it), as a kill at a deadline does.
_BOOTSTRAP: Final = """\
import sys
sys.path[:] = {path!r}
import os
_parent, _limit = {parent!r}, {limit!r}
if sys.platform.startswith("linux"):
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
    except (OSError, AttributeError):
        pass
if os.getppid() != _parent:
    os._exit(70)
if _limit:
    import resource
    try:
        _hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        _hard = _limit if _hard == resource.RLIM_INFINITY else min(_limit, _hard)
        resource.setrlimit(resource.RLIMIT_DATA, (_hard, _hard))
    except (OSError, ValueError):
        pass
import threading, time
def _watch_parent():
    while os.getppid() == _parent:
        time.sleep({poll!r})
    try:
        os.killpg(0, 9)
    finally:
        os._exit(70)
threading.Thread(target=_watch_parent, name="nx_hal-parent-watch", daemon=True).start()
sys.argv[1:] = {args!r}
import runpy
runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""
_PARENT_POLL: Final = 0.5
# What a child that an allocation failure killed leaves on stderr: Python's
# MemoryError, C++'s std::bad_alloc (terminate's message), glibc and the
# vendors' own words for a failed allocation, and a thread whose stack could
# not be mapped (XLA aborts on it: "creation via pthread_create() failed").
_OUT_OF_MEMORY_WORDS: Final = re.compile(
    r"MemoryError|std::bad_alloc|Cannot allocate memory|out of memory|failed to allocate|"
    r"Unable to allocate|ENOMEM|pthread_create\(\) failed|can't start new thread", re.IGNORECASE)
_UNSET: Final = -1

_memory_limit = _UNSET


def set_memory_limit(limit: int) -> None:
    """The memory limit, in bytes, of the children started from now on (0:
    none); ``nx_hal.configure`` sets it from the setting child_memory_limit."""
    global _memory_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"a child memory limit is a whole number of bytes >= 0, got {limit!r}")
    _memory_limit = limit


def memory_limit() -> int:
    """The memory limit of the children started now: the one set, else the
    setting's default (three quarters of this machine's memory)."""
    if _memory_limit != _UNSET:
        return _memory_limit
    # Not configured (a Registry made directly): NX_HAL_CHILD_MEMORY_LIMIT
    # still holds when it is a plain number of bytes, as under a sanitizer.
    value = os.environ.get("NX_HAL_CHILD_MEMORY_LIMIT", "").strip()
    return int(value) if value.isdigit() else _default_limit()


@functools.lru_cache(maxsize=1)
def _default_limit() -> int:
    return default_child_memory_limit()  # the machine's memory: read once


def module_command(module: str, *args: str, memory_limit: int = 0) -> list[str]:
    """The argv that runs ``module`` as ``__main__`` with this process's import
    path, as a child of this process that dies with it, its data limited to
    ``memory_limit`` bytes (0: no limit)."""
    path = [os.path.abspath(p) if p == "" else p for p in sys.path]
    bootstrap = _BOOTSTRAP.format(path=path, parent=os.getpid(), limit=int(memory_limit), poll=_PARENT_POLL,
                                  args=list(args), module=module)
    return [sys.executable, "-c", bootstrap]


def ran_out_of_memory(stderr: str) -> bool:
    """Whether a child that died left the words of a failed allocation on stderr."""
    return _OUT_OF_MEMORY_WORDS.search(stderr[-4000:]) is not None


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def out_of_memory_error(what: str, limit: int, *, plugin: str | None = None) -> ResourceExhaustedError:
    """The error for ``what`` having run out of memory in a child limited to ``limit`` bytes."""
    if limit > 0:
        bound = f"under the child memory limit of {_size(limit)} ({MEMORY_SETTING})"
    else:
        bound = f"with no child memory limit set ({MEMORY_SETTING})"
    return ResourceExhaustedError(f"{what} ran out of memory in its child process {bound}; the child was stopped "
                                  "and this process is unaffected", plugin=plugin)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _sweep(prefix: str) -> None:
    """Removes the working directories of ``prefix`` whose process is gone: one killed (SIGKILL,
    or SIGTERM's default action) runs no finalizer, and each left the model and the executable
    it compiled in the temporary directory. Only this user's plain directories are touched."""
    import shutil
    import tempfile

    root = tempfile.gettempdir()
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    try:
        names = [e for e in os.scandir(root) if e.name.startswith(prefix)]
    except OSError:
        return
    for entry in names:
        found = pattern.match(entry.name)
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
        except OSError:
            continue
        if found and mine and int(found.group(1)) != os.getpid() and not _alive(int(found.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)


def work_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A private directory for a child's files (the program in, the executable out), named for
    this process so that a later process can tell it was left behind, and removes those left
    by processes that were killed."""
    import tempfile

    _sweep(prefix)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-")


class _Spawner:
    """The one thread of this process that starts children: the kernel's
    death signal follows the thread that started a child, and this one
    lives as long as the process (a fork's child makes its own)."""

    def __init__(self) -> None:
        self._reset()
        # A fork's child has no spawner thread, and this lock may have been
        # held by another thread at the fork.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._jobs: Any = None

    def _serve(self, jobs: Any) -> None:
        while True:
            job = jobs.get()
            job()

    def run(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        import queue

        with self._lock:
            if self._pid != os.getpid():
                self._jobs, self._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._serve, args=(self._jobs,), name="nx_hal-child-spawner",
                                 daemon=True).start()
            jobs = self._jobs
        done = threading.Event()
        box: list[Any] = []

        def job() -> None:
            try:
                box.append(start())
            except BaseException as exc:  # handed to the caller's thread
                box.append(exc)
            done.set()

        jobs.put(job)
        try:
            done.wait()
        except BaseException:  # interrupted: the child starts anyway, and must not be left
            done.wait()
            if box and not isinstance(box[0], BaseException):
                _Owner(box[0]).kill()
            raise
        if isinstance(box[0], BaseException):
            raise box[0]
        proc: subprocess.Popen[bytes] = box[0]
        return proc


_spawner = _Spawner()


class _Owner:
    """Kills and reaps one child and its group. The group is signalled only
    while the child is unreaped: until then its pid, which names the group,
    cannot be given to another process."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def exited(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for the child to exit, without reaping it."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.returncode is not None:
                return True
            try:
                if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._sleep(left)

    def _sleep(self, most: float) -> None:
        """Until the child exits (a pidfd turns readable then), or ``most`` seconds."""
        try:
            fd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):  # before Linux 5.3: poll
            time.sleep(min(most, 0.01))
            return
        try:
            select.select([fd], [], [], most)
        finally:
            os.close(fd)

    def kill(self) -> int:
        """SIGKILLs the child's group (the child included) and reaps the child."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass
        return self.proc.wait()


class Child:
    """One child process running ``python -m module *args`` the nx_hal way (the
    module's docstring). ``what`` names its work in errors ("probing plugin
    'x'"); ``memory_limit`` None takes :func:`memory_limit`. stdin and stdout
    are pipes; ``stderr`` a pipe (None), a file, or ``inherit=True`` for this
    process's own.

    Not thread-safe: its owner serialises requests."""

    def __init__(self, module: str, *args: str, what: str, memory_limit: int | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 stderr: IO[bytes] | None = None, inherit_stderr: bool = False) -> None:
        import subprocess

        self.what = what
        self.memory_limit = _resolve(memory_limit)
        self.killed = False  # killed here (at a deadline, or by kill())
        self._pending = b""
        self._stderr_seen = b""
        argv = module_command(module, *args, memory_limit=self.memory_limit)
        err: Any = None if inherit_stderr else (stderr if stderr is not None else subprocess.PIPE)

        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True)

        self.proc = _spawner.run(start)
        self._owner = _Owner(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def stderr_text(self) -> str:
        """What the child wrote to a stderr pipe so far (after communicate)."""
        return self._stderr_seen.decode(errors="replace")

    def alive(self) -> bool:
        """Whether the child has not exited (it stays unreaped until closed)."""
        return not self._owner.exited(0)

    def send(self, data: bytes) -> bool:
        """Writes ``data`` to the child's stdin; False when the child is gone."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    def read_line(self, timeout: float) -> bytes | None:
        """The child's next stdout line (without its newline); None when the
        child closed stdout (exited) first. Past ``timeout`` seconds the
        child is killed and DeadlineExceededError raised."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        try:
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._overran(timeout)
                if not select.select([fd], [], [], left)[0]:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._pending += chunk
        except BaseException:  # the deadline, or an interrupt: the child must not be left mid-request
            self.kill()
            raise
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def communicate(self, data: bytes, timeout: float) -> bytes:
        """For a child that takes one request: sends ``data``, closes stdin,
        and returns all of stdout once the child has exited (its stderr, when
        a pipe, in ``stderr_text``; its status in ``returncode``). Past
        ``timeout`` seconds the child is killed and DeadlineExceededError
        raised (``stderr_text`` then holds what it wrote until then)."""
        deadline = time.monotonic() + timeout
        out = bytearray()
        try:
            self._pump(data, out, deadline, timeout)
            if not self._owner.exited(max(0.0, deadline - time.monotonic())):
                raise self._overran(timeout)
        except BaseException:
            self.kill()
            raise
        self._reap()
        return bytes(out)

    def _pump(self, data: bytes, out: bytearray, deadline: float, timeout: float) -> None:
        """Writes ``data`` to stdin and reads stdout (and a stderr pipe) until both close."""
        import selectors

        assert self.proc.stdin is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            if data:
                os.set_blocking(self.proc.stdin.fileno(), False)
                sel.register(self.proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            else:
                self.proc.stdin.close()
            sel.register(self.proc.stdout.fileno(), selectors.EVENT_READ, "out")
            if self.proc.stderr is not None:
                sel.register(self.proc.stderr.fileno(), selectors.EVENT_READ, "err")
            view, err = memoryview(data), bytearray()
            try:
                while sel.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._overran(timeout)
                    for key, _ in sel.select(left):
                        if key.data == "in":
                            try:
                                view = view[os.write(key.fd, view[:65536]):]
                            except BrokenPipeError:
                                view = view[:0]
                            if not view:
                                sel.unregister(key.fd)
                                self.proc.stdin.close()
                            continue
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            sel.unregister(key.fd)
                        (out if key.data == "out" else err).extend(chunk)
            finally:
                self._stderr_seen = bytes(err)

    def wait(self, timeout: float) -> int:
        """The exit status of a child that closed its stdout (negative: the
        signal that ended it); killed past ``timeout`` seconds."""
        if not self._owner.exited(timeout):
            self.kill()
            assert self.proc.returncode is not None
            return self.proc.returncode
        return self._reap()

    def kill(self) -> None:
        """Kills the child and its group now, and reaps it."""
        if self.proc.returncode is None:
            self.killed = True
        self._owner.kill()
        self._close_pipes()

    def close(self, grace: float = 5.0) -> None:
        """Closes the child's stdin (its cue to exit) and reaps it; killed
        (with its group) when it is still there after ``grace`` seconds."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        if self._owner.exited(grace):
            self._reap()
        else:
            self.kill()
        self._close_pipes()

    def _reap(self) -> int:
        """Reaps an exited child, killing first what it left in its group,
        and closes its pipes (what it wrote is read by now): a pipe left to
        the garbage collector is a file descriptor held until then."""
        self._owner.kill()
        self._close_pipes()
        assert self.proc.returncode is not None
        return self.proc.returncode

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass

    def _overran(self, timeout: float) -> DeadlineExceededError:
        return DeadlineExceededError(f"{self.what} took longer than {timeout:g} s; its child process was killed")


def _resolve(limit: int | None) -> int:
    return memory_limit() if limit is None else max(0, int(limit))
