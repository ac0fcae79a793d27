"""Programs a vendor reads natively are compiled first in a child
(nx_hal.sandbox): a program that crashes or hangs the vendor's compiler is
an error here and the process goes on; verdicts are cached so a known
program costs no child; "off", "require" and the fallback do what they say.

The crash and hang come from the test fixture plugin built with
FIXTURE_COMPILE_TRAPS (programs "crash ..." and "hang ..."); the ONNX cases
are the models fuzzing found crashing and hanging OpenVINO, rebuilt here,
run on the npu plugin where it is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal import sandbox
from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from tests.cbuild import build_fixture
from tests.store_util import entries

ROOT = Path(__file__).resolve().parent.parent
FMT = "fixture-elementwise"


def trap_device(tmp_path: Path, **settings: Any) -> Device:
    lib = build_fixture("hostmem", tmp_path / "libs", extra_flags=("-DFIXTURE_COMPILE_TRAPS",))
    overrides = {"cache_dir": str(tmp_path / "cache"), **settings}
    reg = Registry(load_config(overrides, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.state == "loaded", rec.reason
    return rec.devices[0]


@pytest.fixture(autouse=True)
def _fresh_verdicts() -> None:
    sandbox.clear_memory()


def still_works(dev: Device) -> None:
    x = np.arange(4, dtype=np.float32)
    exe = dev.compile(b"add f32 4", FMT, cache=False)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)


def test_crash_in_compile_is_an_error(tmp_path: Path) -> None:
    dev = trap_device(tmp_path)
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"crashed the fixture-hostmem backend's compiler.*SIGSEGV"):
        dev.compile(b"crash f32 4", FMT)
    still_works(dev)
    # Known bad now: refused again without a child, and the refusal survives
    # the process (a verdict file under the cache directory).
    started = sandbox.children_started
    with pytest.raises(nx_hal.InvalidArgumentError, match="SIGSEGV"):
        dev.compile(b"crash f32 4", FMT)
    assert sandbox.children_started == started
    assert len(entries(tmp_path / "cache", "compile-verdicts")) == 2  # crash, add


def test_hang_in_compile_times_out(tmp_path: Path) -> None:
    dev = trap_device(tmp_path)
    start = time.monotonic()
    with pytest.raises(nx_hal.DeadlineExceededError, match=r"longer than 2 s \(in compile fixture-elementwise\)"):
        dev.compile(b"hang f32 4", FMT, verify_timeout=2)
    assert time.monotonic() - start < 30
    still_works(dev)


def test_good_program_runs_and_second_compile_needs_no_child(tmp_path: Path) -> None:
    dev = trap_device(tmp_path)
    x = np.arange(4, dtype=np.float32)
    exe = dev.compile(b"mul f32 4", FMT, cache=False)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), x * x)
    started = sandbox.children_started
    exe = dev.compile(b"mul f32 4", FMT, cache=False)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), x * x)
    assert sandbox.children_started == started
    # Other compile options are another verdict: the child is asked again
    # (it is running already, so no child starts, but the request is new).
    with pytest.raises(nx_hal.InvalidArgumentError, match="no_such_option"):
        dev.compile(b"mul f32 4", FMT, cache=False, no_such_option=1)


def test_plugin_errors_pass_through_unchanged(tmp_path: Path) -> None:
    dev = trap_device(tmp_path)
    with pytest.raises(nx_hal.InvalidArgumentError) as sandboxed:
        dev.compile(b"frobnicate f32 4", FMT, cache=False)
    with pytest.raises(nx_hal.InvalidArgumentError) as direct:
        dev.compile(b"frobnicate f32 4", FMT, cache=False, verify="off")
    assert sandboxed.value.message == direct.value.message


def test_verify_off_skips_the_child(tmp_path: Path) -> None:
    dev = trap_device(tmp_path)
    script = (
        "import sys; from tests.test_sandbox import trap_device; from pathlib import Path; "
        f"dev = trap_device(Path({str(tmp_path)!r})); dev.compile(b'crash f32 4', {FMT!r}, verify='off')"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=120)
    assert proc.returncode == -11, proc.stderr[-2000:]  # the trap fired in this very process
    still_works(dev)


@pytest.mark.parametrize("value", ["fast", -1, 0, True, float("nan")])
def test_bad_verify_options(tmp_path: Path, value: object) -> None:
    dev = trap_device(tmp_path)
    with pytest.raises(nx_hal.InvalidArgumentError, match="verify_timeout"):
        dev.compile(b"add f32 4", FMT, verify_timeout=value)
    with pytest.raises(nx_hal.InvalidArgumentError, match="'auto', 'require' or 'off'"):
        dev.compile(b"add f32 4", FMT, verify=value)


def test_child_that_cannot_open_the_device(tmp_path: Path) -> None:
    """"auto" compiles in this process, warning once; "require" refuses."""
    dev = trap_device(tmp_path)
    # Options the child's client refuses (this process's client was made without them).
    dev.put([1.0])
    dev.link.client_options["no_such_client_option"] = 1
    with pytest.raises(nx_hal.UnavailableError, match="verify='require'.*no_such_client_option"):
        dev.compile(b"neg f32 4", FMT, cache=False, verify="require")
    sandbox._warned = False
    with pytest.warns(RuntimeWarning, match="without a trial compile in a child process"):
        exe = dev.compile(b"neg f32 4", FMT, cache=False)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exe(x)[0].to_numpy(), -x)


def test_verdict_folder_others_can_write_is_not_trusted(tmp_path: Path) -> None:
    dev = trap_device(tmp_path)
    folder = tmp_path / "cache" / "compile-verdicts"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    dev.compile(b"add f32 4", FMT, cache=False)
    assert not list(folder.rglob("*"))


# -- the models fuzzing found crashing and hanging OpenVINO ---------------------------------------

def _npu() -> Device:
    pytest.importorskip("nx_hal_npu")
    found = [d for d in nx_hal.devices() if d.plugin == "npu"]
    if not found:
        pytest.skip("no npu device")
    return found[0]


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 13) -> bytes:
    onnx = pytest.importorskip("onnx")
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", inputs, outputs),
                                   opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _vi(name: str, shape: list[int]) -> Any:
    onnx = pytest.importorskip("onnx")
    return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def test_conv_with_one_input() -> None:  # SIGSEGV in OpenVINO's ONNX reader
    onnx = pytest.importorskip("onnx")
    model = _model([onnx.helper.make_node("Conv", ["x"], ["y"])], [_vi("x", [1, 1, 4, 4])], [_vi("y", [1, 1, 4, 4])])
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"not valid ONNX.*Conv"):
        _npu().compile(model, "onnx", cache=False)


def test_unsorted_graph_with_a_cycle() -> None:  # OpenVINO's reader loops forever
    onnx = pytest.importorskip("onnx")
    nodes = [onnx.helper.make_node("Relu", ["r"], ["y"]), onnx.helper.make_node("Relu", ["r"], ["r"])]
    model = _model(nodes, [_vi("x", [4])], [_vi("y", [4])])
    with pytest.raises(nx_hal.InvalidArgumentError, match="topologically sorted"):
        _npu().compile(model, "onnx", cache=False, verify_timeout=60)


def test_maxpool_with_a_huge_stride() -> None:  # SIGFPE in OpenVINO's CPU compiler (2026.4)
    onnx = pytest.importorskip("onnx")
    node = onnx.helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1 << 40, 1 << 40])
    model = _model([node], [_vi("x", [1, 1, 4, 4])], [_vi("y", [1, 1, 1, 1])])
    dev = _npu()
    try:
        exe = dev.compile(model, "onnx", cache=False)
    except nx_hal.InvalidArgumentError as exc:  # the crash, kept in the child; or a clean refusal
        assert "crashed" in exc.message or "OpenVINO" in exc.message, exc.message
    else:  # an OpenVINO that handles it: then it must also run
        exe(np.zeros((1, 1, 4, 4), np.float32))
    mlp = dev.compile(ROOT / "examples" / "mlp.onnx", cache=False)
    assert mlp is not None
