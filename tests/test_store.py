"""Issue #29, the holes one store closes (nx_hal.store), each tried from
outside as the issue tried them: through ``nx_hal.devices()``,
``Device.compile``, ``Device.load_executable`` and the ``nx-hal`` command,
with the environment set per test.

1. A discovery record or a probe verdict planted in a cache directory another
   user owns, or anyone may write, or as another user's file in ours, is not
   used (a planted record names the library to load).
2. A conversion planted in ``stablehlo`` without this user's key is not run
   as the model.
4, 5. External data is part of the compile's key, and is read from the
   model's own directory, never the working directory, never outside it.
6. No HOME, no passwd entry: devices() and the command work.
7. An entry that is a link to /dev/zero, a FIFO, or larger in its header than
   on disk is a quick miss, neither a hang nor a MemoryError.
8. ``NX_HAL_CACHE_DIR=`` is an error naming it; ``HOME=`` does not put the
   cache in ``/.cache``.
9. A serialized executable is loaded only when this user's nx_hal sealed it,
   unless the caller says it trusts the bytes.
12. A write that fails (ENOSPC) leaves no temporary file; the key is private,
   and one others may read is not used.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal import store as store_module
from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.errors import ConfigError, InvalidArgumentError
from nx_hal.plugin import PluginSpec
from nx_hal.programs import Program
from nx_hal.registry import Registry
from nx_hal.store import Store, secret
from tests.cbuild import build_fixture
from tests.store_util import HEADER, LENGTHS_AT, entries, entry_path, foreign_put, split

ROOT = Path(__file__).resolve().parent.parent
ME = os.geteuid()
NOBODY = 65534
as_root = pytest.mark.skipif(ME != 0, reason="making files another user owns needs root (chown)")


def nx_hal_command() -> list[str]:
    script = Path(sys.executable).parent / "nx-hal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "nx_hal"]


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 300,
        prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), *argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def bare_env(**values: str) -> dict[str, str]:
    """The environment of ``env -i PATH=...``: no HOME, no XDG_*, plus ``values``."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update(values)
    return env


