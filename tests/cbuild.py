"""Builds the C pieces the tests need: fixture plugins, the example, C test programs.

Outputs are cached under ``build/fixtures/`` by a hash of the compiler, the
flags and every input file, so pytest runs (and tmp dirs) share them. Only the
compiler named by ``CC`` (default ``cc``) is used.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

HELPER_SOURCES: tuple[str, ...] = (
    "status.c",
    "struct_check.c",
    "options.c",
    "dtype.c",
    "tensor_desc.c",
    "event.c",
    "negotiate.c",
    "memory.c",
    "digest.c",
    "dlpack.c",
)
WARNING_FLAGS: tuple[str, ...] = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror")


@dataclass(frozen=True)
class FixtureSpec:
    """How one fixture library is built from tests/fixtures/."""

    source: str
    defines: tuple[str, ...] = ()
    links_helpers: bool = True
    missing_dependency: bool = False


def _header_abi() -> tuple[int, int]:
    """The ABI version the public header declares (what hosts built here speak):
    the checkout's, or the installed core's where the suite runs from a copy
    of tests/ against installed wheels."""
    header = Path(__file__).resolve().parent.parent / "include" / "nx_hal" / "nx_hal.h"
    if not header.exists():
        import nx_hal

        header = Path(nx_hal.get_include()) / "nx_hal" / "nx_hal.h"
    text = header.read_text()
    major = re.search(r"#define NXHAL_ABI_VERSION_MAJOR (\d+)", text)
    minor = re.search(r"#define NXHAL_ABI_VERSION_MINOR (\d+)", text)
    assert major and minor, "nx_hal.h declares no ABI version"
    return int(major.group(1)), int(minor.group(1))


ABI: tuple[int, int] = _header_abi()
HOST_ABI = f"{ABI[0]}.{ABI[1]}"  # "1.1"
NEWER_ABI = f"{ABI[0]}.{ABI[1] + 1}"


def _hostmem(name: str, *defines: str) -> FixtureSpec:
    return FixtureSpec("fixture_hostmem.c", (f'FIXTURE_NAME="fixture-{name}"', *defines))


FIXTURES: dict[str, FixtureSpec] = {
    "hostmem": _hostmem("hostmem"),
    "newer_minor": _hostmem("newer-minor", f"FIXTURE_ABI_MINOR={ABI[1] + 1}", "FIXTURE_EXTRA_ENTRY"),
    "abi_1_0": _hostmem("abi-1-0", "FIXTURE_ABI_MINOR=0"),  # the first published version
    "table_larger": _hostmem("table-larger", "FIXTURE_EXTRA_ENTRY"),
    "table_smaller": _hostmem("table-smaller", "FIXTURE_TABLE_SMALLER"),
    "other_major": _hostmem("other-major", "FIXTURE_ABI_MAJOR=2", "FIXTURE_ABI_MINOR=0"),
    # The loader's boundaries: a table of exactly the frozen prefix, and one byte less.
    "table_prefix": _hostmem("table-prefix", "FIXTURE_TABLE_SIZE_IS=NXHAL_API_PREFIX_SIZE"),
    "table_under_prefix": _hostmem("table-under-prefix", "FIXTURE_TABLE_SIZE_IS=NXHAL_API_PREFIX_SIZE-1"),
    "other_major_prefix": _hostmem("other-major-prefix", "FIXTURE_ABI_MAJOR=2", "FIXTURE_ABI_MINOR=0",
                                   "FIXTURE_TABLE_SIZE_IS=NXHAL_API_PREFIX_SIZE"),
    "other_major_under_prefix": _hostmem("other-major-under-prefix", "FIXTURE_ABI_MAJOR=2",
                                         "FIXTURE_ABI_MINOR=0", "FIXTURE_TABLE_SIZE_IS=NXHAL_API_PREFIX_SIZE-1"),
    "null_entry": _hostmem("null-entry", "FIXTURE_NULL_ENTRY"),
    "crash_probe": _hostmem("crash-probe", "FIXTURE_CRASH_PROBE"),
    "hang_probe": _hostmem("hang-probe", "FIXTURE_HANG_PROBE"),
    "no_query": FixtureSpec("fixture_no_query.c", links_helpers=False),
    "missing_dep": FixtureSpec(
        "fixture_missing_dep.c", links_helpers=False, missing_dependency=True
    ),
}

DEPENDENCY_LIBRARY = "libnxhal_fixture_dep.so"

# A build step: (work_dir, output_path) -> output_path.
_Builder = Callable[[Path, Path], Path]


def repo_root() -> Path:
    """The repository root (this file lives in tests/)."""
    return Path(__file__).resolve().parent.parent


def compiler() -> list[str]:
    """The C compiler command: $CC split like a shell would, else ``cc``."""
    return shlex.split(os.environ.get("CC") or "cc")


def cache_dir() -> Path:
    """Where built outputs are kept between runs."""
    path = repo_root() / "build" / "fixtures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def helper_sources() -> list[Path]:
    """The plugin helper library's sources (cabi/, without the loader)."""
    return [repo_root() / "cabi" / name for name in HELPER_SOURCES]


def loader_sources() -> list[Path]:
    """What a host program compiles in to use the loader."""
    cabi = repo_root() / "cabi"
    return [cabi / "loader.c", cabi / "manifest.c", cabi / "status.c", cabi / "validate.c",
            cabi / "sealed.c", cabi / "digest.c"]


