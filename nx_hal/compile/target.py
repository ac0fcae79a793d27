"""What the pipeline needs of a device (nx_hal.device.Device provides it):
what anything it holds sees of it (nx_hal.held), its formats and
attributes, its plugin in this process (its link), and its two native calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from nx_hal.held import HeldOn, PluginOf

if TYPE_CHECKING:
    from nx_hal.cache import CompileCache
    from nx_hal.converter import Converter
    from nx_hal.executable import Executable
    from nx_hal.programs import Program

__all__ = ["Target", "TargetLink"]


class TargetLink(PluginOf, Protocol):
    @property
    def converter(self) -> Converter: ...

    @property
    def compile_cache(self) -> CompileCache | None: ...

    @property
    def spec(self) -> Any: ...  # PluginSpec: its compile_options_model


class Target(HeldOn, Protocol):
    @property
    def formats(self) -> tuple[str, ...]: ...

    @property
    def attributes(self) -> dict[str, object]: ...

    @property
    def link(self) -> TargetLink: ...

    def _compile(self, prog: Program, options: dict[str, object]) -> Executable: ...

    def _deserialize(self, data: bytes | memoryview, *, authenticated: bool) -> Executable: ...
