"""The C parts are built here; metadata is in pyproject.toml.

- ``nx_hal._nxhal_cffi`` (cffi): the bindings to the plugin table, with the
  loader from ``cabi/``.
- ``nx_hal._fastpath``: the per-call path of buffers and executables
  (nx_hal/_fastpath.c).
- The C/C++ SDK the core wheel carries (ARCHITECTURE, "Distribution"), laid
  out as an install prefix inside the package so one CMake config and one
  pkg-config file serve it and a ``cmake --install`` prefix alike:
  ``nx_hal/include/nx_hal/*.h*``, ``nx_hal/lib/libnxhal_loader.so.<ABI major>``
  (the loader, versioned SONAME), ``nx_hal/lib/libnxhal_plugin_util.a`` (the
  plugin helpers, PIC with hidden symbols), ``nx_hal/lib/cmake/nx_hal/`` and
  ``nx_hal/lib/pkgconfig/nx_hal.pc``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
HELPER_SOURCES = ["status.c", "struct_check.c", "options.c", "dtype.c", "tensor_desc.c", "event.c",
                  "negotiate.c", "memory.c", "digest.c",
                  "dlpack.c"]
LOADER_SOURCES = ["loader.c", "manifest.c", "status.c", "validate.c", "sealed.c", "digest.c"]
C_FLAGS = ["-std=c99", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"]


def _abi_version() -> tuple[str, str]:
    text = (ROOT / "include" / "nx_hal" / "nx_hal.h").read_text()
    major = re.search(r"#define NXHAL_ABI_VERSION_MAJOR (\d+)", text)
    minor = re.search(r"#define NXHAL_ABI_VERSION_MINOR (\d+)", text)
    assert major and minor, "nx_hal.h declares no ABI version"
    return major.group(1), minor.group(1)


def _project_version() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match, "pyproject.toml has no version"
    return match.group(1)


def _configure(template: Path, target: Path, values: dict[str, str]) -> None:
    """CMake's configure_file(@ONLY) for the templates under cabi/cmake/."""
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    leftover = re.search(r"@[A-Z_]+@", text)
    assert leftover is None, f"{template.name}: {leftover.group(0)} has no value"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


class BuildExtWithSdk(build_ext):
    """build_ext, without the build host's library paths, plus the SDK."""

    def build_extensions(self) -> None:
        # The interpreter's LDSHARED may carry -Wl,-rpath to its own lib
        # directory (pyenv does): a wheel must not point at the build host.
        for attr in ("linker_so", "linker_exe"):
            command = getattr(self.compiler, attr, None)
            if command:
                setattr(self.compiler, attr, [a for a in command if not a.startswith("-Wl,-rpath")])
        super().build_extensions()
        self._build_sdk(Path(self.get_ext_fullpath("nx_hal._fastpath")).parent)

    def run(self) -> None:
        super().run()
        if self.inplace:
            # An editable install imports nx_hal from the source tree: the SDK
            # goes there too, as setuptools copies the extensions.
            built = Path(self.build_lib) / "nx_hal"
            for part in ("include", "lib"):
                target = ROOT / "nx_hal" / part
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(built / part, target, symlinks=True)

    def _build_sdk(self, package: Path) -> None:
        major, minor = _abi_version()
        lib = package / "lib"
        include = package / "include" / "nx_hal"
        lib.mkdir(parents=True, exist_ok=True)
        if include.exists():
            shutil.rmtree(include)
        include.mkdir(parents=True)
        for header in sorted((ROOT / "include" / "nx_hal").glob("nx_hal*.h*")):
            shutil.copy2(header, include / header.name)

        temp = Path(self.build_temp) / "sdk"
        cabi = ROOT / "cabi"
        helper_objects = self.compiler.compile(
            [str(cabi / s) for s in HELPER_SOURCES], output_dir=str(temp / "helpers"),
            include_dirs=[str(ROOT / "include")], extra_postargs=C_FLAGS)
        self.compiler.create_static_lib(helper_objects, "nxhal_plugin_util", output_dir=str(lib))

        loader_sources = [str(cabi / s) for s in LOADER_SOURCES]
        loader_objects = self.compiler.compile(
            loader_sources, output_dir=str(temp / "loader"), include_dirs=[str(ROOT / "include")],
            extra_postargs=C_FLAGS)
        soname = f"libnxhal_loader.so.{major}"
        self.compiler.link_shared_object(
            loader_objects, soname, output_dir=str(lib), libraries=["dl", "pthread"],
            extra_postargs=[f"-Wl,-soname,{soname}", "-Wl,--no-undefined"])

        values = {
            "NXHAL_VERSION": _project_version(), "NXHAL_ABI_MAJOR": major, "NXHAL_ABI_MINOR": minor,
            "NXHAL_CONFIG_TO_PREFIX": "../../..", "NXHAL_PC_TO_PREFIX": "../..",
            "NXHAL_INCLUDEDIR": "include", "NXHAL_LIBDIR": "lib",
        }
        templates = cabi / "cmake"
        cmake_dir = lib / "cmake" / "nx_hal"
        _configure(templates / "nx_halConfig.cmake.in", cmake_dir / "nx_halConfig.cmake", values)
        _configure(templates / "nx_halConfigVersion.cmake.in", cmake_dir / "nx_halConfigVersion.cmake", values)
        shutil.copy2(templates / "nx_halPluginManifest.cmake", cmake_dir / "nx_halPluginManifest.cmake")
        shutil.copy2(templates / "nx_halWarnings.cmake", cmake_dir / "nx_halWarnings.cmake")
        _configure(templates / "nx_hal.pc.in", lib / "pkgconfig" / "nx_hal.pc", values)


setup(
    cffi_modules=["nx_hal/_ffi_build.py:ffi"],
    ext_modules=[
        Extension(
            "nx_hal._fastpath",
            ["nx_hal/_fastpath.c"],
            include_dirs=["include"],
            extra_compile_args=["-std=c99", "-fvisibility=hidden"],
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            py_limited_api=True,
            # It calls nothing in libc, so the linker would record no libc at
            # all, and auditwheel cannot tell which libc (glibc or musl) the
            # wheel is for: name it.
            extra_link_args=["-Wl,--no-as-needed", "-lc"],
        ),
        Extension(
            "nx_hal._numpy_alloc",
            ["nx_hal/_numpy_alloc.c"],
            extra_compile_args=["-std=c99", "-fvisibility=hidden"],
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            py_limited_api=True,
        ),
    ],
    cmdclass={"build_ext": BuildExtWithSdk},
    # Both extensions use only the limited C API: one wheel for every CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
