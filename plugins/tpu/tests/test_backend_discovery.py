"""Backends found from C with no option and no variable: the plugin looks in
the site-packages it is installed in, as nx_hal_tpu/backends.py does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PLUGIN_DIR, Driver, backends

PIP_COMMANDS = ("pip install 'nx-hal-tpu[cpu]' (XLA CPU)", "pip install 'nx-hal-tpu[tpu]' (Cloud TPU)",
                "pip install 'nx-hal-tpu[cuda12]' / 'nx-hal-tpu[cuda13]' (NVIDIA GPU, CUDA 12 / 13)")


@pytest.fixture(autouse=True)
def no_backend_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The overrides are unset: only discovery can find a backend."""
    monkeypatch.delenv("NXHAL_TPU_BACKEND_PATHS", raising=False)
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)


def site_packages(root: Path, plugin_library: Path) -> Path:
    """A site-packages holding a copy (not a link: the plugin resolves its own
    path) of the plugin library as pip lays it out."""
    package = root / "nx_hal_tpu"
    package.mkdir(parents=True)
    shutil.copy2(plugin_library, package / "libnxhal_tpu.so")
    return package / "libnxhal_tpu.so"


def test_empty_site_packages_names_pip_commands(driver: Path, plugin_library: Path,
                                                tmp_path: Path) -> None:
    library = site_packages(tmp_path / "x", plugin_library)
    out = Driver(driver, library)("devices")
    assert out.code == "UNAVAILABLE", out.stdout
    site = tmp_path / "x"
    assert out.message.startswith(f"no PJRT backend installed (searched {site}/libtpu/libtpu.so, "
                                  f"{site}/jax_plugins/xla_cuda{{12,13}}/"), out.message
    assert f"{site}/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so;" in out.message
    assert "NXHAL_TPU_BACKEND_PATHS and TPU_LIBRARY_PATH are not set" in out.message
    for command in PIP_COMMANDS:
        assert command in out.message
    assert out.message.strip().endswith(backends.INSTALL_HINT)


def test_backend_beside_the_plugin_is_found(driver: Path, plugin_library: Path,
                                            cpu_backend: Path, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    library = site_packages(site, plugin_library)
    cpu_dir = site / "xla_plugins" / "xla_cpu_pjrt"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "xla_cpu_pjrt.so").symlink_to(cpu_backend)
    # A CUDA wheel's directory without its library: nothing to find there.
    (site / "jax_plugins" / "xla_cuda12").mkdir(parents=True)
    out = Driver(driver, library)("devices")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert int(out.values("COUNT")[0]) >= 1
    assert "kind=1 " in out.values("DEVICE")[0]  # NXHAL_DEVICE_CPU
    diag = out.stdout[out.stdout.index("DIAG "):]
    assert f"backend cpu ({cpu_dir / 'xla_cpu_pjrt.so'}): PJRT API 0." in diag
    assert "backend cuda" not in diag


def test_variables_come_before_discovered_backends(driver: Path, plugin_library: Path,
                                                   cpu_backend: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site-packages"
    library = site_packages(site, plugin_library)
    cpu_dir = site / "xla_plugins" / "xla_cpu_pjrt"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "xla_cpu_pjrt.so").symlink_to(cpu_backend)
    monkeypatch.setenv("NXHAL_TPU_BACKEND_PATHS", "broken=/nonexistent/libpjrt.so")
    out = Driver(driver, library)("devices")
    assert out.returncode == 0, out.stdout
    diag = out.stdout[out.stdout.index("DIAG "):].splitlines()
    assert diag[0] == "DIAG backend broken (/nonexistent/libpjrt.so): not available: " + \
        diag[0].split(": not available: ", 1)[1]
    assert any(line.startswith(f"backend cpu ({cpu_dir / 'xla_cpu_pjrt.so'})") for line in diag)


def test_installed_plugin_finds_xla_cpu_with_no_options(driver: Path) -> None:
    """The plugin pip installed in this environment (pip install './plugins/tpu[cpu]')."""
    from importlib import metadata

    try:
        dist = metadata.distribution("nx-hal-tpu")
    except metadata.PackageNotFoundError:
        pytest.skip("nx-hal-tpu is not installed in this environment")
    library = Path(str(dist.locate_file("nx_hal_tpu/libnxhal_tpu.so")))
    if not library.is_file():
        pytest.skip("nx-hal-tpu is installed in editable mode (no library in site-packages)")
    cpu = backends.find_backends()
    if not any(b.label == "cpu" for b in cpu):
        pytest.skip("xla-cpu-pjrt is not installed")
    out = Driver(driver, library)("devices")
    assert out.returncode == 0, out.stdout
    assert "kind=1 " in out.values("DEVICE")[0]
    assert f"backend cpu ({library.parent.parent}/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so)" in out.stdout


def test_python_reason_is_the_pip_commands(plugin_library: Path, tmp_path: Path) -> None:
    """With no backend on sys.path, nx_hal's record says what to install."""
    pytest.importorskip("nx_hal")
    library = site_packages(tmp_path / "x", plugin_library)
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(PLUGIN_DIR)!r})
import nx_hal_tpu.backends as b
b.find_backends = lambda: []
from nx_hal.config import load_config
from nx_hal.registry import PluginSpec, Registry
from nx_hal_tpu import TpuOptions
reg = Registry(load_config({{"cache_dir": {str(tmp_path / "cache")!r}}}, no_config=True,
                           cwd=Path({str(tmp_path)!r})))
record = reg.add(PluginSpec(name="tpu", library=Path({str(library)!r}), options_model=TpuOptions))
reg.load_all(isolate=False)
print(record.state)
print(record.reason)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    state, reason = done.stdout.split("\n", 1)
    assert state == "unavailable"
    assert reason.startswith("no PJRT backend installed")
    assert backends.INSTALL_HINT in reason
    assert "option" not in reason
