"""Buffers: tensors held by a device."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, final

from nx_hal import dtypes
from nx_hal._fastpath import BufferBase, set_buffer_type
from nx_hal.event import Event
from nx_hal.native import NULL, address, check, ffi, lib

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from nx_hal.held import HeldOn
else:
    from nx_hal.dtypes import np  # imported on first use

__all__ = ["Buffer", "Layout", "layout"]


class Layout(NamedTuple):
    """A buffer's shape and element type, shared by every buffer alike."""

    shape: tuple[int, ...]
    code: int  # nxhal_dtype_t
    dtype: str  # its name: "f32", "bf16", ...
    numpy: np.dtype[Any]  # the numpy dtype holding its elements (bf16: uint16 words)
    nbytes: int  # shape times element size


def layout(shape: tuple[int, ...], code: int) -> Layout:
    """The Layout of a ``shape`` of elements of dtype ``code`` (an nxhal_dtype_t)."""
    held = dtypes.NUMPY_OF[code]
    return Layout(shape, code, dtypes.DTYPE_NAMES[code], held, math.prod(shape) * held.itemsize)


# Below this size a copy costs less than making a view (np.from_dlpack and
# its capsule, about 200 ns more here), so to_numpy copies and marks the copy
# read-only: callers see one behaviour at every size.
_VIEW_MIN_BYTES = 4096


_new = BufferBase.__new__


