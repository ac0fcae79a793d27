"""What a front end makes of a framework's object: the program (its format
and bytes) and where it came from."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Origin", "Lowered"]


@dataclass(frozen=True)
class Origin:
    """Where a program from a framework came from."""

    framework: str  # "jax"
    inputs: tuple[str, ...]  # each flattened argument's path: "arg0.w", "arg1"
    outputs: tuple[str, ...]  # each flattened result's path, or "result" for a single array
    platforms: tuple[str, ...]  # what it was lowered for ("cpu", "cuda", "tpu"), () when unknown


@dataclass(frozen=True)
class Lowered:
    """A framework object as a program: its format, bytes and origin."""

    format: str
    data: bytes
    origin: Origin
