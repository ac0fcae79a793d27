"""The plugin registry: finds plugins through entry points (group ``nx_hal``),
NX_HAL_PLUGIN_PATH and the manifests the C loader reads, loads each, and records why any of them failed. A
broken plugin is skipped with its reason; it never takes the others down."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nx_hal.cache import CompileCache
from nx_hal.config import LoadedConfig, describe_errors
from nx_hal.device import Device
from nx_hal.errors import ConfigError, FailedPreconditionError, NxHalError
from nx_hal.library import PluginInfo, open_library, scan_plugins
from nx_hal.probe import ProbeResult, cached_probe, probe_env, read_json, write_json

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["PluginSpec", "PluginRecord", "Registry", "ENTRY_POINT_GROUP"]

log = logging.getLogger("nx_hal")
ENTRY_POINT_GROUP = "nx_hal"


@dataclass(frozen=True)
class PluginSpec:
    """What a package registered: a plugin name, its library and option models."""

    name: str
    library: Path
    options_model: type[BaseModel] | None = None
    compile_options_model: type[BaseModel] | None = None
    package: str | None = None
    package_version: str | None = None
    source: str = "entry point"


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
class _CachedSpec(PluginSpec):
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
        specs, _ = _run_entry_point(ep, lambda _name, reason: failures.append(reason))
        found = [s for s in specs if s.name == self.name]
        if not found:
            why = f": {'; '.join(failures)}" if failures else ""
            raise ConfigError(f"plugin '{self.name}': its entry point '{name}' no longer registers it{why}")
        return found[0]


def _run_entry_point(ep: Any, failed: Callable[[str, str], None]) -> tuple[list[PluginSpec], bool]:
    """Imports an entry point and runs its nx_hal_register hook: the specs it
    registered, and whether it failed (each failure told to ``failed``)."""
    import pluggy

    from nx_hal.hookspecs import PROJECT, HookSpecs

    specs: list[PluginSpec] = []
    ok = True
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

    for impl in pm.hook.nx_hal_register.get_hookimpls():
        if impl.plugin_name != ep.name:
            continue
        try:
            impl.function(register=register)
        except Exception as exc:
            ok = False
            failed(ep.name, f"its nx_hal_register hook raised {type(exc).__name__}: {exc}")
    return specs, ok


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
    dirs = []
    for entry in sys.path:
        try:
            dirs.append([entry, os.stat(entry).st_mtime_ns if entry else None])
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


def _cached_specs(path: Path, ep: Any) -> list[PluginSpec] | None:
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != _DISCOVERY_FORMAT:
        return None
    try:
        if any(_file_stat(f[0]) != f for f in data["files"]):
            return None
        return [_CachedSpec(
            name=s["name"], library=Path(s["library"]), package=s["package"],
            package_version=s["package_version"], source=s["source"],
            options_model=_UNRESOLVED if s["options_model"] else None,
            compile_options_model=_UNRESOLVED if s["compile_options_model"] else None,
            entry_point=(ep.name, ep.value), default_options=s["default_options"],
        ) for s in data["specs"]]
    except (KeyError, TypeError, IndexError):
        return None


def _store_specs(path: Path, ep: Any, specs: list[PluginSpec]) -> None:
    write_json(path, {
        "format": _DISCOVERY_FORMAT, "files": _module_files(ep),
        "specs": [{
            "name": s.name, "library": str(s.library), "package": s.package,
            "package_version": s.package_version, "source": s.source,
            "options_model": s.options_model is not None,
            "compile_options_model": s.compile_options_model is not None,
            "default_options": _default_options(s.options_model),
        } for s in specs],
    })


@dataclass
class PluginRecord:
    """One plugin's state: ``loaded``, ``unavailable`` (no SDK or device: the
    reason says which), ``failed`` (any other error, with its code), or ``disabled``."""

    name: str
    spec: PluginSpec | None
    state: str = "pending"
    code: str = "OK"
    reason: str = ""
    info: PluginInfo | None = None
    diagnostics: str = ""
    devices: list[Device] = field(default_factory=list)
    compile_cache: CompileCache | None = None
    # The options its client was made with (a sandboxed compile makes the same client).
    client_options: dict[str, Any] = field(default_factory=dict)
    # Devices listed from the probe: the options connect() makes the client with.
    connect_options: dict[str, Any] | None = field(default=None, repr=False)

    def connect(self) -> None:
        """Makes this plugin's client in this process, for devices listed
        from its probe (Device._described): called on a device's first use.
        Raises the plugin's error if it cannot (the error of that use)."""
        with _connect_lock:
            if not self.devices or "client" not in _set_slots(self.devices[0]):
                self._connect()

    def _connect(self) -> None:
        spec = self.spec
        if spec is None:
            raise FailedPreconditionError(f"plugin '{self.name}' has no library", plugin=self.name)
        options = self.connect_options if self.connect_options is not None else self.client_options
        client = open_library(str(spec.library), spec.name).create_client(options, spec.name)
        live = [Device(self, client, h, i) for i, h in enumerate(client.device_handles)]
        if len(live) != len(self.devices):
            raise FailedPreconditionError(
                f"plugin '{self.name}' now has {len(live)} device(s), its probe found {len(self.devices)}: "
                "reconfigure (nx_hal.configure()) to list them again", plugin=self.name)
        for dev, now in zip(self.devices, live, strict=False):
            for slot in _set_slots(now):
                if slot not in ("record", "_tokens"):  # the device stays the one handed out
                    setattr(dev, slot, getattr(now, slot))
        self.diagnostics = client.diagnostics

    def status_text(self) -> str:
        """``loaded``, ``unavailable: <reason>``, ``failed: <CODE>: <reason>`` or ``disabled: ...``."""
        if self.state in ("loaded", "pending"):
            return self.state
        if self.state == "failed":
            return f"failed: {self.code}: {self.reason}"
        return f"{self.state}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "name": self.name,
            "package": spec.package if spec else None,
            "package_version": spec.package_version if spec else None,
            "library": str(spec.library) if spec else None,
            "source": spec.source if spec else None,
            "abi_version": self.info.abi_version if self.info else None,
            "info": self.info.to_dict() if self.info else None,
            "state": self.state,
            "code": self.code,
            "reason": self.reason,
            "diagnostics": self.diagnostics,
            "devices": [d.selector for d in self.devices],
        }


