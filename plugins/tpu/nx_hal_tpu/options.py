"""Options of the TPU (PJRT) plugin, validated before they reach the C side.

Each non-None field becomes a typed option of ``client_create`` (or of
``executable_compile``); the C library checks names and types again.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from nx_hal_tpu.backends import backend_paths

__all__ = ["TpuOptions", "TpuCompileOptions"]


class TpuOptions(BaseModel):
    """Client options of the ``tpu`` plugin."""

    model_config = ConfigDict(extra="forbid")

    #: A PJRT plugin library to try first, e.g. a libtpu.so outside any package.
    library_path: str | None = None
    #: ``label=path`` entries joined by ``;``, each label stating the family
    #: (``gpu:cuda12``, ``cpu``); found from installed packages by default.
    backend_paths: str | None = Field(default_factory=backend_paths)
    #: Per-device cap on bytes held in nx_hal buffers (0: none).
    memory_limit_bytes: int | None = Field(default=None, ge=0)
    #: XLA CPU: number of CPU devices to expose.
    cpu_device_count: int | None = Field(default=None, ge=1, le=1024)
    #: CUDA: fraction of GPU memory the allocator may take.
    gpu_memory_fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    #: CUDA: reserve the memory fraction up front. Unset, memory is allocated
    #: as needed: XLA's preallocation aborts processes that share a GPU. Set
    #: true, it is refused when the fraction does not fit in the free memory.
    gpu_preallocate: bool | None = None
    #: CUDA: allocator name ("default", "platform", "bfc", "cuda_async").
    gpu_allocator: str | None = None
    #: CUDA: the GPU ordinals to use.
    gpu_visible_devices: list[int] | None = None


class TpuCompileOptions(BaseModel):
    """``Device.compile`` options of the ``tpu`` plugin."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int | None = Field(default=None, ge=1)
    num_partitions: int | None = Field(default=None, ge=1)
