"""Requests remembered across processes: which stored executable a compile
of an unchanged file made, so a warm start reads neither the model nor its
prepared or converted forms, and hashes none of them (resnet18 on npu:cpu:
about 180 of a warm compile's 470 ms; bench/compile_cache.py).

The store's ``requests`` section holds, under a key of the request (the
memo's: device, compat key, the file's real path, format, options) with the
file's identity (size, mtime, inode, device, ctime), the device's
attributes, this code and the converter's version: the executable's key in
the compile cache, the identity of every file the compile read (external
data included) and the names and index checks the pipeline gave the
executable. A hit re-stats every file; any difference is a miss and the
full pipeline runs, as does a missing or refused executable.

A file's identity stands for its bytes only once no write can share its
timestamps: a request is recorded only when every file it read was last
changed (ctime) at least ``_SETTLED_NS`` before the compile began reading,
so a write during or just before the compile, within the filesystem's
timestamp granularity, is never hidden (git's "racy clean" rule). Entries
are the store's: sealed by the user's key, so a planted one is a miss."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nx_hal.compile import memo
from nx_hal.compile.target import Target
from nx_hal.index_checks import IndexCheck
from nx_hal.store import digest
from nx_hal.version import code_identity

if TYPE_CHECKING:
    from nx_hal.executable import Executable

__all__ = ["SECTION", "find", "record"]

log = logging.getLogger("nx_hal")

SECTION: Final = "requests"
_SCHEMA: Final = "1"
# Coarser than any filesystem's ctime (a clock tick on Linux; 2 s on FAT's mtime).
_SETTLED_NS: Final = 2_000_000_000


@functools.cache
def _code() -> str:
    """The code that turns a request into an executable (the stages, how
    files are read; the converter's own: Converter.identity): another
    version may make another executable."""
    root = Path(__file__).resolve().parent.parent
    return code_identity([*root.joinpath("compile").glob("*.py"), root / "programs.py", root / "external_data.py",
                          root / "dynamic.py", root / "executable.py"])


def _key(target: Target, remembered: tuple[object, ...]) -> str | None:
    path = str(remembered[2])
    found = memo.identity(path)
    if found is None:
        return None
    facts = [_SCHEMA, _code(), target.link.converter.identity(), target.plugin, *remembered[1:], found,
             sorted((str(k), str(v)) for k, v in target.attributes.items())]
    return digest(json.dumps(facts, default=str))


def find(target: Target, remembered: tuple[object, ...] | None) -> tuple[Executable, tuple[tuple[object, ...], ...]] | None:
    """The executable this request made before, with the identities of the
    files it read, if none changed since and the executable loads; else None."""
    cache = target.link.compile_cache
    if remembered is None or cache is None:
        return None
    key = _key(target, remembered)
    entry = cache.store.get_json(SECTION, key) if key is not None else None
    if entry is None:
        return None
    try:
        sources = tuple(tuple(s) for s in entry["sources"])
        if not sources or any(memo.identity(str(s[0])) != s for s in sources):
            return None  # a file changed: the full pipeline reads it again
        names = (list(map(str, entry["inputs"])), list(map(str, entry["outputs"])))
        checks = tuple(IndexCheck.from_json(c) for c in entry["index_checks"])
        stored_as = str(entry["executable"])
    except (KeyError, TypeError, ValueError) as exc:
        log.info("nx_hal compile cache: ignoring request %s: %s", key, exc)
        return None
    exe = cache.load(target, stored_as)
    if exe is None:
        return None
    if (len(exe.inputs), len(exe.outputs)) != (len(names[0]), len(names[1])):
        return None
    exe.rename(*names)
    if checks:
        exe.check_inputs(checks)
    return exe, sources


def record(target: Target, remembered: tuple[object, ...] | None, stored_as: str, exe: Executable,
           sources: tuple[tuple[object, ...], ...] | None, started_ns: int) -> None:
    """Keeps the request's way to ``exe`` (stored under ``stored_as``), when
    every file it read had settled before ``started_ns`` and is unchanged."""
    cache = target.link.compile_cache
    if remembered is None or cache is None or not stored_as or not sources:
        return
    if any(int(s[5]) > started_ns - _SETTLED_NS for s in sources):  # type: ignore[call-overload]
        return  # written just before (or while) it was read: its identity may hide a write
    if any(memo.identity(str(s[0])) != s for s in sources):
        return
    key = _key(target, remembered)
    if key is None:
        return
    cache.store.put_json(SECTION, key, {
        "executable": stored_as, "sources": [list(s) for s in sources],
        "inputs": [s.name for s in exe.inputs], "outputs": [s.name for s in exe.outputs],
        "index_checks": [rule.to_json() for rule, _ in exe._index_checks]})
