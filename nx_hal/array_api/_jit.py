"""``jit``: a function of arrays traced into one program for its device.

The function runs once per input dtypes and shapes with symbolic arrays; the
operations it calls add nodes to one graph, compiled once and then called
like any executable. Where tracing cannot follow (Python control flow on
array values, an array's value read to the host), the function runs eagerly,
operation by operation, and a warning says why, once per function.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from nx_hal.array_api._array import Array, Trace, TraceError, current_trace, set_trace
from nx_hal.array_api._dispatch import compile_graph

__all__ = ["jit", "JitWarning"]


class JitWarning(UserWarning):
    """A jit function ran eagerly: tracing could not follow it (the message says where)."""


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a function of arrays returning an array or a tuple/list of them)
    compiled into one program per input dtypes, shapes and device."""
    cache: dict[tuple[Any, ...], Any] = {}
    lock = threading.Lock()
    warned: list[bool] = []

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        arrays = [a for a in args if isinstance(a, Array)]
        if not arrays or current_trace() is not None:
            return fn(*args)
        device = arrays[0]._device
        statics = tuple(None if isinstance(a, Array) else a for a in args)
        key = (device, statics, *[(a._dtype, a._shape) for a in arrays])
        try:
            entry = cache.get(key)
        except TypeError:  # an argument that is not an array is unhashable (a list): no key to keep a trace by
            entry = "an argument that is not an array cannot be hashed (pass a tuple, not a list)"
        if entry is None:
            entry = _trace(fn, args, device)
            with lock:
                cache[key] = entry
        if isinstance(entry, str):
            if not warned:
                warned.append(True)
                warnings.warn(f"jit({getattr(fn, '__name__', 'function')}) runs eagerly: {entry}", JitWarning,
                              stacklevel=2)
            return fn(*args)
        exe, captured, types, single, used = entry
        inputs = [*arrays, *captured]
        bufs = exe(*[inputs[i]._buf for i in used])
        outs = [Array._wrap(b, dt, shape, device) for b, (dt, shape) in zip(bufs, types, strict=True)]
        return outs[0] if single else tuple(outs)

    return wrapper


def _trace(fn: Callable[..., Any], args: tuple[Any, ...], device: Any) -> Any:
    trace = Trace(device)
    symbolic = []
    for a in args:
        if isinstance(a, Array):
            if a._device is not device:
                return "its arrays are on different devices"
            symbolic.append(Array._symbol(trace.graph.param(a._dtype.name, a._shape), device))
        else:
            symbolic.append(a)
    set_trace(trace)
    try:
        result = fn(*symbolic)
    except TraceError as exc:
        return str(exc)
    finally:
        set_trace(None)
    single = isinstance(result, Array)
    outs = [result] if single else list(result) if isinstance(result, (tuple, list)) else None
    if outs is None or not all(isinstance(o, Array) for o in outs):
        return "it returns something other than arrays"
    syms = [trace.symbol(o) for o in outs]
    trace.graph.outputs = [s.id for s in syms]
    types = tuple((np.dtype(s.dtype), s.shape) for s in syms)
    exe = compile_graph(trace.graph, device, f"jit({getattr(fn, '__name__', 'function')})", disk_cache=True)
    return exe, tuple(trace.captured), types, single, trace.graph.used_params()
