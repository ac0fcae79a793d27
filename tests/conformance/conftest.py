"""Targets of the conformance suite: every installed plugin, plus the test
fixture plugin built from tests/fixtures (which keeps the suite itself tested
on machines with no vendor SDK). ``--plugin NAME`` narrows it to one."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.plugin import PluginRecord, PluginSpec
from nx_hal.registry import Registry

FIXTURE = "fixture-hostmem"


def _installed() -> list[str]:
    return sorted({ep.name for ep in metadata.entry_points(group="nx_hal")})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        wanted = metafunc.config.getoption("--plugin")
        names = [FIXTURE, *_installed()]
        if wanted:
            names = [n for n in names if n == wanted]
        metafunc.parametrize("target", names, scope="session")


_loaded: dict[str, PluginRecord] = {}


@pytest.fixture(scope="session")
def record(target: str, tmp_path_factory: pytest.TempPathFactory) -> PluginRecord:
    if target not in _loaded:
        reg = Registry(load_config(no_config=True))
        if target == FIXTURE:
            from tests.cbuild import build_fixture

            lib = build_fixture("hostmem", tmp_path_factory.mktemp("fixtures"))
            rec = reg.add(PluginSpec(name=FIXTURE, library=Path(lib), source="test fixture"))
        else:
            reg.discover()
            rec = reg.records[target]
        reg.load(rec, isolate=True)
        _loaded[target] = rec
    rec = _loaded[target]
    if rec.state != "loaded":
        if rec.code == "UNAVAILABLE":
            print(f"\nconformance: {target}: UNAVAILABLE: {rec.reason}")
            pytest.skip(f"{target}: UNAVAILABLE: {rec.reason}")
        pytest.fail(f"{target}: {rec.state}: {rec.code}: {rec.reason}")
    return rec


@pytest.fixture(scope="session")
def device(record: PluginRecord) -> Device:
    assert record.devices, f"{record.name} loaded but reports no device"
    device = record.devices[0]
    device._live()  # these tests call the plugin's table through the device's handles
    return device
