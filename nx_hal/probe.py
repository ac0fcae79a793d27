"""Probing a plugin in a child process, so a crash, a hang or an ``exit()`` in
a vendor SDK becomes that plugin's reason instead of taking the asker down.

The child runs ``python -m nx_hal._probe_child`` with a JSON request on stdin; it answers
with one JSON object on stdout.

Verdicts are kept in the store's ``probe`` section (nx_hal.store) so that a warm
start reads a file instead of starting a Python child per plugin. The key
(:func:`probe_key`) holds everything that can change what a probe finds: the
library's resolved path, size, mtime and inode, the plugin's name and
options, the nx_hal version and Python executable, the boot id (a reboot is
when drivers and devices usually change), and the environment variables
that plugins and vendor SDKs read (:data:`PROBE_ENV_PREFIXES`,
:data:`PROBE_ENV_NAMES`). Failed verdicts are kept too, with their reason
(a crash or a hang costs its timeout once, not at every start);
``nx-hal cache clear probe``, or ``probe_cache = false``, probes again.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nx_hal.child import OUT_OF_MEMORY, Child, memory_limit, out_of_memory_error, ran_out_of_memory
from nx_hal.errors import DeadlineExceededError
from nx_hal.store import Store
from nx_hal.version import __version__

__all__ = [
    "ProbeResult", "probe_in_child", "cached_probe", "probe_key", "PROBE_ENV_PREFIXES", "PROBE_ENV_NAMES",
    "child_probes", "probe_env", "SECTION",
]

#: Environment variables whose prefix is one of these are part of the key:
#: nx_hal's own settings, the plugins' (NXHAL_TPU_BACKEND_PATHS, ...), and
#: what the SDKs behind them read (libtpu, XLA, JAX/PJRT, CUDA, OpenVINO and
#: the oneDNN inside it, whose ISA cap changes a device's int8 attribute, Poplar).
PROBE_ENV_PREFIXES: Final = (
    "NX_HAL_", "NXHAL_", "TPU_", "XLA_", "JAX_", "PJRT_", "CUDA_", "NVIDIA_", "OV_", "OPENVINO_",
    "ONEDNN_", "DNNL_", "POPLAR_", "IPUOF_", "POPART_",
)
#: Single variables that are part of the key: where the dynamic linker and
#: the child's Python look for libraries and modules.
PROBE_ENV_NAMES: Final = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX")

SECTION: Final = "probe"
# 2: the report describes each device in full (Device._describe()).
_CACHE_FORMAT: Final = 2
# The verdicts of a probe that crashed, hung or exited: say they were cached.
_REMEMBERED_FAILURES: Final = ("INTERNAL", "DEADLINE_EXCEEDED")
# Probes spawned in this process (tests assert a warm start spawns none).
child_probes = 0


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    code: str  # "OK" or a status code name
    message: str
    report: dict[str, Any]
    cached: bool = False  # read from the probe cache, no child ran


def probe_in_child(library: str, name: str, options: dict[str, Any], timeout: float,
                   memory_limit: int | None = None) -> ProbeResult:
    """The probe's verdict from a child (nx_hal.child) limited to ``timeout``
    seconds and ``memory_limit`` bytes (None: the setting child_memory_limit).
    A probe killed at its deadline is DEADLINE_EXCEEDED, one that ran out of
    memory RESOURCE_EXHAUSTED (the outcomes "timed-out", "out-of-memory")."""
    global child_probes
    child_probes += 1
    request = json.dumps({"library": library, "name": name, "options": options})
    # NX_HAL_VENDOR_LOGS=1 asks to see the SDKs' own output: the probe's
    # child is where they print it now, so its stderr is the user's (and a
    # crash's reason then goes without the stderr tail). Otherwise the
    # child's stderr is held back here already: plugins need not hold back
    # the SDK's own (the tpu plugin does so by redirecting fd 2 to a file,
    # whose lines an abort would take with it), so a crash's reason ends
    # with the vendor's last words.
    child = Child("nx_hal._probe_child", what=f"the probe of plugin '{name}'", memory_limit=memory_limit,
                  env={**os.environ, "NX_HAL_VENDOR_LOGS": "1"}, inherit_stderr=_vendor_logs())
    try:
        stdout = child.communicate(request.encode(), timeout).decode(errors="replace")
    except DeadlineExceededError:
        return ProbeResult(False, "DEADLINE_EXCEEDED",
                           f"probe did not finish within {timeout:g} s (the plugin hangs) and was killed", {})
    returncode, stderr = child.returncode, child.stderr_text
    assert returncode is not None
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        answer = None
    if not isinstance(answer, dict):
        answer = None
    died = returncode < 0 or answer is None
    if (died and ran_out_of_memory(stderr)) or (answer is not None and answer.get("outcome") == OUT_OF_MEMORY):
        error = out_of_memory_error(f"the probe of plugin '{name}'", child.memory_limit)
        return ProbeResult(False, error.code, error.message, {})
    if returncode < 0:
        try:
            signame = signal.Signals(-returncode).name
        except ValueError:
            signame = f"signal {-returncode}"
        return ProbeResult(False, "INTERNAL", f"probe crashed ({signame}){_tail(stderr)}", {})
    if answer is None:
        # The plugin called exit() (or printed over our answer) during its probe.
        return ProbeResult(False, "INTERNAL",
                           f"probe exited with status {returncode} without an answer{_tail(stderr)}", {})
    return ProbeResult(bool(answer["ok"]), answer["code"], answer["message"], answer.get("report", {}))


def _vendor_logs() -> bool:
    return os.environ.get("NX_HAL_VENDOR_LOGS", "") not in ("", "0")


def _tail(stderr: str | None) -> str:
    lines = [line for line in (stderr or "").strip().splitlines() if line.strip()]
    return (": " + " | ".join(lines[-3:])) if lines else ""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def probe_key(library: str, name: str, options: dict[str, Any]) -> str | None:
    """The cache key of a probe; None when the library cannot be stat'ed
    (nothing to cache: the probe fails anyway)."""
    try:
        resolved = os.path.realpath(library)
        st = os.stat(resolved)
    except OSError:
        return None
    env = probe_env()
    material = {
        "format": _CACHE_FORMAT, "nx_hal": __version__, "python": sys.executable, "boot": _boot_id(),
        "library": resolved, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
        "name": name, "options": options, "env": env,
        # A verdict reached under one memory limit (out of memory, or a
        # crash it caused) says nothing of another: a new limit probes again.
        "memory_limit": memory_limit(),
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def probe_env() -> list[tuple[str, str]]:
    """The environment variables that can change what a probe finds, sorted."""
    return sorted((k, v) for k, v in os.environ.items() if k.startswith(PROBE_ENV_PREFIXES) or k in PROBE_ENV_NAMES)


def _read_cached(store: Store, key: str) -> ProbeResult | None:
    data = store.get_json(SECTION, key)
    if data is None or data.get("format") != _CACHE_FORMAT:
        return None
    try:
        return ProbeResult(bool(data["ok"]), str(data["code"]), str(data["message"]), dict(data["report"]),
                           cached=True)
    except (KeyError, TypeError, ValueError):
        return None  # not a verdict this version wrote: probe again


def _write_cached(store: Store, key: str, result: ProbeResult) -> None:
    """A store that cannot be written only costs the next start a probe."""
    store.put_json(SECTION, key, {"format": _CACHE_FORMAT, "ok": result.ok, "code": result.code,
                                  "message": result.message, "report": result.report})


def cached_probe(library: str, name: str, options: dict[str, Any], timeout: float,
                 store: Store | None) -> ProbeResult:
    """The probe's verdict from ``store`` when its key matches, else from a
    child (then stored). ``store`` None: always a child."""
    key = probe_key(library, name, options) if store is not None else None
    # Whoever asks for the SDKs' own output wants the probe that prints it.
    if store is not None and key is not None and not _vendor_logs():
        found = _read_cached(store, key)
        if found is not None:
            if found.ok or found.code not in _REMEMBERED_FAILURES:
                return found
            # Say where the verdict came from, and how to probe again.
            return ProbeResult(False, found.code, f"{found.message} (a cached verdict; `nx-hal cache clear probe` "
                               "probes again)", found.report, cached=True)
    result = probe_in_child(library, name, options, timeout)
    if store is not None and key is not None:
        _write_cached(store, key, result)
    return result
