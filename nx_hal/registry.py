"""The plugin registry: finds plugins through entry points (nx_hal.discovery),
NX_HAL_PLUGIN_PATH and the manifests the C loader reads, loads each (its probe
in a child first, nx_hal.probe), and records why any of them failed. A broken
plugin is skipped with its reason; it never takes the others down."""

from __future__ import annotations

import logging
import os
import traceback
from pathlib import Path
from typing import Any

from nx_hal.cache import CompileCache
from nx_hal.config import LoadedConfig, describe_errors
from nx_hal.converter import Converter
from nx_hal.description import DeviceDescription
from nx_hal.device import Device
from nx_hal.discovery import CachedSpec, entry_point_specs
from nx_hal.errors import ConfigError, NxHalError
from nx_hal.library import PluginInfo, open_library, plugin_path_untrusted, scan_plugins

# PluginSpec and PluginRecord live in nx_hal.plugin; named here too because
# the plugins' own tests (plugins/*/tests) import them from this module.
from nx_hal.plugin import PluginLink, PluginRecord, PluginSpec
from nx_hal.probe import ProbeResult, cached_probe
from nx_hal.store import Store

__all__ = ["Registry", "PluginRecord", "PluginSpec"]

log = logging.getLogger("nx_hal")


class Registry:
    """Every plugin found, loaded or not, in discovery order."""

    def __init__(self, loaded: LoadedConfig, *, converter: Converter | None = None) -> None:
        self.loaded_config = loaded
        self.records: dict[str, PluginRecord] = {}
        if converter is None:
            # The registry builds the devices, so it hands them the converter:
            # the core's devices never import nx_hal.onnx (nx_hal.converter).
            from nx_hal.onnx.adapter import OnnxConverter

            converter = OnnxConverter(cache_max_bytes=loaded.settings.cache_max_bytes)
        self.converter: Converter = converter

    # -- discovery ---------------------------------------------------------
    def discover(self, *, isolate: bool | None = None) -> None:
        """Finds the plugins. ``isolate`` (default: the isolate_probe
        setting) False: import every entry point here and keep nothing, as
        loading them in this process does."""
        settings = self.loaded_config.settings
        isolate = settings.isolate_probe if isolate is None else isolate
        store = Store.at(settings.cache_dir, max_bytes=settings.cache_max_bytes) \
            if settings.probe_cache and isolate else None
        for specs, failures in entry_point_specs(store):
            for spec in specs:
                self.add(spec)
            for name, reason in failures:  # after what it registered before failing
                self._failed_import(name, reason)
        skipped: set[str] = set()
        for directory in settings.plugin_path or os.environ.get(
            "NX_HAL_PLUGIN_PATH", ""
        ).split(os.pathsep):
            if directory:
                self._scan_plugin_dir(directory, skipped)
        # What a C program's loader finds (manifests in NX_HAL_PLUGIN_PATH, the
        # active environment, the install prefix, the data directories), so
        # that Python and C see the same plugins. Pip-installed plugins came
        # through their entry points above under the same names.
        for entry in scan_plugins():
            if entry.skip_reason is None and entry.library and entry.name not in self.records:
                self.add(PluginSpec(name=entry.name, library=Path(entry.library),
                                    source=f"{entry.origin} ({entry.source})"))
            elif (entry.skip_reason and entry.origin == "NX_HAL_PLUGIN_PATH"
                  and not entry.skip_reason.startswith("shadowed by")
                  and not {os.path.normpath(entry.source), os.path.dirname(entry.source)} & skipped):
                # A manifest in a directory the user named: said as the libraries are.
                self._skipped("plugin_path manifest", entry.source, entry.skip_reason, skipped)

    def _scan_plugin_dir(self, directory: str, skipped: set[str]) -> None:
        """The bare libraries of one plugin_path / NX_HAL_PLUGIN_PATH entry,
        under the C loader's trust rule (nx_hal.library.plugin_path_untrusted)."""
        try:
            os.stat(directory)
        except FileNotFoundError:
            if os.path.isabs(directory):
                return  # a missing directory is not an error, as in the C loader
        except OSError:
            pass  # a name the OS refuses (too long, ...): the rule says why
        untrusted = plugin_path_untrusted(directory, directory=True)
        if untrusted is not None:
            self._skipped("plugin_path entry", directory, untrusted, skipped)
            return
        try:
            found = sorted(Path(directory).glob("libnxhal_*.so"))
        except OSError as exc:
            self._skipped("plugin_path entry", directory, str(exc.strerror or exc), skipped)
            return
        for lib in found:
            name = lib.name[len("libnxhal_"):-len(".so")]
            if name in self.records:
                continue
            untrusted = plugin_path_untrusted(str(lib))
            if untrusted is not None:
                self._skipped("plugin_path library", str(lib), untrusted, skipped)
            else:
                self.add(PluginSpec(name=name, library=lib, source=f"NX_HAL_PLUGIN_PATH ({directory})"))

    def _skipped(self, what: str, path: str, reason: str, skipped: set[str]) -> None:
        """Warns of a plugin path skipped, and keeps the warning with the
        config's (``nx-hal doctor`` prints them)."""
        skipped.add(os.path.normpath(path))
        message = f"{what} '{path}' skipped: {reason}"
        log.warning("nx_hal %s", message)
        if message not in self.loaded_config.warnings:
            self.loaded_config.warnings.append(message)

    def _failed_import(self, name: str, reason: str) -> None:
        log.warning("nx_hal plugin '%s' skipped: %s", name, reason)
        self.records[name] = PluginRecord(name=name, spec=None, state="failed", code="INTERNAL", reason=reason,
                                          converter=self.converter)

    def add(self, spec: PluginSpec) -> PluginRecord:
        """Registers a plugin by hand (applications, tests); replaces one of the same name."""
        record = PluginRecord(name=spec.name, spec=spec, converter=self.converter)
        self.records[spec.name] = record
        return record

    # -- loading -----------------------------------------------------------
    def plugin_options(self, record: PluginRecord) -> dict[str, Any]:
        """The plugin's options from config, validated by its model."""
        config = self.loaded_config.settings
        raw = config.plugins.get(record.name, {})
        spec = record.spec
        if not raw and isinstance(spec, CachedSpec) and spec.default_options is not None:
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
        """Loads a pending plugin (probed in a child first when ``isolate``); failures become its state."""
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
            if config.plugins.get(record.name):
                raise  # a value the user gave is an error, never a reason to skip the plugin's devices
            return self._fail(record, exc.code, exc.message)  # its model needs settings nobody gave
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
            client = library.create_client(options, spec.name)
            record.diagnostics = client.diagnostics
            record.attach(PluginLink.attach(spec.name, client, spec=spec, client_options=options,
                                            converter=record.converter))
        except NxHalError as exc:
            return self._fail(record, exc.code, exc.message)
        except Exception as exc:  # a bug in the binding, not the plugin: keep the trace
            return self._fail(record, "INTERNAL", "".join(traceback.format_exception_only(exc)).strip())
        return self._loaded(record)

    def _loaded(self, record: PluginRecord) -> PluginRecord:
        config = self.loaded_config.settings
        if config.compile_cache and record.link is not None:
            record.link.compile_cache = CompileCache(Store.at(config.cache_dir, max_bytes=config.cache_max_bytes))
        record.state = "loaded"
        return record

    @staticmethod
    def _described(record: PluginRecord, report: dict[str, Any], options: dict[str, Any]) -> bool:
        """Lists the devices the probe described, without loading the plugin
        here: their client is made on a device's first use (PluginLink.client).
        False when the report does not describe them all (then load here)."""
        assert record.spec is not None
        try:
            info = PluginInfo(**report["info"])
            descriptions = tuple(DeviceDescription.from_report(d) for d in report["devices"])
            diagnostics = str(report.get("diagnostics", ""))
        except (KeyError, TypeError, ValueError):
            return False
        record.info, record.diagnostics = info, diagnostics
        record.attach(PluginLink(record.name, str(record.spec.library), descriptions, spec=record.spec,
                                 client_options=options, converter=record.converter))
        return True

    def probe(self, record: PluginRecord, options: dict[str, Any]) -> ProbeResult:
        """The plugin's probe verdict: from the probe cache when nothing it
        depends on changed, else from a child process."""
        assert record.spec is not None
        config = self.loaded_config.settings
        store = Store.at(config.cache_dir, max_bytes=config.cache_max_bytes) if config.probe_cache else None
        return cached_probe(str(record.spec.library), record.name, options, config.probe_timeout, store)

    def _fail(self, record: PluginRecord, code: str, reason: str) -> PluginRecord:
        record.state = "unavailable" if code == "UNAVAILABLE" else "failed"
        record.code, record.reason = code, reason
        log.info("nx_hal plugin '%s' unavailable: %s: %s", record.name, code, reason)
        return record

    def load_all(self, *, isolate: bool | None = None) -> None:
        """Loads every pending plugin."""
        for record in list(self.records.values()):
            self.load(record, isolate=isolate)

    def devices(self) -> list[Device]:
        """Every device of every loaded plugin, in plugin order."""
        return [d for r in self.records.values() if r.state == "loaded" for d in r.devices]
