"""Bad input gives a clear NxHalError subclass, and the device keeps working.
Some checks go through the raw table so the core's own Python checks cannot
hide what the plugin does."""

from __future__ import annotations

from typing import Any

import models
import numpy as np
import pytest
from conftest import ATOL, RTOL, ort_run
from nx_hal_npu import LIBRARY

import nx_hal
from nx_hal.device import Device
from nx_hal.library import open_library
from nx_hal.native import NULL, check, ffi, lib
from nx_hal.options import to_c_options

RNG = np.random.default_rng(99)


def still_works(dev: Device) -> None:
    model = models.mlp(batch=2)
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(dev.compile(model)(x)[0].to_numpy(), ort_run(model, x)[0],
                               rtol=RTOL, atol=ATOL)


def raw_compile(dev: Device, data: bytes, fmt: str = "onnx", **options: object) -> Any:
    api = dev._api
    prog = ffi.new("nxhal_program_t*")
    prog.struct_size = ffi.sizeof("nxhal_program_t")
    cfmt = ffi.new("char[]", fmt.encode())
    prog.format = cfmt
    cdata = ffi.from_buffer(data)
    prog.data, prog.size = cdata, len(data)
    prog.extra_data, prog.extra_size = NULL, 0
    copts = to_c_options(options)
    out = ffi.new("nxhal_executable_t**")
    check(api, lib.nxhal_call_executable_compile(api, dev.handle, prog, copts.array, copts.count, out),
          "npu")
    return out[0]


# By default the core compiles a native program first in a child (nx_hal.sandbox),
# whose onnx.checker refuses these; with verify="off" (and from C) the
# plugin's own reader must refuse them as clearly.
VERIFY = pytest.mark.parametrize("verify, says", [("auto", "not valid ONNX"), ("off", None)],
                                 ids=["sandboxed", "plugin"])


@VERIFY
@pytest.mark.parametrize("data", [b"\x08\x07garbage that is not a model" * 3, bytes(range(256)) * 4],
                         ids=["onnx-like", "binary"])
def test_garbage_model(dev: Device, data: bytes, verify: str, says: str | None) -> None:
    with pytest.raises(nx_hal.InvalidArgumentError, match=says or "reading the ONNX model failed") as error:
        dev.compile(data, format="onnx", verify=verify)
    if verify == "off":  # OpenVINO's reader refused it: the plugin's INVALID_PROGRAM (ABI 1.2)
        assert isinstance(error.value, nx_hal.InvalidProgramError), error.value
    still_works(dev)


@VERIFY
def test_truncated_model(dev: Device, verify: str, says: str | None) -> None:
    data = models.cnn().SerializeToString()
    with pytest.raises(nx_hal.InvalidArgumentError, match=says or "OpenVINO"):
        dev.compile(data[: len(data) // 2], format="onnx", verify=verify)
    still_works(dev)


def test_unknown_format_in_c(dev: Device) -> None:
    with pytest.raises(nx_hal.InvalidArgumentError, match="onnx, openvino-ir"):
        raw_compile(dev, b"whatever", fmt="stablehlo")


def test_wrong_input_shape(dev: Device) -> None:
    exe = dev.compile(models.cnn())
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"input 0 \('x'\) has shape \[1,3,8,8\], expected \[1,3,16,16\]"):
        exe(np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"'x'.*shape"):
        exe(np.zeros((3, 16, 16), np.float32))
    still_works(dev)


def test_wrong_input_dtype(dev: Device) -> None:
    exe = dev.compile(models.cnn())
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"input 0 \('x'\) has dtype f64, expected f32"):
        exe(np.zeros((1, 3, 16, 16), np.float64))
    still_works(dev)


def test_missing_input_in_c(dev: Device) -> None:
    exe = dev.compile(models.add_two())
    assert isinstance(exe, nx_hal.Executable)
    a = dev.put(np.zeros((2, 3), np.float32))
    api = dev._api
    inputs = ffi.new("nxhal_buffer_t*[]", [a.handle])
    outs = ffi.new("nxhal_buffer_t*[]", 1)
    with pytest.raises(nx_hal.InvalidArgumentError, match="expected 2 inputs, got 1; missing input b"):
        check(api, lib.nxhal_call_executable_execute(api, exe.handle, inputs, 1, outs, 1, NULL), "npu")
    nulls = ffi.new("nxhal_buffer_t*[]", [a.handle, NULL])
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"input 1 \('b'\) is NULL"):
        check(api, lib.nxhal_call_executable_execute(api, exe.handle, nulls, 2, outs, 1, NULL), "npu")
    with pytest.raises(nx_hal.InvalidArgumentError):
        exe(np.zeros((2, 3), np.float32))  # the core's own count check
    still_works(dev)


