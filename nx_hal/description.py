"""What a plugin says of one of its devices, apart from any client in this
process, as PJRT's PJRT_DeviceDescription is apart from PJRT_Device: read
from a live client, or from the report of a probe made in a child (then this
process lists the device without loading the plugin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from nx_hal.native import check, ffi, lib, text
from nx_hal.options import from_c_value

__all__ = ["DeviceDescription", "KIND_NAMES"]

KIND_NAMES: Final = {0: "other", 1: "cpu", 2: "gpu", 3: "tpu", 4: "npu", 5: "ipu"}


@dataclass(frozen=True)
class DeviceDescription:
    """A device's kind, name, vendor, memory, compute units, the program
    formats it compiles, its compat key and its attributes. Immutable, so
    one description is shared by every Device object made for it."""

    kind: str
    name: str
    vendor: str
    memory_bytes: int
    compute_units: int
    formats: tuple[str, ...]
    compat_key: str
    attributes: dict[str, object]

    @classmethod
    def read(cls, api: Any, handle: Any, plugin: str) -> DeviceDescription:
        """What the plugin behind ``api`` says of its device ``handle``; raises its error."""
        info = ffi.new("nxhal_device_info_t*")
        info.struct_size = ffi.sizeof("nxhal_device_info_t")
        check(api, lib.nxhal_call_device_info(api, handle, info), plugin)
        count = ffi.new("size_t*")
        check(api, lib.nxhal_call_device_attribute_count(api, handle, count), plugin)
        attrs: dict[str, object] = {}
        attr = ffi.new("nxhal_attribute_t*")
        for i in range(count[0]):
            attr.struct_size = ffi.sizeof("nxhal_attribute_t")
            check(api, lib.nxhal_call_device_attribute(api, handle, i, attr), plugin)
            attrs[text(attr.name)] = from_c_value(attr)
        return cls(
            kind=KIND_NAMES.get(info.kind, "other"), name=text(info.name), vendor=text(info.vendor),
            memory_bytes=int(info.memory_bytes), compute_units=int(info.compute_units),
            formats=tuple(text(info.formats[i]) for i in range(info.num_formats)),
            compat_key=text(info.compat_key), attributes=attrs,
        )

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> DeviceDescription:
        """From ``to_report()``'s data (a probe's answer); KeyError, TypeError
        or ValueError where it is not such data."""
        attributes = report["attributes"]
        if not isinstance(attributes, dict):
            raise TypeError(f"attributes must be an object, not {type(attributes).__name__}")
        return cls(
            kind=str(report["kind"]), name=str(report["name"]), vendor=str(report["vendor"]),
            memory_bytes=int(report["memory_bytes"]), compute_units=int(report["compute_units"]),
            formats=tuple(str(f) for f in report["formats"]), compat_key=str(report["compat_key"]),
            attributes=dict(attributes),
        )

    def to_report(self) -> dict[str, Any]:
        """The description as JSON-ready data (what a probe child prints)."""
        return {"kind": self.kind, "name": self.name, "vendor": self.vendor, "memory_bytes": self.memory_bytes,
                "compute_units": self.compute_units, "formats": list(self.formats),
                "compat_key": self.compat_key, "attributes": dict(self.attributes)}
