"""Requests remembered across processes (nx_hal.compile.shortcut): a warm
compile of an unchanged file reads none of it; a missing executable, other
code, or a file written just before its compile goes through the whole
pipeline, as a changed model or weights file does (tests/test_compile_pipeline.py)
(issue 32). The in-process memo is cleared between compiles, so each second
compile is what a fresh process does."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal import programs
from nx_hal.compile import memo, shortcut
from tests.onnx_models import weighted_file

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "examples" / "mlp.onnx"


@pytest.fixture
def device(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> nx_hal.Device:
    nx_hal.configure({"cache_dir": str(tmp_path / "cache")}, no_config=True)
    # Files written by the test itself count as settled (one test keeps the rule).
    monkeypatch.setattr(shortcut, "_SETTLED_NS", 0)
    try:
        return nx_hal.device(str(request.param))
    except nx_hal.NxHalError as exc:
        pytest.skip(f"{request.param}: {exc}")


def _unread(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, reading a program is a test failure."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the program was read: the shortcut missed")

    monkeypatch.setattr(programs, "load", refuse)


def _requests(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "cache" / shortcut.SECTION).rglob("*") if p.is_file()]


@pytest.mark.parametrize("device", ["npu:cpu", "tpu:cpu"], indirect=True)
def test_a_warm_compile_reads_no_program(device: nx_hal.Device, keep_api_state: None, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    first = device.compile(MLP)
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    want = first(x)[0].to_numpy()
    memo.clear()
    cache = device.link.compile_cache
    assert cache is not None
    hits = cache.hits
    with monkeypatch.context() as patch:
        _unread(patch)
        again = device.compile(MLP)
    assert again is not first and cache.hits == hits + 1
    np.testing.assert_array_equal(again(x)[0].to_numpy(), want)
    assert [s.name for s in again.inputs] == [s.name for s in first.inputs] == ["image"]
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"input 0 \('image'\)"):
        again(np.ones((2, 64), np.float32))
    assert device.compile(MLP) is again  # and then the process's own memo


@pytest.mark.parametrize("device", ["npu:cpu"], indirect=True)
def test_index_checks_survive_the_shortcut(device: nx_hal.Device, keep_api_state: None, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = weighted_file(folder, 3.0, gather=True)
    device.compile(path)
    memo.clear()
    with monkeypatch.context() as patch:
        _unread(patch)
        exe = device.compile(path)
    np.testing.assert_array_equal(exe(np.array([0, 1, -1, 3]))[0].to_numpy(), np.full(4, 3.0, np.float32))
    with pytest.raises(nx_hal.InvalidArgumentError, match="holds index 4 for Gather node 'lookup'"):
        exe(np.array([0, 1, 4, 3]))


@pytest.mark.parametrize("device", ["npu:cpu"], indirect=True)
def test_a_missing_executable_is_compiled_again(device: nx_hal.Device, keep_api_state: None,
                                                tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = weighted_file(folder, 2.0)
    device.compile(path)
    shutil.rmtree(tmp_path / "cache" / "executables")  # evicted, or cleared by hand
    memo.clear()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(device.compile(path)(x)[0].to_numpy(), 2 * x)


@pytest.mark.parametrize("device", ["npu:cpu"], indirect=True)
def test_a_file_written_just_before_is_not_recorded(device: nx_hal.Device, keep_api_state: None,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its identity could hide a write in the same timestamp tick (git's racy clean)."""
    monkeypatch.setattr(shortcut, "_SETTLED_NS", 2_000_000_000)
    folder = tmp_path / "model"
    folder.mkdir()
    path = weighted_file(folder, 2.0)
    device.compile(path)
    assert not _requests(tmp_path)
    memo.clear()
    import time

    now = time.time_ns()
    with monkeypatch.context() as patch:  # the same compile 3 s later records it
        patch.setattr(time, "time_ns", lambda: now + 3_000_000_000)
        device.compile(path)
    assert len(_requests(tmp_path)) == 1


@pytest.mark.parametrize("device", ["npu:cpu"], indirect=True)
def test_other_code_is_another_request(device: nx_hal.Device, keep_api_state: None, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A converter of another version, or nx_hal's own stages edited, may
    make another executable: the file is read again."""
    device.compile(MLP)
    memo.clear()
    converter = type(device.link.converter)
    with monkeypatch.context() as patch:
        patch.setattr(converter, "identity", lambda self: "another version")
        _unread(patch)
        with pytest.raises(AssertionError, match="the program was read"):
            device.compile(MLP)
    shortcut._code.cache_clear()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(shortcut, "code_identity", lambda paths: "edited")
            _unread(patch)
            with pytest.raises(AssertionError, match="the program was read"):
                device.compile(MLP)
    finally:
        shortcut._code.cache_clear()


def test_code_identity_follows_each_source(tmp_path: Path) -> None:
    from nx_hal.version import code_identity

    files = [tmp_path / "a.py", tmp_path / "b.py"]
    for f in files:
        f.write_text("x = 1\n")
    first = code_identity(files)
    assert code_identity(reversed(files)) == first  # the order given does not count
    files[1].write_text("x = 22\n")
    assert code_identity(files) != first
    files[1].unlink()
    assert code_identity(files) not in (first, code_identity(files[:1]))


@pytest.mark.parametrize("device", ["npu:cpu", "tpu:cpu"], indirect=True)
def test_only_bytes_nx_hal_authenticated_skip_the_plugins_digest(device: nx_hal.Device, keep_api_state: None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's entries and sealed blobs carry an HMAC this user's key
    checked: the plugin is told (``authenticated``), and skips its digest;
    raw bytes loaded with ``trusted=True`` are not vouched for."""
    from nx_hal.device import Device

    seen: list[bool] = []
    real = Device._deserialize

    def spy(self: Device, data: Any, *, authenticated: bool = False, options: Any = None) -> Any:
        seen.append(authenticated)
        return real(self, data, authenticated=authenticated, options=options)

    exe = device.compile(MLP)
    assert isinstance(exe, nx_hal.Executable)
    memo.clear()
    monkeypatch.setattr(Device, "_deserialize", spy)
    device.compile(MLP)  # from the store
    device.load_executable(exe.serialize())
    device.load_executable(exe._serialize(), trusted=True)
    assert seen == [True, True, False]
