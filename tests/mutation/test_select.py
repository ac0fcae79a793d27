"""tests/mutation/select.py: which tests a mutant runs, and when it falls back to them all."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mutation import forkserver
from tests.mutation.select import build_map, run_mutant, select

SOURCE = textwrap.dedent('''\
    import functools
    LIMIT = 3


    def small(x, default=LIMIT > 2):
        if (x <
                LIMIT):
            return True
        return default


    def big(x):
        return x > 100


    def unused(x):
        return x == 7


    class Box:
        size = LIMIT + 1

        @functools.lru_cache(maxsize=LIMIT + 1)
        def fits(self, x):
            return x <= self.size
    ''')


def _mapping(**extra: Any) -> dict[str, Any]:
    """A map as build_map writes it: tests 0-3 in run order, which lines each executed."""
    base: dict[str, Any] = {
        "ok": True, "module": "mod.py", "source": SOURCE, "tests": ["test_mod.py"],
        "order": ["t::a", "t::b", "t::c", "t::d"], "always": [], "outside": [1, 2, 5, 12, 16, 20, 21, 23, 24],
        # test a and c call small (c only its first branch), b calls big, d calls Box().fits.
        "lines": {"6": [0, 2], "8": [0], "9": [2], "13": [1], "25": [3]},
    }
    return base | extra


def _mutate(line: int, old: str, new: str) -> str:
    lines = SOURCE.splitlines()
    assert old in lines[line - 1], lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines) + "\n"


def test_a_line_in_a_function_runs_the_tests_that_executed_it_in_order() -> None:
    assert select(_mapping(), _mutate(13, ">", ">="))[0] == ["t::b"]
    assert select(_mapping(), _mutate(25, "<=", "<"))[0] == ["t::d"]


def test_a_header_line_no_event_was_recorded_for_takes_the_whole_statement() -> None:
    # Line 7 (the condition's second line) is in no context: the `if` as a whole is.
    assert select(_mapping(), _mutate(7, "LIMIT", "LIMIT + 1"))[0] == ["t::a", "t::c"]


def test_lines_joined_by_the_mutant_are_found_in_the_pristine_source() -> None:
    # cosmic-ray's NumberReplacer can take the newline before the number with it.
    joined = SOURCE.replace("if (x <\n            LIMIT):", "if (x < LIMIT + 1):")
    assert joined != SOURCE
    assert select(_mapping(), joined)[0] == ["t::a", "t::c"]
    assert select(_mapping(), joined.replace("return x > 100", "return x > 101"))[0] == ["t::a", "t::b", "t::c"]


def test_a_statement_no_test_executed_selects_nothing() -> None:
    assert select(_mapping(), _mutate(17, "==", "!="))[0] == []


def test_tests_that_start_python_processes_always_run() -> None:
    assert select(_mapping(always=[3]), _mutate(17, "==", "!="))[0] == ["t::d"]
    assert select(_mapping(always=[3]), _mutate(13, ">", ">="))[0] == ["t::b", "t::d"]


@pytest.mark.parametrize(("line", "old", "new"), [
    (2, "3", "4"),                # module level
    (5, ">", ">="),               # a default argument
    (21, "+", "-"),               # a class body
    (23, "+", "-"),               # a decorator
])
def test_import_time_lines_run_the_whole_list(line: int, old: str, new: str) -> None:
    nodes, why = select(_mapping(), _mutate(line, old, new))
    assert nodes is None, why
    assert "import time" in why


def test_where_the_map_cannot_tell_the_whole_list_runs() -> None:
    mutant = _mutate(13, ">", ">=")
    assert select(_mapping(ok=False), mutant)[0] is None
    assert select(_mapping(outside=[13]), mutant)[0] is None  # executed at collection time
    assert select(_mapping(), SOURCE)[0] is None  # nothing changed


def test_map_and_run_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capfd: pytest.CaptureFixture[str]) -> None:
    """A real map (coverage, contexts, children measured or not) and real runs against mutants."""
    pytest.importorskip("coverage")  # installed by .ci/mutation, not by the test extras
    (tmp_path / "mod.py").write_text(SOURCE, encoding="utf-8")
    (tmp_path / "test_mod.py").write_text(textwrap.dedent('''\
        import os, subprocess, sys
        import mod

        def test_small():
            assert mod.small(1) and mod.small(5) is True

        def test_big():
            assert mod.big(101) and not mod.big(100)

        def test_child():
            subprocess.run([sys.executable, "-c", "import mod; assert mod.unused(7)"], check=True)

        def test_unseen_child():
            subprocess.run([sys.executable, "-c", "pass"], env={"PATH": os.environ["PATH"]}, check=True)
        '''), encoding="utf-8")
    out = tmp_path / "map.json"
    build_map(tmp_path, "mod.py", ["test_mod.py"], out)
    mapping = json.loads(out.read_text(encoding="utf-8"))
    assert mapping["ok"] and [node.split("::")[1] for node in mapping["order"]] == [
        "test_small", "test_big", "test_child", "test_unseen_child"]
    assert mapping["lines"]["13"] == [1] and mapping["lines"]["17"] == [2]  # 17: in the child
    assert mapping["always"] == [3]  # its child had an environment of its own: not measured
    assert 2 in mapping["outside"] and 13 not in mapping["outside"]

    # As cosmic-ray runs it: no bytecode written, none left from the map's run to go stale.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
    mutants = [
        (13, "100", "101", True, "2 of 4 tests"),  # test_big (and the unseen one)
        (17, "7", "8", True, "2 of 4 tests"),  # test_child, through its child
        (25, "<=", "<", False, "1 of 4 tests"),  # no test but the unseen one executes it
        (2, "3", "0", True, "import time"),  # the whole list
    ]
    for line, old, new, killed, words in mutants:
        (tmp_path / "mod.py").write_text(_mutate(line, old, new), encoding="utf-8")
        assert (run_mutant(out) != 0) == killed, line
        assert words in capfd.readouterr().out, line

    # The same verdicts from pytest runs forked by the server (tests/mutation/forkserver.py).
    with _fork_server(tmp_path / "fork.sock", monkeypatch) as server:
        for line, old, new, killed, words in mutants:
            (tmp_path / "mod.py").write_text(_mutate(line, old, new), encoding="utf-8")
            assert (run_mutant(out) != 0) == killed, line
            output = capfd.readouterr().out
            assert words in output and "pytest as a subprocess" not in output, (line, output)
        # A client that goes away (cosmic-ray's timeout) takes its pytest run with it.
        (tmp_path / "test_slow.py").write_text("import time\ndef test_slow():\n    time.sleep(60)\n")
        client = subprocess.Popen([sys.executable, "-c", "import sys; from tests.mutation import forkserver; "
                                   "sys.exit(forkserver.run(['test_slow.py']))"],
                                  cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        deadline = time.monotonic() + 30
        while not _children(server.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _children(server.pid), "the server forked no run"
        client.kill()
        client.wait()
        while _children(server.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _children(server.pid), "the run outlived its client"


ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[str]:
    done = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return done.stdout.split()


@contextlib.contextmanager
def _fork_server(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    server = subprocess.Popen([sys.executable, "-m", "tests.mutation.forkserver", str(path)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not path.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.exists(), "the fork server did not start"
        monkeypatch.setenv(forkserver.SOCKET_ENV, str(path))
        yield server
    finally:
        server.kill()
        server.wait()
