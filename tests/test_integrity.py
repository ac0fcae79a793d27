"""Integrity before any vendor call (issue #11): corrupted or truncated
serialized executables are refused by every installed plugin, never crash
the process; compile cache entries are bound to their key and program; and a
cache directory others can write to is not used.

A serialized executable is native code, so nx_hal loads only blobs sealed by
this user's key (issue #29) unless the caller says it trusts them: the
mutants here are the plugin's own bytes, unsealed, so each is first refused
without ``trusted=True`` (before the plugin sees it), then loaded with it to
test the plugin's own digest check.

The fuzzing runs each plugin in a worker process that loads and runs mutant
after mutant and reports each outcome as it goes: a worker killed by a
signal counts a crash for the mutant it was on, and a new worker goes on
from the next one."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.plugin import PluginSpec
from nx_hal.programs import Program
from nx_hal.registry import Registry
from tests.cbuild import build_fixture
from tests.store_util import entries, entry_path, foreign_put, split
from tests.test_cache import make_device

ROOT = Path(__file__).resolve().parent.parent
MUTANTS_PER_PLUGIN = 300
SEED = 20261126
ADD_MLIR = (ROOT / "plugins" / "tpu" / "tests" / "programs" / "add.mlir").read_bytes()


def _onnx_add() -> bytes:
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    vi = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [4]) for n in ("x", "y", "z")]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", vi[:2], vi[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


@dataclass
class Target:
    """How a worker finds the device: a fixture library or an installed plugin."""

    name: str
    selector: str | None  # an installed plugin's device
    library: str | None  # a fixture library registered as fixture-hostmem
    program: bytes
    format: str


def _device(target: dict[str, Any], cache_dir: str) -> Device:
    if target["library"] is not None:
        overrides = {"cache_dir": cache_dir, "compile_cache": False}
        reg = Registry(load_config(overrides, no_config=True, cwd=Path(cache_dir)))
        rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=Path(target["library"]))))
        assert rec.state == "loaded", rec.reason
        return rec.devices[0]
    nx_hal.configure({"compile_cache": False}, no_config=True)
    return nx_hal.device(target["selector"])


def _worker(spec_path: str, start: int) -> None:
    """Loads and runs mutants from ``start`` on, printing ``index outcome`` for each."""
    spec = json.loads(Path(spec_path).read_text())
    dev = _device(spec["target"], spec["cache_dir"])
    x = np.arange(4, dtype=np.float32)
    reached: list[int] = []
    plugin_load = Device._deserialize

    def spy(self: Device, data: Any, *, authenticated: bool = False, options: dict[str, object] | None = None) -> Any:
        reached.append(len(data))
        return plugin_load(self, data, authenticated=authenticated, options=options)

    Device._deserialize = spy  # type: ignore[method-assign]
    for index in range(start, len(spec["mutants"])):
        data = Path(spec["mutants"][index]).read_bytes()
        reached.clear()
        try:
            dev.load_executable(data)
        except nx_hal.InvalidArgumentError as exc:
            if "trusted=True" not in exc.message or reached:
                print(index, "UNTRUSTED_REACHED_THE_PLUGIN", flush=True)
                continue
        else:
            print(index, "UNTRUSTED_LOADED", flush=True)
            continue
        try:
            exe = dev.load_executable(data, trusted=True)
            (out,) = exe(x, x)
            outcome = "OK" if np.array_equal(out.to_numpy(), 2 * x) else "WRONG"
        except nx_hal.NxHalError as exc:
            outcome = exc.code
        except Exception as exc:  # noqa: BLE001 - any non-crash failure is an outcome to report
            outcome = f"PYTHON:{type(exc).__name__}"
        print(index, outcome, flush=True)


def _run_mutants(target: Target, blobs: list[bytes], tmp_path: Path) -> tuple[list[str], int]:
    """Each blob's outcome ("INVALID_ARGUMENT", ..., "CRASH:<signal>") and how many workers ran."""
    paths = []
    for i, blob in enumerate(blobs):
        path = tmp_path / f"m{i:04d}.bin"
        path.write_bytes(blob)
        paths.append(str(path))
    spec = {"target": target.__dict__ | {"program": None}, "mutants": paths,
            "cache_dir": str(tmp_path / "cache")}
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    outcomes: list[str] = []
    workers = 0
    while len(outcomes) < len(blobs):
        workers += 1
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from tests.test_integrity import _worker; "
             "_worker(sys.argv[1], int(sys.argv[2]))", str(spec_path), str(len(outcomes))],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
        for line in done.stdout.splitlines():
            index, _, outcome = line.partition(" ")
            if index.isdigit() and int(index) == len(outcomes):
                outcomes.append(outcome)
        if len(outcomes) < len(blobs):
            if done.returncode == 0:
                raise AssertionError(f"worker stopped early: {done.stderr[-2000:]}")
            outcomes.append(f"CRASH:{done.returncode}")
    return outcomes, workers


