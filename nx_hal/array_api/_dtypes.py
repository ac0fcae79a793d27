"""The standard's data types (numpy dtype objects), their promotion, and
what each device computes exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from nx_hal.device import Device

__all__ = ["DTYPES", "promote", "default_int", "default_float", "device_dtypes", "check_dtype", "kind_of"]

bool_ = np.dtype("bool")
int8, int16, int32, int64 = (np.dtype(f"int{n}") for n in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (np.dtype(f"uint{n}") for n in (8, 16, 32, 64))
float32, float64 = np.dtype("float32"), np.dtype("float64")
# Complex arrays are stored (as pairs of floats) but not computed: no nx_hal
# device takes complex buffers, so operations on them are refused by name.
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")

DTYPES: dict[str, np.dtype[Any]] = {d.name: d for d in (bool_, int8, int16, int32, int64, uint8, uint16, uint32,
                                                        uint64, float32, float64, complex64, complex128)}
# OpenVINO's CPU plugin computes 64-bit types in 32 bits (measured: 2**40 + 1 == 1
# in int64, 1e-300 + 1e-300 == 0 in float64); such a device does not offer them.
_WIDE = frozenset({"int64", "uint64", "float64", "complex128"})


def as_dtype(value: object) -> np.dtype[Any]:
    """A numpy dtype from what users pass as one (a dtype, a type, a name)."""
    out: np.dtype[Any] = np.dtype(value)  # type: ignore[call-overload]
    return out


def narrow(device: Device) -> bool:
    """Whether ``device`` lacks exact 64-bit types (OpenVINO's devices)."""
    return device.plugin == "npu"


def device_dtypes(device: Device) -> dict[str, np.dtype[Any]]:
    """The dtypes ``device`` computes exactly, by name."""
    if narrow(device):
        return {n: d for n, d in DTYPES.items() if n not in _WIDE}
    return dict(DTYPES)


def default_int(device: Device) -> np.dtype[Any]:
    return int32 if narrow(device) else int64


def default_float(device: Device) -> np.dtype[Any]:
    return float32 if narrow(device) else float64


def check_dtype(dtype: np.dtype[Any], device: Device) -> None:
    """TypeError naming the device where it does not compute ``dtype`` exactly."""
    if dtype.name not in DTYPES:
        raise TypeError(f"nx_hal.array_api has no dtype {dtype} (it offers {', '.join(DTYPES)})")
    if narrow(device) and dtype.name in _WIDE:
        raise TypeError(f"{device.selector} does not compute {dtype.name} exactly (OpenVINO computes 64-bit types "
                        f"in 32 bits); use a 32-bit dtype there, or a PJRT device (tpu:cpu) for {dtype.name}")


def kind_of(dtype: np.dtype[Any]) -> str:
    """'bool', 'int' (signed or unsigned), 'float' or 'complex'."""
    return {"b": "bool", "f": "float", "c": "complex"}.get(dtype.kind, "int")


def promote(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any]:
    """The standard's promotion of two array dtypes; TypeError where it has none
    (bool with numbers, integers with floats, uint64 with signed integers)."""
    if a == b:
        return a
    ka, kb = kind_of(a), kind_of(b)
    if {ka, kb} == {"float", "complex"}:
        return np.promote_types(a, b)
    if ka != kb:
        raise TypeError(f"no promotion between {a} and {b} in the array API standard; convert one with astype")
    result = np.promote_types(a, b)
    if result.kind == "f" and ka == "int":
        raise TypeError(f"no promotion between {a} and {b} in the array API standard (numpy would give {result})")
    return result
