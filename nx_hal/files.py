"""Files the core writes for the user (nx-hal convert's output): atomic writes with the mode open() gives."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]

def _umask() -> int:
    """The process's umask, read without changing it where Linux says it
    (setting it to read it back races with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Writes ``data`` to ``path`` through a temporary file and a rename, so a
    reader sees the old file or the whole new one, never part of it.

    ``mode`` None: the file is private (0600), as a cache entry must be.
    Otherwise it gets the mode ``open(path, "w")`` would give it: an existing
    file's mode is kept, a new file gets ``mode`` less the umask (0666 for a
    user's ordinary output). The directory must exist: like ``cp``, a
    user's output never creates one (a typo in it is an error)."""
    wanted = None
    if mode is not None:
        try:
            existing = os.stat(path)
            wanted = existing.st_mode & 0o777 if stat.S_ISREG(existing.st_mode) else None
        except OSError:
            pass
        if wanted is None:
            wanted = mode & ~_umask() & 0o777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if wanted is not None:
            os.fchmod(fd, wanted)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
