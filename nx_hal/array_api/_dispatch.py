"""Runs an operation on a device: its graph is built once per operation,
static arguments, input dtypes and shapes and device, written for the
device's format, compiled, kept, and then called on the buffers already on
the device through the executable's C fast path.

A function being traced by ``jit`` gets the operation's nodes added to its
graph instead (the inputs are then symbols, not buffers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nx_hal.array_api import _stablehlo
from nx_hal.array_api._array import Array, traced
from nx_hal.array_api._graph import Graph, Sym
from nx_hal.errors import NxHalError
from nx_hal.executable import Executable
from nx_hal.programs import Program

if TYPE_CHECKING:
    from nx_hal.device import Device

__all__ = ["apply", "compile_graph", "OperationError", "stats"]

Impl = Callable[..., "Sym | tuple[Sym, ...]"]
_lock = threading.Lock()
Types = tuple[tuple[np.dtype[Any], tuple[int, ...]], ...]
# (impl, static, device, dtype/shape of each input) -> (executable or None where
# every output is empty, output dtypes and shapes, the inputs it takes or None for all)
_cache: dict[tuple[Any, ...], tuple[Executable | None, Types, tuple[int, ...] | None]] = {}
stats = {"compiles": 0, "compile_seconds": 0.0}
MAX_PROGRAMS = 4096  # executables kept in memory, over every device


class OperationError(NxHalError):
    """An operation the device could not compile or run; names both, and a device that can.

    Its code is UNIMPLEMENTED.
    """

    code = "UNIMPLEMENTED"


def _name(impl: Impl) -> str:
    return getattr(impl, "__name__", "operation").lstrip("_")


def compile_graph(graph: Graph, device: Device, what: str, disk_cache: bool = False) -> Executable:
    """The graph compiled for ``device`` (StableHLO for PJRT devices, ONNX otherwise).

    ``disk_cache``: also through the on-disk compile cache. Off for single
    operations: they compile in milliseconds, and thousands of shapes would
    crowd out the models the cache is for (and make each store's eviction
    scan longer); on for ``jit`` programs.
    """
    import time

    if "stablehlo" in device.formats:
        program = Program("stablehlo", _stablehlo.write(graph))
    elif "onnx" in device.formats:
        if any(node.dtype.startswith("complex") for node in graph.nodes):
            raise OperationError(f"{what}: complex arrays are computed only on PJRT devices (StableHLO has complex "
                                 f"types); {device.selector} runs ONNX through OpenVINO, which has none. Move the "
                                 "arrays with to_device('tpu') or compute on their real and imaginary parts",
                                 plugin=device.plugin)
        try:
            from nx_hal.array_api import _onnx
        except ImportError as exc:  # onnx is an extra: a PJRT-only install does without it
            raise OperationError(f"{what} on {device.selector} is written as ONNX, which needs the onnx package "
                                 f"(pip install 'nx-hal[array-api]'): {exc}", plugin=device.plugin) from exc
        try:
            program = Program("onnx", _onnx.write(graph))
        except _onnx.Unsupported as exc:
            raise OperationError(f"{what} cannot run on {device.selector}: {exc} (a PJRT device such as "
                                 "tpu:cpu can)", plugin=device.plugin) from None
    else:
        raise OperationError(f"{what}: {device.selector} compiles neither StableHLO nor ONNX "
                             f"(formats: {', '.join(device.formats) or 'none'})", plugin=device.plugin)
    start = time.perf_counter()
    try:
        # Our own programs: nothing to verify, compiled in this process.
        exe = device.compile(program.data, program.format, cache=disk_cache, verify="off", reserialize="never")
    except NxHalError as exc:
        other = "tpu:cpu" if device.plugin != "tpu" else "npu:cpu"
        raise OperationError(f"{what} cannot run on {device.selector}: {exc.message} "
                             f"(try the operation on another device, e.g. {other})", plugin=device.plugin) from exc
    stats["compiles"] += 1
    stats["compile_seconds"] += time.perf_counter() - start
    # StableHLO of fixed shapes: one executable, never a per-shape one (nx_hal.dynamic).
    assert isinstance(exe, Executable)
    return exe


def _build(impl: Impl, static: tuple[Any, ...], arrays: Sequence[Array], device: Device,
           key: tuple[Any, ...]) -> tuple[Executable | None, Types, tuple[int, ...] | None]:
    graph = Graph()
    params = [graph.param(a._dtype.name, a._shape) for a in arrays]
    result = impl(graph, *params, *static)
    outs = result if isinstance(result, tuple) else (result,)
    graph.outputs = [s.id for s in outs]
    types = tuple((np.dtype(s.dtype), s.shape) for s in outs)
    exe = None
    if any(int(np.prod(shape)) for _, shape in types):
        name = static[0] if static and isinstance(static[0], str) else _name(impl)
        what = f"{name}({', '.join(f'{a._dtype}{list(a._shape)}' for a in arrays)})"
        exe = compile_graph(graph, device, what)
    used: tuple[int, ...] | None = graph.used_params()
    if used == tuple(range(len(arrays))):
        used = None
    with _lock:
        # Bounded: a program that sees ever new shapes must not keep every
        # executable alive; the oldest entry goes first (it compiles again if
        # it comes back).
        while len(_cache) >= MAX_PROGRAMS:
            _cache.pop(next(iter(_cache)))
        _cache[key] = (exe, types, used)
    return exe, types, used


def apply(impl: Impl, arrays: Sequence[Array], *static: Any, device: Device | None = None) -> Any:
    """``impl(graph, *symbols, *static)`` run on the arrays' device: an Array,
    or a tuple of Arrays where ``impl`` returns a tuple."""
    # The warm path of every operation: one key, one dict look-up, the
    # executable's C call, one wrapper per output (the common cases written out).
    if len(arrays) == 2:
        a, b = arrays
        if a._sym is not None or b._sym is not None:
            return traced(impl, arrays, static)
        dev = a._device if device is None else device
        key: tuple[Any, ...] = (impl, static, dev, a._dtype, a._shape, b._dtype, b._shape)
    else:
        for a in arrays:
            if a._sym is not None:
                return traced(impl, arrays, static)
        dev = device if device is not None else arrays[0]._device
        key = (impl, static, dev, *[t for a in arrays for t in (a._dtype, a._shape)])
    found = _cache.get(key)
    exe, types, used = found if found is not None else _build(impl, static, arrays, dev, key)
    if exe is None:
        outs = [Array._empty(dev, dtype, shape) for dtype, shape in types]
    else:
        bufs = exe(*[a._buf for a in arrays]) if used is None else exe(*[arrays[i]._buf for i in used])
        if len(bufs) == 1:
            dtype, shape = types[0]
            return Array._wrap(bufs[0], dtype, shape, dev)
        outs = [Array._wrap(b, dtype, shape, dev) for b, (dtype, shape) in zip(bufs, types, strict=True)]
    return outs[0] if len(outs) == 1 else tuple(outs)
