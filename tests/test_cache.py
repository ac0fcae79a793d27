"""The persistent compile cache: hit on the second compile, keyed by program,
options and compat key, and never trusting a stale or corrupt entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from tests.cbuild import build_fixture


def make_device(tmp_path: Path, **options: object) -> Device:
    lib = build_fixture("hostmem", tmp_path / "libs")
    overrides = {"cache_dir": str(tmp_path / "cache"), "plugins": {"fixture-hostmem": options}}
    reg = Registry(load_config(overrides, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.state == "loaded", rec.reason
    return rec.devices[0]


def test_second_compile_hits(tmp_path: Path) -> None:
    dev = make_device(tmp_path)
    cache = dev.record.compile_cache
    assert cache is not None
    dev.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses) == (0, 1)
    exe = dev.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses) == (1, 1)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)
    dev.compile(b"mul f32 4", "fixture-elementwise")  # another program: a miss
    assert cache.misses == 2
    assert len(list((tmp_path / "cache" / "executables").glob("*.nxexe"))) == 2
    dev.compile(b"add f32 4", "fixture-elementwise", cache=False)
    assert (cache.hits, cache.misses) == (1, 2)


def test_other_compat_key_recompiles(tmp_path: Path) -> None:
    dev = make_device(tmp_path)
    dev.compile(b"add f32 4", "fixture-elementwise")
    entry = next((tmp_path / "cache" / "executables").glob("*.nxexe"))
    other = make_device(tmp_path, compat_key="another-sdk-version")
    assert other.compat_key != dev.compat_key
    # Same program, other key: another cache file; and a planted entry from the
    # old key under the new key's name is refused by the plugin, then replaced.
    cache = other.record.compile_cache
    assert cache is not None
    from nx_hal.programs import Program

    key = cache.key(other, Program("fixture-elementwise", b"add f32 4"), {})
    cache.path(key).write_bytes(entry.read_bytes())
    exe = other.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses) == (0, 1)
    x = np.ones(4, np.float32)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)
    again = other.compile(b"add f32 4", "fixture-elementwise")
    assert cache.hits == 1  # the rewritten entry is good
    np.testing.assert_allclose(again(x, 3 * x)[0].to_numpy(), 4 * x)  # and what the hit gives runs


def test_corrupt_entry_recompiles(tmp_path: Path) -> None:
    dev = make_device(tmp_path)
    dev.compile(b"neg f32 3", "fixture-elementwise")
    entry = next((tmp_path / "cache" / "executables").glob("*.nxexe"))
    entry.write_bytes(b"garbage")
    exe = dev.compile(b"neg f32 3", "fixture-elementwise")
    np.testing.assert_allclose(exe(np.ones(3, np.float32))[0].to_numpy(), -np.ones(3))


def test_cache_disabled(tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    reg = Registry(load_config({"compile_cache": False}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.compile_cache is None
