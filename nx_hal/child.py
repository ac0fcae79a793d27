"""Child processes that import exactly the nx_hal this process imported,
and the line protocol the long-lived ones (the converter, the sandbox) speak.

``python -m nx_hal.x`` in a child puts the child's working directory first on
its import path: run from a source checkout after ``pip install .``, the child
would import the uncompiled source tree instead of the installed package. The
child gets this process's ``sys.path`` instead.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a warm start imports this module and spawns nothing
    import subprocess

__all__ = ["module_command", "read_line", "end_child"]


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs ``module`` as ``__main__`` with this process's import path."""
    path = [os.path.abspath(p) if p == "" else p for p in sys.path]
    bootstrap = (
        "import sys, runpy; "
        f"sys.path[:] = {path!r}; sys.argv[1:] = {list(args)!r}; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", bootstrap]


def read_line(proc: subprocess.Popen[bytes], pending: bytes, deadline: float) -> tuple[bytes | None, bytes]:
    """The next line from ``proc``'s stdout (without its newline) and what was
    read past it; None as the line when the child exited first. Raises
    TimeoutError once ``time.monotonic()`` passes ``deadline``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while b"\n" not in pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, pending
        pending += chunk
    line, _, rest = pending.partition(b"\n")
    return line, rest


def end_child(proc: subprocess.Popen[bytes]) -> None:
    """Closes the child's stdin (its cue to exit), waits 5 s, then kills it."""
    import subprocess

    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
