"""Running StableHLO programs through the C driver with numpy inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from conftest import PROGRAMS, Driver, Outcome

_NAMES: dict[np.dtype[Any], str] = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
          np.dtype(np.int64): "i64", np.dtype(np.float16): "f16", np.dtype(np.bool_): "bool",
          np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8"}
_TYPES: dict[str, np.dtype[Any]] = {name: dtype for dtype, name in _NAMES.items()}


def input_spec(tmp: Path, index: int, array: np.ndarray) -> str:
    path = tmp / f"in{index}.bin"
    np.ascontiguousarray(array).tofile(path)
    dims = "x".join(str(d) for d in array.shape) if array.ndim else "scalar"
    return f"{_NAMES[array.dtype]}:{dims}:{path}"


def results(outcome: Outcome) -> list[np.ndarray]:
    """The RESULT lines' files as arrays of the stated dtype and shape."""
    arrays = []
    for line in outcome.values("RESULT"):
        _, dtype, dims, path = line.split(" ")
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        arrays.append(np.fromfile(path, dtype=_TYPES[dtype]).reshape(shape))
    return arrays


def run_program(run: Driver, tmp: Path, program: str | Path, *arrays: np.ndarray,
                flags: tuple[str, ...] = (), options: dict[str, str] | None = None) -> Outcome:
    path = program if isinstance(program, Path) or program == "-" else PROGRAMS / program
    specs = [input_spec(tmp, i, a) for i, a in enumerate(arrays)]
    return run("run", path, "--outdir", tmp, *flags, *specs, options=options)
