"""Test helpers: fake installed plugin packages (entry points in a dist-info
on sys.path) and registries over the fixture libraries."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from tests.cbuild import build_fixture


def fake_package(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Writes an importable package with ``nx_hal`` entry points under ``root``."""
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[nx_hal]\n{lines}\n")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m.startswith("fake_nxhal_")]:
        del sys.modules[name]


def fixture_registry(tmp_path: Path, *names: str, **overrides: object) -> Registry:
    """A registry holding the named fixture libraries (keys of cbuild.FIXTURES)."""
    reg = Registry(load_config(overrides or None, no_config=True, cwd=tmp_path))
    for name in names:
        lib = build_fixture(name, tmp_path / "libs")
        reg.add(PluginSpec(name=f"fixture-{name}", library=lib, source="test fixture"))
    return reg


def device_available(selector: str) -> bool:
    """Whether the default registry offers ``selector`` (for skip marks made at collection)."""
    import nx_hal

    try:
        return nx_hal.is_available(selector)
    except nx_hal.NxHalError:
        return False


def installed_device(selector: str) -> Device:
    """The device ``selector`` of a real installed plugin, or a skip saying
    why there is none (the plugin missing, failed to load, or deviceless)."""
    import nx_hal

    nx_hal.configure(no_config=True)
    plugin = selector.split(":")[0]
    record = nx_hal.registry().records.get(plugin)
    if record is None:
        pytest.skip(f"{selector}: the {plugin} plugin is not installed")
    if record.state != "loaded":
        pytest.skip(f"{selector}: the {plugin} plugin is {record.state}: {record.code}: {record.reason}")
    try:
        return nx_hal.device(selector)
    except nx_hal.NxHalError as exc:
        pytest.skip(f"{selector}: {exc}")
