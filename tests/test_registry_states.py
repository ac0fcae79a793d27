"""The registry's decisions, as a user of it sees them: the converter its
devices get, where discovery and probe verdicts are cached (and when not),
a warm start that imports no plugin module, devices described by the probe
without opening the library here, and which records give devices."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from nx_hal.config import load_config
from nx_hal.converter import Converter
from nx_hal.discovery import CachedSpec
from nx_hal.library import Library
from nx_hal.library import open_library as real_open
from nx_hal.plugin import PluginRecord, PluginSpec
from nx_hal.probe import ProbeResult
from nx_hal.registry import Registry
from tests.cbuild import build_fixture
from tests.plugin_env import fake_package, fixture_registry
from tests.store_util import entries

# The module (nx_hal.registry the attribute is the function that returns the registry).
registry_module = importlib.import_module("nx_hal.registry")

PLUGIN_MODULE = '''
from pathlib import Path
from pydantic import BaseModel, ConfigDict, Field
import nx_hal

class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_count: int = Field({default}, ge=1, le=4)

@nx_hal.hookimpl
def nx_hal_register(register):
    register(name="{name}", library=Path({lib!r}), options_model=Options, package="fake-{name}")
'''


# -- the converter the devices use --------------------------------------------------------------------

def test_the_converter_given_is_the_one_records_get(tmp_path: Path) -> None:
    class Mine:
        """A converter that converts nothing (enough to be handed around)."""

        def available(self) -> str | None:
            return "not here"

    mine: Any = Mine()
    reg = Registry(load_config(no_config=True, cwd=tmp_path), converter=mine)
    assert reg.converter is mine
    assert reg.add(PluginSpec(name="x", library=tmp_path / "x.so")).converter is mine


def test_the_default_converter_is_onnx_with_the_cache_limit(tmp_path: Path) -> None:
    from nx_hal.onnx.adapter import OnnxConverter

    reg = Registry(load_config({"cache_max_bytes": 12345}, no_config=True, cwd=tmp_path))
    assert isinstance(reg.converter, OnnxConverter) and reg.converter.cache_max_bytes == 12345
    converter: Converter = reg.converter
    assert reg.add(PluginSpec(name="x", library=tmp_path / "x.so")).converter is converter


# -- the probe cache ------------------------------------------------------------------------------------

@pytest.mark.parametrize("probe_cache", [True, False])
def test_probe_verdict_cached_only_when_asked(tmp_path: Path, probe_cache: bool) -> None:
    cache = tmp_path / "cache"
    reg = fixture_registry(tmp_path, "hostmem", cache_dir=str(cache), probe_cache=probe_cache)
    record = reg.load(reg.records["fixture-hostmem"], isolate=True)
    assert record.state == "loaded" and len(record.devices) == 1
    assert len(entries(cache, "probe")) == (1 if probe_cache else 0)


# -- discovery through entry points, and its cache --------------------------------------------------------

@pytest.mark.parametrize(("overrides", "isolate", "cached"), [
    ({}, None, True),  # the defaults: isolate_probe and probe_cache
    ({}, False, False),  # loading every entry point here: nothing kept
    ({"isolate_probe": False}, None, False),
    ({"isolate_probe": False}, True, True),
    ({"probe_cache": False}, None, False),
])
def test_discovery_cache_kept_when_probes_are_isolated_and_cached(
        site: Path, tmp_path: Path, overrides: dict[str, Any], isolate: bool | None, cached: bool) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-kept", {"kept": "fake_nxhal_kept"},
                 {"fake_nxhal_kept": PLUGIN_MODULE.format(name="kept", lib=str(lib), default=1)})
    cache = tmp_path / "cache"
    reg = Registry(load_config({"cache_dir": str(cache), **overrides}, no_config=True, cwd=tmp_path))
    reg.discover(isolate=isolate)
    assert reg.records["kept"].spec is not None and reg.records["kept"].spec.package == "fake-kept"
    kept = [p for p in entries(cache, "discovery") if b'"kept"' in p.read_bytes()]
    assert len(kept) == (1 if cached else 0)


def test_warm_start_imports_no_plugin_module(site: Path, tmp_path: Path) -> None:
    """From the discovery cache, a plugin given no options gets its model's
    defaults without its module (or its model) being imported; one whose model
    requires an option still says which on load."""
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-warm", {"warm": "fake_nxhal_warm"},
                 {"fake_nxhal_warm": PLUGIN_MODULE.format(name="warm", lib=str(lib), default=2)})
    fake_package(site, "fake-req", {"req": "fake_nxhal_req"},
                 {"fake_nxhal_req": PLUGIN_MODULE.format(name="req", lib=str(lib), default="...")})
    loaded = load_config({"cache_dir": str(tmp_path / "cache")}, no_config=True, cwd=tmp_path)
    Registry(loaded).discover()  # cold: imports them and keeps what they registered
    for module in ("fake_nxhal_warm", "fake_nxhal_req"):
        del sys.modules[module]

    reg = Registry(loaded)
    reg.discover()
    warm = reg.records["warm"]
    assert isinstance(warm.spec, CachedSpec) and warm.spec.default_options == {"device_count": 2}
    assert reg.plugin_options(warm) == {"device_count": 2}
    assert reg.load(warm).state == "loaded" and len(warm.devices) == 2
    assert "fake_nxhal_warm" not in sys.modules

    req = reg.load(reg.records["req"])
    assert (req.state, req.code) == ("failed", "INVALID_ARGUMENT")
    assert "default: plugins.req.device_count: Field required" in req.reason


# -- devices from the probe's report -----------------------------------------------------------------------

@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The libraries the registry opens in this process, in order."""
    paths: list[str] = []

    def spy(path: str, plugin: str | None = None) -> Library:
        paths.append(path)
        return real_open(path, plugin)

    monkeypatch.setattr(registry_module, "open_library", spy)
    return paths


