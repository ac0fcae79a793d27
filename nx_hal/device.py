"""Devices: what a plugin offers, and the entry point for buffers and programs."""

from __future__ import annotations

import contextvars
import operator
from os import PathLike
from typing import TYPE_CHECKING, Any, Final, NamedTuple, final

from nx_hal import dtypes
from nx_hal._lazy import LazyModule
from nx_hal.buffer import Buffer, Layout, layout
from nx_hal.converter import check_input_shapes, target_version_of
from nx_hal.errors import InvalidArgumentError, InvalidProgramError
from nx_hal.executable import Executable
from nx_hal.native import NULL, address, check, ffi, lib, text
from nx_hal.options import from_c_value, to_c_options

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from nx_hal import programs
    from nx_hal.library import Client
    from nx_hal.plugin import PluginRecord
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
        the same program, options and compat key is loaded instead.
        StableHLO from the user is parsed and verified in a child first
        (nx_hal.onnx.verify); programs the vendor reads natively (ONNX on the npu
        plugin) are compiled first in a child (nx_hal.sandbox), so a program
        that crashes or hangs the vendor's compiler is an error, not the end
        of this process. The core option ``verify="require"`` refuses
        programs that cannot be checked so instead of passing them on
        unchecked; ``verify="off"`` skips the checks (trusted programs);
        ``verify_timeout`` (seconds) bounds the child's compile.
        """
        # A core option, not the plugin's: fixes dynamic dims where ONNX is
        # converted (devices that read ONNX natively take dynamic shapes).
        input_shapes = options.pop("input_shapes", None)
        if input_shapes is not None:
            # Checked on every device, including those that read ONNX
            # natively and never use it, so a bad value never passes silently.
            input_shapes = check_input_shapes(input_shapes, plugin=self.plugin)
        # Also the core's: whether StableHLO is written again for the
        # backend's own StableHLO version (see _compile_stablehlo).
        reserialize = options.pop("reserialize", "auto")
        if reserialize not in ("auto", "always", "never"):
            raise InvalidArgumentError(
                f"option 'reserialize': expected 'auto', 'always' or 'never', got {reserialize!r}",
                plugin=self.plugin,
            )
        # And the core's: whether StableHLO from the user must be verified
        # (see _verified) or may pass unverified where it cannot be.
        verify = options.pop("verify", "auto")
        if verify not in ("auto", "require", "off"):
            raise InvalidArgumentError(
                f"option 'verify': expected 'auto', 'require' or 'off', got {verify!r}", plugin=self.plugin
            )
        verify_timeout = options.pop("verify_timeout", None)
        if verify_timeout is not None and (isinstance(verify_timeout, bool)
                                           or not isinstance(verify_timeout, (int, float))
                                           or not 0 < verify_timeout < float("inf")):
            raise InvalidArgumentError(
                f"option 'verify_timeout': expected a number of seconds > 0, got {verify_timeout!r}",
                plugin=self.plugin,
            )
        accepted = self.formats + (("onnx",) if self._converts_onnx() else ())
        prog = programs.load(program, format, accepted)
        converted = False
        # ONNX names its inputs and outputs; a converted module calls them
        # arg0..., and an SDK may report a tensor's other name (OpenVINO gives
        # an input that feeds an Identity the output's name): users feed by
        # the model's names, so the executable carries those.
        onnx_names = self.record.converter.io_names(prog.data) if prog.format == "onnx" else None
        if prog.format not in self.formats:
            if prog.format == "onnx" and self._converts_onnx():
                prog = self._convert_onnx(prog, input_shapes, cache)
                reserialize = "never"  # already written for this backend's version
                converted = True  # written by torch-mlir, not the user
            else:
                raise InvalidArgumentError(
                    f"device {self.selector} does not accept '{prog.format}' programs "
                    f"(accepts: {', '.join(accepted) or 'none'})",
                    plugin=self.plugin,
                )
        model = self.record.spec.compile_options_model if self.record.spec else None
        if model is not None and options:
            options = programs.validate_options(model, options, self.plugin)
        store = self.record.compile_cache if cache else None
        # An entry is bound to its key and to the program and options it was
        # compiled from; one that fails either, or fails to load, is a miss.
        key = store.key(self, prog, options) if store is not None else ""
        bound = store.program_digest(prog, options) if store is not None else b""
        exe = store.load(self, key, bound) if store is not None else None
        if exe is None:
            if prog.format == "stablehlo":
                if not converted and verify != "off":
                    self._verified(prog, str(verify))
                exe = self._compile_stablehlo(prog, options, str(reserialize))
            else:
                # Formats a vendor reads natively: compiled first in a child
                # (nx_hal.sandbox), since their parsers crash on damaged input.
                from nx_hal import sandbox

                exe = sandbox.compile(self, prog, options, policy=str(verify),
                                      timeout=float(verify_timeout or sandbox.DEFAULT_TIMEOUT))
            if store is not None:
                store.store(key, bound, exe)
        if onnx_names is not None:
            exe.rename(*onnx_names)
        return exe

    def _compile_stablehlo(self, prog: programs.Program, options: dict[str, object], policy: str) -> Executable:
        """StableHLO for a backend that states its StableHLO version. A
        portable artifact newer than that version is written again for it
        (its deserializer is only guaranteed to read its own version and
        older); text the backend fails to parse is retried that way, since
        text printed by a newer StableHLO may use syntax the backend's parser
        predates. "always" rewrites every module; "never" passes it as is.
        Rewriting needs torch-mlir (nx-hal[onnx]); without it the module is
        passed as is and a failure says what would have helped.
        """
        converter = self.record.converter
        target = target_version_of(self)
        if target is None or policy == "never":
            return self._compile(prog, options)
        source = programs.stablehlo_artifact_version(prog.data)
        newer = source is not None and programs.version_tuple(source) > programs.version_tuple(target)
        if policy == "always" or (newer and converter.available() is None):
            return self._compile(self._reserialized(prog, target), options)
        try:
            return self._compile(prog, options)
        except InvalidArgumentError as first:
            # The error keeps its class (InvalidProgramError stays one) and
            # gains what nx_hal tried or would have needed.
            if newer:  # and no torch-mlir to write it again
                raise type(first)(
                    f"{first.message} (the program is a StableHLO {source} artifact and the backend reads "
                    f"StableHLO {target}; with torch-mlir installed (pip install 'nx-hal[onnx]') nx_hal "
                    "writes it again for the backend's version)",
                    plugin=self.plugin,
                ) from first
            # Only a program the backend could not parse (the plugin's
            # INVALID_PROGRAM: text may be too new for its parser); other
            # errors (a bad option, too many replicas) would fail the same again.
            if (source is not None or not isinstance(first, InvalidProgramError)
                    or converter.available() is not None):
                raise
            # Whatever else goes wrong, the error on the program as given
            # leads: the plugin's own checks (a missing @main) speak of it.
            try:
                return self._compile(self._reserialized(prog, target), options)
            except InvalidArgumentError as exc:
                raise type(first)(
                    f"{first.message} (written again as a StableHLO {target} artifact through "
                    f"torch-mlir, it failed too: {exc.message})",
                    plugin=self.plugin,
                ) from first

    def _verified(self, prog: programs.Program, policy: str) -> None:
        """StableHLO from the user is parsed and verified by torch-mlir in a
        child before the plugin's parser sees it (vendor parsers crash on
        damaged bytecode); a bad program is InvalidArgumentError naming what
        failed. Verdicts are cached by digest, in memory and next to the
        compile cache. Without torch-mlir, "auto" passes the program through
        (warning once) and "require" refuses it (nx_hal.onnx.verify).
        """
        store = self.record.compile_cache
        self.record.converter.check_stablehlo(prog.data, policy=policy, plugin=self.plugin,
                                              cache_dir=store.directory.parent if store is not None else None)

    def _reserialized(self, prog: programs.Program, target: str) -> programs.Program:
        module = self.record.converter.reserialize(prog.data, target, plugin=self.plugin)
        return programs.Program("stablehlo", module)

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

    def _converts_onnx(self) -> bool:
        return "stablehlo" in self.formats and "onnx" not in self.formats

    def accepts(self, format: str) -> str | None:
        """Says why ``compile`` does not take ``format``, or None where it does.

        None if ``compile`` takes programs in ``format`` (natively or through
        the core's ONNX → StableHLO converter), else why not.
        """
        if format in self.formats:
            return None
        if format == "onnx" and self._converts_onnx():
            return self.record.converter.available()
        return f"accepts {', '.join(self.formats) or 'no formats'}, not '{format}'"

    def _convert_onnx(self, prog: programs.Program, shapes: object, cache: bool) -> programs.Program:
        """ONNX → StableHLO for a PJRT device, by the converter its record was given."""
        store = self.record.compile_cache if cache else None
        module = self.record.converter.to_stablehlo(
            prog.data,
            input_shapes=check_input_shapes(shapes, plugin=self.plugin),
            target_version=target_version_of(self),
            cache_dir=store.directory.parent / "stablehlo" if store is not None else None,
            use_cache=store is not None,
            platform=self.kind,
        )
        return programs.Program("stablehlo", module)

    def load_executable(self, data: bytes, **options: object) -> Executable:
        """Loads ``Executable.serialize()`` output as an Executable of this device.

        The plugin checks the compat key (another build's bytes:
        FailedPreconditionError) and the digest over the rest (damaged or
        truncated bytes: InvalidArgumentError) before its vendor library sees
        any byte.
        """
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