def own_env(**values: str) -> dict[str, str]:
    """This process's environment without NX_HAL_* (so no setting leaks in), plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    env.update(values)
    return env


DEVICES = "import json, nx_hal; print(json.dumps(sorted([d.plugin, d.name] for d in nx_hal.devices())))"


def device_with_cache(selector: str, root: Path) -> Device:
    """``selector`` of an installed plugin, the process configured with the
    cache at ``root``; a skip when the plugin has no such device."""
    nx_hal.configure({"cache_dir": str(root)}, no_config=True)
    plugin = selector.split(":")[0]
    record = nx_hal.registry().records.get(plugin)
    if record is None or record.state != "loaded":
        pytest.skip(f"{selector}: the {plugin} plugin is not loaded here")
    try:
        return nx_hal.device(selector)
    except nx_hal.NxHalError as exc:
        pytest.skip(f"{selector}: {exc}")


def fixture_device(tmp_path: Path) -> Device:
    """The fixture plugin's device, its cache at ``tmp_path / "cache"``."""
    lib = build_fixture("hostmem", tmp_path / "libs")
    reg = Registry(load_config({"cache_dir": str(tmp_path / "cache")}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.state == "loaded", rec.reason
    return rec.devices[0]


# ---------------------------------------------------------------- item 1: planted records and verdicts


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A cache that ``nx_hal.devices()`` filled (discovery records and probe
    verdicts of the installed plugins), the working directory it ran in (part
    of a discovery record's key) and a fixture library to plant."""
    base = tmp_path_factory.mktemp("warm")
    work = base / "work"
    work.mkdir()
    template = base / "cache"
    lib = build_fixture("hostmem", base / "libs")
    out = run([sys.executable, "-c", _devices_in(template)], own_env(), work)
    assert out.returncode == 0, out.stderr
    return template, work, lib


def _devices_in(root: Path) -> str:
    # cache_dir as a setting, not NX_HAL_CACHE_DIR: the variables named
    # NX_HAL_* are part of a record's key, and a copy of the cache must match.
    return f"import json, nx_hal; nx_hal.configure({{'cache_dir': {str(root)!r}}}); {DEVICES.split('; ', 1)[1]}"


def _records(root: Path, section: str) -> dict[str, dict[str, Any]]:
    store = Store(root, max_bytes=0)
    found = {p.name: store.get_json(section, p.name) for p in entries(root, section)}
    return {k: v for k, v in found.items() if v is not None}


def _plant(root: Path, what: str, lib: Path) -> Path:
    """Changes graphcore's record (``what``: "discovery", to name the fixture
    library) or its probe verdict ("probe", to claim the npu plugin's
    devices), written with this user's key: valid in every way. Its path."""
    if what == "discovery":
        for key, record in _records(root, "discovery").items():
            if record["specs"][0]["name"] == "graphcore":
                record["specs"][0]["library"] = str(lib)
                assert Store(root, max_bytes=0).put_json("discovery", key, record)
                return entry_path(root, "discovery", key)
        pytest.skip("the graphcore plugin is not installed: no discovery record to plant")
    verdicts = _records(root, "probe")
    npu = [v for v in verdicts.values() if v["ok"] and "openvino_device" in json.dumps(v["report"])]
    for key, verdict in verdicts.items():
        if not verdict["ok"] and verdict["report"].get("info", {}).get("name") == "graphcore" and npu:
            assert Store(root, max_bytes=0).put_json("probe", key, {**verdict, "ok": True, "code": "OK",
                                                                    "message": "", "report": npu[0]["report"]})
            return entry_path(root, "probe", key)
    pytest.skip("needs the graphcore plugin without a device and the npu plugin with one")


PLANTED = {"discovery": ["graphcore", "fixture host memory"], "probe": ["graphcore", "AMD EPYC"]}


def _graphcore_devices(root: Path, work: Path) -> tuple[list[list[str]], str]:
    out = run([sys.executable, "-c", _devices_in(root)], own_env(), work)
    assert out.returncode == 0, out.stderr
    return [d for d in json.loads(out.stdout.splitlines()[-1]) if d[0] == "graphcore"], out.stderr


@pytest.mark.parametrize("what", ["discovery", "probe"])
def test_a_planted_record_is_what_a_trusted_cache_would_use(warm_cache: tuple[Path, Path, Path],
                                                           tmp_path: Path, what: str) -> None:
    """The control: in this user's own cache, with this user's key, the
    planted record is used (so the refusals below are the trust rule's)."""
    template, work, lib = warm_cache
    root = tmp_path / "cache"
    shutil.copytree(template, root, symlinks=True)
    _plant(root, what, lib)
    assert _graphcore_devices(root, work)[0] == [PLANTED[what]]


@as_root
@pytest.mark.parametrize("what", ["discovery", "probe"])
@pytest.mark.parametrize("how", ["root of another user", "root anyone may write", "section of another user",
                                 "entry of another user"])
def test_a_planted_record_is_not_used(warm_cache: tuple[Path, Path, Path], tmp_path: Path, what: str,
                                      how: str) -> None:
    template, work, lib = warm_cache
    root = tmp_path / "cache"
    shutil.copytree(template, root, symlinks=True)
    planted = _plant(root, what, lib)
    undo: Callable[[], None]
    if how == "root of another user":
        os.chown(root, NOBODY, NOBODY)
        undo = lambda: os.chown(root, ME, ME)  # noqa: E731
    elif how == "root anyone may write":
        root.chmod(0o777)
        undo = lambda: root.chmod(0o700)  # noqa: E731
    elif how == "section of another user":
        os.chown(root / what, NOBODY, NOBODY)
        undo = lambda: os.chown(root / what, ME, ME)  # noqa: E731
    else:
        os.chown(planted, NOBODY, NOBODY)
        undo = lambda: None  # noqa: E731 - the store replaces the entry with its own
    found, stderr = _graphcore_devices(root, work)
    assert found == [], f"a planted {what} record was used from a {how}"
    if how.startswith("root"):
        why = "owned by uid 65534" if "another" in how else "group or others may write to it (mode 777)"
        assert f"nx_hal cache: not using {root}: " in stderr and why in stderr, stderr
    if how == "entry of another user":
        # Rejected, then replaced by this user's own (the real one): the
        # lookup was made at the planted entry's key.
        assert planted.stat().st_uid == ME
        real = _records(root, what)[planted.name]
        assert (real["specs"][0]["library"] != str(lib)) if what == "discovery" else not real["ok"]
    else:
        undo()  # the same record, now in a cache that is ours: it is used
        assert _graphcore_devices(root, work)[0] == [PLANTED[what]]


# ---------------------------------------------------------------- item 2: a planted conversion


def _onnx(op: str, constant: float, weights_location: str | None = None) -> Any:
    """y = op(x, c) for x: float32[4], c: float32[4] filled with ``constant``."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    c = numpy_helper.from_array(np.full(4, constant, np.float32), "c")
    graph = helper.make_graph([helper.make_node(op, ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    if weights_location is not None:
        from onnx.external_data_helper import convert_model_to_external_data

        convert_model_to_external_data(model, all_tensors_to_one_file=True, location=weights_location,
                                       size_threshold=0)
    return model


def _run(exe: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(exe(x)[0].to_numpy())


X = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def test_a_planted_conversion_is_not_run_as_the_model(tmp_path: Path, keep_api_state: None) -> None:
    pytest.importorskip("torch_mlir", reason="converting ONNX for tpu:cpu needs torch-mlir")
    root = tmp_path / "cache"
    dev = device_with_cache("tpu:cpu", root)
    add_one, double = (_onnx("Add", 1.0).SerializeToString(), _onnx("Mul", 2.0).SerializeToString())
    np.testing.assert_array_equal(_run(dev.compile(add_one, "onnx"), X), X + 1)
    (theirs,) = entries(root, "stablehlo")
    np.testing.assert_array_equal(_run(dev.compile(double, "onnx"), X), X * 2)
    (ours,) = set(entries(root, "stablehlo")) - {theirs}
    _, their_meta, their_module = split(theirs.read_bytes())
    our_module = split(ours.read_bytes())[2]
    assert their_module != our_module

    def compile_again() -> np.ndarray:
        shutil.rmtree(root / "executables")  # not the compile cache's hit: the conversion's
        return _run(dev.compile(double, "onnx"), X)

    # Add-one's conversion at double's key, made by another user's nx_hal
    # (its tag checks under their key only): converted again, right.
    foreign_put(root, "stablehlo", ours.name, their_module, json.loads(their_meta), tmp_path / "another-user")
    np.testing.assert_array_equal(compile_again(), X * 2)
    entry = Store(root, max_bytes=0).get("stablehlo", ours.name)
    assert entry is not None and entry.payload == our_module  # replaced by this user's own
    # The control: the same entry written with this user's key is served,
    # so it is the key that kept the planted one out.
    assert Store(root, max_bytes=0).put("stablehlo", ours.name, their_module, json.loads(their_meta))
    np.testing.assert_array_equal(compile_again(), X + 1)


# ---------------------------------------------------------------- items 4 and 5: external data


def _save_with_weights(folder: Path, constant: float, location: str = "weights.bin") -> Path:
    """y = x * w, w in ``folder / location`` (4 float32 of ``constant``)."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    model = _onnx("Mul", constant, weights_location=location)
    path = folder / "model.onnx"
    onnx.save_model(model, str(path))  # writes the tensor to folder / location, offset 0
    assert (folder / location).read_bytes() == np.full(4, constant, np.float32).tobytes()
    return path


SELECTORS = ["npu:cpu", "tpu:cpu"]


def _needs(selector: str) -> None:
    pytest.importorskip("onnx")
    if selector.startswith("tpu"):
        pytest.importorskip("torch_mlir", reason="converting ONNX for tpu:cpu needs torch-mlir")


@pytest.mark.parametrize("selector", SELECTORS)
def test_external_data_is_part_of_the_key(tmp_path: Path, keep_api_state: None, selector: str) -> None:
    _needs(selector)
    dev = device_with_cache(selector, tmp_path / "cache")
    model = _save_with_weights(tmp_path / "model", 2.0)
    np.testing.assert_allclose(_run(dev.compile(model), X), X * 2)
    np.testing.assert_allclose(_run(dev.compile(model), X), X * 2)  # the same weights: the same result
    (model.parent / "weights.bin").write_bytes(np.full(4, 4.0, np.float32).tobytes())
    np.testing.assert_allclose(_run(dev.compile(model), X), X * 4)  # not the old weights' entry
    (model.parent / "weights.bin").unlink()
    with pytest.raises(InvalidArgumentError, match=r"external data 'weights.bin' of tensor 'c': cannot open"):
        dev.compile(model)


@pytest.mark.parametrize("selector", SELECTORS)
def test_external_data_is_read_from_the_models_directory(tmp_path: Path, keep_api_state: None,
                                                         monkeypatch: pytest.MonkeyPatch, selector: str) -> None:
    _needs(selector)
    dev = device_with_cache(selector, tmp_path / "cache")
    model = _save_with_weights(tmp_path / "model", 2.0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "weights.bin").write_bytes(np.full(4, 10.0, np.float32).tobytes())
    monkeypatch.chdir(elsewhere)
    np.testing.assert_allclose(_run(dev.compile(model), X), X * 2)  # the model's weights, not the cwd's
    np.testing.assert_allclose(_run(dev.compile(Path(os.path.relpath(model))), X), X * 2)
    # With no file next to the model, the working directory's is not taken either.
    (model.parent / "weights.bin").unlink()
    with pytest.raises(InvalidArgumentError, match="cannot open"):
        dev.compile(model)


def _set_location(model_path: Path, location: str) -> None:
    import onnx

    model = onnx.load_model(str(model_path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save_model(model, str(model_path))


@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("where", ["parent", "absolute", "link out"])
def test_external_data_outside_the_models_directory_is_refused(tmp_path: Path, keep_api_state: None,
                                                               selector: str, where: str) -> None:
    _needs(selector)
    dev = device_with_cache(selector, tmp_path / "cache")
    model = _save_with_weights(tmp_path / "models" / "m", 2.0)
    outside = tmp_path / "models" / "secret.bin"
    outside.write_bytes(np.full(4, 7.0, np.float32).tobytes())
    if where == "parent":
        _set_location(model, "../secret.bin")
        why = "the name must be a path inside the model's directory"
    elif where == "absolute":
        _set_location(model, str(outside))
        why = "the name must be a path inside the model's directory"
    else:
        (model.parent / "weights.bin").unlink()
        (model.parent / "weights.bin").symlink_to(outside)
        why = "leads outside the model's directory"
    with pytest.raises(InvalidArgumentError, match=why):
        dev.compile(model)


# ---------------------------------------------------------------- item 6: no HOME, no passwd entry


def test_no_home_with_a_cache_dir(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    out = run([sys.executable, "-c", DEVICES], bare_env(NX_HAL_CACHE_DIR=str(root)), tmp_path)
    assert out.returncode == 0, out.stderr
    assert entries(root, "probe"), "the cache named was used"


@pytest.mark.parametrize("base", ["TMPDIR", "XDG_RUNTIME_DIR"])
def test_no_home_puts_the_cache_in_a_per_user_directory(tmp_path: Path, base: str) -> None:
    where = tmp_path / "base"
    where.mkdir(mode=0o700)
    (tmp_path / "not-this-one").mkdir(mode=0o700)
    env = bare_env(**{base: str(where)})
    if base == "XDG_RUNTIME_DIR":
        env["TMPDIR"] = str(tmp_path / "not-this-one")  # the runtime directory comes first
    out = run([sys.executable, "-c", DEVICES], env, tmp_path)
    assert out.returncode == 0, out.stderr
    root = where / f"nx_hal-{ME}" / "cache"
    assert entries(root, "probe") and entries(root, "discovery"), sorted(where.rglob("*"))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (where / f"nx_hal-{ME}" / "config" / "secret").is_file()  # the key, beside it
    assert list((tmp_path / "not-this-one").iterdir()) == []


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A sticky directory anyone may write, as /tmp (pytest's own are private)."""
    path = Path(tempfile.mkdtemp(prefix="nxhal-store-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


UID = 54321  # a uid with no passwd entry


def _as_a_user_without_passwd_entry() -> list[str]:
    """The command prefix that runs a program as uid UID, group UID, no
    supplementary groups; a skip when this machine cannot."""
    setpriv = shutil.which("setpriv")
    if ME != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run as a uid with no passwd entry")
    import pwd

    try:
        pwd.getpwuid(UID)
        pytest.skip(f"uid {UID} has a passwd entry here")
    except KeyError:
        pass
    prefix = [setpriv, f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
    # The interpreter may live where only root can look (a pyenv under
    # /root): then the uid gets the right to read and search directories,
    # nothing more -- it still owns no file and has no passwd entry or HOME.
    reach = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    why = ""
    for extra in ([], reach):
        check = subprocess.run([*prefix, *extra, sys.executable, "-c", "import os, sys, nx_hal; os.stat(sys.executable)"],
                               capture_output=True, text=True, timeout=60, env=bare_env(), cwd="/")
        if check.returncode == 0:
            return [*prefix, *extra]
        why = check.stderr[-500:]
    pytest.skip(f"uid {UID} cannot run this Python: {why}")


@pytest.mark.parametrize("cache_dir", [False, True])
def test_no_passwd_entry_and_no_home(shared_tmp: Path, cache_dir: bool) -> None:
    prefix = _as_a_user_without_passwd_entry()
    env = bare_env(TMPDIR=str(shared_tmp))
    if cache_dir:
        env["NX_HAL_CACHE_DIR"] = str(shared_tmp / "mine")
    out = run([*nx_hal_command(), "devices", "--json"], env, shared_tmp, prefix=prefix)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Could not determine home directory" not in out.stderr
    assert isinstance(json.loads(out.stdout), list)
    out = run([sys.executable, "-c", DEVICES], env, shared_tmp, prefix=prefix)
    assert out.returncode == 0, out.stderr
    root = shared_tmp / "mine" if cache_dir else shared_tmp / f"nx_hal-{UID}" / "cache"
    assert entries(root, "probe") and root.stat().st_uid == UID


# ---------------------------------------------------------------- item 7: entries that are not files


def _within(seconds: float, call: Callable[[], Any], unblock: Callable[[], None]) -> Any:
    """``call()``'s result; a failure (not a hung test) when it takes longer."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        unblock()
        thread.join(10)
        pytest.fail(f"still running after {seconds} s: a cache entry made it hang")
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "link to a fifo", "directory",
                                  "header claims more", "header claims exabytes"])
def test_an_entry_that_is_not_a_whole_regular_file_is_a_quick_miss(tmp_path: Path, kind: str) -> None:
    dev = fixture_device(tmp_path)
    cache = dev.link.compile_cache
    assert cache is not None
    root = tmp_path / "cache"
    key = cache.key(dev, Program("fixture-elementwise", b"add f32 4"), {})
    path = entry_path(root, "executables", key)
    for folder in (root, root / "executables", path.parent):
        folder.mkdir(mode=0o700, exist_ok=True)
    fifo = tmp_path / "fifo"
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "link to a fifo":
        os.mkfifo(fifo, 0o600)
        path.symlink_to(fifo)
    elif kind == "directory":
        path.mkdir(mode=0o700)
    else:
        dev.compile(b"add f32 4", "fixture-elementwise")
        whole = path.read_bytes()
        meta_len, payload_len = struct.unpack_from("<IQ", whole, LENGTHS_AT)
        claimed = payload_len + 1 if kind == "header claims more" else 2**62
        path.write_bytes(whole[:LENGTHS_AT] + struct.pack("<IQ", meta_len, claimed) + whole[HEADER:])
    target = path if kind == "fifo" else fifo

    def unblock() -> None:  # a reader blocked opening the FIFO gets its end of file
        with open(target, "wb"):
            pass

    before = (cache.hits, cache.misses, cache.rejected)
    exe = _within(60, lambda: dev.compile(b"add f32 4", "fixture-elementwise"), unblock)
    np.testing.assert_array_equal(exe(X, X)[0].to_numpy(), 2 * X)
    assert (cache.hits, cache.misses, cache.rejected) == (before[0], before[1] + 1, before[2] + 1)
    if kind != "directory":  # a directory stays (its name is taken); anything else is replaced
        assert stat.S_ISREG(path.lstat().st_mode)
        dev.compile(b"add f32 4", "fixture-elementwise")
        assert cache.hits == before[0] + 1


# ---------------------------------------------------------------- item 8: empty settings


def test_an_empty_cache_dir_variable_is_an_error_naming_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = run([*nx_hal_command(), "devices"], own_env(NX_HAL_CACHE_DIR=""), work)
    assert out.returncode in (1, 2), (out.returncode, out.stderr)
    assert "NX_HAL_CACHE_DIR" in out.stderr and "empty" in out.stderr and "Traceback" not in out.stderr
    out = run([sys.executable, "-c", DEVICES], own_env(NX_HAL_CACHE_DIR=""), work)
    assert out.returncode == 1 and "ConfigError" in out.stderr and "NX_HAL_CACHE_DIR" in out.stderr
    assert list(work.iterdir()) == [], "nothing is written into the working directory"


def test_an_empty_cache_dir_variable_in_process(tmp_path: Path, keep_api_state: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NX_HAL_CACHE_DIR", "")
    with pytest.raises(ConfigError, match="environment variable NX_HAL_CACHE_DIR: cache_dir: .*empty"):
        nx_hal.configure()
    assert list(tmp_path.iterdir()) == []


def test_an_empty_home_does_not_put_the_cache_at_the_filesystems_root(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    there_before = Path("/.cache/nx_hal").exists()
    out = run([sys.executable, "-c", DEVICES], bare_env(HOME="", TMPDIR=str(tmp_path)), work)
    assert out.returncode == 0, out.stderr
    assert entries(tmp_path / f"nx_hal-{ME}" / "cache", "probe"), "the per-user directory, as without HOME"
    assert list(work.iterdir()) == []
    assert there_before or not Path("/.cache/nx_hal").exists()


# ---------------------------------------------------------------- item 9: serialized executables


@pytest.fixture
def plugin_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the blobs that reached a plugin's deserialize."""
    seen: list[int] = []
    real = Device._deserialize

    def spy(self: Device, data: Any, *, authenticated: bool = False, options: dict[str, object] | None = None) -> Any:
        seen.append(len(data))
        return real(self, data, authenticated=authenticated, options=options)

    monkeypatch.setattr(Device, "_deserialize", spy)
    return seen


ADD_MLIR = (ROOT / "plugins" / "tpu" / "tests" / "programs" / "add.mlir").read_text()


def _add_program(selector: str) -> tuple[Any, str]:
    if selector == "npu:cpu":
        onnx = pytest.importorskip("onnx")
        from onnx import TensorProto, helper

        vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("x", "y", "z")]
        graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", vi[:2], vi[2:])
        model = helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
        model.ir_version = 8
        return model.SerializeToString(), "onnx"
    if selector == "tpu:cpu":
        return ADD_MLIR, "stablehlo"
    return b"add f32 4", "fixture-elementwise"


def _device_for(selector: str, tmp_path: Path) -> Device:
    return fixture_device(tmp_path) if selector == "fixture" else device_with_cache(selector, tmp_path / "cache")


REFUSED = r"refusing to load a serialized executable: .* native code .* trusted=True"


@pytest.mark.parametrize("selector", ["fixture", "npu:cpu", "tpu:cpu"])
def test_only_blobs_this_user_sealed_are_loaded(tmp_path: Path, keep_api_state: None, plugin_loads: list[int],
                                                selector: str) -> None:
    dev = _device_for(selector, tmp_path)
    program, fmt = _add_program(selector)
    blob = dev.compile(program, fmt, cache=False).serialize()
    plugin_loads.clear()  # a sandboxed compile loads its child's executable
    np.testing.assert_array_equal(dev.load_executable(blob)(X, X)[0].to_numpy(), 2 * X)
    assert plugin_loads == [len(blob) - 40]  # the plugin got its own bytes, the seal taken off
    plugin_loads.clear()
    raw = blob[40:]
    changed = [blob[:-1] + bytes([blob[-1] ^ 1]), blob[:39] + bytes([blob[39] ^ 1]) + blob[40:],
               b"NXHALEX2" + blob[8:], blob[:-1], blob + b"\0", blob[:40], raw]
    for bad in changed:
        with pytest.raises(InvalidArgumentError, match=REFUSED):
            dev.load_executable(bad)
    assert plugin_loads == [], "refused before the plugin"
    # The caller vouches for the plugin's own bytes: the plugin loads them.
    np.testing.assert_array_equal(dev.load_executable(raw, trusted=True)(X, X)[0].to_numpy(), 2 * X)


def test_a_blob_with_its_plugin_digest_fixed_up_is_refused(tmp_path: Path, keep_api_state: None,
                                                            plugin_loads: list[int]) -> None:
    """The issue's attack: a payload byte changed and tpu's SHA-256 digest
    recomputed, so the plugin's own check passes; the seal does not."""
    dev = device_with_cache("tpu:cpu", tmp_path / "cache")
    blob = dev.compile(ADD_MLIR, "stablehlo", cache=False).serialize()
    plugin_loads.clear()
    raw = bytearray(blob[40:])
    assert raw[:8] == b"NXHALTPU"
    (key_len,) = struct.unpack_from("<I", raw, 12)
    at = 16 + key_len
    raw[-1] ^= 0x01
    raw[at:at + 32] = hashlib.sha256(bytes(raw[:16]) + bytes(raw[at + 32:])).digest()
    with pytest.raises(InvalidArgumentError, match=REFUSED):
        dev.load_executable(blob[:40] + bytes(raw))
    assert plugin_loads == []


SERIALIZE = """
import sys, nx_hal
from tests.test_store import _add_program, device_with_cache
from pathlib import Path
dev = device_with_cache(sys.argv[1], Path(sys.argv[2]))
program, fmt = _add_program(sys.argv[1])
Path(sys.argv[3]).write_bytes(dev.compile(program, fmt, cache=False).serialize())
"""


@pytest.mark.parametrize("selector", ["npu:cpu", "tpu:cpu"])
def test_a_blob_another_user_sealed_is_refused(tmp_path: Path, keep_api_state: None, plugin_loads: list[int],
                                               selector: str) -> None:
    dev = device_with_cache(selector, tmp_path / "cache")
    other = tmp_path / "another-user"
    out = run([sys.executable, "-c", SERIALIZE, selector, str(tmp_path / "their-cache"), str(tmp_path / "blob")],
              own_env(XDG_CONFIG_HOME=str(other), PYTHONPATH=str(ROOT)), ROOT)
    assert out.returncode == 0, out.stderr
    assert (other / "nx_hal" / "secret").is_file()  # their key, not ours
    blob = (tmp_path / "blob").read_bytes()
    with pytest.raises(InvalidArgumentError, match="authenticator does not check.*native code"):
        dev.load_executable(blob)
    assert plugin_loads == []
    np.testing.assert_array_equal(dev.load_executable(blob, trusted=True)(X, X)[0].to_numpy(), 2 * X)


# ---------------------------------------------------------------- item 12: failed writes, the key


def test_a_write_that_fails_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    store = Store(tmp_path / "cache", max_bytes=0)
    key = "ab" * 32
    written: list[int] = []
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        if written:  # the first chunk lands, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(real_write(fd, data[:10]))
        return written[-1]

    assert secret.key() is not None  # made before the disk fills
    monkeypatch.setattr(os, "write", full)  # what nx_hal.store.store writes with, for these two writes
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        assert store.put("probe", key, b"x" * 1000, {"n": 1}) is False
        assert store.put_json("discovery", key, {"n": 2}) is False
    monkeypatch.undo()
    assert written == [10]
    for section in ("probe", "discovery"):
        assert list(entry_path(tmp_path / "cache", section, key).parent.iterdir()) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"nx_hal cache: cannot write in {tmp_path / 'cache'}: No space left on device"] * 2
    assert store.get("probe", key) is None and store.put("probe", key, b"x")  # and then it works


def test_the_key_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert Store(tmp_path / "cache", max_bytes=0).put_json("probe", "cd" * 32, {"ok": True})
    path = secret.secret_path()
    assert path == tmp_path / "config" / "nx_hal" / "secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == ME
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(bytes.fromhex(path.read_text())) == 32


@pytest.mark.parametrize("how", ["group may read", "others may read", "a link", "a link to a good key",
                                 "directory others may write"])
def test_a_key_others_could_read_or_replace_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture, how: str) -> None:
    folder = tmp_path / "config" / "nx_hal"
    folder.mkdir(parents=True, mode=0o700)
    good = tmp_path / "good-key"
    good.write_text(os.urandom(32).hex())
    good.chmod(0o600)
    path = folder / "secret"
    if how == "group may read":
        shutil.copy(good, path)
        path.chmod(0o640)
    elif how == "others may read":
        shutil.copy(good, path)
        path.chmod(0o604)
    elif how == "a link":
        path.symlink_to(tmp_path / "missing")
    elif how == "a link to a good key":
        path.symlink_to(good)
    else:
        shutil.copy(good, path)
        path.chmod(0o600)
        folder.chmod(0o777)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    store = Store(tmp_path / "cache", max_bytes=0)
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        assert store.put_json("probe", "ef" * 32, {"ok": True}) is False  # the cache is off
        assert store.get_json("probe", "ef" * 32) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"nx_hal: cannot use the key in {path} ("), warnings
    assert "the cache is off" in warnings[0]
    assert not entries(tmp_path / "cache", "probe")
    assert path.is_symlink() or path.read_text() == good.read_text()  # never rewritten
    assert secret.key() is None


# ---------------------------------------------------------------- the per-user directory in a shared place


@pytest.mark.parametrize("planted", ["symlink", "other-owner", "world-writable"])
def test_per_user_directory_planted_by_another_user_is_not_used(tmp_path: Path, planted: str) -> None:
    """Without a home, the cache and the key live in <tmp>/nx_hal-<uid>, a name
    anyone may take first in a shared temporary directory: a link or a
    directory of another user's there turns the cache off (one warning),
    and nothing is written through it."""
    if planted == "other-owner" and os.geteuid() != 0:
        pytest.skip("needs root to make a directory another user owns")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    base = shared / f"nx_hal-{os.geteuid()}"
    if planted == "symlink":
        base.symlink_to(ours)
    else:
        base.mkdir()
        if planted == "other-owner":
            os.chown(base, 65534, 65534)
        else:
            base.chmod(0o777)
    out = run([sys.executable, "-c", DEVICES], bare_env(TMPDIR=str(shared)), tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"nx_hal-{os.geteuid()}" in out.stderr and "cache" in out.stderr
    assert not any(ours.iterdir()), "wrote through the planted link"
    if planted != "symlink":
        assert not any(base.iterdir()), "wrote into a directory another user controls"


# --- keys ---------------------------------------------------------------------


def test_a_large_part_is_hashed_once_per_compile_scope() -> None:
    """In a digest_scope each bytes object's SHA-256 is computed once (the
    same digest object comes back); outside one, every call hashes again.
    Keys come out the same either way."""
    big = os.urandom((1 << 20) + 3)
    outside = store_module.content_digest(big)
    assert outside == hashlib.sha256(big).digest()
    assert store_module.content_digest(big) is not outside  # hashed again: no scope
    with store_module.digest_scope():
        first = store_module.content_digest(big)
        assert store_module.content_digest(big) is first
        assert store_module.content_digest(bytes(bytearray(big))) is not first  # equal bytes, another object
        in_scope = store_module.digest("facts", big)
    assert store_module.digest("facts", big) == in_scope


def test_keys_tell_large_parts_from_small_ones() -> None:
    """A large part enters a key as its SHA-256 under a marked length: its
    digest given as a small part, or another large part, is another key."""
    big = os.urandom(1 << 20)
    other = bytearray(big)
    other[-1] ^= 1
    keys = {store_module.digest(big), store_module.digest(hashlib.sha256(big).digest()),
            store_module.digest(bytes(other)), store_module.digest(big[:-1])}
    assert len(keys) == 4
    small = b"x" * 1000
    assert store_module.digest(small) == store_module.digest(bytes(small))
    assert store_module.digest("a", "bc") != store_module.digest("ab", "c")
