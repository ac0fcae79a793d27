"""nx_hal.child, the one way nx_hal starts a child (the probe, the sandbox,
the ONNX converter, the StableHLO verifier): a child dies with its parent,
is killed with its whole process group at its deadline, and runs under the
memory limit child_memory_limit, whose excess is a clear error (issue 29,
items 10 and 11).

The parent-death tests start a parent Python process that makes nx_hal
start a child through the public API, find the child by a marker in its
environment, SIGKILL the parent, and assert the child is gone within a few
seconds; whatever a failing run leaves behind is killed at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import nx_hal
from nx_hal import api, child
from nx_hal.child import Child
from nx_hal.config import load_config
from tests.cbuild import build_fixture

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")

ROOT = Path(__file__).resolve().parent.parent
MARKER = "NXHAL_TEST_MARKER"
INSTALLED = ["npu", "tpu", "graphcore"]


# ---------------------------------------------------------------- processes


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, Z...); None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _cpu_seconds(pid: int) -> float:
    """User and system time the process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _marked(marker: str) -> list[int]:
    """The running processes whose environment carries ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"{MARKER}={marker}".encode() in environ.split(b"\0") and _running(int(entry.name)):
                found.append(int(entry.name))
    return found


def _wait_until(condition: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


@contextmanager
def _parent(script: str, tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A parent Python process running ``script``, its environment (and so
    its children's) marked; everything marked is killed on the way out."""
    marker = uuid.uuid4().hex
    log = open(tmp_path / "parent.log", "wb")
    env = {**os.environ, MARKER: marker, "NX_HAL_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=log)
    try:
        yield proc, marker
    finally:
        proc.kill()
        proc.wait()
        for pid in _marked(marker):  # what a failing run left: never a process burning a core
            os.kill(pid, signal.SIGKILL)
        log.close()


def _children_die_with_parent(script: str, tmp_path: Path, module: str, *args: str, spins: bool = False) -> None:
    """``spins``: the child burns a core once at work; the parent is killed
    only then (the converter writes its progress to the parent's pipe, and a
    write to a dead parent's pipe ends it: not what is tested)."""
    with _parent(script, tmp_path, *args) as (proc, marker):
        def children() -> list[int]:
            return [p for p in _marked(marker) if p != proc.pid and module in _cmdline(p)]

        started = _wait_until(children, 120)
        assert started, f"the parent started no {module} child: {(tmp_path / 'parent.log').read_text()[-2000:]}"
        found = children()
        if spins:  # past its start-up (torch-mlir's import: about 2 s of CPU), in the lowering that spins
            assert _wait_until(lambda: _cpu_seconds(found[0]) > 4, 120), "the child does not spin"
        else:
            time.sleep(1.0)  # at work: compiling, probing
        assert all(_running(p) for p in found)
        proc.kill()
        proc.wait()
        assert _wait_until(lambda: not any(_running(p) for p in found), 5), \
            f"{module} children {found} outlived their SIGKILLed parent"


def _softmax_axis(axis: int) -> bytes:
    """A Softmax whose axis spins torch-mlir's ONNX lowering (issue 29, item 11)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "g", [x], [y])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def _loop_over_range(n: int) -> bytes:
    """A Loop whose trip count is ReduceMax(Range(0, n)): the converter
    computes it from constants, taking 8 n bytes (32 GiB for n = 2**32)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def constant(name: str, value: object) -> Any:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["s"], ["s_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [1])])
    nodes = [constant("start", np.int64(0)), constant("limit", np.int64(n)), constant("delta", np.int64(1)),
             constant("go", np.array(True)),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("ReduceMax", ["r"], ["trips"], keepdims=0),
             helper.make_node("Loop", ["trips", "go", "x"], ["y"], body=body)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())


def _converter() -> None:
    from nx_hal.onnx import convert

    missing = convert.converter_available()
    if missing is not None:
        pytest.skip(missing)


@pytest.fixture
def limit_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide child memory limit a test sets is not left to other tests."""
    monkeypatch.setattr(child, "_memory_limit", child._memory_limit)


# ---------------------------------------------------------------- dying with the parent


def test_converter_child_dies_with_its_parent(tmp_path: Path) -> None:
    _converter()
    model = tmp_path / "softmax.onnx"
    model.write_bytes(_softmax_axis(2**62))
    script = ("import sys; from pathlib import Path; from nx_hal.onnx import convert; "
              "convert.onnx_to_stablehlo(Path(sys.argv[1]).read_bytes(), timeout=600, use_cache=False)")
    _children_die_with_parent(script, tmp_path, "nx_hal.onnx._child", str(model), spins=True)


def test_verifier_child_dies_with_its_parent(tmp_path: Path) -> None:
    """The long-lived worker that verifies StableHLO (and converts through
    ``convert.using``), killed with its parent while it converts."""
    _converter()
    model = tmp_path / "softmax.onnx"
    model.write_bytes(_softmax_axis(2**62))
    script = ("import sys; from pathlib import Path; from nx_hal.onnx import convert\n"
              "worker = convert.shared_worker()\n"
              "convert.onnx_to_stablehlo(Path(sys.argv[1]).read_bytes(), timeout=600, use_cache=False, worker=worker)")
    _children_die_with_parent(script, tmp_path, "nx_hal.onnx._child", str(model), spins=True)


def test_sandbox_child_dies_with_its_parent(tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs", extra_flags=("-DFIXTURE_COMPILE_TRAPS",))
    script = (
        "import sys; from pathlib import Path\n"
        "from nx_hal.config import load_config\nfrom nx_hal.plugin import PluginSpec\n"
        "from nx_hal.registry import Registry\n"
        "tmp = Path(sys.argv[2])\n"
        "reg = Registry(load_config({'cache_dir': str(tmp / 'cache')}, no_config=True, cwd=tmp))\n"
        "rec = reg.load(reg.add(PluginSpec(name='fixture-hostmem', library=Path(sys.argv[1]))))\n"
        "rec.devices[0].compile(b'hang f32 4', 'fixture-elementwise', verify_timeout=600)\n"
    )
    _children_die_with_parent(script, tmp_path, "nx_hal._sandbox_child", str(lib), str(tmp_path))


def test_probe_child_dies_with_its_parent(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    build_fixture("hang_probe", plugins)
    script = ("import sys, nx_hal\n"
              f"nx_hal.configure(plugin_path=[sys.argv[1]], disable={INSTALLED!r}, probe_timeout=600, "
              "probe_cache=False, no_config=True)\n")
    _children_die_with_parent(script, tmp_path, "nx_hal._probe_child", str(plugins))


def test_parent_watch_is_the_backstop(tmp_path: Path) -> None:
    """A child without the kernel's death signal (it cleared it) still ends
    when its parent dies: the thread watching the parent's pid kills it."""
    script = ("import time; from nx_hal.child import Child\n"
              "c = Child('tests.child_helper', 'no-deathsig', what='the helper')\n"
              "print(c.read_line(60).decode(), flush=True)\ntime.sleep(600)\n")
    with _parent(script, tmp_path) as (proc, _):
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert _running(pid)
        proc.kill()
        proc.wait()
        assert _wait_until(lambda: not _running(pid), 5), "the child outlived its parent"


def test_child_whose_parent_is_gone_exits_at_once() -> None:
    """The race the death signal leaves (the parent dies before the child
    sets it) is closed by the child checking its parent first."""
    argv = child.module_command("tests.child_helper", "sleep")
    assert f"_parent, _limit = {os.getpid()}, " in argv[-1]
    argv[-1] = argv[-1].replace(f"_parent, _limit = {os.getpid()}, ", "_parent, _limit = 1, ")
    done = subprocess.run(argv, capture_output=True, timeout=60, cwd=ROOT)
    assert (done.returncode, done.stdout) == (70, b"")


def test_child_outlives_the_thread_that_started_it() -> None:
    """The kernel's death signal follows the thread that forked: children
    are started from nx_hal's own long-lived thread, so one started on
    behalf of a thread that has ended is still there for the next request."""
    made: list[Child] = []
    thread = threading.Thread(target=lambda: made.append(Child("tests.child_helper", "sleep", what="the helper")))
    thread.start()
    thread.join()
    (helper,) = made
    try:
        line = helper.read_line(60)
        assert line is not None and int(line) == helper.pid
        time.sleep(0.5)
        assert helper.alive()
    finally:
        helper.close(grace=0)
    assert not _running(helper.pid)


# ---------------------------------------------------------------- deadlines


def test_deadline_kills_the_child_and_its_group() -> None:
    helper = Child("tests.child_helper", "grandchild", what="the helper")
    line = helper.read_line(60)
    assert line is not None
    pid, grandchild = map(int, line.split())
    assert _running(grandchild)
    with pytest.raises(nx_hal.DeadlineExceededError, match=r"the helper took longer than 0\.5 s; its child process "
                       "was killed"):
        helper.read_line(0.5)
    assert _state(pid) is None, "the child is killed and reaped"
    assert _wait_until(lambda: not _running(grandchild), 5), "what the child started is killed with it"


def test_one_shot_deadline_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    _converter()
    from nx_hal.onnx import convert

    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER, marker)
    start = time.monotonic()
    with pytest.raises(nx_hal.DeadlineExceededError, match=r"ONNX → StableHLO conversion took longer than 5 s"):
        convert.onnx_to_stablehlo(_softmax_axis(2**62), timeout=5, use_cache=False)
    assert time.monotonic() - start < 30
    assert _marked(marker) == []


def test_worker_deadline_kills_its_child() -> None:
    _converter()
    from nx_hal.onnx import convert

    with convert.ConverterWorker() as worker:
        with pytest.raises(nx_hal.DeadlineExceededError, match="longer than 5 s"):
            convert.onnx_to_stablehlo(_softmax_axis(2**62), timeout=5, use_cache=False, worker=worker)
        assert worker.pid is None
        # The next request gets a fresh child.
        result = convert.onnx_to_stablehlo(_softmax_axis(1), use_cache=False, worker=worker)
        assert "stablehlo.exponential" in result.stablehlo_ops and worker.started == 2


# ---------------------------------------------------------------- memory


def test_child_runs_under_the_limit() -> None:
    limited = Child("tests.child_helper", "limit", what="the helper", memory_limit=3 << 30)
    assert limited.communicate(b"", 60).split() == [str(3 << 30).encode()] * 2
    unlimited = Child("tests.child_helper", "limit", what="the helper", memory_limit=0)
    import resource

    assert unlimited.communicate(b"", 60).split() == [str(v).encode() for v in resource.getrlimit(
        resource.RLIMIT_DATA)]


def test_a_finished_child_leaves_no_pipe_open() -> None:
    """Each pipe left to the garbage collector held a file descriptor until
    then (a cold probe left six, reported as ResourceWarnings)."""
    helper = Child("tests.child_helper", "limit", what="the helper", memory_limit=0)
    helper.communicate(b"", 60)
    pipes = (helper.proc.stdin, helper.proc.stdout, helper.proc.stderr)
    assert all(p is not None and p.closed for p in pipes)


def test_allocation_past_the_limit_fails_in_the_child() -> None:
    hog = Child("tests.child_helper", "hog", str(400 << 20), what="the helper", memory_limit=128 << 20)
    assert hog.communicate(b"", 60) == b""
    assert hog.returncode == 1 and child.ran_out_of_memory(hog.stderr_text), hog.stderr_text
    fits = Child("tests.child_helper", "hog", str(64 << 20), what="the helper", memory_limit=512 << 20)
    assert fits.communicate(b"", 60) == f"took {64 << 20}\n".encode()


def test_conversion_out_of_memory_is_a_clear_error() -> None:
    """Range(0, 2**32) in a Loop's trip count: 32 GiB the converter child
    would take, stopped at the limit; the caller gets ResourceExhaustedError
    at once, naming the limit and the setting, and goes on converting."""
    _converter()
    from nx_hal.onnx import convert

    start = time.monotonic()
    with pytest.raises(nx_hal.ResourceExhaustedError, match=r"ONNX → StableHLO conversion.* ran out of memory in its "
                       r"child process under the child memory limit of 1 GiB \(setting child_memory_limit"):
        convert.onnx_to_stablehlo(_loop_over_range(2**32), timeout=120, use_cache=False, memory_limit=1 << 30)
    assert time.monotonic() - start < 60
    result = convert.onnx_to_stablehlo(_loop_over_range(3), use_cache=False, memory_limit=1 << 30)
    assert b"func.func @main" in result.module


def test_worker_out_of_memory_is_a_clear_error(limit_restored: None) -> None:
    """The long-lived worker takes the process's limit (the setting), and a
    request that runs out of memory fails alone."""
    _converter()
    from nx_hal.onnx import convert

    child.set_memory_limit(1 << 30)
    with convert.ConverterWorker() as worker:
        for _ in range(2):  # not remembered as the model's verdict: the same error again
            with pytest.raises(nx_hal.ResourceExhaustedError, match=r"1 GiB \(setting child_memory_limit"):
                convert.onnx_to_stablehlo(_loop_over_range(2**32), timeout=120, use_cache=False, worker=worker)
        assert b"func.func @main" in convert.onnx_to_stablehlo(_loop_over_range(3), use_cache=False,
                                                              worker=worker).module


def test_probe_out_of_memory_is_its_reason(tmp_path: Path) -> None:
    from nx_hal import probe

    lib = build_fixture("hostmem", tmp_path / "libs")
    result = probe.probe_in_child(str(lib), "fixture-hostmem", {}, 60, memory_limit=4 << 20)
    assert (result.ok, result.code) == (False, "RESOURCE_EXHAUSTED")
    assert result.message.startswith("the probe of plugin 'fixture-hostmem' ran out of memory in its child process "
                                     "under the child memory limit of 4 MiB (setting child_memory_limit")
    assert probe.probe_in_child(str(lib), "fixture-hostmem", {}, 60, memory_limit=0).ok


def trap_fixture_device(tmp_path: Path) -> Any:
    """The hostmem fixture plugin's device, its compiles trapping on request, with a cache under ``tmp_path``."""
    from nx_hal.plugin import PluginSpec
    from nx_hal.registry import Registry

    lib = build_fixture("hostmem", tmp_path / "libs", extra_flags=("-DFIXTURE_COMPILE_TRAPS",))
    reg = Registry(load_config({"cache_dir": str(tmp_path / "cache")}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)))
    assert rec.state == "loaded", rec.reason
    return rec.devices[0]


