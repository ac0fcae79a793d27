"""The persistent compile cache (nx_hal.cache over the store's "executables"
section): hit on the second compile, keyed by program, options and compat
key, and never trusting a stale, corrupt, copied or planted entry."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import struct
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
from nx_hal.store import Store
from tests.cbuild import build_fixture
from tests.store_util import HEADER, LENGTHS_AT, TAG_AT, entries, entry_path, foreign_put, split


def make_device(tmp_path: Path, **options: object) -> Device:
    lib = build_fixture("hostmem", tmp_path / "libs")
    overrides = {"cache_dir": str(tmp_path / "cache"), "plugins": {"fixture-hostmem": options}}
    reg = Registry(load_config(overrides, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.state == "loaded", rec.reason
    return rec.devices[0]


def test_second_compile_hits(tmp_path: Path) -> None:
    dev = make_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    dev.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses) == (0, 1)
    exe = dev.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses) == (1, 1)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)
    dev.compile(b"mul f32 4", "fixture-elementwise")  # another program: a miss
    assert cache.misses == 2
    assert len(entries(tmp_path / "cache", "executables")) == 2
    dev.compile(b"add f32 4", "fixture-elementwise", cache=False)
    assert (cache.hits, cache.misses) == (1, 2)


def test_other_compat_key_recompiles(tmp_path: Path) -> None:
    dev = make_device(tmp_path)
    dev.compile(b"add f32 4", "fixture-elementwise")
    (entry,) = entries(tmp_path / "cache", "executables")
    other = make_device(tmp_path, compat_key="another-sdk-version")
    assert other.compat_key != dev.compat_key
    cache = other.link.compile_cache
    assert cache is not None
    key = cache.key(other, Program("fixture-elementwise", b"add f32 4"), {})
    target = entry_path(tmp_path / "cache", "executables", key)
    assert target != entry  # same program, other compat key: another entry
    # The old key's file copied under the new key's name: its authenticator
    # names the old key, so the store refuses it before the plugin sees it.
    target.parent.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(entry, target)
    x = np.ones(4, np.float32)
    exe = other.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 1)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)
    # The old build's executable in a valid entry under the new key (what
    # this user's own nx_hal could have stored): the plugin's compat check
    # refuses it, and the recompiled executable replaces it.
    cache.store.put("executables", key, split(entry.read_bytes())[2], {"plugin": other.plugin})
    exe = other.compile(b"add f32 4", "fixture-elementwise")
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 2)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)
    again = other.compile(b"add f32 4", "fixture-elementwise")
    assert cache.hits == 1  # the rewritten entry is good
    np.testing.assert_allclose(again(x, 3 * x)[0].to_numpy(), 4 * x)  # and what the hit gives runs


def test_corrupt_entry_recompiles(tmp_path: Path) -> None:
    dev = make_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    dev.compile(b"neg f32 3", "fixture-elementwise")
    (entry,) = entries(tmp_path / "cache", "executables")
    entry.write_bytes(b"garbage")
    exe = dev.compile(b"neg f32 3", "fixture-elementwise")
    np.testing.assert_allclose(exe(np.ones(3, np.float32))[0].to_numpy(), -np.ones(3))
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 1)
    dev.compile(b"neg f32 3", "fixture-elementwise")  # replaced by a good entry
    assert cache.hits == 1


def test_cache_disabled(tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    reg = Registry(load_config({"compile_cache": False}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.link is not None and rec.link.compile_cache is None


# --- CompileCache on its own: keys, entries, the store ------------------------
# A stand-in device and executable: the cache only asks a device for its
# plugin, compat key and _deserialize, and an executable for _serialize()
# and its device.


class FakeDevice:
    def __init__(self, plugin: str = "fake", compat_key: str = "sdk-1.0") -> None:
        self.plugin = plugin
        self.compat_key = compat_key
        self.loaded: list[bytes] = []
        self.vouched: list[bool] = []

    def _deserialize(self, data: bytes, *, authenticated: bool = False) -> FakeExecutable:
        self.loaded.append(bytes(data))
        self.vouched.append(authenticated)
        if bytes(data).startswith(b"refused"):
            raise InvalidArgumentError("digest mismatch", plugin=self.plugin)
        return FakeExecutable(bytes(data), self)


class FakeExecutable:
    def __init__(self, data: bytes, device: FakeDevice | None = None) -> None:
        self.data = data
        self.device = device or FakeDevice()

    def _serialize(self) -> bytes:
        return self.data


def as_device(fake: FakeDevice) -> Device:
    return cast("Device", fake)


def as_exe(fake: FakeExecutable) -> Executable:
    return cast("Executable", fake)


ADD = Program("fixture-elementwise", b"add f32 4")
META = b'{"plugin": "fake"}'  # what the cache records with each entry (json.dumps, sorted keys)
AUTH = "its authenticator does not check (not written by this user's nx_hal under this key, or damaged)"


def new_cache(root: Path, max_bytes: int = 0) -> CompileCache:
    return CompileCache(Store(root, max_bytes=max_bytes))


def stored(cache: CompileCache, device: FakeDevice, program: Program, options: dict[str, object],
           data: bytes) -> str:
    """Stores ``data`` as ``program``'s executable; its key."""
    key = cache.key(as_device(device), program, options)
    cache.store_executable(key, as_exe(FakeExecutable(data, device)))
    return key


