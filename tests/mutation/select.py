"""Coverage-selected tests for a mutant (``.ci/mutation``, issue #17).

Running a module's whole test list against each of its mutants spends most of
the time in tests that never reach the mutated line. So, once per module and
before any mutant, the harness's ``build_map`` runs that list under coverage.py
with one context per test (this file is also the pytest plugin that switches
them) and writes a map: line of the module -> the tests that executed it.
cosmic-ray then runs ``python -m tests.mutation.select --map FILE`` as each
mutant's test command; it diffs the mutated module against
the pristine source kept in the map and runs only the tests that executed the
mutated statement, in their original order, with ``-x``.

It falls back to the whole list, exactly today's command, wherever the map
cannot answer: a line run at import or collection time (module level, class
bodies, decorators, defaults: outside any test, or in every test), a map that
could not be made (the pristine tests failed), a file that no longer lines up,
pytest refusing the node ids, or any error of its own. A mutated statement
that no test executed survives without running anything (exit 0), which is
what the whole list would give. Python children of a test (plugin probes,
sandboxed compiles) are measured too (coverage's ``patch = subprocess``) and
count for that test; a test with a child coverage cannot see (an environment
of its own, killed before it saved, a bare fork) runs for every mutant.
"""

from __future__ import annotations

import argparse
import ast
import base64
import difflib
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from tests.mutation import forkserver

if TYPE_CHECKING:
    import pytest

#: pytest's own flags for a mutant's run, as before the selection.
PYTEST = ["-x", "-q", "-p", "no:cacheprovider"]
#: pytest's exit statuses for "usage error" (a node id not found) and "no tests collected":
#: the selection's fault, never the mutant's, so the whole list is run instead.
_SELECTION_REFUSED = (4, 5)


# -- the pytest plugin, loaded by build_map only (-p tests.mutation.select) ------------------------

# pytest's own marker, without importing pytest: the per-mutant command below would pay half a
# second for it before starting the pytest that it runs.
_hookimpl = pluggy.HookimplMarker("pytest")
_order: list[str] = []
_spawners: set[str] = set()  # tests whose Python children coverage cannot see
_children: list[tuple[str, int]] = []  # (test, pid) of the Python children it should see
_current = ""
#: coverage's `patch = subprocess` starts coverage in every Python child from this variable.
_CHILD_CONFIG = "COVERAGE_PROCESS_CONFIG"


def _coverage() -> Any:
    """coverage.py, imported late: only .ci/mutation installs it (not the test extras), and
    `mypy --strict tests` runs where it is not."""
    return importlib.import_module("coverage")


def _is_python(program: Any) -> bool:
    name = os.fsdecode(program if isinstance(program, (str, bytes, os.PathLike)) else program[0])
    return name == sys.executable or Path((name.split() or [""])[0]).name.startswith("python")


def _child_context(context: str) -> None:
    """Label what Python children started from now on execute with `context` (a test's node id):
    they run the module's code too (plugin probes, sandboxed compiles), and no dynamic context
    reaches them. Each writes a data file of its own (parallel), merged by build_map."""
    encoded = os.environ.get(_CHILD_CONFIG)
    if encoded is not None:
        config = json.loads(base64.b64decode(encoded))
        config.update(context=context, parallel=True)
        os.environ[_CHILD_CONFIG] = base64.b64encode(json.dumps(config).encode()).decode()


def pytest_configure(config: pytest.Config) -> None:
    """Watch process creation: subprocess, multiprocessing and fork."""
    import _posixsubprocess
    import inspect
    import subprocess as module

    execute_child = module.Popen._execute_child  # type: ignore[attr-defined]
    signature = inspect.signature(execute_child)
    fork_exec: Callable[..., int] = _posixsubprocess.fork_exec

    def watched_child(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs).arguments
        done = execute_child(self, *args, **kwargs)
        if _current and _is_python(bound["executable"] or bound["args"]):
            env = bound["env"] if bound["env"] is not None else os.environ
            if _CHILD_CONFIG in env:
                _children.append((_current, self.pid))  # seen, if it lives to save its data
            else:
                _spawners.add(_current)  # a test's own environment: not measured
        return done

    def watched_fork_exec(args: Any, *rest: Any) -> int:
        if _current and _is_python(args):
            _spawners.add(_current)  # multiprocessing's spawn: pids not followed, so not trusted
        return fork_exec(args, *rest)

    def watched_fork() -> None:
        if _current:
            _spawners.add(_current)

    module.Popen._execute_child = watched_child  # type: ignore[attr-defined]
    _posixsubprocess.fork_exec = watched_fork_exec
    os.register_at_fork(before=watched_fork)
    _child_context("")


