"""The child side of a probe (see nx_hal.probe): loads one plugin, creates a
client, lists its devices, and prints one JSON answer on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


def _main() -> int:
    from nx_hal.errors import NxHalError
    from nx_hal.library import open_library

    request = json.loads(sys.stdin.read())
    info: dict[str, str] | None = None
    try:
        library = open_library(request["library"], request["name"])
        info = library.info.to_dict()
        client = library.create_client(request["options"], request["name"])
        devices = describe_devices(client)
        report = {"info": info, "diagnostics": client.diagnostics, "devices": devices}
        answer: dict[str, Any] = {"ok": True, "code": "OK", "message": "", "report": report}
    except NxHalError as exc:
        # The plugin info is worth showing even when the client failed.
        answer = {"ok": False, "code": exc.code, "message": exc.message, "report": {"info": info}}
    print(json.dumps(answer))
    return 0


def describe_devices(client: Any) -> list[dict[str, Any]]:
    from nx_hal.device import KIND_NAMES
    from nx_hal.native import check, ffi, lib, text

    api = client.library.api
    out = []
    for handle in client.device_handles:
        info = ffi.new("nxhal_device_info_t*")
        info.struct_size = ffi.sizeof("nxhal_device_info_t")
        check(api, lib.nxhal_call_device_info(api, handle, info), client.plugin)
        out.append({"kind": KIND_NAMES.get(info.kind, "other"), "name": text(info.name)})
    return out


if __name__ == "__main__":
    sys.exit(_main())