def path_of(cache: CompileCache, key: str) -> Path:
    return entry_path(cache.store.root, "executables", key)


def test_key_names_device_program_and_options() -> None:
    dev = as_device(FakeDevice())
    cache = new_cache(Path("unused"))
    key = cache.key(dev, ADD, {"opt_level": 2})
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert cache.key(as_device(FakeDevice()), Program("fixture-elementwise", b"add f32 4"), {"opt_level": 2}) == key
    others = [
        cache.key(as_device(FakeDevice(plugin="other")), ADD, {"opt_level": 2}),
        cache.key(as_device(FakeDevice(compat_key="sdk-1.1")), ADD, {"opt_level": 2}),
        cache.key(dev, Program("stablehlo", ADD.data), {"opt_level": 2}),
        cache.key(dev, Program(ADD.format, b"mul f32 4"), {"opt_level": 2}),
        cache.key(dev, Program(ADD.format, ADD.data, b"weights"), {"opt_level": 2}),
        cache.key(dev, Program(ADD.format, ADD.data, b""), {"opt_level": 2}),  # empty extra is not none
        cache.key(dev, ADD, {"opt_level": 3}),  # one program, two option sets: two entries
        cache.key(dev, ADD, {"opt_level": 2, "fast_math": True}),
        cache.key(dev, ADD, {}),
    ]
    assert len({key, *others}) == len(others) + 1
    assert not (Path("unused")).exists()  # a key is computed, nothing is made


def test_key_does_not_depend_on_option_order() -> None:
    dev = as_device(FakeDevice())
    cache = new_cache(Path("unused"))
    assert cache.key(dev, ADD, {"a": 1, "b": "x"}) == cache.key(dev, ADD, {"b": "x", "a": 1})
    assert cache.key(dev, ADD, {"a": 1}) != cache.key(dev, ADD, {"a": 2})


