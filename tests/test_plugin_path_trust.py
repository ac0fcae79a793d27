"""One trust rule for plugin_path / NX_HAL_PLUGIN_PATH, the same in the Python
registry and in the C loader: absolute directories only; each directory and
each library (a symlink: its target and the target's directory) owned by this
user or root and writable by no group or other; anything else is skipped
with a reason naming the path, and both say the same words.

Giving a file to another user needs root: those cases skip elsewhere."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nx_hal.config import load_config
from nx_hal.registry import Registry
from tests import cbuild
from tests.test_loader_manifests import LOADER_DEFINES, Env, _driver_source, plugins_dir, write_manifest

NAME = "fixture_hostmem"  # the plugin name of libnxhal_fixture_hostmem.so
OTHER_UID = 65534  # nobody
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C loader's search API in a program (tests/test_loader_manifests.py's driver)."""
    return cbuild.build_program("loader_search_driver", [_driver_source(), *cbuild.loader_sources()],
                                tmp_path_factory.mktemp("bin"), defines=LOADER_DEFINES)


def _dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def _library(directory: Path, mode: int = 0o755) -> Path:
    lib = cbuild.build_fixture("hostmem", directory)
    lib.chmod(mode)
    return lib


def _writable(path: Path, mode: int) -> str:
    return f"'{path}' is writable by group or others (mode {mode:04o}; chmod go-w to trust it)"


def _foreign(path: Path) -> str:
    return f"'{path}' is owned by uid {OTHER_UID}, not by this user (uid {os.geteuid()}) or root"


# Each case plants a plugin directory under a root and returns
# (the directory as plugin_path names it, the library file, the reason expected).
Planted = tuple[Path, Path, str]


def _dir_mode(mode: int) -> Callable[[Path], Planted]:
    def plant(root: Path) -> Planted:
        directory = _dir(root / "plugins")
        lib = _library(directory)
        directory.chmod(mode)  # after the copy: a sticky directory's files are still ours
        return directory, lib, _writable(directory, mode)
    return plant


def _dir_foreign(root: Path) -> Planted:
    directory = _dir(root / "plugins")
    lib = _library(directory)
    os.chown(directory, OTHER_UID, OTHER_UID)
    return directory, lib, _foreign(directory)


def _lib_writable(root: Path) -> Planted:
    directory = _dir(root / "plugins")
    lib = _library(directory, 0o777)
    return directory, lib, _writable(lib, 0o777)


def _lib_foreign(root: Path) -> Planted:
    directory = _dir(root / "plugins")
    lib = _library(directory)
    os.chown(lib, OTHER_UID, OTHER_UID)
    return directory, lib, _foreign(lib)


def _linked(root: Path, target_dir_mode: int, foreign_target: bool) -> Planted:
    """A library in a good directory that is a symlink to a file elsewhere."""
    directory = _dir(root / "plugins")
    elsewhere = _dir(root / "elsewhere")
    real = _library(elsewhere)
    link = directory / real.name
    link.symlink_to(real)
    if foreign_target:
        os.chown(real, OTHER_UID, OTHER_UID)
    elsewhere.chmod(target_dir_mode)
    real_path = Path(os.path.realpath(real))
    reason = _foreign(real_path) if foreign_target else _writable(real_path.parent, target_dir_mode)
    return directory, link, reason


CASES: dict[str, Callable[[Path], Planted]] = {
    "directory 0777": _dir_mode(0o777),
    "sticky directory 1777": _dir_mode(0o1777),
    "group-writable directory 0775": _dir_mode(0o775),
    "directory owned by another user": _dir_foreign,
    "library 0777": _lib_writable,
    "library owned by another user": _lib_foreign,
    "symlink into a directory others can write": lambda root: _linked(root, 0o777, False),
    "symlink to a library another user owns": lambda root: _linked(root, 0o755, True),
}
NEEDS_ROOT = {"directory owned by another user", "library owned by another user",
              "symlink to a library another user owns"}


def _case_params() -> list[object]:
    return [pytest.param(name, marks=[ROOT_ONLY] if name in NEEDS_ROOT else [], id=name) for name in CASES]


def _registry(tmp_path: Path, entry: str | None) -> Registry:
    """A registry over a fresh config; ``entry`` the plugin_path setting (None:
    NX_HAL_PLUGIN_PATH, set by the caller). Entry points are imported here
    (isolate=False): no probe child, no cache."""
    overrides: dict[str, object] = {"cache_dir": str(tmp_path / "cache")}
    if entry is not None:
        overrides["plugin_path"] = [entry]
    reg = Registry(load_config(overrides, no_config=True, cwd=tmp_path))
    reg.discover(isolate=False)
    return reg


