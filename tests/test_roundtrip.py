"""Round trips without copies (issue #14): ``Buffer.to_numpy()`` on a device
in host memory is a read-only view that keeps the memory alive by itself,
``copy=True`` a writable array of its own, ``__array__`` follows numpy 2's
``copy``; host arrays given to an executable are aliased where the plugin
can, and changing them after the call never changes an output. Run on the
npu plugin's CPU device and tpu:cpu (real plugins), each skipped with the
reason when not installed or not usable here; values are checked against
numpy."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from nx_hal.buffer import Buffer
from nx_hal.device import Device
from nx_hal.dynamic import DynamicExecutable
from nx_hal.errors import InvalidArgumentError, NxHalError
from nx_hal.executable import Executable
from tests.plugin_env import fixture_registry, installed_device

SELECTORS = ["npu:cpu", "tpu:cpu"]
N = 64  # matmul size: big enough for real kernels, quick enough for tests


@pytest.fixture(params=SELECTORS)
def device(request: pytest.FixtureRequest) -> Device:
    return installed_device(request.param)


def _onnx(op: str, n_inputs: int, shape: list[int]) -> Any:
    from onnx import TensorProto, helper

    names = [f"x{i}" for i in range(n_inputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"])], op.lower(),
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _stablehlo(body: str, n_inputs: int, shape: list[int]) -> str:
    t = f"tensor<{'x'.join(map(str, shape))}xf32>"
    args = ", ".join(f"%x{i}: {t}" for i in range(n_inputs))
    return (f"module @m {{\n  func.func public @main({args}) -> {t} {{\n"
            f"    {body.format(t=t)}\n  }}\n}}\n")


def compile_matmul(device: Device) -> Executable:
    return compile_matmul_n(device, N)


def _one(exe: Executable | DynamicExecutable) -> Executable:
    """The executable of a program of static shapes: never a per-shape one."""
    assert isinstance(exe, Executable)
    return exe


def compile_matmul_n(device: Device, n: int) -> Executable:
    if device.plugin == "npu":
        pytest.importorskip("onnx")
        return _one(device.compile(_onnx("MatMul", 2, [n, n])))
    body = ("%0 = stablehlo.dot_general %x0, %x1, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}\n"
            "    return %0 : {t}")
    return _one(device.compile(_stablehlo(body, 2, [n, n]), format="stablehlo", verify="off", cache=False))


def compile_identity(device: Device) -> Executable:
    """A program whose output is its input passed straight through."""
    if device.plugin == "npu":
        pytest.importorskip("onnx")
        return _one(device.compile(_onnx("Identity", 1, [N, N])))
    return _one(device.compile(_stablehlo("return %x0 : {t}", 1, [N, N]), format="stablehlo", verify="off",
                               cache=False))


def aligned(shape: tuple[int, ...], seed: int) -> npt.NDArray[np.float32]:
    """Random f32 values in a 64-byte aligned array (what XLA CPU aliases)."""
    count = int(np.prod(shape))
    raw = np.empty(count * 4 + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    out = raw[offset:offset + count * 4].view(np.float32).reshape(shape)
    out[...] = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    return out


# -- to_numpy: views ---------------------------------------------------------------


def test_view_is_read_only_and_shares_the_export(device: Device) -> None:
    host = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)  # 4 KiB: the smallest that is a view
    buf = device.put(host)
    first, second = buf.to_numpy(), buf.to_numpy()
    assert not first.flags.writeable
    with pytest.raises(ValueError):
        first.flags.writeable = True  # numpy refuses: the memory is not its to write
    with pytest.raises(ValueError):
        first[0, 0] = 1.0
    assert np.shares_memory(first, second)  # both views of the buffer's one memory
    assert np.shares_memory(first, np.from_dlpack(buf))
    assert not np.shares_memory(first, host)  # put copied: the buffer's own memory
    np.testing.assert_array_equal(first, host)


def test_small_arrays_are_read_only_copies(device: Device) -> None:
    # Under 4 KiB a copy is cheaper than a view; callers still get one behaviour.
    host = np.arange(1023, dtype=np.float32)
    buf = device.put(host)
    first, second = buf.to_numpy(), buf.to_numpy()
    assert not first.flags.writeable and not second.flags.writeable
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, host)
    assert buf.nbytes == 4092


def test_view_outlives_the_buffer(device: Device) -> None:
    exe = compile_matmul(device)
    a, b = aligned((N, N), 1), aligned((N, N), 2)
    out = exe(a, b)[0]
    view = out.to_numpy()
    del out, exe
    gc.collect()
    # New buffers may take freed memory: the view must not be among it.
    junk = [device.put(np.full((N, N), 7.0, np.float32)) for _ in range(8)]
    np.testing.assert_allclose(view, a @ b, rtol=1e-4, atol=1e-4)
    del junk


def test_copy_is_writable_and_independent(device: Device) -> None:
    host = np.arange(6, dtype=np.float32)
    buf = device.put(host)
    copy = buf.to_numpy(copy=True)
    assert copy.flags.writeable and copy.flags.owndata
    assert not np.shares_memory(copy, buf.to_numpy())
    copy[:] = -1.0
    np.testing.assert_array_equal(buf.to_numpy(), host)


def test_zero_copy_put_view_keeps_the_host_array(device: Device) -> None:
    host = aligned((N, N), 3)
    expected = host.copy()
    buf = device.put(host, zero_copy=True)
    view = buf.to_numpy()
    assert not view.flags.writeable
    if buf.is_zero_copy:
        assert np.shares_memory(view, host)
    del buf, host
    gc.collect()
    np.testing.assert_array_equal(view, expected)


def test_matmul_numpy_to_numpy(device: Device) -> None:
    exe = compile_matmul(device)
    a, b = aligned((N, N), 4), aligned((N, N), 5)
    got = exe(a, b)[0].to_numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    # Unaligned and non-contiguous inputs take the copy (or the plugin's own).
    c = np.asfortranarray(b)
    np.testing.assert_allclose(exe(a[:, :], c)[0].to_numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_view_fed_back_as_an_input(device: Device) -> None:
    """A read-only view is a valid input (only read); chaining keeps values right."""
    exe = compile_matmul(device)
    a, b = aligned((N, N), 13) / N, aligned((N, N), 14) / N
    first = exe(a, b)[0].to_numpy()
    second = exe(first, b)[0].to_numpy()
    np.testing.assert_allclose(second, (a @ b) @ b, rtol=1e-4, atol=1e-5)


def test_output_of_an_async_run_is_read_when_ready(device: Device) -> None:
    exe = compile_matmul(device)
    a, b = aligned((N, N), 6), aligned((N, N), 7)
    outs, event = exe.run_async(a, b)
    if device.plugin == "npu":
        event.wait()  # the npu plugin's export does not wait for a pending run
    np.testing.assert_allclose(outs[0].to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    event.wait()


# -- host inputs aliased -----------------------------------------------------------


def test_inputs_changed_after_the_call_leave_outputs_alone(device: Device) -> None:
    exe = compile_matmul(device)
    a, b = aligned((N, N), 8), aligned((N, N), 9)
    expected = a @ b
    if device.plugin == "tpu":  # the alias really happens here
        probe = device._put_alias(a)
        assert probe.is_zero_copy
        del probe
    out = exe(a, b)[0]
    a[...] = 0.0
    b[...] = np.nan
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(exe(a, b)[0].to_numpy(copy=True)[:, :1], np.full((N, 1), np.nan))


def misaligned(shape: tuple[int, ...], seed: int) -> npt.NDArray[np.float32]:
    """Random f32 values 16 bytes past a 64-byte boundary: what numpy's own
    allocator often gives, and what XLA CPU will not alias (the tpu plugin
    stages such inputs from 64 KiB up)."""
    count = int(np.prod(shape))
    raw = np.empty(count * 4 + 128, np.uint8)
    offset = (-raw.ctypes.data) % 64 + 16
    out = raw[offset:offset + count * 4].view(np.float32).reshape(shape)
    out[...] = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    return out


def test_staged_inputs_reused_call_after_call(device: Device) -> None:
    """Misaligned inputs large enough to be staged: each call's outputs stay
    right while later calls reuse the staging memory, and changing the
    inputs after a call changes nothing it returned."""
    n = 256  # 256 KiB per input
    exe = compile_matmul_n(device, n)
    results = []
    for seed in range(4):
        a, b = misaligned((n, n), 2 * seed) / n, misaligned((n, n), 2 * seed + 1) / n
        expected = a @ b
        out = exe(a, b)[0]
        a[...] = np.nan
        b[...] = np.nan
        results.append((out, expected))
    for out, expected in results:
        np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_misaligned_zero_copy_put_is_a_copy(device: Device) -> None:
    host = misaligned((256, 256), 21)
    expected = host.copy()
    buf = device.put(host, zero_copy=True)
    if device.plugin == "tpu":  # OpenVINO aliases any alignment
        assert not buf.is_zero_copy  # staged: the caller's memory is not aliased
        host[...] = 0.0
    np.testing.assert_array_equal(buf.to_numpy(), expected)
    exe = compile_matmul_n(device, 256)
    ident = np.eye(256, dtype=np.float32)
    np.testing.assert_allclose(exe(buf, ident)[0].to_numpy(), expected, rtol=1e-6, atol=1e-6)


def test_large_staged_input_starts_on_a_huge_page(device: Device) -> None:
    """A staged input from 4 MiB up sits in a block on a 2 MiB boundary (advised
    huge pages, as numpy advises its own): its values are the caller's."""
    host = misaligned((1024, 1024), 23)
    expected = host.copy()
    buf = device.put(host, zero_copy=True)
    view = buf.to_numpy()
    np.testing.assert_array_equal(view, expected)
    if device.plugin == "tpu":  # OpenVINO aliases any alignment
        assert not buf.is_zero_copy
        assert view.ctypes.data % (2 << 20) == 0
        host[...] = 0.0
        np.testing.assert_array_equal(view, expected)
    small = device.put(misaligned((256, 256), 24), zero_copy=True).to_numpy()
    if device.plugin == "tpu":  # a smaller block needs only XLA's 64 bytes
        assert small.ctypes.data % 64 == 0


