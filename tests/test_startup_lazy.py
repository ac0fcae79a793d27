"""A warm start (``import nx_hal; nx_hal.devices()`` with the probe cache
filled) answers from the caches: it imports neither numpy, pydantic, pluggy
nor any plugin module, and loads no plugin library; a device makes its
client on first use. Each start runs in a child, as a user's would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nx_hal import api, selectors
from nx_hal._config_model import Config
from nx_hal.config import DefaultSettings, load_config
from nx_hal.errors import UnavailableError
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from tests.cbuild import build_fixture
from tests.plugin_env import fake_package

PLUGIN_MODULE = '''
from pathlib import Path
from pydantic import BaseModel, ConfigDict, Field
import nx_hal

class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_count: int = Field({count}, ge=1, le=4)

class CompileOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: int = Field(0, ge=0, le=3)

@nx_hal.hookimpl
def nx_hal_register(register):
    register(name="{name}", library=Path({lib!r}), options_model=Options,
             compile_options_model=CompileOptions, package="fake-{name}")
'''

HEAVY = ("numpy", "pydantic", "pydantic_settings", "pluggy", "fake_nxhal_lazy", "nx_hal_npu", "nx_hal_tpu",
         "nx_hal_graphcore", "openvino", "nx_hal.programs")

REPORT = f'''
import json, sys
import nx_hal
from nx_hal import probe
devs = [d for d in nx_hal.devices() if d.plugin == "lazy"]
maps = open("/proc/self/maps").read()
out = {{"devices": [d.selector for d in devs], "children": probe.child_probes,
        "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules), "mapped": "libnxhal_" in maps}}
out["info"] = [d.info() for d in devs]
'''

USE = '''
import numpy as np
out["scalar_shape"] = list(devs[0].put(np.float64(2.5).reshape(())).shape)  # the first put: shape kept
buf = devs[0].put(np.arange(3, dtype=np.float32))
out["roundtrip"] = buf.to_numpy().tolist()
out["mapped_after"] = "libnxhal_fixture" in open("/proc/self/maps").read()
out["compile_model"] = devs[0].link.spec.compile_options_model.__name__
'''


def start(tmp_path: Path, site: Path, code: str, **env: str) -> dict[str, Any]:
    """One start in a child as a user who sets no NX_HAL_* variable would run it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    base.update(XDG_CACHE_HOME=str(tmp_path / "xdg"),
                PYTHONPATH=os.pathsep.join([str(site), *sys.path]), **env)
    out = subprocess.run([sys.executable, "-c", code + "\nprint(json.dumps(out))"], env=base, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["stderr"] = out.stderr
    return result


@pytest.fixture
def lazy_site(tmp_path: Path) -> tuple[Path, Path]:
    lib = build_fixture("hostmem", tmp_path / "libs")
    site = tmp_path / "site"
    fake_package(site, "fake-lazy", {"lazy": "fake_nxhal_lazy"},
                 {"fake_nxhal_lazy": PLUGIN_MODULE.format(name="lazy", lib=str(lib), count=1)})
    return site, lib


def test_warm_start_imports_and_loads_nothing_it_does_not_need(tmp_path: Path,
                                                               lazy_site: tuple[Path, Path]) -> None:
    site, _ = lazy_site
    cold = start(tmp_path, site, REPORT)
    assert cold["devices"] == ["lazy:cpu:0"]
    assert cold["children"] >= 1, "the cold start probes in a child"
    warm = start(tmp_path, site, REPORT + USE)
    assert warm["children"] == 0, "a warm start spawns no child"
    assert warm["devices"] == cold["devices"]
    assert warm["info"] == cold["info"]
    # Before its first use, numpy is imported only by the USE part below.
    assert warm["heavy"] == [], f"a warm start imported {warm['heavy']}"
    assert not warm["mapped"], "a warm start loads no plugin library"
    # A device makes its client when used, and its plugin's models are there.
    assert warm["roundtrip"] == [0.0, 1.0, 2.0] and warm["scalar_shape"] == []
    assert warm["mapped_after"]
    assert warm["compile_model"] == "CompileOptions"
    # The same devices as a start that loads every plugin in this process.
    eager = start(tmp_path, site, REPORT, NX_HAL_ISOLATE_PROBE="0")
    assert eager["info"] == warm["info"] and eager["mapped"]


def test_changed_plugin_module_is_imported_again(tmp_path: Path, lazy_site: tuple[Path, Path]) -> None:
    site, lib = lazy_site
    assert len(start(tmp_path, site, REPORT)["devices"]) == 1
    module = site / "fake_nxhal_lazy.py"
    module.write_text(PLUGIN_MODULE.format(name="lazy", lib=str(lib), count=3))  # another default
    st = module.stat()
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    again = start(tmp_path, site, REPORT)
    assert again["devices"] == ["lazy:cpu:0", "lazy:cpu:1", "lazy:cpu:2"], "the new default reaches the plugin"
    assert "fake_nxhal_lazy" in again["heavy"]
    assert start(tmp_path, site, REPORT)["heavy"] == [], "and is kept again"


def test_installing_a_package_registers_again(tmp_path: Path, lazy_site: tuple[Path, Path]) -> None:
    """Option defaults may depend on what is installed (the tpu plugin lists the PJRT packages)."""
    site, _ = lazy_site
    start(tmp_path, site, REPORT)
    assert start(tmp_path, site, REPORT)["heavy"] == []
    fake_package(site, "fake-unrelated", {}, {"fake_unrelated": ""})
    assert "fake_nxhal_lazy" in start(tmp_path, site, REPORT)["heavy"]


def test_broken_entry_point_fails_at_every_start(tmp_path: Path, lazy_site: tuple[Path, Path]) -> None:
    site, _ = lazy_site
    fake_package(site, "fake-broken", {"broken": "fake_nxhal_broken"},
                 {"fake_nxhal_broken": "import no_such_module_anywhere\n"})
    code = REPORT + 'out["broken"] = [p["state"] for p in nx_hal.plugins() if p["name"] == "broken"]\n'
    for _ in range(2):
        result = start(tmp_path, site, code)
        assert result["broken"] == ["failed"]
        assert "nx_hal plugin 'broken' skipped" in result["stderr"]
        assert result["devices"] == ["lazy:cpu:0"]


def test_options_from_config_are_validated_by_the_plugin_model(tmp_path: Path,
                                                               lazy_site: tuple[Path, Path]) -> None:
    site, _ = lazy_site
    start(tmp_path, site, REPORT)  # fills the caches
    code = REPORT + 'out["lazy"] = [p for p in nx_hal.plugins() if p["name"] == "lazy"][0]\n'
    # A value the user gave that the plugin's model refuses is an error, on a
    # warm start too (the cached spec's model is imported to check it), never
    # a plugin skipped.
    bad = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")},
             "XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPATH": os.pathsep.join([str(site), *sys.path]),
             "NX_HAL_PLUGINS__LAZY__DEVICE_COUNT": "9"})
    assert bad.returncode != 0
    assert "ConfigError" in bad.stderr and "environment variable NX_HAL_PLUGINS__LAZY__DEVICE_COUNT" in bad.stderr
    assert "less than or equal to 4" in bad.stderr
    good = start(tmp_path, site, code, NX_HAL_PLUGINS__LAZY__DEVICE_COUNT="2")
    assert good["devices"] == ["lazy:cpu:0", "lazy:cpu:1"]
    bad_env = subprocess.run(
        [sys.executable, "-c", "import nx_hal; nx_hal.devices()"], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "NX_HAL_PROBE_TIMEOUT": "soon"})
    assert bad_env.returncode != 0
    assert "environment variable NX_HAL_PROBE_TIMEOUT: probe_timeout:" in bad_env.stderr


