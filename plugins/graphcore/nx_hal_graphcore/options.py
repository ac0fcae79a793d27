"""Typed options of the Graphcore plugin, validated before they reach C.

The C library checks the same rules again (src/options.c): these models
give Python users the error early, with pydantic's location of the bad field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["GraphcoreOptions", "GraphcoreCompileOptions", "MAX_IPUS"]

# Poplar attaches IPUs in power-of-two groups; 64 is a Pod64 partition.
MAX_IPUS = 64


class GraphcoreCompileOptions(BaseModel):
    """Options of ``Device.compile`` on an IPU; each overrides the client's."""

    model_config = ConfigDict(extra="forbid")

    precision: Literal["float16", "float32"] | None = None
    """float16 converts the model's float32 tensors to float16 before compiling."""
    available_memory_proportion: float | None = Field(default=None, gt=0.0, le=1.0)
    """Share of tile memory matmuls and convolutions may use for temporaries."""
    half_partials: bool | None = None
    """Accumulate matmul and convolution partials in float16."""


class GraphcoreOptions(GraphcoreCompileOptions):
    """Client options of the Graphcore plugin (``nx_hal`` config section ``graphcore``)."""

    num_ipus: int | None = None
    """IPUs per device: a power of two from 1 to 64."""
    compile_only: bool | None = None
    """Compile for an offline IPU target without attaching hardware."""
    ipu_model: bool | None = None
    """Use Poplar's IPU Model (needs the SDK, not the hardware)."""

    @field_validator("num_ipus", mode="before")
    @classmethod
    def _no_bool_ipus(cls, value: object) -> object:
        # bool is an int subclass; True IPUs is a mistake, not 1.
        if isinstance(value, bool):
            raise ValueError("num_ipus must be an integer, not a bool")
        return value

    @field_validator("num_ipus")
    @classmethod
    def _power_of_two(cls, value: int | None) -> int | None:
        if value is not None and (value < 1 or value > MAX_IPUS or value & (value - 1)):
            raise ValueError(f"num_ipus must be a power of two from 1 to {MAX_IPUS}, got {value}")
        return value
