"""This process's executables, by request: a second compile of the same
unchanged files (path, size, mtime, ctime, inode of the program and of every
file read with it) with the same options on the same device returns the
executable already made, without reading, hashing or loading anything.

Held weakly: an executable no one holds is freed as before, and its entry
then misses."""

from __future__ import annotations

import json
import os
import weakref
from typing import TYPE_CHECKING

from nx_hal.compile.request import Request
from nx_hal.compile.target import Target
from nx_hal.store.recent import Recent

if TYPE_CHECKING:
    from nx_hal.dynamic import DynamicExecutable
    from nx_hal.executable import Executable

__all__ = ["key_of", "identity", "snapshot", "get", "put", "clear"]

_entries: Recent[tuple[object, ...], tuple[tuple[tuple[object, ...], ...], weakref.ref[Executable | DynamicExecutable]]] = Recent(256)


def identity(path: str) -> tuple[object, ...] | None:
    """(path, size, mtime, inode, device, ctime) of a file, None when it is
    gone: a write changes its ctime, which no user can set back."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)


def key_of(target: Target, program: object, format: str | None, request: Request) -> tuple[object, ...] | None:
    """The memo's key for this compile; None when it cannot be one (not a
    file, or options that do not serialize)."""
    if not request.cache or request.example_args is not None or not isinstance(program, (str, os.PathLike)):
        return None
    text = os.fspath(program)
    if "\n" in text or len(text) >= 4096:
        return None
    try:
        options = json.dumps([request.options, request.input_shapes, request.shape_buckets, request.reserialize,
                              request.verify, request.precision, request.donate_argnums],
                             sort_keys=True)
        path = os.path.realpath(text)
    except (TypeError, ValueError, OSError):
        return None
    return (id(target), target.compat_key, path, format, options)


def get(key: tuple[object, ...] | None, target: Target) -> Executable | DynamicExecutable | None:
    if key is None:
        return None
    found = _entries.get(key)
    if found is None:
        return None
    sources, ref = found
    exe = ref()
    if exe is None or exe.device is not target or not sources or any(identity(str(s[0])) != s for s in sources):
        return None  # freed, another device at the same address, or a file changed
    return exe


def snapshot(sources: tuple[str, ...]) -> tuple[tuple[object, ...], ...] | None:
    """The files' identities now, as the program was read (None: one is gone)."""
    stats = tuple(identity(s) for s in sources)
    return None if not stats or any(s is None for s in stats) else tuple(s for s in stats if s is not None)


def put(key: tuple[object, ...] | None, stats: tuple[tuple[object, ...], ...] | None, exe: Executable | DynamicExecutable) -> None:
    if key is None or stats is None:
        return
    _entries.put(key, (stats, weakref.ref(exe)))


def clear() -> None:
    """Forgets every entry (tests, benchmarks)."""
    _entries.clear()
