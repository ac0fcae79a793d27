"""Files the core writes and trusts: atomic writes, and directories only this user can write."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "private_directory"]

_safe_dirs: dict[Path, bool] = {}


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file and a rename, so a
    reader sees the old file or the whole new one, never part of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def private_directory(folder: Path) -> Path | None:
    """``folder`` (made if missing) if it is safe to trust: a verdict file
    there decides whether bytes reach a vendor parser, so the directory must
    be the user's own and writable by nobody else; else None."""
    known = _safe_dirs.get(folder)
    if known is None:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(folder)
            known = (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
                     and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
        except OSError:
            known = False
        _safe_dirs[folder] = known
    return folder if known else None
