"""Lifetimes across client_destroy (issue #11): a DLPack export belongs to its
consumer, so it may outlive the nx_hal client. Its data must stay readable
and PJRT must see every buffer destroyed before its client. The fake PJRT in
"track" mode (fake_pjrt.c) aborts on the wrong order; XLA CPU itself
happens to survive it, so with the real backend these check values and that
nothing crashes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import HERE, Driver, Outcome

ADD = HERE / "programs" / "add.mlir"


def _track_env(cpu_backend: Path) -> dict[str, str]:
    return {"FAKE_PJRT_REAL": str(cpu_backend), "FAKE_PJRT_MODE": "track"}


def _check_outlive(out: Outcome) -> None:
    assert out.returncode == 0, out.stdout + out.stderr
    assert "MISUSE" not in out.stderr, out.stderr
    # Four exports: a copied host buffer, a zero-copy one, a re-exported
    # DLPack import and an execute output, each read after client_destroy.
    assert out.values("OUTLIVE") == [
        "exported=4", "client_destroyed", "read ok=1 import_deleter=0",
        "deleted import_deleter=1"]


def test_dlpack_export_outlives_client_fake(run: Driver, fake_pjrt: Path,
                                            cpu_backend: Path) -> None:
    out = run("dlpack-outlive", ADD, options={"library_path": f"s:{fake_pjrt}"},
              env=_track_env(cpu_backend))
    _check_outlive(out)
    lines = out.lines
    destroys = [i for i, line in enumerate(lines) if line.startswith("FAKE_PJRT client_destroy")]
    assert [lines[i] for i in destroys] == ["FAKE_PJRT client_destroy live_buffers=0"], out.stdout
    # The PJRT client goes only when the last export is deleted: after the
    # reads, after the exports' PJRT buffers, before the deleters return.
    assert lines.index("OUTLIVE read ok=1 import_deleter=0") < destroys[0]
    assert destroys[0] < lines.index("OUTLIVE deleted import_deleter=1")
    last_buffer = max(i for i, line in enumerate(lines) if line == "FAKE_PJRT buffer_destroy")
    assert last_buffer < destroys[0]


def test_dlpack_export_outlives_client_xla_cpu(run: Driver, cpu_backend: Path) -> None:
    _check_outlive(run("dlpack-outlive", ADD, options={"backend_paths": f"s:cpu={cpu_backend}"}))


@pytest.mark.parametrize("args", [("dlpack",), ("memory",), ("run", ADD, "--async", "--repeat", "3"),
                                  ("threads", ADD, "4", "10")])
def test_fake_tracking_accepts_correct_use(run: Driver, fake_pjrt: Path, cpu_backend: Path,
                                           tmp_path: Path, args: tuple[str | Path, ...]) -> None:
    # The tracker itself: ordinary use (every buffer destroyed before the
    # client, execute outputs included) is not reported.
    if args[0] == "run":
        import numpy as np
        from programs import input_spec

        x = np.arange(4, dtype=np.float32)
        args = (*args, "--outdir", tmp_path, input_spec(tmp_path, 0, x), input_spec(tmp_path, 1, x))
    out = run(*args, options={"library_path": f"s:{fake_pjrt}"}, env=_track_env(cpu_backend))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "MISUSE" not in out.stderr
    assert out.values("FAKE_PJRT")[-1:] == ["client_destroy live_buffers=0"], out.stdout


# -- through the nx_hal Python API, in a child process (a crash must not take
# pytest down): np.from_dlpack, drop the buffer and device, nx_hal.configure()
# destroys the old client, then the array is read and dropped.
_PY = textwrap.dedent("""
    import gc, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import nx_hal
    from nx_hal import library
    from conftest import registry

    reg = registry(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    dev = reg.devices()[0]
    want = np.arange(48, dtype=np.float32).reshape(3, 16) * 0.5
    buf = dev.put(want)
    arr = np.from_dlpack(buf)
    # The plugin's own zero-copy export, not numpy's copy of to_numpy().
    assert type(arr.base).__name__ == "PyCapsule", type(arr.base)
    del buf, dev, reg
    gc.collect()
    assert library.pending_releases() == 1, library.pending_releases()
    nx_hal.configure({"disable": ["tpu", "npu", "graphcore"]}, no_config=True,
                     isolate_probe=False)
    assert library.pending_releases() == 0
    print("PY client_destroyed", flush=True)
    ok = bool(np.array_equal(arr, want))
    print(f"PY read ok={int(ok)}", flush=True)
    del arr
    gc.collect()
    print("PY deleted", flush=True)
""")


def _python(tmp_path: Path, plugin_library: Path, backend: Path,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("nx_hal")
    done = subprocess.run(
        [sys.executable, "-c", _PY, str(HERE), str(tmp_path), str(plugin_library), str(backend)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "MISUSE" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert [x for x in lines if x.startswith("PY ")] == [
        "PY client_destroyed", "PY read ok=1", "PY deleted"], done.stdout
    return done


def test_python_from_dlpack_outlives_client_xla_cpu(tmp_path: Path, plugin_library: Path,
                                                    cpu_backend: Path) -> None:
    _python(tmp_path, plugin_library, cpu_backend)


def test_python_from_dlpack_outlives_client_fake(tmp_path: Path, plugin_library: Path,
                                                 fake_pjrt: Path, cpu_backend: Path) -> None:
    done = _python(tmp_path, plugin_library, fake_pjrt, env=_track_env(cpu_backend))
    lines = done.stdout.splitlines()
    destroys = [i for i, x in enumerate(lines) if x.startswith("FAKE_PJRT client_destroy")]
    assert [lines[i] for i in destroys] == ["FAKE_PJRT client_destroy live_buffers=0"], done.stdout
    # configure() dropped the user's client; the PJRT client went with the array.
    assert lines.index("PY read ok=1") < destroys[0] < lines.index("PY deleted")
