"""Python values to the ABI's typed options (nxhal_option_t arrays)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any, Final

from nx_hal.errors import InvalidArgumentError
from nx_hal.native import NULL, ffi, lib

__all__ = ["COptions", "to_c_options"]

_OPTION_SIZE: Final = ffi.sizeof("nxhal_option_t")


class COptions:
    """An nxhal_option_t array and the memory it borrows, alive while this is."""

    __slots__ = ("array", "count", "_keep")

    def __init__(self, array: Any, count: int, keep: list[Any]) -> None:
        self.array = array
        self.count = count
        self._keep = keep


_EMPTY: Final = COptions(NULL, 0, [])


def _check_int64(name: str, value: int) -> None:
    if not -(2**63) <= value < 2**63:
        raise InvalidArgumentError(f"option '{name}': {value} does not fit in a signed 64-bit integer")


def _c_string(name: str, text: str) -> bytes:
    """UTF-8 for C; a NUL would silently cut the string there."""
    if "\0" in text:
        raise InvalidArgumentError(f"option {name!r}: the string holds a NUL character")
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"option {name!r}: not encodable as UTF-8 ({exc.reason})") from None


def to_c_options(values: Mapping[str, object]) -> COptions:
    """bool -> BOOL, int -> INT64, float -> DOUBLE, str/path -> STRING,
    sequence of ints -> INT64_LIST; None values are left out."""
    items = [(k, v) for k, v in values.items() if v is not None]
    if not items:
        return _EMPTY
    array = ffi.new("nxhal_option_t[]", len(items))
    keep: list[Any] = []
    for slot, (name, value) in zip(array, items, strict=False):
        slot.struct_size = _OPTION_SIZE
        cname = ffi.new("char[]", _c_string(name, name))
        keep.append(cname)
        slot.name = cname
        if isinstance(value, bool):
            slot.type = lib.NXHAL_VALUE_BOOL
            slot.bool_value = int(value)
        elif isinstance(value, int):
            _check_int64(name, value)
            slot.type = lib.NXHAL_VALUE_INT64
            slot.int64_value = value
        elif isinstance(value, float):
            slot.type = lib.NXHAL_VALUE_DOUBLE
            slot.double_value = value
        elif isinstance(value, (str, PathLike)):
            cvalue = ffi.new("char[]", _c_string(name, str(value)))
            keep.append(cvalue)
            slot.type = lib.NXHAL_VALUE_STRING
            slot.string_value = cvalue
        elif isinstance(value, Sequence) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            for item in value:
                _check_int64(name, item)
            clist = ffi.new("int64_t[]", list(value)) if value else NULL
            keep.append(clist)
            slot.type = lib.NXHAL_VALUE_INT64_LIST
            slot.int64_list = clist
            slot.int64_list_size = len(value)
        else:
            raise InvalidArgumentError(
                f"option '{name}': {type(value).__name__} values cannot be passed to a plugin "
                "(use bool, int, float, str or a list of ints)"
            )
    return COptions(array, len(items), keep)


def from_c_value(value: Any) -> object:
    """A typed value read back from an nxhal_named_value_t (device attributes)."""
    kind = value.type
    if kind == lib.NXHAL_VALUE_INT64:
        return int(value.int64_value)
    if kind == lib.NXHAL_VALUE_DOUBLE:
        return float(value.double_value)
    if kind == lib.NXHAL_VALUE_BOOL:
        return bool(value.bool_value)
    if kind == lib.NXHAL_VALUE_STRING:
        return "" if value.string_value == NULL else ffi.string(value.string_value).decode()
    if kind == lib.NXHAL_VALUE_INT64_LIST:
        return [int(value.int64_list[i]) for i in range(value.int64_list_size)]
    return None
