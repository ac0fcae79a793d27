"""Element types: the ABI's nxhal_dtype_t values and their numpy equivalents."""

from __future__ import annotations

from typing import Final

import numpy as np

__all__ = ["DTYPE_NAMES", "DTYPE_NAMES_REVERSE", "to_numpy", "from_numpy", "name_of"]

# nxhal_dtype_t value -> (short name, numpy dtype or None where numpy has none)
_TABLE: Final[dict[int, tuple[str, np.dtype[np.generic] | None]]] = {
    1: ("f16", np.dtype(np.float16)),
    2: ("bf16", None),  # no numpy dtype: carried as raw 16-bit words
    3: ("f32", np.dtype(np.float32)),
    4: ("f64", np.dtype(np.float64)),
    5: ("i8", np.dtype(np.int8)),
    6: ("i16", np.dtype(np.int16)),
    7: ("i32", np.dtype(np.int32)),
    8: ("i64", np.dtype(np.int64)),
    9: ("u8", np.dtype(np.uint8)),
    10: ("bool", np.dtype(np.bool_)),
    11: ("u16", np.dtype(np.uint16)),
    12: ("u32", np.dtype(np.uint32)),
    13: ("u64", np.dtype(np.uint64)),
}

DTYPE_NAMES: Final[dict[int, str]] = {code: name for code, (name, _) in _TABLE.items()}
DTYPE_NAMES_REVERSE: Final[dict[str, int]] = {name: code for code, name in DTYPE_NAMES.items()}
_FROM_NUMPY: Final[dict[np.dtype[np.generic], int]] = {
    dt: code for code, (_, dt) in _TABLE.items() if dt is not None
}
_BF16_RAW: Final = np.dtype(np.uint16)
# The numpy dtype holding each nx_hal dtype's elements (bf16 as raw uint16 words).
NUMPY_OF: Final[dict[int, np.dtype[np.generic]]] = {
    code: (dt if dt is not None else _BF16_RAW) for code, (_, dt) in _TABLE.items()
}


def name_of(code: int) -> str:
    return DTYPE_NAMES.get(code, f"invalid({code})")


def to_numpy(code: int) -> np.dtype[np.generic]:
    """The numpy dtype holding elements of ``code``; bf16 is carried as uint16 words."""
    found = NUMPY_OF.get(code)
    if found is None:
        raise ValueError(f"no numpy dtype for nx_hal dtype {name_of(code)}")
    return found


def from_numpy(dtype: np.dtype[np.generic]) -> int:
    """The nxhal_dtype_t for a numpy dtype; ValueError naming it when there is none."""
    code = _FROM_NUMPY.get(dtype)
    if code is None:
        code = _FROM_NUMPY.get(np.dtype(dtype).newbyteorder("="))
    if code is None:
        supported = ", ".join(str(d) for d in _FROM_NUMPY)
        raise ValueError(f"numpy dtype {dtype} has no nx_hal equivalent (supported: {supported})")
    return code
