"""Test helpers for the store (nx_hal.store): where an entry lives, the
entries a section holds, and entries written under another user's key."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nx_hal.store import Store, secret

# An entry's header: magic (8), HMAC tag (32), meta length (u32), payload length (u64).
MAGIC = b"NXHST1\0\0"
TAG_AT = len(MAGIC)
LENGTHS_AT = TAG_AT + secret.TAG_BYTES
HEADER = LENGTHS_AT + 4 + 8


def entry_path(root: Path, section: str, key: str) -> Path:
    return root / section / key[:2] / key


def entries(root: Path, section: str) -> list[Path]:
    """The entry files of ``section`` (the store's layout; no temporaries)."""
    return sorted(p for p in (root / section).glob("*/*") if p.is_file() and not p.name.endswith(".tmp"))


def split(data: bytes) -> tuple[bytes, bytes, bytes]:
    """An entry's (tag, meta bytes, payload), read from its header."""
    meta_len, payload_len = struct.unpack_from("<IQ", data, LENGTHS_AT)
    meta = data[HEADER:HEADER + meta_len]
    return data[TAG_AT:LENGTHS_AT], meta, data[HEADER + meta_len:HEADER + meta_len + payload_len]


@contextmanager
def another_users_key(config_home: Path) -> Iterator[None]:
    """Within it, this process's nx_hal uses the key of another user (one
    whose configuration directory is ``config_home``), as a planted entry
    would have been made: valid-looking, with a tag that checks only under
    that other key. The usual key is back afterwards."""
    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(config_home)
    try:
        yield
    finally:
        if before is None:
            del os.environ["XDG_CONFIG_HOME"]
        else:
            os.environ["XDG_CONFIG_HOME"] = before


def foreign_put(root: Path, section: str, key: str, payload: bytes, meta: dict[str, Any] | None,
                config_home: Path) -> Path:
    """An entry as another user's nx_hal would write it, at ``key``'s place
    under ``root`` (owned by this user: only the key differs)."""
    with another_users_key(config_home):
        assert Store(root, max_bytes=0).put(section, key, payload, meta), "the planted entry was not written"
    return entry_path(root, section, key)
