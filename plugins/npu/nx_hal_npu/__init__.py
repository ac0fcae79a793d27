"""nx_hal plugin ``npu``: Intel NPUs, and OpenVINO's CPU and GPU devices,
through the OpenVINO C API. Registers ``libnxhal_npu.so`` with nx_hal."""

from __future__ import annotations

from pathlib import Path

import nx_hal
from nx_hal_npu.options import NpuCompileOptions, NpuOptions

__all__ = ["NpuOptions", "NpuCompileOptions", "LIBRARY", "nx_hal_register"]

LIBRARY = Path(__file__).with_name("libnxhal_npu.so")


@nx_hal.hookimpl
def nx_hal_register(register: nx_hal.Register) -> None:
    """Registers the OpenVINO plugin library with nx_hal."""
    register(name="npu", library=LIBRARY, options_model=NpuOptions,
             compile_options_model=NpuCompileOptions, package="nx-hal-npu")
