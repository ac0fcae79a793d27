"""Plugin discovery through entry points (group ``nx_hal``): importing each
entry point's module and calling its ``nx_hal_register`` hook through a pluggy
plugin manager, and the discovery cache that lets a warm start skip both."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nx_hal.errors import ConfigError
from nx_hal.plugin import PluginSpec
from nx_hal.probe import probe_env
from nx_hal.store import Store

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ENTRY_POINT_GROUP", "CachedSpec", "run_entry_point", "entry_point_specs"]

ENTRY_POINT_GROUP: Final = "nx_hal"
SECTION: Final = "discovery"

_UNRESOLVED: Final[Any] = object()


class _ModelField:
    """An option-model field of a spec from the discovery cache: the model
    is imported (with its plugin module and pydantic) on first read."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"_{name}"

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return None  # the dataclass default
        value = obj.__dict__[self.key]
        if value is _UNRESOLVED:
            full = obj.resolve()
            object.__setattr__(obj, "_options_model", full.options_model)
            object.__setattr__(obj, "_compile_options_model", full.compile_options_model)
            value = obj.__dict__[self.key]
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.key] = value


@dataclass(frozen=True)
class CachedSpec(PluginSpec):
    """What an entry point registered, read from the discovery cache without
    importing its module. ``default_options``: the options model's dump for
    an empty config table (None: validate on load)."""

    entry_point: tuple[str, str] = ("", "")
    default_options: dict[str, Any] | None = None

    if not TYPE_CHECKING:
        options_model = _ModelField()
        compile_options_model = _ModelField()

    def resolve(self) -> PluginSpec:
        """The spec its entry point registers when imported now."""
        name, value = self.entry_point
        ep = metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
        failures: list[str] = []
        specs, _ = run_entry_point(ep, lambda _name, reason: failures.append(reason))
        found = [s for s in specs if s.name == self.name]
        if not found:
            why = f": {'; '.join(failures)}" if failures else ""
            raise ConfigError(f"plugin '{self.name}': its entry point '{name}' no longer registers it{why}")
        return found[0]


def run_entry_point(ep: Any, failed: Callable[[str, str], None]) -> tuple[list[PluginSpec], bool]:
    """Imports an entry point and calls its nx_hal_register hook: the specs it
    registered, and whether it failed (each failure told to ``failed``)."""
    import pluggy

    from nx_hal.hookspecs import PROJECT, HookSpecs

    specs: list[PluginSpec] = []
    # One plugin manager per entry point: pluggy stops a hook call at the
    # first implementation that raises, so with every plugin in one manager
    # a broken plugin would hide those after it. Here a hook call reaches
    # exactly this entry point's module, and its failure is its own (as
    # conda's loader does it: load one by one, report each failure).
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(HookSpecs)
    try:
        module = ep.load()
        pm.register(module, name=ep.name)
    except Exception as exc:  # a broken package must not stop discovery
        failed(ep.name, f"import of '{ep.value}' failed: {type(exc).__name__}: {exc}")
        return specs, False

    def register(
        *, name: str, library: str | Path, options_model: type[BaseModel] | None = None,
        compile_options_model: type[BaseModel] | None = None, package: str | None = None,
    ) -> None:
        specs.append(PluginSpec(
            name=name, library=Path(library), options_model=options_model,
            compile_options_model=compile_options_model, package=package,
            package_version=_package_version(package), source=f"entry point '{ep.name}'",
        ))

    try:
        pm.hook.nx_hal_register(register=register)
    except Exception as exc:  # what it registered before raising is kept
        failed(ep.name, f"its nx_hal_register hook raised {type(exc).__name__}: {exc}")
        return specs, False
    return specs, True


# A discovery cache entry: this format, and what it was keyed by.
_DISCOVERY_FORMAT: Final = 1


def _file_stat(path: str) -> list[Any] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns]