@_hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Everything a test executes, fixtures' setup and teardown and its Python children
    included, goes to its node id."""
    global _current
    cov = _coverage().Coverage.current()
    _current = item.nodeid
    _order.append(item.nodeid)
    _child_context(item.nodeid)
    if cov is not None:
        cov.switch_context(item.nodeid)
    try:
        return (yield)
    finally:
        _current = ""
        _child_context("")
        if cov is not None:
            cov.switch_context("")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Hand the run order and the process-starting tests to build_map (coverage saves the lines)."""
    side = os.environ.get("MUTATION_SELECT_SIDE")
    if side:
        Path(side).write_text(json.dumps({"order": _order, "spawners": sorted(_spawners), "children": _children}),
                              encoding="utf-8")


# -- the map: once per module, in the pristine tree, by the harness -----------------------------

def build_map(tree: Path, module: str, tests: list[str], out: Path) -> str:
    """Run `tests` in `tree` under coverage; write the map to `out`; return a one-line summary."""
    started = time.monotonic()
    source = (tree / module).read_text(encoding="utf-8")
    result: dict[str, Any] = {"module": module, "source": source, "tests": tests, "ok": False}
    with tempfile.TemporaryDirectory(prefix="mutation-map-") as scratch:
        data_file, side = Path(scratch) / "coverage", Path(scratch) / "side.json"
        # The tree's own code first; this plugin from wherever it is (the tree holds it in CI).
        env = dict(os.environ, MUTATION_SELECT_SIDE=str(side),
                   PYTHONPATH=os.pathsep.join([str(tree), str(Path(__file__).resolve().parents[2])]))
        # Python children measured too (patch = subprocess; _exit: a child that leaves by
        # os._exit saves its data first), each into a file of its own, named by its pid.
        rcfile = Path(scratch) / "rc"
        rcfile.write_text(f"[run]\ndata_file = {data_file}\ninclude = {(tree / module).resolve()}\n"
                          "patch =\n    subprocess\n    _exit\n", encoding="utf-8")
        command = [sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}", "-m", "pytest", *PYTEST,
                   "-p", "tests.mutation.select", *tests]
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not side.exists():
            # Not a map to trust: every mutant of the module runs the whole list, as before.
            out.write_text(json.dumps(result), encoding="utf-8")
            return (f"no coverage map (pytest exit {done.returncode}): the whole list for every mutant\n"
                    f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
        ran = json.loads(side.read_text(encoding="utf-8"))
        by_line: dict[int, list[str]] = {}
        saved: set[int] = set()
        for path in sorted(Path(scratch).glob("coverage*")):
            pid = re.search(r"\.pid(\d+)\.", path.name)
            if pid:
                saved.add(int(pid.group(1)))
            data = _coverage().CoverageData(basename=str(path))
            data.read()
            for measured in data.measured_files():
                for line, contexts in data.contexts_by_lineno(measured).items():
                    by_line.setdefault(line, []).extend(contexts)
        # A child that died before saving (killed, timed out) ran what no one saw: its test
        # runs for every mutant.
        spawners = set(ran["spawners"]) | {node for node, pid in ran["children"] if pid not in saved}
    index = {node: i for i, node in enumerate(ran["order"])}
    result.update(
        ok=True,
        order=ran["order"],
        always=sorted(index[n] for n in spawners if n in index),
        # Lines executed outside any test: import and collection time.
        outside=sorted(line for line, contexts in by_line.items() if "" in contexts),
        lines={str(line): sorted({index[c] for c in contexts if c in index})
               for line, contexts in sorted(by_line.items())},
    )
    out.write_text(json.dumps(result), encoding="utf-8")
    return (f"{len(ran['order'])} tests mapped, {len(ran['children'])} Python children seen, "
            f"{len(result['always'])} tests with unseen ones, "
            f"{time.monotonic() - started:.0f} s")


# -- run: cosmic-ray's test command for each mutant --------------------------------------------

def _statement_span(module: ast.Module, line: int) -> tuple[range, bool] | None:
    """The lines of the innermost statement that holds `line` (for a compound statement, when
    `line` is in its header: the whole statement), and whether it runs inside a function call
    rather than at import time. None outside any statement (a blank or comment line)."""
    body: list[ast.stmt] = module.body
    in_function = False
    span: tuple[range, bool] | None = None
    while True:
        for stmt in body:
            first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
            if first <= line <= (stmt.end_lineno or stmt.lineno):
                break
        else:
            return span
        span = (range(first, (stmt.end_lineno or stmt.lineno) + 1), in_function)
        children = [*getattr(stmt, "body", []), *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", []),
                    *(s for h in getattr(stmt, "handlers", []) for s in h.body),
                    *(s for c in getattr(stmt, "cases", []) for s in c.body)]
        if not any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in children):
            # `line` is in the header (a condition, an `except` clause, a signature): a test that
            # executed it executed some line of the statement, so the whole span is a safe superset.
            return span
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function = True  # its body runs when called, under a test's context; a class body does not
        body = children


