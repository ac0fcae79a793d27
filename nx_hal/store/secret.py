"""The per-user secret that authenticates store entries and serialized
executables.

A serialized executable is native code (XLA CPU's is machine code), so a
digest that anyone can recompute proves nothing about who made it. Entries
and blobs carry an HMAC-SHA-256 keyed by 32 random bytes kept in the user's
configuration directory (``nx_hal.store.location.config_dir``; a private
directory, the file mode 0600): only processes of this user can make a tag
that checks, as only they can read the key. The file is made on first use
(O_EXCL: two processes starting at once agree on one key) and checked on
every read like a store entry: this user's, not a link, private.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from pathlib import Path
from typing import Final

from nx_hal.store.location import config_dir, untrusted_per_user_dir
from nx_hal.store.trust import FILE_FLAGS, make_dir, untrusted_file

__all__ = ["key", "tag", "check", "forget", "TAG_BYTES", "secret_path"]

log = logging.getLogger("nx_hal")

TAG_BYTES: Final = 32
_KEY_BYTES: Final = 32
_NAME: Final = "secret"
_lock = threading.Lock()
_cache: dict[Path, bytes | None] = {}


def secret_path() -> Path:
    return config_dir() / _NAME


def _open_parent(folder: Path) -> int:
    """The secret's directory, made private if missing (its parents as
    ``mkdir -p`` makes them), checked by the store's trust rule."""
    why = untrusted_per_user_dir(folder)
    if why is not None:
        raise PermissionError(why)
    folder.parent.mkdir(parents=True, exist_ok=True)
    parent = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return make_dir(folder.name, parent)
    finally:
        os.close(parent)


def _read(dir_fd: int) -> bytes | None:
    try:
        fd = os.open(_NAME, FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        why = untrusted_file(info)
        if why is None and info.st_mode & 0o077:
            why = f"others may read it (mode {info.st_mode & 0o777:o}); fix: chmod 600"
        if why is None and info.st_size != 2 * _KEY_BYTES:
            why = f"it holds {info.st_size} bytes, not the {2 * _KEY_BYTES} hex digits nx_hal writes"
        if why is not None:
            raise PermissionError(why)
        text = os.read(fd, 2 * _KEY_BYTES + 1)
    finally:
        os.close(fd)
    return bytes.fromhex(text.decode("ascii"))


def _create(dir_fd: int) -> None:
    try:
        fd = os.open(_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
    except FileExistsError:
        return  # another process won the race: its key is read back
    try:
        os.write(fd, os.urandom(_KEY_BYTES).hex().encode("ascii"))
    except OSError:
        os.close(fd)
        os.unlink(_NAME, dir_fd=dir_fd)  # half a key would lock every later start out
        raise
    os.close(fd)


def key() -> bytes | None:
    """This user's key, made on first use; None (with one warning) when it
    cannot be read or made: nothing is then authenticated."""
    path = secret_path()
    with _lock:
        if path in _cache:
            return _cache[path]
        found: bytes | None = None
        try:
            dir_fd = _open_parent(path.parent)
            try:
                found = _read(dir_fd)
                if found is None:
                    _create(dir_fd)
                    found = _read(dir_fd)
            finally:
                os.close(dir_fd)
        except (OSError, ValueError) as exc:
            log.warning("nx_hal: cannot use the key in %s (%s): the cache is off and serialized executables "
                        "carry no authenticator", path, exc)
            found = None
        _cache[path] = found
        return found


def tag(domain: bytes, *parts: bytes | memoryview) -> bytes | None:
    """HMAC-SHA-256 over ``domain`` and ``parts`` (each length-prefixed, so
    no two different lists of parts give the same message); None without a key."""
    secret = key()
    if secret is None:
        return None
    mac = hmac.new(secret, domain, hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "little"))
        mac.update(part)
    return mac.digest()


def check(expected: bytes, domain: bytes, *parts: bytes | memoryview) -> bool:
    """Whether ``expected`` is the tag of ``parts``, compared in constant time."""
    actual = tag(domain, *parts)
    return actual is not None and hmac.compare_digest(actual, expected)


def forget() -> None:
    """Reads the key again on next use (tests that move the config directory)."""
    with _lock:
        _cache.clear()
