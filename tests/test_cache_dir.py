"""The cache directory's files (nx_hal.store.maintenance): sizes per
section, clearing only what nx_hal wrote, least-recently-used eviction to the
limit, hits refreshing an entry's age, and the modes of what nx_hal writes.
Entries are in the store's layout (``<section>/<2 hex>/<key>``) and in the
layouts of earlier versions (which eviction and clear still remove)."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nx_hal.errors import ConfigError, InvalidArgumentError
from nx_hal.files import atomic_write
from nx_hal.store import maintenance as cache_files
from nx_hal.store.maintenance import OTHER, SECTIONS, Usage, clear, evict, info

T0 = 1_700_000_000 * 10**9  # an mtime (ns) in the past; entries are aged from it


def key(n: int | str) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def put(path: Path, size: int, age: int | None = None) -> Path:
    """A file of ``size`` bytes; ``age`` (seconds after T0) sets its mtime."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    if age is not None:
        ns = T0 + age * 10**9
        os.utime(path, ns=(ns, ns))
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def at(root: Path, section: str, k: str) -> Path:
    """Where the store keeps entry ``k`` of ``section``."""
    return root / section / k[:2] / k


def populate(root: Path) -> dict[str, list[Path]]:
    """One or more entries in every section, with distinct sizes: the
    store's, and in executables, stablehlo and probe, earlier layouts'."""
    k = [key(i) for i in range(15)]
    return {
        "executables": [put(at(root, "executables", k[0]), 1000),
                        put(root / "executables" / f"{k[1]}.nxexe", 1500)],  # an earlier layout
        "prepared": [put(at(root, "prepared", k[13]), 61)],
        "stablehlo": [put(at(root, "stablehlo", k[8]), 800),
                      put(root / "stablehlo" / k[2][:2] / f"{k[2]}.module", 700),  # an earlier pair
                      put(root / "stablehlo" / k[2][:2] / f"{k[2]}.json", 70)],
        "requests": [put(at(root, "requests", k[14]), 42)],
        "verdicts": [put(at(root, "verdicts", k[3]), 33)],
        "compile-verdicts": [put(at(root, "compile-verdicts", k[4]), 44)],
        "probe": [put(at(root, "probe", k[9]), 99),
                  put(root / "probe" / f"{k[5]}.json", 55), put(root / "probe" / "plugins" / f"{k[6]}.json", 66),
                  put(root / "probe" / f"plugins-{k[7]}.json", 77)],
        "discovery": [put(at(root, "discovery", k[10]), 88), put(at(root, "discovery", k[11]), 89)],
    }


def others(root: Path) -> list[Path]:
    """Files nx_hal did not write there: never entries."""
    return [
        put(root / "README", 11),                                  # at the top
        put(root / "executables" / "notes.txt", 12),               # another name in a section
        put(root / "stablehlo" / "zz" / f"{key('z')}.module", 13),  # not a shard's name
        put(root / "mine" / "deep" / "file.bin", 14),              # another directory
    ]


# ---------------------------------------------------------------- info


def test_info_counts_each_section_exactly(root: Path) -> None:
    made = populate(root)
    other = others(root)
    found = info(root, max_bytes=12345)
    for section, files in made.items():
        assert found.sections[section] == Usage(len(files), sum(p.stat().st_size for p in files)), section
    assert found.sections[OTHER] == Usage(len(other), 11 + 12 + 13 + 14)
    assert list(found.sections) == [*SECTIONS, OTHER]
    everything = [p for p in root.rglob("*") if p.is_file()]
    assert found.total == Usage(len(everything), sum(p.stat().st_size for p in everything))
    assert found.managed == Usage(found.total.files - 4, found.total.bytes - 50)
    data = found.to_dict()
    assert data["max_bytes"] == 12345 and data["cache_dir"] == str(root)
    assert data["sections"]["stablehlo"] == {"files": 3, "bytes": 1570}
    assert data["sections"]["discovery"] == {"files": 2, "bytes": 177}
    assert data["total"] == {"files": found.total.files, "bytes": found.total.bytes}
    assert "stablehlo" in str(found) and "limit:" in str(found)


def test_info_of_missing_directory_is_empty(root: Path) -> None:
    found = info(root)
    assert found.total == Usage() and set(found.sections) == {*SECTIONS, OTHER}
    assert "discovery" in SECTIONS


