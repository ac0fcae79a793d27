"""Buffers: tensors held by a device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import numpy as np
import numpy.typing as npt

from nx_hal import dtypes
from nx_hal.event import Event
from nx_hal.native import NULL, check, ffi, lib

if TYPE_CHECKING:
    from nx_hal.device import Device

__all__ = ["Buffer"]


@final
class Buffer:
    """A tensor on a device. Made by ``Device.put`` or returned by an
    executable; freed when garbage-collected."""

    __slots__ = ("device", "handle", "shape", "dtype", "_code", "_np", "_host", "__weakref__")

    def __init__(self, device: Device, handle: Any, host: object = None) -> None:
        """Wraps a buffer handle the caller owns; reads its dtype and shape."""
        api = device._api
        info = ffi.new("nxhal_buffer_info_t*")
        info.struct_size = ffi.sizeof("nxhal_buffer_info_t")
        check(api, lib.nxhal_call_buffer_info(api, handle, info), device.plugin)
        self._set(device, handle, tuple(info.dims[i] for i in range(info.rank)), int(info.dtype),
                  host if info.is_zero_copy else None)

    def _set(self, device: Device, handle: Any, shape: tuple[int, ...], code: int, host: object) -> None:
        self.device = device
        self.handle = handle
        self.shape: tuple[int, ...] = shape
        self._code = code
        self.dtype: str = dtypes.DTYPE_NAMES[code]
        self._np = dtypes.to_numpy(code)
        self._host = host  # aliased host memory of a zero-copy buffer

    @classmethod
    def _known(cls, device: Device, handle: Any, shape: tuple[int, ...], code: int) -> Buffer:
        """A copied buffer whose dtype and shape the caller already knows (saves a call)."""
        buf = cls.__new__(cls)
        buf.device = device
        buf.handle = handle
        buf.shape = shape
        buf._code = code
        buf.dtype = dtypes.DTYPE_NAMES[code]
        buf._np = dtypes.NUMPY_OF[code]
        buf._host = None
        return buf

    def __del__(self) -> None:
        try:
            handle = self.handle
        except AttributeError:  # __init__ failed before taking ownership
            return
        if handle:
            lib.nxhal_call_buffer_destroy(self.device._api, handle)
            self.handle = NULL

    def __repr__(self) -> str:
        return f"Buffer(shape={self.shape}, dtype={self.dtype}, device={self.device.selector})"

    @property
    def is_zero_copy(self) -> bool:
        """True when the buffer aliases the host array it was made from."""
        return self._host is not None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self._np.itemsize

    def to_numpy(self) -> npt.NDArray[Any]:
        """Copies the buffer into a new numpy array (bf16 as raw uint16 words)."""
        out = np.empty(self.shape, self._np)
        api = self.device._api
        status = lib.nxhal_call_buffer_to_host(api, self.handle, ffi.from_buffer(out), out.nbytes, NULL)
        if status != NULL:
            check(api, status, self.device.plugin)
        return out

    def to_numpy_async(self) -> tuple[npt.NDArray[Any], Event]:
        """Starts the copy; the array holds the data once the event completes."""
        out = np.empty(self.shape, self._np)
        api = self.device._api
        event = ffi.new("nxhal_event_t**")
        check(
            api,
            lib.nxhal_call_buffer_to_host(api, self.handle, ffi.from_buffer(out), out.nbytes, event),
            self.device.plugin,
        )
        return out, Event(api, event[0], self.device.plugin, keep=(out, self))

    # DLPack: exported as a host copy, so consumers see a CPU tensor.
    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.to_numpy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: __dlpack__ hands out host memory

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        array = self.to_numpy()
        return array if dtype is None else array.astype(dtype)