_connect_lock = threading.Lock()


def _set_slots(device: Device) -> list[str]:
    """The slots of ``device`` that hold a value (without making its client)."""
    out = []
    for slot in Device.__slots__:
        try:
            object.__getattribute__(device, slot)
        except AttributeError:
            continue
        out.append(slot)
    return out


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


class Registry:
    """Every plugin found, loaded or not, in discovery order."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.loaded_config = loaded
        self.records: dict[str, PluginRecord] = {}

    # -- discovery ---------------------------------------------------------
    def discover(self, *, isolate: bool | None = None) -> None:
        """Finds the plugins. ``isolate`` (default: the isolate_probe
        setting) False: import every entry point here and keep nothing, as
        loading them in this process does."""
        # What each entry point registered is kept next to the probe verdicts
        # (keyed by the entry point, its distribution and the import path,
        # checked against its module files), so that a warm start imports
        # neither the plugin modules nor pluggy nor pydantic. An entry point
        # that failed is never kept: it fails, with its warning, each time.
        settings = self.loaded_config.settings
        isolate = settings.isolate_probe if isolate is None else isolate
        cache = settings.cache_dir / "probe" if settings.probe_cache and isolate else None
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            path = cache / "plugins" / f"{_entry_point_key(ep)}.json" if cache is not None else None
            specs = _cached_specs(path, ep) if path is not None else None
            failures: list[tuple[str, str]] = []
            if specs is None:
                specs, ok = _run_entry_point(ep, partial(_note_failure, failures))
                if ok and path is not None:
                    _store_specs(path, ep, specs)
            for spec in specs:
                self.add(spec)
            for name, reason in failures:  # after what it registered before failing
                self._failed_import(name, reason)
        for directory in settings.plugin_path or os.environ.get(
            "NX_HAL_PLUGIN_PATH", ""
        ).split(os.pathsep):
            if directory:
                try:
                    found = sorted(Path(directory).glob("libnxhal_*.so"))
                except OSError as exc:  # a name the OS refuses (too long, ...): skipped, said why
                    log.warning("nx_hal plugin_path entry %.200r skipped: %s", directory, exc.strerror or exc)
                    continue
                for lib in found:
                    name = lib.name[len("libnxhal_"):-len(".so")]
                    if name not in self.records:
                        self.add(PluginSpec(name=name, library=lib, source=f"NX_HAL_PLUGIN_PATH ({directory})"))
        # What a C program's loader finds (manifests in NX_HAL_PLUGIN_PATH, the
        # active environment, the install prefix, the data directories), so
        # that Python and C see the same plugins. Pip-installed plugins came
        # through their entry points above under the same names.
        for entry in scan_plugins():
            if entry.skip_reason is None and entry.library and entry.name not in self.records:
                self.add(PluginSpec(name=entry.name, library=Path(entry.library),
                                    source=f"{entry.origin} ({entry.source})"))

    def _failed_import(self, name: str, reason: str) -> None:
        log.warning("nx_hal plugin '%s' skipped: %s", name, reason)
        self.records[name] = PluginRecord(name=name, spec=None, state="failed", code="INTERNAL", reason=reason)

    def add(self, spec: PluginSpec) -> PluginRecord:
        """Registers a plugin by hand (applications, tests); replaces one of the same name."""
        record = PluginRecord(name=spec.name, spec=spec)
        self.records[spec.name] = record
        return record

    # -- loading -----------------------------------------------------------
    def plugin_options(self, record: PluginRecord) -> dict[str, Any]:
        """The plugin's options from config, validated by its model."""
        config = self.loaded_config.settings
        raw = config.plugins.get(record.name, {})
        spec = record.spec
        if not raw and isinstance(spec, _CachedSpec) and spec.default_options is not None:
            return dict(spec.default_options)  # what the model gives for no options, kept
        model = spec.options_model if spec else None
        if model is None:
            return dict(raw)
        from pydantic import ValidationError

        try:
            validated = model.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc, self.loaded_config.origins, ("plugins", record.name))) from None
        return validated.model_dump(exclude_none=True, mode="json")

    def load(self, record: PluginRecord, *, isolate: bool | None = None) -> PluginRecord:
        if record.state != "pending" or record.spec is None:
            return record
        config = self.loaded_config.settings
        if record.name in config.disable:
            record.state, record.reason = "disabled", "disabled by the 'disable' setting"
            return record
        spec = record.spec
        try:
            options = self.plugin_options(record)
        except ConfigError as exc:
            return self._fail(record, exc.code, exc.message)
        if not spec.library.is_file():
            return self._fail(record, "NOT_FOUND", f"library {spec.library} does not exist")
        isolate = config.isolate_probe if isolate is None else isolate
        if isolate:
            result = self.probe(record, options)
            if not result.ok:
                if result.report.get("info"):
                    record.info = PluginInfo(**result.report["info"])
                return self._fail(record, result.code, result.message)
            if self._described(record, result.report, options):
                return self._loaded(record)
        try:
            library = open_library(str(spec.library), spec.name)
            record.info = library.info
            record.client_options = options
            client = library.create_client(options, spec.name)
            record.diagnostics = client.diagnostics
            record.devices = [Device(record, client, h, i) for i, h in enumerate(client.device_handles)]
        except NxHalError as exc:
            return self._fail(record, exc.code, exc.message)
        except Exception as exc:  # a bug in the binding, not the plugin: keep the trace
            return self._fail(record, "INTERNAL", "".join(traceback.format_exception_only(exc)).strip())
        return self._loaded(record)

    def _loaded(self, record: PluginRecord) -> PluginRecord:
        config = self.loaded_config.settings
        if config.compile_cache:
            record.compile_cache = CompileCache(config.cache_dir / "executables")
        record.state = "loaded"
        return record

    @staticmethod
    def _described(record: PluginRecord, report: dict[str, Any], options: dict[str, Any]) -> bool:
        """Lists the devices the probe described, without loading the plugin
        here: each makes the client on its first use (PluginRecord.connect).
        False when the report does not describe them all (then load here)."""
        try:
            info = PluginInfo(**report["info"])
            devices = [Device._described(record, i, d) for i, d in enumerate(report["devices"])]
            diagnostics = str(report.get("diagnostics", ""))
        except (KeyError, TypeError, ValueError):
            return False
        record.info, record.diagnostics, record.client_options = info, diagnostics, options
        record.connect_options = dict(options)
        record.devices = devices
        return True

    def probe(self, record: PluginRecord, options: dict[str, Any]) -> ProbeResult:
        """The plugin's probe verdict: from the probe cache when nothing it
        depends on changed, else from a child process."""
        assert record.spec is not None
        config = self.loaded_config.settings
        cache = config.cache_dir / "probe" if config.probe_cache else None
        return cached_probe(str(record.spec.library), record.name, options, config.probe_timeout, cache)

    def _fail(self, record: PluginRecord, code: str, reason: str) -> PluginRecord:
        record.state = "unavailable" if code == "UNAVAILABLE" else "failed"
        record.code, record.reason = code, reason
        log.info("nx_hal plugin '%s' unavailable: %s: %s", record.name, code, reason)
        return record

    def load_all(self, *, isolate: bool | None = None) -> None:
        for record in list(self.records.values()):
            self.load(record, isolate=isolate)

    def devices(self) -> list[Device]:
        return [d for r in self.records.values() if r.state == "loaded" for d in r.devices]
