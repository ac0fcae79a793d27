"""Configuration: pydantic models filled from, highest first, explicit
arguments, ``NX_HAL_*`` environment variables, ``nx_hal.toml``, and
``[tool.nx_hal]`` in ``pyproject.toml``. Every value remembers where it came
from, so a validation error names the variable or the file and key."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

from nx_hal._config_defaults import default_child_memory_limit
from nx_hal.errors import ConfigError
from nx_hal.store.location import DEFAULT_CACHE_MAX_BYTES, default_cache_dir, home_dir

if TYPE_CHECKING:
    from pydantic import ValidationError

    from nx_hal._config_model import Config
    from nx_hal.selectors import Selector

__all__ = [
    "Config", "DefaultSettings", "LoadedConfig", "load_config", "default_cache_dir", "untrusted_reason", "ENV_PREFIX",
]

ENV_PREFIX: Final = "NX_HAL_"
# Variables read elsewhere, not config fields.
_OTHER_ENV: Final = {"NX_HAL_CONFIG_FILE", "NX_HAL_NO_CONFIG", "NX_HAL_VENDOR_LOGS"}


def __getattr__(name: str) -> Any:
    if name == "Config":  # the pydantic model, imported when asked for
        from nx_hal._config_model import Config

        return Config
    if name == "tomllib":
        return _tomllib()
    raise AttributeError(f"module 'nx_hal.config' has no attribute {name!r}")


@dataclass(frozen=True)
class DefaultSettings:
    """The settings when nothing is configured (no file, no NX_HAL_*
    variable, no argument): Config's defaults without importing pydantic.
    ``prefer`` (which needs pydantic) is made when read."""

    plugins: dict[str, dict[str, Any]] = field(default_factory=dict)
    disable: list[str] = field(default_factory=list)
    plugin_path: list[str] = field(default_factory=list)
    isolate_probe: bool = True
    probe_cache: bool = True
    probe_timeout: float = 60.0
    cache_dir: Path = field(default_factory=default_cache_dir)
    compile_cache: bool = True
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    child_memory_limit: int = field(default_factory=default_child_memory_limit)

    @property
    def prefer(self) -> list[Selector]:
        """The default preference order, as selectors."""
        from nx_hal.selectors import DEFAULT_PREFERENCE, Selector

        return [Selector.parse(s) for s in DEFAULT_PREFERENCE]


class LoadedConfig:
    """The config, where each value came from, and the files read.

    ``config`` is the validated pydantic model; with nothing configured
    (``config`` None here) it is made on first read, and ``settings`` gives
    the same values without pydantic."""

    def __init__(self, config: Config | None, origins: dict[tuple[str, ...], str], files: list[Path],
                 warnings: list[str] | None = None) -> None:
        self._config = config
        self._defaults = DefaultSettings() if config is None else None
        self.origins = origins
        self.files = files
        self.warnings = warnings if warnings is not None else []

    @property
    def config(self) -> Config:
        """The validated settings (made on first use when only defaults were needed)."""
        if self._config is None:
            from nx_hal._config_model import Config

            self._config = Config.model_validate({})
        return self._config

    @property
    def settings(self) -> Config | DefaultSettings:
        """The effective settings: ``config``, or its defaults before it is made."""
        if self._config is not None or self._defaults is None:
            return self.config
        return self._defaults

    def origin(self, *key: str) -> str:
        """Where the setting at ``key`` came from: a file and key, a variable, an argument or the default."""
        for n in range(len(key), 0, -1):
            if key[:n] in self.origins:
                return self.origins[key[:n]]
        return "default"


def _search_dirs(start: Path) -> list[Path]:
    """The directories searched for config files: ``start`` and its parents,
    up to the user's home (not above it) and not across a filesystem
    boundary, as git does (GIT_DISCOVERY_ACROSS_FILESYSTEM)."""
    known = home_dir()  # HOME only: a user without a passwd entry has no other
    home = known.resolve() if known is not None else None
    try:
        device = start.stat().st_dev
    except OSError:
        return []
    dirs = []
    for directory in (start, *start.parents):
        try:
            if directory.stat().st_dev != device:
                break
        except OSError:
            break
        dirs.append(directory)
        if directory == home:
            break
    return dirs


def _find_upwards(start: Path, name: str) -> Path | None:
    for directory in _search_dirs(start):
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def untrusted_reason(path: Path) -> str | None:
    """Why a config file found by searching may not be trusted (None: it may).
    It may set plugin_path, that is: say which libraries this process loads.
    So it must be the user's own and only the user may change it, as git
    requires of a repository (safe.directory). A symlink is checked as itself
    (its owner and its directory: in a sticky directory such as /tmp anyone
    may plant one naming a file of ours) and as what it names, link by link,
    down to the file and the file's own directory."""
    uid = os.geteuid()
    current, prefix = path, ""
    for _ in range(40):  # the kernel's limit on links followed (ELOOP)
        try:
            link = current.lstat()
            if not stat.S_ISLNK(link.st_mode):
                return _untrusted_file(current, current.stat(), current.parent.stat(), uid, prefix)
            parent = current.parent.stat()
            target = Path(os.readlink(current))
        except OSError as exc:
            return f"{prefix}cannot stat it: {exc.strerror}"
        # A link's own mode means nothing (always 0777): its owner and directory do.
        if link.st_uid != uid:
            return f"{prefix}it is a symbolic link owned by uid {link.st_uid}, not by this user (uid {uid})"
        reason = _untrusted_directory(current.parent, parent, uid, prefix)
        if reason is not None:
            return reason
        # What the link names, in its real directory (whose own links are resolved).
        named = Path(os.path.realpath(current.parent)) / target
        current = Path(os.path.realpath(named.parent)) / named.name
        prefix = f"its target {current}: "
    return f"{prefix}too many levels of symbolic links"


