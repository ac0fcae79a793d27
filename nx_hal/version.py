"""Versions: the core's (one source: the installed distribution's metadata,
which pyproject.toml sets) and the ABI's (the header the bindings were built from)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

__all__ = ["__version__", "abi_version", "code_identity", "DISTRIBUTION"]

DISTRIBUTION = "nx-hal"

try:
    __version__: str = metadata.version(DISTRIBUTION)
except metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"


def abi_version() -> str:
    """``major.minor`` of the ABI this core speaks to plugins (the header its
    bindings were built from)."""
    from nx_hal.native import lib

    return f"{int(lib.NXHAL_ABI_VERSION_MAJOR)}.{int(lib.NXHAL_ABI_VERSION_MINOR)}"


def code_identity(paths: Iterable[Path]) -> str:
    """The version and each source file's path, size and modification time:
    what a record made by this code across processes is keyed by (an edit,
    or another install, changes it), without reading a file."""
    h = hashlib.sha256(__version__.encode())
    for path in sorted(paths):
        try:
            st = os.stat(path)
            h.update(f"\0{path}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        except OSError:
            h.update(f"\0{path}\0-".encode())
    return h.hexdigest()
