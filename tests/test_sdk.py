"""The C/C++ SDK that comes with the core: headers, the versioned loader, the
static plugin helpers, the CMake package config and the pkg-config file, as a
C program or a vendor's plugin uses them from the installed package, and the
same from a ``cmake --install`` prefix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import nx_hal
from nx_hal import sdk
from tests.cbuild import ABI, HOST_ABI, repo_root

ROOT = repo_root()
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not found")


def _run(cmd: list[str], *, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    return done


def _dynamic(path: Path) -> str:
    return _run(["readelf", "-d", str(path)]).stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """No variable that would let the loader find plugins other than the test's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NX_HAL_PLUGIN_PATH", "VIRTUAL_ENV", "CONDA_PREFIX")}
    env.update(XDG_DATA_HOME="/nonexistent-xdg", XDG_DATA_DIRS="/nonexistent-xdg", **extra)
    return env


def test_headers_are_the_checkouts() -> None:
    installed = Path(nx_hal.get_include()) / "nx_hal"
    for header in sorted((ROOT / "include" / "nx_hal").glob("nx_hal*.h*")):
        assert (installed / header.name).read_bytes() == header.read_bytes(), (
            f"{installed / header.name} is stale: rebuild the package (pip install -e .)")
    assert sdk.abi_version() == ABI


def test_loader_is_versioned_and_points_nowhere() -> None:
    loader = Path(sdk.get_library_dir()) / f"libnxhal_loader.so.{ABI[0]}"
    dynamic = _dynamic(loader)
    assert f"Library soname: [libnxhal_loader.so.{ABI[0]}]" in dynamic
    assert "RUNPATH" not in dynamic and "RPATH" not in dynamic
    # Only the loader's own API leaves the library.
    symbols = _run(["nm", "-D", "--defined-only", str(loader)]).stdout.split()
    exported = sorted(s for s in symbols if s.startswith("nxhal_"))
    assert "nxhal_plugin_open" in exported and "nxhal_plugin_open_by_name" in exported
    assert "nxhal_status_make" not in exported, "the status helpers must stay hidden"


def test_extensions_carry_no_build_host_path() -> None:
    package = Path(nx_hal.__file__).parent
    for module in sorted(package.glob("*.so")):
        for line in _dynamic(module).splitlines():
            if "RUNPATH" in line or "RPATH" in line:
                pytest.fail(f"{module.name}: {line.strip()}")


def test_cli_sdk_flags() -> None:
    out = _run([sys.executable, "-m", "nx_hal.cli", "sdk", "--json"]).stdout
    data = json.loads(out)
    assert data["include"] == nx_hal.get_include()
    assert data["cmake_dir"] == nx_hal.get_cmake_dir()
    assert data["cflags"] == f"-I{nx_hal.get_include()}"
    assert f"-l:libnxhal_loader.so.{ABI[0]}" in data["libs"]
    assert f"-Wl,-rpath,{sdk.get_library_dir()}" in data["libs"]
    one = _run([sys.executable, "-m", "nx_hal.cli", "sdk", "--cmake-dir"]).stdout.strip()
    assert one == nx_hal.get_cmake_dir()


def test_version_names_core_plugins_and_abi() -> None:
    out = _run([sys.executable, "-m", "nx_hal.cli", "--version"]).stdout.splitlines()
    assert out[0] == f"nx-hal {metadata.version('nx-hal')} (ABI {HOST_ABI})"
    assert nx_hal.__version__ == metadata.version("nx-hal")
    for ep in metadata.entry_points(group="nx_hal"):
        assert any(f"plugin '{ep.name}'" in line for line in out[1:]), out


