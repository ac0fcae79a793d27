"""The top-level API: a process-wide registry built from the config on first
use, device listing and selection, and the default device for scripts."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nx_hal._warnings import warn_at_caller
from nx_hal.child import set_memory_limit
from nx_hal.config import LoadedConfig, load_config
from nx_hal.device import Device, current_device
from nx_hal.errors import ConfigError, ConfigWarning, InvalidArgumentError, NxHalError, UnavailableError
from nx_hal.library import release_clients
from nx_hal.registry import Registry
from nx_hal.selection import Report, Skip, select, warn_fallback

if TYPE_CHECKING:
    from nx_hal.buffer import Buffer
    from nx_hal.dynamic import DynamicExecutable
    from nx_hal.executable import Executable
    from nx_hal.selectors import Selector

# nx_hal.selectors (a pydantic model) is imported when a choice is made:
# listing devices needs no pydantic.
_KINDS = ("cpu", "gpu", "tpu", "npu", "ipu", "other")  # nx_hal.selectors.KINDS (a test checks they agree)

__all__ = [
    "configure", "registry", "plugins", "devices", "device", "is_available", "explain",
    "default_device", "set_default_device", "put", "compile", "compile_anywhere",
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
    **settings: Any,
) -> Registry:
    """Rebuild the process-wide registry from the config and return it.

    Settings are given as keywords, ``configure(prefer=["npu", "cpu"])``, or
    as a dict, ``configure({"prefer": [...]})`` (both may be given; the
    keywords win); they override config files and the environment. Called
    implicitly on first use with no arguments. Unknown or invalid settings
    raise ConfigError naming them.
    """
    global _registry, _default
    merged = {**(overrides or {}), **settings}
    loaded: LoadedConfig = load_config(merged or None, config_file=config_file, no_config=no_config)
    for message in loaded.warnings:  # the CLI prints them too (doctor, config)
        warn_at_caller(message, ConfigWarning)
    # Every child started from now on (probes included) runs under this limit.
    set_memory_limit(int(loaded.settings.child_memory_limit))
    reg = Registry(loaded)
    reg.discover(isolate=isolate_probe)
    reg.load_all(isolate=isolate_probe)
    # Checked now, once plugins are known, so a typo fails where it was set
    # and the registry in use stays the last good one. The default order
    # names only kinds: a warm start with nothing configured skips the check
    # (and pydantic, which selectors need).
    if loaded.origin("prefer") != "default":
        _check_preferences(reg, list(loaded.settings.prefer))
    with _lock:
        old, _registry, _default = _registry, reg, None
    # The old registry's clients are destroyed once nothing made from them
    # is alive (nx_hal.library.Client): nothing in it refers back to itself
    # (nx_hal.plugin.PluginLink), so dropping it frees them without a collection.
    del old
    release_clients()
    return reg


def registry() -> Registry:
    """The process-wide registry, built from the config on first use."""
    with _lock:
        if _registry is None:
            return configure()
        return _registry


def plugins() -> list[dict[str, Any]]:
    """Every plugin found: name, package, library, ABI version, state and reason."""
    return [r.to_dict() for r in registry().records.values()]


def devices(kind: str | None = None) -> list[Device]:
    """All devices of all loaded plugins, optionally of one kind."""
    if kind is not None and kind not in _KINDS:
        raise InvalidArgumentError(f"unknown device kind '{kind}' (kinds: {', '.join(_KINDS)})")
    return [d for d in registry().devices() if kind is None or d.kind == kind]


def _selectors(selector: str | Selector | None) -> tuple[list[Selector], bool]:
    from nx_hal.selectors import Selector

    if selector is None:
        reg = registry()
        return list(reg.loaded_config.settings.prefer), False
    if isinstance(selector, Selector):
        sel = selector
    else:
        try:
            sel = Selector.parse(selector)
        except ValueError as exc:
            raise InvalidArgumentError(_validation_reason(exc)) from None
    unknown = unknown_name(registry(), sel)
    if unknown:
        raise InvalidArgumentError(unknown)
    return [sel], True


def unknown_name(reg: Registry, sel: Selector) -> str | None:
    """Why ``sel`` names nothing nx_hal knows (no device kind, no installed
    plugin, none of its own packages), with the closest name; None when it
    names something. Such a name is a typo until shown otherwise, never a
    plugin to suggest installing."""
    import difflib

    from nx_hal.selectors import KIND_PROVIDERS, KINDS

    known = set(reg.records) | {name for names in KIND_PROVIDERS.values() for name in names}
    if sel.plugin is None or sel.plugin in known:
        return None
    close = difflib.get_close_matches(sel.plugin, sorted(known | set(KINDS)), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return (f"'{sel}' names no device kind ({', '.join(KINDS)}) "
            f"and no plugin nx_hal knows ({', '.join(sorted(known))}){hint}")


def _check_preferences(reg: Registry, prefer: list[Selector]) -> None:
    """A configured preference naming nothing nx_hal knows is a ConfigError
    naming where it was set, not a preference silently skipped."""
    for sel in prefer:
        unknown = unknown_name(reg, sel)
        if unknown:
            raise ConfigError(f"prefer ({reg.loaded_config.origin('prefer')}): {unknown}")


def _validation_reason(exc: ValueError) -> str:
    """The reason a pydantic validation gave, without its URL footer."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        reasons = [str(e.get("msg", "")).removeprefix("Value error, ") for e in errors()]
        if any(reasons):
            return "; ".join(r for r in reasons if r)
    return str(exc)


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
) -> Executable | DynamicExecutable:
    """``default_device().compile(...)``."""
    return default_device().compile(program, format, cache=cache, **options)