def test_info_counts_links_without_following_them(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    put(outside / f"{key(1)}.json", 5000)
    (root / "verdicts").mkdir(parents=True)
    (root / "verdicts" / key(1)[:2]).symlink_to(outside)  # a shard that is a link
    (root / "probe").mkdir()
    (root / "probe" / f"{key(2)}.json").symlink_to(outside / f"{key(1)}.json")
    at(root, "discovery", key(3)).parent.mkdir(parents=True)
    at(root, "discovery", key(3)).symlink_to(outside / f"{key(1)}.json")  # an entry that is a link
    found = info(root)
    assert found.sections["verdicts"] == Usage() and found.sections["probe"] == Usage()
    assert found.sections["discovery"] == Usage()
    assert found.sections[OTHER].files == 3 and found.sections[OTHER].bytes < 5000  # the links themselves


# ---------------------------------------------------------------- clear


def test_clear_removes_entries_only(root: Path, tmp_path: Path) -> None:
    made = populate(root)
    other = others(root)
    beside = put(tmp_path / "unrelated.nxexe", 9)  # in cache_dir's parent, named like an entry
    outside = put(tmp_path / "outside" / f"{key(9)}.nxexe", 21)
    (root / "executables" / f"{key(10)}.nxexe").symlink_to(outside)
    at(root, "executables", key(12)).parent.mkdir()
    at(root, "executables", key(12)).symlink_to(outside)  # in the store's layout too
    (root / "stablehlo" / key(11)[:2]).symlink_to(tmp_path / "outside")  # a shard linking out
    put(tmp_path / "outside" / f"{key(11)}.module", 22)
    before = info(root)

    removed = clear(root)
    assert removed.total == before.managed
    assert {s: u for s, u in removed.sections.items()} == {s: before.sections[s] for s in SECTIONS}
    assert removed.to_dict()["removed"] == before.managed.to_dict()
    for files in made.values():
        assert not any(p.exists() for p in files)
    assert all(p.exists() for p in other)
    assert beside.read_bytes() == b"x" * 9
    assert outside.read_bytes() == b"x" * 21 and (tmp_path / "outside" / f"{key(11)}.module").exists()
    assert (root / "executables" / f"{key(10)}.nxexe").is_symlink()  # neither followed nor removed
    assert at(root, "executables", key(12)).is_symlink()
    after = info(root)
    assert after.managed == Usage() and after.sections[OTHER] == before.sections[OTHER]
    assert clear(root).total == Usage()  # nothing left to remove
    # Empty shards are gone; the sections stay, as do directories not nx_hal's.
    assert not list((root / "verdicts").iterdir()) and not list((root / "compile-verdicts").iterdir())
    assert not list((root / "discovery").iterdir())
    assert (root / "executables").is_dir() and (root / "stablehlo" / "zz").is_dir()
    assert at(root, "executables", key(12)).parent.is_dir()  # holds a link: not empty, kept
    assert not (root / "probe" / "plugins").exists()


def test_clear_some_sections(root: Path) -> None:
    made = populate(root)
    removed = clear(root, ["verdicts", "probe"])
    assert set(removed.sections) == {"verdicts", "probe"}
    assert not any(p.exists() for p in made["verdicts"] + made["probe"])
    assert all(p.exists() for p in made["executables"] + made["stablehlo"] + made["compile-verdicts"]
               + made["discovery"])
    assert set(clear(root, ["discovery"]).sections) == {"discovery"}
    assert not any(p.exists() for p in made["discovery"]) and all(p.exists() for p in made["executables"])
    with pytest.raises(InvalidArgumentError, match="unknown cache section 'other'.*executables"):
        clear(root, ["other"])


def test_clear_leaves_writes_in_progress(root: Path) -> None:
    fresh = put(root / "executables" / "tmpabc123.tmp", 100)
    stale = put(root / "stablehlo" / "ab" / f".{key(1)}.module.xyz.tmp", 200, age=0)  # long ago
    k = key(2)
    writing = put(root / "probe" / k[:2] / f".{k}.0123456789abcdef.tmp", 300)  # the store's, in progress
    k = key(3)
    left = put(root / "discovery" / k[:2] / f".{k}.0123456789abcdef.tmp", 400, age=0)  # the store's, long ago
    assert info(root).sections["executables"] == Usage(1, 100)
    assert info(root).sections["probe"] == Usage(1, 300)
    removed = clear(root)
    assert fresh.exists() and not stale.exists()
    assert writing.exists() and not left.exists()
    assert removed.total == Usage(2, 600)


def test_clear_refuses_a_directory_that_looks_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home" / "me"
    put(home / "executables" / f"{key(1)}.nxexe", 10)
    monkeypatch.setenv("HOME", str(home))
    for wrong in (Path("/"), home, home.parent, tmp_path / "home" / "me" / ".." / "me"):
        with pytest.raises(ConfigError, match="refusing"):
            clear(wrong)
        with pytest.raises(ConfigError, match="refusing"):
            evict(wrong, 1)
    assert (home / "executables" / f"{key(1)}.nxexe").exists()
    put(tmp_path / "file", 1)
    with pytest.raises(ConfigError, match="not a directory"):
        clear(tmp_path / "file")
    assert clear(tmp_path / "missing").total == Usage()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory another user owns")
def test_clear_refuses_another_users_directory(root: Path) -> None:
    made = populate(root)
    os.chown(root, 12345, 12345)
    with pytest.raises(ConfigError, match="owned by uid 12345"):
        clear(root)
    assert all(p.exists() for files in made.values() for p in files)
    assert info(root).managed.files == sum(len(files) for files in made.values())  # reading is fine


# ---------------------------------------------------------------- eviction


def aged(root: Path) -> list[list[Path]]:
    """Five entries of 100 bytes, oldest first; the stablehlo one is a pair
    (60 + 40 bytes) of different mtimes, judged by the newer."""
    k = [key(i) for i in range(5)]
    return [
        [put(root / "executables" / f"{k[0]}.nxexe", 100, age=10)],  # an earlier layout
        [put(root / "stablehlo" / k[1][:2] / f"{k[1]}.module", 60, age=5),
         put(root / "stablehlo" / k[1][:2] / f"{k[1]}.json", 40, age=20)],
        [put(at(root, "verdicts", k[2]), 100, age=30)],
        [put(at(root, "executables", k[3]), 100, age=40)],
        [put(at(root, "discovery", k[4]), 100, age=50)],
    ]


def present(entries: list[list[Path]]) -> list[bool]:
    states = []
    for files in entries:
        exists = [p.exists() for p in files]
        assert len(set(exists)) == 1, "an entry's files are removed together"
        states.append(exists[0])
    return states


@pytest.mark.parametrize(("limit", "kept"), [
    (500, [True] * 5),                      # exactly at the limit: nothing goes
    (499, [False, True, True, True, True]),  # one byte over: the oldest goes, and only it
    (400, [False, True, True, True, True]),
    (399, [False, False, True, True, True]),
    (100, [False, False, False, False, True]),
    (99, [False] * 5),                       # smaller than any entry
    (0, [True] * 5),                         # no limit
])
def test_evict_oldest_first_to_the_limit(root: Path, limit: int, kept: list[bool]) -> None:
    entries = aged(root)
    junk = others(root)
    removed = evict(root, limit)
    assert present(entries) == kept
    assert removed.total.bytes == 100 * kept.count(False)
    assert all(p.exists() for p in junk)  # not entries: neither counted nor removed
    assert limit == 0 or info(root).managed.bytes <= limit


def test_evict_leaves_writes_in_progress(root: Path) -> None:
    entries = aged(root)
    fresh = put(root / "executables" / "tmpnew.tmp", 1000)
    evict(root, 300)
    assert present(entries) == [False, False, True, True, True] and fresh.exists()


def test_evict_negative_limit(root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=">= 0"):
        evict(root, -1)


def test_concurrent_evictions(root: Path) -> None:
    files = [put(at(root, "executables", key(i)), 10, age=i) for i in range(300)]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            evict(root, 1000)
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [p.exists() for p in files] == [False] * 200 + [True] * 100


def test_touch_refreshes_age(root: Path) -> None:
    entries = aged(root)
    cache_files.touch(entries[0][0])  # the oldest, used just now
    evict(root, 400)
    assert present(entries) == [True, False, True, True, True]


def test_conversion_cache_hit_refreshes_and_store_evicts(tmp_path: Path) -> None:
    from nx_hal.onnx import convert
    from nx_hal.store import Store

    root = tmp_path / "cache"
    store = Store(root, max_bytes=0)
    convert._cache_write(store, key("a"), b"A" * 400, {"n": 1})
    convert._cache_write(store, key("b"), b"B" * 400, {"n": 2})
    for n, name in enumerate(("a", "b")):
        path = at(root, "stablehlo", key(name))
        os.utime(path, ns=(T0 + n, T0 + n))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for folder in (root, root / "stablehlo"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    hit = convert._cache_read(store, key("a"))  # the older one, used
    assert hit == (b"A" * 400, {"n": 1})
    size = info(root).managed.bytes
    store.max_bytes = size
    convert._cache_write(store, key("c"), b"C" * 400, {"n": 3})  # one entry must go
    assert convert._cache_read(store, key("b")) is None
    assert convert._cache_read(store, key("a")) is not None and convert._cache_read(store, key("c")) is not None
    assert not at(root, "stablehlo", key("b")).exists()
    assert info(root).managed.bytes <= size


# ---------------------------------------------------------------- the compile cache


def test_compile_cache_stays_under_a_tiny_limit(tmp_path: Path) -> None:
    import numpy as np

    from nx_hal.config import load_config
    from nx_hal.plugin import PluginSpec
    from nx_hal.registry import Registry
    from tests.cbuild import build_fixture

    lib = build_fixture("hostmem", tmp_path / "libs")
    root = tmp_path / "cache"
    # One entry's size, measured with no limit.
    reg = Registry(load_config({"cache_dir": str(root), "cache_max_bytes": 0}, no_config=True, cwd=tmp_path))
    dev = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib))).devices[0]
    dev.compile(b"add f32 4", "fixture-elementwise")
    (entry,) = (root / "executables").glob("*/*")
    one = entry.stat().st_size
    clear(root)

    limit = one + one // 2  # room for one entry, not two
    reg = Registry(load_config({"cache_dir": str(root), "cache_max_bytes": limit}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    dev = rec.devices[0]
    cache = dev.link.compile_cache
    assert cache is not None and cache.store.max_bytes == limit
    for program in (b"add f32 4", b"mul f32 4", b"neg f32 4"):
        dev.compile(program, "fixture-elementwise")
        assert info(root).managed.bytes <= limit
    assert info(root).sections["executables"].files == 1
    exe = dev.compile(b"neg f32 4", "fixture-elementwise")  # the newest stayed: a hit
    assert cache.hits == 1
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exe(x)[0].to_numpy(), -x)
    dev.compile(b"add f32 4", "fixture-elementwise")  # evicted: compiled again
    assert cache.hits == 1 and cache.misses == 4


def test_compile_cache_hit_keeps_an_older_entry(tmp_path: Path) -> None:
    from nx_hal.programs import Program
    from tests.test_cache import make_device

    dev = make_device(tmp_path)
    root = tmp_path / "cache"
    cache = dev.link.compile_cache
    assert cache is not None
    cache.store.max_bytes = 0
    add, mul = (at(root, "executables", cache.key(dev, Program("fixture-elementwise", p), {}))
                for p in (b"add f32 4", b"mul f32 4"))
    dev.compile(b"add f32 4", "fixture-elementwise")
    dev.compile(b"mul f32 4", "fixture-elementwise")
    os.utime(add, ns=(T0, T0))  # stored first, long ago
    os.utime(mul, ns=(T0 + 10**9, T0 + 10**9))
    dev.compile(b"add f32 4", "fixture-elementwise")  # a hit: used just now
    assert cache.hits == 1 and add.stat().st_mtime_ns > mul.stat().st_mtime_ns
    # One byte over: one entry goes, the least recently used (the other
    # files, compile verdicts, are newer than either).
    mul_size = mul.stat().st_size
    removed = evict(root, info(root).managed.bytes - 1)
    assert removed.total == Usage(1, mul_size) and set(removed.sections) == {"executables"}
    assert add.exists(), "the entry used last survives, though stored first"
    assert not mul.exists(), "the entry used least recently is evicted"
    assert dev.compile(b"add f32 4", "fixture-elementwise") is not None and cache.hits == 2


# ---------------------------------------------------------------- file modes


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_atomic_write_modes(tmp_path: Path, umask: None) -> None:
    private = tmp_path / "entry"
    atomic_write(private, b"1")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # a cache entry: private
    public = tmp_path / "out.mlir"
    atomic_write(public, b"1", mode=0o666)
    assert stat.S_IMODE(public.stat().st_mode) == 0o644  # as open(..., "w") under umask 022
    os.chmod(public, 0o640)
    atomic_write(public, b"2", mode=0o666)
    assert stat.S_IMODE(public.stat().st_mode) == 0o640 and public.read_bytes() == b"2"  # kept, as open() does
    os.umask(0o077)
    other = tmp_path / "other.mlir"
    atomic_write(other, b"1", mode=0o666)
    assert stat.S_IMODE(other.stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))


def test_convert_output_is_an_ordinary_file(tmp_path: Path, umask: None, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import torch_mlir  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"needs torch-mlir: {exc}")
    pytest.importorskip("onnx", reason="needs onnx")
    from nx_hal.onnx.convert import convert_cli
    from tests.onnx_models import mlp

    source = tmp_path / "model.onnx"
    source.write_bytes(mlp(2))
    out = tmp_path / "model.mlir"
    root = tmp_path / "cache"
    convert_cli(source, out, cache_dir=root, cache_max_bytes=0)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert "stablehlo.dot" in out.read_text() or "func.func" in out.read_text()
    # The cache entry it made stays private.
    entries = [p for p in (root / "stablehlo").rglob("*") if p.is_file()]
    assert len(entries) == 1 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in entries)
    assert info(root).sections["stablehlo"].files == 1
    # A limit below the entry's size: the store evicts it at once.
    clear(root)
    convert_cli(source, out, cache_dir=root, cache_max_bytes=1)
    assert info(root).managed == Usage()
