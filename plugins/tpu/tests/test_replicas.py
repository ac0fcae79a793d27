"""Replicated execution: one executable over two XLA CPU devices
(num_replicas=2), inputs and outputs listed replica by replica, collectives
between the replicas, checked against numpy."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from conftest import PROGRAMS

nx_hal = pytest.importorskip("nx_hal")
from nx_hal.native import NULL, ffi, lib  # noqa: E402

X0 = np.array([1, 2, 3, 4], np.float32)
X1 = np.array([10, -20, 30.5, 40], np.float32)


def _compile(dev: Any, **options: Any) -> Any:
    return dev.compile((PROGRAMS / "replicated_sum.mlir").read_text(), "stablehlo", cache=False,
                       num_replicas=2, **options)


def _expected() -> list[np.ndarray]:
    # per replica: all_reduce(x) = x0 + x1, and x_r + r
    return [X0 + X1, X0 + 0, X0 + X1, X1 + 1]


def _check(outs: list[Any]) -> None:
    assert len(outs) == 4
    for got, want in zip(outs, _expected(), strict=False):
        np.testing.assert_array_equal(got.to_numpy(), want)


def test_signature_lists_every_replica(devices: list[Any]) -> None:
    exe = _compile(devices[0])
    assert exe.num_replicas == 2
    assert [(s.name, s.shape, s.device_index) for s in exe.inputs] == [("x", (4,), 0), ("x", (4,), 1)]
    assert [s.device_index for s in exe.outputs] == [0, 0, 1, 1]
    assert exe.input_devices == (devices[0], devices[1])
    assert exe.output_devices == (devices[0], devices[0], devices[1], devices[1])
    single = devices[0].compile((PROGRAMS / "add.mlir").read_text(), "stablehlo", cache=False)
    assert single.num_replicas == 1 and all(s.device_index == -1 for s in single.inputs)


def test_replicas_compute_and_reduce(devices: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(devices[0])
    gc.collect()
    base = [d.memory_stats().bytes_in_use for d in devices]
    outs = exe(X0, X1)  # host arrays: put on each replica's device
    assert [o.device for o in outs] == list(exe.output_devices)
    _check(outs)
    outs, event = exe.run_async(X0, X1)
    event.wait(30)
    _check(outs)
    del event  # it holds the inputs it made
    # Buffers already on each replica's device take the C path.
    b0, b1 = devices[0].put(X0), devices[1].put(X1)

    def python_path(self: object, inputs: object) -> None:
        raise AssertionError("buffers on their replicas' devices took the Python path")

    monkeypatch.setattr(nx_hal.Executable, "_call_slow", python_path)
    outs = exe(b0, b1)
    monkeypatch.undo()
    _check(outs)
    # Each output is counted on its own device while it lives.
    assert [d.memory_stats().bytes_in_use for d in devices] == [b + 16 + 2 * 16 for b in base]
    del outs, b0, b1
    gc.collect()
    assert [d.memory_stats().bytes_in_use for d in devices] == base


def test_replica_errors(devices: list[Any]) -> None:
    with pytest.raises(nx_hal.InvalidArgumentError, match="compile it for device index 0"):
        _compile(devices[1])
    with pytest.raises(nx_hal.InvalidArgumentError, match="num_replicas=3, but this PJRT client has 2"):
        devices[0].compile((PROGRAMS / "replicated_sum.mlir").read_text(), "stablehlo", cache=False,
                           num_replicas=3)
    with pytest.raises(nx_hal.UnimplementedError, match="num_partitions=2"):
        devices[0].compile((PROGRAMS / "add.mlir").read_text(), "stablehlo", cache=False, num_partitions=2)
    exe = _compile(devices[0])
    with pytest.raises(nx_hal.UnimplementedError, match="not serialised"):
        exe.serialize()
    cached = devices[0].compile((PROGRAMS / "replicated_sum.mlir").read_text(), "stablehlo", num_replicas=2)
    np.testing.assert_array_equal(cached(X0, X1)[3].to_numpy(), X1 + 1)  # the cache declined it quietly
    # Through the table: a buffer on the wrong replica's device, or one replica's inputs only.
    api = devices[0]._api
    on_0 = [devices[0].put(X0), devices[0].put(X1)]
    for inputs, message in ((on_0, "replica 1 runs on"), (on_0[:1], "1 for each of 2 replicas")):
        handles = ffi.new("nxhal_buffer_t*[]", [b.handle for b in inputs])
        outs = ffi.new("nxhal_buffer_t*[]", 4)
        status = lib.nxhal_call_executable_execute(api, exe.handle, handles, len(inputs), outs, 4, NULL)
        assert status != NULL
        with pytest.raises(nx_hal.InvalidArgumentError, match=message):
            exe._raise_status(int(ffi.cast("uintptr_t", status)))
