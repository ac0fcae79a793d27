"""Plugin discovery and loading: every way a plugin can fail is recorded with
its reason, and the other plugins still load."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import nx_hal
from nx_hal.config import load_config
from nx_hal.registry import PluginSpec, Registry
from tests.cbuild import HOST_ABI, build_fixture
from tests.plugin_env import fake_package, fixture_registry

PLUGIN_MODULE = '''
from pathlib import Path
from pydantic import BaseModel, ConfigDict, Field
import nx_hal

class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_count: int = Field(1, ge=1, le=4)
    fail_create: bool = False

@nx_hal.hookimpl
def nx_hal_register(register):
    register(name="{name}", library=Path({lib!r}), options_model=Options, package="fake-{name}")
'''


def test_entry_point_plugins_and_broken_ones(site: Path, tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-good", {"good": "fake_nxhal_good"},
                 {"fake_nxhal_good": PLUGIN_MODULE.format(name="good", lib=str(lib))})
    fake_package(site, "fake-broken", {"broken": "fake_nxhal_broken"},
                 {"fake_nxhal_broken": "import no_such_module_anywhere\n"})
    fake_package(site, "fake-raising", {"raising": "fake_nxhal_raising"},
                 {"fake_nxhal_raising": "import nx_hal\n@nx_hal.hookimpl\n"
                  "def nx_hal_register(register):\n    raise RuntimeError('boom in hook')\n"})
    fake_package(site, "fake-nolib", {"nolib": "fake_nxhal_nolib"},
                 {"fake_nxhal_nolib": PLUGIN_MODULE.format(name="nolib", lib="/nonexistent/libnxhal_x.so")})
    reg = Registry(load_config(no_config=True, cwd=tmp_path))
    reg.discover()
    reg.load_all()
    recs = reg.records
    assert recs["good"].state == "loaded"
    assert [d.name for d in recs["good"].devices] == ["fixture host memory"]
    assert recs["good"].spec is not None and recs["good"].spec.package == "fake-good"
    assert recs["broken"].state == "failed"
    assert "no_such_module_anywhere" in recs["broken"].reason
    assert recs["raising"].state == "failed" and "boom in hook" in recs["raising"].reason
    assert recs["nolib"].state == "failed" and recs["nolib"].code == "NOT_FOUND"
    assert "/nonexistent/libnxhal_x.so" in recs["nolib"].reason


def test_options_model_rejects_value_naming_source(site: Path, tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-opt", {"opt": "fake_nxhal_opt"},
                 {"fake_nxhal_opt": PLUGIN_MODULE.format(name="opt", lib=str(lib))})
    (tmp_path / "nx_hal.toml").write_text("[plugins.opt]\ndevice_count = 9\n")
    reg = Registry(load_config(cwd=tmp_path))
    reg.discover()
    rec = reg.load(reg.records["opt"])
    assert rec.state == "failed" and rec.code == "INVALID_ARGUMENT"
    assert "key 'plugins.opt.device_count' in" in rec.reason and "less than or equal to 4" in rec.reason


def test_plugin_options_reach_the_library(site: Path, tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-opt2", {"opt2": "fake_nxhal_opt2"},
                 {"fake_nxhal_opt2": PLUGIN_MODULE.format(name="opt2", lib=str(lib))})
    reg = Registry(load_config({"plugins": {"opt2": {"device_count": 3}}}, no_config=True, cwd=tmp_path))
    reg.discover()
    assert len(reg.load(reg.records["opt2"]).devices) == 3
    reg = Registry(load_config({"plugins": {"opt2": {"fail_create": True}}}, no_config=True, cwd=tmp_path))
    reg.discover()
    rec = reg.load(reg.records["opt2"])
    assert (rec.state, rec.code) == ("unavailable", "UNAVAILABLE")
    assert "fixture asked to be unavailable" in rec.reason


@pytest.mark.parametrize(
    "fixture, code, needles",
    [
        ("other_major", "ABI_MISMATCH", ["2.", "1."]),
        ("table_smaller", "ABI_MISMATCH", []),
        ("null_entry", None, []),
        ("missing_dep", "UNAVAILABLE", ["libnxhal_fixture_dep.so"]),
        ("no_query", "NOT_FOUND", ["nxhal_query"]),
    ],
)
def test_abi_failures_recorded(tmp_path: Path, fixture: str, code: str | None, needles: list[str]) -> None:
    reg = fixture_registry(tmp_path, fixture, "hostmem")
    reg.load_all()
    rec = reg.records[f"fixture-{fixture}"]
    assert rec.state == ("unavailable" if code == "UNAVAILABLE" else "failed")
    if code:
        assert rec.code == code, rec.reason
    for needle in needles:
        assert needle in rec.reason
    assert reg.records["fixture-hostmem"].state == "loaded"  # the others still load


@pytest.mark.parametrize("fixture", ["newer_minor", "table_larger"])
def test_newer_plugins_load(tmp_path: Path, fixture: str) -> None:
    reg = fixture_registry(tmp_path, fixture)
    rec = reg.load(reg.records[f"fixture-{fixture}"])
    assert rec.state == "loaded", rec.reason
    assert rec.info is not None and rec.info.negotiated_abi == HOST_ABI


def test_crashing_probe_is_isolated(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "crash_probe", "hostmem")
    reg.load_all(isolate=True)
    rec = reg.records["fixture-crash_probe"]
    assert (rec.state, rec.code) == ("failed", "INTERNAL")
    assert "crashed (SIGSEGV)" in rec.reason
    assert reg.records["fixture-hostmem"].state == "loaded"


def test_hanging_probe_times_out(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hang_probe", "hostmem", probe_timeout=2)
    start = time.monotonic()
    reg.load_all(isolate=True)
    elapsed = time.monotonic() - start
    rec = reg.records["fixture-hang_probe"]
    assert (rec.state, rec.code) == ("failed", "DEADLINE_EXCEEDED")
    assert "within 2 s" in rec.reason
    assert elapsed < 15
    assert reg.records["fixture-hostmem"].state == "loaded"


def test_disabled_plugin(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem", disable=["fixture-hostmem"])
    reg.load_all()
    assert reg.records["fixture-hostmem"].state == "disabled"


def test_plugin_path_discovery(tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "plugdir")
    reg = Registry(load_config({"plugin_path": [str(lib.parent)]}, no_config=True, cwd=tmp_path))
    reg.discover()
    name = lib.name[len("libnxhal_"):-3]
    assert name in reg.records
    assert reg.load(reg.records[name]).state == "loaded"


def test_records_to_dict(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem")
    reg.load_all()
    d = reg.records["fixture-hostmem"].to_dict()
    assert d["state"] == "loaded" and d["abi_version"] == HOST_ABI
    assert d["devices"] == ["fixture-hostmem:cpu:0"]


def test_spec_add_replaces(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem")
    reg.add(PluginSpec(name="fixture-hostmem", library=Path("/nope.so")))
    assert reg.load(reg.records["fixture-hostmem"]).code == "NOT_FOUND"
    assert isinstance(nx_hal.NotFoundError("x"), LookupError)


def test_abi_1_0_plugin_runs_under_a_newer_host(tmp_path: Path) -> None:
    """A plugin of the first published ABI: negotiated down, and the 1.1 io
    field it never writes reads as "the executable's own device"."""
    import numpy as np

    from tests.conformance.programs import add_program

    reg = fixture_registry(tmp_path, "abi_1_0")
    rec = reg.load(reg.records["fixture-abi_1_0"])
    assert rec.state == "loaded", rec.reason
    assert rec.info is not None and (rec.info.abi_version, rec.info.negotiated_abi) == ("1.0", "1.0")
    (dev,) = rec.devices
    prog = add_program(dev.formats)
    assert prog is not None
    exe = dev.compile(prog[1], prog[0], cache=False)
    assert [s.device_index for s in exe.inputs + exe.outputs] == [-1, -1, -1]
    assert exe.input_devices == (dev, dev) and exe.num_replicas == 1
    x = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(exe(dev.put(x), dev.put(x))[0].to_numpy(), 2 * x)


def test_manifest_plugins_seen_by_python_and_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin installed outside Python, known only by its manifest, is found
    by the Python registry as the C loader finds it; an untrusted manifest is
    skipped by both."""
    import json
    import os
    import subprocess

    from tests.cbuild import build_example

    lib = build_fixture("hostmem", tmp_path / "libs")
    manifests = tmp_path / "share" / "nx_hal" / "plugins"
    manifests.mkdir(parents=True)
    (manifests / "outside.json").write_text(json.dumps({
        "file_format_version": "1.0", "name": "outside", "abi_version": HOST_ABI,
        "library_path": os.path.relpath(lib, manifests)}))
    (manifests / "loose.json").write_text(json.dumps({
        "file_format_version": "1.0", "name": "loose", "abi_version": HOST_ABI, "library_path": str(lib)}))
    (manifests / "loose.json").chmod(0o666)  # writable by anyone: never trusted
    for key in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "nothing"))
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "nothing"))
    monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(manifests))

    reg = Registry(load_config(no_config=True, cwd=tmp_path))
    reg.discover()
    assert "loose" not in reg.records
    spec = reg.records["outside"].spec
    assert spec is not None and spec.library.resolve() == lib.resolve()
    assert spec.source == f"NX_HAL_PLUGIN_PATH ({manifests / 'outside.json'})"
    reg.load_all()
    assert [d.name for d in reg.records["outside"].devices] == ["fixture host memory"]

    listed = subprocess.run([str(build_example(tmp_path / "example"))], capture_output=True, text=True,
                            env=dict(os.environ), check=True).stdout
    assert "name: fixture-hostmem" in listed
    assert str(lib.resolve()) in {str(Path(p).resolve()) for p in listed.split() if p.endswith(".so")}
    assert "loose" not in listed
