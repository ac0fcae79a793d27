"""Devices: what a plugin offers, and the entry point for buffers and programs."""

from __future__ import annotations

import contextvars
import operator
from os import PathLike
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, final

from nx_hal import dtypes
from nx_hal._lazy import LazyModule
from nx_hal.buffer import Buffer, Layout, layout
from nx_hal.compile import compile_program
from nx_hal.compile.load import converts_onnx
from nx_hal.errors import InvalidArgumentError
from nx_hal.executable import Executable
from nx_hal.native import NULL, address, check, ffi, lib, text
from nx_hal.options import from_c_value, to_c_options
from nx_hal.store import sealed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from nx_hal import programs
    from nx_hal.cache import CompileCache
    from nx_hal.converter import Converter
    from nx_hal.library import Client
else:
    # Imported on first use: listing devices needs neither numpy nor pydantic.
    from nx_hal.dtypes import np

    programs = LazyModule("nx_hal.programs")

__all__ = ["Device", "MemoryStats", "KIND_NAMES"]

KIND_NAMES: Final = {0: "other", 1: "cpu", 2: "gpu", 3: "tpu", 4: "npu", 5: "ipu"}

# The device ``with device:`` made current in this context.
current_device: contextvars.ContextVar[Device | None] = contextvars.ContextVar(
    "nx_hal_current_device", default=None
)


class MemoryStats(NamedTuple):
    """A device's memory accounting, in bytes (``Device.memory_stats``)."""

    bytes_in_use: int
    peak_bytes_in_use: int
    bytes_limit: int | None  # None: no limit


_STATS_OUT: Final = ffi.typeof("uint64_t[3]")
_new_buffer = Buffer.__new__
_BUFFER_OUT: Final = ffi.typeof("uintptr_t*")  # a buffer handle's address
# Native-order numpy dtypes -> codes, filled by the first put() (numpy is imported on first use).
_FAST_DTYPES: Final[dict[Any, int]] = {}


def _fast_dtypes() -> dict[Any, int]:
    _FAST_DTYPES.update({np.dtype(t): dtypes.from_numpy(np.dtype(t)) for t in (
        np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_,
        np.uint16, np.uint32, np.uint64)})
    return _FAST_DTYPES
_dims_cache: dict[tuple[int, ...], Any] = {}
_layout_cache: dict[tuple[tuple[int, ...], int], Layout] = {}


def _layout(shape: tuple[int, ...], code: int) -> Layout:
    """Layouts are immutable: one per (shape, dtype), shared."""
    found = _layout_cache.get((shape, code))
    if found is None:
        if len(_layout_cache) > 4096:
            _layout_cache.clear()
        found = _layout_cache[(shape, code)] = layout(shape, code)
    return found


def _dims(shape: tuple[int, ...]) -> Any:
    """An int64 array of ``shape``, shared per shape: read-only, so threads may share it."""
    dims = _dims_cache.get(shape)
    if dims is None:
        if len(_dims_cache) > 4096:
            _dims_cache.clear()
        dims = _dims_cache[shape] = ffi.new("int64_t[]", shape) if shape else NULL
    return dims


class PluginRecord(Protocol):
    """What a device reads of its plugin's record (nx_hal.plugin.PluginRecord,
    which makes the device): its name and devices, what its compiles use, and
    the client that a device listed from the probe connects on first use."""

    name: str
    devices: list[Device]
    spec: Any  # PluginSpec
    client_options: dict[str, Any]
    compile_cache: CompileCache | None
    converter: Converter

    def connect(self) -> None: ...