def test_hit_returns_the_stored_executable(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key = stored(cache, dev, ADD, {"opt_level": 2}, b"the executable")
    path = path_of(cache, key)
    assert entries(tmp_path / "cache", "executables") == [path]
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert split(path.read_bytes())[1:] == (META, b"the executable")
    exe = cache.load(as_device(dev), key)
    assert exe is not None
    assert cast("FakeExecutable", exe).data == b"the executable"
    assert dev.loaded == [b"the executable"]
    assert dev.vouched == [True]  # the store checked its HMAC: the plugin may skip its digest
    assert (cache.hits, cache.misses, cache.rejected) == (1, 0, 0)


def test_options_are_part_of_the_entry(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key2 = stored(cache, dev, ADD, {"opt_level": 2}, b"built at O2")
    key3 = stored(cache, dev, ADD, {"opt_level": 3}, b"built at O3")
    assert key2 != key3
    o2, o3 = cache.load(as_device(dev), key2), cache.load(as_device(dev), key3)
    assert (cast("FakeExecutable", o2).data, cast("FakeExecutable", o3).data) == (b"built at O2", b"built at O3")
    # O2's entry put in O3's place: its authenticator names O2's key, a miss.
    shutil.copyfile(path_of(cache, key2), path_of(cache, key3))
    assert cache.load(as_device(dev), key3) is None
    assert (cache.hits, cache.misses, cache.rejected) == (2, 1, 1)
    assert dev.loaded == [b"built at O2", b"built at O3"]  # the copy never reached the plugin


def test_missing_entry_is_a_miss_not_a_rejection(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    assert cache.load(as_device(dev), "0" * 64) is None
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 0)
    assert dev.loaded == []


def test_hit_marks_the_entry_used(tmp_path: Path) -> None:
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key = stored(cache, dev, ADD, {}, b"exe")
    os.utime(path_of(cache, key), (1_000_000, 1_000_000))
    assert cache.load(as_device(dev), key) is not None
    assert path_of(cache, key).stat().st_mtime > 1_000_000 + 86400


def _lengths(entry: bytes, meta: int, payload: int) -> bytes:
    return entry[:LENGTHS_AT] + struct.pack("<IQ", meta, payload) + entry[HEADER:]


def _flip(entry: bytes, at: int) -> bytes:
    return entry[:at] + bytes([entry[at] ^ 0x01]) + entry[at + 1:]


SIZE = "its size is not the one its header records"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda e: e[:-1], SIZE),
        (lambda e: e + b"\0", SIZE),
        (lambda e: e[:HEADER - 1], "shorter than an entry's header"),
        (lambda e: b"", "shorter than an entry's header"),
        (lambda e: b"NXHALCE0" + e[8:], "not an entry of this nx_hal version"),
        (lambda e: _lengths(e, len(META), len(e)), SIZE),  # claims more than the file holds
        (lambda e: _lengths(e, 2**32 - 1, 2**64 - 1), SIZE),
        (lambda e: _lengths(e, len(META) + 1, len(e) - HEADER - len(META) - 1), AUTH),  # same size, other split
        (lambda e: _flip(e, TAG_AT), AUTH),
        (lambda e: e.replace(b'"fake"', b'"evil"'), AUTH),
        (lambda e: _flip(e, len(e) - 1), AUTH),
    ],
    ids=["cut", "longer", "short", "empty", "magic", "claims-more", "claims-huge", "split", "tag", "meta",
         "payload"],
)
def test_entry_that_does_not_match_is_rejected(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                               make: Callable[[bytes], bytes], reason: str) -> None:
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key = stored(cache, dev, ADD, {}, b"an executable")
    path = path_of(cache, key)
    path.write_bytes(make(path.read_bytes()))
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key) is None
    assert [r.getMessage() for r in caplog.records] == [f"nx_hal cache: ignoring {path}: {reason}"]
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 1)
    assert dev.loaded == []  # never handed to the plugin
    # The next compile's store replaces it with a good entry.
    assert cache.store_executable(key, as_exe(FakeExecutable(b"an executable", dev)))
    assert cache.load(as_device(dev), key) is not None


def test_entry_of_another_user_is_rejected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An entry made as this user's nx_hal makes them, but under another
    user's key (a planted one, valid in every other way), is a miss."""
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key = cache.key(as_device(dev), ADD, {})
    path = foreign_put(tmp_path / "cache", "executables", key, b"planted", {"plugin": "fake"}, tmp_path / "other")
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key) is None
    assert [r.getMessage() for r in caplog.records] == [f"nx_hal cache: ignoring {path}: {AUTH}"]
    assert dev.loaded == [] and (cache.misses, cache.rejected) == (1, 1)


def test_entry_refused_by_the_plugin_is_rejected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key = stored(cache, dev, ADD, {}, b"refused executable")
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal compile cache: ignoring entry {key}: the plugin refused it: "
        "[fake] INVALID_ARGUMENT: digest mismatch"]
    assert (cache.hits, cache.misses, cache.rejected) == (0, 1, 1)


