"""Runs a scenario of tests/donation_child.py in a child process whose tpu
plugin runs over an XLA CPU that donates in place (StableHLO 1.20:
lammps-jax-pjrt-cpu, installed by the test command), and returns what it
observed; skips where that backend is missing."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Words of the error a donated Buffer's every use raises.
DONATED = "was donated to an earlier execute"


def donating(scenario: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What tests/donation_child.py observed in ``scenario`` over the newer
    XLA CPU plugin (``env``: more of the child's environment)."""
    try:
        plugin = importlib.import_module("lammps_jax_pjrt_cpu").PLUGIN_PATH
    except ImportError:
        pytest.skip("no XLA CPU plugin that donates in place (pip install --no-deps lammps-jax-pjrt-cpu)")
    if not sys.platform.startswith("linux"):
        pytest.skip("resident memory is read from /proc")
    child_env = {**os.environ, "NX_HAL_PLUGINS__TPU__BACKEND_PATHS": f"cpu={plugin}", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "tests.donation_child", scenario, *args], cwd=ROOT, env=child_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