def test_client_made_on_first_use_and_its_failure_is_that_use(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    reg = Registry(load_config({"cache_dir": str(tmp_path / "cache")}, no_config=True, cwd=tmp_path))
    record = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)), isolate=True)
    assert record.state == "loaded" and len(record.devices) == 1
    dev = record.devices[0]
    assert dev.kind == "cpu" and dev.name == "fixture host memory"
    dev.link.client_options["fail_create"] = True  # as if the SDK went away since the probe
    with pytest.raises(UnavailableError, match="fixture asked to be unavailable"):
        dev.put([1.0])
    dev.link.client_options.clear()
    assert dev.put([1.0, 2.0]).to_numpy().tolist() == [1.0, 2.0]
    assert dev.client is not None and dev.client.plugin == "fixture-hostmem"


def test_default_settings_are_config_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("NX_HAL_")]:
        monkeypatch.delenv(name)
    defaults, config = DefaultSettings(), Config()
    assert set(Config.model_fields) == {f for f in DefaultSettings.__dataclass_fields__} | {"prefer"}
    for name in Config.model_fields:
        assert getattr(defaults, name) == getattr(config, name), name
    loaded = load_config(no_config=True, cwd=tmp_path)
    before = loaded.settings  # a local, so the narrowing below does not outlive reading .config
    assert isinstance(before, DefaultSettings), "nothing configured: no pydantic model yet"
    assert loaded.config == config and loaded.settings is loaded.config
    assert isinstance(load_config({"probe_timeout": 5}, no_config=True).settings, Config)
    assert api._KINDS == selectors.KINDS