@final
class Device:
    """One device of one plugin: makes buffers (``put``) and executables (``compile``).

    ``selector`` ("npu:cpu:0") names it exactly; ``kind``, ``name``,
    ``vendor``, ``memory_bytes``, ``compute_units``, ``formats`` (the program
    formats it compiles), ``compat_key`` and ``attributes`` are what its
    plugin reports.
    """

    __slots__ = (
        "record", "client", "handle", "index", "kind", "name", "vendor", "memory_bytes",
        "compute_units", "formats", "compat_key", "attributes", "_api", "_api_addr", "_tokens",
    )

    def __init__(self, record: PluginRecord, client: Client, handle: Any, index: int) -> None:
        """Reads device ``index`` of ``client`` (``handle``) from its plugin."""
        self.record = record
        self.client = client
        self.handle = handle
        self.index = index
        self._api = client.library.api
        self._api_addr = address(self._api)  # for nx_hal._fastpath
        self._tokens: list[contextvars.Token[Device | None]] = []
        api = self._api
        info = ffi.new("nxhal_device_info_t*")
        info.struct_size = ffi.sizeof("nxhal_device_info_t")
        check(api, lib.nxhal_call_device_info(api, handle, info), self.plugin)
        self.kind: str = KIND_NAMES.get(info.kind, "other")
        self.name = text(info.name)
        self.vendor = text(info.vendor)
        self.memory_bytes = int(info.memory_bytes)
        self.compute_units = int(info.compute_units)
        self.formats: tuple[str, ...] = tuple(text(info.formats[i]) for i in range(info.num_formats))
        self.compat_key = text(info.compat_key)
        count = ffi.new("size_t*")
        check(api, lib.nxhal_call_device_attribute_count(api, handle, count), self.plugin)
        attrs: dict[str, object] = {}
        attr = ffi.new("nxhal_attribute_t*")
        for i in range(count[0]):
            attr.struct_size = ffi.sizeof("nxhal_attribute_t")
            check(api, lib.nxhal_call_device_attribute(api, handle, i, attr), self.plugin)
            attrs[text(attr.name)] = from_c_value(attr)
        self.attributes = attrs

    # A device listed from its plugin's probe (in a child, or from the probe
    # cache) has no client in this process until it is used: ``client``,
    # ``handle`` and the table are set by _attach when the registry makes
    # the client (PluginRecord.connect), on the first read of any of them.
    @classmethod
    def _described(cls, record: PluginRecord, index: int, info: dict[str, Any]) -> Device:
        """The device ``_describe()`` gave in its probe; no client yet."""
        self = cls.__new__(cls)
        self.record = record
        self.index = index
        self._tokens = []
        self.kind = str(info["kind"])
        self.name = str(info["name"])
        self.vendor = str(info["vendor"])
        self.memory_bytes = int(info["memory_bytes"])
        self.compute_units = int(info["compute_units"])
        self.formats = tuple(str(f) for f in info["formats"])
        self.compat_key = str(info["compat_key"])
        self.attributes = dict(info["attributes"])
        return self

    def _describe(self) -> dict[str, Any]:
        """What ``_described`` takes: the device's info, JSON-serializable."""
        return {"kind": self.kind, "name": self.name, "vendor": self.vendor, "memory_bytes": self.memory_bytes,
                "compute_units": self.compute_units, "formats": list(self.formats),
                "compat_key": self.compat_key, "attributes": dict(self.attributes)}

    def _attach(self, client: Client, handle: Any) -> None:
        self.client = client
        self.handle = handle
        self._api = client.library.api
        self._api_addr = address(self._api)

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            # Only unset slots get here: a described device's client, made now.
            if name in ("client", "handle", "_api", "_api_addr"):
                self.record.connect()
                return object.__getattribute__(self, name)
            raise AttributeError(f"'Device' object has no attribute {name!r}")

    @property
    def plugin(self) -> str:
        """The name of the plugin that offers this device ("tpu", "npu", ...)."""
        return self.record.name

    @property
    def selector(self) -> str:
        """The selector that names exactly this device: ``plugin:kind:index``."""
        same_kind = [d for d in self.record.devices if d.kind == self.kind]
        return f"{self.plugin}:{self.kind}:{same_kind.index(self)}"

    def __repr__(self) -> str:
        """The selector and the device's name."""
        return f"Device({self.selector!r}, name={self.name!r})"

    def __enter__(self) -> Device:
        """Makes this the current device inside the ``with`` block."""
        self._tokens.append(current_device.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        """Restores the device that was current before ``__enter__``."""
        current_device.reset(self._tokens.pop())

    def info(self) -> dict[str, object]:
        """What the plugin says about the device, as JSON-ready data."""
        return {
            "plugin": self.plugin,
            "selector": self.selector,
            "kind": self.kind,
            "name": self.name,
            "vendor": self.vendor,
            "memory_bytes": self.memory_bytes,
            "compute_units": self.compute_units,
            "formats": list(self.formats),
            "compat_key": self.compat_key,
            "attributes": dict(self.attributes),
        }

    def memory_stats(self) -> MemoryStats:
        """Bytes its buffers hold now and at most so far, and the cap (None: no cap)."""
        out = ffi.new(_STATS_OUT)
        status = lib.nxhal_py_memory_stats(self._api, self.handle, out)
        if status != NULL:
            check(self._api, status, self.plugin)
        return MemoryStats(out[0], out[1], out[2] or None)

    def set_memory_limit(self, limit_bytes: int | None) -> None:
        """Caps the bytes this device's buffers may hold; None removes the cap."""
        value = 0  # the ABI's "no limit"
        if limit_bytes is not None:
            if isinstance(limit_bytes, bool) or not hasattr(limit_bytes, "__index__"):
                # int() would truncate 1.5 to 1 and take "10": refuse instead.
                raise TypeError(f"memory limit must be an int number of bytes or None, got {limit_bytes!r}")
            value = operator.index(limit_bytes)
            if value <= 0:
                # 0 would reach the ABI as "no limit", silently lifting the cap.
                raise InvalidArgumentError(
                    f"memory limit must be > 0 bytes, got {value}; pass None to remove it", plugin=self.plugin
                )
            if value >= 1 << 64:
                raise InvalidArgumentError(f"memory limit {value} does not fit 64 bits", plugin=self.plugin)
        check(self._api, lib.nxhal_call_device_set_memory_limit(self._api, self.handle, value), self.plugin)

    def put(self, array: npt.ArrayLike, *, zero_copy: bool = False) -> Buffer:
        """Copies a host array to the device and returns the Buffer.

        With ``zero_copy`` the buffer may alias the array instead (where the
        device reads host memory and the array suits it; ``is_zero_copy``
        says): the buffer keeps the array alive, and the array must not be
        modified while the buffer lives.
        """
        # The common case written out inline: each Python call saved here is
        # about 60 ns of a sub-microsecond put (bench/dispatch.py).
        host = np.asarray(array)
        code = (_FAST_DTYPES or _fast_dtypes()).get(host.dtype)  # native byte order only
        if code is None or not host.flags.c_contiguous:
            host, code = self._host_array(host)
        shape = host.shape
        result = ffi.new(_BUFFER_OUT)
        status = lib.nxhal_py_buffer_from_host(
            self._api, self.handle, code, len(shape), _dims(shape), ffi.from_buffer(host), host.nbytes,
            lib.NXHAL_HOST_ZERO_COPY if zero_copy else lib.NXHAL_HOST_COPY, result,
        )
        if status != NULL:
            check(self._api, status, self.plugin)
        out = int(result[0])
        if zero_copy:
            return Buffer(self, ffi.cast("nxhal_buffer_t*", out), host)
        buf = _new_buffer(Buffer)
        buf._adopt(self, self._api_addr, out, _layout(host.shape, code), None)
        return buf

    def _put_alias(self, array: object) -> Buffer:
        """An input for one synchronous run: aliases ``array`` where the plugin
        can (else copies), keeping it alive, without asking the plugin which
        it did (``Executable._call_slow`` says why this is safe).
        """
        host, code = self._host_array(array)
        out = self._from_host(host, code, lib.NXHAL_HOST_ZERO_COPY)
        buf = _new_buffer(Buffer)
        buf._adopt(self, self._api_addr, out, _layout(host.shape, code), host)
        return buf

    def _host_array(self, array: object) -> tuple[npt.NDArray[Any], int]:
        """``array`` as a C-contiguous native-order numpy array, and its dtype code."""
        host = np.asarray(array)
        code = (_FAST_DTYPES or _fast_dtypes()).get(host.dtype)  # native byte order only
        if code is None or not host.flags.c_contiguous:
            # (np.ascontiguousarray would make a 0-d array 1-d)
            host = np.asarray(host, dtype=host.dtype.newbyteorder("="), order="C")
            try:
                code = dtypes.from_numpy(host.dtype)
            except ValueError as exc:
                raise InvalidArgumentError(str(exc), plugin=self.plugin) from None
        return host, code

    def _from_host(self, host: npt.NDArray[Any], code: int, flags: int) -> int:
        """A new buffer handle's address over ``host`` (the caller owns it)."""
        shape = host.shape
        out = ffi.new(_BUFFER_OUT)
        status = lib.nxhal_py_buffer_from_host(
            self._api, self.handle, code, len(shape), _dims(shape), ffi.from_buffer(host), host.nbytes, flags, out
        )
        if status != NULL:
            check(self._api, status, self.plugin)
        return int(out[0])

    def compile(
        self,
        program: bytes | str | PathLike[str] | Any,
        format: str | None = None,
        *,
        cache: bool = True,
        **options: object,
    ) -> Executable:
        """Compiles a program: bytes, MLIR text, a file path, or an onnx.ModelProto.

        ``options`` are the plugin's compile options. With ``cache`` (and a
        cache configured) a serialized executable from an earlier compile of
        the same program, options and compat key is loaded instead, and a
        second compile of the same unchanged file in this process returns
        the executable already made. StableHLO from the user is parsed and
        verified in a child first (nx_hal.onnx.verify); programs the vendor
        reads natively (ONNX on the npu plugin) are compiled first in a child
        (nx_hal.sandbox), so a program that crashes or hangs the vendor's
        compiler is an error, not the end of this process. The core option
        ``verify="require"`` refuses programs that cannot be checked so
        instead of passing them on unchecked; ``verify="off"`` skips the
        checks (trusted programs); ``verify_timeout`` (seconds) bounds the
        child's compile; ``input_shapes`` fixes dynamic dims where ONNX is
        converted; ``reserialize`` ("auto", "always", "never") whether
        StableHLO is written again for the backend's version. The stages
        are nx_hal.compile's.
        """
        return compile_program(self, program, format, cache=cache, options=options)

    def _compile(self, prog: programs.Program, options: dict[str, object]) -> Executable:
        copts = to_c_options(options)
        cprog = ffi.new("nxhal_program_t*")
        cprog.struct_size = ffi.sizeof("nxhal_program_t")
        fmt = ffi.new("char[]", prog.format.encode())
        cprog.format = fmt
        data = ffi.from_buffer(prog.data)
        cprog.data = data
        cprog.size = len(prog.data)
        extra = ffi.from_buffer(prog.extra) if prog.extra is not None else ffi.NULL
        cprog.extra_data = extra
        cprog.extra_size = len(prog.extra) if prog.extra is not None else 0
        out = ffi.new("nxhal_executable_t**")
        check(
            self._api,
            lib.nxhal_call_executable_compile(self._api, self.handle, cprog, copts.array, copts.count, out),
            self.plugin,
        )
        return Executable(self, out[0])

    def accepts(self, format: str) -> str | None:
        """Says why ``compile`` does not take ``format``, or None where it does.

        None if ``compile`` takes programs in ``format`` (natively or through
        the core's ONNX → StableHLO converter), else why not.
        """
        if format in self.formats:
            return None
        if format == "onnx" and converts_onnx(self):
            return self.record.converter.available()
        return f"accepts {', '.join(self.formats) or 'no formats'}, not '{format}'"

    def load_executable(self, data: bytes, *, trusted: bool = False, **options: object) -> Executable:
        """Loads ``Executable.serialize()`` output as an Executable of this device.

        A serialized executable is native code: only blobs sealed by this
        user's key are loaded (InvalidArgumentError otherwise) unless
        ``trusted`` says the bytes come from a source you trust. The plugin
        then checks the compat key (another build's bytes:
        FailedPreconditionError) and the digest over the rest (damaged or
        truncated bytes: InvalidArgumentError) before its vendor library sees
        any byte.
        """
        return self._deserialize(sealed.unseal(data, trusted=trusted), **options)

    def _deserialize(self, data: bytes | memoryview, **options: object) -> Executable:
        """The plugin's own bytes as an Executable (the caller authenticated them)."""
        copts = to_c_options(options)
        out = ffi.new("nxhal_executable_t**")
        check(
            self._api,
            lib.nxhal_call_executable_deserialize(
                self._api, self.handle, ffi.from_buffer(data), len(data), copts.array, copts.count, out
            ),
            self.plugin,
        )
        return Executable(self, out[0])

