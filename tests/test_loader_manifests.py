"""The C loader's plugin search: manifests, search path order, trust rules.

Every run gets a made-up environment (HOME, XDG_*, VIRTUAL_ENV, ... under
tmp_path) so plugins installed on this machine never take part.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import cbuild

ROOT = cbuild.repo_root()
# The loader's compiled-in install prefix, kept out of the way of real ones.
DATADIR = "/nonexistent/nx_hal-test-datadir"
LOADER_DEFINES = (f'NXHAL_LOADER_DATADIR="{DATADIR}"',)

# A C host over the loader's search API: one command per run, one line per fact.
DRIVER_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nx_hal/nx_hal_loader.h"

static const char* text(const char* s) { return s != NULL ? s : "-"; }

static int print_dir(const char* dir, const char* origin, void* user_data) {
  (void)user_data;
  printf("DIR %s\t%s\n", origin, dir);
  return 0;
}

static int print_entry(const nxhal_plugin_entry_t* e, void* user_data) {
  (void)user_data;
  printf("ENTRY %s\t%s\t%s\t%s\t%s\t%s\n", e->name, text(e->library), e->source, e->origin,
         e->abi_version, text(e->skip_reason));
  return 0;
}

static int print_plugin(const char* name, const char* path, void* user_data) {
  (void)user_data;
  printf("PLUGIN %s\t%s\n", name, path);
  return 0;
}

int main(int argc, char** argv) {
  nxhal_status_t* status = NULL;
  if (argc >= 2 && strcmp(argv[1], "search") == 0) {
    status = nxhal_plugin_search_path(print_dir, NULL);
  } else if (argc >= 2 && strcmp(argv[1], "scan") == 0) {
    status = nxhal_plugin_scan(print_entry, NULL);
  } else if (argc >= 2 && strcmp(argv[1], "enumerate") == 0) {
    status = nxhal_plugin_enumerate(print_plugin, NULL);
  } else if (argc >= 3 && strcmp(argv[1], "open") == 0) {
    nxhal_plugin_t* plugin = NULL;
    int i;
    status = nxhal_plugin_open_by_name(argv[2], &plugin);
    if (status == NULL) {
      printf("OPENED %s abi %u.%u\n", nxhal_plugin_path(plugin),
             (unsigned)nxhal_plugin_abi_major(plugin), (unsigned)nxhal_plugin_abi_minor(plugin));
    }
    nxhal_plugin_close(plugin);
    /* Whether a library was mapped into the process at all. */
    for (i = 3; i < argc; ++i) {
      printf("MAPPED %s %d\n", argv[i], dlopen(argv[i], RTLD_NOW | RTLD_NOLOAD) != NULL);
    }
  } else {
    fprintf(stderr, "usage: driver search|scan|enumerate|open NAME [LIBRARY...]\n");
    return 64;
  }
  if (status != NULL) {
    printf("STATUS %s: %s\n", nxhal_status_code_name(nxhal_loader_status_code(status)),
           nxhal_loader_status_message(status));
    nxhal_loader_status_free(status);
  }
  return 0;
}
"""


def _driver_source() -> Path:
    """The driver's source at a fixed place, so cached builds are reused."""
    path = cbuild.cache_dir() / "src" / "loader_search_driver.c"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != DRIVER_SOURCE:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(DRIVER_SOURCE)
        os.replace(tmp, path)
    return path


@pytest.fixture(scope="session")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver with the loader compiled in."""
    return cbuild.build_program(
        "loader_search_driver", [_driver_source(), *cbuild.loader_sources()],
        tmp_path_factory.mktemp("bin"), defines=LOADER_DEFINES)


@pytest.fixture(scope="session")
def hostmem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host-memory fixture plugin library."""
    return cbuild.build_fixture("hostmem", tmp_path_factory.mktemp("hostmem"))


class Result:
    """A driver run, split into its tagged lines."""

    def __init__(self, done: subprocess.CompletedProcess[str]) -> None:
        assert done.returncode == 0, done.stdout + done.stderr
        self.stdout = done.stdout
        self.lines = done.stdout.splitlines()

    def tagged(self, tag: str) -> list[list[str]]:
        return [line[len(tag) + 1:].split("\t") for line in self.lines if line.startswith(tag + " ")]

    @property
    def status(self) -> str:
        found = [line for line in self.lines if line.startswith("STATUS ")]
        return found[0][len("STATUS "):] if found else ""


