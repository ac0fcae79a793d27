"""Tests of the C side: headers, plugin helpers, loader, fixtures, example, CMake."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests import cbuild
from tests.cbuild import HOST_ABI, NEWER_ABI

ROOT = cbuild.repo_root()
HEADERS = ("nx_hal.h", "nx_hal_loader.h", "nx_hal_plugin.h")
SANITIZE_FLAGS = ("-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=all")


def run(cmd: Sequence[str | Path], env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs a command, capturing text output."""
    return subprocess.run([str(part) for part in cmd], capture_output=True, text=True,
                          env=env, timeout=timeout)


def isolated_env() -> dict[str, str]:
    """The environment without the places the loader finds installed plugins
    in (the active virtualenv or conda env, the user's and the system's data
    directories): only what a test puts in NX_HAL_PLUGIN_PATH is found."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NX_HAL_PLUGIN_PATH", "VIRTUAL_ENV", "CONDA_PREFIX")}
    env.update(XDG_DATA_HOME="/nonexistent/nx_hal-test", XDG_DATA_DIRS="/nonexistent/nx_hal-test")
    return env


def env_with_path(*dirs: Path) -> dict[str, str]:
    """The isolated environment with NX_HAL_PLUGIN_PATH set to `dirs`."""
    env = isolated_env()
    env["NX_HAL_PLUGIN_PATH"] = ":".join(str(d) for d in dirs)
    return env


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every fixture plugin, built once per session into one directory."""
    out = tmp_path_factory.mktemp("fixtures")
    for name in cbuild.FIXTURES:
        cbuild.build_fixture(name, out)
    return out