def test_imports_without_tomllib(tmp_path: Path) -> None:
    """Python 3.10 has no tomllib: the config falls back to tomli, and reads files."""
    (tmp_path / "nx_hal.toml").write_text('prefer = ["npu:cpu", "cpu"]\n')
    code = ("import sys; sys.modules['tomllib'] = None\n"
            "import nx_hal, nx_hal.config as c\n"
            "assert c.tomllib.__name__ == 'tomli', c.tomllib\n"
            "cfg = nx_hal.load_config().config\n"
            "print([str(s) for s in cfg.prefer])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    out = _run([sys.executable, "-c", code], cwd=tmp_path, env=env).stdout
    assert out.strip() == "['npu:cpu', 'cpu']"


def _cmake_project(tmp_path: Path, body: str) -> Path:
    source = tmp_path / "project"
    source.mkdir()
    (source / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\nproject(sdk_user C)\n" + body)
    return source


def _configure(source: Path, build: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cmake", "-S", str(source), "-B", str(build), *args],
                          capture_output=True, text=True)


@needs_cmake
def test_cmake_package_builds_a_host_and_a_plugin(tmp_path: Path) -> None:
    """find_package(nx_hal): a program on nx_hal::loader, a plugin on
    nx_hal::plugin_helpers with its manifest, installed; the program lists it."""
    source = _cmake_project(tmp_path, f"""
find_package(nx_hal 0.1 CONFIG REQUIRED)
message(STATUS "nx_hal ${{nx_hal_VERSION}} ABI ${{nx_hal_ABI_VERSION}}")
add_executable(list_devices {ROOT}/examples/c/list_devices.c)
target_link_libraries(list_devices PRIVATE nx_hal::loader)
add_library(nxhal_sdkfixture SHARED {ROOT}/tests/fixtures/fixture_hostmem.c)
target_compile_definitions(nxhal_sdkfixture PRIVATE FIXTURE_NAME="fixture-sdk")
set_target_properties(nxhal_sdkfixture PROPERTIES C_VISIBILITY_PRESET hidden C_STANDARD 99)
target_link_libraries(nxhal_sdkfixture PRIVATE nx_hal::plugin_helpers)
install(TARGETS nxhal_sdkfixture LIBRARY DESTINATION lib/nx_hal_plugins)
nx_hal_add_plugin_manifest(TARGET nxhal_sdkfixture NAME sdkfixture
                           DESTINATION share/nx_hal/plugins LIBRARY_DESTINATION lib/nx_hal_plugins)
""")
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    configured = _configure(source, build, f"-Dnx_hal_DIR={nx_hal.get_cmake_dir()}")
    assert configured.returncode == 0, configured.stdout + configured.stderr
    assert f"nx_hal {metadata.version('nx-hal')} ABI {HOST_ABI}" in configured.stdout
    _run(["cmake", "--build", str(build)])
    _run(["cmake", "--install", str(build), "--prefix", str(prefix)])

    manifest = json.loads((prefix / "share" / "nx_hal" / "plugins" / "sdkfixture.json").read_text())
    assert manifest == {"file_format_version": "1.0", "name": "sdkfixture", "abi_version": HOST_ABI,
                        "library_path": "../../../lib/nx_hal_plugins/libnxhal_sdkfixture.so"}
    # The plugin exports only its query function: the helpers stay private.
    plugin = prefix / "lib" / "nx_hal_plugins" / "libnxhal_sdkfixture.so"
    symbols = _run(["nm", "-D", "--defined-only", str(plugin)]).stdout.split()
    assert [s for s in symbols if s.startswith("nxhal_")] == ["nxhal_query"]

    # The program finds its loader through the RUNPATH CMake gave it, and the
    # plugin through the manifest's directory.
    listed = _run([str(build / "list_devices")],
                  env=_clean_env(NX_HAL_PLUGIN_PATH=str(prefix / "share" / "nx_hal" / "plugins"))).stdout
    paths = [Path(m).resolve() for m in re.findall(r"^plugin: (.+)$", listed, re.M)]
    assert paths == [plugin.resolve()], listed
    assert "name: fixture-sdk" in listed


@needs_cmake
@pytest.mark.parametrize("request_version, found", [("0.1", True), (None, True), ("0.99", False), ("1.0", False)])
def test_cmake_package_version_check(tmp_path: Path, request_version: str | None, found: bool) -> None:
    version = f" {request_version}" if request_version else ""
    source = _cmake_project(tmp_path, f"find_package(nx_hal{version} CONFIG QUIET)\n"
                                      "message(STATUS \"found=${nx_hal_FOUND}\")\n")
    done = _configure(source, tmp_path / "build", f"-Dnx_hal_DIR={nx_hal.get_cmake_dir()}")
    assert f"found={'1' if found else '0'}" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config not found")
def test_pkg_config_builds_and_runs_the_example(tmp_path: Path) -> None:
    env = dict(os.environ, PKG_CONFIG_PATH=sdk.get_pkgconfig_dir())
    flags = _run(["pkg-config", "--cflags", "--libs", "nx_hal"], env=env).stdout.split()
    assert _run(["pkg-config", "--modversion", "nx_hal"], env=env).stdout.strip() == metadata.version("nx-hal")
    program = tmp_path / "list_devices"
    _run(["cc", "-std=c99", str(ROOT / "examples" / "c" / "list_devices.c"), "-o", str(program), *flags])
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    out = _run([str(program)], env=_clean_env(NX_HAL_PLUGIN_PATH=str(empty))).stdout
    assert "no plugins found" in out


@needs_cmake
def test_cmake_install_lays_out_the_same_sdk(tmp_path: Path) -> None:
    """The repository's CMakeLists installs headers, the versioned loader,
    the package config and nx_hal.pc; the installed example runs."""
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    configured = _configure(ROOT, build, "-DCMAKE_BUILD_TYPE=Release")
    assert configured.returncode == 0, configured.stdout + configured.stderr
    _run(["cmake", "--build", str(build), "-j2"])
    _run(["cmake", "--install", str(build), "--prefix", str(prefix)])
    libdir = next(p for p in (prefix / "lib", prefix / "lib64") if p.is_dir())
    assert (libdir / f"libnxhal_loader.so.{ABI[0]}").exists()
    assert f"Library soname: [libnxhal_loader.so.{ABI[0]}]" in _dynamic(libdir / f"libnxhal_loader.so.{ABI[0]}")
    for name in ("nx_hal.h", "nx_hal_loader.h", "nx_hal_plugin.h", "nx_hal.hpp"):
        assert (prefix / "include" / "nx_hal" / name).is_file()
    pc = (libdir / "pkgconfig" / "nx_hal.pc").read_text()
    assert re.search(rf"^Version: {re.escape(metadata.version('nx-hal'))}$", pc, re.M)

    empty = tmp_path / "no-plugins"
    empty.mkdir()
    out = _run([str(prefix / "bin" / "list_devices")], env=_clean_env(NX_HAL_PLUGIN_PATH=str(empty))).stdout
    assert "no plugins found" in out

    source = _cmake_project(tmp_path, "find_package(nx_hal 0.1 CONFIG REQUIRED)\n"
                                      "get_target_property(loc nx_hal::loader IMPORTED_LOCATION)\n"
                                      "message(STATUS \"loader=${loc}\")\n")
    done = _configure(source, tmp_path / "user", f"-DCMAKE_PREFIX_PATH={prefix}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"loader={libdir}/libnxhal_loader.so.{ABI[0]}" in done.stdout
