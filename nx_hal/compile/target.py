"""What the pipeline needs of a device (nx_hal.device.Device provides it):
its facts, the record of its plugin, and its two native calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nx_hal.cache import CompileCache
    from nx_hal.converter import Converter
    from nx_hal.executable import Executable
    from nx_hal.programs import Program

__all__ = ["Target", "TargetRecord"]


class TargetRecord(Protocol):
    converter: Converter
    compile_cache: CompileCache | None
    spec: Any  # PluginSpec: its compile_options_model


class Target(Protocol):
    kind: str
    formats: tuple[str, ...]
    compat_key: str
    attributes: dict[str, object]

    @property
    def plugin(self) -> str: ...

    @property
    def selector(self) -> str: ...

    @property
    def record(self) -> TargetRecord: ...

    def _compile(self, prog: Program, options: dict[str, object]) -> Executable: ...

    def _deserialize(self, data: bytes | memoryview) -> Executable: ...