class Env:
    """A fake machine under one temp dir: HOME, XDG dirs and prefixes."""

    def __init__(self, root: Path, driver: Path) -> None:
        self.root = root
        self.driver = driver
        self.home = root / "home"
        self.home.mkdir()
        self.vars: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_DATA_DIRS": str(root / "xdg-dirs"),
        }

    def run(self, *args: str | Path, cwd: Path | None = None) -> Result:
        done = subprocess.run([str(self.driver), *map(str, args)], capture_output=True,
                              text=True, env=self.vars, cwd=cwd or self.root, timeout=60)
        return Result(done)


@pytest.fixture()
def env(tmp_path: Path, driver: Path) -> Env:
    return Env(tmp_path, driver)


def plugins_dir(prefix: Path) -> Path:
    path = prefix / "share" / "nx_hal" / "plugins"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_manifest(directory: Path, name: str, mode: int = 0o644, **fields: str) -> Path:
    path = directory / f"{name}.json"
    body = {"file_format_version": "1.0", "name": name, "abi_version": cbuild.HOST_ABI, **fields}
    path.write_text(json.dumps(body, indent=2))
    path.chmod(mode)
    return path


def install_package(prefix: Path, library: Path, python: str = "python3.11",
                    package: str = "nx_hal_fixture") -> Path:
    """The library as a pip-installed package would hold it."""
    target = prefix / "lib" / python / "site-packages" / package / "libnxhal_fixture.so"
    target.parent.mkdir(parents=True)
    shutil.copy2(library, target)
    return target


# --- Discovery -----------------------------------------------------------------


def test_virtual_env_manifest_with_python_package(env: Env, hostmem: Path) -> None:
    venv = env.root / "venv"
    installed = install_package(venv, hostmem)
    write_manifest(plugins_dir(venv), "fixture", python_package="nx_hal_fixture",
                   library="libnxhal_fixture.so")
    env.vars["VIRTUAL_ENV"] = str(venv)
    opened = env.run("open", "fixture")
    assert opened.status == ""
    assert f"OPENED {installed} abi {cbuild.HOST_ABI}" in opened.lines
    assert env.run("enumerate").tagged("PLUGIN") == [["fixture", str(installed)]]


def test_python_package_found_in_any_python_version(env: Env, hostmem: Path) -> None:
    prefix = env.root / "conda"
    # Only a newer Python's site-packages holds it; an older one is empty.
    (prefix / "lib" / "python3.9" / "site-packages").mkdir(parents=True)
    installed = install_package(prefix, hostmem, python="python3.13")
    write_manifest(plugins_dir(prefix), "fixture", python_package="nx_hal_fixture",
                   library="libnxhal_fixture.so")
    env.vars["CONDA_PREFIX"] = str(prefix)
    assert f"OPENED {installed} abi {cbuild.HOST_ABI}" in env.run("open", "fixture").lines


def test_python_package_not_installed_is_skipped_with_reason(env: Env) -> None:
    venv = env.root / "venv"
    manifest = write_manifest(plugins_dir(venv), "fixture", python_package="nx_hal_fixture",
                              library="libnxhal_fixture.so")
    env.vars["VIRTUAL_ENV"] = str(venv)
    status = env.run("open", "fixture").status
    assert status.startswith("NOT_FOUND: ")
    assert (f"skipped: {manifest}: python package library 'nx_hal_fixture/libnxhal_fixture.so' "
            f"not found under {venv}/lib/python3.*/site-packages") in status


def test_library_path_relative_to_manifest_and_escapes(env: Env, hostmem: Path) -> None:
    prefix = env.root / "opt"
    library = prefix / "lib" / "libnxhal_fixture.so"
    library.parent.mkdir(parents=True)
    shutil.copy2(hostmem, library)
    directory = plugins_dir(prefix)
    # Written by hand: escaped slashes and a \u escape must decode.
    (directory / "fixture.json").write_text(
        '{ "file_format_version" : "1.0",\n\t"name": "\\u0066ixture", "abi_version": "1.1",\n'
        '  "library_path": "..\\/..\\/..\\/lib/libnxhal_fixture.so", "future_key": "ignored" }\n')
    env.vars["XDG_DATA_DIRS"] = str(prefix / "share")
    opened = env.run("open", "fixture")
    assert f"OPENED {directory}/../../../lib/libnxhal_fixture.so abi {cbuild.HOST_ABI}" in \
        opened.lines, opened.stdout


