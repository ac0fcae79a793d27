"""The files under ``cache_dir``: what each section holds (``info``),
removing entries (``clear``), and least-recently-used eviction to a size
limit (``evict``, run by the writers of large entries after each store).

The sections, each written by one user of the store (nx_hal.store.Store),
each entry one file ``<section>/<2 hex>/<key>``:

====================  ========================================================
``executables``       compiled executables (the compile pipeline)
``stablehlo``         ONNX → StableHLO conversions (nx_hal.onnx.convert)
``verdicts``          StableHLO verification verdicts (nx_hal.onnx.verify)
``compile-verdicts``  sandboxed compile verdicts (nx_hal.sandbox)
``probe``             probe verdicts (nx_hal.probe)
``discovery``         what each entry point registered (nx_hal.discovery)
====================  ========================================================

Files of the layouts of earlier nx_hal versions (``<key>.nxexe``,
``<key>.module`` and ``<key>.json`` pairs, ``probe/plugins/``) are entries
too, so that eviction and ``clear`` remove them; the store never reads them.
plus the temporary files of atomic writes (``.<name>.*.tmp``, ``tmp*.tmp``),
which are left alone while young (a write may be in progress) and are
entries like the others after an hour. Anything else under ``cache_dir``
(a file of another name, a symbolic link, another directory) is "other":
counted by ``info``, never removed.

Least recently used is judged by mtime, not atime (relatime and noatime
mounts do not keep atime): every cache hit sets its entry's mtime to now
(``touch``). Eviction removes the entries with the oldest mtime first until
what the sections hold is at most the limit, both sides of the boundary
exact: the limit itself is not exceeded, and no entry is removed once it is
met. Concurrent processes may evict and write at once: a file that vanishes
mid-scan or before its removal counts as removed, and a reader that loses an
entry sees a miss.

Nothing outside ``cache_dir`` is touched: directories are opened with
O_NOFOLLOW relative to their parent's descriptor, so a symbolic link planted
anywhere in a section (a shard directory, an entry) is neither followed nor
removed. ``clear`` and ``evict`` refuse a ``cache_dir`` that is ``/``, the
home directory or one of its parents, or that another user owns.

Stdlib only, as the rest of the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nx_hal.errors import ConfigError, InvalidArgumentError
from nx_hal.store.location import home_dir

__all__ = [
    "SECTIONS",
    "OTHER",
    "Usage",
    "CacheInfo",
    "Removed",
    "info",
    "clear",
    "evict",
    "evict_quietly",
    "touch",
]

log = logging.getLogger("nx_hal")

SECTIONS: Final = ("executables", "prepared", "stablehlo", "requests", "verdicts", "compile-verdicts", "probe",
                   "discovery")
OTHER: Final = "other"

# A temporary file younger than this may belong to a write in progress.
_STALE_TMP_SECONDS: Final = 3600

_HEX64: Final = r"[0-9a-f]{64}"
_SHARD: Final = re.compile(r"[0-9a-f]{2}")
_TMP: Final = re.compile(r"(\..+|tmp[^/]*)\.tmp")
# Per section: file names at its top, and its subdirectories (a pattern, and
# the file names in them). No deeper level exists.
# Per section: file names at its top, and its subdirectories (a pattern, and
# the file names in them). No deeper level exists. The store writes
# <2 hex>/<key>; the other names are the layouts of earlier versions.
_TOP: Final = re.compile(rf"(plugins-)?{_HEX64}\.(nxexe|json)")
_SUBDIRS: Final = re.compile(r"[0-9a-f]{2}|plugins")
_NAMES: Final = re.compile(rf"{_HEX64}(\.(module|json))?")
_LAYOUT: Final[dict[str, tuple[re.Pattern[str] | None, re.Pattern[str] | None, re.Pattern[str] | None]]] = {
    section: (_TOP, _SUBDIRS, _NAMES) for section in SECTIONS
}
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Usage:
    """A number of files and their bytes (st_size)."""

    files: int = 0
    bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.files + other.files, self.bytes + other.bytes)

    def to_dict(self) -> dict[str, int]:
        return {"files": self.files, "bytes": self.bytes}


def _total(parts: Iterable[Usage]) -> Usage:
    total = Usage()
    for part in parts:
        total += part
    return total


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class CacheInfo:
    """What ``cache_dir`` holds: ``sections`` maps each of SECTIONS and OTHER
    (in that order) to its Usage. ``total`` is everything; ``managed``
    excludes OTHER and is what ``max_bytes`` (0: no limit) bounds."""

    cache_dir: Path
    sections: dict[str, Usage]
    max_bytes: int

    @property
    def total(self) -> Usage:
        return _total(self.sections.values())

    @property
    def managed(self) -> Usage:
        return _total(u for name, u in self.sections.items() if name != OTHER)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.cache_dir),
            "max_bytes": self.max_bytes,
            "total": self.total.to_dict(),
            "managed": self.managed.to_dict(),
            "sections": {name: usage.to_dict() for name, usage in self.sections.items()},
        }

    def __str__(self) -> str:
        limit = _size(self.max_bytes) if self.max_bytes > 0 else "none"
        lines = [f"cache_dir: {self.cache_dir}"]
        for name, usage in self.sections.items():
            lines.append(f"  {name:<17} {usage.files:>7} files  {_size(usage.bytes):>10}")
        total = self.total
        lines.append(f"  {'total':<17} {total.files:>7} files  {_size(total.bytes):>10}")
        lines.append(f"limit: {limit} (on everything but '{OTHER}')")
        return "\n".join(lines)


@dataclass(frozen=True)
class Removed:
    """What ``clear`` or ``evict`` removed, by section (only SECTIONS)."""

    cache_dir: Path
    sections: dict[str, Usage] = field(default_factory=dict)

    @property
    def total(self) -> Usage:
        return _total(self.sections.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "cache_dir": str(self.cache_dir),
            "removed": self.total.to_dict(),
            "sections": {name: usage.to_dict() for name, usage in self.sections.items()},
        }

    def __str__(self) -> str:
        total = self.total
        return f"removed {total.files} files ({_size(total.bytes)}) from {self.cache_dir}"


@dataclass(frozen=True)
class _Entry:
    """One entry: its files (names in one directory, reached from the root
    by ``where``), their bytes and the newest mtime among them."""

    section: str
    where: tuple[str, ...]
    names: tuple[str, ...]
    bytes: int
    mtime_ns: int


def touch(path: Path) -> None:
    """Marks a cache entry as just used (its mtime, which eviction reads).
    Called on every hit; an entry that cannot be touched is left as it is."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _root(cache_dir: str | os.PathLike[str], *, modifying: bool) -> Path | None:
    """``cache_dir`` resolved, None if it does not exist; ConfigError when it
    looks wrong (``/``, the home directory or above it, not a directory) or,
    when ``modifying``, when this user does not own it."""
    given = Path(cache_dir)
    try:
        root = given.resolve()
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"cache_dir {given}: cannot resolve it: {exc}") from None
    home = home_dir()
    home = home.resolve() if home is not None else None
    wrong = None
    if root == Path(root.anchor):
        wrong = "the filesystem's root"
    elif home is not None and (root == home or root in home.parents):
        wrong = "the home directory" if root == home else f"above the home directory {home}"
    if wrong is not None:
        raise ConfigError(
            f"cache_dir {given} is {wrong} ({root}); refusing to work on it: set cache_dir to a directory "
            "of nx_hal's own, such as ~/.cache/nx_hal"
        )
    try:
        info = os.stat(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cache_dir {given}: cannot stat it: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"cache_dir {given} is not a directory")
    if modifying and info.st_uid != os.geteuid():
        raise ConfigError(
            f"cache_dir {given} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}); "
            "refusing to remove anything from it"
        )
    return root


