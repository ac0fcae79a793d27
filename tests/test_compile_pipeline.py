"""The compile pipeline (nx_hal.compile): a second compile of the same
unchanged file in one process is a lookup; a changed file, or a changed
external-data file, is compiled again; Device.compile and every stage stay
small (issue 29)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest

import nx_hal
from nx_hal.compile import memo, shortcut
from tests.onnx_models import weighted_file

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "examples" / "mlp.onnx"


@pytest.fixture
def device(request: pytest.FixtureRequest, tmp_path: Path) -> nx_hal.Device:
    nx_hal.configure({"cache_dir": str(tmp_path / "cache")}, no_config=True)
    try:
        return nx_hal.device(str(request.param))
    except nx_hal.NxHalError as exc:
        pytest.skip(f"{request.param}: {exc}")


@pytest.mark.parametrize("device", ["npu:cpu", "tpu:cpu"], indirect=True)
def test_same_file_twice_is_a_lookup(device: nx_hal.Device, keep_api_state: None) -> None:
    cache = device.link.compile_cache
    assert cache is not None
    first = device.compile(MLP)
    counts = (cache.hits, cache.misses)
    again = device.compile(str(MLP))
    assert again is first and (cache.hits, cache.misses) == counts  # not even the store was read
    # Other options, or cache=False, are other compiles.
    assert device.compile(MLP, cache=False) is not first
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(again(x)[0].to_numpy(), first(x)[0].to_numpy())


@pytest.mark.parametrize("device", ["npu:cpu", "tpu:cpu"], indirect=True)
def test_run_errors_name_inputs_as_the_model_does(device: nx_hal.Device, keep_api_state: None) -> None:
    """A converted module calls its inputs arg0...; the error a wrong input
    gets names the model's input ('image'), on every device and every path:
    the C fast path, the Python one (a buffer of another shape), run_async."""
    exe = device.compile(MLP)
    wrong = np.ones((2, 64), np.float32)
    for run in (lambda: exe(wrong), lambda: exe(device.put(wrong)), lambda: exe.run_async(wrong)):
        with pytest.raises(nx_hal.InvalidArgumentError) as err:
            run()
        assert "input 0 ('image')" in err.value.message and "arg0" not in err.value.message, err.value.message
        assert err.value.plugin == device.plugin


@pytest.mark.parametrize("device", ["npu:cpu", "tpu:cpu"], indirect=True)
@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("fresh", [False, True], ids=["same-process", "fresh-process"])
def test_a_changed_file_is_compiled_again(device: nx_hal.Device, keep_api_state: None, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, external: bool, fresh: bool) -> None:
    """Same size, same inode, new bytes: the model's, or only its external
    weights'. ``fresh``: as another process compiles it, the memo forgotten
    and the store's record of the first compile (nx_hal.compile.shortcut)
    made, the test's own files counting as settled."""
    monkeypatch.setattr(shortcut, "_SETTLED_NS", 0)
    folder = tmp_path / "model"
    folder.mkdir()
    path = weighted_file(folder, 2.0, external=external)
    x = np.ones(4, np.float32)
    first = device.compile(path)
    np.testing.assert_array_equal(first(x)[0].to_numpy(), 2 * x)
    if fresh:
        assert list((tmp_path / "cache" / shortcut.SECTION).rglob("*/*"))
        memo.clear()
    if external:  # only the weights change: the model's own file keeps its identity
        stat = os.stat(path)
        (folder / "weights.bin").write_bytes(np.full(4, 5.0, np.float32).tobytes())
        assert os.stat(path).st_mtime_ns == stat.st_mtime_ns
    else:
        weighted_file(folder, 5.0)
    again = device.compile(path)
    assert again is not first
    np.testing.assert_array_equal(again(x)[0].to_numpy(), 5 * x)


def test_the_memo_holds_executables_weakly(keep_api_state: None, tmp_path: Path) -> None:
    nx_hal.configure({"cache_dir": str(tmp_path / "cache")}, no_config=True)
    dev = nx_hal.device("npu:cpu")
    exe = dev.compile(MLP)
    ident = id(exe)
    del exe
    import gc

    gc.collect()
    assert not any(ref() is not None for _, ref in memo._entries.values() if id(ref()) == ident)


def _lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[f"{path.name}:{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
    return out


def test_device_compile_and_every_stage_are_under_40_lines() -> None:
    lengths: dict[str, int] = {}
    for path in sorted((ROOT / "nx_hal" / "compile").glob("*.py")):
        lengths.update(_lengths(path))
    lengths["device.py:compile"] = _lengths(ROOT / "nx_hal" / "device.py")["device.py:compile"]
    assert lengths and not {name: n for name, n in lengths.items() if n >= 40}
