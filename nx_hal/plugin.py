"""A plugin as the core holds it: what a package registered (PluginSpec),
what its devices reach it through in this process (PluginLink: its client,
compile cache and converter), and its state in the registry (PluginRecord:
loaded or why not, and its devices)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nx_hal.cache import CompileCache
from nx_hal.converter import NO_CONVERTER, Converter
from nx_hal.description import DeviceDescription
from nx_hal.device import Device
from nx_hal.errors import FailedPreconditionError
from nx_hal.library import Client, PluginInfo, open_library

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["PluginSpec", "PluginRecord", "PluginLink"]


@dataclass(frozen=True)
class PluginSpec:
    """What a package registered: a plugin name, its library and option models."""

    name: str
    library: Path
    options_model: type[BaseModel] | None = None
    compile_options_model: type[BaseModel] | None = None
    package: str | None = None
    package_version: str | None = None
    source: str = "entry point"


class PluginLink:
    """A plugin as this process reaches it, shared by its devices: its name,
    library, spec, client options, compile cache and converter, what each
    of its devices is (``descriptions``), and its client, made by the first
    call that needs one (a plugin listed from its probe loads nothing here
    until then). It holds its Device objects weakly and they hold it, so a
    registry replaced by configure() is freed, clients included, as soon as
    nothing made from it is alive, without a garbage collection."""

    __slots__ = ("name", "library", "spec", "client_options", "converter", "compile_cache", "descriptions",
                 "_client", "_devices", "_lock")

    def __init__(self, name: str, library: str, descriptions: tuple[DeviceDescription, ...], *,
                 spec: PluginSpec | None = None, client_options: dict[str, Any] | None = None,
                 converter: Converter = NO_CONVERTER, client: Client | None = None) -> None:
        self.name = name
        self.library = library
        self.spec = spec
        self.descriptions = descriptions
        # The options its client is made with (a sandboxed compile makes the same client).
        self.client_options: dict[str, Any] = dict(client_options or {})
        self.converter = converter
        self.compile_cache: CompileCache | None = None
        self._client = client
        self._devices: weakref.WeakValueDictionary[int, Device] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    @classmethod
    def attach(cls, name: str, client: Client, **kwargs: Any) -> PluginLink:
        """The link of a client made here: its devices described by the plugin now."""
        api = client.library.api
        descriptions = tuple(DeviceDescription.read(api, h, name) for h in client.device_handles)
        return cls(name, client.library.path, descriptions, client=client, **kwargs)

    def client(self) -> Client:
        """The plugin's client in this process, made on the first call; raises
        the plugin's error if it cannot be made (and tries again next call)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._connect()
                client = self._client
        return client

    def _connect(self) -> Client:
        client = open_library(self.library, self.name).create_client(self.client_options, self.name)
        if len(client.device_handles) != len(self.descriptions):
            raise FailedPreconditionError(
                f"plugin '{self.name}' now has {len(client.device_handles)} device(s), its probe found "
                f"{len(self.descriptions)}: reconfigure (nx_hal.configure()) to list them again", plugin=self.name)
        return client

    def device(self, index: int) -> Device:
        """The Device object of device ``index``: the one alive, else a new one."""
        with self._lock:
            found = self._devices.get(index)
            if found is None:
                found = self._devices[index] = Device(self, index)
            return found


@dataclass
class PluginRecord:
    """One plugin's state: ``loaded``, ``unavailable`` (no SDK or device: the
    reason says which), ``failed`` (any other error, with its code), or
    ``disabled``; once loaded, its ``link`` and its ``devices``."""

    name: str
    spec: PluginSpec | None
    state: str = "pending"
    code: str = "OK"
    reason: str = ""
    info: PluginInfo | None = None
    diagnostics: str = ""
    devices: list[Device] = field(default_factory=list)
    link: PluginLink | None = field(default=None, repr=False)
    # What its devices convert ONNX and verify StableHLO with (the registry's).
    converter: Converter = field(default=NO_CONVERTER, repr=False)

    def attach(self, link: PluginLink) -> None:
        """Lists the devices ``link`` describes as this plugin's."""
        self.link = link
        self.devices = [link.device(i) for i in range(len(link.descriptions))]

    def status_text(self) -> str:
        """``loaded``, ``unavailable: <reason>``, ``failed: <CODE>: <reason>`` or ``disabled: ...``."""
        if self.state in ("loaded", "pending"):
            return self.state
        if self.state == "failed":
            return f"failed: {self.code}: {self.reason}"
        return f"{self.state}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data: name, package, library, ABI, state, reason, devices."""
        spec = self.spec
        return {
            "name": self.name,
            "package": spec.package if spec else None,
            "package_version": spec.package_version if spec else None,
            "library": str(spec.library) if spec else None,
            "source": spec.source if spec else None,
            "abi_version": self.info.abi_version if self.info else None,
            "info": self.info.to_dict() if self.info else None,
            "state": self.state,
            "code": self.code,
            "reason": self.reason,
            "diagnostics": self.diagnostics,
            "devices": [d.selector for d in self.devices],
        }


