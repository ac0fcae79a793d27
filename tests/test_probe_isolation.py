"""The Python API probes plugins in a child process by default: a plugin that
crashes, hangs or calls exit() in its probe becomes a reason, and verdicts
are cached so a warm start spawns no child."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nx_hal
from nx_hal import api, probe
from tests.cbuild import build_fixture
from tests.store_util import entries

# The pip-installed plugins are not what these tests are about: skip them.
INSTALLED = ["npu", "tpu", "graphcore"]


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libnxhal_fixture_{hostmem,crash_probe,hang_probe,exit_probe}.so in one directory."""
    out = tmp_path_factory.mktemp("plugins")
    for name in ("hostmem", "crash_probe", "hang_probe"):
        build_fixture(name, out)
    exiting = build_fixture("hostmem", tmp_path_factory.mktemp("exit"), ["-DFIXTURE_EXIT_PROBE"])
    exiting.rename(out / "libnxhal_fixture_exit_probe.so")
    return out


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process-wide registry these tests build is not left to other tests."""
    monkeypatch.setattr(api, "_registry", None)
    monkeypatch.setattr(api, "_default", None)
    yield


def settings(plugin_dir: Path, cache: Path, **more: Any) -> dict[str, Any]:
    return {"plugin_path": [str(plugin_dir)], "cache_dir": str(cache), "probe_timeout": 2,
            "disable": INSTALLED, **more}


def states() -> dict[str, tuple[str, str, str]]:
    return {p["name"]: (p["state"], p["code"], p["reason"]) for p in nx_hal.plugins()}


def test_broken_probes_become_reasons(plugin_dir: Path, tmp_path: Path) -> None:
    nx_hal.configure(settings(plugin_dir, tmp_path / "cache"), no_config=True)  # no isolate_probe argument
    found = states()
    assert found["fixture_hostmem"][0] == "loaded"
    state, code, reason = found["fixture_crash_probe"]
    assert (state, code) == ("failed", "INTERNAL") and reason.startswith("probe crashed (SIGSEGV)")
    state, code, reason = found["fixture_hang_probe"]
    assert (state, code) == ("failed", "DEADLINE_EXCEEDED")
    assert "did not finish within 2 s" in reason
    state, code, reason = found["fixture_exit_probe"]
    assert (state, code) == ("failed", "INTERNAL")
    assert reason.startswith("probe exited with status 0 without an answer")
    assert [d.plugin for d in nx_hal.devices()] == ["fixture_hostmem"] * len(nx_hal.devices())
    assert nx_hal.devices(), "the healthy plugin's devices are listed"


def test_exit_in_a_probe_does_not_end_the_application(plugin_dir: Path, tmp_path: Path) -> None:
    """``python -c "import nx_hal; nx_hal.devices()"`` goes on after devices()."""
    env = {**os.environ, "NX_HAL_PLUGIN_PATH": str(plugin_dir), "NX_HAL_DISABLE": ",".join(INSTALLED),
           "NX_HAL_PROBE_TIMEOUT": "2", "NX_HAL_CACHE_DIR": str(tmp_path / "cache"), "NX_HAL_NO_CONFIG": "1"}
    code = "import nx_hal; print(sorted({d.plugin for d in nx_hal.devices()})); print('still here')"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["['fixture_hostmem']", "still here"]


def test_warm_start_reads_the_cache(plugin_dir: Path, tmp_path: Path) -> None:
    config = settings(plugin_dir, tmp_path / "cache")
    before = probe.child_probes
    nx_hal.configure(config, no_config=True)
    assert probe.child_probes - before == 4
    cold = states()
    start = time.monotonic()
    nx_hal.configure(config, no_config=True)
    elapsed = time.monotonic() - start
    assert probe.child_probes - before == 4, "a warm start spawns no child"
    warm = states()
    assert elapsed < 1.5, "the hang's timeout (2 s) is not paid again"
    assert {n: s[:2] for n, s in warm.items()} == {n: s[:2] for n, s in cold.items()}
    assert warm["fixture_hang_probe"][2] == (cold["fixture_hang_probe"][2]
                                             + " (a cached verdict; `nx-hal cache clear probe` probes again)")
    assert warm["fixture_hostmem"][0] == "loaded"
    assert len(entries(tmp_path / "cache", "probe")) == 4


def test_changed_library_or_setting_probes_again(plugin_dir: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    config = settings(plugin_dir, tmp_path / "cache", disable=[*INSTALLED, "fixture_hang_probe"])
    nx_hal.configure(config, no_config=True)
    before = probe.child_probes
    library = plugin_dir / "libnxhal_fixture_hostmem.so"
    st = library.stat()
    os.utime(library, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    nx_hal.configure(config, no_config=True)
    assert probe.child_probes - before == 1, "only the changed library is probed again"
    assert states()["fixture_hostmem"][0] == "loaded"
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nonexistent")  # what an SDK reads
    nx_hal.configure(config, no_config=True)
    assert probe.child_probes - before == 4, "a changed SDK variable probes every plugin again"


def test_in_process_probing_remains_the_way_out(plugin_dir: Path, tmp_path: Path) -> None:
    config = settings(plugin_dir, tmp_path / "cache", isolate_probe=False,
                      disable=[*INSTALLED, "fixture_crash_probe", "fixture_hang_probe", "fixture_exit_probe"])
    before = probe.child_probes
    nx_hal.configure(config, no_config=True)
    assert probe.child_probes == before
    assert states()["fixture_hostmem"][0] == "loaded"
    assert not (tmp_path / "cache" / "probe").exists()


def test_probe_key_follows_options(tmp_path: Path) -> None:
    library = tmp_path / "libnxhal_x.so"
    library.write_bytes(b"\x7fELF")
    a = probe.probe_key(str(library), "x", {"threads": 1})
    assert a == probe.probe_key(str(library), "x", {"threads": 1})
    assert a != probe.probe_key(str(library), "x", {"threads": 2})
    assert a != probe.probe_key(str(library), "y", {"threads": 1})
    library.write_bytes(b"\x7fELF!")  # size
    assert a != probe.probe_key(str(library), "x", {"threads": 1})
    assert probe.probe_key(str(tmp_path / "missing.so"), "x", {}) is None


def test_probe_key_follows_the_child_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe that ran out of memory under one limit is probed again under another."""
    from nx_hal import child

    library = tmp_path / "libnxhal_x.so"
    library.write_bytes(b"\x7fELF")
    monkeypatch.setattr(child, "_memory_limit", 1 << 30)
    small = probe.probe_key(str(library), "x", {})
    assert small == probe.probe_key(str(library), "x", {})
    monkeypatch.setattr(child, "_memory_limit", 2 << 30)
    assert probe.probe_key(str(library), "x", {}) != small


