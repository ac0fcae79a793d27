"""Probing a plugin in a child process, so a crash, a hang or an ``exit()`` in
a vendor SDK becomes that plugin's reason instead of taking the asker down.

The child runs ``python -m nx_hal._probe_child`` with a JSON request on stdin; it answers
with one JSON object on stdout.

Verdicts are cached on disk (``<cache_dir>/probe/<key>.json``) so that a warm
start reads a file instead of starting a Python child per plugin. The key
(:func:`probe_key`) holds everything that can change what a probe finds: the
library's resolved path, size, mtime and inode, the plugin's name and
options, the nx_hal version and Python executable, the boot id (a reboot is
when drivers and devices usually change), and the environment variables
that plugins and vendor SDKs read (:data:`PROBE_ENV_PREFIXES`,
:data:`PROBE_ENV_NAMES`). Failed verdicts are kept too, with their reason
(a crash or a hang costs its timeout once, not at every start); remove the
directory, or set ``probe_cache = false``, to probe again.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nx_hal.cache_files import touch
from nx_hal.child import module_command
from nx_hal.version import __version__

__all__ = [
    "ProbeResult", "probe_in_child", "cached_probe", "probe_key", "PROBE_ENV_PREFIXES", "PROBE_ENV_NAMES",
    "child_probes", "probe_env", "read_json", "write_json",
]

#: Environment variables whose prefix is one of these are part of the key:
#: nx_hal's own settings, the plugins' (NXHAL_TPU_BACKEND_PATHS, ...), and
#: what the SDKs behind them read (libtpu, XLA, JAX/PJRT, CUDA, OpenVINO, Poplar).
PROBE_ENV_PREFIXES: Final = (
    "NX_HAL_", "NXHAL_", "TPU_", "XLA_", "JAX_", "PJRT_", "CUDA_", "NVIDIA_", "OV_", "OPENVINO_",
    "POPLAR_", "IPUOF_", "POPART_",
)
#: Single variables that are part of the key: where the dynamic linker and
#: the child's Python look for libraries and modules.
PROBE_ENV_NAMES: Final = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX")

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


def probe_in_child(library: str, name: str, options: dict[str, Any], timeout: float) -> ProbeResult:
    import subprocess  # only a cold start spawns a child

    global child_probes
    child_probes += 1
    request = json.dumps({"library": library, "name": name, "options": options})
    # NX_HAL_VENDOR_LOGS=1 asks to see the SDKs' own output: the probe's
    # child is where they print it now, so its stderr is the user's (and a
    # crash's reason then goes without the stderr tail).
    vendor_logs = _vendor_logs()
    try:
        proc = subprocess.run(
            module_command("nx_hal._probe_child"),
            input=request, stdout=subprocess.PIPE, stderr=None if vendor_logs else subprocess.PIPE,
            text=True, timeout=timeout,
            # The child's stderr is held back here already: plugins need not
            # hold back the SDK's own (the tpu plugin does so by redirecting
            # fd 2 to a file, whose lines an abort would take with it), so a
            # crash's reason ends with the vendor's last words.
            env={**os.environ, "NX_HAL_VENDOR_LOGS": "1"},
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
        # The plugin called exit() (or printed over our answer) during its probe.
        return ProbeResult(False, "INTERNAL",
                           f"probe exited with status {proc.returncode} without an answer{_tail(proc.stderr)}", {})
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
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def probe_env() -> list[tuple[str, str]]:
    """The environment variables that can change what a probe finds, sorted."""
    return sorted((k, v) for k, v in os.environ.items() if k.startswith(PROBE_ENV_PREFIXES) or k in PROBE_ENV_NAMES)


def read_json(path: Path) -> Any:
    """A cache file's JSON; None when missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: Any) -> None:
    """Atomically (rename), so concurrent starts read a whole file or none.
    A cache that cannot be written only costs the next start its work."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probe-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError:
        pass


def _read_cached(path: Path) -> ProbeResult | None:
    try:
        data = json.loads(path.read_text())
        if data.get("format") != _CACHE_FORMAT:
            return None
        result = ProbeResult(bool(data["ok"]), str(data["code"]), str(data["message"]), dict(data["report"]),
                             cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, or torn by a concurrent writer: probe again
    touch(path)  # used just now: the last to be evicted (nx_hal.cache_files)
    return result


def _write_cached(path: Path, result: ProbeResult) -> None:
    """Atomically (rename), so concurrent starts read a whole verdict or none.
    A cache that cannot be written only costs the next start a probe."""
    write_json(path, {"format": _CACHE_FORMAT, "ok": result.ok, "code": result.code, "message": result.message,
                      "report": result.report})


def cached_probe(library: str, name: str, options: dict[str, Any], timeout: float,
                 cache_dir: Path | None) -> ProbeResult:
    """The probe's verdict from ``cache_dir`` when its key matches, else from a
    child (then cached). ``cache_dir`` None: always a child."""
    key = probe_key(library, name, options) if cache_dir is not None else None
    path = cache_dir / f"{key}.json" if cache_dir is not None and key is not None else None
    # Whoever asks for the SDKs' own output wants the probe that prints it.
    if path is not None and not _vendor_logs():
        found = _read_cached(path)
        if found is not None:
            if found.ok or found.code not in _REMEMBERED_FAILURES:
                return found
            # Say where the verdict came from, and how to probe again.
            return ProbeResult(False, found.code, f"{found.message} (cached verdict {path}; remove it to probe "
                               "again)", found.report, cached=True)
    result = probe_in_child(library, name, options, timeout)
    if path is not None:
        _write_cached(path, result)
    return result
