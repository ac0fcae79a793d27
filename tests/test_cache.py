"""The persistent compile cache: hit on the second compile, keyed by program,
options and compat key, and never trusting a stale or corrupt entry."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from nx_hal.cache import CompileCache
from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.errors import InternalError, InvalidArgumentError, UnimplementedError
from nx_hal.executable import Executable
from nx_hal.plugin import PluginSpec
from nx_hal.programs import Program
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


# --- CompileCache on its own: keys, entries, the directory --------------------
# A stand-in device and executable: the cache only asks a device for its
# plugin, compat key and load_executable, and an executable for serialize().


class FakeExecutable:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def serialize(self) -> bytes:
        return self.data


class FakeDevice:
    def __init__(self, plugin: str = "fake", compat_key: str = "sdk-1.0") -> None:
        self.plugin = plugin
        self.compat_key = compat_key
        self.loaded: list[bytes] = []

    def load_executable(self, data: bytes) -> FakeExecutable:
        self.loaded.append(data)
        if data.startswith(b"refused"):
            raise InvalidArgumentError("digest mismatch", plugin=self.plugin)
        return FakeExecutable(data)


def as_device(fake: FakeDevice) -> Device:
    return cast("Device", fake)


def as_exe(fake: FakeExecutable) -> Executable:
    return cast("Executable", fake)


ADD = Program("fixture-elementwise", b"add f32 4")


def stored(cache: CompileCache, device: FakeDevice, program: Program, options: dict[str, object],
           data: bytes) -> tuple[str, bytes]:
    """Stores ``data`` as ``program``'s executable; its key and program digest."""
    key = cache.key(as_device(device), program, options)
    digest = cache.program_digest(program, options)
    cache.store(key, digest, as_exe(FakeExecutable(data)))
    return key, digest


def test_key_names_device_program_and_options() -> None:
    dev = as_device(FakeDevice())
    cache = CompileCache(Path("unused"))
    key = cache.key(dev, ADD, {"opt_level": 2})
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert cache.key(as_device(FakeDevice()), Program("fixture-elementwise", b"add f32 4"), {"opt_level": 2}) == key
    others = [
        cache.key(as_device(FakeDevice(plugin="other")), ADD, {"opt_level": 2}),
        cache.key(as_device(FakeDevice(compat_key="sdk-1.1")), ADD, {"opt_level": 2}),
        cache.key(dev, Program("stablehlo", ADD.data), {"opt_level": 2}),
        cache.key(dev, Program(ADD.format, b"mul f32 4"), {"opt_level": 2}),
        cache.key(dev, Program(ADD.format, ADD.data, b"weights"), {"opt_level": 2}),
        cache.key(dev, ADD, {"opt_level": 3}),  # one program, two option sets: two entries
        cache.key(dev, ADD, {"opt_level": 2, "fast_math": True}),
        cache.key(dev, ADD, {}),
    ]
    assert len({key, *others}) == len(others) + 1


def test_key_does_not_depend_on_option_order() -> None:
    dev = as_device(FakeDevice())
    cache = CompileCache(Path("unused"))
    assert cache.key(dev, ADD, {"a": 1, "b": "x"}) == cache.key(dev, ADD, {"b": "x", "a": 1})
    assert cache.program_digest(ADD, {"a": 1, "b": "x"}) == cache.program_digest(ADD, {"b": "x", "a": 1})
    assert cache.program_digest(ADD, {"a": 1}) != cache.program_digest(ADD, {"a": 2})
    assert len(cache.program_digest(ADD, {})) == 32


def test_hit_returns_the_stored_executable(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    key, digest = stored(cache, dev, ADD, {"opt_level": 2}, b"the executable")
    assert cache.path(key) == tmp_path / "executables" / f"{key}.nxexe"
    assert cache.path(key).stat().st_mode & 0o777 == 0o600
    exe = cache.load(as_device(dev), key, digest)
    assert exe is not None
    assert cast("FakeExecutable", exe).data == b"the executable"
    assert dev.loaded == [b"the executable"]
    assert (cache.hits, cache.misses, cache.rejected) == (1, 0, 0)


def test_options_are_part_of_the_entry(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    key2, digest2 = stored(cache, dev, ADD, {"opt_level": 2}, b"built at O2")
    key3, digest3 = stored(cache, dev, ADD, {"opt_level": 3}, b"built at O3")
    assert key2 != key3
    o2, o3 = cache.load(as_device(dev), key2, digest2), cache.load(as_device(dev), key3, digest3)
    assert (cast("FakeExecutable", o2).data, cast("FakeExecutable", o3).data) == (b"built at O2", b"built at O3")
    # O2's entry asked for as O3's program: bound to its options, a miss.
    assert cache.load(as_device(dev), key2, digest3) is None
    assert (cache.hits, cache.misses, cache.rejected) == (2, 1, 1)


def test_missing_entry_is_a_miss_not_a_rejection(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    assert cache.load(as_device(dev), "0" * 64, b"\0" * 32) is None
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 0)
    assert dev.loaded == []


def test_hit_marks_the_entry_used(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    key, digest = stored(cache, dev, ADD, {}, b"exe")
    os.utime(cache.path(key), (1_000_000, 1_000_000))
    assert cache.load(as_device(dev), key, digest) is not None
    assert cache.path(key).stat().st_mtime > 1_000_000 + 86400


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda entry, key: entry[:-1], "its bytes are damaged"),
        (lambda entry, key: entry[:135], "not a compile cache entry of this nx_hal version"),
        (lambda entry, key: b"NXHALCE0" + entry[8:], "not a compile cache entry of this nx_hal version"),
        (lambda entry, key: entry.replace(key.encode(), b"f" * 64, 1), "it was stored under another key"),
        (lambda entry, key: entry[:72] + bytes(32) + entry[104:], "it was compiled from another program or options"),
        (lambda entry, key: entry[:-1] + b"X", "its bytes are damaged"),
    ],
    ids=["cut", "short", "magic", "key", "program", "flipped"],
)
def test_entry_that_does_not_match_is_rejected(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                               make: Callable[[bytes, str], bytes], reason: str) -> None:
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    key, digest = stored(cache, dev, ADD, {}, b"an executable")
    cache.path(key).write_bytes(make(cache.path(key).read_bytes(), key))
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key, digest) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal compile cache: ignoring {cache.path(key)}: {reason}"]
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 1)
    assert dev.loaded == []  # never handed to the plugin


