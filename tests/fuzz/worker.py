"""A long-lived worker: feeds inputs of one path to one plugin.

stdin: inputs, each a 4-byte little-endian length and the bytes.
stdout: one JSON line at start ({"ready": seeds} or {"unavailable": why}),
then one per input: {"r": "ok" | "error" | "other" | "skip", "t": type, "m": message}.
A crash or hang is seen by the parent, which replaces the worker."""

from __future__ import annotations

import json
import os
import struct
import sys
import traceback
from collections.abc import Mapping

if sys.version_info >= (3, 11):
    import tomllib as tomllib  # novermin (re-exported for targets.make_config)
else:  # Python 3.10
    import tomli as tomllib  # noqa: F401  (re-exported for targets.make_config)


def _reply(out: object, value: Mapping[str, object]) -> None:
    os.write(1, (json.dumps(value) + "\n").encode())


def _read_exact(n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sys.stdin.buffer.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def classify(exc: BaseException) -> str:
    """error: the clean refusals the API promises; other: anything else."""
    from nx_hal.errors import NxHalError
    from tests.fuzz.targets import SkipInput

    if isinstance(exc, SkipInput):
        return "skip"
    return "error" if isinstance(exc, NxHalError) else "other"  # ConversionError is an NxHalError


def main(argv: list[str]) -> int:
    path, plugin, workdir = argv
    import nx_hal
    from tests.fuzz.targets import PATHS, encode

    spec = PATHS[path]
    try:
        feeder = spec.feeder(plugin, workdir)
        seeds = feeder.seeds()
    except nx_hal.UnavailableError as exc:
        _reply(None, {"unavailable": exc.message})
        return 0
    except Exception as exc:  # a feeder that cannot start is the harness's failure, said plainly
        _reply(None, {"unavailable": f"worker failed to start: {type(exc).__name__}: {exc}"})
        traceback.print_exc()
        return 0
    _reply(None, {"ready": [encode(s) for s in seeds]})
    while True:
        head = _read_exact(4)
        if head is None:
            return 0
        data = _read_exact(struct.unpack("<I", head)[0])
        if data is None:
            return 0
        try:
            feeder.feed(data)
            result = {"r": "ok"}
        except Exception as exc:
            kind = classify(exc)
            result = {"r": kind, "t": type(exc).__name__, "m": str(exc)[:300]}
            if kind == "other":
                traceback.print_exc()
        _reply(None, result)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
