"""The mutation-testing driver behind ``.ci/mutation`` (issue #17).

For each module in ``.ci/mutation.toml``: a cosmic-ray session over a copy of
the tree, cut down to the fixed, seeded sample of mutants (less those listed
in ``tests/mutation/equivalent.toml``), executed by the cosmic-ray HTTP
workers that ``.ci/mutation`` started in their own copies, each mutant
against the module's tests that executed the mutated statement (a coverage
map made first: tests/mutation/select.py), or all of them where the map
cannot tell. Then a per-module table, the survivors (to the
report file), the floors of ``tests/mutation/floor.toml``, and last
``mutation score: N% (K of M killed)``. Exit status 1 when the score or a
module is under its floor, 2 when a mutant could not be run.

Run it through ``bash .ci/mutation``, not by hand: it needs the workers.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from tests.mutation.select import build_map

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Mutant:
    """One drawn mutant: cosmic-ray's identity (path, operator, occurrence) and where it is."""

    job_id: str
    path: str
    operator: str
    occurrence: int
    line: int

    @property
    def id(self) -> str:
        """The stable name used in equivalent.toml and the report."""
        return f"{self.path}:{self.operator}#{self.occurrence}"


@dataclass
class Outcome:
    """A module's results."""

    name: str
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[tuple[Mutant, str]] = field(default_factory=list)
    broken: list[tuple[Mutant, str]] = field(default_factory=list)

    @property
    def score(self) -> float:
        """Percent killed; 100 for a module with no mutants."""
        return 100.0 * self.killed / self.mutants if self.mutants else 100.0


def _cosmic_ray() -> tuple[Any, Any]:
    """cosmic-ray's session database and result types (imported late: untyped, and only CI installs it)."""
    work_db = importlib.import_module("cosmic_ray.work_db")
    work_item = importlib.import_module("cosmic_ray.work_item")
    return work_db, work_item


def _function_lines(source: str, names: list[str]) -> list[range]:
    """The line ranges of the named top-level functions (and methods)."""
    ranges = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            ranges.append(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    missing = set(names) - {n.name for n in ast.walk(ast.parse(source))
                            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if missing:
        raise SystemExit(f"mutation.toml names functions that are not there: {sorted(missing)}")
    return ranges


def _keyword_marker(line: str, column: int) -> bool:
    """Whether the mutated token is the bare ``*`` of a signature (cosmic-ray reads it as a
    multiplication: ``*, plugin`` → ``/, plugin``), which is not a decision."""
    return line[column:column + 1] == "*" and line[column + 1:].lstrip().startswith((",", ")"))


def _equivalents(path: Path) -> dict[str, dict[str, str]]:
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    entries: list[dict[str, str]] = data.get("equivalent", [])
    for entry in entries:
        if not entry.get("reason"):
            raise SystemExit(f"{path}: {entry.get('id')} has no reason")
    return {entry["id"]: entry for entry in entries}


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def _module(spec: dict[str, Any], settings: dict[str, Any], args: argparse.Namespace,
            equivalents: dict[str, dict[str, str]]) -> Outcome:
    work_db, work_item = _cosmic_ray()
    name: str = spec["name"]
    path: str = spec["path"]
    tree: Path = args.tree
    session = args.work / f"{name}.sqlite"
    config = args.work / f"{name}.toml"
    # Each mutant runs only the tests that executed its mutated statement in the pristine tree
    # (tests/mutation/select.py), or the whole list where that map cannot tell.
    selection = args.work / f"{name}.map.json"
    print(f"  {name}: {build_map(tree, path, spec['tests'], selection)}", flush=True)
    test_command = shlex.join([sys.executable, "-m", "tests.mutation.select", "--map", str(selection)])
    for other in args.warm:
        # cosmic-ray runs tests with PYTHONDONTWRITEBYTECODE, so pytest rewrites the asserts of
        # every test module on every run (a third of a one-test run) unless a cache is there:
        # the coverage run left one in `tree`; collecting leaves one in the other copies.
        subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        *spec["tests"]], cwd=other, env=dict(os.environ, PYTHONPATH=str(other)),
                       capture_output=True, check=False)
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(path)}\n"
        f"timeout = {float(settings['timeout'])}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(test_command)}\n"
        "[cosmic-ray.distributor]\n"
        'name = "http"\n'
        "[cosmic-ray.distributor.http]\n"
        f"worker-urls = {json.dumps(args.workers)}\n",
        encoding="utf-8",
    )
    session.unlink(missing_ok=True)
    _run([sys.executable, "-m", "cosmic_ray.cli", "init", str(config), str(session)], tree)

    source = (tree / path).read_text(encoding="utf-8")
    lines = source.splitlines()
    ranges = _function_lines(source, spec["functions"]) if "functions" in spec else None
    operators = re.compile("|".join(f"(?:{op})" for op in settings["operators"]))
    outcome = Outcome(name)

    db = work_db.WorkDB(str(session), work_db.WorkDB.Mode.open)
    try:
        candidates: list[Mutant] = []
        for item in db.pending_work_items:
            (mutation,) = item.mutations
            mutant = Mutant(item.job_id, path, mutation.operator_name, mutation.occurrence, mutation.start_pos[0])
            if _keyword_marker(lines[mutant.line - 1], mutation.start_pos[1]):
                continue
            if operators.fullmatch(mutant.operator) and (ranges is None or any(mutant.line in r for r in ranges)):
                candidates.append(mutant)
        candidates.sort(key=lambda m: (m.line, m.operator, m.occurrence))
        drawn = random.Random(f"{settings['seed']}:{path}").sample(candidates, min(spec["sample"], len(candidates)))
        keep = set()
        for mutant in drawn:
            entry = equivalents.get(mutant.id)
            if entry is None:
                keep.add(mutant.job_id)
                continue
            if entry.get("line", "").strip() != lines[mutant.line - 1].strip():
                raise SystemExit(f"equivalent.toml: {mutant.id} is now line {mutant.line} "
                                 f"{lines[mutant.line - 1].strip()!r}, not {entry.get('line')!r}: "
                                 "check it is still equivalent and update the entry")
            outcome.equivalent += 1
        skip = [item.job_id for item in db.pending_work_items if item.job_id not in keep]
        db.set_multiple_results(skip, work_item.WorkResult(output="not drawn",
                                                           worker_outcome=work_item.WorkerOutcome.SKIPPED))
    finally:
        db.close()

    _run([sys.executable, "-m", "cosmic_ray.cli", "exec", str(config), str(session)], tree)

    by_job = {m.job_id: m for m in candidates}
    db = work_db.WorkDB(str(session), work_db.WorkDB.Mode.open)
    try:
        for item, result in db.completed_work_items:
            if item.job_id not in keep:
                continue
            mutant = by_job[item.job_id]
            outcome.mutants += 1
            if result.worker_outcome != work_item.WorkerOutcome.NORMAL:
                outcome.broken.append((mutant, f"{result.worker_outcome}: {result.output}"))
            elif result.test_outcome == work_item.TestOutcome.KILLED:
                outcome.killed += 1
            elif result.test_outcome == work_item.TestOutcome.SURVIVED:
                outcome.survivors.append((mutant, result.diff or ""))
            else:
                outcome.broken.append((mutant, f"{result.test_outcome}: {result.output}"))
        if len(db.pending_work_items) or outcome.mutants != len(keep):
            outcome.broken.append((drawn[0], f"{len(keep) - outcome.mutants} drawn mutants were not run"))
    finally:
        db.close()
    return outcome


