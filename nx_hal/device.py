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
from nx_hal.description import KIND_NAMES, DeviceDescription
from nx_hal.errors import InvalidArgumentError
from nx_hal.executable import Executable
from nx_hal.held import PluginOf
from nx_hal.native import NULL, address, check, ffi, lib
from nx_hal.options import to_c_options
from nx_hal.store import sealed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from nx_hal import programs
    from nx_hal.cache import CompileCache
    from nx_hal.converter import Converter
    from nx_hal.dynamic import DynamicExecutable
    from nx_hal.library import Client
else:
    # Imported on first use: listing devices needs neither numpy nor pydantic.
    from nx_hal.dtypes import np

    programs = LazyModule("nx_hal.programs")

__all__ = ["Device", "MemoryStats", "KIND_NAMES"]


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


class Link(PluginOf, Protocol):
    """What a device reads of its plugin in this process (nx_hal.plugin.PluginLink,
    which makes the device): every device's description, what compiles use,
    and the plugin's client, made on the first call that needs it."""

    @property
    def descriptions(self) -> tuple[DeviceDescription, ...]: ...

    @property
    def client_options(self) -> dict[str, Any]: ...

    @property
    def compile_cache(self) -> CompileCache | None: ...

    @property
    def converter(self) -> Converter: ...

    def client(self) -> Client: ...


@final
class Device:
    """One device of one plugin: makes buffers (``put``) and executables (``compile``).

    ``selector`` ("npu:cpu:0") names it exactly; ``kind``, ``name``,
    ``vendor``, ``memory_bytes``, ``compute_units``, ``formats`` (the program
    formats it compiles), ``compat_key`` and ``attributes`` are what its
    plugin reports (``description``).
    """

    __slots__ = ("link", "index", "description", "selector", "client", "handle", "_api", "_api_addr", "_tokens",
                 "__weakref__")

    def __init__(self, link: Link, index: int) -> None:
        """Device ``index`` of the plugin ``link`` reaches. Its client is made
        on the first call that needs one (``_live``), so that a device listed
        from a probe costs nothing here until it is used."""
        self.link = link
        self.index = index
        self.description = description = link.descriptions[index]
        same_kind = sum(1 for d in link.descriptions[:index] if d.kind == description.kind)
        self.selector = f"{link.name}:{description.kind}:{same_kind}"
        self.client: Client | None = None
        self.handle: Any = None
        self._api: Any = None  # set last by _live: a device with an _api has the rest
        self._api_addr = 0  # for nx_hal._fastpath
        self._tokens: list[contextvars.Token[Device | None]] = []

    def _live(self) -> Any:
        """The plugin's function table, after connecting this device to its
        client (made now if it was not); raises the plugin's error if it cannot."""
        client = self.link.client()
        self.handle = client.device_handles[self.index]
        self.client = client
        self._api_addr = address(client.library.api)
        self._api = client.library.api
        return self._api

    @property
    def kind(self) -> str:
        """"cpu", "gpu", "tpu", "npu", "ipu" or "other"."""
        return self.description.kind

    @property
    def name(self) -> str:
        """The device's name, as its plugin gives it."""
        return self.description.name

    @property
    def vendor(self) -> str:
        """Who makes the device."""
        return self.description.vendor

    @property
    def memory_bytes(self) -> int:
        """Its memory in bytes (0: not known)."""
        return self.description.memory_bytes

    @property
    def compute_units(self) -> int:
        """Its cores, tiles or units, as its plugin counts them (0: not known)."""
        return self.description.compute_units

    @property
    def formats(self) -> tuple[str, ...]:
        """The program formats its plugin compiles natively."""
        return self.description.formats

    @property
    def compat_key(self) -> str:
        """Executables serialized on a device with another key do not load here."""
        return self.description.compat_key

    @property
    def attributes(self) -> dict[str, object]:
        """The plugin's further facts about the device."""
        return self.description.attributes

    @property
    def plugin(self) -> str:
        """The name of the plugin that offers this device ("tpu", "npu", ...)."""
        return self.link.name

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
        api = self._api or self._live()
        out = ffi.new(_STATS_OUT)
        status = lib.nxhal_py_memory_stats(api, self.handle, out)
        if status != NULL:
            check(api, status, self.plugin)
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
        api = self._api or self._live()
        check(api, lib.nxhal_call_device_set_memory_limit(api, self.handle, value), self.plugin)

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
        api = self._api or self._live()
        result = ffi.new(_BUFFER_OUT)
        status = lib.nxhal_py_buffer_from_host(
            api, self.handle, code, len(shape), _dims(shape), ffi.from_buffer(host), host.nbytes,
            lib.NXHAL_HOST_ZERO_COPY if zero_copy else lib.NXHAL_HOST_COPY, result,
        )
        if status != NULL:
            check(api, status, self.plugin)
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
        api = self._api or self._live()
        out = ffi.new(_BUFFER_OUT)
        status = lib.nxhal_py_buffer_from_host(
            api, self.handle, code, len(shape), _dims(shape), ffi.from_buffer(host), host.nbytes, flags, out
        )
        if status != NULL:
            check(api, status, self.plugin)
        return int(out[0])

    def compile(
        self,
        program: bytes | str | PathLike[str] | Any,
        format: str | None = None,
        *,
        cache: bool = True,
        **options: object,
    ) -> Executable | DynamicExecutable:
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
        StableHLO is written again for the backend's version;
        ``shape_buckets`` ({dim name: [sizes]}) the sizes a model's named
        dynamic dims pad up to; ``donate_argnums`` (positions or input
        names, as ``jax.jit`` takes them) the inputs whose memory an output
        of the same type may take, where the device donates (attribute
        ``donation`` "in place"; elsewhere a warning, and the inputs stay
        valid): a donated Buffer is gone after the call. An ONNX model with dynamic dims on a device
        that compiles one shape at a time (PJRT), with no ``input_shapes``,
        or any model given ``shape_buckets``, is a DynamicExecutable: it
        compiles per input shape on first call (nx_hal.dynamic). The stages
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
        api = self._api or self._live()
        check(
            api,
            lib.nxhal_call_executable_compile(api, self.handle, cprog, copts.array, copts.count, out),
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
            return self.link.converter.available()
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
        mine = sealed.checked(data)
        if mine is not None:
            return self._deserialize(mine, authenticated=True, options=options)
        return self._deserialize(sealed.unseal(data, trusted=trusted), options=options)

    def _deserialize(self, data: bytes | memoryview, *, authenticated: bool = False,
                     options: dict[str, object] | None = None) -> Executable:
        """The plugin's bytes as an Executable. ``authenticated``: this
        user's nx_hal made them (the store's or the seal's HMAC checked), so
        a plugin that can skips its own digest of them (the device's
        ``authenticated_load`` attribute; nx_hal.h, executable_deserialize)."""
        options = dict(options or {})
        if authenticated and self.attributes.get("authenticated_load") is True:
            options["authenticated"] = True
        copts = to_c_options(options)
        out = ffi.new("nxhal_executable_t**")
        api = self._api or self._live()
        check(
            api,
            lib.nxhal_call_executable_deserialize(
                api, self.handle, ffi.from_buffer(data), len(data), copts.array, copts.count, out
            ),
            self.plugin,
        )
        return Executable(self, out[0])

