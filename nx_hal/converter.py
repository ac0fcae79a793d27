"""What a device needs from an ONNX → StableHLO converter, as an interface.

``Device`` compiles ONNX for a StableHLO backend and re-serialises StableHLO
for an older backend through a ``Converter`` it is given (by the registry,
on each plugin record), never by importing the converter: the converter
(``nx_hal.onnx``, torch-mlir in a child process) depends on the core, and the
core on this interface only. ``NO_CONVERTER`` stands in where none was given
(a plugin record made by hand, the sandbox child's devices).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, final

from nx_hal.errors import InvalidArgumentError, UnavailableError
from nx_hal.index_checks import IndexCheck

if TYPE_CHECKING:
    from nx_hal.store import Store

__all__ = [
    "Converter", "Dim", "NO_CONVERTER", "PortShape", "PreparedOnnx", "STABLEHLO_VERSION", "check_input_shapes",
    "target_version_of",
]

# A StableHLO version as backends state it ("1.9.3").
STABLEHLO_VERSION: Final = re.compile(r"^\d+\.\d+\.\d+$")


# A dimension as an ONNX graph declares it: a size, a symbol's name
# (dim_param, "batch"), or None where it says neither.
Dim = int | str | None
# An input's or output's element type (nx_hal's name, "f32"; "onnx:N" for one
# nx_hal has no name for) and dims (None: not even the rank is declared).
PortShape = tuple[str, tuple[Dim, ...] | None]


@dataclass(frozen=True)
class PreparedOnnx:
    """An ONNX model as a device compiles it (Converter.prepare_onnx):
    ``model``, the bytes to compile (the user's own where nothing changed),
    the index inputs each run checks, and the graph's input (initializers
    excluded) and output names and declared shapes, read in the same parse
    (None: not read).
    """

    model: bytes
    index_checks: tuple[IndexCheck, ...] = ()
    names: tuple[list[str], list[str]] | None = None
    shapes: tuple[tuple[PortShape, ...], tuple[PortShape, ...]] | None = None


class Converter(Protocol):
    """ONNX → StableHLO and StableHLO checks for a device. Implementations
    must be thread-safe: devices of every plugin share one."""

    def available(self) -> str | None:
        """None when the converter can run here, else why not (for selection reports)."""
        ...

    def identity(self) -> str:
        """What its outputs depend on besides its inputs (its code, the
        versions of the tools it runs): a compile remembered across
        processes is keyed by it (nx_hal.compile.shortcut), so it is asked
        at every compile of a file and must be cheap (no file read)."""
        ...

    def to_stablehlo(self, model: bytes, *, input_shapes: dict[str, list[int]], target_version: str | None,
                     cache_dir: Path | None, use_cache: bool, platform: str | None = None,
                     precision: str | None = None) -> bytes:
        """The ONNX model as a portable StableHLO artifact for ``target_version``
        (the backend's; None: the converter's own). ``platform`` is the
        device's kind ("cpu", "gpu", ...): the conversion may pick operators
        that run faster there (None: what runs well anywhere). ``precision``
        ("bf16", "f16"; None: the model's types) is the type its products
        compute in (the compile option). Raises
        ConversionError (an InvalidArgumentError) when the model cannot be
        converted."""
        ...

    def reserialize(self, module: bytes, target_version: str, *, plugin: str) -> bytes:
        """A StableHLO module written again as a portable artifact for
        ``target_version``. Raises InvalidArgumentError naming ``plugin`` when
        it cannot be, UnavailableError when the converter cannot run."""
        ...

    def donate(self, module: bytes, target_version: str, inputs: tuple[int, ...], *,
               plugin: str) -> tuple[bytes, dict[int, int]]:
        """``module`` with ``inputs`` (positions in ``main``) marked as
        donated, each to the first output of its type no other input took,
        written for ``target_version``; and {input: output} for those an
        output matched. InvalidArgumentError naming ``plugin`` when it
        cannot be, UnavailableError when the converter cannot run."""
        ...

    def check_stablehlo(self, data: bytes, *, policy: str, plugin: str, cache_dir: Path | None) -> None:
        """Parses and verifies StableHLO from the user before a vendor parser
        sees it; InvalidArgumentError when it is not valid. ``policy`` is the
        compile option ``verify`` ("auto" or "require")."""
        ...

    def prepare_onnx(self, model: bytes, *, plugin: str, attributes: Mapping[str, object] | None = None,
                     store: Store | None = None) -> PreparedOnnx:
        """The ONNX model as a device of ``plugin`` should compile it, natively
        or converted: where that backend is known to compute an operator
        differently from ONNX (NaN through Relu on OpenVINO, say), the
        pattern rewritten so it matches ONNX's reference; constant indices
        out of range refused (InvalidArgumentError naming the node); the
        index inputs to check at each run; its input and output names.
        ``attributes`` are the compiling device's (``Device.attributes``),
        for deviations that depend on the machine (OpenVINO's int8 kernels
        on a CPU without VNNI; None: none known). Bytes that do not parse as
        ONNX are returned as they are (the compile says why). With ``store``,
        the result is kept there (section ``prepared``) by the model's
        bytes, the plugin, the attributes and the rewriting code, so a warm
        compile reads it back without parsing the model again."""
        ...


@final
class _NoConverter:
    """No converter: ONNX is not converted, StableHLO passes unverified
    unless the caller requires verification."""

    _WHY: Final = "ONNX → StableHLO needs a converter, and this plugin record was given none"

    def available(self) -> str | None:
        return self._WHY

    def identity(self) -> str:
        return "none"

    def to_stablehlo(self, model: bytes, *, input_shapes: dict[str, list[int]], target_version: str | None,
                     cache_dir: Path | None, use_cache: bool, platform: str | None = None,
                     precision: str | None = None) -> bytes:
        raise UnavailableError(self._WHY)

    def reserialize(self, module: bytes, target_version: str, *, plugin: str) -> bytes:
        raise UnavailableError(self._WHY, plugin=plugin)

    def donate(self, module: bytes, target_version: str, inputs: tuple[int, ...], *,
               plugin: str) -> tuple[bytes, dict[int, int]]:
        raise UnavailableError(f"donate_argnums needs the program rewritten: {self._WHY}", plugin=plugin)

    def check_stablehlo(self, data: bytes, *, policy: str, plugin: str, cache_dir: Path | None) -> None:
        if policy == "require":
            raise UnavailableError(f"cannot verify the program: {self._WHY}", plugin=plugin)

    def prepare_onnx(self, model: bytes, *, plugin: str, attributes: Mapping[str, object] | None = None,
                     store: Store | None = None) -> PreparedOnnx:
        return PreparedOnnx(model)  # nothing to read ONNX with: compiled as given


NO_CONVERTER: Final[Converter] = _NoConverter()


#: The compile option ``precision`` where the core converts ONNX (PJRT devices): the npu plugin's
#: names ("auto" is OpenVINO's own); nx_hal.onnx.precision says what each changes.
PRECISIONS: Final = ("f32", "bf16", "f16")


def check_precision(value: object, *, plugin: str | None = None, given: bool = False) -> str | None:
    """The compile option ``precision`` checked (InvalidArgumentError naming
    the allowed values); None for the model's own types ("f32", or None where
    the option was not ``given``: a user's explicit None is a mistake)."""
    if (value is not None or given) and value not in PRECISIONS:
        raise InvalidArgumentError(f"option 'precision': expected one of {', '.join(PRECISIONS)}, got {value!r:.80}",
                                   plugin=plugin)
    return None if value in (None, "f32") else str(value)


def target_version_of(device: object) -> str | None:
    """The StableHLO version a device's backend reads (the tpu plugin's
    ``stablehlo_version`` attribute), or None when it does not say."""
    attributes = getattr(device, "attributes", None)
    if isinstance(attributes, Mapping):
        for name in ("stablehlo_version", "stablehlo_current_version"):
            value = attributes.get(name)
            if isinstance(value, str) and STABLEHLO_VERSION.match(value):
                return value
    return None


def check_input_shapes(input_shapes: object, *, plugin: str | None = None) -> dict[str, list[int]]:
    """The compile option ``input_shapes`` as ``{name: [dims]}``, sorted by
    name; None gives {}. The one place it is validated, for every device:
    a mapping from input names to sequences of ints >= 0, else
    InvalidArgumentError saying which part is wrong (a float or bool dim is
    refused rather than truncated)."""
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise InvalidArgumentError(
            "input_shapes must be a mapping of input names to dims, like {'x': (1, 3, 224, 224)}, "
            f"got {type(input_shapes).__name__} {input_shapes!r:.80}",
            plugin=plugin,
        )
    shapes: dict[str, list[int]] = {}
    for name, dims in input_shapes.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"input_shapes keys must be input names, got {name!r}", plugin=plugin)
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
            raise InvalidArgumentError(
                f"input_shapes['{name}'] must be a sequence of ints, got {dims!r:.80}", plugin=plugin
            )
        checked: list[int] = []
        for dim in dims:
            if isinstance(dim, bool) or not hasattr(dim, "__index__"):
                raise InvalidArgumentError(
                    f"input_shapes['{name}'] must be a sequence of ints, got {dims!r:.80}", plugin=plugin
                )
            value = operator.index(dim)
            if value < 0:
                raise InvalidArgumentError(
                    f"input_shapes['{name}'] has dimension {value}, expected >= 0", plugin=plugin
                )
            checked.append(value)
        shapes[name] = checked
    return dict(sorted(shapes.items()))