def _targets(tmp_path: Path) -> list[Target]:
    found = [Target("fixture-hostmem", None, str(build_fixture("hostmem", tmp_path / "libs")),
                    b"add f32 4", "fixture-elementwise")]
    nx_hal.configure({"compile_cache": False}, no_config=True)
    loaded = {name for name, rec in nx_hal.registry().records.items() if rec.state == "loaded"}
    if "tpu" in loaded and nx_hal.is_available("tpu:cpu"):
        found.append(Target("tpu", "tpu:cpu", None, ADD_MLIR, "stablehlo"))
    if "npu" in loaded and nx_hal.is_available("npu:cpu"):
        found.append(Target("npu", "npu:cpu", None, _onnx_add(), "onnx"))
    return found


def _serialized(target: Target, tmp_path: Path) -> tuple[bytes, bytes]:
    """The plugin's own bytes (unsealed: what its digest check reads) and the compat key."""
    dev = _device(target.__dict__, str(tmp_path / "cache"))
    exe = dev.compile(target.program, target.format, cache=False)
    assert isinstance(exe, nx_hal.Executable)  # static shapes: one executable
    return exe._serialize(), dev.compat_key.encode()


def _mutants(blob: bytes, key: bytes, rng: np.random.Generator) -> list[tuple[int, bytes]]:
    """(first changed offset, bytes): every header offset through the key and
    64 bytes past it once, then random offsets up to MUTANTS_PER_PLUGIN, and
    at least a quarter of that: the header's length is the device's compat
    key's, which differs between machines (OpenVINO's CPU reports its
    capabilities in it: 177 bytes on one machine took the header past 300)."""
    header_end = min(len(blob), blob.index(key) + len(key) + 64)
    offsets = list(range(header_end))
    extra = max(MUTANTS_PER_PLUGIN - len(offsets), MUTANTS_PER_PLUGIN // 4)
    offsets += [int(o) for o in rng.integers(0, len(blob), extra)]
    out = []
    for offset in offsets:
        data = bytearray(blob)
        count = int(rng.integers(1, 5))
        for at in range(offset, min(len(blob), offset + count)):
            data[at] ^= int(rng.integers(1, 256))  # never 0: the byte always changes
        out.append((offset, bytes(data)))
    return out


def _truncations(blob: bytes, key: bytes) -> list[bytes]:
    """A cut in every region (magic, fixed fields, key, digest, payload), the
    last byte missing, and one byte too many."""
    key_at = blob.index(key)
    cuts = {0, 1, 4, 8, 12, key_at - 1, key_at, key_at + len(key) // 2, key_at + len(key),
            key_at + len(key) + 1, key_at + len(key) + 16, key_at + len(key) + 40,
            (key_at + len(key) + len(blob)) // 2, len(blob) - 8, len(blob) - 1}
    return [blob[:c] for c in sorted(cuts) if 0 <= c < len(blob)] + [blob + b"\0"]


def test_corrupted_and_truncated_executables_are_refused_without_a_crash(tmp_path: Path) -> None:
    rng = np.random.default_rng(SEED)
    report = {}
    for target in _targets(tmp_path):
        work = tmp_path / target.name
        work.mkdir()
        blob, key = _serialized(target, work)
        key_end = blob.index(key) + len(key)
        mutants = _mutants(blob, key, rng)
        cuts = _truncations(blob, key)
        outcomes, workers = _run_mutants(target, [m for _, m in mutants] + cuts + [blob], work)
        crashes = [o for o in outcomes if o.startswith("CRASH")]
        assert not crashes, (target.name, crashes)
        assert workers == 1
        assert outcomes[-1] == "OK", (target.name, "the unmodified blob must load and run")
        for (offset, _), outcome in zip(mutants, outcomes, strict=False):
            # The key is outside the digest (another build's blob must stay
            # FAILED_PRECONDITION), as are the format version before it and
            # a text format's newline that ends it.
            allowed = {"INVALID_ARGUMENT"} | ({"FAILED_PRECONDITION"} if offset <= key_end else set())
            assert outcome in allowed, (target.name, offset, outcome)
        for cut, outcome in zip(cuts, outcomes[len(mutants):-1], strict=False):
            assert outcome == "INVALID_ARGUMENT", (target.name, len(cut), len(blob), outcome)
        invalid = sum(o == "INVALID_ARGUMENT" for o in outcomes[:len(mutants)])
        report[target.name] = (len(mutants), invalid, len(mutants) - invalid, len(cuts), len(blob))
    print("plugin: mutants, INVALID_ARGUMENT, FAILED_PRECONDITION, truncations, blob bytes:", report)
    assert "fixture-hostmem" in report


# --- The compile cache --------------------------------------------------------


def _fixture_device(tmp_path: Path) -> Device:
    device: Device = make_device(tmp_path)  # the compile-cache tests' fixture device
    return device


def _entry(dev: Device, program: Program) -> Path:
    cache = dev.link.compile_cache
    assert cache is not None
    return entry_path(cache.store.root, "executables", cache.key(dev, program, {}))


def test_cache_swap_attack_is_a_miss(tmp_path: Path) -> None:
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    add = Program("fixture-elementwise", b"add f32 4")
    mul = Program("fixture-elementwise", b"mul f32 4")
    dev.compile(add.data, add.format)
    dev.compile(mul.data, mul.format)
    a_path, b_path = _entry(dev, add), _entry(dev, mul)
    b_path.parent.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(a_path, b_path)  # entry A planted under B's name
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 0)
    x = np.array([1, 2, 3, 4], np.float32)
    exe = dev.compile(mul.data, mul.format)
    np.testing.assert_array_equal(exe(x, x)[0].to_numpy(), x * x)  # B's results, not A's x + x
    assert (cache.hits, cache.misses, cache.rejected) == (0, 3, 1)
    assert b_path.read_bytes() != a_path.read_bytes()  # replaced by B's own entry
    exe = dev.compile(mul.data, mul.format)
    np.testing.assert_array_equal(exe(x, x)[0].to_numpy(), x * x)
    assert (cache.hits, cache.misses) == (1, 3)


def test_cache_entry_of_another_program_under_a_forged_key_is_a_miss(tmp_path: Path) -> None:
    # A's executable in an entry made for B's key, as whoever planted it
    # can make one: valid in every way but its tag, made with another key.
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    add = Program("fixture-elementwise", b"add f32 4")
    mul = Program("fixture-elementwise", b"mul f32 4")
    dev.compile(add.data, add.format)
    payload = split(_entry(dev, add).read_bytes())[2]
    foreign_put(cache.store.root, "executables", cache.key(dev, mul, {}), payload, {"plugin": dev.plugin},
                tmp_path / "another-user")
    x = np.array([1, 2, 3, 4], np.float32)
    exe = dev.compile(mul.data, mul.format)
    np.testing.assert_array_equal(exe(x, x)[0].to_numpy(), x * x)
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 1)