def compile_anywhere(
    program: Any,
    format: str | None = None,
    *,
    selector: str | Selector | None = None,
    cache: bool = True,
    **options: object,
) -> tuple[Executable | DynamicExecutable, Report]:
    """Compiles ``program`` on the first device, in preference order, that can
    run it. A device that accepts the format but not this model (an operator
    its SDK or the ONNX converter lacks, a dynamic shape it cannot fix) is
    skipped with that reason in the report, which is returned with the
    executable. With ``selector`` the named device must compile it: its error
    is raised, nothing falls back."""
    from nx_hal import programs

    # A torch module is exported once, for every device tried.
    prog = programs.load(program, format, (), options.pop("example_args", None))
    problem = programs.onnx_problem(prog.data) if prog.format == "onnx" else None
    if problem is not None:
        raise InvalidArgumentError(f"not a model nx_hal can read: {_named(program)}{problem}")
    sels, explicit = _selectors(selector)
    report = select(registry(), sels, explicit=explicit, program_format=prog.format)
    if report.chosen is None:
        raise UnavailableError(f"no device can run '{prog.format}' programs\n{report}")
    candidates = [(report.chosen, report.chosen_by or ""), *report.alternatives]
    last: NxHalError | None = None
    refused = _Refusals(report)
    for dev, by in candidates:
        if refused.covers(dev):
            continue
        try:
            exe = dev.compile(prog, None, cache=cache, **dict(options))  # a Program keeps IR weights
        except NxHalError as exc:
            if explicit:
                raise
            last = exc
            refused.add(dev, by, exc)
            continue
        report.chosen, report.chosen_by = dev, by
        warn_fallback(report)
        return exe, report
    report.chosen = report.chosen_by = None
    raise UnavailableError(f"no device could compile this program\n{report}") from last


def _named(program: Any) -> str:
    """"PATH: " where the program came from a file, else nothing."""
    return f"{os.fspath(program)}: " if isinstance(program, (str, os.PathLike)) and len(str(program)) < 4096 \
        and "\n" not in str(program) else ""


class _Refusals:
    """compile_anywhere's skips, one line per plugin and error: the devices
    of one plugin that fail the same way are named once, with their count
    ("tpu (4 devices: tpu:cpu:0, ...)"), instead of one line each. A
    conversion error (ONNX → StableHLO) is the model's, not the device's:
    the plugin's other devices are not tried after one, as they would
    convert it the same way."""

    def __init__(self, report: Report) -> None:
        self.report = report
        # (plugin, message) → (index in report.skipped, selector, devices)
        self.lines: dict[tuple[str, str], tuple[int, str, list[Device]]] = {}
        self.converted: dict[str, tuple[str, str]] = {}  # plugin → its conversion error's line

    def covers(self, dev: Device) -> bool:
        """Whether ``dev``'s plugin already failed to convert the program
        (``dev`` is then counted on that line)."""
        key = self.converted.get(dev.plugin)
        if key is None:
            return False
        self._record(key, dev)
        return True

    def add(self, dev: Device, by: str, exc: NxHalError) -> None:
        """Records ``dev``'s failure ``exc``, on its plugin's line for the same error."""
        key = (dev.plugin, str(exc))
        # nx_hal.onnx.convert.ConversionError, told by its ONNX-side fields:
        # only the registry and the CLI import the ONNX package (tests/test_layers.py).
        if hasattr(exc, "leftover_ops") and hasattr(exc, "operators"):
            self.converted[dev.plugin] = key
        if key not in self.lines:
            self.report.skipped.append(Skip(by, ""))
            self.lines[key] = (len(self.report.skipped) - 1, by, [])
        self._record(key, dev)

    def _record(self, key: tuple[str, str], dev: Device) -> None:
        index, by, devs = self.lines[key]
        devs.append(dev)
        names = ", ".join(d.selector for d in devs)
        who = names if len(devs) == 1 else f"{key[0]} ({len(devs)} devices: {names})"
        self.report.skipped[index] = Skip(by, f"{who} cannot compile this program: {key[1]}")
