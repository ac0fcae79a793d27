"""The persistent compile cache: serialized executables on disk, keyed by the
device's compat key (SDK and compiler versions), the program and the options.
A stale or foreign entry is never trusted: the plugin checks the key embedded
in the bytes before loading, and any refusal means recompile and overwrite."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from nx_hal.errors import FailedPreconditionError, InvalidArgumentError, NxHalError, UnimplementedError

if TYPE_CHECKING:
    from nx_hal.device import Device
    from nx_hal.executable import Executable
    from nx_hal.programs import Program

__all__ = ["CompileCache"]

log = logging.getLogger("nx_hal")


class CompileCache:
    """A directory of ``<key>.nxexe`` files. Counts hits and misses."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0

    def key(self, device: Device, program: Program, options: dict[str, object]) -> str:
        digest = hashlib.sha256()
        digest.update(device.plugin.encode() + b"\0" + device.compat_key.encode() + b"\0")
        digest.update(program.format.encode() + b"\0")
        digest.update(hashlib.sha256(program.data).digest())
        digest.update(hashlib.sha256(program.data2 or b"").digest())
        digest.update(json.dumps(options, sort_keys=True, default=str).encode())
        return digest.hexdigest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.nxexe"

    def load(self, device: Device, key: str) -> Executable | None:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            exe = device.load_executable(data)
        except (FailedPreconditionError, InvalidArgumentError) as exc:
            log.info("nx_hal compile cache: ignoring %s: %s", path, exc)
            self.misses += 1
            return None
        self.hits += 1
        return exe

    def store(self, key: str, exe: Executable) -> None:
        try:
            data = exe.serialize()
        except NxHalError as exc:  # a cache that cannot store must not fail the compile
            if not isinstance(exc, UnimplementedError):
                log.info("nx_hal compile cache: not storing: %s", exc)
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.path(key))  # atomic: readers never see half a file
        except OSError as exc:
            log.warning("nx_hal compile cache: cannot write %s: %s", self.directory, exc)
