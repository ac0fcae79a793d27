"""Executables for models with dynamic dims on devices that compile one shape
at a time (PJRT: XLA needs every dim): one program, compiled for each new
input shape on its first call, as ``jax.jit`` does, each compile kept by the
store. With ``shape_buckets`` a named dim is padded up to the next bucket and
the outputs that carry that dim are cut back, so a server bounds its compiles
by its buckets; on a device that runs dynamic shapes itself (OpenVINO) the
buckets pad the same way over its one executable, so every device computes
the same thing.

Padding is zeros at the end of the axis. It leaves a model's results unchanged
only where each position along the padded dim is computed on its own or the
model masks the padding (a batch dim; a sequence with an attention mask):
that is the server's knowledge, not something nx_hal can check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, final

from nx_hal.converter import Dim, PortShape
from nx_hal.errors import InvalidArgumentError
from nx_hal.executable import Executable, TensorSpec, map_runs

if TYPE_CHECKING:
    from nx_hal.buffer import Buffer
    from nx_hal.event import Event
    from nx_hal.held import HeldOn

__all__ = ["DynamicExecutable", "has_dynamic_dims"]

Shapes = tuple[tuple[int, ...], ...]


def has_dynamic_dims(ports: tuple[PortShape, ...]) -> bool:
    """Whether any of ``ports`` has a dim (or rank) not fixed by the model."""
    return any(dims is None or any(not isinstance(d, int) for d in dims) for _, dims in ports)


def _spec(name: str, port: PortShape) -> TensorSpec:
    dtype, dims = port
    return TensorSpec(name, dtype, None if dims is None else tuple(d if isinstance(d, int) else None for d in dims))


def _shape_of(value: object) -> tuple[int, ...]:
    shape = getattr(value, "shape", None)
    if shape is None:
        from nx_hal.dtypes import np

        shape = np.shape(value)  # type: ignore[call-overload]
    return tuple(int(n) for n in shape)


@final
class DynamicExecutable:
    """A model with dynamic dims on one device: ``exe(*inputs)`` compiles it
    for the inputs' shapes on the first call with those shapes (or the
    buckets they pad up to) and runs it; later calls with the same shapes
    run the executable made then.

    ``inputs`` and ``outputs`` are the model's, None where a dim is dynamic;
    ``shapes`` the input shapes compiled so far, in order; ``buckets`` the
    sizes each named dim pads up to. Thread-safe: two threads that meet a new
    shape at once compile it once.
    """

    def __init__(self, device: HeldOn, names: tuple[list[str], list[str]],
                 ports: tuple[tuple[PortShape, ...], tuple[PortShape, ...]],
                 buckets: Mapping[str, tuple[int, ...]] | None,
                 compile_for: Callable[[dict[str, list[int]]], Executable]) -> None:
        """``compile_for`` compiles the model for ``{input name: dims}``."""
        self.device = device
        self._dims: tuple[tuple[Dim, ...] | None, ...] = tuple(dims for _, dims in ports[0])
        self._out_dims: tuple[tuple[Dim, ...] | None, ...] = tuple(dims for _, dims in ports[1])
        self.inputs = tuple(_spec(n, p) for n, p in zip(names[0], ports[0], strict=True))
        self.outputs = tuple(_spec(n, p) for n, p in zip(names[1], ports[1], strict=True))
        self.buckets: dict[str, tuple[int, ...]] = dict(buckets or {})
        self._check_buckets()
        self._compile_for = compile_for
        self._compiled: dict[Shapes, Executable] = {}
        self._lock = threading.Lock()

    def _check_buckets(self) -> None:
        named = {d for dims in self._dims if dims is not None for d in dims if isinstance(d, str)}
        unknown = sorted(set(self.buckets) - named)
        if unknown:
            raise InvalidArgumentError(
                f"shape_buckets names {', '.join(map(repr, unknown))}, which no input's dims name; the model's "
                f"dynamic dims: {', '.join(map(repr, sorted(named))) or 'none with a name'}", plugin=self.device.plugin)
        # An output dim padded along with an input must be cut back: it has to
        # carry the input's name, or padding would reach the caller unseen.
        for spec, dims in zip(self.outputs, self._out_dims, strict=True):
            loose = dims is None or any(d is None or (isinstance(d, str) and d not in named) for d in dims)
            if self.buckets and loose:
                raise InvalidArgumentError(
                    f"shape_buckets: output '{spec.name}' has dims {'of unknown rank' if dims is None else _declared(dims)} "
                    "that the model does not tie to an input's, so padded results could not be cut back",
                    plugin=self.device.plugin)

    @property
    def shapes(self) -> list[dict[str, tuple[int, ...]]]:
        """The input shapes compiled so far, ``{input name: shape}`` each."""
        with self._lock:
            keys = list(self._compiled)
        return [{spec.name: shape for spec, shape in zip(self.inputs, key, strict=True)} for key in keys]

    @property
    def input_devices(self) -> tuple[HeldOn, ...]:
        """The device each input goes to: this executable's, for every input."""
        return (self.device,) * len(self.inputs)

    @property
    def output_devices(self) -> tuple[HeldOn, ...]:
        """The device each output is made on: this executable's, for every output."""
        return (self.device,) * len(self.outputs)

    @property
    def num_replicas(self) -> int:
        """Always 1: a dynamic executable runs on one device."""
        return 1

    def executable_for(self, *inputs: object) -> Executable:
        """The executable that runs ``inputs`` (compiled now if new)."""
        return self._executable(self._plan(inputs)[0])

    def __call__(self, *inputs: object) -> list[Buffer]:
        """Runs the model on ``inputs``; see the class."""
        compiled, sizes = self._plan(inputs)
        outs = self._executable(compiled)(*self._padded(inputs, compiled))
        return self._cut(outs, sizes)

    def run_async(self, *inputs: object) -> tuple[list[Buffer], Event]:
        """Starts a run; where buckets padded it, waits for it to cut the outputs."""
        compiled, sizes = self._plan(inputs)
        outs, event = self._executable(compiled).run_async(*self._padded(inputs, compiled))
        if not self._cuts(sizes):
            return outs, event
        event.wait()
        return self._cut(outs, sizes), event

    def map(self, inputs: Iterable[object], *, in_flight: int = 2) -> Generator[list[Buffer], None, None]:
        """``Executable.map``: each item runs on the executable compiled for
        its shapes (compiled on first sight, as a call would)."""
        return map_runs(self.run_async, inputs, in_flight, len(self.inputs), self.device.plugin)

    def serialize(self) -> bytes:
        """Refused: each shape has its executable; serialize one of those."""
        raise InvalidArgumentError("a dynamic executable is one executable per input shape: serialize "
                                   "exe.executable_for(*inputs) instead", plugin=self.device.plugin)

    def __repr__(self) -> str:
        return (f"DynamicExecutable(device={self.device.selector!r}, inputs={[s.name for s in self.inputs]}, "
                f"compiled={len(self._compiled)})")

    # -- shapes ---------------------------------------------------------------------------

    def _plan(self, inputs: tuple[object, ...]) -> tuple[Shapes, dict[str, int]]:
        """(the input shapes to compile for, each named dim's size in ``inputs``)."""
        plugin = self.device.plugin
        if len(inputs) != len(self.inputs):
            raise InvalidArgumentError(f"expected {len(self.inputs)} inputs "
                                       f"({', '.join(s.name for s in self.inputs)}), got {len(inputs)}", plugin=plugin)
        sizes: dict[str, int] = {}
        first: dict[str, str] = {}
        compiled = []
        for spec, dims, value in zip(self.inputs, self._dims, inputs, strict=True):
            shape = _shape_of(value)
            if dims is None:
                compiled.append(shape)
                continue
            if len(shape) != len(dims):
                raise InvalidArgumentError(f"input '{spec.name}' has shape {shape}; the model declares rank "
                                           f"{len(dims)} {_declared(dims)}", plugin=plugin)
            target = list(shape)
            for axis, (dim, n) in enumerate(zip(dims, shape, strict=True)):
                if isinstance(dim, int) and dim != n:
                    raise InvalidArgumentError(f"input '{spec.name}' has shape {shape}; the model declares "
                                               f"{_declared(dims)}", plugin=plugin)
                if isinstance(dim, str):
                    if sizes.setdefault(dim, n) != n:
                        raise InvalidArgumentError(
                            f"inputs '{first[dim]}' and '{spec.name}' disagree on dim '{dim}': {sizes[dim]} and {n}",
                            plugin=plugin)
                    first.setdefault(dim, spec.name)
                    target[axis] = self._bucket(dim, n)
            compiled.append(tuple(target))
        return tuple(compiled), sizes

    def _bucket(self, dim: str, n: int) -> int:
        sizes = self.buckets.get(dim)
        if sizes is None:
            return n
        for size in sizes:
            if n <= size:
                return size
        raise InvalidArgumentError(f"dim '{dim}' is {n}, over the largest of its shape_buckets {list(sizes)}",
                                   plugin=self.device.plugin)

    def _executable(self, shapes: Shapes) -> Executable:
        exe = self._compiled.get(shapes)
        if exe is not None:
            return exe
        with self._lock:
            exe = self._compiled.get(shapes)
            if exe is None:
                exe = self._compile_for({spec.name: list(s) for spec, s in zip(self.inputs, shapes, strict=True)})
                self._compiled[shapes] = exe
        return exe

    def _padded(self, inputs: tuple[object, ...], compiled: Shapes) -> list[object]:
        from nx_hal.dtypes import np

        out: list[object] = []
        for value, shape in zip(inputs, compiled, strict=True):
            have = _shape_of(value)
            if have == shape:
                out.append(value)
            else:
                out.append(np.pad(np.asarray(value), [(0, t - h) for h, t in zip(have, shape, strict=True)]))
        return out

    def _cuts(self, sizes: dict[str, int]) -> bool:
        return any(self._bucket(d, n) != n for d, n in sizes.items() if d in self.buckets)

    def _cut(self, outs: list[Buffer], sizes: dict[str, int]) -> list[Buffer]:
        """``outs`` with each padded named dim cut back to its size in the inputs."""
        if not self._cuts(sizes):
            return outs
        result = []
        for spec, dims, out in zip(self.outputs, self._out_dims, outs, strict=True):
            want = tuple(sizes[d] if isinstance(d, str) else d for d in dims or ())
            if out.shape == want:
                result.append(out)
                continue
            padded = tuple(self._bucket(d, sizes[d]) if isinstance(d, str) else d for d in dims or ())
            if out.shape != padded:
                raise InvalidArgumentError(
                    f"output '{spec.name}' has shape {out.shape} where the model declares {_declared(dims or ())} "
                    f"({padded} padded): cannot cut it back", plugin=self.device.plugin)
            host: Any = out.to_numpy()
            result.append(out.device.put(host[tuple(slice(0, n) for n in want)].copy()))
        return result


def _declared(dims: tuple[Dim, ...]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