def _changed_line(diff: str) -> str:
    """The mutated line, from cosmic-ray's unified diff."""
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return "?"


def main(argv: list[str] | None = None) -> int:
    """Run every module's sample; print the table and the score, check the floors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="the module map (.ci/mutation.toml)")
    parser.add_argument("--tree", type=Path, required=True, help="a copy of the tree to read and init from")
    parser.add_argument("--work", type=Path, required=True, help="where session databases go")
    parser.add_argument("--workers", nargs="+", required=True, help="cosmic-ray http-worker URLs")
    parser.add_argument("--warm", nargs="*", type=Path, default=[],
                        help="the other workers' copies of the tree, to fill pytest's caches in")
    parser.add_argument("--report", type=Path, required=True, help="where the survivors are written")
    parser.add_argument("--only", nargs="*", default=[], help="module names to run (no floors checked)")
    args = parser.parse_args(argv)

    settings = tomllib.loads(args.config.read_text(encoding="utf-8"))
    floors = tomllib.loads((HERE / "floor.toml").read_text(encoding="utf-8"))
    equivalents = _equivalents(HERE / "equivalent.toml")
    modules = [m for m in settings["module"] if not args.only or m["name"] in args.only]

    outcomes = []
    for spec in modules:
        started = time.monotonic()
        outcome = _module(spec, settings["mutation"], args, equivalents)
        outcomes.append(outcome)
        print(f"  {outcome.name}: {outcome.killed} of {outcome.mutants} killed "
              f"({time.monotonic() - started:.0f} s)", flush=True)

    report = ["# Surviving mutants, by module (file:line  operator#occurrence  the mutated line)", ""]
    for outcome in outcomes:
        report.append(f"## {outcome.name}: {len(outcome.survivors)} survivors of {outcome.mutants}")
        for mutant, diff in sorted(outcome.survivors, key=lambda s: s[0].line):
            report.append(f"{mutant.path}:{mutant.line}  {mutant.operator}#{mutant.occurrence}  "
                          f"-> {_changed_line(diff)}")
        report.append("")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(report), encoding="utf-8")

    killed = sum(o.killed for o in outcomes)
    total = sum(o.mutants for o in outcomes)
    score = 100.0 * killed / total if total else 100.0
    module_floors: dict[str, int] = floors.get("module", {})
    print()
    print("| module | mutants | killed | score | floor |")
    print("|---|---|---|---|---|")
    failures = []
    for o in outcomes:
        floor = module_floors.get(o.name, 0)
        print(f"| {o.name} | {o.mutants} | {o.killed} | {o.score:.1f}% | {floor}% |")
        if o.score < floor:
            failures.append(f"{o.name} {o.score:.1f}% is under its floor {floor}%")
    print(f"| total | {total} | {killed} | {score:.1f}% | {floors['score']}% |")
    print(f"\nequivalent mutants drawn and left out: {sum(o.equivalent for o in outcomes)} "
          f"(tests/mutation/equivalent.toml); survivors: {args.report}")
    if not args.only and score < floors["score"]:
        failures.append(f"the score {score:.1f}% is under the floor {floors['score']}%")
    broken = [(m, why) for o in outcomes for m, why in o.broken]
    for mutant, why in broken:
        print(f"error: {mutant.id} (line {mutant.line}) did not run: {why[-2000:]}", file=sys.stderr)
    for failure in failures:
        print(f"error: {failure} (tests/mutation/floor.toml)", file=sys.stderr)
    print(f"mutation score: {int(score)}% ({killed} of {total} killed)", flush=True)
    return 2 if broken else 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