def _headers() -> list[Path]:
    """Headers every cached build depends on: the public ones and cabi's private ones."""
    root = repo_root()
    return sorted([*(root / "include" / "nx_hal").glob("*.h"), *(root / "cabi").glob("*.h")])


def _digest(parts: Sequence[str], files: Sequence[Path]) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode() + b"\0")
    for path in files:
        sha.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()[:20]


def _run(cmd: Sequence[str], cwd: Path) -> None:
    result = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"build failed ({result.returncode}): {shlex.join(cmd)}\n{result.stdout}{result.stderr}"
        )


def _publish(built: Path, out_dir: Path) -> Path:
    """Copies a cached output into out_dir (atomically) and returns the copy."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / built.name
    if target.resolve() == built.resolve():
        return target
    tmp = out_dir / f".{built.name}.{os.getpid()}.tmp"
    shutil.copy2(built, tmp)
    os.replace(tmp, target)
    return target


def _cached(
    out_name: str, parts: Sequence[str], files: Sequence[Path], build: _Builder
) -> Path:
    """Builds `out_name` with `build` unless the cache already holds it."""
    key = _digest([*compiler(), *parts], [*files, *_headers()])
    final = cache_dir() / key / out_name
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as work:
        work_dir = Path(work)
        built = build(work_dir, work_dir / out_name)
        os.replace(built, final)
    return final


@dataclass(frozen=True)
class _CommandBuilder:
    args: tuple[str, ...]

    def __call__(self, work_dir: Path, output: Path) -> Path:
        _run([*compiler(), *self.args, "-o", str(output)], cwd=repo_root())
        return output


@dataclass(frozen=True)
class _MissingDepBuilder:
    """Links the plugin against a dependency, then leaves the dependency behind."""

    plugin_args: tuple[str, ...]
    dep_args: tuple[str, ...]

    def __call__(self, work_dir: Path, output: Path) -> Path:
        dep = work_dir / DEPENDENCY_LIBRARY
        _run([*compiler(), *self.dep_args, "-o", str(dep)], cwd=repo_root())
        _run(
            [*compiler(), *self.plugin_args, f"-L{work_dir}", "-lnxhal_fixture_dep", "-o",
             str(output)],
            cwd=repo_root(),
        )
        dep.unlink()  # gone for good: the temporary work dir is removed too
        return output


def fixture_library_name(name: str) -> str:
    """The file name a fixture is built as: libnxhal_fixture_<name>.so."""
    return f"libnxhal_fixture_{name}.so"


def build_fixture(name: str, out_dir: Path, extra_flags: Sequence[str] = ()) -> Path:
    """Builds fixture `name` (a key of FIXTURES) and copies it into out_dir."""
    spec = FIXTURES[name]
    root = repo_root()
    source = root / "tests" / "fixtures" / spec.source
    common = [
        *WARNING_FLAGS,
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-pthread",
        f"-I{root / 'include'}",
        *[f"-D{define}" for define in spec.defines],
        *extra_flags,
    ]
    sources = [source, *(helper_sources() if spec.links_helpers else [])]
    builder: _Builder
    files = list(sources)
    if spec.missing_dependency:
        dep_source = root / "tests" / "fixtures" / "fixture_dep.c"
        files.append(dep_source)
        builder = _MissingDepBuilder(
            plugin_args=tuple([*common, *map(str, sources)]),
            dep_args=tuple([*common, str(dep_source)]),
        )
    else:
        builder = _CommandBuilder(tuple([*common, *map(str, sources)]))
    built = _cached(fixture_library_name(name), ["fixture", name, *common], files, builder)
    return _publish(built, out_dir)


def build_program(
    out_name: str,
    sources: Sequence[Path],
    out_dir: Path,
    defines: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
) -> Path:
    """Builds an executable from C sources (with -ldl -pthread) into out_dir."""
    args = [
        *WARNING_FLAGS,
        "-pthread",
        f"-I{repo_root() / 'include'}",
        *[f"-D{define}" for define in defines],
        *extra_flags,
        *map(str, sources),
        "-ldl",
    ]
    built = _cached(out_name, ["program", *args], list(sources), _CommandBuilder(tuple(args)))
    return _publish(built, out_dir)


def driver_sources() -> list[Path]:
    """The plugins' shared C test driver (tests/c/nxhal_driver.c) and the loader it uses."""
    return [repo_root() / "tests" / "c" / "nxhal_driver.c", *loader_sources()]


def build_driver(out_dir: Path, extra_flags: Sequence[str] = ()) -> Path:
    """Builds the plugins' shared C test driver into out_dir as ``nxhal_driver``.

    Every plugin's tests and .ci/sanitize run their C-level scenarios through
    it; see the usage at the top of tests/c/nxhal_driver.c.
    """
    return build_program("nxhal_driver", driver_sources(), out_dir, extra_flags=extra_flags)


def build_example(
    out_dir: Path, defines: Sequence[str] = (), extra_flags: Sequence[str] = ()
) -> Path:
    """Builds examples/c/list_devices with the loader compiled in."""
    sources = [repo_root() / "examples" / "c" / "list_devices.c", *loader_sources()]
    return build_program("list_devices", sources, out_dir, defines, extra_flags)
