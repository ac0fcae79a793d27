"""Serialized executables sealed with this user's key.

A serialized executable is native code: loading one runs what it holds, as
unpickling runs what a pickle holds. ``Executable.serialize()`` seals the
plugin's bytes with an HMAC-SHA-256 keyed by the per-user secret
(nx_hal.store.secret); ``Device.load_executable`` opens only blobs this user's
nx_hal sealed, unless the caller says it trusts the bytes (``trusted=True``):
blobs from another user, another machine or a file anyone could have written.
"""

from __future__ import annotations

from typing import Final

from nx_hal.errors import InvalidArgumentError
from nx_hal.store import secret

__all__ = ["seal", "checked", "unseal", "MAGIC"]

MAGIC: Final = b"NXHALEX1"
_DOMAIN: Final = b"nx_hal executable 1\0"
_HEAD: Final = len(MAGIC) + secret.TAG_BYTES


def seal(blob: bytes) -> bytes:
    """``blob`` with its authenticator; as it is when there is no key (the
    key's warning says why, and loading it then needs ``trusted=True``)."""
    tag = secret.tag(_DOMAIN, blob)
    return blob if tag is None else MAGIC + tag + blob


def _split(data: bytes | bytearray | memoryview) -> tuple[memoryview, bool]:
    """The bytes as a view, and whether they begin with the seal's magic."""
    view = memoryview(data).cast("B")
    return view, len(view) >= _HEAD and bytes(view[:len(MAGIC)]) == MAGIC


def checked(data: bytes | bytearray | memoryview) -> memoryview | None:
    """The plugin's bytes of a sealed blob whose tag checks, else None."""
    view, sealed = _split(data)
    if sealed and secret.check(bytes(view[len(MAGIC):_HEAD]), _DOMAIN, view[_HEAD:]):
        return view[_HEAD:]
    return None


def unseal(data: bytes | bytearray | memoryview, *, trusted: bool = False) -> memoryview:
    """The plugin's bytes of a sealed blob whose tag checks; of any blob when
    ``trusted``. Raises InvalidArgumentError before any vendor sees a byte."""
    found = checked(data)
    if found is not None:
        return found
    view, sealed = _split(data)
    if trusted:
        return view[_HEAD:] if sealed else view
    why = ("its authenticator does not check: it was sealed by another user's or machine's key, or changed "
           "since") if sealed else "it carries no authenticator (not made by Executable.serialize of this user)"
    raise InvalidArgumentError(
        f"refusing to load a serialized executable: {why}. A serialized executable is native code and runs "
        "with this process's rights, like a pickle; pass trusted=True only for bytes from a source you trust")