def test_staged_inputs_of_changing_shapes(device: Device) -> None:
    """More shapes than the staging pool keeps: old blocks are dropped, values stay right."""
    for n in (128, 160, 192, 224, 256, 288, 320, 352, 384, 128, 256):
        exe = compile_matmul_n(device, n)
        a, b = misaligned((n, n), n) / n, misaligned((n, n), n + 1) / n
        np.testing.assert_allclose(exe(a, b)[0].to_numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_input_passed_through_is_not_the_output(device: Device) -> None:
    exe = compile_identity(device)
    x = aligned((N, N), 10)
    expected = x.copy()
    out = exe(x)[0]
    view = out.to_numpy()
    assert not np.shares_memory(view, x)
    x[...] = 0.0
    np.testing.assert_array_equal(out.to_numpy(), expected)


def test_run_async_copies_host_inputs(device: Device) -> None:
    exe = compile_matmul(device)
    a, b = aligned((N, N), 11), aligned((N, N), 12)
    expected = a @ b
    outs, event = exe.run_async(a, b)
    a[...] = 0.0  # at once: the run may still be reading its inputs
    event.wait()
    np.testing.assert_allclose(outs[0].to_numpy(), expected, rtol=1e-4, atol=1e-4)


# -- __array__ and the copy fallback -------------------------------------------------


def test_array_protocol_copy_semantics(device: Device) -> None:
    host = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    buf = device.put(host)
    view = np.asarray(buf)
    assert not view.flags.writeable and np.shares_memory(view, buf.to_numpy())
    assert np.shares_memory(np.asarray(buf, copy=False), view)
    fresh = np.array(buf)  # copy=True
    assert fresh.flags.writeable and not np.shares_memory(fresh, view)
    wider = np.asarray(buf, dtype=np.float64)
    assert wider.dtype == np.float64 and wider.flags.writeable
    np.testing.assert_array_equal(wider, host)
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(buf, dtype=np.float64, copy=False)


def test_without_an_export_everything_copies(device: Device, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path of device memory, or a plugin that exports no view."""
    monkeypatch.setattr(Buffer, "_host_view", lambda self: None)
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = device.put(host)
    got = buf.to_numpy()
    assert not got.flags.writeable and got.flags.owndata  # a copy, read-only as a view would be
    np.testing.assert_array_equal(got, host)
    assert buf.to_numpy(copy=True).flags.writeable
    assert np.array(buf).flags.writeable
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(buf, copy=False)
    np.testing.assert_array_equal(np.from_dlpack(buf), host)  # __dlpack__ unchanged


def test_fixture_plugin_export(tmp_path: Path) -> None:
    """A plugin whose export is a private host copy (tests/fixtures/fixture_hostmem.c)."""
    reg = fixture_registry(tmp_path, "hostmem")
    reg.load_all()
    record = reg.records["fixture-hostmem"]
    assert record.state == "loaded", record.reason
    dev = record.devices[0]
    host = np.arange(10, dtype=np.int32)
    buf = dev.put(host)
    view = buf.to_numpy()
    del buf
    gc.collect()
    np.testing.assert_array_equal(view, host)
    assert not view.flags.writeable


def test_bf16_words(device: Device) -> None:
    """bf16 outputs read as their raw uint16 words, as a view and as a copy."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if device.plugin != "tpu":
        pytest.skip(f"{device.selector}: bf16 comes from a StableHLO program here")
    program = ("module @m {\n  func.func public @main(%x0: tensor<4xf32>) -> tensor<4xbf16> {\n"
               "    %0 = stablehlo.convert %x0 : (tensor<4xf32>) -> tensor<4xbf16>\n"
               "    return %0 : tensor<4xbf16>\n  }\n}\n")
    exe = device.compile(program, format="stablehlo", verify="off", cache=False)
    host = np.array([1.0, -2.5, 3.25, 0.1], np.float32)
    out = exe(host)[0]
    assert out.dtype == "bf16"
    words = host.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = out.to_numpy()
    assert got.dtype == np.uint16 and not got.flags.writeable
    np.testing.assert_array_equal(got, words)
    copy = out.to_numpy(copy=True)
    assert copy.flags.writeable
    np.testing.assert_array_equal(copy, words)


def test_a_0d_array_that_needs_converting_stays_0d(device: Device) -> None:
    """A big-endian or non-native scalar is copied into native order, and keeps its rank."""
    buf = device.put(np.array(7, ">i4"))
    assert buf.shape == () and buf.to_numpy() == 7


def test_bf16_arrays_go_in(device: Device) -> None:
    """ml_dtypes' bfloat16 arrays (jax's, onnx's) are bf16 inputs; the
    output comes back as the same words."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if device.plugin != "tpu":
        pytest.skip(f"{device.selector}: bf16 comes from a StableHLO program here")
    program = ("module @m {\n  func.func public @main(%x0: tensor<4xbf16>) -> tensor<4xbf16> {\n"
               "    %0 = stablehlo.add %x0, %x0 : tensor<4xbf16>\n"
               "    return %0 : tensor<4xbf16>\n  }\n}\n")
    exe = device.compile(program, format="stablehlo", verify="off", cache=False)
    host = np.array([1.0, -2.5, 3.25, 0.1], np.float32).astype(ml_dtypes.bfloat16)
    assert device.put(host).dtype == "bf16"
    got = exe(host)[0].to_numpy()
    np.testing.assert_array_equal(got.view(ml_dtypes.bfloat16), host + host)
    with pytest.raises(ValueError, match="no nx_hal equivalent"):
        device.put(np.zeros(4, ml_dtypes.float8_e4m3fn))


# -- reprs ------------------------------------------------------------------------


def test_executable_repr_names_its_device(device: Device) -> None:
    exe = compile_identity(device)
    assert f"device={device.selector}" in repr(exe)
    assert f"device={device.selector}" in repr(device.put(np.zeros(2, np.float32)))


def test_dlpack_of_an_aliasing_buffer_outlives_it(device: Device) -> None:
    """A buffer that aliases the caller's array exports that array itself:
    the capsule keeps the memory alive after the buffer and every other
    reference to the array are gone."""
    host = np.arange(4096, dtype=np.float32)
    buf = device.put(host, zero_copy=True)
    capsule_owner = np.from_dlpack(buf)
    del buf, host
    gc.collect()
    np.zeros(4096 * 4, np.float32)  # reuse freed memory, if any were freed
    assert capsule_owner.tolist() == np.arange(4096, dtype=np.float32).tolist()


def test_async_outputs_outlive_a_caller_that_drops_them(device: Device) -> None:
    """Outputs of a pending run stay alive (held by the event) when the
    caller drops them; later runs still compute the right values."""
    x = np.random.default_rng(1).standard_normal((N, N)).astype(np.float32)
    exe = compile_matmul(device)
    for _ in range(20):
        outs, event = exe.run_async(x, x)
        del outs
        gc.collect()
        event.wait(60)
    (out,) = exe(x, x)
    np.testing.assert_allclose(out.to_numpy(), x @ x, rtol=1e-4, atol=1e-4)


# -- host arrays put by the C path (exe(x) without a Python frame) -------------------


@pytest.fixture
def slow_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The input count of every call that left the C path for ``_call_slow``."""
    calls: list[int] = []
    original = Executable._call_slow

    def spy(self: Executable, inputs: tuple[object, ...]) -> list[Buffer]:
        calls.append(len(inputs))
        return original(self, inputs)

    monkeypatch.setattr(Executable, "_call_slow", spy)
    return calls


def test_matching_arrays_run_in_c(device: Device, slow_calls: list[int]) -> None:
    """Arrays of exactly the inputs' dtype and shape, C-contiguous, aligned
    and native-endian -- numpy's own allocation, 64-byte aligned ones and
    read-only views -- never reach Python, and compute what numpy does."""
    exe = compile_matmul(device)
    a = np.random.default_rng(20).standard_normal((N, N), dtype=np.float32) / 8
    b = aligned((N, N), 21) / 8
    (out,) = exe(a, b)
    view = out.to_numpy()
    (again,) = exe(view, b)
    assert slow_calls == []
    np.testing.assert_allclose(view, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(again.to_numpy(), (a @ b) @ b, rtol=1e-4, atol=1e-4)


def test_buffers_and_arrays_mixed_run_in_c(device: Device, slow_calls: list[int]) -> None:
    exe = compile_matmul(device)
    a, b = aligned((N, N), 22), aligned((N, N), 23)
    abuf, bbuf = device.put(a), device.put(b)
    for args in ((abuf, b), (a, bbuf), (a, b), (abuf, bbuf)):
        (out,) = exe(*args)
        np.testing.assert_allclose(out.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert slow_calls == []


@pytest.mark.parametrize("kind", ["fortran", "strided", "byteswapped"])
def test_arrays_to_convert_take_the_slow_path(device: Device, slow_calls: list[int], kind: str) -> None:
    """Python converts these (as it always has) and the values are right."""
    exe = compile_matmul(device)
    a, b = aligned((N, N), 24), aligned((N, N), 25)
    x: object = {
        "fortran": np.asfortranarray(b),
        "strided": np.repeat(b, 2, axis=1)[:, ::2],
        "byteswapped": b.astype(b.dtype.newbyteorder()),
    }[kind]
    (out,) = exe(a, x)
    assert slow_calls == [2]
    np.testing.assert_allclose(out.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", ["int32", "float64", "float16", "list", "shape"])
def test_arrays_of_another_dtype_or_shape_get_the_same_error(
    device: Device, slow_calls: list[int], make: str
) -> None:
    """No conversion to the input's dtype, in C or in Python: the plugin's
    error naming the input and both dtypes (or shapes), as before."""
    exe = compile_matmul(device)
    a = aligned((N, N), 26)
    x: object = {
        "int32": a.astype(np.int32), "float64": a.astype(np.float64), "float16": a.astype(np.float16),
        "list": a.tolist(), "shape": a[: N // 2],
    }[make]
    words = {"int32": ["i32", "f32"], "float64": ["f64", "f32"], "float16": ["f16", "f32"],
             "list": ["f64", "f32"], "shape": [f"{N // 2},{N}", f"{N},{N}"]}[make]
    with pytest.raises(InvalidArgumentError) as info:
        exe(a, x)
    assert slow_calls == [2]
    message = str(info.value)
    assert "input 1" in message and all(w in message for w in words), message
    with pytest.raises(InvalidArgumentError) as before:
        exe._call_slow((a, x))  # what every host array took until the C path
    assert str(before.value) == message


def test_array_changed_after_a_c_call_leaves_the_outputs(device: Device, slow_calls: list[int]) -> None:
    """An identity program's output is never the input array, whether the
    plugin aliased it or not; changing the array after the call changes
    no output."""
    exe = compile_identity(device)
    for x in (aligned((N, N), 27), np.random.default_rng(28).standard_normal((N, N), dtype=np.float32)):
        expected = x.copy()
        (out,) = exe(x)
        view = out.to_numpy()
        assert not np.shares_memory(view, x)
        x[...] = -1.0
        np.testing.assert_array_equal(view, expected)
        np.testing.assert_array_equal(out.to_numpy(copy=True), expected)
    matmul = compile_matmul(device)
    a, b = aligned((N, N), 29), aligned((N, N), 30)
    expected = a @ b
    (out,) = matmul(a, b)
    a[...] = np.nan
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-4, atol=1e-4)
    assert slow_calls == []


def test_arrays_are_not_leaked(device: Device) -> None:
    """The C path releases what it took of each array: the buffer (device
    memory where the plugin copied), the __array_struct__ capsule and its
    reference; so do its fallbacks and errors."""
    exe = compile_matmul(device)
    a = aligned((N, N), 31)
    b = np.random.default_rng(32).standard_normal((N, N), dtype=np.float32)  # tpu:cpu copies it
    fortran, wrong = np.asfortranarray(b), b.astype(np.int32)
    abuf = device.put(a)
    exe(a, b)
    before = [sys.getrefcount(x) for x in (a, b, fortran, wrong)]
    in_use = device.memory_stats().bytes_in_use
    for _ in range(100):
        exe(a, b)
        exe(abuf, b)
        exe(a, fortran)
        try:
            exe(a, wrong)
        except InvalidArgumentError:
            pass
    gc.collect()
    assert [sys.getrefcount(x) for x in (a, b, fortran, wrong)] == before
    assert device.memory_stats().bytes_in_use == in_use


def test_plugin_error_of_a_c_put_is_raised_as_before(device: Device) -> None:
    """buffer_from_host failing in C gives the exception Python's put gave:
    here the memory limit (tpu:cpu copies numpy's 16-byte aligned arrays,
    and counts them)."""
    if device.plugin != "tpu":
        pytest.skip(f"{device.selector}: aliased puts use no device memory here")
    exe = compile_matmul(device)
    raw = np.empty(N * N * 4 + 128, np.uint8)
    offset = (-raw.ctypes.data) % 64 + 16  # aligned for numpy, not for XLA
    a = raw[offset:offset + N * N * 4].view(np.float32).reshape(N, N)
    a[...] = np.random.default_rng(33).standard_normal((N, N), dtype=np.float32)
    device.set_memory_limit(1)
    try:
        with pytest.raises(NxHalError) as info:
            exe(a, a)
        with pytest.raises(NxHalError) as before:
            exe._call_slow((a, a))
    finally:
        device.set_memory_limit(None)
    assert type(info.value) is type(before.value) and str(info.value) == str(before.value)
    np.testing.assert_allclose(exe(a, a)[0].to_numpy(), a @ a, rtol=1e-4, atol=1e-4)


def test_scalars_and_other_plugins(tmp_path: Path) -> None:
    """Rank-0 inputs (numpy scalars and 0-d arrays) and a third plugin
    (tests/fixtures/fixture_hostmem.c) on the C path."""
    reg = fixture_registry(tmp_path, "hostmem")
    reg.load_all()
    record = reg.records["fixture-hostmem"]
    assert record.state == "loaded", record.reason
    dev = record.devices[0]
    add = dev.compile(b"add f32 scalar", "fixture-elementwise", cache=False)
    (out,) = add(np.float32(1.5), np.array(2.25, np.float32))
    assert out.to_numpy().shape == () and float(out.to_numpy()) == 3.75
    mul = dev.compile(b"mul i32 2,3", "fixture-elementwise", cache=False)
    x, y = np.arange(6, dtype=np.int32).reshape(2, 3), np.full((2, 3), -3, np.int32)
    np.testing.assert_array_equal(mul(x, dev.put(y))[0].to_numpy(), x * y)
    np.testing.assert_array_equal(mul(x, y.astype(np.int64).astype(np.int32))[0].to_numpy(), x * y)


# -- arrays passed twice, and arrays numpy made aligned ------------------------------


def compile_subtract(device: Device, n: int) -> Executable:
    if device.plugin == "npu":
        pytest.importorskip("onnx")
        return _one(device.compile(_onnx("Sub", 2, [n, n])))
    body = "%0 = stablehlo.subtract %x0, %x1 : {t}\n    return %0 : {t}"
    return _one(device.compile(_stablehlo(body, 2, [n, n]), format="stablehlo", verify="off", cache=False))


@pytest.mark.parametrize("make", [misaligned, aligned])
def test_an_array_passed_twice(device: Device, slow_calls: list[int], make: Any) -> None:
    """exe(x, x) puts x once (one staging copy where it is misaligned) and
    reads it as both inputs; then x changes and the next call sees it."""
    n = 256  # staged from 64 KiB up
    x = make((n, n), 31) / n
    sub, mm = compile_subtract(device, n), compile_matmul_n(device, n)
    np.testing.assert_array_equal(sub(x, x)[0].to_numpy(), np.zeros((n, n), np.float32))
    np.testing.assert_allclose(mm(x, x)[0].to_numpy(), x @ x, rtol=1e-4, atol=1e-4)
    y = x.copy()
    x += 1.0
    np.testing.assert_allclose(sub(x, y)[0].to_numpy(), np.ones((n, n), np.float32), rtol=1e-6)
    np.testing.assert_allclose(mm(x, x)[0].to_numpy(), x @ x, rtol=1e-4, atol=1e-4)
    assert slow_calls == []


def test_the_same_array_for_inputs_of_other_shapes_is_refused_as_before(device: Device) -> None:
    """Passed twice, x matches the first input and not the second: the
    second gets the error it always got, not the first input's buffer."""
    exe = compile_matmul(device)
    x = aligned((N, N), 32)
    if device.plugin == "npu":
        onnx = pytest.importorskip("onnx")
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("Identity", ["x0"], ["y"]), helper.make_node("Identity", ["x1"], ["z"])], "both",
            [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [N, N]),
             helper.make_tensor_value_info("x1", TensorProto.FLOAT, [N, 2 * N])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, N]),
             helper.make_tensor_value_info("z", TensorProto.FLOAT, [N, 2 * N])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        other = device.compile(model)
    else:
        t, u = f"tensor<{N}x{N}xf32>", f"tensor<{N}x{2 * N}xf32>"
        other = device.compile(
            f"module @m {{\n  func.func public @main(%x0: {t}, %x1: {u}) -> {t} {{\n    return %x0 : {t}\n  }}\n}}\n",
            format="stablehlo", verify="off", cache=False)
    with pytest.raises(InvalidArgumentError, match="x1|input 1|shape"):
        other(x, x)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), x @ x, rtol=1e-4, atol=1e-4)


def test_arrays_numpy_made_under_align_numpy_are_aliased(device: Device) -> None:
    import nx_hal

    exe = compile_matmul_n(device, 256)
    rng = np.random.default_rng(33)
    with nx_hal.align_numpy():
        a = rng.standard_normal((256, 256), dtype=np.float32) / 16
        b = rng.standard_normal((256, 256), dtype=np.float32) / 16
    if device.plugin == "tpu":  # XLA CPU aliases them: no staging copy
        probe = device._put_alias(a)
        assert probe.is_zero_copy
        del probe
    np.testing.assert_allclose(exe(a, b)[0].to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