def test_npu_target_without_npu(dev: Device) -> None:
    import openvino as ov

    if "NPU" in ov.Core().available_devices:
        pytest.skip("this machine has an NPU")
    with pytest.raises(nx_hal.UnavailableError, match="'NPU' is not available.*NPU: not available"):
        dev.compile(models.mlp(), target="NPU")
    with pytest.raises(nx_hal.UnavailableError, match="HETERO:NPU,CPU.*lists NPU"):
        dev.compile(models.mlp(), target="HETERO:NPU,CPU")
    still_works(dev)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"bogus": 1}, "bogus"),
        ({"streams": "two"}, "streams"),
        ({"precision": "f8"}, "precision"),
        ({"performance": "fastest"}, "performance"),
        ({"streams": 0}, "streams"),
        ({"performance": "cumulative"}, "performance"),
        ({"cpu_pinning": "maybe"}, "cpu_pinning"),
        ({"cpu_pinning": 2}, "cpu_pinning"),
        ({"inference_threads": 0}, "inference_threads"),
        ({"inference_threads": 1025}, "inference_threads"),
        ({"inference_threads": 1.5}, "inference_threads"),
        ({"target": "NPU;rm"}, "target"),
        ({"target": "FOO:CPU"}, "target"),
    ],
)
def test_bad_compile_options(dev: Device, options: dict[str, Any], pattern: str) -> None:
    model = models.mlp().SerializeToString()
    with pytest.raises(nx_hal.InvalidArgumentError, match=pattern):
        raw_compile(dev, model, **options)  # the C side, without pydantic
    with pytest.raises(nx_hal.NxHalError, match=pattern):
        dev.compile(model, format="onnx", **options)  # through the pydantic model
    still_works(dev)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [({"bogus": 1}, "bogus"), ({"memory_limit": "1GB"}, "memory_limit"),
     ({"memory_limit": -5}, "memory_limit"), ({"cache_dir": 3}, "cache_dir"),
     ({"cpu_pinning": 1}, "cpu_pinning"), ({"inference_threads": -2}, "inference_threads"),
     ({"performance": "max"}, "performance")],
)
def test_bad_client_options(options: dict[str, object], pattern: str) -> None:
    library = open_library(str(LIBRARY), "npu")
    with pytest.raises(nx_hal.InvalidArgumentError, match=pattern):
        library.create_client(options, "npu")


def test_memory_limit_exceeded(dev: Device) -> None:
    exe = dev.compile(models.matmul(64, 64, 64))
    x = dev.put(np.ones((64, 64), np.float32))
    in_use = dev.memory_stats().bytes_in_use
    try:
        dev.set_memory_limit(in_use + 1000)
        assert dev.memory_stats().bytes_limit == in_use + 1000
        with pytest.raises(nx_hal.ResourceExhaustedError,
                           match=r"a buffer on CPU needs 40000 bytes, which would pass the device's memory limit"):
            dev.put(np.zeros(10_000, np.float32))
        with pytest.raises(nx_hal.ResourceExhaustedError, match="memory limit"):
            exe(x)  # its 16 KiB output does not fit either
        assert dev.memory_stats().bytes_in_use == in_use
    finally:
        dev.set_memory_limit(None)
    assert dev.memory_stats().bytes_limit is None
    expected = ort_run(models.matmul(64, 64, 64), np.ones((64, 64), np.float32))[0]
    np.testing.assert_allclose(exe(x)[0].to_numpy(), expected, rtol=RTOL, atol=ATOL)
    still_works(dev)


def test_memory_limit_client_option() -> None:
    library = open_library(str(LIBRARY), "npu")
    client = library.create_client({"memory_limit": 4096}, "npu")
    api = library.api
    stats = ffi.new("nxhal_memory_stats_t*")
    stats.struct_size = ffi.sizeof("nxhal_memory_stats_t")
    check(api, lib.nxhal_call_device_memory_stats(api, client.device_handles[0], stats), "npu")
    assert stats.bytes_limit == 4096


def test_bad_serialized_bytes(dev: Device) -> None:
    # The plugin's own bytes, unsealed: bytes nx_hal did not seal reach the
    # plugin only with trusted=True (without it: refused, as the first shows).
    exe = dev.compile(models.mlp(batch=1))
    assert isinstance(exe, nx_hal.Executable)
    blob = exe._serialize()
    with pytest.raises(nx_hal.InvalidArgumentError, match="carries no authenticator.*trusted=True"):
        dev.load_executable(b"garbage" * 10)
    with pytest.raises(nx_hal.InvalidArgumentError, match="not a serialized nx-hal-npu executable"):
        dev.load_executable(b"garbage" * 10, trusted=True)
    with pytest.raises(nx_hal.InvalidArgumentError, match="truncated"):
        dev.load_executable(blob[: len(blob) - 10], trusted=True)
    key = dev.compat_key.encode()
    # Same length, one byte different: as if made by another OpenVINO build.
    other = blob.replace(key, key[:-1] + (b"X" if key[-1:] != b"X" else b"Y"), 1)
    assert other != blob and len(other) == len(blob)
    with pytest.raises(nx_hal.FailedPreconditionError, match="was made for .* but this device is"):
        dev.load_executable(other, trusted=True)
    header = 32 + len(key) + 3  # our header, the key, "CPU"
    corrupt = blob[:header] + b"\x00" * (len(blob) - header)
    with pytest.raises(nx_hal.NxHalError):
        dev.load_executable(corrupt, trusted=True)
    still_works(dev)