def test_sandbox_out_of_memory_is_not_a_crash_verdict(tmp_path: Path, limit_restored: None) -> None:
    """A sandbox child the limit stops is ResourceExhaustedError naming the
    limit, not the program's "crash" verdict (which would be kept on disk)."""
    from nx_hal import sandbox

    dev = trap_fixture_device(tmp_path)
    sandbox.clear_memory()
    child.set_memory_limit(4 << 20)
    with pytest.raises(nx_hal.ResourceExhaustedError, match=r"compiling the program \(in start-up\) ran out of "
                       r"memory in its child process under the child memory limit of 4 MiB"):
        dev.compile(b"neg f32 4", "fixture-elementwise", cache=False)
    child.set_memory_limit(0)
    dev.compile(b"neg f32 4", "fixture-elementwise", cache=False)  # not refused: no verdict was kept


# ---------------------------------------------------------------- the setting


def _mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def test_setting_default_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    default = load_config(no_config=True).settings.child_memory_limit
    assert 0 < default <= _mem_total() * 3 // 4
    assert child.memory_limit() == default or child._memory_limit != -1
    monkeypatch.setenv("NX_HAL_CHILD_MEMORY_LIMIT", "2GiB")
    assert load_config(no_config=True).settings.child_memory_limit == 2 << 30
    monkeypatch.setenv("NX_HAL_CHILD_MEMORY_LIMIT", "0")
    assert load_config(no_config=True).settings.child_memory_limit == 0
    monkeypatch.setenv("NX_HAL_CHILD_MEMORY_LIMIT", "-1")
    with pytest.raises(nx_hal.ConfigError, match="NX_HAL_CHILD_MEMORY_LIMIT"):
        load_config(no_config=True)


