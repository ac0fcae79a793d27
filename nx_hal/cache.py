"""The persistent compile cache: serialized executables on disk, keyed by the
device's compat key (SDK and compiler versions), the program and the options.

No entry is trusted for being where it is. Each records the key it was
stored under, a digest of the program and options it was compiled from, and
a digest of the executable's bytes; a file whose record does not match what
is being compiled (another program's entry copied over this one, a damaged
file) is a miss, as is any error the plugin gives while loading it, and the
recompiled executable replaces it. The directory must be the user's own and
writable by no one else, as ssh and pip require of theirs: otherwise another
user could plant an executable that this process would run, so the cache is
not used (compiling still works) and a warning names the directory and the
fix.

Entries are private (0600, in a 0700 directory). A hit sets the entry's
mtime to now; after each store, the least recently used entries of the whole
cache_dir (every section, nx_hal.cache_files) are removed until it holds at
most ``max_bytes`` (the setting cache_max_bytes; 0: no limit)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nx_hal.cache_files import DEFAULT_CACHE_MAX_BYTES, evict_quietly, touch
from nx_hal.errors import NxHalError, UnimplementedError

if TYPE_CHECKING:
    from nx_hal.device import Device
    from nx_hal.executable import Executable
    from nx_hal.programs import Program

__all__ = ["CompileCache"]

log = logging.getLogger("nx_hal")

# An entry: this magic, the key (64 hex digits), the program digest (32
# bytes), the executable's SHA-256 (32 bytes), then Executable.serialize().
# The magic's last character is the format version.
_MAGIC: Final = b"NXHALCE1"
_KEY_LEN: Final = 64
_HEADER_LEN: Final = len(_MAGIC) + _KEY_LEN + 32 + 32


def _entry(key: str, program_digest: bytes, data: bytes) -> bytes:
    return _MAGIC + key.encode("ascii") + program_digest + hashlib.sha256(data).digest() + data


class CompileCache:
    """A directory of ``<key>.nxexe`` files. Counts hits and misses;
    ``rejected`` counts the misses where an entry was there but not used
    (bound to another key or program, damaged, or refused by the plugin).

    ``max_bytes`` bounds the cache_dir this directory is the ``executables``
    section of (0: no limit); a directory of another name is not trimmed."""

    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self._warned = False

    def key(self, device: Device, program: Program, options: dict[str, object]) -> str:
        digest = hashlib.sha256()
        digest.update(device.plugin.encode() + b"\0" + device.compat_key.encode() + b"\0")
        digest.update(self.program_digest(program, options))
        return digest.hexdigest()

    @staticmethod
    def program_digest(program: Program, options: dict[str, object]) -> bytes:
        """SHA-256 of the program (format and both parts) and the compile
        options: what an entry must have been compiled from to be used."""
        digest = hashlib.sha256()
        digest.update(program.format.encode() + b"\0")
        digest.update(hashlib.sha256(program.data).digest())
        digest.update(hashlib.sha256(program.extra or b"").digest())
        digest.update(json.dumps(options, sort_keys=True, default=str).encode())
        return digest.digest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.nxexe"

    def usable(self) -> bool:
        """Whether the directory is safe to read and write: created here as
        0700 when missing; refused (with one warning per cache) when another
        user owns it or group or others may write to it."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(self.directory)
        except OSError as exc:
            self._warn(f"nx_hal compile cache: cannot use {self.directory}: {exc}; compiling without it")
            return False
        if not stat.S_ISDIR(info.st_mode):
            self._warn(f"nx_hal compile cache: {self.directory} is not a directory; compiling without it")
            return False
        if info.st_uid != os.getuid():
            self._warn(
                f"nx_hal compile cache: not using {self.directory}: it is owned by uid {info.st_uid}, "
                f"not by this user (uid {os.getuid()}), who would run what it holds; set cache_dir to a "
                "directory of your own"
            )
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            self._warn(
                f"nx_hal compile cache: not using {self.directory}: it is writable by group or others, "
                f"who could plant executables this process would run (mode {stat.S_IMODE(info.st_mode):o}); "
                f"fix: chmod go-w {self.directory}"
            )
            return False
        return True

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("%s", message)

    def load(self, device: Device, key: str, program_digest: bytes) -> Executable | None:
        """The executable stored under ``key`` if it was made from
        ``program_digest``'s program and loads cleanly; else None (a miss)."""
        exe = self._load(device, key, program_digest) if self.usable() else None
        if exe is None:
            self.misses += 1
        else:
            self.hits += 1
        return exe

    def _load(self, device: Device, key: str, program_digest: bytes) -> Executable | None:
        path = self.path(key)
        try:
            entry = path.read_bytes()
        except OSError:
            return None
        reason = None
        if len(entry) < _HEADER_LEN or not entry.startswith(_MAGIC):
            reason = "not a compile cache entry of this nx_hal version"
        else:
            at = len(_MAGIC)
            data = entry[_HEADER_LEN:]
            if entry[at:at + _KEY_LEN] != key.encode("ascii"):
                reason = "it was stored under another key"
            elif entry[at + _KEY_LEN:at + _KEY_LEN + 32] != program_digest:
                reason = "it was compiled from another program or options"
            elif entry[at + _KEY_LEN + 32:_HEADER_LEN] != hashlib.sha256(data).digest():
                reason = "its bytes are damaged"
        if reason is None:
            try:
                exe = device.load_executable(data)
            except NxHalError as exc:  # whatever the plugin says, recompiling is the answer
                reason = f"the plugin refused it: {exc}"
            else:
                touch(path)  # used just now: the last to be evicted
                return exe
        log.info("nx_hal compile cache: ignoring %s: %s", path, reason)
        self.rejected += 1
        return None

    def store(self, key: str, program_digest: bytes, exe: Executable) -> None:
        try:
            data = exe.serialize()
        except NxHalError as exc:  # a cache that cannot store must not fail the compile
            if not isinstance(exc, UnimplementedError):
                log.info("nx_hal compile cache: not storing: %s", exc)
            return
        if not self.usable():
            return
        tmp = None
        stored = False
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(_entry(key, program_digest, data))
            os.replace(tmp, self.path(key))  # atomic: readers never see half a file
            tmp = None
            stored = True
        except OSError as exc:
            log.warning("nx_hal compile cache: cannot write %s: %s", self.directory, exc)
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        if stored and self.directory.name == "executables":
            evict_quietly(self.directory.parent, self.max_bytes)
