"""``__array_namespace_info__``: the namespace's devices, capabilities and dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import _device_of

__all__ = ["Info", "__array_namespace_info__"]

_KINDS = {
    "bool": ("bool",), "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"), "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"), "integral": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
}
_KINDS["numeric"] = _KINDS["integral"] + _KINDS["real floating"]


class Info:
    """What the namespace offers on each device (the standard's inspection API)."""

    def capabilities(self) -> dict[str, Any]:
        """Boolean indexing and data-dependent shapes: yes (the data is read); 3 dims and more for linalg."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> Any:
        """nx_hal's default device (config, ``NX_HAL_PREFER``, ``with device:``)."""
        return _device_of(None)

    def devices(self) -> list[Any]:
        """Every device nx_hal offers."""
        import nx_hal

        return list(nx_hal.devices())

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        """The default dtypes on ``device``: 64-bit where it computes them exactly, else 32-bit."""
        dev = _device_of(device)
        index = _dtypes.default_int(dev)
        return {"real floating": _dtypes.default_float(dev), "complex floating": _dtypes.complex64 if _dtypes.narrow(dev) else _dtypes.complex128, "integral": index,
                "indexing": index}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype[Any]]:
        """The dtypes ``device`` computes exactly, optionally of ``kind`` (a kind name, dtype or tuple)."""
        offered = _dtypes.device_dtypes(_device_of(device))
        if kind is None:
            return offered
        kinds = kind if isinstance(kind, tuple) else (kind,)
        names: set[str] = set()
        for k in kinds:
            if isinstance(k, str):
                if k not in _KINDS:
                    raise ValueError(f"unknown dtype kind {k!r}")
                names.update(_KINDS[k])
            else:
                names.add(np.dtype(k).name)
        return {n: d for n, d in offered.items() if n in names}


def __array_namespace_info__() -> Info:
    """The namespace's inspection object."""
    return Info()