def test_unavailable_entry_is_recompiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    dev.compile(b"neg f32 3", "fixture-elementwise")

    def unavailable(self: Device, data: bytes, **options: object) -> Any:
        raise nx_hal.UnavailableError("the device went away", plugin=self.plugin)

    monkeypatch.setattr(Device, "_deserialize", unavailable)
    exe = dev.compile(b"neg f32 3", "fixture-elementwise")  # not a failed compile
    np.testing.assert_array_equal(exe(np.ones(3, np.float32))[0].to_numpy(), -np.ones(3))
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 1)


def test_corrupted_entry_refused_by_the_plugin_is_recompiled(tmp_path: Path) -> None:
    # A damaged executable inside an entry whose own record is intact (this
    # user's nx_hal stored it so): the plugin's digest refuses it
    # (INVALID_ARGUMENT) and the cache recompiles.
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    prog = Program("fixture-elementwise", b"neg f32 3")
    dev.compile(prog.data, prog.format)
    key = cache.key(dev, prog, {})
    data = bytearray(split(_entry(dev, prog).read_bytes())[2])
    data[-1] ^= 0x01
    with pytest.raises(nx_hal.InvalidArgumentError, match="digest mismatch"):
        dev.load_executable(bytes(data), trusted=True)
    assert cache.store.put("executables", key, bytes(data), {"plugin": dev.plugin})
    exe = dev.compile(prog.data, prog.format)
    np.testing.assert_array_equal(exe(np.ones(3, np.float32))[0].to_numpy(), -np.ones(3))
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 1)


