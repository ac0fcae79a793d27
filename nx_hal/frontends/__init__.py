"""Front ends: a framework's own program object as bytes nx_hal compiles.

A JAX lowering (``jax.jit(f).lower(*args)``), a JAX export
(``jax.export.export(jax.jit(f))(*args)``) or an export's serialized bytes
(format ``"jax-export"``) become StableHLO, with where they came from
(:class:`Origin`): the names of their flattened inputs and outputs and the
platforms they were lowered for. Nothing here imports a framework unless the
user handed over one of its objects.
"""

from __future__ import annotations

from nx_hal.frontends.origin import Lowered, Origin

__all__ = ["Origin", "Lowered", "recognize"]


def recognize(program: object, format: str | None) -> Lowered | None:
    """``program`` as StableHLO when it is a framework's object nx_hal reads
    (or bytes given with format ``"jax-export"``); None for anything else."""
    module = type(program).__module__
    if module.startswith(("jax.", "jaxlib.")) or format == "jax-export":
        from nx_hal.frontends import from_jax

        return from_jax.lowered(program, format)
    return None
