"""Inputs for ``nx-hal run`` when the user gives none: values a model can
take, and a note saying what each is.

Random integers are wrong for most integer inputs: an attention mask of 9s,
token ids past the vocabulary. So an integer input is read by its role: a
mask is ones; token types are zeros; positions count up; an index into an
embedding table (an ONNX Gather whose table is a weight) is random within
the table; anything else is zeros, said so, with how to pass real values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = ["SampleInput", "sample_inputs", "index_ranges"]

# Ops that pass an index tensor through unchanged in meaning.
_PASS_THROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}


class SampleInput(NamedTuple):
    """A made-up input and how it was made."""

    array: np.ndarray
    note: str  # how it was made, for the user


def index_ranges(model_path: Path) -> dict[str, int]:
    """For an ONNX model: graph inputs used as indices into a weight table
    (Gather's data an initializer or Constant), with the table's length along
    the gathered axis. Empty when onnx is missing or the file unreadable."""
    try:
        import onnx
    except ImportError:
        return {}
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # noqa: BLE001 -- a hint only; compiling reports real problems
        return {}
    graph = model.graph
    tables: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            tables[node.output[0]] = tuple(node.attribute[0].t.dims)
    # Which tensor names carry a graph input's values unchanged.
    origin: dict[str, str] = {i.name: i.name for i in graph.input if i.name not in tables}
    for node in graph.node:
        if node.op_type in _PASS_THROUGH and node.input and node.input[0] in origin:
            for out in node.output:
                origin[out] = origin[node.input[0]]
    ranges: dict[str, int] = {}
    for node in graph.node:
        if node.op_type != "Gather" or len(node.input) < 2:
            continue
        data, indices = node.input[0], node.input[1]
        if data in tables and indices in origin:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = tables[data]
            if dims and -len(dims) <= axis < len(dims) and dims[axis] > 0:
                name = origin[indices]
                ranges[name] = min(ranges.get(name, dims[axis]), dims[axis])
    return ranges


def _integer(name: str, shape: tuple[int, ...], dtype: np.dtype[Any], ranges: Mapping[str, int],
             rng: np.random.Generator) -> SampleInput:
    lower = name.lower()
    if "mask" in lower:
        return SampleInput(np.ones(shape, dtype), "ones (a mask: nothing masked)")
    if name in ranges:
        high = ranges[name]
        return SampleInput(rng.integers(0, high, shape).astype(dtype),
                           f"random indices in [0, {high}) (the table it indexes)")
    if "token_type" in lower or "segment" in lower:
        return SampleInput(np.zeros(shape, dtype), "zeros (token types)")
    if "position" in lower and shape:
        return SampleInput(np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy(),
                           "0, 1, 2, ... along the last axis (positions)")
    return SampleInput(np.zeros(shape, dtype), "zeros (meaning unknown: pass --input NAME=FILE.npy)")


def sample_inputs(specs: Sequence[Any], ranges: Mapping[str, int], seed: int = 0) -> dict[str, SampleInput]:
    """One SampleInput per spec (``name``, ``dtype`` name, ``shape`` with None
    for a dynamic dimension, which becomes 1)."""
    from nx_hal import dtypes

    rng = np.random.default_rng(seed)
    out: dict[str, SampleInput] = {}
    for spec in specs:
        dims = spec.shape or ()
        shape = tuple(1 if d is None else d for d in dims)
        dynamic = " (dynamic dimensions set to 1; fix them with --input-shape)" if None in dims else ""
        dtype = dtypes.to_numpy(dtypes.DTYPE_NAMES_REVERSE[spec.dtype])
        if spec.dtype == "bf16":  # held as uint16 words: a float32's top half
            words = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            sample = SampleInput(words, "random normal")
        elif dtype.kind == "f":
            sample = SampleInput(rng.standard_normal(shape).astype(dtype), "random normal")
        elif dtype.kind == "b":
            sample = (SampleInput(np.ones(shape, dtype), "all true (a mask: nothing masked)")
                      if "mask" in spec.name.lower()
                      else SampleInput(rng.integers(0, 2, shape).astype(dtype), "random true/false"))
        elif dtype.kind == "c":
            sample = SampleInput(rng.standard_normal(shape).astype(dtype), "random normal")
        else:
            sample = _integer(spec.name, shape, dtype, ranges, rng)
        out[spec.name] = SampleInput(sample.array, sample.note + dynamic)
    return out
