"""``nx_hal.ray.Predictor``: a callable class for Ray Data's ``map_batches``,
one compiled model per actor, on the device its node chooses."""

from __future__ import annotations

from typing import Any

import numpy as np

from nx_hal.errors import InvalidArgumentError
from nx_hal.programs import Program, load
from nx_hal.ray.nodes import prefer_list
from nx_hal.ray.replica import compile_here

__all__ = ["Predictor"]


class Predictor:
    """``ds.map_batches(Predictor, fn_constructor_kwargs={"model": ..., "prefer": ...},
    concurrency=N, batch_size=B)``.

    A batch's columns are the model's inputs by name (a model with one input
    takes a batch's only column whatever its name); the result has one column
    per output. A model whose first dimension is fixed (a batch of 1, say)
    runs on each slice of that many rows, and the outputs are concatenated.
    With ``annotate=True`` each row also says the node and device that ran it.
    """

    def __init__(self, model: Any, prefer: str | list[str] | None = None, format: str | None = None,
                 annotate: bool = False, **compile_options: Any) -> None:
        program = model if isinstance(model, Program) else load(model, format, ())
        self._exe, self.info = compile_here(program, prefer_list(prefer), compile_options)
        self._annotate = annotate
        self._names = [s.name for s in self._exe.inputs]
        # Fixed leading dimension of each input (None: any number of rows per run).
        self._rows = {s.name: (s.shape[0] if s.shape and isinstance(s.shape[0], int) else None)
                      for s in self._exe.inputs}

    def _columns(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        if len(self._names) == 1 and len(batch) == 1:
            return [np.asarray(next(iter(batch.values())))]
        missing = [n for n in self._names if n not in batch]
        if missing:
            raise InvalidArgumentError(f"the batch has no column {', '.join(missing)} (columns: "
                                       f"{', '.join(batch)}; the model's inputs: {', '.join(self._names)})")
        return [np.asarray(batch[n]) for n in self._names]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the model on a batch of rows; returns its outputs as columns."""
        columns = self._columns(batch)
        rows = len(columns[0])
        if any(len(c) != rows for c in columns):
            raise InvalidArgumentError("the batch's columns have different numbers of rows")
        fixed = {r for r in self._rows.values() if r is not None}
        step = fixed.pop() if len(fixed) == 1 else rows
        if rows % step:
            raise InvalidArgumentError(f"the model takes {step} rows per run; a batch of {rows} rows "
                                       f"is not a multiple (choose batch_size={step}*k)")
        outs: list[list[np.ndarray]] = []
        for start in range(0, rows, step):
            outs.append([o.to_numpy() for o in self._exe(*(np.ascontiguousarray(c[start:start + step])
                                                         for c in columns))])
        result = {spec.name: np.concatenate([o[i] for o in outs]) for i, spec in enumerate(self._exe.outputs)}
        if self._annotate:
            result["node_id"] = np.array([self.info["node_id"]] * rows)
            result["selector"] = np.array([self.info["selector"]] * rows)
        return result
