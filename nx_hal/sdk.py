"""Where the C/C++ SDK that comes with the core wheel is, for build systems.

The wheel carries the public headers, the plugin loader
(``libnxhal_loader.so.<ABI major>``), the static plugin helpers, a CMake
package config and a pkg-config file, laid out as an install prefix inside
the package. These functions point at them, as ``numpy.get_include()`` and
``pybind11 --cmakedir`` do; ``nx-hal sdk`` prints the same from a shell.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "SdkMissingError", "abi_version", "get_cflags", "get_cmake_dir", "get_include", "get_libs",
    "get_library_dir", "get_pkgconfig_dir", "plugin_path",
]

_PACKAGE = Path(__file__).resolve().parent


class SdkMissingError(FileNotFoundError):
    """The SDK files are not next to the package (a source tree that was never built)."""


def _checked(path: Path, what: str) -> Path:
    if not path.exists():
        raise SdkMissingError(
            f"nx_hal's {what} is not installed at {path}: install the nx-hal wheel, or build the "
            "package (pip install .) so that its SDK is laid out next to it")
    return path


def get_include() -> str:
    """The directory to add to the include path: it holds ``nx_hal/nx_hal.h``,
    ``nx_hal/nx_hal_loader.h``, ``nx_hal/nx_hal_plugin.h`` and ``nx_hal/nx_hal.hpp``."""
    return str(_checked(_PACKAGE / "include", "C headers directory"))


def get_library_dir() -> str:
    """The directory of ``libnxhal_loader.so.<ABI major>`` and ``libnxhal_plugin_util.a``."""
    return str(_checked(_PACKAGE / "lib", "library directory"))


def get_cmake_dir() -> str:
    """The directory of ``nx_halConfig.cmake``: pass it as ``-Dnx_hal_DIR=`` to
    ``find_package(nx_hal CONFIG)`` (scikit-build-core finds it unaided)."""
    return str(_checked(_PACKAGE / "lib" / "cmake" / "nx_hal", "CMake package config"))


def get_pkgconfig_dir() -> str:
    """The directory of ``nx_hal.pc``: add it to ``PKG_CONFIG_PATH``."""
    return str(_checked(_PACKAGE / "lib" / "pkgconfig", "pkg-config file"))


def abi_version() -> tuple[int, int]:
    """(major, minor) of the ABI of the headers shipped beside the package:
    the ones its bindings were built from."""
    from nx_hal.native import lib

    return int(lib.NXHAL_ABI_VERSION_MAJOR), int(lib.NXHAL_ABI_VERSION_MINOR)


def get_cflags() -> str:
    """Compiler flags for a program that includes nx_hal's headers."""
    return f"-I{get_include()}"


def get_libs() -> str:
    """Linker flags for a program that uses the loader. The loader lives in the
    Python environment, not a system directory, so the program records where."""
    lib = get_library_dir()
    major, _ = abi_version()
    _checked(Path(lib) / f"libnxhal_loader.so.{major}", "loader library")
    return f"-L{lib} -l:libnxhal_loader.so.{major} -Wl,-rpath,{lib} -ldl"


def plugin_path() -> str:
    """``NX_HAL_PLUGIN_PATH`` naming the directories of every installed plugin's
    library, for programs or loaders that read only that variable. (The C
    loader also finds pip-installed plugins by their manifests unaided.)"""
    from nx_hal.config import load_config
    from nx_hal.registry import Registry

    registry = Registry(load_config())
    registry.discover()  # finds the libraries; loads none
    directories: list[str] = []
    for record in registry.records.values():
        if record.spec is None:
            continue
        directory = str(record.spec.library.resolve().parent)
        if directory not in directories:
            directories.append(directory)
    return os.pathsep.join(directories)
