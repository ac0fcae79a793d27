"""Outputs of an asynchronous run (issue: async runs must not read freed
memory or hand out unfinished outputs).

``executable_execute`` with an event returns before OpenVINO has written the
outputs. The plugin holds its own references on the outputs' storage, so a
caller may destroy them before the event completes, and it marks them
pending, so every read of their bytes (``buffer_to_host``, the zero-copy
DLPack export, use as another run's input) waits for the run. The model is
heavy enough (three 1024x1024 MatMuls) that these reads really come while
the run is going on; every value is checked against onnxruntime.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import ort_run
from onnx import TensorProto, helper, numpy_helper

from nx_hal.buffer import Buffer
from nx_hal.device import Device
from nx_hal.executable import Executable
from nx_hal.native import check, ffi, lib

N = 1024
# f32 against onnxruntime's f32: 1024-long dot products in another order.
RTOL = 1e-3
ATOL = 1e-3


def _heavy_model(seed: int = 11) -> onnx.ModelProto:
    """x[N, N] -> (MatMul, Tanh) x 2 -> MatMul -> y[N, N] (4 MiB, which OpenVINO
    writes straight into our buffer), and s[N] = ReduceSum(y, axis 1)
    (4 KiB, which the plugin copies out of the request when the run ends)."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32),
                                f"w{i}")
        for i in range(3)
    ]
    inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"))
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["m0"]),
        helper.make_node("Tanh", ["m0"], ["t0"]),
        helper.make_node("MatMul", ["t0", "w1"], ["m1"]),
        helper.make_node("Tanh", ["m1"], ["t1"]),
        helper.make_node("MatMul", ["t1", "w2"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axis"], ["s"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "heavy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, N]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [N])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                              producer_name="nx_hal tests")
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


class Case:
    """The compiled model, a few inputs and onnxruntime's outputs for them."""

    def __init__(self, dev: Device) -> None:
        self.model = _heavy_model()
        exe = dev.compile(self.model)
        assert isinstance(exe, Executable)
        self.exe: Executable = exe
        rng = np.random.default_rng(5)
        self.inputs = [rng.standard_normal((N, N)).astype(np.float32) for _ in range(4)]
        self.expected = [ort_run(self.model, x) for x in self.inputs]


@pytest.fixture(scope="module")
def case(dev: Device) -> Case:
    return Case(dev)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))


def _assert_outputs(case: Case, k: int, got: list[np.ndarray], what: str) -> None:
    for i, (g, w) in enumerate(zip(got, case.expected[k], strict=True)):
        assert _close(g, w), f"{what}, output {i}: max error {np.abs(g - w).max()}"


def test_read_copy_before_wait(case: Case) -> None:
    pending = 0
    for r in range(20):
        k = r % len(case.inputs)
        outs, ev = case.exe.run_async(case.inputs[k])
        pending += not ev.ready()
        got = [o.to_numpy(copy=True) for o in outs]  # buffer_to_host, no wait first
        _assert_outputs(case, k, got, f"run {r}, to_numpy(copy=True)")
        ev.wait()
    assert pending > 0, "every run had finished before it was read: the test proves nothing"


def test_read_view_before_wait(case: Case) -> None:
    for r in range(20):
        k = r % len(case.inputs)
        outs, ev = case.exe.run_async(case.inputs[k])
        got = [o.to_numpy() for o in outs]  # the zero-copy export, no wait first
        _assert_outputs(case, k, got, f"run {r}, to_numpy()")
        ev.wait()
        # Still right once the run is done: the view is of the memory the run wrote.
        _assert_outputs(case, k, got, f"run {r}, to_numpy() after wait")


def test_from_dlpack_before_wait(case: Case) -> None:
    for r in range(20):
        k = r % len(case.inputs)
        outs, ev = case.exe.run_async(case.inputs[k])
        got = [np.from_dlpack(o) for o in outs]
        _assert_outputs(case, k, got, f"run {r}, np.from_dlpack")
        ev.wait()


