"""The request: the core's compile options taken out of the plugin's and
checked once, on every device (a bad value never passes silently)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nx_hal.converter import check_input_shapes, check_precision
from nx_hal.errors import InvalidArgumentError

__all__ = ["Request", "split"]

_CHOICES = {"reserialize": ("auto", "always", "never"), "verify": ("auto", "require", "off")}


@dataclass(frozen=True)
class Request:
    """``input_shapes`` fixes dynamic dims where ONNX is converted;
    ``shape_buckets`` the sizes each named dynamic dim is padded up to;
    ``example_args`` a torch module's example inputs;
    ``reserialize`` whether StableHLO is written again for the backend's
    version; ``verify`` whether programs must be checked in a child first,
    ``verify_timeout`` for how long; ``cache`` whether the store is used;
    ``precision`` the type an ONNX model's products compute in where the core
    converts it (PJRT devices; None: its own types), where the npu plugin's
    option of that name is the plugin's; ``donate_argnums`` the inputs
    (positions, or names where the model names them) whose memory the
    outputs may take (nx_hal.compile.donate)."""

    options: dict[str, object]  # the plugin's
    input_shapes: dict[str, list[int]] | None = None
    shape_buckets: dict[str, tuple[int, ...]] | None = None
    example_args: object = None
    reserialize: str = "auto"
    verify: str = "auto"
    verify_timeout: float | None = None
    cache: bool = True
    precision: str | None = None
    donate_argnums: tuple[int | str, ...] = ()


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


def _buckets(value: object, plugin: str) -> dict[str, tuple[int, ...]] | None:
    if value is None:
        return None
    example = "like {'seq': [128, 256, 512]}"
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgumentError(f"option 'shape_buckets': expected a mapping of dim names to sizes, {example}, "
                                   f"got {value!r:.80}", plugin=plugin)
    out = {}
    for name, sizes in value.items():
        ok = isinstance(name, str) and name and isinstance(sizes, (list, tuple)) and sizes and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes)
        if not ok:
            raise InvalidArgumentError(f"option 'shape_buckets': {name!r:.40} must name a dim and give sizes >= 1, "
                                       f"{example}, got {sizes!r:.80}", plugin=plugin)
        out[str(name)] = tuple(sorted(set(sizes)))
    return dict(sorted(out.items()))


def _donated(value: object, plugin: str) -> tuple[int | str, ...]:
    """``donate_argnums`` as JAX takes it (one position, or several), or
    input names: each once, in the order given."""
    if value is None:
        return ()
    found: list[int | str] = []
    for item in list(value) if isinstance(value, (list, tuple)) else [value]:
        if not (isinstance(item, str) and item) and not (
                isinstance(item, int) and not isinstance(item, bool) and item >= 0):
            raise InvalidArgumentError("option 'donate_argnums': expected input positions (ints >= 0) or input "
                                       f"names, like 0, (0, 1) or ('state',), got {value!r:.80}", plugin=plugin)
        found.append(item)
    return tuple(dict.fromkeys(found))


def split(options: dict[str, object], *, cache: bool, plugin: str, converts: bool = False) -> Request:
    """The request ``Device.compile(..., **options)`` makes; ``converts``:
    the device's ONNX is converted by the core, whose option ``precision`` is."""
    rest = dict(options)
    precision = check_precision(rest.pop("precision"), plugin=plugin, given=True) if converts and "precision" in rest else None
    shapes = rest.pop("input_shapes", None)
    # Checked in this order, each before the next is read: the first bad one is the error.
    input_shapes = check_input_shapes(shapes, plugin=plugin) if shapes is not None else None
    reserialize = _choice("reserialize", rest.pop("reserialize", "auto"), plugin)
    verify = _choice("verify", rest.pop("verify", "auto"), plugin)
    timeout = _timeout(rest.pop("verify_timeout", None), plugin)
    buckets = _buckets(rest.pop("shape_buckets", None), plugin)
    example_args = rest.pop("example_args", None)
    donated = _donated(rest.pop("donate_argnums", None), plugin)
    if buckets is not None and input_shapes is not None:
        raise InvalidArgumentError("options 'input_shapes' and 'shape_buckets' exclude each other: input_shapes "
                                   "fixes one shape, shape_buckets serves many", plugin=plugin)
    return Request(rest, input_shapes, buckets, example_args, reserialize, verify, timeout, cache, precision,
                   donated)
