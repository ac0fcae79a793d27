"""The configuration's pydantic model (nx_hal.config.Config), in a module of
its own so that a start with nothing configured does not import pydantic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from nx_hal._config_defaults import default_child_memory_limit, split_list
from nx_hal.selectors import DEFAULT_PREFERENCE, Selector
from nx_hal.store.location import DEFAULT_CACHE_MAX_BYTES, default_cache_dir

__all__ = ["Config"]


class Config(BaseModel):
    """The effective configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefer: list[Selector] = Field(
        default_factory=lambda: [Selector.parse(s) for s in DEFAULT_PREFERENCE],
        description="Device selectors in order of preference; a trailing '!' makes one required.",
    )
    plugins: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Options per plugin, validated by each plugin's model."
    )
    disable: list[str] = Field(default_factory=list, description="Plugins not to load.")
    plugin_path: list[str] = Field(
        default_factory=list, description="Directories with libnxhal_<name>.so plugin libraries."
    )
    isolate_probe: bool = Field(
        True, description="Probe plugins in a child process first (a crash or hang becomes a reason).")
    probe_cache: bool = Field(
        True, description="Keep probe verdicts in cache_dir/probe, so a warm start spawns no child.")
    probe_timeout: float = Field(60.0, gt=0, description="Seconds a probe may take.")
    cache_dir: Path = Field(default_factory=default_cache_dir, description="Compile cache location.")
    compile_cache: bool = Field(True, description="Keep compiled executables in cache_dir.")
    cache_max_bytes: ByteSize = Field(
        ByteSize(DEFAULT_CACHE_MAX_BYTES),
        description="Most bytes cache_dir's entries may hold; the least recently used are removed past it. "
        "A number of bytes or a size like '500MB' or '2GiB'; 0: no limit.",
    )
    child_memory_limit: ByteSize = Field(
        default_factory=lambda: ByteSize(default_child_memory_limit()),
        description="Most memory (data, in bytes) each child process may take: the probe, the sandbox, the ONNX "
        "converter and the StableHLO verifier; one that would take more is stopped with ResourceExhaustedError. "
        "A number of bytes or a size like '8GiB'; 0: no limit. Default: three quarters of the machine's memory.",
    )

    @field_validator("prefer", mode="before")
    @classmethod
    def _parse_prefer(cls, value: object) -> object:
        value = split_list(value)
        if isinstance(value, list):
            if not value:  # "" or ",,": no device could ever be chosen
                raise ValueError("empty: name at least one device kind or plugin (e.g. 'cpu'), or leave it unset "
                                 f"for the default ({', '.join(DEFAULT_PREFERENCE)})")
            return [Selector.parse(v) if isinstance(v, str) else v for v in value]
        return value

    @field_validator("cache_max_bytes", "child_memory_limit", mode="wrap")
    @classmethod
    def _parse_size(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        bad = isinstance(value, bool) or (isinstance(value, int) and value < 0)
        if not bad:
            try:
                return handler(value)
            except ValidationError:
                pass
        raise ValueError("expected a size in bytes: a whole number >= 0 or a size like '500MB' or '2GiB' "
                         "(0: no limit)")

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _parse_cache_dir(cls, value: object) -> object:
        # Path("") is the working directory: an empty value would scatter
        # the cache (discovery records naming libraries to load included) there.
        if isinstance(value, (str, os.PathLike)) and not os.fspath(value).strip():
            raise ValueError(f"empty; name a directory, or leave it unset for the default ({default_cache_dir()})")
        return value

    @field_validator("disable", mode="before")
    @classmethod
    def _parse_disable(cls, value: object) -> object:
        return split_list(value)

    @field_validator("plugin_path", mode="before")
    @classmethod
    def _parse_path(cls, value: object) -> object:
        if isinstance(value, str):
            return [p for p in value.split(os.pathsep) if p]
        return value
