"""A child for tests/test_child.py, run as nx_hal runs its own children
(``nx_hal.child.Child("tests.child_helper", MODE)``): it prints one line
and then does what MODE says.

- ``sleep``: prints its pid, then sleeps;
- ``grandchild``: starts ``sleep`` in its own process group, prints both
  pids, then sleeps;
- ``no-deathsig``: clears the kernel's parent-death signal (so that only the
  parent watch can end it), prints its pid, then sleeps;
- ``limit``: prints its RLIMIT_DATA (soft, hard) and exits;
- ``hog N``: takes N bytes, touching every page, then prints "took" and exits.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time


def _sleep() -> None:
    while True:
        time.sleep(3600)


def main() -> int:
    mode = sys.argv[1]
    if mode == "sleep":
        print(os.getpid(), flush=True)
        _sleep()
    if mode == "grandchild":
        grandchild = subprocess.Popen(["sleep", "600"])
        print(os.getpid(), grandchild.pid, flush=True)
        _sleep()
    if mode == "no-deathsig":
        ctypes.CDLL(None, use_errno=True).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG, none
        print(os.getpid(), flush=True)
        _sleep()
    if mode == "limit":
        print(*resource.getrlimit(resource.RLIMIT_DATA), flush=True)
        return 0
    if mode == "hog":
        block = bytearray(int(sys.argv[2]))  # zero-filled: every page is touched
        print("took", len(block), flush=True)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
