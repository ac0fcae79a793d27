"""Lifetimes across client_destroy (issue #11): a DLPack export belongs to its
consumer and may outlive the nx_hal client. Its data must stay readable, and
its deleter, which credits the device's memory accounting, must not touch a
destroyed client. Each case runs in a child process (a crash must not take
pytest down); an AddressSanitizer build (the shared C driver's dlpack-outlive
against a sanitized plugin) reports the use after free the fix removed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import openvino_env
from nx_hal_npu import LIBRARY


def test_c_export_outlives_client(driver: Path) -> None:
    proc = subprocess.run([str(driver), str(LIBRARY), "dlpack-outlive"], capture_output=True,
                          text=True, timeout=120, env=openvino_env())
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = proc.stdout.splitlines()
    # Three exports (a copy, a zero-copy host buffer, a re-exported DLPack
    # import) read back whole after client_destroy; only deleting the
    # re-exported import runs the importer's deleter.
    assert "OUTLIVE client_destroyed" in lines, proc.stdout
    assert "OUTLIVE read ok=1 import_deleter=0" in lines, proc.stdout
    assert lines[-1] == "OUTLIVE deleted import_deleter=1", proc.stdout


_PY = textwrap.dedent("""
    import gc, weakref
    import numpy as np
    import nx_hal
    from nx_hal import library

    nx_hal.configure({"disable": ["tpu", "graphcore"]}, no_config=True, isolate_probe=False)
    dev = nx_hal.device("npu:cpu")
    want = np.arange(48, dtype=np.float32).reshape(3, 16) * 0.5
    buf = dev.put(want)
    arr = np.from_dlpack(buf)
    # The plugin's own zero-copy export, not numpy's copy of to_numpy().
    assert type(arr.base).__name__ == "PyCapsule", type(arr.base)
    client = weakref.ref(dev.client)
    del buf, dev
    nx_hal.configure({"disable": ["npu", "tpu", "graphcore"]}, no_config=True,
                     isolate_probe=False)
    assert client() is None and library.pending_releases() == 0  # client_destroy ran
    print("PY client_destroyed", flush=True)
    print(f"PY read ok={int(np.array_equal(arr, want))}", flush=True)
    del arr
    gc.collect()
    print("PY deleted", flush=True)
""")


def test_python_from_dlpack_outlives_client() -> None:
    proc = subprocess.run([sys.executable, "-c", _PY], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert [x for x in proc.stdout.splitlines() if x.startswith("PY ")] == [
        "PY client_destroyed", "PY read ok=1", "PY deleted"], proc.stdout