def select(mapping: dict[str, Any], mutated: str) -> tuple[list[str] | None, str]:
    """The node ids to run against `mutated` (None: the whole list), and why."""
    if not mapping.get("ok"):
        return None, "no coverage map"
    # The pristine lines the mutant replaced. Not always line for line: cosmic-ray's
    # NumberReplacer takes the newline before a number inside brackets with it (two lines of a
    # dict become one), but only within one statement, whose span the lookup below takes whole.
    matcher = difflib.SequenceMatcher(None, mapping["source"].splitlines(), mutated.splitlines(), autojunk=False)
    lines = sorted({line + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != "equal"
                    for line in range(i1, max(i2, i1 + 1))})
    if not lines:
        return None, "no line differs from the pristine source"
    module = ast.parse(mapping["source"])
    outside = set(mapping["outside"])
    chosen: set[int] = set(mapping["always"])
    for line in lines:
        found = _statement_span(module, line)
        if found is None or not found[1]:
            return None, f"line {line} runs at import time"
        span = found[0]
        if outside.intersection(span):
            return None, f"line {line} runs outside the tests (collection or import)"
        for covered in span:
            chosen.update(mapping["lines"].get(str(covered), []))
    order: list[str] = mapping["order"]
    return [order[i] for i in sorted(chosen)], f"lines {lines}: {len(chosen)} of {len(order)} tests"


def _pytest(args: list[str]) -> int:
    """pytest's status for ``args``: run by the tree's fork server where one is up (no start-up
    cost), else as a subprocess."""
    status = forkserver.run([*PYTEST, *args])
    if status is None:
        status = subprocess.run([sys.executable, "-m", "pytest", *PYTEST, *args], check=False).returncode
    return status


def run_mutant(map_file: Path) -> int:
    """Run the selected tests against the module as it is on disk now (mutated); pytest's status."""
    mapping: dict[str, Any] = {}
    try:
        mapping = json.loads(map_file.read_text(encoding="utf-8"))
        nodes, why = select(mapping, Path(mapping["module"]).read_text(encoding="utf-8"))
    except Exception as error:  # noqa: BLE001 - never a verdict of ours: fall back to the whole list
        nodes, why = None, f"selection failed ({error!r})"
    print(f"mutation-select: {why}", flush=True)
    if nodes is None:
        return _pytest(mapping.get("tests", []))
    if not nodes:
        print("mutation-select: no test executes the mutated statement: survives", flush=True)
        return 0
    status = _pytest(nodes)
    if status in _SELECTION_REFUSED:
        print(f"mutation-select: pytest refused the selection ({status}): the whole list", flush=True)
        status = _pytest(mapping["tests"])
    return status


def main(argv: list[str] | None = None) -> int:
    """cosmic-ray's test command: ``python -m tests.mutation.select --map FILE``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--map", type=Path, required=True, help="the module's map, from build_map")
    return run_mutant(parser.parse_args(argv).map)


if __name__ == "__main__":
    sys.exit(main())