@pytest.fixture()
def clean_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No manifest of this machine takes part in the C loader's scan."""
    for name in ("NX_HAL_PLUGIN_PATH", "VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "nothing"))
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "nothing"))


# --- Python: the registry ------------------------------------------------------


@pytest.mark.usefixtures("clean_search")
@pytest.mark.parametrize("source", ["setting", "variable"])
@pytest.mark.parametrize("case", _case_params())
def test_python_skips_untrusted_plugin_path(case: str, source: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    directory, lib, reason = CASES[case](tmp_path / "planted")
    if source == "variable":  # the C loader's scan sees it too: neither may take it
        monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(directory))
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        reg = _registry(tmp_path, str(directory) if source == "setting" else None)
    assert NAME not in reg.records, reg.records[NAME].spec
    assert reason in caplog.text
    # `nx-hal doctor` prints the config's warnings: the skip is one of them.
    assert any(reason in w and (str(lib) in w or str(directory) in w) for w in reg.loaded_config.warnings), \
        reg.loaded_config.warnings


@pytest.mark.usefixtures("clean_search")
@pytest.mark.parametrize("entry", ["plugdir", ".", "./plugdir"])
def test_python_skips_relative_plugin_path(entry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """A relative entry would make the working directory a source of code."""
    cwd = _dir(tmp_path / "cwd")
    _library(_dir(cwd / "plugdir"))
    _library(cwd)
    monkeypatch.chdir(cwd)
    for source in ("setting", "variable"):
        caplog.clear()
        monkeypatch.setenv("NX_HAL_PLUGIN_PATH", entry if source == "variable" else "")
        with caplog.at_level(logging.WARNING, logger="nx_hal"):
            reg = _registry(tmp_path, entry if source == "setting" else None)
        assert NAME not in reg.records, source
        said = f"'{entry}' is not an absolute directory"
        assert said in caplog.text, source
        assert any(said in w for w in reg.loaded_config.warnings), source


@pytest.mark.usefixtures("clean_search")
@pytest.mark.parametrize("source", ["setting", "variable"])
def test_python_loads_a_trusted_plugin_path(source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The control: a 0755 directory and library of ours, and a symlink to
    one in another such directory, are taken, with no warning."""
    directory = _dir(tmp_path / "plugins")
    lib = _library(directory)
    if source == "variable":
        monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(directory))
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        reg = _registry(tmp_path, str(directory) if source == "setting" else None)
        record = reg.records[NAME]
        assert record.spec is not None and record.spec.library == lib
        assert reg.load(record, isolate=False).state == "loaded", record.reason
        assert [d.name for d in record.devices] == ["fixture host memory"]
    assert "skipped" not in caplog.text and reg.loaded_config.warnings == []

    linked = _dir(tmp_path / "linked")
    (linked / lib.name).symlink_to(lib)
    if source == "variable":
        monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(linked))
    reg = _registry(tmp_path, str(linked) if source == "setting" else None)
    spec = reg.records[NAME].spec
    assert spec is not None and spec.library.resolve() == lib.resolve()


NO_ENTRY_POINTS = (
    "import sys, importlib.metadata as m; real = m.entry_points; "
    "m.entry_points = lambda **kw: [] if kw.get('group') == 'nx_hal' else real(**kw); "
    "from nx_hal.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.usefixtures("clean_search")
def test_doctor_names_the_skipped_directory(tmp_path: Path) -> None:
    directory, _, reason = _dir_mode(0o777)(tmp_path / "planted")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    env.update({"NX_HAL_PLUGIN_PATH": str(directory), "NX_HAL_CACHE_DIR": str(tmp_path / "cache")})
    out = subprocess.run([sys.executable, "-c", NO_ENTRY_POINTS, "doctor"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert f"warning: plugin_path entry '{directory}' skipped: {reason}" in out.stdout, out.stdout + out.stderr
    assert NAME not in out.stdout.replace(f"'{directory}'", "")


# --- C: the loader's scan --------------------------------------------------------


@pytest.mark.parametrize("case", _case_params())
def test_c_loader_skips_untrusted_plugin_path(case: str, tmp_path: Path, driver: Path) -> None:
    directory, lib, reason = CASES[case](tmp_path / "planted")
    env = Env(_dir(tmp_path / "machine"), driver)
    env.vars["NX_HAL_PLUGIN_PATH"] = str(directory)
    entries = env.run("scan").tagged("ENTRY")
    assert [(e[0], e[2], e[5]) for e in entries] == [(NAME, str(directory / lib.name), reason)]
    assert env.run("enumerate").tagged("PLUGIN") == []
    opened = env.run("open", NAME, lib)
    assert opened.status.startswith("NOT_FOUND: ") and f"skipped: {directory / lib.name}: {reason}" in opened.status
    assert f"MAPPED {lib} 0" in opened.lines  # never mapped, not even to look


def test_c_loader_ignores_relative_plugin_path(tmp_path: Path, driver: Path) -> None:
    env = Env(_dir(tmp_path / "machine"), driver)
    cwd = _dir(tmp_path / "cwd")
    lib = _library(_dir(cwd / "plugdir"))
    env.vars["NX_HAL_PLUGIN_PATH"] = "plugdir"
    assert env.run("scan", cwd=cwd).tagged("ENTRY") == []
    opened = env.run("open", NAME, lib, cwd=cwd)
    assert "ignored relative directories: NX_HAL_PLUGIN_PATH 'plugdir'" in opened.status
    assert f"MAPPED {lib} 0" in opened.lines


def test_c_loader_takes_a_trusted_plugin_path(tmp_path: Path, driver: Path) -> None:
    directory = _dir(tmp_path / "plugins")
    lib = _library(directory)
    linked = _dir(tmp_path / "linked")
    (linked / lib.name).symlink_to(lib)
    env = Env(_dir(tmp_path / "machine"), driver)
    for where in (directory, linked):
        env.vars["NX_HAL_PLUGIN_PATH"] = str(where)
        assert env.run("scan").tagged("ENTRY") == [
            [NAME, str(where / lib.name), str(where / lib.name), "NX_HAL_PLUGIN_PATH", "", "-"]]
        assert f"OPENED {where / lib.name} abi {cbuild.HOST_ABI}" in env.run("open", NAME).lines


def test_c_loader_manifest_directories_follow_the_same_rule(tmp_path: Path, driver: Path) -> None:
    """A manifest in a directory others can write, or naming a library in
    one, is skipped: the rule is the same for every directory searched."""
    env = Env(_dir(tmp_path / "machine"), driver)
    lib = _library(_dir(tmp_path / "libs"))
    venv = tmp_path / "venv"
    manifests = plugins_dir(venv)
    manifest = write_manifest(manifests, "fixture", library_path=str(lib))
    env.vars["VIRTUAL_ENV"] = str(venv)
    assert env.run("enumerate").tagged("PLUGIN") == [["fixture", str(lib)]]  # the control

    manifests.chmod(0o777)
    (entry,) = env.run("scan").tagged("ENTRY")
    assert (entry[2], entry[5]) == (str(manifest), _writable(manifests, 0o777))
    assert env.run("enumerate").tagged("PLUGIN") == []

    manifests.chmod(0o755)
    (tmp_path / "libs").chmod(0o777)
    (entry,) = env.run("scan").tagged("ENTRY")
    assert (entry[2], entry[5]) == (str(manifest), _writable(tmp_path / "libs", 0o777))
    opened = env.run("open", "fixture", lib)
    assert f"MAPPED {lib} 0" in opened.lines


@pytest.mark.usefixtures("clean_search")
@pytest.mark.parametrize("case", _case_params())
def test_python_and_c_give_the_same_reason(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """What the registry warns is what nxhal_plugin_scan says (through
    nx_hal.library.scan_plugins, the loader in this process)."""
    from nx_hal.library import scan_plugins

    directory, lib, reason = CASES[case](tmp_path / "planted")
    monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(directory))
    (entry,) = [e for e in scan_plugins() if e.origin == "NX_HAL_PLUGIN_PATH"]
    assert (entry.name, entry.skip_reason) == (NAME, reason)
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        _registry(tmp_path, None)
    assert f"'{directory / lib.name}' skipped: {reason}" in caplog.text or \
        f"'{directory}' skipped: {reason}" in caplog.text


@pytest.mark.usefixtures("clean_search")
def test_python_warns_of_a_manifest_the_loader_skips(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest in an NX_HAL_PLUGIN_PATH directory is read by the C loader;
    the registry says why it skipped one, once, as it does for libraries."""
    directory = _dir(tmp_path / "plugins")
    lib = _library(_dir(tmp_path / "libs"))
    manifest = write_manifest(directory, "loose", mode=0o666, library_path=str(lib))
    monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(directory))
    with caplog.at_level(logging.WARNING, logger="nx_hal"):
        reg = _registry(tmp_path, None)
    assert "loose" not in reg.records
    said = f"plugin_path manifest '{manifest}' skipped: {_writable(manifest, 0o666)}"
    assert reg.loaded_config.warnings == [said]
    assert caplog.text.count(said) == 1
    # An untrusted directory is one warning, not one more per file the loader lists.
    directory.chmod(0o777)
    reg = _registry(tmp_path, None)
    assert reg.loaded_config.warnings == [f"plugin_path entry '{directory}' skipped: {_writable(directory, 0o777)}"]
