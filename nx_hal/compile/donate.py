"""Stage 4's donation (issue #31): the compile option ``donate_argnums``
marks inputs whose memory the program's outputs may take, as
``jax.jit(f, donate_argnums=...)`` does, for any program that reaches a PJRT
device as StableHLO (ONNX converted, a PyTorch module, StableHLO text): each
donated input gets the first output of its type that no other input took
(input-output aliasing, JAX's ``tf.aliasing_output``). Where the device
donates (its attribute ``donation`` is "in place") the plugin hands the
memory over and the donated Buffer is gone after the call. A device that
cannot computes the same with its inputs kept, and says so in a warning, as
it says of an input no output matches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nx_hal._lazy import LazyModule
from nx_hal._warnings import warn_at_caller
from nx_hal.compile.target import Target
from nx_hal.converter import target_version_of
from nx_hal.errors import InvalidArgumentError

if TYPE_CHECKING:
    from nx_hal import programs
else:  # a warm start lists devices without pydantic, which nx_hal.programs imports
    programs = LazyModule("nx_hal.programs")

__all__ = ["apply", "positions"]


def positions(target: Target, given: tuple[int | str, ...], names: list[str] | None) -> tuple[int, ...]:
    """The inputs ``donate_argnums`` names, as positions (sorted); () where
    ``target`` does not donate, which it warns of: the executable is then the
    one compiled without it."""
    if not given:
        return ()
    found = []
    for item in given:
        if isinstance(item, int):
            found.append(item)
        elif names is None:
            raise InvalidArgumentError(f"option 'donate_argnums' names input {item!r}, but this program's inputs have "
                                       "no names here: give positions (0 is the first input)", plugin=target.plugin)
        elif item not in names:
            raise InvalidArgumentError(f"option 'donate_argnums' names input {item!r}, which the program does not "
                                       f"take; its inputs: {', '.join(names)}", plugin=target.plugin)
        else:
            found.append(names.index(item))
    if names is not None and max(found) >= len(names):
        raise InvalidArgumentError(f"option 'donate_argnums' names input {max(found)}; the program takes {len(names)} "
                                   f"input(s) (0 to {len(names) - 1})", plugin=target.plugin)
    donation = target.attributes.get("donation")
    if donation != "in place":
        why = f"its attribute 'donation' is {donation!r}" if donation else "its plugin gives no input's memory away"
        warn_at_caller(f"{target.selector} does not donate inputs ({why}): donate_argnums has no effect, and the "
                       "inputs stay valid after each call", UserWarning)
        return ()
    return tuple(sorted(set(found)))


def apply(target: Target, prog: programs.Program, donate: tuple[int, ...]) -> tuple[programs.Program, bool]:
    """(``prog`` with ``donate`` marked, whether it was written again: then
    as an artifact of the backend's StableHLO version). Warns of each input
    no output of its type takes."""
    version = target_version_of(target)
    if not donate or prog.format != "stablehlo" or version is None:
        return prog, False
    data, aliases = target.link.converter.donate(prog.data, version, donate, plugin=target.plugin)
    unmatched = [i for i in donate if i not in aliases]
    if unmatched:
        warn_at_caller(f"donate_argnums: no output has the shape and type of input(s) "
                       f"{', '.join(map(str, unmatched))}, so nothing takes their memory: not donated", UserWarning)
    return programs.Program("stablehlo", data), True