def _untrusted_file(path: Path, st: os.stat_result, parent: os.stat_result, uid: int, prefix: str) -> str | None:
    if st.st_uid != uid:
        return f"{prefix}it is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{prefix}others can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return _untrusted_directory(path.parent, parent, uid, prefix)


def _untrusted_directory(directory: Path, st: os.stat_result, uid: int, prefix: str) -> str | None:
    # A directory others may write (without the sticky bit) lets them replace the file.
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return f"{prefix}others can write its directory {directory} (mode {stat.S_IMODE(st.st_mode):o})"
    if st.st_uid not in (uid, 0):
        return f"{prefix}its directory {directory} is owned by uid {st.st_uid}"
    return None


def _refuse(path: Path, reason: str) -> ConfigError:
    return ConfigError(
        f"{path}: refusing to read this config file found by searching upwards: {reason}. "
        "A config file can choose the plugin libraries this process loads. Fix its owner or mode, "
        "name a file with --config-file / NX_HAL_CONFIG_FILE, or use --no-config / NX_HAL_NO_CONFIG=1."
    )


def _is_file(path: Path) -> bool:
    """Path.is_file, with the errors it lets through (a name too long, say)
    turned into a ConfigError naming the file."""
    try:
        return path.is_file()
    except OSError as exc:
        raise ConfigError(f"config file {str(path)[:200]}: {exc.strerror}") from None


def _tomllib() -> Any:
    """The TOML parser, imported when a file is read (``tomllib``, this module's attribute)."""
    try:
        import tomllib  # novermin (3.11+; tomli below on 3.10)
    except ImportError:  # Python 3.10: the same parser from PyPI, a dependency there
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def _read_toml(path: Path) -> dict[str, Any]:
    tomllib = _tomllib()
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib lets this through
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _env_source() -> Any:
    """pydantic-settings' reader of NX_HAL_* variables, imported here: it
    costs about 60 ms and most processes set none of them."""
    from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

    class _EnvShape(BaseSettings):
        """Only tells pydantic-settings which NX_HAL_* variables exist and how to
        split nested ones; values are validated by Config."""

        model_config = SettingsConfigDict(
            env_prefix=ENV_PREFIX, env_nested_delimiter="__", case_sensitive=False, extra="ignore"
        )

        prefer: Annotated[Any, NoDecode] = None
        plugins: dict[str, dict[str, Any]] | None = None
        disable: Annotated[Any, NoDecode] = None
        plugin_path: Annotated[Any, NoDecode] = None
        isolate_probe: Annotated[Any, NoDecode] = None
        probe_timeout: Annotated[Any, NoDecode] = None
        probe_cache: Annotated[Any, NoDecode] = None
        cache_dir: Annotated[Any, NoDecode] = None
        compile_cache: Annotated[Any, NoDecode] = None
        cache_max_bytes: Annotated[Any, NoDecode] = None
        child_memory_limit: Annotated[Any, NoDecode] = None

    return EnvSettingsSource(_EnvShape)


