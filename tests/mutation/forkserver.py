"""A pytest fork server for the mutation run (``.ci/mutation``, issue #17).

Each mutant's test command starts pytest afresh, and most of a small
selection's run was that start: importing pytest, its plugins (hypothesis
alone is half a second), numpy, pydantic and onnx, about 2 s on a loaded
2-core machine, three hundred times. One server per tree copy imports those
once; each mutant's ``tests.mutation.select`` connects, hands over its
standard streams, working directory, environment and pytest's arguments,
and the server forks a child that runs ``pytest.main`` there and exits with
its status.

What the child may not inherit is anything of the code under test: the
server never imports ``nx_hal`` or ``tests`` (checked after the imports), so
the child imports the mutated module from disk as a fresh pytest would. A
client that goes away (cosmic-ray's timeout kills it) takes its child's
whole process group with it. Where no server answers, the client says so
and the caller runs pytest as a subprocess, as before.

Usage: ``python -m tests.mutation.forkserver SOCKET`` (serves until killed).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

#: Imported once in the server: third-party modules only, never the code under test.
PRELOAD = ("pytest", "_pytest.config", "_pytest.python", "_pytest.assertion.rewrite", "xdist.plugin",
           "_hypothesis_pytestplugin", "hypothesis", "hypothesis.strategies", "numpy", "pydantic",
           "pydantic_settings", "pluggy", "cffi", "onnx", "onnx.helper", "onnx.numpy_helper", "ml_dtypes",
           "coverage")
#: The environment variable naming the server's socket for the clients.
SOCKET_ENV = "NXHAL_MUTATION_FORKSERVER"
_FORBIDDEN = ("nx_hal", "tests")


def _preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # not installed here: the child imports what it needs
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in _FORBIDDEN and m != "tests.mutation.forkserver"
                    and m not in ("tests", "tests.mutation"))
    if leaked:
        raise SystemExit(f"forkserver: the preloads imported code under test: {leaked}")


def _child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become the pytest run the client asked for; never returns."""
    status = 70
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        cwd = str(request["cwd"])
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
        sys.path[0] = cwd  # as `python -m pytest` run from cwd has it
        args = [str(a) for a in list(request["args"])]  # type: ignore[call-overload]
        sys.argv = ["pytest", *args]
        import pytest

        status = int(pytest.main(args))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the client may be gone
                pass
        os._exit(status)


def _serve_one(conn: socket.socket) -> None:
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
            return
        readable, _, _ = select.select([conn], [], [], 0.05)
        if readable and not conn.recv(1):  # the client went away: so does its run
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return


def serve(path: Path) -> None:
    _preload()
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                _serve_one(conn)
            except OSError:
                pass  # a client that went away mid-request: the next one is served


def run(args: list[str]) -> int | None:
    """pytest's exit status for ``args``, run by the server named in the environment; None where
    none answers (the caller runs pytest itself)."""
    path = os.environ.get(SOCKET_ENV)
    if not path:
        return None
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError as error:
        print(f"mutation-select: no fork server at {path} ({error}): pytest as a subprocess", flush=True)
        return None
    with conn:
        sys.stdout.flush()
        sys.stderr.flush()
        request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        reply = b""
        while chunk := conn.recv(64):
            reply += chunk
    if not reply:
        print("mutation-select: the fork server gave no status: pytest as a subprocess", flush=True)
        return None
    return int(reply)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
