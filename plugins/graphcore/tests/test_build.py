"""The build: what it records when the SDK is asked for but absent, and the
package metadata the core relies on (entry point, py3-none wheel)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from conftest import PLUGIN_DIR, Build, run_driver


def test_sdk_requested_but_missing_is_recorded(build: Build, tmp_path: Path) -> None:
    """POPLAR_SDK_ENABLED from the environment, no Poplar: the library says so."""
    cmake = shutil.which("cmake")
    assert cmake is not None
    env = dict(os.environ, POPLAR_SDK_ENABLED="ON")
    env.pop("CMAKE_PREFIX_PATH", None)
    configure = subprocess.run([cmake, "-S", str(PLUGIN_DIR), "-B", str(tmp_path)], env=env,
                               capture_output=True, text=True, check=True)
    reason = ("no Poplar SDK: POPLAR_SDK_ENABLED was on but find_package(poplar) failed; "
              "source the SDK's enable.sh before building")
    assert f"graphcore poplar backend: not built ({reason})" in configure.stdout
    # Asked for and missing is a configure-time warning, not only a status line.
    assert "graphcore poplar backend: NOT built although POPLAR_SDK_ENABLED is on" in (
        configure.stderr)
    subprocess.run([cmake, "--build", str(tmp_path), "--target", "nxhal_graphcore"], env=env,
                   capture_output=True, text=True, check=True)
    out = run_driver(build, tmp_path / "libnxhal_graphcore.so", "create")
    assert out["create.message"].startswith(f"graphcore: the Poplar backend was not built ({reason})")


def test_popart_is_found_as_popart_only(tmp_path: Path) -> None:
    """find_package(popart) must ask for the popart-only component: the
    default one also needs Protobuf and ONNX, which the backend does not use.
    A stand-in popart config refuses any request without popart-only; no
    popef config exists, so getting as far as popef shows popart was found."""
    cmake = shutil.which("cmake")
    assert cmake is not None
    prefix = tmp_path / "sdk"
    for package, body in (
            ("poplar", "set(poplar_FOUND TRUE)\n"),
            ("popart", 'if(NOT "popart-only" IN_LIST popart_FIND_COMPONENTS)\n'
                       "  set(popart_FOUND FALSE)\nendif()\n")):
        folder = prefix / "lib/cmake" / package
        folder.mkdir(parents=True)
        (folder / f"{package}-config.cmake").write_text(body)
    env = dict(os.environ, POPLAR_SDK_ENABLED="ON", CMAKE_PREFIX_PATH=str(prefix))
    configure = subprocess.run([cmake, "-S", str(PLUGIN_DIR), "-B", str(tmp_path / "build")],
                               env=env, capture_output=True, text=True, check=True)
    assert ("graphcore poplar backend: not built (incomplete Poplar SDK: find_package(popef) "
            "failed; PopEF is needed to load executables)") in configure.stdout


def test_pyproject_declares_the_core_contract() -> None:
    data = tomllib.loads((PLUGIN_DIR / "pyproject.toml").read_text())
    assert data["project"]["name"] == "nx-hal-graphcore"
    assert data["project"]["entry-points"]["nx_hal"] == {"graphcore": "nx_hal_graphcore"}
    # A compatible core range, also as the build requirement of an sdist build.
    assert "nx-hal>=0.1,<0.2" in data["project"]["dependencies"]
    overrides = data["tool"]["scikit-build"]["overrides"]
    assert {"if": {"from-sdist": True}, "build": {"requires": ["nx-hal>=0.1,<0.2"]}} in overrides
    assert data["build-system"]["build-backend"] == "scikit_build_core.build"
    assert data["tool"]["scikit-build"]["wheel"]["py-api"] == "py3"


@pytest.mark.skipif(importlib.util.find_spec("scikit_build_core") is None,
                    reason="scikit-build-core is not installed")
def test_wheel_is_py3_none_and_carries_the_library(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                    "-q", "-w", str(tmp_path / "dist"),
                    "--config-settings", f"build-dir={tmp_path / 'build'}", str(PLUGIN_DIR)],
                   check=True, capture_output=True, text=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith("nx_hal_graphcore-0.1.0-py3-none-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nx_hal_graphcore/libnxhal_graphcore.so" in names
    assert "nx_hal_graphcore/py.typed" in names
    # The manifest through which the C loader finds it, and the license.
    header = (PLUGIN_DIR.parent.parent / "include" / "nx_hal" / "nx_hal.h").read_text()
    abi = ".".join(re.search(rf"#define NXHAL_ABI_VERSION_{part} (\d+)", header).group(1)  # type: ignore[union-attr]
                   for part in ("MAJOR", "MINOR"))
    manifest = "nx_hal_graphcore-0.1.0.data/data/share/nx_hal/plugins/graphcore.json"
    assert json.loads(zipfile.ZipFile(wheel).read(manifest)) == {
        "file_format_version": "1.0", "name": "graphcore", "abi_version": abi,
        "python_package": "nx_hal_graphcore", "library": "libnxhal_graphcore.so"}
    assert "nx_hal_graphcore-0.1.0.dist-info/licenses/LICENSE" in names
    # No SDK here: no backend in the wheel, and nothing pretends otherwise.
    assert "nx_hal_graphcore/libnxhal_graphcore_poplar.so" not in names
