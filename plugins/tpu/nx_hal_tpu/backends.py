"""Finding installed PJRT backend libraries.

This module finds the libraries on ``sys.path`` and hands them over as the
``backend_paths`` option, a ``;``-joined list of ``label=path`` entries, in
the order the C side tries them (libtpu, the CUDA plugins, XLA CPU). The C
library, used without Python, looks in the same places of the site-packages
it is installed in (src/backend_discovery.c); when neither finds one, both
say what to install (:data:`INSTALL_HINT`).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Final

__all__ = ["Backend", "INSTALL_HINT", "find_backends", "backend_paths"]

#: What to install when no PJRT backend is found; the C library's reason
#: (TPU_INSTALL_HINT in src/tpu_internal.h) says the same words.
INSTALL_HINT: Final = (
    "install one with pip install 'nx-hal-tpu[cpu]' (XLA CPU), "
    "pip install 'nx-hal-tpu[tpu]' (Cloud TPU) or pip install 'nx-hal-tpu[cuda12]' "
    "/ 'nx-hal-tpu[cuda13]' (NVIDIA GPU, CUDA 12 / 13)"
)


class Backend:
    """One PJRT plugin library found on this machine."""

    __slots__ = ("label", "path")

    def __init__(self, label: str, path: Path) -> None:
        self.label = label
        self.path = path

    def __repr__(self) -> str:
        return f"Backend({self.label!r}, {str(self.path)!r})"


def _package_dir(module: str) -> Path | None:
    """The directory of ``module`` without importing it (its parent package is
    imported; the ones used here are namespace packages)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin:
        return Path(spec.origin).parent
    return None


def _libtpu() -> Path | None:
    env = os.environ.get("TPU_LIBRARY_PATH")
    if env and Path(env).is_file():
        return Path(env)
    directory = _package_dir("libtpu")
    if directory is not None and (directory / "libtpu.so").is_file():
        return directory / "libtpu.so"
    return None


def _cuda(major: int) -> Path | None:
    directory = _package_dir(f"jax_plugins.xla_cuda{major}")
    if directory is None:
        return None
    for name in ("xla_cuda_plugin.so", "pjrt_c_api_gpu_plugin.so"):
        if (directory / name).is_file():
            return directory / name
    return None


def _xla_cpu() -> Path | None:
    directory = _package_dir("xla_plugins.xla_cpu_pjrt")
    if directory is not None and (directory / "xla_cpu_pjrt.so").is_file():
        return directory / "xla_cpu_pjrt.so"
    return None


def find_backends() -> list[Backend]:
    """Installed PJRT backends, in the order they are tried."""
    found: list[Backend] = []
    for label, path in (
        ("tpu", _libtpu()),
        ("cuda12", _cuda(12)),
        ("cuda13", _cuda(13)),
        ("cpu", _xla_cpu()),
    ):
        if path is not None:
            found.append(Backend(label, path))
    return found


def backend_paths() -> str | None:
    """The ``backend_paths`` option for what is installed; None if nothing is
    (the C library then looks beside itself, and its reason is INSTALL_HINT)."""
    found = find_backends()
    if not found:
        return None
    return ";".join(f"{b.label}={b.path}" for b in found)
