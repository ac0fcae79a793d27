"""The store: every on-disk cache of nx_hal, one mechanism.

    store = Store.at(settings.cache_dir, max_bytes=settings.cache_max_bytes)
    entry = store.get("executables", key)        # Entry(meta, payload) or None
    store.put("executables", key, blob, {"plugin": "tpu"})

Content-addressed: a key is the SHA-256 (64 hex digits) of every byte the
entry depends on, made by its user (``digest``). An entry is one file,
``<root>/<section>/<key[:2]>/<key>``::

    b"NXHST1\\0\\0"   magic, format 1
    tag             HMAC-SHA-256 (nx_hal.store.secret) of section, key, meta, payload
    meta length     4 bytes, little-endian
    payload length  8 bytes, little-endian
    meta            JSON object
    payload         bytes

It is read only when its file is this user's own regular file (no link
followed at any step, nx_hal.store.trust), its size is exactly what its
header says (so a read never exceeds what was written), and its tag checks:
an entry planted by someone else, copied from another key, or damaged is a
miss, with the reason at INFO. Writes go to a temporary file renamed into
place, removed on any error (a full disk included). A hit refreshes the
entry's mtime, which eviction (nx_hal.store.maintenance) reads; a write to a
section of large entries trims the whole root to ``max_bytes``.

A root that fails the trust rule, or that cannot be made, turns the store off
with one warning naming it and why: everything still works, uncached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets as _random
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nx_hal.store import secret
from nx_hal.store.location import DEFAULT_CACHE_MAX_BYTES, untrusted_per_user_dir
from nx_hal.store.maintenance import SECTIONS, evict_quietly
from nx_hal.store.trust import FILE_FLAGS, make_dir, open_dir, untrusted_file

__all__ = ["Store", "Entry", "digest", "content_digest", "digest_scope"]

log = logging.getLogger("nx_hal")

_MAGIC: Final = b"NXHST1\0\0"
_HEADER: Final = len(_MAGIC) + secret.TAG_BYTES + 4 + 8
_DOMAIN: Final = b"nx_hal store entry 1\0"
# Sections whose entries are large: a write there trims the whole root.
_TRIMMED: Final = frozenset({"executables", "stablehlo"})
_HEX: Final = frozenset("0123456789abcdef")


# A part this large goes into a key as its own SHA-256 (content_digest), so
# one compile hashes a model's bytes once for all the keys that name them.
_LARGE: Final = 1 << 20
_LARGE_MARK: Final = 1 << 63  # set in a large part's length prefix: no small part reads the same
_scope: ContextVar[dict[int, tuple[bytes, bytes]] | None] = ContextVar("nx_hal_digest_scope", default=None)


@contextlib.contextmanager
def digest_scope() -> Iterator[None]:
    """Within it, ``content_digest`` hashes each bytes object once: the
    prepared model's key, the conversion's and the executable's all name the
    same model bytes in a compile (a 47 MB model: 33 ms each). The objects
    are held until the scope ends, so an id is never another object's."""
    token = _scope.set({})
    try:
        yield
    finally:
        _scope.reset(token)


def content_digest(data: bytes) -> bytes:
    """The SHA-256 of ``data``, once per object inside a ``digest_scope``."""
    memo = _scope.get()
    if memo is not None:
        found = memo.get(id(data))
        if found is not None and found[0] is data:
            return found[1]
    value = hashlib.sha256(data).digest()
    if memo is not None and isinstance(data, bytes):
        memo[id(data)] = (data, value)
    return value


