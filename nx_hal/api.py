"""The top-level API: a process-wide registry built from the config on first
use, device listing and selection, and the default device for scripts."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from nx_hal.config import LoadedConfig, load_config
from nx_hal.device import Device, current_device
from nx_hal.errors import InvalidArgumentError, UnavailableError
from nx_hal.executable import Executable
from nx_hal.buffer import Buffer
from nx_hal.registry import Registry
from nx_hal.selection import Report, select, warn_fallback
from nx_hal.selectors import KINDS, Selector

__all__ = [
    "configure", "registry", "plugins", "devices", "device", "is_available", "explain",
    "default_device", "set_default_device", "put", "compile",
]

_lock = threading.RLock()
_registry: Registry | None = None
_default: Device | None = None


def configure(
    overrides: dict[str, Any] | None = None,
    *,
    config_file: str | Path | None = None,
    no_config: bool = False,
    isolate_probe: bool | None = None,
) -> Registry:
    """(Re)builds the process-wide registry from the config; returns it.
    Called implicitly on first use with no arguments."""
    global _registry, _default
    loaded: LoadedConfig = load_config(overrides, config_file=config_file, no_config=no_config)
    reg = Registry(loaded)
    reg.discover()
    reg.load_all(isolate=isolate_probe)
    with _lock:
        _registry, _default = reg, None
    return reg


def registry() -> Registry:
    with _lock:
        if _registry is None:
            return configure()
        return _registry


def plugins() -> list[dict[str, Any]]:
    """Every plugin found: name, package, library, ABI version, state and reason."""
    return [r.to_dict() for r in registry().records.values()]


def devices(kind: str | None = None) -> list[Device]:
    """All devices of all loaded plugins, optionally of one kind."""
    if kind is not None and kind not in KINDS:
        raise InvalidArgumentError(f"unknown device kind '{kind}' (kinds: {', '.join(KINDS)})")
    return [d for d in registry().devices() if kind is None or d.kind == kind]


def _selectors(selector: str | Selector | None) -> tuple[list[Selector], bool]:
    if selector is None:
        return list(registry().loaded_config.config.prefer), False
    if isinstance(selector, Selector):
        return [selector], True
    try:
        return [Selector.parse(selector)], True
    except ValueError as exc:
        raise InvalidArgumentError(str(exc).splitlines()[-1] if "\n" in str(exc) else str(exc)) from None


def explain(selector: str | Selector | None = None, *, program_format: str | None = None) -> Report:
    """What ``device(selector)`` would choose and every choice skipped, with reasons."""
    sels, explicit = _selectors(selector)
    return select(registry(), sels, explicit=explicit, program_format=program_format)


def device(selector: str | Selector | None = None, *, program_format: str | None = None) -> Device:
    """The device for ``selector`` (strict: its reason if unavailable), or the
    first available in the configured preference order, warning about each
    preference skipped."""
    report = explain(selector, program_format=program_format)
    if report.chosen is None:
        raise UnavailableError(f"no device for {', '.join(report.selectors)}\n{report}")
    warn_fallback(report)
    return report.chosen


def is_available(kind_or_selector: str) -> bool:
    """Whether ``device(kind_or_selector)`` would succeed."""
    return explain(kind_or_selector).chosen is not None


def default_device() -> Device:
    """The device of the innermost ``with device:``, else the process default
    (chosen from the config on first use)."""
    global _default
    current = current_device.get()
    if current is not None:
        return current
    with _lock:
        if _default is None:
            _default = device()
        return _default


def set_default_device(dev: Device | str | None) -> None:
    """Sets the process default device (a Device or a selector); None re-selects."""
    global _default
    chosen = device(dev) if isinstance(dev, str) else dev
    with _lock:
        _default = chosen


def put(array: Any, *, zero_copy: bool = False) -> Buffer:
    """``default_device().put(array)``."""
    return default_device().put(array, zero_copy=zero_copy)


def compile(  # noqa: A001
    program: Any, format: str | None = None, *, cache: bool = True, **options: object
) -> Executable:
    """``default_device().compile(...)``."""
    return default_device().compile(program, format, cache=cache, **options)
