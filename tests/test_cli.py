"""The nx-hal command, run as a user runs it (a child process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cbuild import HOST_ABI, build_fixture


def nx_hal(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "nx_hal.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=120)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "plugins"
    build_fixture("hostmem", d)
    build_fixture("crash_probe", d)
    return d


def test_plugins_devices_doctor_with_fixture(plugin_dir: Path, tmp_path: Path) -> None:
    env = {"NX_HAL_PLUGIN_PATH": str(plugin_dir), "NX_HAL_PREFER": "gpu,cpu"}
    out = nx_hal("plugins", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "fixture-hostmem" in out.stdout and f"ABI: {HOST_ABI}" in out.stdout
    assert "crashed (SIGSEGV)" in out.stdout  # the crash is a reason, not the CLI's death
    data = json.loads(nx_hal("plugins", "--json", env=env, cwd=tmp_path).stdout)
    states = {r["info"]["name"] if r["info"] else r["name"]: r["state"] for r in data}
    assert "loaded" in states.values() and "failed" in states.values()
    devs = json.loads(nx_hal("devices", "--json", env=env, cwd=tmp_path).stdout)
    assert [d["name"] for d in devs if d["plugin"] == "fixture_hostmem"] == ["fixture host memory"]
    doctor = nx_hal("doctor", env=env, cwd=tmp_path)
    assert doctor.returncode == 0 and "skipped gpu" in doctor.stdout
    headline = doctor.stdout.splitlines()[0]
    # The real plugins may be installed too: any CPU device, named in the headline.
    assert re.fullmatch(r"device selection \(preference order: gpu, cpu\): chosen \w+:cpu:\d+ \(.+\) for 'cpu'",
                        headline), headline


NO_ENTRY_POINTS = (
    "import sys, importlib.metadata as m; real = m.entry_points; "
    "m.entry_points = lambda **kw: [] if kw.get('group') == 'nx_hal' else real(**kw); "
    "from nx_hal.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_no_plugins_says_so(tmp_path: Path) -> None:
    """As on a machine where only nx-hal is installed (entry points hidden)."""
    def run(*args: str, status: int = 0) -> str:
        # Nor the plugin manifests the C loader would read (this environment's).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("NX_HAL_") and k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
        env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_DATA_DIRS=str(tmp_path / "data"))
        out = subprocess.run([sys.executable, "-c", NO_ENTRY_POINTS, *args], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=120)
        assert out.returncode == status, out.stderr
        return out.stdout

    assert "no nx_hal plugins installed" in run("plugins")
    assert "pip install nx-hal-npu" in run("plugins")
    assert "no devices" in run("devices")
    doctor = run("doctor", status=1)  # no device to use: a failure a script sees
    assert "no device chosen" in doctor and "none installed" in doctor


def test_run_fixture_program(plugin_dir: Path, tmp_path: Path) -> None:
    prog = tmp_path / "prog.txt"
    prog.write_text("add f32 2,3")
    x = tmp_path / "x.npy"
    import numpy as np

    np.save(x, np.ones((2, 3), np.float32))
    env = {"NX_HAL_PLUGIN_PATH": str(plugin_dir)}
    out = nx_hal("run", str(prog), "--format", "fixture-elementwise", "--device", "fixture_hostmem",
                 "--input", f"lhs={x}", "--input", f"rhs={x}", "--json", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["outputs"][0]["shape"] == [2, 3]
    assert data["latency"]["iterations"] == 10


def test_config_command_shows_sources(tmp_path: Path) -> None:
    (tmp_path / "nx_hal.toml").write_text('prefer = ["npu:cpu"]\n')
    out = nx_hal("config", env={"NX_HAL_PROBE_TIMEOUT": "5"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"from key 'prefer' in {tmp_path / 'nx_hal.toml'}" in out.stdout
    assert "from environment variable NX_HAL_PROBE_TIMEOUT" in out.stdout


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "nx_hal.toml").write_text('probe_timeout = "never"\n')
    out = nx_hal("doctor", cwd=tmp_path)
    assert out.returncode == 2  # a mistake in a setting, as on the command line
    assert "key 'probe_timeout' in" in out.stderr and "Traceback" not in out.stderr


def test_probe_children_import_the_installed_nx_hal(plugin_dir: Path, tmp_path: Path) -> None:
    """Run from a directory holding another ``nx_hal`` (a source checkout
    after ``pip install .``), the probe child must import what the parent did."""
    import shutil

    script = shutil.which("nx-hal", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the nx-hal console script is not installed next to this Python")
    decoy = tmp_path / "nx_hal"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy nx_hal was imported')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    env["NX_HAL_PLUGIN_PATH"] = str(plugin_dir)
    out = subprocess.run([script, "plugins", "--json"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    states = {r["name"]: r for r in json.loads(out.stdout)}
    assert states["fixture_hostmem"]["state"] == "loaded", states["fixture_hostmem"]["reason"]


def test_run_on_a_machine_without_the_preferred_hardware_says_so_in_one_line(tmp_path: Path) -> None:
    """No gpu here and nothing failed: one line says which device and what is
    missing; -v lists each reason, as before."""
    d = tmp_path / "plugins"
    build_fixture("hostmem", d)
    prog = tmp_path / "prog.txt"
    prog.write_text("add f32 2")
    env = {"NX_HAL_PLUGIN_PATH": str(d), "NX_HAL_PREFER": "gpu,tpu,cpu", "NX_HAL_DISABLE": "npu,tpu,graphcore"}
    out = nx_hal("run", str(prog), "--format", "fixture-elementwise", env=env, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.splitlines()[0] == ("device: fixture_hostmem:cpu:0 (fixture host memory) chosen for 'cpu': "
                                          "no gpu or tpu device here (nx-hal doctor says why)")
    assert "skipped" not in out.stdout
    verbose = nx_hal("run", "-v", str(prog), "--format", "fixture-elementwise", env=env, cwd=tmp_path)
    lines = verbose.stdout.splitlines()
    assert lines[0] == "device: fixture_hostmem:cpu:0 (fixture host memory) chosen for 'cpu'"
    assert lines[1].startswith("  skipped gpu: no gpu device: ") and lines[2].startswith("  skipped tpu: no tpu device")


@pytest.mark.parametrize("command", [["config"], ["devices"], ["run", "{example}"]])
def test_a_bad_plugin_option_is_an_error_not_a_skipped_device(tmp_path: Path, command: list[str]) -> None:
    """precision = "fp8" for npu: exit 2 naming the file, key and allowed
    values, where nx-hal run moved the work to another device and exited 0."""
    pytest.importorskip("nx_hal_npu")
    (tmp_path / "nx_hal.toml").write_text('[plugins.npu]\nprecision = "fp8"\n')
    example = Path(__file__).resolve().parent.parent / "examples" / "mlp.onnx"
    out = nx_hal(*[c.format(example=example) for c in command], cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"key 'plugins.npu.precision' in {tmp_path / 'nx_hal.toml'}" in out.stderr
    assert "'f32', 'bf16', 'f16' or 'auto' (got 'fp8')" in out.stderr
