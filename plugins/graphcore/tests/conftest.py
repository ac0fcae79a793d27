"""Builds the plugin, its stand-in backends and the shared C test driver once
per session, and states in every run whether the Poplar backend was built: a
green run here is not an IPU test unless that line says so."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PLUGIN_DIR = Path(__file__).resolve().parent.parent
REPO = PLUGIN_DIR.parent.parent

try:
    import nx_hal_graphcore  # noqa: F401  (installed: test what was installed)
except ImportError:
    sys.path.insert(0, str(PLUGIN_DIR))  # a source checkout


def pytest_configure(config: pytest.Config) -> None:
    # Compile caches and other per-user state go to a throwaway directory
    # (removed at the end), so no entry from an earlier run or another nx_hal
    # version can stand in for the compile a test means to make.
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="nxhal-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.basename(folder).startswith("nxhal-test-cache-"):
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Build:
    """Where the test build put its artefacts."""

    dir: Path

    @property
    def library(self) -> Path:
        """The production library (real filesystem roots, no test hooks)."""
        return self.dir / "libnxhal_graphcore.so"

    @property
    def testhooks(self) -> Path:
        """The same sources with NXHAL_GRAPHCORE_TEST_ROOT/_BACKEND honoured."""
        return self.dir / "libnxhal_graphcore_testhooks.so"

    @property
    def driver(self) -> Path:
        """The shared C test driver (tests/c/nxhal_driver.c), over the loader."""
        return build_driver(self.dir)

    @property
    def fake_backend(self) -> Path:
        return self.dir / "libgc_fake_backend.so"

    @property
    def backend_needs_poplar(self) -> Path:
        return self.dir / "libgc_backend_needs_poplar.so"

    @property
    def fake_libpoplar(self) -> Path:
        return self.dir / "fake_sdk" / "libpoplar.so"


@functools.cache
def build_plugin() -> Build:
    """cmake configure + build into NXHAL_GRAPHCORE_TEST_BUILD_DIR or a temp dir."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake is not on PATH")
    given = os.environ.get("NXHAL_GRAPHCORE_TEST_BUILD_DIR")
    build_dir = Path(given) if given else Path(tempfile.mkdtemp(prefix="nxhal-graphcore-build-"))
    if not given:
        atexit.register(shutil.rmtree, build_dir, True)  # a throwaway build goes with the run
    subprocess.run(
        [cmake, "-S", str(PLUGIN_DIR), "-B", str(build_dir), "-DNXHAL_GRAPHCORE_BUILD_TESTS=ON",
         "-DCMAKE_BUILD_TYPE=Debug"],
        check=True, capture_output=True, text=True,
    )
    subprocess.run([cmake, "--build", str(build_dir), "-j2"], check=True, capture_output=True,
                   text=True)
    return Build(build_dir)


@functools.cache
def build_driver(out_dir: Path) -> Path:
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))  # tests/cbuild.py, the one C build helper
    from tests import cbuild

    return cbuild.build_driver(out_dir)


# The commands whose names in these tests are short for the driver's
# graphcore-specific scenarios.
_GRAPHCORE_COMMANDS = {"run": "graphcore-run", "threads": "graphcore-threads"}


def driver_argv(build: Build, library: Path, command: str, *args: str) -> list[str]:
    """The driver's command line for `command` on `library`. Options are
    written "T:name=value" (a client option, T one of i d b s) and
    "CT:name=value" (a compile option of run); the driver takes them as
    "-o name=T:value" and "--copt name=T:value". run's first argument is
    the fake backend's program text."""
    client: list[str] = []
    rest: list[str] = []
    for index, arg in enumerate(args):
        compile_option = arg[:1] == "C"
        kind, colon, assignment = (arg[1:] if compile_option else arg).partition(":")
        name, eq, value = assignment.partition("=")
        if (command == "run" and index == 0) or not (colon and eq and kind in ("i", "d", "b", "s")):
            rest.append(arg)
        elif compile_option:
            rest += ["--copt", f"{name}={kind}:{value}"]
        else:
            client += ["-o", f"{name}={kind}:{value}"]
    return [str(build.driver), str(library), *client, _GRAPHCORE_COMMANDS.get(command, command),
            *rest]


def run_driver(build: Build, library: Path, *args: str,
               env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """Runs the driver (see driver_argv) and parses its key=value lines.
    `env` entries of None unset."""
    full_env = dict(os.environ)
    # The probe reads these: start every test from a known, empty state.
    for name in ("IPUOF_CONFIG_PATH", "IPUOF_VIPU_API_HOST", "IPUOF_VIPU_API_PARTITION_ID",
                 "NXHAL_GRAPHCORE_TEST_ROOT",
                 "NXHAL_GRAPHCORE_TEST_BACKEND", "GC_FAKE_DEVICES"):
        full_env.pop(name, None)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    proc = subprocess.run(driver_argv(build, library, *args), capture_output=True,
                          text=True, env=full_env, timeout=120)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}): {proc.stdout}{proc.stderr}"
    result: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            result[key] = value
    return result


@functools.cache
def backend_status_line() -> str:
    """What the production library says about its Poplar backend, in one line."""
    try:
        build = build_plugin()
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"graphcore poplar backend: plugin build failed ({detail.strip()[-200:]})"
    out = run_driver(build, build.library, "create")
    message = out.get("create.message", "")
    if "was not built (no Poplar SDK" in message:
        return "graphcore poplar backend: not built (no Poplar SDK)"
    if "was not built (" in message:
        reason = message.split("was not built (", 1)[1].split(")", 1)[0]
        return f"graphcore poplar backend: not built ({reason})"
    if out.get("create.status") == "OK":
        return f"graphcore poplar backend: built, {out.get('devices', '?')} device(s)"
    return f"graphcore poplar backend: built but unavailable: {message}"


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [backend_status_line()]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # Repeated at the end, where a CI log is read.
    terminalreporter.write_line(backend_status_line())


@pytest.fixture(scope="session")
def build() -> Build:
    return build_plugin()
