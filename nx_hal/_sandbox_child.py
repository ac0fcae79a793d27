"""The child side of a sandboxed compile (see nx_hal.sandbox): loads the
plugin, creates a client with the parent's options, and compiles each
program it is sent on the same device, one JSON request per line on stdin,
one JSON reply per line on stdout. A program that crashes or hangs the
vendor's parser or compiler ends this process, not the user's.

ONNX models pass ``onnx.checker`` first (where onnx is installed): a model
that is not valid ONNX (a node with too few inputs, a graph that is not
topologically sorted) is refused before the vendor's reader sees it; fuzzing
found OpenVINO crashing and hanging on exactly those.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# protobuf refuses messages over 2 GiB; bigger models skip the checker.
_CHECKER_LIMIT = (2 << 30) - 1


def check_onnx(data: bytes) -> str | None:
    """None if ``onnx.checker`` accepts the model (or onnx is absent), else its complaint."""
    if len(data) > _CHECKER_LIMIT:
        return None
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load_from_string(data)
    except MemoryError:  # the child's memory limit, not the model's fault: the caller says so
        raise
    except Exception as exc:  # protobuf's DecodeError and friends
        return f"not an ONNX ModelProto ({type(exc).__name__}: {exc})"
    try:
        onnx.checker.check_model(model)
    except MemoryError:
        raise
    except Exception as exc:  # onnx.checker.ValidationError, and C++ errors it passes through
        return " ".join(str(exc).split())
    return None


class _Session:
    """The plugin's client in this child, made once per (library, options)."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.devices: list[Any] = []
        self.client: Any = None

    def device(self, request: dict[str, Any]) -> Any:
        from nx_hal.library import open_library
        from nx_hal.plugin import PluginLink

        key = json.dumps([request["library"], request["plugin"], request["client_options"]], sort_keys=True)
        if key != self.key:
            self.devices, self.client, self.key = [], None, None
            library = open_library(request["library"], request["plugin"])
            self.client = library.create_client(request["client_options"], request["plugin"])
            link = PluginLink.attach(request["plugin"], self.client, client_options=request["client_options"])
            self.devices = [link.device(i) for i in range(len(link.descriptions))]
            self.key = key
        index = int(request["device"])
        if not 0 <= index < len(self.devices):
            raise IndexError(f"the plugin has {len(self.devices)} devices here, not device {index}")
        return self.devices[index]


def _serve_one(session: _Session, request: dict[str, Any]) -> dict[str, Any]:
    from nx_hal import programs
    from nx_hal.errors import NxHalError

    os.chdir(request["cwd"])  # relative paths in options mean what they mean to the caller
    data = Path(request["program"]).read_bytes()
    extra = Path(request["program2"]).read_bytes() if request.get("program2") else None
    if request["format"] == "onnx" and extra is None:
        complaint = check_onnx(data)
        if complaint is not None:
            return {"ok": False, "reason": "malformed", "code": "INVALID_ARGUMENT",
                    "message": f"the model is not valid ONNX (onnx.checker: {complaint})"}
    try:
        device = session.device(request)
    except NxHalError as exc:
        return {"ok": False, "reason": "no-sandbox", "code": exc.code, "message": exc.message}
    except IndexError as exc:
        return {"ok": False, "reason": "no-sandbox", "code": "UNAVAILABLE", "message": str(exc)}
    print(f"stage: compile {request['format']}", file=sys.stderr, flush=True)
    try:
        exe = device._compile(programs.Program(request["format"], data, extra), request["options"])
    except NxHalError as exc:
        return {"ok": False, "reason": "error", "code": exc.code, "message": exc.message}
    blob = None
    if request.get("serialize"):
        print("stage: serialize", file=sys.stderr, flush=True)
        try:
            Path(request["output"]).write_bytes(exe._serialize())
            blob = request["output"]
        except NxHalError:
            pass  # a plugin without serialization: the caller compiles again itself
    return {"ok": True, "blob": blob}


def _main() -> int:
    from nx_hal.child import OUT_OF_MEMORY

    session = _Session()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = _serve_one(session, request)
        except MemoryError:  # the limit nx_hal.child set: a reply the parent turns into its error
            reply = {"ok": False, "reason": OUT_OF_MEMORY, "message": "out of memory"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