@pytest.mark.parametrize("variable", ["ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "OV_CPU_THREADS_NUM", "XLA_FLAGS"])
def test_probe_key_follows_what_the_sdks_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    """oneDNN's ISA cap changes what OpenVINO's CPU device computes with (and
    the npu device's int8_pairs_saturate): a verdict probed without it is not
    served with it."""
    library = tmp_path / "libnxhal_x.so"
    library.write_bytes(b"\x7fELF")
    monkeypatch.delenv(variable, raising=False)
    plain = probe.probe_key(str(library), "x", {})
    monkeypatch.setenv(variable, "AVX2")
    assert probe.probe_key(str(library), "x", {}) != plain
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    capped = probe.probe_key(str(library), "x", {})
    monkeypatch.delenv("UNRELATED_SETTING")
    assert probe.probe_key(str(library), "x", {}) == capped


def test_a_warm_start_imports_no_pydantic(tmp_path: Path) -> None:
    """With nothing configured, listing devices from the probe cache needs
    neither pydantic nor the selectors made with it (about 150 ms of the
    warm start, bench/startup.py); a configured preference is checked then."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # not NX_HAL_CACHE_DIR: a setting, read with pydantic
    code = ("import sys, nx_hal; nx_hal.devices(); "
            "print(sorted(m for m in ('pydantic', 'nx_hal.selectors', 'nx_hal._config_model') if m in sys.modules))")
    for _ in range(2):  # the first fills the probe cache
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "[]", out.stdout
    out = subprocess.run([sys.executable, "-c", code], env={**env, "NX_HAL_PREFER": "gpus,cpu"}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "did you mean 'gpu'?" in out.stderr
