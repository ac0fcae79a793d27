"""Config sources, precedence, and error messages that say where a value came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nx_hal.config import load_config
from nx_hal.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("NX_HAL_"):
            monkeypatch.delenv(name)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults(tmp_path: Path) -> None:
    loaded = load_config(cwd=tmp_path)
    assert [str(s) for s in loaded.config.prefer] == ["ipu", "tpu", "gpu", "npu", "cpu"]
    assert loaded.origin("prefer") == "default"
    assert loaded.files == []


def test_precedence_arguments_env_toml_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml",
          '[tool.nx_hal]\nprefer = ["npu"]\nprobe_timeout = 5\ndisable = ["graphcore"]\n'
          '[tool.nx_hal.plugins.npu]\ncache_dir = "/from/pyproject"\nstreams = 2\n')
    write(tmp_path / "nx_hal.toml", 'prefer = ["tpu", "cpu"]\nprobe_timeout = 7\n'
          '[plugins.npu]\ncache_dir = "/from/toml"\n')
    loaded = load_config(cwd=tmp_path)
    assert [str(s) for s in loaded.config.prefer] == ["tpu", "cpu"]
    assert loaded.config.probe_timeout == 7
    assert loaded.config.disable == ["graphcore"]  # only pyproject sets it
    assert loaded.config.plugins["npu"] == {"cache_dir": "/from/toml", "streams": 2}
    assert "nx_hal.toml" in loaded.origin("prefer")
    assert "tool.nx_hal.disable" in loaded.origin("disable")
    assert "pyproject.toml" in loaded.origin("plugins", "npu", "streams")

    monkeypatch.setenv("NX_HAL_PREFER", "gpu, cpu!")
    monkeypatch.setenv("NX_HAL_PLUGINS__NPU__CACHE_DIR", "/from/env")
    loaded = load_config(cwd=tmp_path)
    assert [str(s) for s in loaded.config.prefer] == ["gpu", "cpu!"]
    assert loaded.config.prefer[1].required
    assert loaded.config.plugins["npu"]["cache_dir"] == "/from/env"
    assert loaded.config.plugins["npu"]["streams"] == 2
    assert loaded.origin("prefer") == "environment variable NX_HAL_PREFER"
    assert loaded.origin("plugins", "npu", "cache_dir") == "environment variable NX_HAL_PLUGINS__NPU__CACHE_DIR"

    loaded = load_config({"prefer": ["npu:cpu"], "probe_timeout": 1.5}, cwd=tmp_path)
    assert [str(s) for s in loaded.config.prefer] == ["npu:cpu"]
    assert loaded.config.probe_timeout == 1.5
    assert loaded.origin("prefer") == "argument 'prefer'"


def test_json_list_in_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NX_HAL_PREFER", '["tpu:cpu:0", "npu"]')
    loaded = load_config(cwd=tmp_path)
    sel = loaded.config.prefer[0]
    assert (sel.plugin, sel.kind, sel.index) == ("tpu", "cpu", 0)


def test_error_names_toml_key_and_file(tmp_path: Path) -> None:
    toml = write(tmp_path / "nx_hal.toml", 'probe_timeout = -3\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    text = str(info.value)
    assert f"key 'probe_timeout' in {toml}" in text
    assert "greater than 0" in text and "-3" in text


def test_error_from_a_validator_reads_without_pydantics_prefix(tmp_path: Path) -> None:
    toml = write(tmp_path / "nx_hal.toml", 'prefer = []\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    assert info.value.message == (
        f"invalid nx_hal configuration:\n  key 'prefer' in {toml}: prefer: empty: name at least one device kind "
        "or plugin (e.g. 'cpu'), or leave it unset for the default (ipu, tpu, gpu, npu, cpu) (got [])")


def test_error_names_pyproject_key(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.nx_hal]\nprefer = ["tpu", "gpu:warp"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    text = str(info.value)
    assert "tool.nx_hal.prefer" in text and "pyproject.toml" in text and "warp" in text


def test_error_names_env_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NX_HAL_PROBE_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="environment variable NX_HAL_PROBE_TIMEOUT"):
        load_config(cwd=tmp_path)


def test_unknown_key_rejected(tmp_path: Path) -> None:
    write(tmp_path / "nx_hal.toml", 'prefre = ["tpu"]\n')
    with pytest.raises(ConfigError, match="prefre"):
        load_config(cwd=tmp_path)


def test_unknown_env_variable_warned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NX_HAL_PREFERENCE", "tpu")
    loaded = load_config(cwd=tmp_path)
    assert any("NX_HAL_PREFERENCE" in w for w in loaded.warnings)


def test_bad_toml_syntax(tmp_path: Path) -> None:
    write(tmp_path / "nx_hal.toml", 'prefer = [\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(cwd=tmp_path)


def test_config_file_and_no_config(tmp_path: Path) -> None:
    write(tmp_path / "nx_hal.toml", 'prefer = ["tpu"]\n')
    other = write(tmp_path / "other.toml", 'prefer = ["npu"]\n')
    assert str(load_config(cwd=tmp_path, config_file=other).config.prefer[0]) == "npu"
    assert str(load_config(cwd=tmp_path, no_config=True).config.prefer[0]) == "ipu"
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(cwd=tmp_path, config_file=tmp_path / "missing.toml")


def test_config_found_in_parent_directory(tmp_path: Path) -> None:
    write(tmp_path / "nx_hal.toml", 'prefer = ["npu:cpu"]\n')
    child = tmp_path / "a" / "b"
    child.mkdir(parents=True)
    assert str(load_config(cwd=child).config.prefer[0]) == "npu:cpu"


@pytest.mark.parametrize("text", ["", ":", "tpu::0", "a:b:c:d", "npu:cpu:x", "npu:warp"])
def test_bad_selectors(text: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_config({"prefer": [text]}, cwd=tmp_path)


# -- which config files found by searching upwards are trusted -----------------------------------
# A config file can set plugin_path, that is: choose the libraries this process loads.

def test_world_writable_config_in_a_parent_is_refused(tmp_path: Path) -> None:
    toml = write(tmp_path / "nx_hal.toml", 'plugin_path = ["/tmp/evil"]\n')
    toml.chmod(0o666)
    child = tmp_path / "project"
    child.mkdir()
    with pytest.raises(ConfigError) as err:
        load_config(cwd=child)
    assert str(toml) in err.value.message
    assert "others can write it (mode 666)" in err.value.message
    assert "NX_HAL_CONFIG_FILE" in err.value.message  # says the way out
    # Named explicitly, the same file is the user's choice.
    assert load_config(config_file=toml, cwd=child).config.plugin_path == ["/tmp/evil"]
    assert load_config(no_config=True, cwd=child).config.plugin_path == []


def test_config_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    toml = write(tmp_path / "nx_hal.toml", 'prefer = ["npu"]\n')
    os.chown(toml, 65534, 65534)
    with pytest.raises(ConfigError, match=r"owned by uid 65534, not by this user \(uid 0\)"):
        load_config(cwd=tmp_path)


def test_config_in_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    write(shared / "nx_hal.toml", 'prefer = ["npu"]\n')
    shared.chmod(0o777)  # without the sticky bit anyone may replace the file
    with pytest.raises(ConfigError, match="others can write its directory"):
        load_config(cwd=shared)
    shared.chmod(0o1777)  # as /tmp: the owner's file stays the owner's
    assert str(load_config(cwd=shared).config.prefer[0]) == "npu"


def _sticky_with_link(tmp_path: Path) -> tuple[Path, Path]:
    """A sticky directory anyone may write (as /tmp) holding ``nx_hal.toml``,
    a symlink to a config file of ours elsewhere that sets plugin_path."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    private = tmp_path / "private"
    private.mkdir()
    private.chmod(0o755)
    target = write(private / "real.toml", 'plugin_path = ["/tmp/evil"]\n')
    target.chmod(0o644)
    link = shared / "nx_hal.toml"
    link.symlink_to(target)
    return link, target


