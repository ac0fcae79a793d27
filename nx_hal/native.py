"""The compiled binding: the cffi extension built from the headers, and the
one place that turns ABI statuses into exceptions."""

from __future__ import annotations

from typing import Any, Final

from nx_hal._nxhal_cffi import ffi, lib
from nx_hal.errors import NxHalError, error_for_code

__all__ = ["ffi", "lib", "NULL", "address", "check", "check_loader", "text", "HOST_ABI"]

NULL: Final = ffi.NULL
HOST_ABI: Final = (lib.NXHAL_ABI_VERSION_MAJOR, lib.NXHAL_ABI_VERSION_MINOR)


def address(pointer: Any) -> int:
    """A cffi pointer as the integer nx_hal._fastpath takes."""
    return int(ffi.cast("uintptr_t", pointer))


def text(ptr: Any) -> str:
    """A borrowed C string as str ("" for NULL)."""
    if ptr == NULL:
        return ""
    return ffi.string(ptr).decode("utf-8", "replace")  # type: ignore[no-any-return]


def error_from_status(api: Any, status: Any, plugin: str | None) -> NxHalError:
    """Takes ownership of a plugin status and returns its exception."""
    code = lib.nxhal_call_status_code(api, status)
    message = text(lib.nxhal_call_status_message(api, status))
    lib.nxhal_call_status_free(api, status)
    return error_for_code(code, message, plugin=plugin)


def check(api: Any, status: Any, plugin: str | None) -> None:
    """Raises the status of a plugin call (freeing it); returns on success."""
    if status != NULL:
        raise error_from_status(api, status, plugin)


def check_loader(status: Any, plugin: str | None = None) -> None:
    """Raises the status of a loader call (freeing it); returns on success."""
    if status != NULL:
        code = lib.nxhal_loader_status_code(status)
        message = text(lib.nxhal_loader_status_message(status))
        lib.nxhal_loader_status_free(status)
        raise error_for_code(code, message, plugin=plugin)


def header_digest() -> str:
    """The digest of the headers this extension was generated from."""
    return text(lib.nxhal_py_header_digest())
