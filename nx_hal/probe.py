"""Probing a plugin in a child process, so a crash or a hang in a vendor SDK
becomes that plugin's reason instead of taking the asker down.

The child runs ``python -m nx_hal._probe_child`` with a JSON request on stdin; it answers
with one JSON object on stdout.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from nx_hal.child import module_command

__all__ = ["ProbeResult", "probe_in_child"]


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    code: str  # "OK" or a status code name
    message: str
    report: dict[str, Any]


def probe_in_child(library: str, name: str, options: dict[str, Any], timeout: float) -> ProbeResult:
    request = json.dumps({"library": library, "name": name, "options": options})
    try:
        proc = subprocess.run(
            module_command("nx_hal._probe_child"),
            input=request, capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return ProbeResult(False, "DEADLINE_EXCEEDED",
                           f"probe did not finish within {timeout:g} s (the plugin hangs) and was killed", {})
    if proc.returncode < 0:
        try:
            signame = signal.Signals(-proc.returncode).name
        except ValueError:
            signame = f"signal {-proc.returncode}"
        tail = _tail(proc.stderr)
        return ProbeResult(False, "INTERNAL", f"probe crashed ({signame}){tail}", {})
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return ProbeResult(False, "INTERNAL",
                           f"probe exited with status {proc.returncode} without an answer{_tail(proc.stderr)}", {})
    return ProbeResult(bool(answer["ok"]), answer["code"], answer["message"], answer.get("report", {}))


def _tail(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return (": " + " | ".join(lines[-3:])) if lines else ""