def test_config_symlink_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    """Issue 29, item 12: in a sticky directory another user may plant a
    symlink named nx_hal.toml naming a file of ours; following the link
    checked only our file. The link's owner counts too."""
    import os

    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    link, _ = _sticky_with_link(tmp_path)
    assert load_config(cwd=link.parent).config.plugin_path == ["/tmp/evil"]  # our own link: ours
    os.lchown(link, 65534, 65534)
    with pytest.raises(ConfigError) as err:
        load_config(cwd=link.parent)
    assert str(link) in err.value.message
    assert "it is a symbolic link owned by uid 65534, not by this user (uid 0)" in err.value.message


def test_config_symlink_is_checked_as_its_target(tmp_path: Path) -> None:
    """The target's own directory counts: one others can write lets them
    replace the file the link names."""
    import os

    link, target = _sticky_with_link(tmp_path)
    target.parent.chmod(0o777)
    with pytest.raises(ConfigError) as err:
        load_config(cwd=link.parent)
    assert f"its target {target}: others can write its directory {target.parent} (mode 777)" in err.value.message
    target.parent.chmod(0o755)
    target.chmod(0o666)
    with pytest.raises(ConfigError, match=rf"its target {target}: others can write it \(mode 666\)"):
        load_config(cwd=link.parent)
    if os.geteuid() == 0:
        # The brief's case: the planted link and the file it names are both another user's.
        target.chmod(0o644)
        os.chown(target, 65534, 65534)
        os.lchown(link, 65534, 65534)
        with pytest.raises(ConfigError, match="owned by uid 65534"):
            load_config(cwd=link.parent)