@final
class Buffer(BufferBase):
    """A tensor on a device, made by ``Device.put`` or returned by an executable.

    It is freed when garbage-collected. ``to_numpy()`` reads it as a
    read-only array: on a device whose buffers are host memory (CPU devices)
    a view that copies nothing; ``to_numpy(copy=True)`` as a writable copy.

    The handle, device and layout live in the C base (nx_hal/_fastpath.c),
    which frees the handle on deallocation and makes the outputs of
    ``Executable.__call__`` without going through Python.
    """

    __slots__ = ()

    def __init__(self, device: HeldOn, handle: Any, host: object = None) -> None:
        """Wraps a buffer handle the caller owns; reads its dtype and shape."""
        api = device._api
        info = ffi.new("nxhal_buffer_info_t*")
        info.struct_size = ffi.sizeof("nxhal_buffer_info_t")
        status = lib.nxhal_call_buffer_info(api, handle, info)
        if status != NULL:
            lib.nxhal_call_buffer_destroy(api, handle)  # owned: not leaked on error
            check(api, status, device.plugin)
        self._adopt(device, device._api_addr, address(handle),
                    layout(tuple(info.dims[i] for i in range(info.rank)), int(info.dtype)),
                    host if info.is_zero_copy else None)  # aliased host memory, kept alive
        self._cdata = handle

    @classmethod
    def _known(cls, device: HeldOn, handle: Any, known: Layout) -> Buffer:
        """A copied buffer whose layout the caller already knows (saves a call)."""
        buf = _new(cls)
        buf._adopt(device, device._api_addr, address(handle), known, None)
        buf._cdata = handle
        return buf

    @property
    def handle(self) -> Any:
        """The plugin's handle as a cffi pointer."""
        cdata = self._cdata
        if cdata is None:
            cdata = self._cdata = ffi.cast("nxhal_buffer_t*", self._addr)
        return cdata

    @property
    def shape(self) -> tuple[int, ...]:
        """The dimensions, outermost first."""
        return self._layout.shape

    @property
    def dtype(self) -> str:
        """The element type's name: "f32", "i64", "bf16", ..."""
        return self._layout.dtype

    def __repr__(self) -> str:
        """Shape, dtype and the selector of its device."""
        return f"Buffer(shape={self.shape}, dtype={self.dtype}, device={self.device.selector})"

    @property
    def is_zero_copy(self) -> bool:
        """True when the buffer aliases the host array it was made from."""
        if self._host is None:
            return False
        api = self.device._api
        info = ffi.new("nxhal_buffer_info_t*")
        info.struct_size = ffi.sizeof("nxhal_buffer_info_t")
        check(api, lib.nxhal_call_buffer_info(api, self.handle, info), self.device.plugin)
        return bool(info.is_zero_copy)

    @property
    def nbytes(self) -> int:
        """The size of its elements in bytes (shape times element size)."""
        return self._layout.nbytes

    def to_numpy(self, copy: bool = False) -> npt.NDArray[Any]:
        """Returns the values as a read-only numpy array (bf16 as raw uint16 words).

        Where the buffer is host memory the plugin exports without a copy
        (CPU devices: tpu:cpu, npu:cpu), it is a view of that memory: no
        bytes move, the view keeps the memory alive by itself (also once
        this Buffer is gone), and nothing ever writes it (later runs make
        new output buffers). Under 4 KiB, where a copy is cheaper than a
        view, and on device memory, it is a copy, read-only all the same,
        so code behaves alike on every device. ``copy=True`` gives a new
        writable array the caller owns.
        """
        layout = self._layout
        if not copy and layout.nbytes >= _VIEW_MIN_BYTES:
            view = self._view()
            if view is not None:
                return view
        # The one copy path (to_numpy(copy=True) is what __array__ and
        # __dlpack__ use): written here rather than in a helper, because in a
        # tiny model's round trip a further Python call costs 0.1-0.2 us.
        out = np.empty(layout.shape, layout.numpy)
        status = self._read_into(out)
        if status is not None:
            check(self.device._api, ffi.cast("nxhal_status_t*", status), self.device.plugin)
        if not copy:
            out.setflags(write=False)  # half the cost of flags.writeable = False
        return out

    def _view(self) -> npt.NDArray[Any] | None:
        """A read-only zero-copy view of the buffer's memory, or None."""
        host = self._host
        if isinstance(host, np.ndarray):
            # Aliases the caller's array (Device.put(..., zero_copy=True)):
            # the plugin's export would not keep that array alive, a view of
            # it does. Read-only through a read-only memoryview, so numpy
            # refuses to make it writable again.
            if host.nbytes == 0:  # memoryview cannot cast what holds no bytes
                empty = np.empty(self._layout.shape, self._layout.numpy)
                empty.flags.writeable = False
                return empty
            try:
                data = host.data.cast("B").toreadonly()
            except (TypeError, ValueError):  # a dtype the buffer protocol cannot describe
                return None
            return np.frombuffer(data, self._layout.numpy).reshape(self._layout.shape)
        exported = self._host_view()
        if exported is None:
            return None
        try:
            array = np.from_dlpack(exported)
        except (TypeError, ValueError, BufferError, RuntimeError):
            return None  # a numpy before 2.1 takes no versioned capsule (its capsule frees the export)
        array.flags.writeable = False  # where numpy ignored the export's read-only flag
        return array

    def to_numpy_async(self) -> tuple[npt.NDArray[Any], Event]:
        """Starts the copy; the array holds the data once the event completes."""
        out = np.empty(self._layout.shape, self._layout.numpy)
        api = self.device._api
        event = ffi.new("nxhal_event_t**")
        check(
            api,
            lib.nxhal_call_buffer_to_host(api, self.handle, ffi.from_buffer(out), out.nbytes, event),
            self.device.plugin,
        )
        return out, Event(api, event[0], self.device.plugin, keep=(out, self))

    # DLPack. Host-addressable buffers (CPU devices) are handed out without a
    # copy through the plugin's own export; anything else as a host copy, so
    # consumers always see a CPU tensor.
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        # The only device this buffer is ever exported on is the host
        # (__dlpack_device__); handing a CPU capsule to a consumer that asked
        # for another device would make it read host memory as its own.
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(
                f"cannot export to DLPack device {tuple(dl_device)}: this buffer is exported only as "
                "CPU memory (device (1, 0)); copy it with the consumer's own to-device transfer"
            )
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        host = self._host
        if isinstance(host, np.ndarray) and not copy:
            # Aliases the caller's array (put(..., zero_copy=True)): the
            # plugin's export would keep its own storage alive, not that
            # array, so a consumer could read it after it is freed. The
            # array's own export keeps it alive.
            return host.__dlpack__(**kwargs)
        if max_version is not None and max_version[0] >= 1 and not copy:
            capsule = _export_capsule(self)
            if capsule is not None:
                return capsule
        return self.to_numpy(copy=True).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: exported as CPU memory (zero-copy, or a host copy)."""
        return (1, 0)  # kDLCPU: zero-copy CPU memory, or a host copy

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        """Returns the values for numpy (``np.asarray``), with numpy 2's ``copy``.

        ``copy=None`` gives the read-only view where there is one (else a
        copy), ``True`` always a new writable array, ``False`` the view, or
        ValueError where the array needs a copy (no view, or another dtype).
        """
        view = self._view()
        want = None if dtype is None else np.dtype(dtype)
        if copy is False:
            if view is None:
                raise ValueError(
                    f"{self!r} cannot become a numpy array without a copy: its memory is not host "
                    "memory the plugin exports (use np.asarray(buffer) or buffer.to_numpy())"
                )
            if want is not None and want != view.dtype:
                raise ValueError(f"{self!r} holds {view.dtype}, and {want} needs a copy")
            return view
        if view is None:
            array = self.to_numpy(copy=True)  # already a new array: no second copy for copy=True
            return array if want is None else array.astype(want, copy=False)
        if want is None:
            return view.copy() if copy else view
        return view.astype(want, copy=bool(copy))


set_buffer_type(Buffer)


_CAPSULE_NAME = b"dltensor_versioned"  # module-level: the capsule keeps pointing at it
_capsule_new: Any = None


def _export_capsule(buf: Buffer) -> Any:
    """A "dltensor_versioned" capsule over the plugin's zero-copy export, or
    None when the plugin cannot export this buffer as host memory.
    """
    global _capsule_new
    api = buf.device._api
    out = ffi.new("nxhal_dlpack_managed_tensor_t**")
    status = lib.nxhal_call_buffer_to_dlpack(api, buf.handle, out)
    if status != NULL:
        lib.nxhal_call_status_free(api, status)
        return None
    tensor = out[0]
    if tensor.dl_tensor.device.device_type != 1:  # not host memory: copy instead
        if tensor.deleter != NULL:
            tensor.deleter(tensor)
        return None
    if _capsule_new is None:
        import ctypes

        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        _capsule_new = new
    return _capsule_new(int(ffi.cast("uintptr_t", tensor)), _CAPSULE_NAME,
                        int(lib.nxhal_py_capsule_destructor_address()))