def test_to_numpy_async_before_wait(case: Case) -> None:
    for r in range(10):
        k = r % len(case.inputs)
        outs, ev = case.exe.run_async(case.inputs[k])
        copies = [o.to_numpy_async() for o in outs]
        for _, copied in copies:
            copied.wait()
        _assert_outputs(case, k, [a for a, _ in copies], f"run {r}, to_numpy_async")
        ev.wait()


def test_pending_output_as_input(case: Case) -> None:
    # y = f(x) has x's shape, so the model chains onto itself: the second
    # run must read the first one's output only once it is written.
    x = case.inputs[0]
    want = ort_run(case.model, case.expected[0][0])
    for r in range(10):
        outs, ev = case.exe.run_async(x)
        chained = case.exe(outs[0])
        for i, (g, w) in enumerate(zip(chained, want, strict=True)):
            got = g.to_numpy()
            assert _close(got, w), f"run {r}, output {i}: max error {np.abs(got - w).max()}"
        ev.wait()


def test_drop_outputs_before_wait(case: Case) -> None:
    for r in range(50):
        outs, ev = case.exe.run_async(case.inputs[r % len(case.inputs)])
        del outs
        gc.collect()
        ev.wait()
    outs = case.exe(case.inputs[1])
    _assert_outputs(case, 1, [o.to_numpy() for o in outs], "synchronous run after the drops")


def _execute_then_destroy(exe: Executable, x: Buffer) -> tuple[bool, Any]:
    """Starts a run through the C ABI itself and destroys its output buffers
    at once, before the event completes (the Python wrappers may keep them
    alive until then; a C caller need not). Returns whether the run was still
    going when they were destroyed, and the event, not yet awaited."""
    api = exe.device._api
    n_out = len(exe.outputs)
    inputs = ffi.new("nxhal_buffer_t*[]", [x.handle])
    outs = ffi.new("nxhal_buffer_t*[]", n_out)
    event = ffi.new("nxhal_event_t**")
    check(api, lib.nxhal_call_executable_execute(api, exe.handle, inputs, 1, outs, n_out, event),
          "npu")
    for i in range(n_out):
        lib.nxhal_call_buffer_destroy(api, outs[i])
    ready = ffi.new("int32_t*")
    check(api, lib.nxhal_call_event_is_ready(api, event[0], ready), "npu")
    return not ready[0], event[0]


def _await(exe: Executable, event: Any) -> None:
    api = exe.device._api
    try:
        check(api, lib.nxhal_call_event_await(api, event, -1), "npu")
    finally:
        lib.nxhal_call_event_destroy(api, event)


def test_c_destroy_outputs_before_completion(case: Case, dev: Device) -> None:
    x = dev.put(case.inputs[2])
    pending = 0
    for r in range(50):
        was_pending, event = _execute_then_destroy(case.exe, x)
        pending += was_pending
        if r % 2:
            # A second run while the first still writes: its outputs may be
            # given the memory just freed, which the first run must not write.
            outs, ev = case.exe.run_async(case.inputs[3])
            got = [o.to_numpy(copy=True) for o in outs]
            _await(case.exe, event)
            ev.wait()
            _assert_outputs(case, 3, got, f"run {r}, beside a run whose outputs were destroyed")
        else:
            _await(case.exe, event)
    assert pending > 0, "every run had finished before its outputs were destroyed"
    outs = case.exe(case.inputs[1])
    _assert_outputs(case, 1, [o.to_numpy() for o in outs], "synchronous run after the destroys")


def test_threads_read_before_wait(case: Case) -> None:
    threads, runs = 4, 6
    errors: list[str] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for r in range(runs):
            k = (t + r) % len(case.inputs)
            try:
                outs, ev = case.exe.run_async(case.inputs[k])
                got = [o.to_numpy(copy=True) if (t + r) % 2 else o.to_numpy() for o in outs]
                for i, (g, w) in enumerate(zip(got, case.expected[k], strict=True)):
                    if not _close(g, w):
                        errors.append(f"thread {t} run {r} output {i}: max error "
                                      f"{np.abs(g - w).max()}")
                ev.wait()
            except Exception as exc:  # collected, reported below
                errors.append(f"thread {t} run {r}: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(300)
    assert not any(th.is_alive() for th in pool), "a run hung"
    assert errors == [], errors[:5]