def test_config_symlink_chain_is_checked_link_by_link(tmp_path: Path) -> None:
    """nx_hal.toml -> a link in a directory others can write -> our file:
    whoever may replace the middle link chooses the config."""
    link, target = _sticky_with_link(tmp_path)
    middle_dir = tmp_path / "middle"
    middle_dir.mkdir()
    middle = middle_dir / "hop.toml"
    middle.symlink_to(target)
    link.unlink()
    link.symlink_to(middle)
    middle_dir.chmod(0o755)
    assert load_config(cwd=link.parent).config.plugin_path == ["/tmp/evil"]
    middle_dir.chmod(0o777)
    with pytest.raises(ConfigError, match=f"its target {middle}: others can write its directory {middle_dir}"):
        load_config(cwd=link.parent)


def test_untrusted_pyproject_only_matters_with_an_nx_hal_table(tmp_path: Path) -> None:
    project = write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    project.chmod(0o666)
    assert load_config(cwd=tmp_path).files == []
    write(project, '[tool.nx_hal]\nplugin_path = ["/tmp/evil"]\n')
    with pytest.raises(ConfigError, match="others can write it"):
        load_config(cwd=tmp_path)


def test_search_stops_at_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "nx_hal.toml", 'prefer = ["npu"]\n')  # above home: not searched
    home = tmp_path / "home"
    project = home / "project"
    project.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert load_config(cwd=project).files == []
    write(home / "nx_hal.toml", 'prefer = ["tpu"]\n')  # home itself is
    assert load_config(cwd=project).files == [home / "nx_hal.toml"]


def test_search_stops_at_a_filesystem_boundary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    write(tmp_path / "nx_hal.toml", 'prefer = ["npu"]\n')
    mount = tmp_path / "mnt"
    mount.mkdir()
    real_stat = os.stat

    class OtherDevice:
        """What stat says of a directory another filesystem is mounted on."""

        def __init__(self, st: os.stat_result) -> None:
            self._st = st

        def __getattr__(self, name: str) -> object:
            return self._st.st_dev + 1 if name == "st_dev" else getattr(self._st, name)

    def fake_stat(path: str | os.PathLike[str] | int, *args: Any, **kwargs: Any) -> object:
        st = real_stat(path, *args, **kwargs)
        return OtherDevice(st) if Path(str(path)) == mount else st

    monkeypatch.setattr(os, "stat", fake_stat)
    assert load_config(cwd=mount).files == []
    monkeypatch.undo()
    assert load_config(cwd=mount).files == [tmp_path / "nx_hal.toml"]


