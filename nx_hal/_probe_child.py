"""The child side of a probe (see nx_hal.probe): loads one plugin, creates a
client, lists its devices, and prints one JSON answer on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


def _main() -> int:
    from nx_hal.child import OUT_OF_MEMORY
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
    except MemoryError:  # the child's memory limit (nx_hal.child): the parent names it
        answer = {"ok": False, "code": "RESOURCE_EXHAUSTED", "message": "out of memory", "outcome": OUT_OF_MEMORY,
                  "report": {"info": info}}
    print(json.dumps(answer))
    return 0


def describe_devices(client: Any) -> list[dict[str, Any]]:
    """Each device's description (nx_hal.description): the parent lists its
    devices from these without loading the plugin (the client is made there
    on a device's first use)."""
    from nx_hal.description import DeviceDescription

    api = client.library.api
    return [DeviceDescription.read(api, h, client.plugin).to_report() for h in client.device_handles]

if __name__ == "__main__":
    sys.exit(_main())
