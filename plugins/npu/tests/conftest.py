"""Fixtures for the nx-hal-npu tests: the OpenVINO CPU device through the
installed plugin, onnxruntime as the numerical oracle, and the shared C test
driver."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nx_hal
from nx_hal.device import Device

# Tolerances against onnxruntime for f32 models: both run f32 kernels, which
# differ only in summation order.
RTOL = 1e-4
ATOL = 1e-5


def pytest_configure(config: pytest.Config) -> None:
    # Compile caches and other per-user state go to a throwaway directory
    # (removed at the end), so no entry from an earlier run or another nx_hal
    # version can stand in for the compile a test means to make.
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="nxhal-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.basename(folder).startswith("nxhal-test-cache-"):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def dev() -> Device:
    nx_hal.configure(no_config=True)
    record = nx_hal.registry().records.get("npu")
    if record is None or record.state != "loaded":
        pytest.fail(f"the npu plugin is not loaded: {record.to_dict() if record else 'not installed'}")
    return nx_hal.device("npu:cpu")


REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared C test driver (tests/c/nxhal_driver.c), over the loader."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))  # tests/cbuild.py, the one C build helper
    from tests import cbuild

    return cbuild.build_driver(tmp_path_factory.mktemp("driver"))


def openvino_env() -> dict[str, str]:
    """A C program has no Python to find the openvino wheel: name its library."""
    import openvino

    libs = sorted((Path(openvino.__file__).parent / "libs").glob("libopenvino_c.so*"))
    return {**os.environ, "NXHAL_NPU_OPENVINO_LIBRARY": str(libs[0])} if libs else dict(os.environ)


def ort_run(model: onnx.ModelProto | bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return [np.asarray(o) for o in session.run(None, dict(zip(names, inputs, strict=False)))]
