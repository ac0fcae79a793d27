"""The compile cache: compiled executables in the store's ``executables``
section (nx_hal.store), keyed by everything a compile depends on: the
plugin, the device's compat key (SDK and compiler versions), the program
(format and every byte of it, external data included) and the options.

The store only hands back entries this user's nx_hal wrote under that very
key (authenticated, nx_hal.store.secret); the plugin then checks the blob's
compat key and digest, and any error loading it is a miss whose recompiled
executable replaces it."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Protocol

from nx_hal.errors import NxHalError, UnimplementedError
from nx_hal.store import Store, digest

if TYPE_CHECKING:
    from nx_hal.executable import Executable
    from nx_hal.programs import Program

__all__ = ["CompileCache", "SECTION"]

log = logging.getLogger("nx_hal")

SECTION = "executables"


class Device(Protocol):
    """What an entry's key and load need of a device (nx_hal.device.Device has it)."""

    @property
    def compat_key(self) -> str: ...

    @property
    def plugin(self) -> str: ...

    def _deserialize(self, data: bytes | memoryview, *, authenticated: bool) -> Executable: ...


class CompileCache:
    """Counts hits and misses; ``rejected`` counts the misses where an entry
    was there but not used (planted, damaged, or refused by the plugin)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.hits = 0
        self.misses = 0
        self.rejected = 0

    @staticmethod
    def key(device: Device, program: Program, options: dict[str, object]) -> str:
        return digest(device.plugin, device.compat_key, program.format, program.data, program.extra or b"",
                      b"\0" if program.extra is None else b"\1",
                      json.dumps(options, sort_keys=True, default=str))

    def load(self, device: Device, key: str) -> Executable | None:
        """The executable stored under ``key`` if it loads cleanly; else None."""
        before = self.store.rejected
        entry = self.store.get(SECTION, key)
        exe = None
        if entry is not None:
            try:
                exe = device._deserialize(entry.payload, authenticated=True)  # the store checked its HMAC
            except NxHalError as exc:  # whatever the plugin says, recompiling is the answer
                log.info("nx_hal compile cache: ignoring entry %s: the plugin refused it: %s", key, exc)
                self.rejected += 1
        self.rejected += self.store.rejected - before
        if exe is None:
            self.misses += 1
        else:
            self.hits += 1
        return exe

    def store_executable(self, key: str, exe: Executable) -> bool:
        """Whether it was stored (a cache that cannot store must not fail the compile)."""
        try:
            data = exe._serialize()
        except NxHalError as exc:
            if not isinstance(exc, UnimplementedError):
                log.info("nx_hal compile cache: not storing: %s", exc)
            return False
        return self.store.put(SECTION, key, data, {"plugin": exe.device.plugin})
