"""Memory accounting, the limit, and DLPack both ways on XLA CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import Driver
from programs import run_program


def test_accounting_and_limit(run: Driver, cpu_backend: Path) -> None:
    out = run("memory", options={"backend_paths": f"s:cpu={cpu_backend}"})
    assert out.returncode == 0, out.stdout
    assert out.values("START") == ["in_use=0 peak=0 limit=0"]
    assert out.values("TWO") == ["in_use=8192 peak=8192 limit=0"]
    assert out.values("ONE") == ["in_use=4096 peak=8192 limit=0"]
    assert out.values("LIMITED") == ["in_use=4096 peak=8192 limit=6000"]
    over = out.values("OVER")[0]
    assert over.startswith("RESOURCE_EXHAUSTED:") and "memory limit of 6000" in over
    assert out.values("UNLIMITED") == ["in_use=8192 peak=8192 limit=0"]
    assert out.values("END") == ["in_use=0 peak=8192 limit=0"]


def test_limit_from_create_option_covers_execute_outputs(run: Driver, tmp_path: Path,
                                                         cpu_backend: Path) -> None:
    x = np.arange(4, dtype=np.float32)
    opts = {"backend_paths": f"s:cpu={cpu_backend}", "memory_limit_bytes": "i:40"}
    # Inputs take 32 bytes; the 16-byte output would pass 40.
    out = run_program(run, tmp_path, "add.mlir", x, x, options=opts)
    assert out.code == "RESOURCE_EXHAUSTED", out.stdout
    assert "execute outputs" in out.message
    opts["memory_limit_bytes"] = "i:48"
    out = run_program(run, tmp_path, "add.mlir", x, x, options=opts)
    assert out.returncode == 0, out.stdout


def test_dlpack_export_and_import(run: Driver, cpu_backend: Path) -> None:
    out = run("dlpack", options={"backend_paths": f"s:cpu={cpu_backend}"})
    assert out.returncode == 0, out.stdout
    assert out.values("EXPORT") == ["ok=1 ndim=2 shape=4,16 bits=32 aliased=1"]
    # Compact CPU memory is viewed in place; the producer's deleter runs only
    # when our buffer is destroyed.
    assert out.values("IMPORT") == ["ok=1 zero_copy=1 deleter_before_destroy=0",
                                    "deleter_after_destroy=1"]
    # A strided tensor is copied with its strides honoured, then released.
    assert out.values("STRIDED") == ["ok=1 deleter=2"]
