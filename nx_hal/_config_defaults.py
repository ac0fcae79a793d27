"""What the plain settings (config.py) and the pydantic model
(_config_model.py) share: how a list is read from an environment variable.
Its own module so that the model does not import the loader that imports it."""

from __future__ import annotations

__all__ = ["split_list", "default_child_memory_limit"]

# Where the memory this process may use is capped: physical memory, and the
# cgroup's limit (v2, then v1) when a container sets a lower one.
_MEMORY_CAPS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def default_child_memory_limit() -> int:
    """The default of the setting child_memory_limit: three quarters of the
    memory this process may use (physical memory, or its cgroup's limit when
    that is lower), in whole MiB; 0 (no limit) where neither can be read.
    A child that would take more is stopped before the machine swaps or its
    OOM killer picks a process, this one perhaps."""
    caps = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    caps.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    for path in _MEMORY_CAPS:
        try:
            with open(path) as fh:
                caps.append(int(fh.read().strip()))  # "max" (no limit) is not a number
        except (OSError, ValueError):
            pass
    if not caps:
        return 0
    return (min(caps) * 3 // 4) >> 20 << 20


def split_list(value: object) -> object:
    """Lists from the environment: JSON (``["tpu","cpu"]``) or comma-separated."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value
