"""A plugin as the core holds it: what a package registered (PluginSpec) and
the plugin's state in this process (PluginRecord: loaded or why not, its
devices, its compile cache, the converter its devices use)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nx_hal.cache import CompileCache
from nx_hal.converter import NO_CONVERTER, Converter
from nx_hal.device import Device
from nx_hal.errors import FailedPreconditionError
from nx_hal.library import PluginInfo, open_library

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["PluginSpec", "PluginRecord"]


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


@dataclass
class PluginRecord:
    """One plugin's state: ``loaded``, ``unavailable`` (no SDK or device: the
    reason says which), ``failed`` (any other error, with its code), or ``disabled``."""

    name: str
    spec: PluginSpec | None
    state: str = "pending"
    code: str = "OK"
    reason: str = ""
    info: PluginInfo | None = None
    diagnostics: str = ""
    devices: list[Device] = field(default_factory=list)
    compile_cache: CompileCache | None = None
    # The options its client was made with (a sandboxed compile makes the same client).
    client_options: dict[str, Any] = field(default_factory=dict)
    # Devices listed from the probe: the options connect() makes the client with.
    connect_options: dict[str, Any] | None = field(default=None, repr=False)
    # What its devices convert ONNX and verify StableHLO with (the registry's).
    converter: Converter = field(default=NO_CONVERTER, repr=False)

    def connect(self) -> None:
        """Makes this plugin's client in this process, for devices listed
        from its probe (Device._described): called on a device's first use.
        Raises the plugin's error if it cannot (the error of that use)."""
        with _connect_lock:
            if not self.devices or "client" not in _set_slots(self.devices[0]):
                self._connect()

    def _connect(self) -> None:
        spec = self.spec
        if spec is None:
            raise FailedPreconditionError(f"plugin '{self.name}' has no library", plugin=self.name)
        options = self.connect_options if self.connect_options is not None else self.client_options
        client = open_library(str(spec.library), spec.name).create_client(options, spec.name)
        live = [Device(self, client, h, i) for i, h in enumerate(client.device_handles)]
        if len(live) != len(self.devices):
            raise FailedPreconditionError(
                f"plugin '{self.name}' now has {len(live)} device(s), its probe found {len(self.devices)}: "
                "reconfigure (nx_hal.configure()) to list them again", plugin=self.name)
        for dev, now in zip(self.devices, live, strict=False):
            for slot in _set_slots(now):
                if slot not in ("record", "_tokens"):  # the device stays the one handed out
                    setattr(dev, slot, getattr(now, slot))
        self.diagnostics = client.diagnostics

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


_connect_lock = threading.Lock()


def _set_slots(device: Device) -> list[str]:
    """The slots of ``device`` that hold a value (without making its client)."""
    out = []
    for slot in Device.__slots__:
        try:
            object.__getattribute__(device, slot)
        except AttributeError:
            continue
        out.append(slot)
    return out