def test_empty_executable_is_a_whole_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # An empty executable makes an entry of the header and its metadata
    # only: a whole entry, handed to the plugin; one byte less is not.
    dev = FakeDevice()
    cache = new_cache(tmp_path / "cache")
    key = stored(cache, dev, ADD, {}, b"")
    path = path_of(cache, key)
    entry = path.read_bytes()
    assert len(entry) == HEADER + len(META)
    exe = cache.load(as_device(dev), key)
    assert exe is not None and cast("FakeExecutable", exe).data == b""
    path.write_bytes(entry[:-1])
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert cache.load(as_device(dev), key) is None
    assert [r.getMessage() for r in caplog.records] == [f"nx_hal cache: ignoring {path}: {SIZE}"]
    assert dev.loaded == [b""]


def test_missing_parents_are_created_private(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "cache"
    cache = new_cache(root)
    assert cache.store.usable()
    assert root.is_dir() and root.stat().st_mode & 0o777 == 0o700
    key = stored(cache, FakeDevice(), ADD, {}, b"exe")
    path = path_of(cache, key)
    assert path.is_file()
    for folder in (root / "executables", path.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_directory_that_cannot_be_made_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = new_cache(blocker / "cache")
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        assert not cache.store.usable()
        stored(cache, FakeDevice(), ADD, {}, b"exe")  # nothing stored, nothing raised
        assert cache.load(as_device(FakeDevice()), "0" * 64) is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages  # one warning per store
    assert messages[0].startswith(f"nx_hal cache: not using {blocker / 'cache'}: Not a directory; "
                                  "working without a cache")
    assert (cache.hits, cache.misses) == (0, 1)
    assert blocker.read_text() == "not a directory"


def test_executable_that_cannot_serialize_is_not_stored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Unserializable(FakeExecutable):
        def __init__(self, error: Exception) -> None:
            super().__init__(b"")
            self.error = error

        def _serialize(self) -> bytes:
            raise self.error

    cache = new_cache(tmp_path / "cache")
    key = cache.key(as_device(FakeDevice()), ADD, {})
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        assert not cache.store_executable(key, as_exe(Unserializable(UnimplementedError("no serialize",
                                                                                      plugin="fake"))))
        assert caplog.records == []  # a plugin without serialize: nothing to say
        assert not cache.store_executable(key, as_exe(Unserializable(InternalError("out of disk", plugin="fake"))))
    assert [r.getMessage() for r in caplog.records] == [
        "nx_hal compile cache: not storing: [fake] INTERNAL: out of disk"]
    assert not path_of(cache, key).exists()


def _old_entry(root: Path, name: str, size: int) -> Path:
    """An entry of an earlier nx_hal's layout (``executables/<key>.nxexe``):
    never read, but evicted like any other."""
    directory = root / "executables"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    root.chmod(0o700)
    path = directory / f"{name * 64}.nxexe"
    path.write_bytes(b"x" * size)
    os.utime(path, (1_000_000, 1_000_000))
    return path


def test_store_trims_the_cache_dir(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    old = _old_entry(root, "a", 1000)
    entry_size = HEADER + len(META) + 100
    cache = new_cache(root, max_bytes=entry_size)
    key = stored(cache, FakeDevice(), ADD, {}, b"e" * 100)
    assert not old.exists()  # least recently used: removed to stay under the limit
    assert path_of(cache, key).stat().st_size == entry_size  # the limit itself is not exceeded: kept


def test_small_entries_do_not_trim(tmp_path: Path) -> None:
    # Verdicts and records are small: only writers of executables and
    # conversions pay for a scan of the whole root.
    root = tmp_path / "cache"
    old = _old_entry(root, "a", 1000)
    store = Store(root, max_bytes=10)
    assert store.put_json("verdicts", "b" * 64, {"reason": "ok"})
    assert old.exists() and store.get_json("verdicts", "b" * 64) == {"reason": "ok"}
    assert store.put("stablehlo", "c" * 64, b"m" * 10)
    assert not old.exists()


def test_failed_write_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    old = _old_entry(root, "a", 1000)
    cache = new_cache(root, max_bytes=10)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with caplog.at_level(logging.INFO, logger="nx_hal"):
        key = stored(cache, FakeDevice(), ADD, {}, b"e" * 100)
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal cache: cannot write in {root}: No space left on device"]
    assert not path_of(cache, key).exists()
    assert list(path_of(cache, key).parent.iterdir()) == []  # no temporary file left
    assert old.exists()  # nothing evicted