def test_entry_refused_by_the_plugin_is_rejected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    key, digest = stored(cache, dev, ADD, {}, b"refused executable")
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key, digest) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal compile cache: ignoring {cache.path(key)}: the plugin refused it: "
        "[fake] INVALID_ARGUMENT: digest mismatch"]
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 1)


def test_entry_of_header_length_boundary(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # An empty executable makes an entry of exactly the header's length: a
    # whole entry, handed to the plugin; one byte less is not an entry.
    dev = FakeDevice()
    cache = CompileCache(tmp_path / "executables")
    key, digest = stored(cache, dev, ADD, {}, b"")
    entry = cache.path(key).read_bytes()
    assert len(entry) == 8 + 64 + 32 + 32
    exe = cache.load(as_device(dev), key, digest)
    assert exe is not None and cast("FakeExecutable", exe).data == b""
    cache.path(key).write_bytes(entry[:-1])
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key, digest) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal compile cache: ignoring {cache.path(key)}: not a compile cache entry of this nx_hal version"]
    assert dev.loaded == [b""]


def test_missing_parents_are_created_private(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "a" / "b" / "executables")
    assert cache.usable()
    assert cache.directory.is_dir() and cache.directory.stat().st_mode & 0o777 == 0o700
    key, digest = stored(cache, FakeDevice(), ADD, {}, b"exe")
    assert cache.path(key).is_file()


def test_directory_that_cannot_be_made_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = CompileCache(blocker / "executables")
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        assert not cache.usable()
        stored(cache, FakeDevice(), ADD, {}, b"exe")  # nothing stored, nothing raised
        assert cache.load(as_device(FakeDevice()), "0" * 64, b"\0" * 32) is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages  # one warning per cache
    assert messages[0].startswith(f"nx_hal compile cache: cannot use {cache.directory}: ")
    assert messages[0].endswith("; compiling without it")
    assert (cache.hits, cache.misses) == (0, 1)


def test_executable_that_cannot_serialize_is_not_stored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Unserializable(FakeExecutable):
        def __init__(self, error: Exception) -> None:
            super().__init__(b"")
            self.error = error

        def serialize(self) -> bytes:
            raise self.error

    cache = CompileCache(tmp_path / "executables")
    key = cache.key(as_device(FakeDevice()), ADD, {})
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        cache.store(key, b"\0" * 32, as_exe(Unserializable(UnimplementedError("no serialize", plugin="fake"))))
        assert caplog.records == []  # a plugin without serialize: nothing to say
        cache.store(key, b"\0" * 32, as_exe(Unserializable(InternalError("out of disk", plugin="fake"))))
    assert [r.getMessage() for r in caplog.records] == [
        "nx_hal compile cache: not storing: [fake] INTERNAL: out of disk"]
    assert not cache.path(key).exists()


def _old_entry(directory: Path, name: str, size: int) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{name * 64}.nxexe"
    path.write_bytes(b"x" * size)
    os.utime(path, (1_000_000, 1_000_000))
    return path


def test_store_trims_the_cache_dir(tmp_path: Path) -> None:
    directory = tmp_path / "executables"
    old = _old_entry(directory, "a", 1000)
    entry_size = 8 + 64 + 32 + 32 + 100
    cache = CompileCache(directory, max_bytes=entry_size)
    key, _ = stored(cache, FakeDevice(), ADD, {}, b"e" * 100)
    assert not old.exists()  # least recently used: removed to stay under the limit
    assert cache.path(key).stat().st_size == entry_size


def test_directory_of_another_name_is_not_trimmed(tmp_path: Path) -> None:
    directory = tmp_path / "elsewhere"
    old = _old_entry(directory, "a", 1000)
    cache = CompileCache(directory, max_bytes=10)
    key, _ = stored(cache, FakeDevice(), ADD, {}, b"e" * 100)
    assert old.exists() and cache.path(key).exists()


def test_failed_write_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "executables"
    old = _old_entry(directory, "a", 1000)
    cache = CompileCache(directory, max_bytes=10)

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        key, _ = stored(cache, FakeDevice(), ADD, {}, b"e" * 100)
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal compile cache: cannot write {directory}: [Errno 28] No space left on device"]
    assert not cache.path(key).exists()
    assert sorted(p.name for p in directory.iterdir()) == [old.name]  # no temporary file left, nothing evicted
