"""The configuration model (nx_hal.config.Config): its defaults, its
immutability, and the values each field takes or refuses."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from nx_hal._config_model import Config
from nx_hal.config import DefaultSettings, load_config
from nx_hal.errors import ConfigError
from nx_hal.store import DEFAULT_CACHE_MAX_BYTES


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("NX_HAL_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    config = Config()
    assert [str(s) for s in config.prefer] == ["ipu", "tpu", "gpu", "npu", "cpu"]
    assert config.plugins == {}
    assert config.disable == []
    assert config.plugin_path == []
    assert config.isolate_probe is True
    assert config.probe_cache is True
    assert config.probe_timeout == 60.0
    assert config.compile_cache is True
    assert config.cache_max_bytes == DEFAULT_CACHE_MAX_BYTES


def test_defaults_match_the_settings_made_without_pydantic(tmp_path: Path) -> None:
    # A start with nothing configured reads DefaultSettings; the first read
    # of .config makes the pydantic model: both must say the same.
    loaded = load_config(no_config=True, cwd=tmp_path)
    before = loaded.settings
    assert isinstance(before, DefaultSettings)
    config = loaded.config
    for field in dataclasses.fields(DefaultSettings):
        assert getattr(config, field.name) == getattr(before, field.name), field.name
    assert config.prefer == before.prefer


def test_one_setting_leaves_the_others_at_their_defaults(tmp_path: Path) -> None:
    config = load_config({"disable": ["npu"]}, no_config=True, cwd=tmp_path).config
    assert config.disable == ["npu"]
    assert config.probe_timeout == 60.0
    assert config.compile_cache is True


def test_config_is_immutable() -> None:
    config = Config(probe_timeout=5)
    with pytest.raises(ValidationError) as info:
        config.probe_timeout = 10  # type: ignore[misc]
    assert info.value.errors()[0]["type"] == "frozen_instance"
    assert config.probe_timeout == 5.0


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(ValidationError) as info:
        Config.model_validate({"probe_timout": 5})
    assert [(e["loc"], e["type"]) for e in info.value.errors()] == [(("probe_timout",), "extra_forbidden")]


@pytest.mark.parametrize(("given", "value"), [(0, 0), (1, 1), (4096, 4096), ("1KiB", 1024), ("0", 0)])
def test_cache_max_bytes_accepts(given: object, value: int) -> None:
    # 0 is no limit, not an error: it is the boundary of what is taken.
    assert Config.model_validate({"cache_max_bytes": given}).cache_max_bytes == value


def test_cache_max_bytes_zero_as_an_argument(tmp_path: Path) -> None:
    loaded = load_config({"cache_max_bytes": 0}, no_config=True, cwd=tmp_path)
    assert loaded.config.cache_max_bytes == 0
    assert loaded.origin("cache_max_bytes") == "argument 'cache_max_bytes'"


@pytest.mark.parametrize("given", [-1, -2, True, False, 1.5, "lots"])
def test_cache_max_bytes_refuses(given: object) -> None:
    with pytest.raises(ValidationError) as info:
        Config.model_validate({"cache_max_bytes": given})
    [error] = info.value.errors()
    assert error["loc"] == ("cache_max_bytes",)
    assert error["msg"] == ("Value error, expected a size in bytes: a whole number >= 0 or a size like "
                            "'500MB' or '2GiB' (0: no limit)")


def test_cache_max_bytes_refused_argument_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"cache_max_bytes": -1}, no_config=True, cwd=tmp_path)
    assert info.value.message == (
        "invalid nx_hal configuration:\n  argument 'cache_max_bytes': cache_max_bytes: expected a "
        "size in bytes: a whole number >= 0 or a size like '500MB' or '2GiB' (0: no limit) (got -1)")


@pytest.mark.parametrize(("given", "value"), [(0.5, 0.5), (60, 60.0), ("2.5", 2.5)])
def test_probe_timeout_accepts(given: object, value: float) -> None:
    assert Config.model_validate({"probe_timeout": given}).probe_timeout == value


@pytest.mark.parametrize("given", [0, -1, "soon"])
def test_probe_timeout_refuses(given: object) -> None:
    with pytest.raises(ValidationError) as info:
        Config.model_validate({"probe_timeout": given})
    assert [e["loc"] for e in info.value.errors()] == [("probe_timeout",)]


def test_lists_from_text() -> None:
    config = Config.model_validate({
        "prefer": "npu:cpu, gpu!",
        "disable": "graphcore, npu",
        "plugin_path": os.pathsep.join(["/opt/a", "", "/opt/b"]),
    })
    assert [str(s) for s in config.prefer] == ["npu:cpu", "gpu!"]
    assert config.prefer[1].required
    assert config.disable == ["graphcore", "npu"]
    assert config.plugin_path == ["/opt/a", "/opt/b"]


@pytest.mark.parametrize("given", ["", ",,", " , ", [], "[]"])
def test_an_empty_preference_list_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: object) -> None:
    """It would disable every device, silently."""
    with pytest.raises(ConfigError) as info:
        load_config({"prefer": given}, no_config=True, cwd=tmp_path)
    assert info.value.message == (
        "invalid nx_hal configuration:\n  argument 'prefer': prefer: empty: name at least one device kind or plugin "
        f"(e.g. 'cpu'), or leave it unset for the default (ipu, tpu, gpu, npu, cpu) (got {given!r})")
    if isinstance(given, str):
        monkeypatch.setenv("NX_HAL_PREFER", given)
        with pytest.raises(ConfigError, match="environment variable NX_HAL_PREFER: prefer: empty: "):
            load_config(no_config=True, cwd=tmp_path)
