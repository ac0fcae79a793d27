"""Index inputs checked on the host before each run: ONNX allows indices
in [-n, n) along an axis of size n and onnxruntime refuses others, while
backends give zeros, clamp or write elsewhere (nx_hal.onnx.deviations finds
them; Executable.check_inputs applies them). Its own module, below the
executable, so that the core runs without nx_hal.onnx."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

__all__ = ["IndexCheck", "Extent"]

# The size of an axis an index runs along: a number, or (graph input, axis)
# for a size only known when the model runs.
Extent: TypeAlias = "int | tuple[str, int]"


@dataclass(frozen=True)
class IndexCheck:
    """Indices a graph input carries into a Gather-family node, checked on
    the host before each run (Executable.check_inputs): ONNX allows indices
    in [-n, n) along an axis of size n and onnxruntime refuses others, while
    backends give zeros, clamp or write elsewhere. ``axes`` are the data
    axes indexed and ``extents`` their sizes: one axis, or with
    ``per_last_axis`` (GatherND, ScatterND) one per position of the indices'
    last axis; an extent is None where the size is unknown."""

    input: str  # the graph input (or, at compile time, the constant) holding the indices
    node: str  # the node, as the user's model names it
    axes: tuple[int, ...]
    extents: tuple[Extent | None, ...]
    per_last_axis: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> IndexCheck:
        """The check ``to_json`` wrote; KeyError, TypeError or ValueError for
        a value it could not have written (a store entry is then recomputed)."""
        extents = tuple(tuple(e) if isinstance(e, list) else e for e in value["extents"])
        if not all(e is None or isinstance(e, (int, tuple)) for e in extents):
            raise ValueError("malformed extent")
        return cls(input=str(value["input"]), node=str(value["node"]), axes=tuple(int(a) for a in value["axes"]),
                   extents=extents, per_last_axis=bool(value["per_last_axis"]))

    def out_of_range(self, indices: Any, shape_of: Callable[[str], tuple[int, ...] | None]
                     ) -> tuple[int, int, int] | None:
        """(index, axis, axis size) of an index out of range in ``indices`` (an
        integer numpy array), or None; ``shape_of`` gives the shape a graph
        input has in this run."""
        if indices.size == 0:
            return None
        if not self.per_last_axis:
            return _first_out_of_range(indices, self.axes[0], _extent(self.extents[0], shape_of))
        columns = indices.reshape(-1, indices.shape[-1]) if indices.ndim else indices.reshape(1, 1)
        for j in range(min(columns.shape[1], len(self.extents))):
            found = _first_out_of_range(columns[:, j], self.axes[j], _extent(self.extents[j], shape_of))
            if found is not None:
                return found
        return None

    def violation(self, indices: Any, shape_of: Callable[[str], tuple[int, ...] | None]) -> str | None:
        """Why ``indices`` may not run (see ``out_of_range``), or None."""
        found = self.out_of_range(indices, shape_of)
        if found is None:
            return None
        index, axis, size = found
        return (f"input '{self.input}' holds index {index} for {self.node}, along axis {axis} of size {size}: "
                f"out of range (ONNX allows [-{size}, {size}); onnxruntime refuses it too)")


def _extent(extent: Extent | None, shape_of: Callable[[str], tuple[int, ...] | None]) -> int | None:
    if extent is None or isinstance(extent, int):
        return extent
    shape = shape_of(extent[0])
    return shape[extent[1]] if shape is not None and -len(shape) <= extent[1] < len(shape) else None


def _first_out_of_range(values: Any, axis: int, size: int | None) -> tuple[int, int, int] | None:
    if size is None:
        return None
    low, high = int(values.min()), int(values.max())
    if low >= -size and high < size:
        return None
    return (low if low < -size else high), axis, size
