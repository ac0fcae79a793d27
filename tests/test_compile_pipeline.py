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
from nx_hal.compile import memo

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "examples" / "mlp.onnx"


def _mul_model(folder: Path, weight: float, *, external: bool) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import convert_model_to_external_data

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = numpy_helper.from_array(np.full(4, weight, np.float32), "W")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    path = folder / "model.onnx"
    onnx.save_model(model, path)
    return path


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
def test_a_changed_file_is_compiled_again(device: nx_hal.Device, keep_api_state: None, tmp_path: Path,
                                          external: bool) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = _mul_model(folder, 2.0, external=external)
    x = np.ones(4, np.float32)
    first = device.compile(path)
    np.testing.assert_array_equal(first(x)[0].to_numpy(), 2 * x)
    if external:  # only the weights change: the model's own file keeps its identity
        stat = os.stat(path)
        (folder / "weights.bin").write_bytes(np.full(4, 5.0, np.float32).tobytes())
        assert os.stat(path).st_mtime_ns == stat.st_mtime_ns
    else:
        _mul_model(folder, 5.0, external=False)
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
