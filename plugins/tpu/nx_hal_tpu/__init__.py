"""nx_hal plugin for Cloud TPUs and every other OpenXLA PJRT backend.

``libnxhal_tpu.so`` (next to this file) implements the nx_hal ABI over the
PJRT C API; this module registers it with nx_hal and tells it where the
installed PJRT libraries are (libtpu, jax-cuda12/13-pjrt, xla-cpu-pjrt).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import nx_hal
from nx_hal_tpu.backends import INSTALL_HINT, Backend, backend_paths, find_backends
from nx_hal_tpu.options import TpuCompileOptions, TpuOptions

__all__ = [
    "INSTALL_HINT", "Backend", "TpuCompileOptions", "TpuOptions", "backend_paths", "find_backends",
    "library_path", "nx_hal_register",
]

__version__: str = metadata.version("nx-hal-tpu")


def library_path() -> Path:
    """Where this package's C library is."""
    return Path(__file__).with_name("libnxhal_tpu.so")


@nx_hal.hookimpl
def nx_hal_register(register: nx_hal.Register) -> None:
    """Registers the ``tpu`` plugin with nx_hal."""
    register(
        name="tpu",
        library=library_path(),
        options_model=TpuOptions,
        compile_options_model=TpuCompileOptions,
        package="nx-hal-tpu",
    )