def _open_dir(name: str | os.PathLike[str], dir_fd: int | None) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:  # missing, a symbolic link, not a directory, vanished
        return None


@contextlib.contextmanager
def _opened(name: str | os.PathLike[str], dir_fd: int | None) -> Iterator[int | None]:
    fd = _open_dir(name, dir_fd)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _files(dir_fd: int) -> Iterator[tuple[str, os.stat_result | None, bool]]:
    """(name, lstat or None if it vanished, is a directory) for each entry
    of the directory ``dir_fd``, symbolic links not followed."""
    try:
        entries = list(os.scandir(dir_fd))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            yield entry.name, None, False
            continue
        yield entry.name, st, stat.S_ISDIR(st.st_mode)


def _walk_other(dir_fd: int, skip_dirs: tuple[str, ...] = ()) -> Usage:
    """Every file below ``dir_fd``, symbolic links counted, not followed;
    ``skip_dirs`` are directories of ``dir_fd`` itself left out."""
    usage = Usage()
    for name, st, is_dir in _files(dir_fd):
        if st is None or is_dir and name in skip_dirs:
            continue
        if is_dir:
            with _opened(name, dir_fd) as sub:
                if sub is not None:
                    usage += _walk_other(sub)
        else:
            usage += Usage(1, st.st_size)
    return usage


