"""Typed options of the npu (OpenVINO) plugin, validated before they reach C.

The C library checks the same rules again (src/options.c, src/client.c):
these models give Python users the error early, with pydantic's location of
the bad field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["NpuOptions", "NpuCompileOptions"]

Precision = Literal["f32", "bf16", "f16", "auto"]
Performance = Literal["latency", "throughput", "cumulative_throughput"]
_VIRTUAL = ("AUTO:", "HETERO:", "MULTI:")


def _check_target(value: str | None) -> str | None:
    """Same shape check as the C side, so config errors show up early."""
    if value is None:
        return None
    if not value or any(not (c.isalnum() or c in ":,._") for c in value):
        raise ValueError(f"'{value}' is not an OpenVINO device such as NPU, CPU, GPU, "
                         "AUTO:NPU,CPU or HETERO:NPU,CPU")
    if ":" in value and not (value.startswith(_VIRTUAL) and value.split(":", 1)[1]):
        raise ValueError(f"'{value}' is not AUTO:<list>, HETERO:<list> or MULTI:<list>")
    return value


class NpuCompileOptions(BaseModel):
    """Options of ``Device.compile`` on this plugin's devices."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(
        None, description="OpenVINO device to compile for, overriding the nx_hal device: "
        "NPU, CPU, GPU, AUTO:<list> or HETERO:NPU,CPU (per-operator fallback)")
    precision: Precision | None = Field(
        None, description="inference precision: f32 (the default), bf16, f16, or auto "
        "(OpenVINO's own choice: bf16 on CPUs with bf16 units, f16 on GPUs)")
    performance: Performance | None = Field(
        None, description="OpenVINO's performance hint: latency (one request at a time), throughput "
        "(streams for requests in flight, e.g. Executable.map), cumulative_throughput (every device of a list)")
    streams: int | None = Field(None, ge=1, le=1024, description="number of execution streams")
    cpu_pinning: bool | None = Field(
        None, description="pin OpenVINO's CPU threads to cores (ENABLE_CPU_PINNING); default off, "
        "measured faster where cores are shared (docs/performance.md)")
    inference_threads: int | None = Field(
        None, ge=1, le=1024, description="CPU threads for inference (INFERENCE_NUM_THREADS); default: OpenVINO's")

    _target = field_validator("target")(_check_target)


class NpuOptions(NpuCompileOptions):
    """Client options (config ``[plugins.npu]``); the compile options given
    here are defaults for every compile."""

    cache_dir: str | None = Field(
        None, description="OpenVINO model cache directory, for the NPU and GPU (not the CPU, whose cache "
        "reloads LSTM, GRU and RNN models wrong in OpenVINO 2026.4; nx_hal's compile cache keeps CPU executables)")
    memory_limit: int | None = Field(
        None, ge=0, description="bytes each device's buffers may hold (0: no limit)")
