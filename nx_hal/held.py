"""What buffers, executables and the sandbox need of the device that holds
them, as protocols (nx_hal.device.Device provides them): those modules sit
below nx_hal.device, which makes them, and name its type only through these,
so the import graph has no cycle, type-checking imports included."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["HeldOn", "PluginOf"]


class PluginOf(Protocol):
    """A device's plugin in this process (nx_hal.plugin.PluginLink), as the
    modules below it read it."""

    @property
    def name(self) -> str: ...

    @property
    def library(self) -> str: ...  # the plugin library's path

    @property
    def spec(self) -> Any: ...  # PluginSpec | None: its options models

    @property
    def descriptions(self) -> Sequence[Any]: ...  # each device's DeviceDescription

    def device(self, index: int) -> HeldOn: ...  # its device ``index``

    @property
    def client_options(self) -> dict[str, Any]: ...

    @property
    def compile_cache(self) -> Any: ...  # CompileCache | None


class HeldOn(Protocol):
    """A device, as what it holds (buffers, executables) sees it."""

    @property
    def plugin(self) -> str: ...

    @property
    def selector(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def compat_key(self) -> str: ...

    @property
    def link(self) -> PluginOf: ...

    @property
    def client(self) -> Any: ...

    @property
    def handle(self) -> Any: ...

    @property
    def _api(self) -> Any: ...

    @property
    def _api_addr(self) -> int: ...

    def _live(self) -> Any: ...  # connects the device; its function table

    def put(self, array: Any, *, zero_copy: bool = False) -> Any: ...  # a Buffer

    def _put_alias(self, array: object) -> Any: ...  # a Buffer