def test_devices_described_by_the_probe_open_nothing_here(tmp_path: Path, opened: list[str]) -> None:
    reg = fixture_registry(tmp_path, "hostmem", plugins={"fixture-hostmem": {"device_count": 2}})
    record = reg.load(reg.records["fixture-hostmem"], isolate=True)
    assert record.state == "loaded" and [d.selector for d in record.devices] == [
        "fixture-hostmem:cpu:0", "fixture-hostmem:cpu:1"]
    assert record.info is not None and record.diagnostics.startswith("fixture: 2 host memory device(s)")
    assert record.link is not None and record.link.client_options == {"device_count": 2}
    assert opened == []  # each device makes its client on first use


@pytest.mark.parametrize("drop", ["devices", "info"])
def test_a_probe_report_that_lists_no_devices_loads_the_plugin_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[str], drop: str) -> None:
    """A report without its devices (an older probe's, say): the plugin is
    loaded in this process instead, with its devices all there."""
    reg = fixture_registry(tmp_path, "hostmem", plugins={"fixture-hostmem": {"device_count": 2}})
    real_probe = reg.probe

    def older_probe(record: PluginRecord, options: dict[str, Any]) -> ProbeResult:
        result = real_probe(record, options)
        assert result.ok and drop in result.report
        return ProbeResult(True, "OK", "", {k: v for k, v in result.report.items() if k != drop})

    monkeypatch.setattr(reg, "probe", older_probe)
    record = reg.load(reg.records["fixture-hostmem"], isolate=True)
    assert record.state == "loaded", record.reason
    assert [d.selector for d in record.devices] == ["fixture-hostmem:cpu:0", "fixture-hostmem:cpu:1"]
    assert record.info is not None and record.info.name
    assert opened == [str(record.spec.library if record.spec else "")]


# -- records: loading once, and whose devices count ----------------------------------------------------------

def test_loading_a_loaded_plugin_again_changes_nothing(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem")
    record = reg.load(reg.records["fixture-hostmem"])
    devices = record.devices
    assert reg.load(record) is record and record.devices is devices and record.state == "loaded"
    failed = reg.add(PluginSpec(name="gone", library=tmp_path / "gone.so"))
    reason = reg.load(failed).reason
    assert failed.state == "failed" and reg.load(failed).reason == reason


def test_devices_are_those_of_loaded_plugins_in_plugin_order(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "other_major", "hostmem", "newer_minor", disable=["fixture-newer_minor"],
                           plugins={"fixture-hostmem": {"device_count": 2}})
    reg.add(PluginSpec(name="gone", library=tmp_path / "gone.so"))
    reg.load_all()
    assert {n: r.state for n, r in reg.records.items()} == {
        "fixture-other_major": "failed", "fixture-hostmem": "loaded", "fixture-newer_minor": "disabled",
        "gone": "failed"}
    assert reg.devices() == reg.records["fixture-hostmem"].devices
    assert [d.selector for d in reg.devices()] == ["fixture-hostmem:cpu:0", "fixture-hostmem:cpu:1"]


# -- a device's description and its live client ---------------------------------------------------------------

def test_a_listed_device_is_its_description_until_used(tmp_path: Path) -> None:
    """The probe's description lists the device; its client is made by the
    first call that needs one, and the Device object stays the one listed."""
    reg = fixture_registry(tmp_path, "hostmem", plugins={"fixture-hostmem": {"device_count": 2}})
    record = reg.load(reg.records["fixture-hostmem"], isolate=True)
    first, second = record.devices
    assert first.client is None and second.client is None
    assert second.description.name == second.name == "fixture host memory" and second.selector.endswith(":1")
    assert record.link is not None and record.link.device(1) is second
    assert second.put([3.0]).to_numpy().tolist() == [3.0]
    assert second.client is not None and second.client is record.link.client()
    assert first.client is None  # not used yet: connected on its own first call
    assert first.memory_stats().bytes_in_use == 0 and first.client is second.client


def test_a_dropped_registry_frees_its_clients_without_a_collection(tmp_path: Path) -> None:
    """Nothing in a registry refers back to itself, so its clients are
    unreachable once nothing made from them is alive: configure() destroys
    them with no gc.collect()."""
    import gc
    import weakref

    from nx_hal.library import pending_releases, release_clients

    release_clients()
    reg = fixture_registry(tmp_path, "hostmem", plugins={"fixture-hostmem": {"device_count": 2}})
    record = reg.load(reg.records["fixture-hostmem"], isolate=True)
    dev = record.devices[1]
    buf = dev.put([1.0, 2.0])
    assert dev.client is not None
    client = weakref.ref(dev.client)
    gc.disable()
    try:
        del reg, record
        assert client() is not None and buf.to_numpy().tolist() == [1.0, 2.0]  # still in use
        del buf, dev
        assert client() is None
        assert pending_releases() == 1 and release_clients() == 1
    finally:
        gc.enable()
