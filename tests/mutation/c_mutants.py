"""A small mutation pass over our C where it is cheap (issue #17): the plugin
side of ABI negotiation (cabi/negotiate.c), the option parser
(cabi/options.c), and the loader's checks of a plugin's table
(cabi/loader.c), each against the C tests that exercise it.

No C mutation tool is packaged for Debian or PyPI here, and the operators
that matter are few, so they are written out below: comparisons flipped or
loosened, && and || swapped, a negation dropped, 0 and 1 swapped in a
comparison, a return of success made early. Every mutant is one edit of one
line inside a target function (comments and string literals untouched). A
mutant the compiler rejects is invalid and not counted. The rest are built
into a private copy of the tree and its tests run there; a failing (or
hanging) test kills it.

    python -m tests.mutation.c_mutants [--floor N] [--report FILE]

Prints a table per file and ``C mutation score: N% (K of M killed)`` last;
exits 1 under the floor (``[c] score`` in tests/mutation/floor.toml).
Equivalent mutants are listed in EQUIVALENT below, each with why.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]

HELPER_TEST = ["helper-unit-tests"]
LOADER_TESTS = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                *(f"tests/test_cabi.py::test_{name}" for name in (
                    "loader_refuses_broken_plugins", "loader_reports_unloadable_path",
                    "loader_accepts_newer_and_larger_tables", "newer_host_loads_older_plugin",
                    "hostmem_fixture_behaves")),
                "tests/test_validate.py::test_off_hands_out_the_plugins_own_table",
                "tests/test_validate.py::test_on_hands_out_a_wrapped_table"]


@dataclass(frozen=True)
class Target:
    path: str
    functions: tuple[str, ...]  # empty: the whole file
    test: list[str]


TARGETS = [
    Target("cabi/negotiate.c", (), HELPER_TEST),
    Target("cabi/options.c", (), HELPER_TEST),
    Target("cabi/loader.c", ("nxhal_loader_refusal", "nxhal_loader_check_entries", "nxhal_loader_check_table",
                             "nxhal_plugin_open"), LOADER_TESTS),
]

# (pattern, replacement): each match on a line is one mutant.
OPERATORS: list[tuple[str, str, str]] = [
    ("==", r"==", "!="),
    ("!=", r"!=", "=="),
    ("<", r"(?<![<-])<(?![<=])", "<="),
    ("<=", r"<=", "<"),
    (">", r"(?<![->])>(?![>=])", ">="),
    (">=", r">=", ">"),
    ("&&", r"&&", "||"),
    ("||", r"\|\|", "&&"),
    ("!x", r"!(?=[A-Za-z_(])", ""),
    ("0->1", r"(?<=[=<>] )0\b", "1"),
    ("1->0", r"(?<=[=<>] )1\b", "0"),
    ("return NULL early", r"^(\s*)if \((.*)\) return (nxhal_status_make\(|status;)", r"\1if (0) return \3"),
]


# Mutants that cannot change behaviour: (path, the mutated line stripped) -> why.
EQUIVALENT: dict[tuple[str, str], str] = {
    ("cabi/loader.c", "plugin->abi_minor = api->abi_minor <= host_minor ? api->abi_minor : host_minor;"):
        "the smaller of two equal minors is either of them",
    ("cabi/loader.c", 'if (0) return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");'):
        "calloc of a few bytes failing is not something a test can arrange without an allocator shim",
    ("cabi/negotiate.c", "while (minor <= seen && !__atomic_compare_exchange_n(&nxhal_host_minor, &seen, minor, 0,"):
        "with minor == seen the exchange stores the value already there and the loop ends",
    ("cabi/negotiate.c", "while (minor < seen && __atomic_compare_exchange_n(&nxhal_host_minor, &seen, minor, 0,"):
        "after a successful exchange the next one fails and reloads seen == minor, so the loop ends with the "
        "same minimum",
    ("cabi/options.c", 'if (buf_size >= 4) memcpy(buf + buf_size - 4, "...", 4);'):
        "the buffer is the caller's fixed array of far more than 4 bytes",
}


@dataclass(frozen=True)
class Mutant:
    path: str
    line: int  # 1-based
    operator: str
    original: str
    mutated: str


def _code_spans(line: str) -> list[tuple[int, int]]:
    """Where ``line`` is code: outside string and character literals and comments."""
    spans, start, i, quote = [], 0, 0, ""
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote, start = "", i + 1
        elif c in "\"'":
            spans.append((start, i))
            quote = c
        elif line.startswith("//", i) or line.startswith("/*", i):
            spans.append((start, i))
            return spans
        i += 1
    if not quote:
        spans.append((start, len(line)))
    return spans


def _function_lines(lines: list[str], names: tuple[str, ...]) -> set[int]:
    """0-based indices of the lines inside the bodies of the named functions."""
    if not names:
        return set(range(len(lines)))
    inside: set[int] = set()
    for i, line in enumerate(lines):
        if not line.startswith((" ", "\t", "}", "#", "/", "*")) and any(
                re.search(rf"\b{name}\(", line) for name in names):
            j = i
            while not lines[j].startswith("}"):
                j += 1
            inside.update(range(i + 1, j))
    return inside


def mutants(target: Target) -> Iterator[Mutant]:
    lines = (ROOT / target.path).read_text().splitlines()
    in_comment = False
    for i in sorted(_function_lines(lines, target.functions)):
        line = lines[i]
        stripped = line.strip()
        if in_comment or stripped.startswith(("/*", "*", "//", "#")):
            in_comment = (in_comment or stripped.startswith("/*")) and "*/" not in stripped
            continue
        for name, pattern, replacement in OPERATORS:
            for match in re.finditer(pattern, line):
                if not any(a <= match.start() < b for a, b in _code_spans(line)):
                    continue
                mutated = line[:match.start()] + match.expand(replacement) + line[match.end():]
                if mutated != line and (target.path, mutated.strip()) not in EQUIVALENT:
                    yield Mutant(target.path, i + 1, name, line, mutated)


def _copy_tree(work: Path) -> Path:
    tree = work / "tree"
    # Virtual environments and the model corpus (.ci-models) are gigabytes that no C test
    # reads (a developer's .venv: 8 GB): the tests run with this interpreter, wherever it is.
    patterns = shutil.ignore_patterns(".git", ".ci-venv", ".venv", ".ci-models", ".ci-dist", "__pycache__",
                                      ".mypy_cache", ".ruff_cache", ".pytest_cache")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # build/ at the top holds other runs' outputs; the copy builds its own.
        return patterns(folder, names) | ({"build"} if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, tree, ignore=ignore, symlinks=True)
    return tree


def _compiles(tree: Path, path: str) -> bool:
    cc = os.environ.get("CC", "cc")
    out = subprocess.run([cc, "-std=c99", "-fsyntax-only", "-D_GNU_SOURCE", f"-I{tree / 'include'}",
                          f"-I{tree / 'cabi'}", str(tree / path)], capture_output=True)
    return out.returncode == 0


def _run_test(tree: Path, test: list[str], timeout: float) -> bool:
    """True when the tests pass (the mutant survives)."""
    env = dict(os.environ, PYTHONPATH=str(tree), NX_HAL_NO_CONFIG="1")
    if test == HELPER_TEST:
        script = ("from pathlib import Path; from tests import cbuild; import subprocess, sys; "
                  "r = cbuild.repo_root(); "
                  "exe = cbuild.build_program('test_helpers', [r / 'cabi/tests/test_helpers.c', "
                  "*cbuild.helper_sources()], Path(sys.argv[1])); "
                  "sys.exit(subprocess.run([str(exe)], capture_output=True).returncode)")
        test = [sys.executable, "-c", script, "{scratch}"]
    # In a session of its own, killed whole on timeout: a mutant that loops
    # forever (a loop condition flipped) is the test program, a grandchild.
    # The program is built into a directory this process removes, even when a
    # mutant that hangs is killed: one left per mutant filled /tmp.
    with tempfile.TemporaryDirectory(prefix="nxhal-mutant-") as scratch:
        command = [arg.replace("{scratch}", scratch) for arg in test]
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout) == 0
        except subprocess.TimeoutExpired:
            return False
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running
            except ProcessLookupError:
                pass
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--floor", type=float, help="fail under this score (percent; default: [c] score "
                        "in tests/mutation/floor.toml)")
    parser.add_argument("--report", type=Path, help="write the survivors here")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant's tests")
    args = parser.parse_args()
    if args.floor is None:
        floors = tomllib.loads((Path(__file__).parent / "floor.toml").read_text(encoding="utf-8"))
        args.floor = float(floors.get("c", {}).get("score", 0))
    rows, survivors = [], []
    with tempfile.TemporaryDirectory(prefix="nx-hal-c-mutation.") as tmp:
        tree = _copy_tree(Path(tmp))
        for target in TARGETS:
            if not _run_test(tree, target.test, args.timeout):
                print(f"the tests of {target.path} fail before any mutation", file=sys.stderr)
                return 2
            source = tree / target.path
            original = source.read_text()
            lines = original.splitlines(keepends=True)
            killed = total = invalid = 0
            for m in mutants(target):
                mutated = lines.copy()
                mutated[m.line - 1] = m.mutated + "\n"
                source.write_text("".join(mutated))
                try:
                    if not _compiles(tree, target.path):
                        invalid += 1
                        continue
                    total += 1
                    if _run_test(tree, target.test, args.timeout):
                        survivors.append(m)
                    else:
                        killed += 1
                finally:
                    source.write_text(original)
            rows.append((target.path, total, killed, invalid))
    print(f"{'file':<20} {'mutants':>8} {'killed':>7} {'score':>6}  (not compiling, left out)")
    for path, total, killed, invalid in rows:
        print(f"{path:<20} {total:8d} {killed:7d} {100 * killed / max(total, 1):5.0f}%  ({invalid})")
    lines_out = [f"{m.path}:{m.line}  {m.operator}  -> {m.mutated.strip()}" for m in survivors]
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text("".join(f"{line}\n" for line in lines_out))
    for line in lines_out:
        print(f"survived: {line}")
    total = sum(r[1] for r in rows)
    killed = sum(r[2] for r in rows)
    score = 100 * killed / max(total, 1)
    print(f"C mutation score: {int(score)}% ({killed} of {total} killed)")
    if score < args.floor:
        print(f"under the floor of {args.floor:g}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
