"""The standard's array object: an nx_hal buffer on a device, with its dtype
and shape, and the operators of the standard, each an operation run on that
device (``_dispatch``). Inside ``jit`` an array is a symbol of the graph
being traced instead of a buffer.

Arrays are not thread-safe for ``__setitem__`` (which replaces the buffer);
reading one from several threads is safe.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._graph import Graph, Sym

if TYPE_CHECKING:
    from nx_hal.buffer import Buffer
    from nx_hal.device import Device

__all__ = ["Array", "traced", "Trace", "TraceError", "current_trace", "scalar_array"]


class TraceError(TypeError):
    """Tracing cannot follow the function: a value it needs is only known when it runs."""


class Trace:
    """A function being traced: its graph, and the concrete arrays it closed
    over, which become extra inputs. One per thread at a time."""

    def __init__(self, device: Device) -> None:
        self.graph = Graph()
        self.device = device
        self.captured: list[Array] = []
        self._ids: dict[int, Sym] = {}

    def symbol(self, a: Array) -> Sym:
        if a._sym is not None:
            return a._sym
        found = self._ids.get(id(a))
        if found is None:
            found = self.graph.param(a._dtype.name, a._shape)
            self._ids[id(a)] = found
            self.captured.append(a)
        return found


_local = threading.local()

# The functions the array's operators call (add for +, getitem for x[k], ...),
# bound by the package's __init__ once every module is imported: the array
# sits below the functions, which all take arrays.
_FUNCS: dict[str, Any] = {}


def bind(functions: dict[str, Any]) -> None:
    _FUNCS.update(functions)


def current_trace() -> Trace | None:
    return getattr(_local, "trace", None)


def set_trace(trace: Trace | None) -> None:
    _local.trace = trace


def traced(impl: Any, arrays: Sequence[Array], static: tuple[Any, ...]) -> Any:
    trace = current_trace()
    if trace is None:
        raise TraceError("an array of a finished trace was used outside its jit function")
    result = impl(trace.graph, *[trace.symbol(a) for a in arrays], *static)
    if isinstance(result, tuple):
        return tuple(Array._symbol(s, trace.device) for s in result)
    return Array._symbol(result, trace.device)


# 0-d arrays for Python scalars in operations (x + 1): buffers are immutable,
# so one per (device, dtype, value) serves every use.
_scalars: dict[tuple[Any, ...], Array] = {}


def scalar_array(value: bool | int | float | complex, dtype: np.dtype[Any], device: Device) -> Array:
    # repr, not the value: 0.0 == -0.0 (and True == 1) would share one buffer,
    # and x * -0.0 would lose its sign; NaN, unequal to itself, would never hit.
    key = (device, dtype, repr(value))
    found = _scalars.get(key)
    if found is None:
        host = np.asarray(value, dtype=dtype)
        if isinstance(value, int) and not isinstance(value, bool) and dtype.kind in "iu" and int(host) != value:
            raise OverflowError(f"Python int {value} is out of range for {dtype}")
        found = Array._from_host(host, device)
        if len(_scalars) < 4096:
            _scalars[key] = found
    return found


def _device_of(device: object) -> Device:
    from nx_hal import api
    from nx_hal.device import Device

    if device is None:
        return api.default_device()
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        return api.device(device)
    raise TypeError(f"device must be an nx_hal Device or a selector string such as 'npu:cpu', not {device!r}")


class Array:
    """An array on an nx_hal device (the array API standard's array object)."""

    __slots__ = ("_buf", "_dtype", "_shape", "_device", "_sym", "__weakref__")
    __array_priority__ = 100  # numpy defers x (ndarray) + y (Array) to Array.__radd__

    _buf: Buffer | None
    _dtype: np.dtype[Any]
    _shape: tuple[int, ...]
    _device: Device
    _sym: Sym | None

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("make arrays with nx_hal.array_api.asarray (or another creation function)")

    @classmethod
    def _wrap(cls, buf: Buffer, dtype: np.dtype[Any], shape: tuple[int, ...], device: Device) -> Array:
        self = object.__new__(cls)
        self._buf = buf
        self._dtype = dtype
        self._shape = shape
        self._device = device
        self._sym = None
        return self

    @classmethod
    def _from_host(cls, host: np.ndarray[Any, Any], device: Device) -> Array:
        if not host.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            host = host.copy(order="C")
        if host.dtype.kind == "c":  # stored as (real, imag) float pairs
            pairs = np.stack([host.real, host.imag], axis=-1)
            return cls._wrap(device.put(pairs), host.dtype, tuple(host.shape), device)
        return cls._wrap(device.put(host), host.dtype, tuple(host.shape), device)

    @classmethod
    def _empty(cls, device: Device, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
        return cls._from_host(np.empty(shape, dtype=dtype), device)

    @classmethod
    def _symbol(cls, sym: Sym, device: Device) -> Array:
        self = object.__new__(cls)
        self._buf = None
        self._dtype = np.dtype(sym.dtype)
        self._shape = sym.shape
        self._device = device
        self._sym = sym
        return self

    # -- attributes ---------------------------------------------------------------------------

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element type (a numpy dtype object, as the namespace's dtypes are)."""
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape (every dimension is known)."""
        return self._shape

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def device(self) -> Device:
        """The nx_hal Device the array lives on."""
        return self._device

    @property
    def T(self) -> Array:
        """The transpose of a 2-d array."""
        if self.ndim != 2:
            raise ValueError(f"x.T needs a 2-d array, got {self.ndim}-d (use permute_dims or mT)")
        return _FUNCS["permute_dims"](self, (1, 0))  # type: ignore[no-any-return]

    @property
    def mT(self) -> Array:
        """The transpose of the last two axes."""
        return _FUNCS["matrix_transpose"](self)  # type: ignore[no-any-return]

    def __array_namespace__(self, *, api_version: str | None = None) -> ModuleType:
        """The namespace: nx_hal.array_api."""
        if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"nx_hal.array_api implements array API 2024.12 (and earlier), not {api_version!r}")
        import sys

        return sys.modules[__package__ or "nx_hal.array_api"]  # the package imported this module

    def __repr__(self) -> str:
        if self._sym is not None:
            return f"Array(traced, shape={self._shape}, dtype={self._dtype}, device={self._device.selector!r})"
        return f"Array({np.array2string(self._host())}, dtype={self._dtype}, device={self._device.selector!r})"

    # -- to the host --------------------------------------------------------------------------

    def _host(self) -> np.ndarray[Any, Any]:
        """The values as a read-only numpy array (a view where the device's memory is the host's)."""
        if self._buf is None:
            raise TraceError("the value of a traced array is only known when the jit function runs "
                             "(data-dependent Python control flow cannot be traced)")
        out = self._buf.to_numpy()
        if out.dtype != self._dtype:  # complex arrays are stored as float pairs
            out = np.ascontiguousarray(out).view(self._dtype)
        return out.reshape(self._shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        host = self._host()
        if copy is False and dtype is not None and np.dtype(dtype) != host.dtype:
            raise ValueError("cannot give a view with another dtype without a copy")
        out = host.astype(dtype) if dtype is not None and np.dtype(dtype) != host.dtype else host
        return out.copy() if copy else out

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Exports the buffer (DLPack, host memory)."""
        if self._buf is None:
            raise TraceError("a traced array has no buffer to export")
        return self._buf.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """Where ``__dlpack__`` exports: host memory."""
        return (1, 0)

    def _scalar(self, kind: type) -> Any:
        if self.ndim != 0:
            raise TypeError(f"only 0-d arrays convert to Python {kind.__name__}, this one has shape {self._shape}")
        return self._host()[()].item()

    def __bool__(self) -> bool:
        return bool(self._scalar(bool))

    def __int__(self) -> int:
        value = self._scalar(int)
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            raise (ValueError if value != value else OverflowError)(f"cannot convert {value} to int")
        return int(value)

    def __float__(self) -> float:
        return float(self._scalar(float))

    def __complex__(self) -> complex:
        return complex(self._scalar(complex))

    def __index__(self) -> int:
        if self._dtype.kind not in "iu":
            raise TypeError(f"only integer arrays are indices, not {self._dtype}")
        return int(self._scalar(int))

    def to_device(self, device: object, /, *, stream: Any = None) -> Array:
        """The array on ``device`` (a Device or a selector string)."""
        target = _device_of(device)
        if target is self._device:
            return self
        _dtypes.check_dtype(self._dtype, target)
        return Array._from_host(self._host(), target)

    # -- operators: the elementwise functions ----------------------------------------------------

    def _binary(self, name: str, other: Any, reflected: bool = False) -> Array:
        if not isinstance(other, (Array, bool, int, float, complex)):
            return NotImplemented  # type: ignore[no-any-return]
        fn = _FUNCS[name]
        return fn(other, self) if reflected else fn(self, other)  # type: ignore[no-any-return]

    def __add__(self, other: Any) -> Array:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Array:
        return self._binary("add", other, True)

    def __sub__(self, other: Any) -> Array:
        return self._binary("subtract", other)

    def __rsub__(self, other: Any) -> Array:
        return self._binary("subtract", other, True)

    def __mul__(self, other: Any) -> Array:
        return self._binary("multiply", other)

    def __rmul__(self, other: Any) -> Array:
        return self._binary("multiply", other, True)

    def __truediv__(self, other: Any) -> Array:
        return self._binary("divide", other)

    def __rtruediv__(self, other: Any) -> Array:
        return self._binary("divide", other, True)

    def __floordiv__(self, other: Any) -> Array:
        return self._binary("floor_divide", other)

    def __rfloordiv__(self, other: Any) -> Array:
        return self._binary("floor_divide", other, True)

    def __mod__(self, other: Any) -> Array:
        return self._binary("remainder", other)

    def __rmod__(self, other: Any) -> Array:
        return self._binary("remainder", other, True)

    def __pow__(self, other: Any) -> Array:
        return self._binary("pow", other)

    def __rpow__(self, other: Any) -> Array:
        return self._binary("pow", other, True)

    def __matmul__(self, other: Any) -> Array:
        return _FUNCS["matmul"](self, other) if isinstance(other, Array) else NotImplemented

    def __rmatmul__(self, other: Any) -> Array:
        return _FUNCS["matmul"](other, self) if isinstance(other, Array) else NotImplemented

    def __and__(self, other: Any) -> Array:
        return self._binary("bitwise_and", other)

    def __rand__(self, other: Any) -> Array:
        return self._binary("bitwise_and", other, True)

    def __or__(self, other: Any) -> Array:
        return self._binary("bitwise_or", other)

    def __ror__(self, other: Any) -> Array:
        return self._binary("bitwise_or", other, True)

    def __xor__(self, other: Any) -> Array:
        return self._binary("bitwise_xor", other)

    def __rxor__(self, other: Any) -> Array:
        return self._binary("bitwise_xor", other, True)

    def __lshift__(self, other: Any) -> Array:
        return self._binary("bitwise_left_shift", other)

    def __rlshift__(self, other: Any) -> Array:
        return self._binary("bitwise_left_shift", other, True)

    def __rshift__(self, other: Any) -> Array:
        return self._binary("bitwise_right_shift", other)

    def __rrshift__(self, other: Any) -> Array:
        return self._binary("bitwise_right_shift", other, True)

    def __lt__(self, other: Any) -> Array:
        return self._binary("less", other)

    def __le__(self, other: Any) -> Array:
        return self._binary("less_equal", other)

    def __gt__(self, other: Any) -> Array:
        return self._binary("greater", other)

    def __ge__(self, other: Any) -> Array:
        return self._binary("greater_equal", other)

    def __eq__(self, other: Any) -> Array:  # type: ignore[override]
        return self._binary("equal", other)

    def __ne__(self, other: Any) -> Array:  # type: ignore[override]
        return self._binary("not_equal", other)

    __hash__ = None  # type: ignore[assignment]

    def __neg__(self) -> Array:
        return _FUNCS["negative"](self)  # type: ignore[no-any-return]

    def __pos__(self) -> Array:
        return _FUNCS["positive"](self)  # type: ignore[no-any-return]

    def __abs__(self) -> Array:
        return _FUNCS["abs"](self)  # type: ignore[no-any-return]

    def __invert__(self) -> Array:
        return _FUNCS["bitwise_invert"](self)  # type: ignore[no-any-return]

    def __iadd__(self, other: Any) -> Array:
        return self._inplace("add", other)

    def __isub__(self, other: Any) -> Array:
        return self._inplace("subtract", other)

    def __imul__(self, other: Any) -> Array:
        return self._inplace("multiply", other)

    def __itruediv__(self, other: Any) -> Array:
        return self._inplace("divide", other)

    def __ifloordiv__(self, other: Any) -> Array:
        return self._inplace("floor_divide", other)

    def __imod__(self, other: Any) -> Array:
        return self._inplace("remainder", other)

    def __ipow__(self, other: Any) -> Array:
        return self._inplace("pow", other)

    def __iand__(self, other: Any) -> Array:
        return self._inplace("bitwise_and", other)

    def __ior__(self, other: Any) -> Array:
        return self._inplace("bitwise_or", other)

    def __ixor__(self, other: Any) -> Array:
        return self._inplace("bitwise_xor", other)

    def __ilshift__(self, other: Any) -> Array:
        return self._inplace("bitwise_left_shift", other)

    def __irshift__(self, other: Any) -> Array:
        return self._inplace("bitwise_right_shift", other)

    def __imatmul__(self, other: Any) -> Array:
        return self._replace(_FUNCS["matmul"](self, other))

    def _inplace(self, name: str, other: Any) -> Array:
        result = self._binary(name, other)
        if result is NotImplemented:
            return result  # type: ignore[no-any-return]
        return self._replace(result)

    def _replace(self, result: Array) -> Array:
        # In place keeps the array's dtype and shape (the standard's rule for
        # x op= y): a result that would change either is an error.
        if result._dtype != self._dtype or result._shape != self._shape:
            raise TypeError(f"in-place operation would change {self._dtype}{list(self._shape)} into "
                            f"{result._dtype}{list(result._shape)}")
        self._buf, self._sym = result._buf, result._sym
        return self

    # -- indexing -------------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Array:
        return _FUNCS["getitem"](self, key)  # type: ignore[no-any-return]

    def __setitem__(self, key: Any, value: Any) -> None:
        _FUNCS["setitem"](self, key, value)