def test_unknown_variable_warns_with_the_likely_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped NX_HAL_* variable is not silent in the Python API: configure()
    warns, naming the variable and the setting it probably meant."""
    import nx_hal
    from nx_hal import api
    from nx_hal.registry import Registry  # the class api makes

    # The process-wide registry and default device come back after the test.
    monkeypatch.setattr(api, "_registry", api._registry)
    monkeypatch.setattr(api, "_default", api._default)
    monkeypatch.setenv("NX_HAL_PREFFER", "cpu")
    monkeypatch.setenv("NX_HAL_SOMETHING_ELSE", "1")
    monkeypatch.setattr(Registry, "discover", lambda self, isolate=None: None)
    monkeypatch.setattr(Registry, "load_all", lambda self, isolate=None: None)
    with pytest.warns(nx_hal.ConfigWarning) as caught:
        nx_hal.configure(no_config=True)
    messages = sorted(str(w.message) for w in caught if issubclass(w.category, nx_hal.ConfigWarning))
    assert messages == [
        "environment variable NX_HAL_PREFFER is not an nx_hal setting (ignored); did you mean NX_HAL_PREFER?",
        "environment variable NX_HAL_SOMETHING_ELSE is not an nx_hal setting (ignored)",
    ]


# ---------------------------------------------------------------- cache_max_bytes


def test_cache_max_bytes_default(tmp_path: Path) -> None:
    from nx_hal.store import DEFAULT_CACHE_MAX_BYTES

    loaded = load_config(no_config=True, cwd=tmp_path)
    assert loaded.settings.cache_max_bytes == DEFAULT_CACHE_MAX_BYTES == 2 * 1024**3  # without pydantic
    assert loaded.config.cache_max_bytes == DEFAULT_CACHE_MAX_BYTES
    assert loaded.config.model_dump(mode="json")["cache_max_bytes"] == DEFAULT_CACHE_MAX_BYTES  # `nx-hal config`
    assert loaded.origin("cache_max_bytes") == "default"


@pytest.mark.parametrize(("given", "value"), [
    ("500MB", 500 * 1000**2), ("2GiB", 2 * 1024**3), ("123", 123), ("0", 0), (" 1.5 KiB", 1536),
])
def test_cache_max_bytes_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, value: int) -> None:
    monkeypatch.setenv("NX_HAL_CACHE_MAX_BYTES", given)
    loaded = load_config(no_config=True, cwd=tmp_path)
    assert loaded.config.cache_max_bytes == value
    assert loaded.origin("cache_max_bytes") == "environment variable NX_HAL_CACHE_MAX_BYTES"
    assert loaded.warnings == []


@pytest.mark.parametrize(("text", "value"), [('"500MB"', 500 * 1000**2), ('"2GiB"', 2 * 1024**3), ("4096", 4096)])
def test_cache_max_bytes_from_toml(tmp_path: Path, text: str, value: int) -> None:
    write(tmp_path / "nx_hal.toml", f"cache_max_bytes = {text}\n")
    loaded = load_config(cwd=tmp_path)
    assert loaded.config.cache_max_bytes == value
    assert "nx_hal.toml" in loaded.origin("cache_max_bytes")
    assert load_config({"cache_max_bytes": 7}, cwd=tmp_path).config.cache_max_bytes == 7  # an argument wins


@pytest.mark.parametrize("given", ["-1", "lots", "12 parsecs", "true"])
def test_cache_max_bytes_rejected_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv("NX_HAL_CACHE_MAX_BYTES", given)
    with pytest.raises(ConfigError) as err:
        load_config(no_config=True, cwd=tmp_path)
    message = err.value.message
    assert "environment variable NX_HAL_CACHE_MAX_BYTES: cache_max_bytes" in message
    assert "'500MB' or '2GiB'" in message and repr(given) in message


@pytest.mark.parametrize("text", ["-1", '"lots"', "true", "1.5"])
def test_cache_max_bytes_rejected_from_toml(tmp_path: Path, text: str) -> None:
    toml = write(tmp_path / "nx_hal.toml", f"cache_max_bytes = {text}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cwd=tmp_path)
    assert f"key 'cache_max_bytes' in {toml}: cache_max_bytes" in err.value.message
    assert "size in bytes" in err.value.message


def test_a_config_file_name_the_os_refuses_is_named_to_200_characters() -> None:
    """A name too long for the OS is a ConfigError showing its first 200 characters, not 5000."""
    name = "/" + "a" * 5000
    with pytest.raises(ConfigError) as info:
        load_config(config_file=name)
    assert f"config file {name[:200]}: " in info.value.message
    assert name[:201] not in info.value.message


def test_a_plugin_option_error_names_the_table_it_came_from(tmp_path: Path) -> None:
    """The origin of a bad plugin option is its own plugin's table, the
    nearest origin recorded (not the whole plugins table's)."""
    from pydantic import BaseModel

    from nx_hal.plugin import PluginSpec
    from nx_hal.registry import Registry

    class Options(BaseModel):
        counts: dict[str, int] = {}

    toml = tmp_path / "nx_hal.toml"
    toml.write_text('[plugins.fixture.counts]\nfirst = "many"\n')
    reg = Registry(load_config(config_file=toml, cwd=tmp_path))
    record = reg.add(PluginSpec(name="fixture", library=tmp_path / "libnxhal_fixture.so", options_model=Options))
    # The error is at plugins.fixture.counts.first; the nearest origin
    # recorded is the counts table.
    with pytest.raises(ConfigError, match=r"key 'plugins\.fixture\.counts' in "):
        reg.plugin_options(record)