def _did_you_mean(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def _env_layer() -> tuple[dict[str, Any], dict[tuple[str, ...], str], list[str]]:
    if not any(name.upper().startswith(ENV_PREFIX) for name in os.environ):
        return {}, {}, []
    values: dict[str, Any] = _env_source()()
    origins: dict[tuple[str, ...], str] = {}
    for key, value in values.items():
        if isinstance(value, dict) and key == "plugins":
            for plugin, opts in value.items():
                origins[("plugins", plugin)] = f"environment variable {ENV_PREFIX}PLUGINS"
                # Anything but a table is left to validation, which names it.
                for opt in opts if isinstance(opts, dict) else {}:
                    name = f"{ENV_PREFIX}PLUGINS__{plugin}__{opt}".upper()
                    origins[("plugins", plugin, opt)] = f"environment variable {name}"
        else:
            origins[(key,)] = f"environment variable {ENV_PREFIX}{key.upper()}"
    from nx_hal._config_model import Config

    known = {f"{ENV_PREFIX}{k.upper()}" for k in Config.model_fields} | _OTHER_ENV
    unknown = [
        name for name in os.environ
        if name.upper().startswith(ENV_PREFIX) and name.upper() not in known
        and not name.upper().startswith(f"{ENV_PREFIX}PLUGINS__")
    ]
    warnings = [f"environment variable {n} is not an nx_hal setting (ignored){_did_you_mean(n, known)}"
                for n in sorted(unknown)]
    return values, origins, warnings


def _file_layer(data: Mapping[str, Any], describe: str) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    origins: dict[tuple[str, ...], str] = {}
    for key, value in data.items():
        origins[(key,)] = describe.format(key=key)
        if key == "plugins" and isinstance(value, dict):
            for plugin, opts in value.items():
                origins[(key, plugin)] = describe.format(key=f"{key}.{plugin}")
                if isinstance(opts, dict):
                    for opt in opts:
                        origins[(key, plugin, opt)] = describe.format(key=f"{key}.{plugin}.{opt}")
    return dict(data), origins


def _merge(layers: list[tuple[dict[str, Any], dict[tuple[str, ...], str]]]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """Layers lowest first; plugin option tables merge key by key."""
    merged: dict[str, Any] = {}
    origins: dict[tuple[str, ...], str] = {}
    for values, layer_origins in layers:
        for key, value in values.items():
            if key == "plugins" and isinstance(value, dict) and isinstance(merged.get(key, {}), dict):
                tables = merged.setdefault(key, {})
                for plugin, opts in value.items():
                    current = tables.get(plugin)
                    both = isinstance(current, dict) and isinstance(opts, dict)
                    tables[plugin] = {**current, **opts} if both else opts
            else:
                merged[key] = value
        origins.update(layer_origins)
    return merged, origins


def load_config(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: str | Path | None = None,
    no_config: bool = False,
    cwd: Path | None = None,
) -> LoadedConfig:
    """Reads and validates the configuration.

    ``config_file`` (or NX_HAL_CONFIG_FILE) replaces the nx_hal.toml search;
    ``no_config`` (or NX_HAL_NO_CONFIG=1) reads no files at all.
    """
    start = (cwd or Path.cwd()).resolve()
    no_config = no_config or os.environ.get("NX_HAL_NO_CONFIG", "") not in ("", "0")
    config_file = config_file or os.environ.get("NX_HAL_CONFIG_FILE") or None
    layers: list[tuple[dict[str, Any], dict[tuple[str, ...], str]]] = []
    files: list[Path] = []
    if not no_config:
        pyproject = _find_upwards(start, "pyproject.toml")
        if pyproject is not None:
            untrusted = untrusted_reason(pyproject)
            try:
                table = _read_toml(pyproject).get("tool", {}).get("nx_hal")
            except ConfigError:
                if untrusted is None:
                    raise
                table = None  # someone else's broken file that may not configure us anyway
            if table is not None and untrusted is not None:
                raise _refuse(pyproject, untrusted)
            if isinstance(table, dict):
                files.append(pyproject)
                layers.append(_file_layer(table, f"key 'tool.nx_hal.{{key}}' in {pyproject}"))
        toml = Path(config_file) if config_file else _find_upwards(start, "nx_hal.toml")
        if toml is not None:
            if config_file and not _is_file(toml):
                raise ConfigError(f"config file {toml} does not exist")
            if not config_file:  # a file the user named is the user's choice
                untrusted = untrusted_reason(toml)
                if untrusted is not None:
                    raise _refuse(toml, untrusted)
            files.append(toml)
            layers.append(_file_layer(_read_toml(toml), f"key '{{key}}' in {toml}"))
    env_values, env_origins, warnings = _env_layer()
    layers.append((env_values, env_origins))
    if overrides:
        layers.append(_file_layer(dict(overrides), "argument '{key}'"))
    merged, origins = _merge(layers)
    if not merged:  # nothing set anywhere: the defaults, validated without pydantic
        return LoadedConfig(None, origins, files, warnings)
    from pydantic import ValidationError

    from nx_hal._config_model import Config

    try:
        config = Config.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, origins)) from None
    return LoadedConfig(config, origins, files, warnings)


def describe_errors(exc: ValidationError, origins: Mapping[tuple[str, ...], str], prefix: tuple[str, ...] = ()) -> str:
    """One line per error: where the value came from, what is wrong, the value."""
    lines = []
    for err in exc.errors():
        loc = prefix + tuple(str(p) for p in err["loc"])
        origin = "default"
        for n in range(len(loc), 0, -1):
            if loc[:n] in origins:
                origin = origins[loc[:n]]
                break
        shown = ".".join(loc)
        value = f" (got {err['input']!r})" if err["type"] != "missing" else ""
        # pydantic says "Value error, " before what a validator raised: noise to a user.
        lines.append(f"{origin}: {shown}: {err['msg'].removeprefix('Value error, ')}{value}")
    return "invalid nx_hal configuration:\n  " + "\n  ".join(lines)