def test_library_path_wins_over_python_package(env: Env, hostmem: Path) -> None:
    venv = env.root / "venv"
    install_package(venv, hostmem)
    absolute = env.root / "elsewhere" / "libnxhal_fixture.so"
    absolute.parent.mkdir()
    shutil.copy2(hostmem, absolute)
    write_manifest(plugins_dir(venv), "fixture", python_package="nx_hal_fixture",
                   library="libnxhal_fixture.so", library_path=str(absolute))
    env.vars["VIRTUAL_ENV"] = str(venv)
    assert env.run("enumerate").tagged("PLUGIN") == [["fixture", str(absolute)]]


def test_loader_in_a_python_environment_needs_no_variable(env: Env, hostmem: Path,
                                                          tmp_path: Path) -> None:
    """The loader shipped in the core wheel finds manifests of its own prefix."""
    prefix = tmp_path / "env"
    lib_dir = prefix / "lib" / "python3.12" / "site-packages" / "nx_hal" / "lib"
    built = cbuild.build_program(
        "libnxhal_loader.so.1", cbuild.loader_sources(), tmp_path / "loader",
        defines=LOADER_DEFINES,
        extra_flags=["-shared", "-fPIC", "-fvisibility=hidden", "-Wl,-soname,libnxhal_loader.so.1"])
    lib_dir.mkdir(parents=True)
    shutil.copy2(built, lib_dir / built.name)
    linked = cbuild.build_program("loader_search_driver_shared", [_driver_source(), built],
                                  tmp_path / "bin")
    installed = install_package(prefix, hostmem, python="python3.12")
    write_manifest(plugins_dir(prefix), "fixture", python_package="nx_hal_fixture",
                   library="libnxhal_fixture.so")
    env.driver = linked
    env.vars["LD_LIBRARY_PATH"] = str(lib_dir)
    dirs = env.run("search").tagged("DIR")
    assert dirs[0] == ["python environment", str(prefix / "share" / "nx_hal" / "plugins")]
    assert ["install prefix", f"{DATADIR}/nx_hal/plugins"] in dirs
    assert not any(origin == "loader prefix" for origin, _ in dirs)
    assert f"OPENED {installed} abi {cbuild.HOST_ABI}" in env.run("open", "fixture").lines


# --- Order ---------------------------------------------------------------------


def test_search_path_order_and_origins(env: Env, driver: Path) -> None:
    first, second = env.root / "first", env.root / "second"
    env.vars.update({
        "NX_HAL_PLUGIN_PATH": f"{first}::{second}:{first}",
        "VIRTUAL_ENV": str(env.root / "venv"),
        "CONDA_PREFIX": str(env.root / "conda"),
        "XDG_DATA_HOME": str(env.root / "data"),
        "XDG_DATA_DIRS": f"{env.root / 'a'}:{env.root / 'b'}",
    })
    loader_prefix = driver.resolve().parent.parent
    assert env.run("search").tagged("DIR") == [
        ["NX_HAL_PLUGIN_PATH", str(first)],
        ["NX_HAL_PLUGIN_PATH", str(second)],
        ["VIRTUAL_ENV", f"{env.root}/venv/share/nx_hal/plugins"],
        ["CONDA_PREFIX", f"{env.root}/conda/share/nx_hal/plugins"],
        ["install prefix", f"{DATADIR}/nx_hal/plugins"],
        ["loader prefix", f"{loader_prefix}/share/nx_hal/plugins"],
        ["XDG_DATA_HOME", f"{env.root}/data/nx_hal/plugins"],
        ["XDG_DATA_DIRS", f"{env.root}/a/nx_hal/plugins"],
        ["XDG_DATA_DIRS", f"{env.root}/b/nx_hal/plugins"],
    ]


def test_search_path_defaults(env: Env) -> None:
    del env.vars["XDG_DATA_DIRS"]
    dirs = env.run("search").tagged("DIR")
    assert dirs[-3:] == [
        ["XDG_DATA_HOME", f"{env.home}/.local/share/nx_hal/plugins"],
        ["XDG_DATA_DIRS", "/usr/local/share/nx_hal/plugins"],
        ["XDG_DATA_DIRS", "/usr/share/nx_hal/plugins"],
    ]


