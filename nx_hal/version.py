"""Versions: the core's (one source: the installed distribution's metadata,
which pyproject.toml sets) and the ABI's (the header the bindings were built from)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__", "abi_version", "DISTRIBUTION"]

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
