"""The plugin driven from C through the raw ABI (the shared C driver's
npu-capi scenario, tests/c/nxhal_driver.c), checked against onnxruntime."""

from __future__ import annotations

import subprocess
from pathlib import Path

import models
import numpy as np
from conftest import ATOL, RTOL, ort_run
from nx_hal_npu import LIBRARY


def test_c_program(driver: Path, tmp_path: Path) -> None:
    model = models.mlp(batch=4)
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    (tmp_path / "mlp.onnx").write_bytes(model.SerializeToString())
    (tmp_path / "x.raw").write_bytes(x.tobytes())
    proc = subprocess.run(
        [str(driver), str(LIBRARY), "npu-capi", str(tmp_path / "mlp.onnx"),
         str(tmp_path / "x.raw"), str(tmp_path / "y.raw")],
        capture_output=True, text=True, timeout=120,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.strip().endswith("OK")
    y = np.frombuffer((tmp_path / "y.raw").read_bytes(), np.float32).reshape(4, 8)
    np.testing.assert_allclose(y, ort_run(model, x)[0], rtol=RTOL, atol=ATOL)