def test_plugin_path_before_venv_and_first_name_wins(env: Env, hostmem: Path) -> None:
    first, second = env.root / "first", env.root / "second"
    for directory in (first, second):
        directory.mkdir()
        shutil.copy2(hostmem, directory / "libnxhal_fixture.so")
    venv = env.root / "venv"
    installed = install_package(venv, hostmem)
    venv_manifest = write_manifest(plugins_dir(venv), "fixture", python_package="nx_hal_fixture",
                                   library="libnxhal_fixture.so")
    # A manifest in a plugin-path directory counts there, after its bare library.
    write_manifest(first, "fixture", library_path=str(installed))
    write_manifest(first, "other", library_path=str(installed))
    env.vars.update({"NX_HAL_PLUGIN_PATH": f"{first}:{second}", "VIRTUAL_ENV": str(venv)})
    assert f"OPENED {first}/libnxhal_fixture.so abi {cbuild.HOST_ABI}" in \
        env.run("open", "fixture").lines
    assert env.run("enumerate").tagged("PLUGIN") == [
        ["fixture", f"{first}/libnxhal_fixture.so"],
        ["other", str(installed)],
    ]
    entries = env.run("scan").tagged("ENTRY")
    assert [(e[0], e[2], e[5]) for e in entries] == [
        ("fixture", f"{first}/libnxhal_fixture.so", "-"),
        ("fixture", f"{first}/fixture.json", f"shadowed by '{first}/libnxhal_fixture.so', found earlier"),
        ("other", f"{first}/other.json", "-"),
        ("fixture", f"{second}/libnxhal_fixture.so", f"shadowed by '{first}/libnxhal_fixture.so', found earlier"),
        ("fixture", str(venv_manifest), f"shadowed by '{first}/libnxhal_fixture.so', found earlier"),
    ]
    assert entries[4][3] == "VIRTUAL_ENV" and entries[4][4] == cbuild.HOST_ABI


def test_relative_directories_are_ignored(env: Env, hostmem: Path) -> None:
    cwd = env.root / "cwd"
    cwd.mkdir()
    shutil.copy2(hostmem, cwd / "libnxhal_fixture.so")
    write_manifest(plugins_dir(cwd / "venv"), "fixture", library_path=str(cwd / "libnxhal_fixture.so"))
    write_manifest(cwd, "fixture", library_path=str(cwd / "libnxhal_fixture.so"))
    env.vars.update({"NX_HAL_PLUGIN_PATH": ".::rel", "VIRTUAL_ENV": "venv",
                     "XDG_DATA_HOME": "share"})
    dirs = env.run("search", cwd=cwd).tagged("DIR")
    assert all(path.startswith("/") and not path.startswith(str(cwd)) for _, path in dirs)
    assert "NX_HAL_PLUGIN_PATH" not in [origin for origin, _ in dirs]
    status = env.run("open", "fixture", cwd=cwd).status
    assert status.startswith("NOT_FOUND: no libnxhal_fixture.so in NX_HAL_PLUGIN_PATH and no "
                             "fixture.json manifest (searched: "), status
    assert ("ignored relative directories: NX_HAL_PLUGIN_PATH '.', NX_HAL_PLUGIN_PATH 'rel', "
            "VIRTUAL_ENV 'venv', XDG_DATA_HOME 'share')") in status


# --- Trust and validation --------------------------------------------------------


def test_group_writable_manifest_is_skipped(env: Env, hostmem: Path) -> None:
    venv = env.root / "venv"
    manifest = write_manifest(plugins_dir(venv), "fixture", mode=0o664, library_path=str(hostmem))
    env.vars["VIRTUAL_ENV"] = str(venv)
    status = env.run("open", "fixture", hostmem).status
    reason = f"'{manifest}' is writable by group or others (mode 0664; chmod go-w to trust it)"
    assert status.startswith("NOT_FOUND: ") and f"skipped: {manifest}: {reason}" in status
    assert env.run("enumerate").tagged("PLUGIN") == []
    manifest.chmod(0o644)
    assert env.run("enumerate").tagged("PLUGIN") == [["fixture", str(hostmem)]]


def test_untrusted_library_is_skipped(env: Env, hostmem: Path) -> None:
    library = env.root / "lib" / "libnxhal_fixture.so"
    library.parent.mkdir()
    shutil.copy2(hostmem, library)
    library.chmod(0o777)
    venv = env.root / "venv"
    write_manifest(plugins_dir(venv), "fixture", library_path=str(library))
    env.vars["VIRTUAL_ENV"] = str(venv)
    result = env.run("open", "fixture", library)
    assert "is writable by group or others (mode 0777" in result.status
    assert f"MAPPED {library} 0" in result.lines
    if os.geteuid() == 0:  # only root can give a file away
        library.chmod(0o755)
        os.chown(library, 65534, -1)
        status = env.run("open", "fixture").status
        assert f"'{library}' is owned by uid 65534, not by this user (uid 0) or root" in status


