"""Fixtures: the plugin library (built from source with CMake unless
NXHAL_TPU_LIBRARY names one), the shared C test driver, and the PJRT backends."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE.parent
REPO = PLUGIN_DIR.parent.parent
PROGRAMS = HERE / "programs"



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


def _load_backends_module() -> types.ModuleType:
    """nx_hal_tpu/backends.py on its own: the package's __init__ imports the
    nx_hal core, which the C-level tests do not need."""
    spec = importlib.util.spec_from_file_location("nx_hal_tpu_backends",
                                                  PLUGIN_DIR / "nx_hal_tpu" / "backends.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


backends = _load_backends_module()


@pytest.fixture(scope="session")
def plugin_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("NXHAL_TPU_LIBRARY")
    if given:
        return Path(given)
    if shutil.which("cmake") is None:
        pytest.skip("cmake not found")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        ["cmake", "-S", str(PLUGIN_DIR), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
         "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
        check=True, capture_output=True, text=True)
    done = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout.lower(), done.stdout
    return build / "libnxhal_tpu.so"


def _cbuild() -> types.ModuleType:
    """tests/cbuild.py, the repository's one C build helper."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    return importlib.import_module("tests.cbuild")


# The ABI the driver is built for: the public header's.
DRIVER_ABI: tuple[int, int] = _cbuild().ABI
# A program the SDK cannot parse: INVALID_PROGRAM to hosts of ABI 1.2 and
# newer, INVALID_ARGUMENT to older ones (they do not know the code).
INVALID_PROGRAM = "INVALID_PROGRAM" if DRIVER_ABI >= (1, 2) else "INVALID_ARGUMENT"


@pytest.fixture(scope="session")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared C test driver (tests/c/nxhal_driver.c), over the loader."""
    built: Path = _cbuild().build_driver(tmp_path_factory.mktemp("driver"),
                                         extra_flags=("-O1", "-g"))
    return built


@pytest.fixture(scope="session")
def fake_pjrt(tmp_path_factory: pytest.TempPathFactory, cpu_backend: Path) -> Path:
    """fake_pjrt.c built: a PJRT plugin forwarding to XLA CPU (see its modes)."""
    out = tmp_path_factory.mktemp("fake") / "libfake_pjrt.so"
    subprocess.run(
        [os.environ.get("CC", "cc"), "-std=gnu99", "-shared", "-fPIC", "-Wall", "-Werror",
         f"-I{cpu_backend.parent / 'include'}", str(HERE / "fake_pjrt.c"), "-o", str(out), "-ldl",
         "-lpthread"],
        check=True)
    return out


def _backend(label: str) -> Path | None:
    for backend in backends.find_backends():
        if backend.label == label:
            path: Path = backend.path
            return path
    return None


@pytest.fixture(scope="session")
def cpu_backend() -> Path:
    path = _backend("cpu")
    if path is None:
        pytest.skip("xla-cpu-pjrt is not installed")
    return path


@pytest.fixture(scope="session")
def libtpu_backend() -> Path:
    path = _backend("tpu")
    if path is None:
        pytest.skip("libtpu is not installed")
    return path


@pytest.fixture(scope="session")
def cuda_backend() -> Path:
    path = _backend("cuda12") or _backend("cuda13")
    if path is None:
        pytest.skip("jax-cuda12-pjrt / jax-cuda13-pjrt is not installed")
    return path


@dataclass
class Outcome:
    """A driver run: exit code, stdout lines, and the STATUS line parsed."""

    returncode: int
    stdout: str
    stderr: str
    code: str | None = None
    message: str = ""
    lines: list[str] = field(default_factory=list)

    def values(self, tag: str) -> list[str]:
        return [line[len(tag) + 1:] for line in self.lines if line.startswith(tag + " ")]


@dataclass
class Driver:
    exe: Path
    library: Path

    def __call__(self, *args: str | Path, options: dict[str, str] | None = None,
                 timeout: float = 120, env: dict[str, str] | None = None) -> Outcome:
        argv = [str(self.exe), str(self.library)]
        for name, value in (options or {}).items():
            argv += ["-o", f"{name}={value}"]
        argv += [str(a) for a in args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        out = Outcome(done.returncode, done.stdout, done.stderr, lines=done.stdout.splitlines())
        # A status message may span lines: everything after "STATUS".
        marker = done.stdout.find("STATUS ")
        if marker >= 0:
            rest = done.stdout[marker + 7:]
            out.code, _, out.message = rest.partition(": ")
        # The process must never die from a signal (an abort is a bug).
        assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr[-2000:]}"
        return out


@pytest.fixture(scope="session")
def run(driver: Path, plugin_library: Path) -> Driver:
    return Driver(driver, plugin_library)


# -- through the nx_hal Python API (imported late: the C-level tests need no core)


def registry(tmp_path: Path, library: Path, cpu_backend: Path, **options: object) -> object:
    """A Registry with only this plugin, over XLA CPU alone (libtpu and CUDA
    are covered by the C-level tests and are slow to probe)."""
    sys.path.insert(0, str(PLUGIN_DIR))
    from nx_hal_tpu import TpuCompileOptions, TpuOptions

    from nx_hal.config import load_config
    from nx_hal.registry import PluginSpec, Registry

    opts = {"backend_paths": f"cpu={cpu_backend}", **options}
    config = {"plugins": {"tpu": opts}, "cache_dir": str(tmp_path / "cache")}
    reg = Registry(load_config(config, no_config=True, cwd=tmp_path))
    reg.add(PluginSpec(name="tpu", library=library, options_model=TpuOptions,
                       compile_options_model=TpuCompileOptions, package="nx-hal-tpu",
                       source="test"))
    reg.load_all(isolate=False)
    return reg


@pytest.fixture()
def devices(tmp_path: Path, plugin_library: Path, cpu_backend: Path) -> list[object]:
    """Two XLA CPU devices through the nx_hal Python API."""
    pytest.importorskip("nx_hal")
    reg = registry(tmp_path, plugin_library, cpu_backend, cpu_device_count=2)
    found = reg.devices()  # type: ignore[attr-defined]
    if not found:
        pytest.fail(str([r.to_dict() for r in reg.records.values()]))  # type: ignore[attr-defined]
    return list(found)
