"""The plugin registry: finds plugins through entry points (group ``nx_hal``),
NX_HAL_PLUGIN_PATH and the manifests the C loader reads, loads each, and records why any of them failed. A
broken plugin is skipped with its reason; it never takes the others down."""

from __future__ import annotations

import logging
import os
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy
from pydantic import BaseModel, ValidationError

from nx_hal.cache import CompileCache
from nx_hal.config import LoadedConfig, describe_errors
from nx_hal.device import Device
from nx_hal.errors import ConfigError, NxHalError
from nx_hal.hookspecs import PROJECT, HookSpecs
from nx_hal.library import PluginInfo, open_library, scan_plugins
from nx_hal.probe import ProbeResult, cached_probe

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


def _package_version(package: str | None) -> str | None:
    if not package:
        return None
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class Registry:
    """Every plugin found, loaded or not, in discovery order."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.loaded_config = loaded
        self.records: dict[str, PluginRecord] = {}

    # -- discovery ---------------------------------------------------------
    def discover(self) -> None:
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(HookSpecs)
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            try:
                module = ep.load()
                pm.register(module, name=ep.name)
            except Exception as exc:  # a broken package must not stop discovery
                self._failed_import(ep.name, f"import of '{ep.value}' failed: {type(exc).__name__}: {exc}")
                continue
            for impl in pm.hook.nx_hal_register.get_hookimpls():
                if impl.plugin_name != ep.name:
                    continue
                try:
                    impl.function(register=self._register_callback(ep.name))
                except Exception as exc:
                    self._failed_import(ep.name, f"its nx_hal_register hook raised {type(exc).__name__}: {exc}")
        for directory in self.loaded_config.config.plugin_path or os.environ.get(
            "NX_HAL_PLUGIN_PATH", ""
        ).split(os.pathsep):
            if directory:
                for lib in sorted(Path(directory).glob("libnxhal_*.so")):
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

    def _register_callback(self, entry_point: str) -> Any:
        def register(
            *, name: str, library: str | Path, options_model: type[BaseModel] | None = None,
            compile_options_model: type[BaseModel] | None = None, package: str | None = None,
        ) -> None:
            self.add(PluginSpec(
                name=name, library=Path(library), options_model=options_model,
                compile_options_model=compile_options_model, package=package,
                package_version=_package_version(package), source=f"entry point '{entry_point}'",
            ))
        return register

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
        config = self.loaded_config.config
        raw = config.plugins.get(record.name, {})
        model = record.spec.options_model if record.spec else None
        if model is None:
            return dict(raw)
        try:
            validated = model.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc, self.loaded_config.origins, ("plugins", record.name))) from None
        return validated.model_dump(exclude_none=True, mode="json")

    def load(self, record: PluginRecord, *, isolate: bool | None = None) -> PluginRecord:
        if record.state != "pending" or record.spec is None:
            return record
        config = self.loaded_config.config
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
        try:
            library = open_library(str(spec.library), spec.name)
            record.info = library.info
            client = library.create_client(options, spec.name)
            record.diagnostics = client.diagnostics
            record.devices = [Device(record, client, h, i) for i, h in enumerate(client.device_handles)]
        except NxHalError as exc:
            return self._fail(record, exc.code, exc.message)
        except Exception as exc:  # a bug in the binding, not the plugin: keep the trace
            return self._fail(record, "INTERNAL", "".join(traceback.format_exception_only(exc)).strip())
        if config.compile_cache:
            record.compile_cache = CompileCache(config.cache_dir / "executables")
        record.state = "loaded"
        return record

    def probe(self, record: PluginRecord, options: dict[str, Any]) -> ProbeResult:
        """The plugin's probe verdict: from the probe cache when nothing it
        depends on changed, else from a child process."""
        assert record.spec is not None
        config = self.loaded_config.config
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
