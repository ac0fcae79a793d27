"""Executable.map (issue #32): several runs in flight, results in input order,
equal to one-at-a-time runs and to numpy, on every plugin here; and
``nx-hal run --throughput`` through the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal.errors import InvalidArgumentError
from tests.test_cli import nx_hal as nx_hal_cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TPU, NPU = "tpu:cpu", "npu:cpu"
W = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mlp.onnx"


def _available(selector: str) -> bool:
    try:
        return nx_hal.device(selector) is not None
    except nx_hal.NxHalError:
        return False


DEVICES = [pytest.param(s, marks=pytest.mark.skipif(not _available(s), reason=f"no {s} device")) for s in (NPU, TPU)]


def _model(dims: list[Any] | None = None) -> bytes:
    """y = relu(x @ W) + z: two inputs, so items are tuples."""
    shape = dims or [2, 8]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
              helper.make_tensor_value_info("z", TensorProto.FLOAT, [shape[0], 4])]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Add", ["r", "z"], ["y"])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], 4])
    graph = helper.make_graph(nodes, "map", inputs, [out], [numpy_helper.from_array(W, "W")])
    model: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return model


def _items(n: int, rows: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((rows, 8)).astype(np.float32), rng.standard_normal((rows, 4)).astype(np.float32))
            for _ in range(n)]


def _numpy(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    return np.asarray(np.maximum(x @ W, 0) + z)


@pytest.mark.parametrize("selector", DEVICES)
@pytest.mark.parametrize("in_flight", [1, 2, 8])
def test_map_equals_one_at_a_time_and_numpy_in_order(selector: str, in_flight: int) -> None:
    exe = nx_hal.device(selector).compile(_model(), format="onnx")
    items = _items(20)
    alone = [exe(*item)[0].to_numpy() for item in items]
    got = [outs[0].to_numpy() for outs in exe.map(iter(items), in_flight=in_flight)]
    assert len(got) == len(items)
    for i, (item, mapped, single) in enumerate(zip(items, got, alone, strict=True)):
        np.testing.assert_array_equal(mapped, single, err_msg=f"item {i}")  # same executable, same inputs
        np.testing.assert_allclose(mapped, _numpy(*item), rtol=1e-5, atol=1e-5, err_msg=f"item {i}")


@pytest.mark.parametrize("selector", DEVICES)
def test_map_takes_single_arrays_and_buffers_for_one_input(selector: str) -> None:
    dev = nx_hal.device(selector)
    exe = dev.compile(EXAMPLE)
    xs = [np.random.default_rng(i).standard_normal((1, 64)).astype(np.float32) for i in range(6)]
    items: list[object] = [dev.put(x) if i % 2 else x for i, x in enumerate(xs)]
    got = [outs[0].to_numpy() for outs in exe.map(items, in_flight=3)]
    for x, y in zip(xs, got, strict=True):
        np.testing.assert_array_equal(y, exe(x)[0].to_numpy())


@pytest.mark.parametrize("selector", DEVICES)
@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_bad_in_flight_is_refused_at_the_call(selector: str, bad: object) -> None:
    exe = nx_hal.device(selector).compile(_model(), format="onnx")
    with pytest.raises(InvalidArgumentError, match="in_flight must be an int of at least 1"):
        exe.map(_items(2), in_flight=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("selector", DEVICES)
def test_wrong_shape_in_the_middle_raises_at_its_item(selector: str) -> None:
    exe = nx_hal.device(selector).compile(_model(), format="onnx")
    items = _items(10)
    items[6] = (np.zeros((3, 8), np.float32), items[6][1])
    seen = []
    with pytest.raises(InvalidArgumentError, match=r"map: item 6: .*\b3\b"):
        for outs in exe.map(items, in_flight=4):
            seen.append(outs[0].to_numpy())
    assert len(seen) == 6  # every item before the bad one, in order, then the error
    for item, y in zip(items, seen, strict=False):
        np.testing.assert_allclose(y, _numpy(*item), rtol=1e-5, atol=1e-5)
    x, z = _items(1)[0]  # the executable still works, one at a time and mapped
    np.testing.assert_allclose(exe(x, z)[0].to_numpy(), _numpy(x, z), rtol=1e-5, atol=1e-5)
    (again,) = list(exe.map([(x, z)], in_flight=2))
    np.testing.assert_allclose(again[0].to_numpy(), _numpy(x, z), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("selector", DEVICES)
def test_stopping_early_waits_for_the_runs_in_flight(selector: str) -> None:
    exe = nx_hal.device(selector).compile(_model(), format="onnx")
    items = _items(12)
    results = exe.map(items, in_flight=8)
    first = next(results)[0].to_numpy()
    results.close()  # the runs still going are waited for, not left writing
    np.testing.assert_allclose(first, _numpy(*items[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe(*items[1])[0].to_numpy(), _numpy(*items[1]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("selector", DEVICES)
def test_dynamic_executable_maps_per_shape(selector: str) -> None:
    exe = nx_hal.device(selector).compile(_model(["batch", 8]), format="onnx")
    items = _items(3, rows=2) + _items(3, rows=5)
    got = [outs[0].to_numpy() for outs in exe.map(items, in_flight=2)]
    for item, y in zip(items, got, strict=True):
        assert y.shape == (item[0].shape[0], 4)
        np.testing.assert_allclose(y, _numpy(*item), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("selector", DEVICES)
def test_cli_run_throughput(selector: str, tmp_path: Path) -> None:
    """Through the command: map's last result checked against the example's
    numpy reference, and a count that agrees with its rate and duration."""
    out = nx_hal_cli("run", "--example", "mlp", "--device", selector, "--throughput", "--in-flight", "3",
                     "--seconds", "0.5", "--json", "--no-progress", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    rate = data["throughput"]
    assert "latency" not in data and data["reference"]["matches"]
    assert rate["in_flight"] == 3 and rate["inferences"] >= 1 and rate["seconds"] >= 0.5
    assert rate["inferences_per_s"] == pytest.approx(rate["inferences"] / rate["seconds"])
    assert 0 < rate["p50_ms"] <= rate["p90_ms"] <= rate["p99_ms"]
    text = nx_hal_cli("run", str(EXAMPLE), "--device", selector, "--throughput", "--seconds", "0.2", "--no-progress",
                      cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert any(line.startswith("throughput: ") and "inferences/s" in line and "4 in flight" in line
               for line in text.stdout.splitlines()), text.stdout


@pytest.mark.parametrize("flag", [["--in-flight", "0"], ["--seconds", "-1"], ["--seconds", "x"]])
def test_cli_bad_throughput_flags_are_usage_errors(flag: list[str], tmp_path: Path) -> None:
    out = nx_hal_cli("run", str(EXAMPLE), "--throughput", *flag, cwd=tmp_path)
    assert out.returncode == 2 and flag[0] in out.stderr, out.stderr
