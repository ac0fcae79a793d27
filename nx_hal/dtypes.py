"""Element types: the ABI's nxhal_dtype_t values and their numpy equivalents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from nx_hal._lazy import LazyModule

if TYPE_CHECKING:
    import numpy as np
else:
    # numpy is imported at the first array operation, not by ``import nx_hal``.
    np = LazyModule("numpy", keep=True)

__all__ = ["DTYPE_NAMES", "DTYPE_NAMES_REVERSE", "to_numpy", "from_numpy", "name_of", "np"]

# nxhal_dtype_t value -> (short name, numpy type name or None where numpy has none)
_TABLE: Final[dict[int, tuple[str, str | None]]] = {
    1: ("f16", "float16"),
    2: ("bf16", None),  # no numpy dtype: carried as raw 16-bit words
    3: ("f32", "float32"),
    4: ("f64", "float64"),
    5: ("i8", "int8"),
    6: ("i16", "int16"),
    7: ("i32", "int32"),
    8: ("i64", "int64"),
    9: ("u8", "uint8"),
    10: ("bool", "bool"),
    11: ("u16", "uint16"),
    12: ("u32", "uint32"),
    13: ("u64", "uint64"),
}

DTYPE_NAMES: Final[dict[int, str]] = {code: name for code, (name, _) in _TABLE.items()}
DTYPE_NAMES_REVERSE: Final[dict[str, int]] = {name: code for code, name in DTYPE_NAMES.items()}
# Filled from _TABLE on first use (numpy's import): numpy dtype -> code, and
# the numpy dtype holding each nx_hal dtype's elements (bf16 as raw uint16 words).
_FROM_NUMPY: Final[dict[np.dtype[np.generic], int]] = {}
_NUMPY_OF: Final[dict[int, np.dtype[np.generic]]] = {}


def _fill() -> None:
    """Fills both tables, each in one step (a thread never sees half of one)."""
    numpy_of = {code: np.dtype(name if name is not None else "uint16") for code, (_, name) in _TABLE.items()}
    from_numpy = {numpy_of[code]: code for code, (_, name) in _TABLE.items() if name is not None}
    _NUMPY_OF.update(numpy_of)
    _FROM_NUMPY.update(from_numpy)


def __getattr__(name: str) -> Any:
    if name == "NUMPY_OF":  # a numpy dtype per code: imports numpy
        if not _NUMPY_OF:
            _fill()
        globals()["NUMPY_OF"] = _NUMPY_OF
        return _NUMPY_OF
    raise AttributeError(f"module 'nx_hal.dtypes' has no attribute {name!r}")


if TYPE_CHECKING:
    NUMPY_OF: Final[dict[int, np.dtype[np.generic]]] = _NUMPY_OF


def name_of(code: int) -> str:
    return DTYPE_NAMES.get(code, f"invalid({code})")


def to_numpy(code: int) -> np.dtype[np.generic]:
    """The numpy dtype holding elements of ``code``; bf16 is carried as uint16 words."""
    if not _NUMPY_OF:
        _fill()
    found = _NUMPY_OF.get(code)
    if found is None:
        raise ValueError(f"no numpy dtype for nx_hal dtype {name_of(code)}")
    return found


def from_numpy(dtype: np.dtype[np.generic]) -> int:
    """The nxhal_dtype_t for a numpy dtype; ValueError naming it when there is none."""
    if not _FROM_NUMPY:
        _fill()
    code = _FROM_NUMPY.get(dtype)
    if code is None:
        code = _FROM_NUMPY.get(np.dtype(dtype).newbyteorder("="))
    if code is None and getattr(dtype, "name", "") == "bfloat16":
        # ml_dtypes' bfloat16 (what jax and onnx use): its elements are the
        # bf16 words nx_hal carries; outputs come back as uint16 words.
        code = DTYPE_NAMES_REVERSE["bf16"]
    if code is None:
        supported = ", ".join(str(d) for d in _FROM_NUMPY)
        raise ValueError(f"numpy dtype {dtype} has no nx_hal equivalent (supported: {supported})")
    return code
