"""Config as its user meets it: which NX_HAL_* variables are warned about
(exactly), where the default cache directory is, the defaults without
pydantic, and the search upwards when a directory cannot be read."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from nx_hal import config as config_module
from nx_hal.config import DefaultSettings, load_config, untrusted_reason
from nx_hal.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("NX_HAL_"):
            monkeypatch.delenv(name)


# -- NX_HAL_* variables: settings, variables read elsewhere, and mistakes ---------------------------

def test_only_unknown_variables_are_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NX_HAL_PREFER", "cpu")  # a setting
    monkeypatch.setenv("NX_HAL_PROBE_TIMEOUT", "5")  # a setting
    monkeypatch.setenv("NX_HAL_VENDOR_LOGS", "1")  # read elsewhere
    monkeypatch.setenv("NX_HAL_PLUGINS__NPU__STREAMS", "2")  # a plugin's option
    monkeypatch.setenv("NX_HAL_PREFERENCE", "tpu")  # a mistake
    monkeypatch.setenv("NX_HAL_ZZZ", "1")  # another, like nothing known
    loaded = load_config(no_config=True, cwd=tmp_path)
    assert loaded.warnings == [
        "environment variable NX_HAL_PREFERENCE is not an nx_hal setting (ignored); did you mean NX_HAL_PREFER?",
        "environment variable NX_HAL_ZZZ is not an nx_hal setting (ignored)",
    ]
    assert [str(s) for s in loaded.config.prefer] == ["cpu"] and loaded.config.probe_timeout == 5
    assert loaded.config.plugins == {"npu": {"streams": "2"}}


def test_known_variables_alone_warn_about_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NX_HAL_DISABLE", "graphcore")
    monkeypatch.setenv("NX_HAL_CONFIG_FILE", "")
    monkeypatch.setenv("NX_HAL_NO_CONFIG", "1")
    monkeypatch.setenv("NX_HAL_PLUGINS__TPU__BACKEND", "cpu")
    loaded = load_config(cwd=tmp_path)
    assert loaded.warnings == []
    assert loaded.config.disable == ["graphcore"]
    assert loaded.origin("plugins", "tpu", "backend") == "environment variable NX_HAL_PLUGINS__TPU__BACKEND"


def test_no_variables_no_warnings_and_defaults(tmp_path: Path) -> None:
    loaded = load_config(no_config=True, cwd=tmp_path)
    assert loaded.warnings == [] and loaded.origins == {} and loaded.files == []


# -- the default cache directory --------------------------------------------------------------------

def test_cache_dir_under_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert load_config(no_config=True, cwd=tmp_path).settings.cache_dir == tmp_path / "xdg" / "nx_hal"


@pytest.mark.parametrize("xdg", [None, ""])
def test_cache_dir_under_home_without_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      xdg: str | None) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert load_config(no_config=True, cwd=tmp_path).settings.cache_dir == tmp_path / "home" / ".cache" / "nx_hal"


# -- defaults without pydantic ----------------------------------------------------------------------

def test_unconfigured_settings_are_the_models_defaults(tmp_path: Path) -> None:
    loaded = load_config(no_config=True, cwd=tmp_path)
    settings = loaded.settings
    assert type(settings) is DefaultSettings  # nothing configured: pydantic not needed
    assert loaded.settings is settings
    model = loaded.config  # made now, from the same defaults
    for f in dataclasses.fields(DefaultSettings):
        assert getattr(settings, f.name) == getattr(model, f.name), f.name
    assert settings.isolate_probe is True and settings.probe_cache is True and settings.compile_cache is True
    assert [str(s) for s in settings.prefer] == [str(s) for s in model.prefer] == ["ipu", "tpu", "gpu", "npu", "cpu"]
    after: object = loaded.settings
    assert after is model  # once made, the model is the settings


def test_configured_settings_are_the_model(tmp_path: Path) -> None:
    loaded = load_config({"probe_cache": False}, no_config=True, cwd=tmp_path)
    assert loaded.settings is loaded.config
    assert loaded.settings.probe_cache is False


def test_default_settings_are_read_only() -> None:
    settings = DefaultSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.probe_cache = False  # type: ignore[misc]


def test_module_attributes() -> None:
    import tomllib

    assert config_module.tomllib is tomllib
    assert config_module.tomllib.loads('a = 1\n') == {"a": 1}
    with pytest.raises(AttributeError, match=r"^module 'nx_hal.config' has no attribute 'tomlib'$"):
        _ = config_module.tomlib


# -- files: unreadable places and broken files ------------------------------------------------------

def test_working_directory_that_does_not_exist_reads_no_files(tmp_path: Path) -> None:
    (tmp_path / "nx_hal.toml").write_text('prefer = ["npu"]\n')
    loaded = load_config(cwd=tmp_path / "gone")
    assert loaded.files == []


def test_search_stops_at_a_directory_it_cannot_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As git stops at a parent it may not enter: the directories above it are
    not searched, and the error does not escape."""
    (tmp_path / "nx_hal.toml").write_text('prefer = ["npu"]\n')
    middle = tmp_path / "a"
    project = middle / "b"
    project.mkdir(parents=True)
    real_stat = os.stat

    def fake_stat(path: str | os.PathLike[str] | int, *args: Any, **kwargs: Any) -> os.stat_result:
        if isinstance(path, (str, os.PathLike)) and Path(os.fspath(path)) == middle:
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", fake_stat)
    assert load_config(cwd=project).files == []
    monkeypatch.undo()
    assert load_config(cwd=project).files == [tmp_path / "nx_hal.toml"]


def test_untrusted_reason_of_a_missing_file(tmp_path: Path) -> None:
    assert untrusted_reason(tmp_path / "nx_hal.toml") == "cannot stat it: No such file or directory"


def test_untrusted_reason_of_a_good_file(tmp_path: Path) -> None:
    toml = tmp_path / "nx_hal.toml"
    toml.write_text("")
    toml.chmod(0o644)
    tmp_path.chmod(0o755)
    assert untrusted_reason(toml) is None


def test_broken_pyproject_others_can_write_is_ignored(tmp_path: Path) -> None:
    """Someone else's broken file may not configure us anyway: not an error."""
    project = tmp_path / "pyproject.toml"
    project.write_text("[tool.nx_hal\nprefer = [\n")
    project.chmod(0o666)
    loaded = load_config(cwd=tmp_path)
    assert loaded.files == [] and loaded.warnings == []
    project.chmod(0o644)  # the user's own: its error is theirs to see
    with pytest.raises(ConfigError) as err:
        load_config(cwd=tmp_path)
    assert err.value.message.startswith(f"{project}: not valid TOML: ")


def test_config_file_that_cannot_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "nx_hal.toml"
    toml.write_text('prefer = ["npu"]\n')
    real_open = Path.open

    def refusing_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == toml:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refusing_open)  # as chmod 000 does, except for root
    with pytest.raises(ConfigError) as err:
        load_config(config_file=toml, cwd=tmp_path)
    assert err.value.message == f"{toml}: cannot read: Permission denied"