@pytest.fixture(scope="session")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/c/list_devices, built as an ABI 1.0 host."""
    return cbuild.build_example(tmp_path_factory.mktemp("example"))


def fixture_path(fixture_dir: Path, name: str) -> Path:
    return fixture_dir / cbuild.fixture_library_name(name)


# --- Headers -----------------------------------------------------------------


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize(
    "language",
    [
        ("c", "-std=c99"),
        ("c", "-std=c11"),
        ("c++", "-std=c++11"),
        ("c++", "-std=c++17"),
    ],
    ids=["c99", "c11", "c++11", "c++17"],
)
def test_header_compiles_strictly(header: str, language: tuple[str, str],
                                  tmp_path: Path) -> None:
    lang, std = language
    source = tmp_path / ("use.c" if lang == "c" else "use.cpp")
    source.write_text(
        f'#include "nx_hal/{header}"\n'
        "/* The table layout is part of the ABI: catch accidental edits. */\n"
        "typedef char prefix_check[NXHAL_API_PREFIX_SIZE == 3 * sizeof(void*) + "
        "sizeof(size_t) + 8 ? 1 : -1];\n"
        "typedef char table_check[NXHAL_API_1_0_SIZE == 33 * sizeof(void*) + "
        "sizeof(size_t) + 8 ? 1 : -1];\n"
        "int main(void) { return (int)sizeof(prefix_check) + (int)sizeof(table_check) - 2; }\n"
    )
    result = run([*cbuild.compiler(), "-x", lang, std, "-Wall", "-Wextra", "-pedantic",
                  "-Werror", f"-I{ROOT / 'include'}", "-fsyntax-only", source])
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("header", HEADERS)
def test_headers_need_no_pthread(header: str, tmp_path: Path) -> None:
    """The public headers include only standard C headers: a plugin that
    never includes <pthread.h> does not get it through nx_hal_plugin.h."""
    source = tmp_path / "use.c"
    source.write_text(f'#include "nx_hal/{header}"\n'
                      "#ifdef PTHREAD_MUTEX_INITIALIZER\n#error <pthread.h> came in\n#endif\n")
    result = run([*cbuild.compiler(), "-std=c99", "-Wall", "-Werror", f"-I{ROOT / 'include'}",
                  "-fsyntax-only", source])
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("language", [("c", "-std=c99"), ("c", "-std=c11"), ("c++", "-std=c++11")],
                         ids=["c99", "c11", "c++11"])
def test_header_static_asserts_fail_when_false(language: tuple[str, str], tmp_path: Path) -> None:
    """The frozen-prefix checks in nx_hal.h are real: the same assertion with
    a false condition stops the compile in each language the header serves."""
    lang, std = language
    source = tmp_path / ("use.c" if lang == "c" else "use.cpp")
    text = '#include "nx_hal/nx_hal.h"\nNXHAL_STATIC_ASSERT(NXHAL_API_PREFIX_SIZE == %s, probe);\n'
    for size, ok in (("sizeof(size_t) + 8 + 3 * sizeof(void*)", True), ("1", False)):
        source.write_text(text % size)
        result = run([*cbuild.compiler(), "-x", lang, std, "-Wall", "-pedantic", "-Werror",
                      f"-I{ROOT / 'include'}", "-fsyntax-only", source])
        assert (result.returncode == 0) == ok, result.stderr


# --- Helper library ----------------------------------------------------------


@pytest.mark.parametrize("defines", [(), ("NXHAL_DIGEST_PORTABLE",)], ids=["as-built", "portable-digest"])
def test_helper_unit_tests(tmp_path: Path, defines: tuple[str, ...]) -> None:
    """The helpers' own tests; twice, so SHA-256's test vectors check both
    its paths on a processor with the SHA extensions (cabi/digest.c)."""
    program = cbuild.build_program(
        "test_helpers" + ("_portable" if defines else ""),
        [ROOT / "cabi" / "tests" / "test_helpers.c", *cbuild.helper_sources()], tmp_path, defines=defines)
    result = run([program])
    assert result.returncode == 0, result.stderr
    assert "all helper tests passed" in result.stdout


def test_plugin_exports_only_query(fixture_dir: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not found")
    result = run([nm, "-D", "--defined-only", fixture_path(fixture_dir, "hostmem")])
    exported = {line.split()[-1] for line in result.stdout.splitlines() if line.strip()}
    assert exported == {"nxhal_query"}


# --- The hostmem fixture, checked entry by entry ------------------------------


def hostmem_driver(out_dir: Path, extra_flags: Sequence[str] = ()) -> Path:
    return cbuild.build_program(
        "hostmem_driver", [ROOT / "cabi" / "tests" / "hostmem_driver.c", *cbuild.loader_sources()],
        out_dir, extra_flags=extra_flags)


def test_hostmem_fixture_behaves(fixture_dir: Path, tmp_path: Path) -> None:
    result = run([hostmem_driver(tmp_path), fixture_path(fixture_dir, "hostmem")])
    assert result.returncode == 0, result.stderr
    assert "all hostmem checks passed" in result.stdout


def sanitizers_available(tmp_path: Path) -> bool:
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    result = run([*cbuild.compiler(), *SANITIZE_FLAGS, probe, "-o", tmp_path / "probe"])
    return result.returncode == 0 and run([tmp_path / "probe"]).returncode == 0


def test_hostmem_and_example_under_sanitizers(tmp_path: Path) -> None:
    if not sanitizers_available(tmp_path):
        pytest.skip("compiler lacks -fsanitize=address,undefined")
    plugin = cbuild.build_fixture("hostmem", tmp_path / "asan", extra_flags=SANITIZE_FLAGS)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")
    result = run([hostmem_driver(tmp_path, SANITIZE_FLAGS), plugin], env=env)
    assert result.returncode == 0, result.stderr
    example = cbuild.build_example(tmp_path / "asan-example", extra_flags=SANITIZE_FLAGS)
    result = run([example, plugin], env=env)
    assert result.returncode == 0, result.stderr
    assert "fixture host memory" in result.stdout


def test_hostmem_under_valgrind(fixture_dir: Path, tmp_path: Path) -> None:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        pytest.skip("valgrind not found")
    result = run([valgrind, "--error-exitcode=3", "--leak-check=full",
                  # a detached copy thread may still be exiting: its stack is only "possibly" lost
                  "--errors-for-leak-kinds=definite", "-q",
                  hostmem_driver(tmp_path), fixture_path(fixture_dir, "hostmem")], timeout=300)
    assert result.returncode == 0, result.stderr


# --- Loader, through the example program --------------------------------------


def test_example_lists_hostmem_device(example: Path, fixture_dir: Path) -> None:
    result = run([example, fixture_path(fixture_dir, "hostmem")])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "name: fixture-hostmem" in out
    assert "vendor: nx_hal tests" in out
    assert f"abi: plugin {HOST_ABI}, negotiated {HOST_ABI}" in out
    assert "diagnostics: fixture: 1 host memory device(s)" in out
    assert 'device 0: kind cpu, vendor "nx_hal tests", name "fixture host memory"' in out
    assert "formats: fixture-elementwise" in out
    assert "devices: 1" in out


@pytest.mark.parametrize(
    ("name", "code", "fragments"),
    [
        ("missing_dep", "UNAVAILABLE", ["libnxhal_fixture_dep.so", "cannot load plugin"]),
        ("no_query", "NOT_FOUND", ["nxhal_query", "libnxhal_fixture_no_query.so"]),
        ("other_major", "ABI_MISMATCH", ["ABI 2.0", f"host ABI {HOST_ABI}", "major versions differ"]),
        ("table_smaller", "ABI_MISMATCH", ["smaller than ABI 1.0", f"host ABI {HOST_ABI}"]),
        ("null_entry", "ABI_MISMATCH", ["'buffer_to_dlpack'", "NULL"]),
        # Both sides of the frozen prefix: exactly the prefix is readable.
        ("table_prefix", "ABI_MISMATCH", ["smaller than ABI 1.0's", f"host ABI {HOST_ABI}"]),
        ("table_under_prefix", "ABI_MISMATCH", ["smaller than any ABI's prefix", "plugin ABI unknown"]),
        ("other_major_prefix", "ABI_MISMATCH", ["(ABI 2.0) refused", "major versions differ"]),
        ("other_major_under_prefix", "ABI_MISMATCH", ["refused", "gave no readable table"]),
    ],
)
def test_loader_refuses_broken_plugins(example: Path, fixture_dir: Path, name: str, code: str,
                                       fragments: list[str]) -> None:
    result = run([example, fixture_path(fixture_dir, name)])
    assert result.returncode == 0, result.stderr  # a bad plugin is reported, not fatal
    status_lines = [line for line in result.stdout.splitlines() if "status:" in line]
    assert len(status_lines) == 1, result.stdout
    assert status_lines[0].strip().startswith(f"status: {code}: "), status_lines[0]
    for fragment in fragments:
        assert fragment in status_lines[0]
    assert "device 0" not in result.stdout


def test_loader_reports_unloadable_path(example: Path, tmp_path: Path) -> None:
    result = run([example, tmp_path / "libnxhal_absent.so"])
    assert result.returncode == 0
    assert "status: UNAVAILABLE: cannot load plugin" in result.stdout
    assert "libnxhal_absent.so" in result.stdout


@pytest.mark.parametrize(
    ("name", "plugin_abi"),
    [("newer_minor", NEWER_ABI), ("table_larger", HOST_ABI)],
)
def test_loader_accepts_newer_and_larger_tables(example: Path, fixture_dir: Path, name: str,
                                                plugin_abi: str) -> None:
    result = run([example, fixture_path(fixture_dir, name)])
    assert result.returncode == 0, result.stderr
    assert f"abi: plugin {plugin_abi}, negotiated {HOST_ABI}" in result.stdout
    assert 'name "fixture host memory"' in result.stdout


def test_newer_host_loads_older_plugin(fixture_dir: Path, tmp_path: Path) -> None:
    newer_host = cbuild.build_example(tmp_path, defines=[f"NXHAL_LOADER_HOST_MINOR={cbuild.ABI[1] + 1}"])
    result = run([newer_host, fixture_path(fixture_dir, "abi_1_0"), fixture_path(fixture_dir, "hostmem"),
                  fixture_path(fixture_dir, "newer_minor")])
    assert result.returncode == 0, result.stderr
    assert "abi: plugin 1.0, negotiated 1.0" in result.stdout
    assert f"abi: plugin {HOST_ABI}, negotiated {HOST_ABI}" in result.stdout
    assert f"abi: plugin {NEWER_ABI}, negotiated {NEWER_ABI}" in result.stdout
    assert result.stdout.count('name "fixture host memory"') == 3


def test_open_by_name_searches_plugin_path(example: Path, fixture_dir: Path,
                                           tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run([example, "fixture_hostmem"], env=env_with_path(empty, fixture_dir))
    assert result.returncode == 0, result.stderr
    assert f"path: {fixture_path(fixture_dir, 'hostmem')}" in result.stdout
    assert 'name "fixture host memory"' in result.stdout


def test_open_by_name_not_found_lists_dirs(example: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    result = run([example, "fixture_hostmem"], env=env_with_path(first, second))
    assert result.returncode == 0
    assert "status: NOT_FOUND: no libnxhal_fixture_hostmem.so" in result.stdout
    assert f"searched: {first}, {second}" in result.stdout
    result = run([example, "fixture_hostmem"], env=isolated_env())
    assert "NX_HAL_PLUGIN_PATH is not set" in result.stdout


def test_enumerate_visits_plugin_path_in_order(example: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    cbuild.build_fixture("table_larger", first)
    cbuild.build_fixture("hostmem", first)
    cbuild.build_fixture("no_query", second)
    (second / "libother.so").write_text("not a plugin name")
    result = run([example], env=env_with_path(first, tmp_path / "absent", second))
    assert result.returncode == 0, result.stderr
    listed = [line.split(" ", 1)[1] for line in result.stdout.splitlines()
              if line.startswith("plugin: ")]
    assert listed == [
        str(first / "libnxhal_fixture_hostmem.so"),
        str(first / "libnxhal_fixture_table_larger.so"),
        str(second / "libnxhal_fixture_no_query.so"),
    ]
    assert "status: NOT_FOUND" in result.stdout


def test_enumerate_with_nothing_found(example: Path, tmp_path: Path) -> None:
    result = run([example], env=env_with_path(tmp_path))
    assert result.returncode == 0
    assert "no plugins found in NX_HAL_PLUGIN_PATH" in result.stdout


def test_example_usage_error(example: Path) -> None:
    result = run([example, "--bogus"])
    assert result.returncode == 2
    assert "usage:" in result.stderr


# --- Probes that crash or hang: loadable, and fail only in client_create -------


def test_crashing_probe_dies_in_client_create(example: Path, fixture_dir: Path) -> None:
    result = run([example, fixture_path(fixture_dir, "crash_probe")], timeout=30)
    assert result.returncode == -signal.SIGSEGV
    # It loaded and answered plugin_info before the probe crashed.
    assert "name: fixture-crash-probe" in result.stdout
    assert f"abi: plugin {HOST_ABI}, negotiated {HOST_ABI}" in result.stdout
    assert "device 0" not in result.stdout


def test_hanging_probe_never_returns(example: Path, fixture_dir: Path) -> None:
    process = subprocess.Popen([str(example), str(fixture_path(fixture_dir, "hang_probe"))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.communicate(timeout=2)
    finally:
        process.kill()
        stdout, _ = process.communicate()
    assert "name: fixture-hang-probe" in stdout
    assert "device 0" not in stdout


# --- CMake build for C/C++ users ---------------------------------------------


def test_cmake_build(tmp_path: Path) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not found")
    build = tmp_path / "build"
    env = dict(os.environ)
    configure = run([cmake, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_INSTALL_PREFIX={tmp_path / 'prefix'}"], env=env, timeout=300)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = run([cmake, "--build", build, "-j2"], env=env, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    installed = run([cmake, "--install", build], env=env, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    prefix = tmp_path / "prefix"
    assert (prefix / "include" / "nx_hal" / "nx_hal.h").exists()
    example = build / "list_devices"
    assert example.exists()