def _scan_dir(section: str, where: tuple[str, ...], dir_fd: int, names: re.Pattern[str] | None,
              now: float, entries: list[_Entry]) -> Usage:
    """The entries of one directory of a section, grouped by stem (a
    conversion's module and info), appended to ``entries``; young temporary
    files are not entries. Returns what is not an entry (files of other
    names, symbolic links, fresh temporary files counted apart)."""
    groups: dict[str, list[tuple[str, os.stat_result]]] = {}
    other = Usage()
    for name, st, is_dir in _files(dir_fd):
        if st is None or is_dir:
            continue  # vanished; directories are the caller's
        if not stat.S_ISREG(st.st_mode):
            other += Usage(1, st.st_size)
        elif names is not None and names.fullmatch(name):
            groups.setdefault(name.split(".", 1)[0], []).append((name, st))
        elif _TMP.fullmatch(name):
            if now - st.st_mtime >= _STALE_TMP_SECONDS:
                groups.setdefault(name, []).append((name, st))
            else:
                entries.append(_Entry(section, where, (), st.st_size, 0))  # counted, never removed
        else:
            other += Usage(1, st.st_size)
    for members in groups.values():
        # The module last: a reader that finds the info finds the whole module.
        members.sort(key=lambda m: (m[0].endswith(".module"), m[0]))
        entries.append(_Entry(section, where, tuple(n for n, _ in members), sum(s.st_size for _, s in members),
                              max(s.st_mtime_ns for _, s in members)))
    return other


def _scan(root_fd: int, sections: Iterable[str]) -> tuple[list[_Entry], Usage]:
    """The entries of ``sections`` and what else is in them."""
    now = time.time()
    entries: list[_Entry] = []
    other = Usage()
    for section in sections:
        top, subdirs, sub_names = _LAYOUT[section]
        with _opened(section, root_fd) as fd:
            if fd is None:
                continue
            other += _scan_dir(section, (section,), fd, top, now, entries)
            for name, st, is_dir in _files(fd):
                if st is None or not is_dir:
                    continue
                with _opened(name, fd) as sub:
                    if sub is None:
                        continue
                    if subdirs is not None and subdirs.fullmatch(name):
                        other += _scan_dir(section, (section, name), sub, sub_names, now, entries)
                        for deeper, _, deeper_is_dir in _files(sub):
                            if deeper_is_dir:
                                with _opened(deeper, sub) as deeper_fd:
                                    if deeper_fd is not None:
                                        other += _walk_other(deeper_fd)
                    else:
                        other += _walk_other(sub)
    return entries, other