def _module_files(ep: Any) -> list[list[Any]]:
    """The source files of the entry point's package imported so far: a
    changed one (an editable install edited) means import it again."""
    top = ep.value.split(":")[0].split(".")[0]
    files = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name == top or name.startswith(top + ".")) and path:
            stat = _file_stat(path)
            if stat is not None:
                files.append(stat)
    return sorted(files)


def _entry_point_key(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    # A directory on the import path changes its mtime when a distribution
    # is installed or removed there: option defaults may depend on what is
    # installed (the tpu plugin's backend_paths lists the PJRT packages).
    dirs: list[list[str | int | None]] = []
    for entry in sys.path:
        if not entry:
            # The working directory (python -c, the REPL): a module found
            # there from one directory is not found from another. Its path
            # only: programs write into it, and its mtime would then miss.
            dirs.append([os.getcwd(), None])
            continue
        try:
            dirs.append([entry, os.stat(entry).st_mtime_ns])
        except OSError:
            dirs.append([entry, None])
    material = {
        "format": _DISCOVERY_FORMAT, "python": sys.executable, "path": dirs,
        "entry_point": [ep.name, ep.value, ep.group],
        "dist": [getattr(dist, "name", None), getattr(dist, "version", None), str(getattr(dist, "_path", ""))],
        "env": probe_env(),  # option defaults may read them (the tpu plugin's backend_paths)
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def _default_options(model: type[BaseModel] | None) -> dict[str, Any] | None:
    if model is None:
        return {}
    try:
        return model.model_validate({}).model_dump(exclude_none=True, mode="json")
    except Exception:  # a required option: validated (and its error shown) on load
        return None


def _cached_specs(store: Store, key: str, ep: Any) -> list[PluginSpec] | None:
    data = store.get_json(SECTION, key)
    if data is None or data.get("format") != _DISCOVERY_FORMAT:
        return None
    try:
        if any(_file_stat(f[0]) != f for f in data["files"]):
            return None
        return [CachedSpec(
            name=s["name"], library=Path(s["library"]), package=s["package"],
            package_version=s["package_version"], source=s["source"],
            options_model=_UNRESOLVED if s["options_model"] else None,
            compile_options_model=_UNRESOLVED if s["compile_options_model"] else None,
            entry_point=(ep.name, ep.value), default_options=s["default_options"],
        ) for s in data["specs"]]
    except (KeyError, TypeError, IndexError):
        return None


def _store_specs(store: Store, key: str, ep: Any, specs: list[PluginSpec]) -> None:
    store.put_json(SECTION, key, {
        "format": _DISCOVERY_FORMAT, "files": _module_files(ep),
        "specs": [{
            "name": s.name, "library": str(s.library), "package": s.package,
            "package_version": s.package_version, "source": s.source,
            "options_model": s.options_model is not None,
            "compile_options_model": s.compile_options_model is not None,
            "default_options": _default_options(s.options_model),
        } for s in specs],
    })


def _package_version(package: str | None) -> str | None:
    if not package:
        return None
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _note_failure(sink: list[tuple[str, str]], name: str, reason: str) -> None:
    """Collects a plugin's failure (bound to this entry point's list, not a loop variable)."""
    sink.append((name, reason))


def entry_point_specs(store: Store | None) -> Iterator[tuple[list[PluginSpec], list[tuple[str, str]]]]:
    """For each entry point of the group, in name order: what it registers
    and its failures as (name, reason). From the store's discovery records
    (``store`` None: none) when the key and module files match, else by
    importing it, keeping what it registered when it did not fail."""
    # What each entry point registered is kept next to the probe verdicts
    # (keyed by the entry point, its distribution and the import path,
    # checked against its module files), so that a warm start imports
    # neither the plugin modules nor pluggy nor pydantic. An entry point
    # that failed is never kept: it fails, with its warning, each time.
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        key = _entry_point_key(ep) if store is not None else ""
        specs = _cached_specs(store, key, ep) if store is not None else None
        failures: list[tuple[str, str]] = []
        if specs is None:
            specs, ok = run_entry_point(ep, partial(_note_failure, failures))
            if ok and store is not None:
                _store_specs(store, key, ep, specs)
        yield specs, failures
