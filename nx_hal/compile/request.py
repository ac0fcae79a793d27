"""The request: the core's compile options taken out of the plugin's and
checked once, on every device (a bad value never passes silently)."""

from __future__ import annotations

from dataclasses import dataclass

from nx_hal.converter import check_input_shapes
from nx_hal.errors import InvalidArgumentError

__all__ = ["Request", "split"]

_CHOICES = {"reserialize": ("auto", "always", "never"), "verify": ("auto", "require", "off")}


@dataclass(frozen=True)
class Request:
    """``input_shapes`` fixes dynamic dims where ONNX is converted;
    ``reserialize`` whether StableHLO is written again for the backend's
    version; ``verify`` whether programs must be checked in a child first,
    ``verify_timeout`` for how long; ``cache`` whether the store is used."""

    options: dict[str, object]  # the plugin's
    input_shapes: dict[str, list[int]] | None = None
    reserialize: str = "auto"
    verify: str = "auto"
    verify_timeout: float | None = None
    cache: bool = True


def _choice(name: str, value: object, plugin: str) -> str:
    allowed = _CHOICES[name]
    if value not in allowed:
        expected = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise InvalidArgumentError(f"option '{name}': expected {expected}, got {value!r}", plugin=plugin)
    return str(value)


def _timeout(value: object, plugin: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InvalidArgumentError(f"option 'verify_timeout': expected a number of seconds > 0, got {value!r}",
                                   plugin=plugin)
    return float(value)


def split(options: dict[str, object], *, cache: bool, plugin: str) -> Request:
    """The request ``Device.compile(..., **options)`` makes."""
    rest = dict(options)
    shapes = rest.pop("input_shapes", None)
    # Checked in this order, each before the next is read: the first bad one is the error.
    input_shapes = check_input_shapes(shapes, plugin=plugin) if shapes is not None else None
    reserialize = _choice("reserialize", rest.pop("reserialize", "auto"), plugin)
    verify = _choice("verify", rest.pop("verify", "auto"), plugin)
    timeout = _timeout(rest.pop("verify_timeout", None), plugin)
    return Request(rest, input_shapes, reserialize, verify, timeout, cache)