def test_configure_sets_the_childrens_limit(tmp_path: Path, keep_api_state: None, limit_restored: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_registry", None)
    nx_hal.configure(child_memory_limit="768MiB", disable=INSTALLED, cache_dir=str(tmp_path / "cache"),
                     no_config=True)
    assert child.memory_limit() == 768 << 20
    helper = Child("tests.child_helper", "limit", what="the helper")
    assert helper.communicate(b"", 60).split() == [str(768 << 20).encode()] * 2


def test_a_killed_processs_working_directory_is_removed_by_the_next() -> None:
    """A process killed by SIGKILL or SIGTERM runs no finalizer: its child's working directory
    (the model and the executable it compiled) stayed in the temporary directory for good."""
    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal; from nx_hal.child import work_dir; "
         "d = work_dir('nxhal-sandbox-'); open(os.path.join(d.name, 'program'), 'wb').write(b'x' * 1000); "
         "print(d.name, flush=True); os.kill(os.getpid(), signal.SIGTERM)"],
        capture_output=True, text=True, check=False)
    assert killed.returncode == -signal.SIGTERM
    left = Path(killed.stdout.strip())
    assert left.name.startswith("nxhal-sandbox-") and (left / "program").exists()
    # A live process's directory, named the same way, is not touched.
    alive = left.with_name(f"nxhal-sandbox-{os.getppid()}-keep")
    alive.mkdir()
    try:
        mine = child.work_dir("nxhal-sandbox-")
        assert not left.exists(), "the killed process's directory was left"
        assert alive.exists() and Path(mine.name).name.startswith(f"nxhal-sandbox-{os.getpid()}-")
        mine.cleanup()
    finally:
        alive.rmdir()
