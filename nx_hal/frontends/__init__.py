"""Front ends: a framework's own program object as bytes nx_hal compiles.

A JAX lowering (``jax.jit(f).lower(*args)``), a JAX export
(``jax.export.export(jax.jit(f))(*args)``) or an export's serialized bytes
(format ``"jax-export"``) become StableHLO; a ``torch.nn.Module`` with
example arguments or a ``torch.export.ExportedProgram`` becomes ONNX; each
with where it came from
(:class:`Origin`): the names of their flattened inputs and outputs and the
platforms they were lowered for. Nothing here imports a framework unless the
user handed over one of its objects.
"""

from __future__ import annotations

import sys

from nx_hal.frontends.origin import Lowered, Origin

__all__ = ["Origin", "Lowered", "recognize"]


def recognize(program: object, format: str | None, example_args: object = None) -> Lowered | None:
    """``program`` as a program when it is a framework's object nx_hal reads
    (or bytes given with format ``"jax-export"``); None for anything else.
    ``example_args`` are a torch module's example inputs."""
    module = type(program).__module__
    if module.startswith(("jax.", "jaxlib.")) or format == "jax-export":
        from nx_hal.frontends import from_jax

        found = from_jax.lowered(program, format)
    elif module.startswith("torch.") or _torch_module(program):
        from nx_hal.frontends import from_torch

        found = from_torch.lowered(program, example_args)
    else:
        found = None
    if example_args is not None and (found is None or found.origin.framework != "torch"):
        from nx_hal.errors import InvalidArgumentError

        raise InvalidArgumentError("example_args are a torch.nn.Module's example inputs; this program is a "
                                   f"{module}.{type(program).__name__}")
    return found


def _torch_module(program: object) -> bool:
    """A user's own torch.nn.Module subclass (its class lives in their module):
    judged by the class hierarchy, importing nothing."""
    return "torch" in sys.modules and any(
        c.__module__.startswith("torch.") for c in type(program).__mro__[1:-1])