def _remove(root_fd: int, entry: _Entry) -> bool:
    """Unlinks the entry's files (never a link's target: each directory on
    the way is opened without following links). False if none was there."""
    fds: list[int] = []
    try:
        at = root_fd
        for part in entry.where:
            fd = _open_dir(part, at)
            if fd is None:
                return False
            fds.append(fd)
            at = fd
        removed = False
        for name in entry.names:
            try:
                st = os.stat(name, dir_fd=at, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    os.unlink(name, dir_fd=at)
                    removed = True
            except FileNotFoundError:
                pass  # another process removed or replaced it
        return removed
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _sections(sections: Iterable[str] | None) -> tuple[str, ...]:
    if sections is None:
        return SECTIONS
    chosen = tuple(dict.fromkeys(sections))
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        raise InvalidArgumentError(
            f"unknown cache section{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the sections are {', '.join(SECTIONS)}"
        )
    return chosen


def info(cache_dir: str | os.PathLike[str], *, max_bytes: int = 0) -> CacheInfo:
    """What ``cache_dir`` holds, by section (SECTIONS, then OTHER for
    anything nx_hal did not write there). ``max_bytes`` is only reported
    (pass the setting cache_max_bytes). A missing directory holds nothing.
    ConfigError when cache_dir is ``/``, the home directory or above it."""
    root = _root(cache_dir, modifying=False)
    sections = {name: Usage() for name in (*SECTIONS, OTHER)}
    shown = Path(cache_dir)
    if root is None:
        return CacheInfo(shown, sections, max_bytes)
    with _opened(root, None) as root_fd:
        if root_fd is None:
            return CacheInfo(shown, sections, max_bytes)
        entries, other = _scan(root_fd, SECTIONS)
        for entry in entries:
            sections[entry.section] += Usage(max(len(entry.names), 1), entry.bytes)
        other += _walk_other(root_fd, SECTIONS)
    sections[OTHER] = other
    return CacheInfo(shown, sections, max_bytes)


def _removing(cache_dir: str | os.PathLike[str], chosen: Iterable[_Entry], root_fd: int) -> Removed:
    removed: dict[str, Usage] = {}
    for entry in chosen:
        if entry.names and _remove(root_fd, entry):
            removed[entry.section] = removed.get(entry.section, Usage()) + Usage(len(entry.names), entry.bytes)
    return Removed(Path(cache_dir), {s: removed[s] for s in SECTIONS if s in removed})


def clear(cache_dir: str | os.PathLike[str], sections: Iterable[str] | None = None) -> Removed:
    """Removes the entries of ``sections`` (default: all of SECTIONS) from
    ``cache_dir``: only files nx_hal writes there, by name, never anything
    else, never through a symbolic link. Temporary files of writes in
    progress (younger than an hour) stay. ConfigError when cache_dir looks
    wrong or is not this user's; InvalidArgumentError for an unknown
    section."""
    chosen = _sections(sections)
    root = _root(cache_dir, modifying=True)
    if root is None:
        return Removed(Path(cache_dir))
    with _opened(root, None) as root_fd:
        if root_fd is None:
            return Removed(Path(cache_dir))
        entries, _ = _scan(root_fd, chosen)
        removed = _removing(cache_dir, entries, root_fd)
        _remove_empty_shards(root_fd, chosen)
        return removed


def _remove_empty_shards(root_fd: int, sections: Iterable[str]) -> None:
    """The subdirectories of ``sections`` left empty (a writer makes its
    shard again: atomic_write creates the parent it writes in)."""
    for section in sections:
        subdirs = _LAYOUT[section][1]
        if subdirs is None:
            continue
        with _opened(section, root_fd) as fd:
            if fd is None:
                continue
            for name, _, is_dir in _files(fd):
                if is_dir and subdirs.fullmatch(name):
                    with contextlib.suppress(OSError):  # not empty, or gone
                        os.rmdir(name, dir_fd=fd)


def evict(cache_dir: str | os.PathLike[str], max_bytes: int) -> Removed:
    """Removes the least recently used entries (oldest mtime first, across
    all sections) until the sections hold at most ``max_bytes``; nothing
    when they already do or ``max_bytes`` is 0 (no limit). A single entry
    larger than the limit is removed too. Errors as ``clear``."""
    if max_bytes < 0:
        raise InvalidArgumentError(f"max_bytes must be >= 0 (0: no limit), got {max_bytes}")
    root = _root(cache_dir, modifying=True)
    if max_bytes == 0 or root is None:
        return Removed(Path(cache_dir))
    with _opened(root, None) as root_fd:
        if root_fd is None:
            return Removed(Path(cache_dir))
        # Young temporary files (writes in progress) are not counted: they
        # become entries, and their writer evicts after storing them.
        entries = [e for e in _scan(root_fd, SECTIONS)[0] if e.names]
        total = sum(e.bytes for e in entries)
        if total <= max_bytes:
            return Removed(Path(cache_dir))
        chosen: list[_Entry] = []
        for entry in sorted(entries, key=lambda e: (e.mtime_ns, e.where, e.names)):
            if total <= max_bytes:
                break
            chosen.append(entry)
            total -= entry.bytes  # gone, by us or by another process
        return _removing(cache_dir, chosen, root_fd)


def evict_quietly(cache_dir: str | os.PathLike[str], max_bytes: int) -> None:
    """``evict`` for a writer after it stored an entry: a cache that cannot
    be trimmed must not fail what stored it, so errors are logged, not
    raised."""
    if max_bytes <= 0:
        return
    try:
        removed = evict(cache_dir, max_bytes)
    except (ConfigError, OSError) as exc:
        log.info("nx_hal cache: not evicting from %s: %s", cache_dir, exc)
        return
    total = removed.total
    if total.files:
        log.info("nx_hal cache: evicted %d files (%d bytes) from %s to stay under %d bytes",
                 total.files, total.bytes, cache_dir, max_bytes)
