"""Errors: one NxHalError subclass per ABI status code, carrying the plugin's message."""

from __future__ import annotations

from typing import ClassVar, Final, final

__all__ = [
    "NxHalError",
    "InvalidArgumentError",
    "InvalidProgramError",
    "NotFoundError",
    "UnimplementedError",
    "UnavailableError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "DeadlineExceededError",
    "InternalError",
    "AbiMismatchError",
    "CancelledError",
    "ConfigError", "ConfigWarning",
    "error_for_code",
]


class NxHalError(Exception):
    """An error reported by nx_hal or by a plugin through the ABI.

    ``code`` is the ABI status code name (``"INVALID_ARGUMENT"``...), ``plugin``
    the plugin that reported it (None for the core), ``message`` its text.
    """

    code: ClassVar[str] = "UNKNOWN"

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        self.message = message
        self.plugin = plugin
        where = f"[{plugin}] " if plugin else ""
        super().__init__(f"{where}{self.code}: {message}")


class InvalidArgumentError(NxHalError, ValueError):
    """An argument, program, option or input the plugin or nx_hal cannot take (also a ValueError)."""

    code = "INVALID_ARGUMENT"


@final
class InvalidProgramError(InvalidArgumentError):
    """The backend cannot parse the program as its format (ABI 1.2): a kind
    of InvalidArgumentError, raised where a plugin says so by its code."""

    code = "INVALID_PROGRAM"


@final
class NotFoundError(NxHalError, LookupError):
    """Something named does not exist: a device, an input, an option, a file (also a LookupError)."""

    code = "NOT_FOUND"


@final
class UnimplementedError(NxHalError, NotImplementedError):
    """The plugin does not implement this operation (also a NotImplementedError)."""

    code = "UNIMPLEMENTED"


@final
class UnavailableError(NxHalError):
    """No device or plugin can do this now; the message says which were tried and why."""

    code = "UNAVAILABLE"


@final
class ResourceExhaustedError(NxHalError, MemoryError):
    """The device ran out of memory or another resource (also a MemoryError)."""

    code = "RESOURCE_EXHAUSTED"


@final
class FailedPreconditionError(NxHalError):
    """The operation is not allowed in the current state (a freed buffer, a closed client)."""

    code = "FAILED_PRECONDITION"


@final
class DeadlineExceededError(NxHalError, TimeoutError):
    """The work took longer than its limit (a probe, a child compile; also a TimeoutError)."""

    code = "DEADLINE_EXCEEDED"


@final
class InternalError(NxHalError):
    """A plugin or vendor SDK failed in a way it does not attribute to the caller."""

    code = "INTERNAL"


@final
class AbiMismatchError(NxHalError):
    """The plugin library's ABI version is one this core cannot use."""

    code = "ABI_MISMATCH"


@final
class CancelledError(NxHalError):
    """The operation was cancelled before it finished."""

    code = "CANCELLED"


@final
class ConfigError(NxHalError, ValueError):
    """A configuration value failed validation; the message names where it came from."""

    code = "INVALID_ARGUMENT"


class ConfigWarning(UserWarning):
    """A configuration source holds something nx_hal ignores (an unknown
    ``NX_HAL_*`` variable, say); the message names it and the likely fix."""


# Indexed by the ABI's nxhal_status_code_t values.
_BY_CODE: Final[dict[int, type[NxHalError]]] = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: UnimplementedError,
    4: UnavailableError,
    5: ResourceExhaustedError,
    6: FailedPreconditionError,
    7: DeadlineExceededError,
    8: InternalError,
    9: AbiMismatchError,
    10: CancelledError,
    11: InvalidProgramError,
}


def error_for_code(code: int, message: str, *, plugin: str | None = None) -> NxHalError:
    """The exception for an ABI status code; unknown codes become InternalError."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return InternalError(f"unknown status code {code}: {message}", plugin=plugin)
    return cls(message, plugin=plugin)
