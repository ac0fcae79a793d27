"""Executables: compiled programs and their inputs and outputs."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from nx_hal import dtypes
from nx_hal._fastpath import MAX_IO, ExecutableBase
from nx_hal._warnings import warn_at_caller
from nx_hal.buffer import Buffer, Layout, layout
from nx_hal.errors import InvalidArgumentError, NxHalError
from nx_hal.event import Event
from nx_hal.index_checks import IndexCheck
from nx_hal.native import NULL, address, check, ffi, lib, text
from nx_hal.store import sealed

if TYPE_CHECKING:
    import numpy as np

    from nx_hal.held import HeldOn
else:
    from nx_hal.dtypes import np  # imported on first use

__all__ = ["Executable", "TensorSpec", "map_runs"]

_execute = lib.nxhal_call_executable_execute
_c_call = ExecutableBase.__call__


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of an executable: its name, dtype name and shape.

    ``shape`` has None for a dynamic dim, and is None when even the rank is
    unknown. ``device_index`` is the index
    of the device (in its plugin's list) an input must be on or an output is
    made on, for executables that span several devices (replicas); -1: the
    executable's own device.
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None
    device_index: int = -1

    def to_dict(self) -> dict[str, object]:
        """The spec as JSON-ready data (``device_index`` only when set)."""
        out: dict[str, object] = {"name": self.name, "dtype": self.dtype,
                                  "shape": None if self.shape is None else list(self.shape)}
        if self.device_index >= 0:
            out["device_index"] = self.device_index
        return out


def _io_specs(api: Any, handle: Any, kind: int, plugin: str) -> tuple[TensorSpec, ...]:
    count = ffi.new("size_t*")
    check(api, lib.nxhal_call_executable_io_count(api, handle, kind, count), plugin)
    info = ffi.new("nxhal_io_info_t*")
    specs = []
    for index in range(count[0]):
        info.struct_size = ffi.sizeof("nxhal_io_info_t")
        info.device_index = -1  # what a 1.0 plugin, which never writes it, means
        check(api, lib.nxhal_call_executable_io_info(api, handle, kind, index, info), plugin)
        desc = info.desc
        shape = None if desc.rank < 0 else tuple(
            None if desc.dims[i] < 0 else int(desc.dims[i]) for i in range(desc.rank)
        )
        specs.append(TensorSpec(text(info.name), dtypes.name_of(desc.dtype), shape, int(info.device_index)))
    return tuple(specs)


Run = tuple[list[Buffer], Event]


def map_runs(start: Callable[..., Run], items: Iterable[object], in_flight: int, num_inputs: int,
             plugin: str | None) -> Generator[list[Buffer], None, None]:
    """``Executable.map``'s loop over ``start`` (a ``run_async``): checks
    ``in_flight`` now, then returns the generator of results in order."""
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise InvalidArgumentError(f"in_flight must be an int of at least 1, got {in_flight!r}", plugin=plugin)
    return _in_order(start, items, in_flight, num_inputs)


def _as_inputs(item: object, num_inputs: int) -> tuple[object, ...]:
    """A tuple is one run's inputs; for a one-input program anything else is
    its input (a list may be that input's data), for others a list is too."""
    if isinstance(item, tuple):
        return item
    if num_inputs != 1 and isinstance(item, list):
        return tuple(item)
    return (item,)


def _in_order(start: Callable[..., Run], items: Iterable[object], in_flight: int,
              num_inputs: int) -> Generator[list[Buffer], None, None]:
    """Keeps up to ``in_flight`` runs started, yielding each run's outputs
    once it and every earlier one are done. A run that cannot start raises
    at its item, after the items before it; the ``finally`` waits for every
    run still going (also when the caller stops early), so no run writes
    into outputs nobody holds."""
    pending: deque[Run] = deque()
    try:
        for index, item in enumerate(items):
            if len(pending) >= in_flight:
                yield _done(pending.popleft())
            try:
                pending.append(start(*_as_inputs(item, num_inputs)))
            except NxHalError as exc:
                while pending:
                    yield _done(pending.popleft())
                raise type(exc)(f"map: item {index}: {exc.message}", plugin=exc.plugin) from exc
            while pending and pending[0][1].ready():  # done early: no need to wait for a full window
                yield _done(pending.popleft())
        while pending:
            yield _done(pending.popleft())
    finally:
        _drain(pending)


def _done(run: Run) -> list[Buffer]:
    outputs, event = run
    event.wait()  # raises the run's own error at its item
    return outputs


def _drain(pending: deque[Run]) -> None:
    """Waits for runs nobody will read; their errors have no item to raise at."""
    while pending:
        try:
            pending.popleft()[1].wait()
        except NxHalError:
            pass


@final
class Executable(ExecutableBase):
    """A program compiled for one device; call it with Buffers or numpy arrays.

    ``exe(*inputs)`` runs it once and returns its outputs as Buffers, after
    the run is complete. Host arrays given as inputs are read where they
    are, without a copy, where the plugin can alias them: the call returns
    only after the plugin is done reading them.

    ``exe(*inputs)`` with Buffers of its device, and numpy arrays that are
    C-contiguous with exactly the input's dtype and static shape, runs in
    the C base (nx_hal/_fastpath.c): the handles go straight to the plugin
    and the outputs come back as Buffers without a Python frame. Anything
    else -- other arrays (converted, or refused with the input's name),
    buffers of another device, a wrong count, bf16, outputs whose shape is
    only known at run time -- comes to ``_call_slow``.

    An executable compiled with several replicas (``num_replicas`` on the tpu
    plugin) takes every replica's inputs, replica after replica, each on its
    replica's device (``input_devices``; host arrays are put there), and
    returns every replica's outputs the same way.
    """

    __slots__ = ("inputs", "outputs", "input_devices", "output_devices", "_known_outputs", "_io_array",
                 "_index_checks", "_signature", "_renamed")

    def __init__(self, device: HeldOn, handle: Any) -> None:
        """Takes ownership of ``handle`` (freed with the Executable, also when
        reading its signature fails).
        """
        api = device._api
        self._adopt(device, device._api_addr, address(handle))
        self._cdata = handle
        self.inputs = _io_specs(api, handle, lib.NXHAL_IO_INPUT, device.plugin)
        self.outputs = _io_specs(api, handle, lib.NXHAL_IO_OUTPUT, device.plugin)
        # Static outputs need no buffer_info call per run: the ABI says their
        # buffers have exactly the described dtype and shape.
        self._known_outputs: list[Layout | None] = [
            layout(tuple(s.shape), dtypes.DTYPE_NAMES_REVERSE[s.dtype])  # type: ignore[arg-type]
            if s.shape is not None and None not in s.shape and s.dtype in dtypes.DTYPE_NAMES_REVERSE
            else None
            for s in self.outputs
        ]
        n_in, n_out = len(self.inputs), len(self.outputs)
        static = tuple(k for k in self._known_outputs if k is not None)
        # One array for input and output handles: inputs first, outputs after.
        self._io_array = ffi.typeof(f"nxhal_buffer_t*[{max(n_in + n_out, 1)}]")
        link = device.link
        count = len(link.descriptions)

        def where(spec: TensorSpec) -> HeldOn:
            if spec.device_index == device.index or not 0 <= spec.device_index < count:
                return device
            sibling = link.device(spec.device_index)
            if sibling._api is None:  # listed from the probe, not used yet: its buffers need its handle
                sibling._live()
            return sibling

        self.input_devices: tuple[HeldOn, ...] = tuple(where(s) for s in self.inputs)
        self.output_devices: tuple[HeldOn, ...] = tuple(where(s) for s in self.outputs)
        spans = any(d is not device for d in self.input_devices + self.output_devices)
        # Host arrays of exactly an input's dtype and static shape are put in
        # C (on one device only): each input's (dtype code, shape), 0 for a
        # dtype nx_hal does not know.
        self._signature = (n_in, n_out, static if len(static) == n_out else None,
                           self.input_devices if spans else None, self.output_devices if spans else None,
                           address(device.handle),
                           None if spans else tuple((dtypes.DTYPE_NAMES_REVERSE.get(s.dtype, 0), s.shape)
                                                    for s in self.inputs))
        self._set_signature(*self._signature)
        self._index_checks: tuple[tuple[IndexCheck, tuple[int, ...]], ...] = ()
        self._renamed: tuple[tuple[str, str], ...] = ()  # ("'arg0'", "'image'"): see rename

    def check_inputs(self, checks: Sequence[IndexCheck]) -> None:
        """Has every run check ``checks`` on the host first: indices that an
        input feeds to a Gather-family node, refused when out of range
        (InvalidArgumentError naming the input, the node and the index, as
        onnxruntime refuses them) where backends would give zeros or clamp.
        Only such an executable pays for it: its runs take ``_call_slow``
        (tens of microseconds more), reading Buffers given as those inputs
        back to the host; every other executable keeps the C path, and
        ``check_inputs(())`` gives it back (indices you know are in range)."""
        names = [s.name for s in self.inputs]
        lost = sorted({c.input for c in checks if c.input not in names})
        if lost:  # the program's inputs were not named after the model's: nothing to check against
            warn_at_caller(f"nx_hal: the range of indices in input(s) {', '.join(lost)} cannot be checked before "
                           "each run (the executable's inputs have other names)", RuntimeWarning)
        # Each check with the input's position in each replica's inputs.
        self._index_checks = tuple((c, tuple(i for i, n in enumerate(names) if n == c.input))
                                   for c in checks if c.input in names)
        if self._index_checks:
            # Without output layouts the C path hands every call to _call_slow.
            self._set_signature(len(self.inputs), len(self.outputs), None, None, None,
                                address(self.device.handle), None)
        else:
            self._set_signature(*self._signature)

    def _check_indices(self, inputs: tuple[object, ...]) -> None:
        if len(inputs) != len(self.inputs):
            return  # the run itself says what is wrong
        for rule, positions in self._index_checks:
            for replica, at in enumerate(positions):
                value = inputs[at]
                host = value.to_numpy() if isinstance(value, Buffer) else np.asarray(value)
                if host.dtype.kind not in "iu":
                    continue  # not indices: the run refuses the dtype
                problem = rule.violation(host, functools.partial(self._input_shape, inputs, replica=replica))
                if problem is not None:
                    raise InvalidArgumentError(problem, plugin=self.device.plugin)

    def _input_shape(self, inputs: tuple[object, ...], name: str, replica: int) -> tuple[int, ...] | None:
        """The shape of input ``name`` of ``replica`` in this run (a bound read at run time)."""
        found = [i for i, s in enumerate(self.inputs) if s.name == name]
        if replica >= len(found):
            return None
        x = inputs[found[replica]]
        return x.shape if isinstance(x, Buffer) else tuple(np.asarray(x).shape)

    @property
    def num_replicas(self) -> int:
        """How many replicas one call runs (1 unless compiled with several)."""
        return max(len(set(map(id, self.output_devices + self.input_devices))), 1)

    @property
    def handle(self) -> Any:
        """The plugin's handle as a cffi pointer."""
        return self._cdata

    def rename(self, inputs: list[str], outputs: list[str]) -> None:
        """Gives inputs and outputs the names of the program they came from.

        Names are kept as they are when the counts differ.
        """
        from dataclasses import replace

        renamed = []
        if len(inputs) == len(self.inputs):
            renamed += [(s.name, n) for s, n in zip(self.inputs, inputs, strict=False) if s.name != n]
            self.inputs = tuple(replace(s, name=n) for s, n in zip(self.inputs, inputs, strict=False))
        if len(outputs) == len(self.outputs):
            renamed += [(s.name, n) for s, n in zip(self.outputs, outputs, strict=False) if s.name != n]
            self.outputs = tuple(replace(s, name=n) for s, n in zip(self.outputs, outputs, strict=False))
        # The plugin's errors at run time quote its own names ("input 0
        # ('arg0') expects f32[1,64]"): they are given the program's, quoted
        # as the plugin quotes them, so a prefix ('arg1' of 'arg10') never matches.
        self._renamed = tuple((f"'{old}'", f"'{new}'") for old, new in renamed)

    def __repr__(self) -> str:
        """Inputs, outputs and the selector of its device."""
        return (f"Executable(inputs={list(self.inputs)}, outputs={list(self.outputs)}, "
                f"device={self.device.selector})")

    def _input_handles(self, inputs: tuple[object, ...], alias: bool = False) -> tuple[Any, list[Buffer]]:
        """The handle array (inputs, then room for the outputs) for ``inputs``,
        and the buffers made for host arrays, which must live through the run
        (aliasing the arrays with ``alias``: only for synchronous runs).
        """
        n = len(inputs)
        if n != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs)
            raise InvalidArgumentError(
                f"expected {len(self.inputs)} inputs ({names}), got {n}", plugin=self.device.plugin
            )
        handles = ffi.new(self._io_array)
        made: list[Buffer] = []
        for i, (x, device) in enumerate(zip(inputs, self.input_devices, strict=False)):
            if type(x) is Buffer and x.device is device:
                handles[i] = x.handle
            else:  # host data, or a buffer of another device (through the host)
                buf = device._put_alias(x) if alias else device.put(np.asarray(x))
                made.append(buf)
                handles[i] = buf.handle
        return handles, made

    def _wrap_outputs(self, outs: Any) -> list[Buffer]:
        known = Buffer._known
        return [Buffer(device, outs[i]) if k is None else known(device, outs[i], k)
                for i, (k, device) in enumerate(zip(self._known_outputs, self.output_devices, strict=False))]

    def _call_slow(self, inputs: tuple[object, ...]) -> list[Buffer]:
        """Inputs that are host arrays or on another device, or a wrong count;
        or outputs of a shape known only at run time; or indices to check.
        """
        if self._index_checks:
            self._check_indices(inputs)
        devices = self.input_devices
        if (self._layouts is not None and len(inputs) == len(devices) and len(inputs) <= MAX_IO
                and len(self.outputs) <= MAX_IO):
            # Host data becomes buffers of the right devices, and the run
            # itself takes the C path (which, given exactly those, never
            # comes back here). Arrays that already match their input were
            # put by the C path itself; these are the ones converted here
            # (another dtype, byte order or layout, non-numpy data), the
            # buffers of another device, and every input of an executable
            # that spans several devices.
            #
            # Host arrays are aliased, not copied, where the plugin can
            # (NXHAL_HOST_ZERO_COPY): safe because this run is synchronous,
            # as the comment on executable_call in nx_hal/_fastpath.c says
            # (outputs never alias inputs; nothing reads an array after the
            # call). The buffers made here die with the call. run_async,
            # which returns before the run is done, copies.
            return _c_call(self, *[
                x if type(x) is Buffer and x.device is device else device._put_alias(x)
                for x, device in zip(inputs, devices, strict=False)
            ])
        handles, made = self._input_handles(inputs, alias=True)
        n_in = len(inputs)
        outs = handles + n_in
        api = self.device._api
        status = _execute(api, self.handle, handles, n_in, outs, len(self.outputs), NULL)
        if status != NULL:
            self._check_run(api, status)
        return self._wrap_outputs(outs)

    def _raise_status(self, address: int) -> None:
        """Raises the error of a failed fast-path run (and frees its status)."""
        self._check_run(self.device._api, ffi.cast("nxhal_status_t*", address))

    def _check_run(self, api: Any, status: Any) -> None:
        """``check`` for a run's status, its message naming inputs and outputs
        as the program does (``rename``). Only on the error path."""
        try:
            check(api, status, self.device.plugin)
        except NxHalError as exc:
            message = exc.message
            for old, new in self._renamed:
                message = message.replace(old, new)
            if message == exc.message:
                raise
            raise type(exc)(message, plugin=exc.plugin) from None

    def run_async(self, *inputs: object) -> tuple[list[Buffer], Event]:
        """Starts a run; the outputs hold results once the event completes.

        Host arrays are copied before it returns (the run may read its
        inputs after that), so they may change at once.
        """
        if self._index_checks:
            self._check_indices(inputs)
        handles, made = self._input_handles(inputs)
        n_out = len(self.outputs)
        outs = handles + len(inputs)
        event = ffi.new("nxhal_event_t**")
        api = self.device._api
        self._check_run(api, lib.nxhal_call_executable_execute(api, self.handle, handles, len(inputs), outs, n_out,
                                                                event))
        # Inputs and the handle array must outlive the run; so must the
        # outputs, which the run writes until the event completes: a caller
        # that drops them early must not have them freed under the run
        # (the ABI makes destroying a buffer in use the caller's fault).
        outputs = self._wrap_outputs(outs)
        keep = (made, [x for x in inputs if isinstance(x, Buffer)], self, handles, outputs)
        return outputs, Event(api, event[0], self.device.plugin, keep=keep)

    def map(self, inputs: Iterable[object], *, in_flight: int = 2) -> Generator[list[Buffer], None, None]:
        """Runs every item of ``inputs`` (a tuple of inputs, or one input for
        a one-input program), keeping up to ``in_flight`` runs going at once
        through ``run_async``, and yields each item's outputs in input order,
        as soon as it and the items before it are done.

        Throughput rather than latency: OpenVINO (with ``performance=
        "throughput"``) and PJRT run requests in flight side by side. A
        plugin with a bounded pool of requests (npu: OpenVINO's optimal
        number, 4 to 32) makes ``run_async`` wait past it, so a larger
        ``in_flight`` only queues. ``in_flight`` not an int of at least 1
        is InvalidArgumentError, raised at the call; an item whose run fails
        raises at that item (naming its index), and the runs after it are
        waited for, not leaked.
        """
        return map_runs(self.run_async, inputs, in_flight, len(self.inputs), self.device.plugin)

    def serialize(self) -> bytes:
        """Bytes for ``Device.load_executable``: the plugin's (tagged with
        the device's compat key), sealed with this user's key (nx_hal.store.sealed)."""
        return sealed.seal(self._serialize())

    def _serialize(self) -> bytes:
        """The plugin's own bytes, unsealed (the store authenticates its entries)."""
        api = self.device._api
        blob = ffi.new("nxhal_blob_t**")
        check(api, lib.nxhal_call_executable_serialize(api, self.handle, blob), self.device.plugin)
        try:
            return bytes(ffi.buffer(blob[0].data, blob[0].size))
        finally:
            lib.nxhal_call_blob_free(api, blob[0])