def test_abi_major_mismatch_is_skipped_without_loading(env: Env, hostmem: Path) -> None:
    # The library itself speaks the host's ABI: loading it would succeed.
    venv = env.root / "venv"
    manifest = write_manifest(plugins_dir(venv), "fixture", abi_version="2.0",
                              library_path=str(hostmem))
    env.vars["VIRTUAL_ENV"] = str(venv)
    result = env.run("open", "fixture", hostmem)
    assert result.status.startswith("NOT_FOUND: ")
    assert (f"skipped: {manifest}: states ABI 2.0, the loader speaks ABI {cbuild.ABI[0]}.x "
            "(major versions differ); not loaded") in result.status
    assert f"MAPPED {hostmem} 0" in result.lines
    # A newer minor of the same major is fine: negotiation settles it.
    write_manifest(plugins_dir(venv), "fixture", abi_version=f"{cbuild.ABI[0]}.99",
                   library_path=str(hostmem))
    result = env.run("open", "fixture", hostmem)
    assert f"OPENED {hostmem} abi {cbuild.HOST_ABI}" in result.lines
    assert f"MAPPED {hostmem} 1" in result.lines


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"name": "fixture",}', "invalid JSON at line 1, column 20: expected a string key"),
        ('{"name": "fixture"', "invalid JSON at line 1, column 19: expected ',' or '}'"),
        ('{"name": "fixture"} x', "invalid JSON at line 1, column 21: text after the closing '}'"),
        ('{"name": 1}', "the value of 'name' is a number; manifest values must be strings"),
        ('{"name": {"a": "b"}}', "the value of 'name' is an object; manifest values must be strings"),
        ('{"name": "a", "name": "b"}', "invalid JSON: key 'name' appears twice"),
        ('{"name": "a\\x"}', "invalid JSON at line 1, column 13: unknown escape"),
        ('{"name": "a\\u00"}', "invalid JSON at line 1, column 14: \\u needs 4 hex digits"),
        ('{"name": "a\\u0000"}', "\\u0000 is not allowed"),
        ('{\n  "name": "tab\there"}', "invalid JSON at line 2, column 15: control character"),
        ('["fixture"]', "invalid JSON at line 1, column 1: expected '{'"),
        ('', "expected '{' (a manifest is one JSON object)"),
        ('{"file_format_version": "2.0", "name": "fixture"}',
         "file_format_version '2.0' is not 1.x"),
        ('{"file_format_version": "1.0", "name": "other", "abi_version": "1.1"}',
         "names plugin 'other' but the file is 'fixture.json'"),
        ('{"file_format_version": "1.0", "name": "fixture", "abi_version": "1.1"}',
         "names no library: needs 'library_path', or 'python_package' and 'library'"),
        ('{"file_format_version": "1.0", "name": "fixture", "abi_version": "one"}',
         "abi_version 'one' is not MAJOR.MINOR"),
    ],
)
def test_malformed_manifest_is_skipped_with_reason(env: Env, text: str, reason: str) -> None:
    directory = plugins_dir(env.root / "venv")
    manifest = directory / "fixture.json"
    manifest.write_text(text)
    manifest.chmod(0o644)
    env.vars["VIRTUAL_ENV"] = str(env.root / "venv")
    status = env.run("open", "fixture").status
    assert status.startswith("NOT_FOUND: ")
    assert f"skipped: {manifest}: " in status and reason in status, status
    entries = env.run("scan").tagged("ENTRY")
    assert len(entries) == 1 and entries[0][1] == "-" and reason in entries[0][5]


def test_not_found_message(env: Env) -> None:
    first = env.root / "first"
    env.vars["NX_HAL_PLUGIN_PATH"] = str(first)
    env.vars["VIRTUAL_ENV"] = str(env.root / "venv")
    status = env.run("open", "npu").status
    assert status.startswith(
        f"NOT_FOUND: no libnxhal_npu.so in NX_HAL_PLUGIN_PATH and no npu.json manifest "
        f"(searched: {first}, {env.root}/venv/share/nx_hal/plugins, {DATADIR}/nx_hal/plugins, ")
    assert status.endswith(f"{env.root}/xdg-dirs/nx_hal/plugins)")
    assert "skipped" not in status and "is not set" not in status
    del env.vars["NX_HAL_PLUGIN_PATH"]
    status = env.run("open", "npu").status
    assert "(NX_HAL_PLUGIN_PATH is not set; searched: " in status
