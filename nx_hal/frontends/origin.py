"""What a front end makes of a framework's object: the program (its format
and bytes) and where it came from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Origin", "Lowered"]


@dataclass(frozen=True)
class Origin:
    """Where a program from a framework came from."""

    framework: str  # "jax"
    inputs: tuple[str, ...]  # each flattened argument's path: "arg0.w", "arg1"
    outputs: tuple[str, ...]  # each flattened result's path, or "result" for a single array
    platforms: tuple[str, ...]  # what it was lowered for ("cpu", "cuda", "tpu"), () when unknown
    # A program of symbolic shapes (a JAX export's dims "b", "2*b"): its
    # inputs' and outputs' (dtype name, dims), a symbolic dim as its text, and
    # ``specialize``, which makes the program for {input name: concrete dims}.
    ports: tuple[tuple[tuple[str, tuple[int | str, ...]], ...], tuple[tuple[str, tuple[int | str, ...]], ...]] | None = None
    specialize: Callable[[dict[str, list[int]]], Lowered] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Lowered:
    """A framework object as a program: its format, bytes and origin."""

    format: str
    data: bytes
    origin: Origin