def test_group_writable_cache_dir_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    root = cache.store.root
    root.mkdir(parents=True, exist_ok=True)
    before = entries(root, "executables")
    os.chmod(root, 0o775)
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        x = np.ones(3, np.float32)
        exe = dev.compile(b"neg f32 3", "fixture-elementwise")  # compiles, uncached
        np.testing.assert_array_equal(exe(x)[0].to_numpy(), -x)
        dev.compile(b"neg f32 3", "fixture-elementwise")
    assert entries(root, "executables") == before == []  # nothing written
    assert (cache.hits, cache.misses) == (0, 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once, not per compile
    assert f"not using {root}" in warnings[0] and "group or others may write to it (mode 775)" in warnings[0]
    # A planted entry is not read either, from a root or a section others can write.
    os.chmod(root, 0o700)
    dev.compile(b"neg f32 3", "fixture-elementwise")
    assert len(entries(root, "executables")) == 1
    for folder in (root, root / "executables"):
        os.chmod(folder, 0o777)
        dev.compile(b"neg f32 3", "fixture-elementwise")
        os.chmod(folder, 0o700)
    assert (cache.hits, cache.misses) == (0, 5)
    dev.compile(b"neg f32 3", "fixture-elementwise")
    assert (cache.hits, cache.misses) == (1, 5)


def test_cache_dir_owned_by_another_user_is_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    root = cache.store.root
    root.mkdir(parents=True, exist_ok=True)
    me = os.geteuid()
    if me == 0:
        os.chown(root, 65534, 65534)
        owner = 65534
    else:
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)  # as if another user owned it
        owner = me
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        dev.compile(b"neg f32 3", "fixture-elementwise")
    assert entries(root, "executables") == []
    assert any(f"owned by uid {owner}" in r.getMessage() and str(root) in r.getMessage() for r in caplog.records)


def test_missing_cache_dir_is_created_private(tmp_path: Path) -> None:
    dev = _fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    root = cache.store.root
    assert not (root / "executables").exists()
    dev.compile(b"neg f32 3", "fixture-elementwise")
    for folder in (root, root / "executables"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    (entry,) = entries(root, "executables")
    assert entry.stat().st_mode & 0o777 == 0o600 and entry.parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("key_length", [16, 177, 400])
def test_mutants_cover_the_header_whatever_the_compat_keys_length(key_length: int) -> None:
    """The compat key's length is the machine's (OpenVINO's CPU lists its
    capabilities in it): every header byte is still mutated once, and random
    ones after it, however long the key is."""
    key = bytes(range(65, 65 + 26)) * (key_length // 26 + 1)
    key = key[:key_length]
    blob = b"NXEX" + bytes(60) + key + bytes(2000)
    mutants = _mutants(blob, key, np.random.default_rng(SEED))
    header_end = 64 + key_length + 64
    assert [offset for offset, _ in mutants[:header_end]] == list(range(header_end))
    assert len(mutants) - header_end >= MUTANTS_PER_PLUGIN // 4
    assert all(m != blob and len(m) == len(blob) for _, m in mutants)
