"""Lifetimes across client_destroy (issue #11): a DLPack export belongs to its
consumer and may outlive the nx_hal client. Its data must stay readable, and
its deleter, which credits the device's memory accounting, must not touch a
destroyed client. Each case runs in a child process (a crash must not take
pytest down); an AddressSanitizer build (dlpack_outlive.c against a
sanitized plugin) reports the use after free the fix removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nx_hal_npu import LIBRARY

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parent.parent.parent / "include"


@pytest.fixture(scope="module")
def outlive_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("outlive") / "dlpack_outlive"
    subprocess.run(
        [cc, "-std=c99", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror",
         f"-I{INCLUDE}", str(HERE / "dlpack_outlive.c"), "-o", str(exe), "-ldl"],
        check=True,
    )
    return exe


def _openvino_env() -> dict[str, str]:
    """The C program has no Python to find the openvino wheel: name its library."""
    import openvino

    libs = sorted((Path(openvino.__file__).parent / "libs").glob("libopenvino_c.so*"))
    return {**os.environ, "NXHAL_NPU_OPENVINO_LIBRARY": str(libs[0])} if libs else dict(os.environ)


def test_c_export_outlives_client(outlive_driver: Path) -> None:
    proc = subprocess.run([str(outlive_driver), str(LIBRARY)], capture_output=True, text=True,
                          timeout=120, env=_openvino_env())
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.split() == ["read", "ok=1", "OK"], proc.stdout


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
