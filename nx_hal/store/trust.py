"""The one trust rule for the store's directories and files, and the
descriptor-relative opens that apply it.

A directory is trusted when this user (the effective uid) owns it and
neither group nor others may write to it, or when it is sticky (as /tmp):
there others may add names but not replace or remove this user's, and every
directory and entry taken below it is checked to be this user's own. Below the
root nothing is reached through a symbolic link: each step is opened with
O_NOFOLLOW relative to its parent's descriptor, so a link planted anywhere is
refused, never followed. Entries must be regular files of this user: opened
with O_NONBLOCK, so a FIFO planted as an entry cannot hang the open, and
checked with fstat before a byte is read.
"""

from __future__ import annotations

import os
import stat
from typing import Final

__all__ = ["DIR_FLAGS", "FILE_FLAGS", "untrusted_dir", "untrusted_file", "open_dir", "make_dir"]

DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def untrusted_dir(info: os.stat_result) -> str | None:
    """Why a directory (its fstat) is not to be trusted, or None."""
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != os.geteuid():
        return f"it is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        return (f"group or others may write to it (mode {stat.S_IMODE(info.st_mode):o}) and could plant "
                "entries this process would trust")
    return None


def untrusted_file(info: os.stat_result) -> str | None:
    """Why an entry (its fstat) is not to be trusted, or None."""
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != os.geteuid():
        return f"it is owned by uid {info.st_uid}, not by this user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def open_dir(name: str | os.PathLike[str], dir_fd: int | None, *, follow: bool = False) -> int:
    """A trusted directory's descriptor. ``follow``: the root only, whose
    path the user chose (it may pass through links of their own). Raises
    OSError, PermissionError with the reason when it is not trusted."""
    flags = DIR_FLAGS & ~os.O_NOFOLLOW if follow else DIR_FLAGS
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        why = untrusted_dir(os.fstat(fd))
    except OSError:
        os.close(fd)
        raise
    if why is not None:
        os.close(fd)
        raise PermissionError(f"{os.fspath(name)}: {why}")
    return fd


def make_dir(name: str, dir_fd: int) -> int:
    """``name`` under ``dir_fd`` opened as a trusted directory, made 0700 if missing."""
    try:
        return open_dir(name, dir_fd)
    except FileNotFoundError:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass  # another process made it first: it is checked as any other
        return open_dir(name, dir_fd)