def digest(*parts: bytes | str) -> str:
    """A key: the SHA-256 of ``parts``, each length-prefixed (so no two
    different lists of parts share a key); a part of 1 MiB or more enters as
    its own SHA-256, its prefix marked (content_digest)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        if len(data) >= _LARGE:
            h.update((len(data) | _LARGE_MARK).to_bytes(8, "little"))
            h.update(content_digest(data))
            continue
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class Entry:
    meta: dict[str, Any]
    payload: bytes


def _read_exact(fd: int, size: int) -> bytes:
    chunks = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1 << 30))  # one read for all but huge entries
        if not chunk:
            raise ValueError("the file is shorter than its header says")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Store:
    """One root. ``Store.at`` gives the same object for the same root and
    limit, so its trust check and warning happen once per process."""

    _instances: dict[tuple[str, int], Store] = {}
    _instances_lock = threading.Lock()

    def __init__(self, root: Path, *, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.rejected = 0  # misses where a file was there but not taken
        self._warned = False

    @classmethod
    def at(cls, root: str | os.PathLike[str], *, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> Store:
        path = os.path.abspath(os.fspath(root))
        with cls._instances_lock:
            found = cls._instances.get((path, max_bytes))
            if found is None:
                found = cls._instances[(path, max_bytes)] = cls(Path(path), max_bytes=max_bytes)
            return found

    # -- directories ------------------------------------------------------

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("nx_hal cache: not using %s: %s; working without a cache (set cache_dir to a directory "
                        "of your own that only you can write)", self.root, why)

    def _open_root(self) -> int | None:
        why = untrusted_per_user_dir(self.root)
        if why is not None:
            self._warn(why)
            return None
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            return open_dir(self.root, None, follow=True)
        except OSError as exc:
            self._warn(str(exc) if isinstance(exc, PermissionError) else exc.strerror or str(exc))
            return None

    def usable(self) -> bool:
        """Whether the root passes the trust rule (made 0700 when missing)."""
        fd = self._open_root()
        if fd is None:
            return False
        os.close(fd)
        return True

    @contextlib.contextmanager
    def _shard(self, section: str, key: str, *, create: bool) -> Iterator[int | None]:
        if section not in SECTIONS:
            raise ValueError(f"unknown store section {section!r}")
        if len(key) != 64 or not _HEX.issuperset(key):
            raise ValueError(f"a store key is 64 hex digits, got {key!r}")
        fds: list[int] = []
        try:
            root = self._open_root()
            if root is None:
                yield None
                return
            fds.append(root)
            for name in (section, key[:2]):
                try:
                    fds.append(make_dir(name, fds[-1]) if create else open_dir(name, fds[-1]))
                except FileNotFoundError:
                    yield None
                    return
                except OSError as exc:
                    log.info("nx_hal cache: not using %s/%s: %s", self.root, "/".join([section, key[:2]]), exc)
                    yield None
                    return
            yield fds[-1]
        finally:
            for fd in reversed(fds):
                os.close(fd)

    # -- entries ----------------------------------------------------------

    def get(self, section: str, key: str) -> Entry | None:
        """The entry under ``key``, or None (a miss: absent, not trusted,
        damaged, or tagged by another key)."""
        with self._shard(section, key, create=False) as dir_fd:
            found = self._read(dir_fd, section, key) if dir_fd is not None else None
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def _read(self, dir_fd: int, section: str, key: str) -> Entry | None:
        try:
            fd = os.open(key, FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a symbolic link (ELOOP), ...
            return self._reject(section, key, exc.strerror or str(exc))
        try:
            info = os.fstat(fd)
            why = untrusted_file(info)
            if why is not None:
                return self._reject(section, key, why)
            if info.st_size < _HEADER:
                return self._reject(section, key, "shorter than an entry's header")
            header = _read_exact(fd, _HEADER)
            if not header.startswith(_MAGIC):
                return self._reject(section, key, "not an entry of this nx_hal version")
            at = len(_MAGIC) + secret.TAG_BYTES
            meta_len = int.from_bytes(header[at:at + 4], "little")
            payload_len = int.from_bytes(header[at + 4:at + 12], "little")
            if info.st_size != _HEADER + meta_len + payload_len:
                return self._reject(section, key, "its size is not the one its header records")
            meta_bytes = _read_exact(fd, meta_len)
            payload = _read_exact(fd, payload_len)
        except (OSError, ValueError) as exc:
            return self._reject(section, key, str(exc))
        finally:
            os.close(fd)
        if not secret.check(header[len(_MAGIC):at], _DOMAIN, section.encode(), key.encode(), meta_bytes, payload):
            return self._reject(section, key, "its authenticator does not check (not written by this user's "
                                "nx_hal under this key, or damaged)")
        try:
            meta = json.loads(meta_bytes)
        except ValueError:
            meta = None
        if not isinstance(meta, dict):
            return self._reject(section, key, "its metadata is not a JSON object")
        with contextlib.suppress(OSError):
            os.utime(key, dir_fd=dir_fd, follow_symlinks=False)  # used just now: the last to be evicted
        return Entry(meta, payload)

    def _reject(self, section: str, key: str, why: str) -> Entry | None:
        self.rejected += 1
        log.info("nx_hal cache: ignoring %s/%s/%s/%s: %s", self.root, section, key[:2], key, why)
        return None

    def put(self, section: str, key: str, payload: bytes, meta: dict[str, Any] | None = None) -> bool:
        """Stores an entry atomically; False (logged, never raised) when it
        cannot be: a cache that cannot store must not fail what it caches."""
        meta_bytes = json.dumps(meta or {}, sort_keys=True).encode()
        tag = secret.tag(_DOMAIN, section.encode(), key.encode(), meta_bytes, payload)
        if tag is None:
            return False
        header = _MAGIC + tag + len(meta_bytes).to_bytes(4, "little") + len(payload).to_bytes(8, "little")
        with self._shard(section, key, create=True) as dir_fd:
            stored = dir_fd is not None and self._write(dir_fd, key, (header, meta_bytes, payload))
        if stored and section in _TRIMMED:
            evict_quietly(self.root, self.max_bytes)
        return stored

    def _write(self, dir_fd: int, key: str, parts: tuple[bytes, ...]) -> bool:
        tmp = f".{key}.{_random.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dir_fd)
        except OSError as exc:
            log.info("nx_hal cache: cannot write in %s: %s", self.root, exc)
            return False
        try:
            try:
                for part in parts:
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, key, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # readers see all or nothing
        except OSError as exc:  # ENOSPC, EDQUOT, EIO: the temporary goes, the cache stays as it was
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            log.warning("nx_hal cache: cannot write in %s: %s", self.root, exc.strerror or exc)
            return False
        return True

    # -- JSON entries (verdicts, records) -----------------------------------

    def get_json(self, section: str, key: str) -> dict[str, Any] | None:
        entry = self.get(section, key)
        return entry.meta if entry is not None else None

    def put_json(self, section: str, key: str, value: dict[str, Any]) -> bool:
        return self.put(section, key, b"", value)
