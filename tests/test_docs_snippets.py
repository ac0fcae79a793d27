"""Every code block of README.md, CONTRIBUTING.md and of the documentation (docs/**/*.md) runs.

A snippet a reader copies must work verbatim, so each fenced block is run as
the reader would run it: each page in a fresh temporary directory of its own
where ``examples/`` is the repository's (paths read as from the repository
root), its blocks in page order (a later block may use what an earlier one
built), in the active environment (``VIRTUAL_ENV`` set as an activated one
sets it: C programs find the installed plugins through it).

- ``python``: run in a fresh interpreter; it must exit 0.
- ``sh``/``bash``: run with ``bash -euo pipefail``; ``console``: its ``$ ``
  lines the same way.
- ``c``/``cpp``: compiled with the SDK's flags (``nx-hal sdk``) and run, a
  whole program (one with ``main``) with warnings as errors; a fragment is
  put in a ``main`` first.
- ``toml``: parsed, then used as an ``nx_hal.toml`` (``nx-hal --config-file
  BLOCK config`` must accept it).
- ``text``: output shown, not a snippet. Any other language fails: a block
  is never left unrun by accident.

An HTML comment on the line above a block (blank lines between allowed)
changes that, as docs/contributing.md documents:
``<!-- no-test: REASON -->`` skips it with REASON (slow or machine-changing
commands); ``<!-- file: NAME -->`` makes it the file NAME in the page's
directory, written before the page's blocks run; ``<!-- needs: MODULE -->``
skips it when MODULE cannot be imported, and ``needs: ray`` also gives it a
local Ray cluster (``RAY_ADDRESS``), started once for the session.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (the test tools install it)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PAGES: tuple[Path, ...] = (ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md")))
RUN = ("python", "sh", "bash", "console", "c", "cpp", "toml")
SHOWN = ("text",)  # output, never run
FILE_ONLY = ("cmake",)  # only as a <!-- file: --> block
TIMEOUT = 300.0  # seconds per block: a Ray deployment on a busy 2-core machine is the slowest
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_MARKER = re.compile(r"^<!--\s*(?P<kind>no-test|file|needs):\s*(?P<argument>.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, with the marker above it."""

    page: Path
    line: int  # the opening fence's line, from 1
    lang: str
    code: str
    marker: str = ""  # "no-test", "file", "needs" or ""
    argument: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _marker_above(lines: list[str], fence: int) -> tuple[str, str]:
    """The marker comment on the closest non-blank line above line ``fence``."""
    above = fence - 1
    while above >= 0 and not lines[above].strip():
        above -= 1
    match = _MARKER.match(lines[above].strip()) if above >= 0 else None
    return (match.group("kind"), match.group("argument")) if match else ("", "")


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    lines = page.read_text().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        body: list[str] = []
        end = i + 1
        while end < len(lines) and not re.fullmatch(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[end]):
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        kind, argument = _marker_above(lines, i)
        found.append(Block(page, i + 1, opening.group("info").lower(), "\n".join(body) + "\n", kind, argument))
        i = end + 1
    return found


def _all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks_of(page) if block.lang not in SHOWN]


BLOCKS = _all_blocks()


# --- Where blocks run ------------------------------------------------------------


@dataclass
class Workspace:
    """The session's directories, environment and Ray cluster."""

    root: Path
    env: dict[str, str]
    pages: dict[Path, Path] = field(default_factory=dict)
    ray: subprocess.Popen[str] | None = None
    ray_address: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)  # pages run in threads

    def page_dir(self, page: Path) -> Path:
        """The page's own directory: examples/ reachable, its file blocks written."""
        if page not in self.pages:
            directory = self.root / re.sub(r"[^A-Za-z0-9]+", "-", str(page.relative_to(ROOT)))
            directory.mkdir()
            (directory / "examples").symlink_to(ROOT / "examples")
            for block in blocks_of(page):
                if block.marker == "file":
                    target = directory / block.argument
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(block.code)
            self.pages[page] = directory
        return self.pages[page]

    def start_ray(self) -> str:
        """A local Ray cluster for the session (started by a helper this test
        owns, which shuts it down when its stdin closes); its address."""
        with self.lock:
            return self._start_ray()

    def _start_ray(self) -> str:
        if self.ray is None:
            self.ray = subprocess.Popen([sys.executable, "-c", _RAY_HELPER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        cwd=self.root, env=self.env)
            assert self.ray.stdout is not None
            for line in self.ray.stdout:  # Ray may print before the helper does
                if line.startswith("address="):
                    self.ray_address = line.removeprefix("address=").strip()
                    break
        if not self.ray_address:
            pytest.fail("the local Ray cluster for the Ray snippets did not start")
        return self.ray_address

    def stop_ray(self) -> None:
        if self.ray is None:
            return
        assert self.ray.stdin is not None
        self.ray.stdin.close()
        try:
            self.ray.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.ray.kill()
            self.ray.wait()


# Runs in a child: a head node with Ray's logical CPUs (not real cores) for
# a pool's replica and Ray Data's actors, until the test closes stdin.
_RAY_HELPER = """
import os
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, connect=False, head_node_args={
    "num_cpus": 4, "object_store_memory": 200 * 1024 * 1024, "include_dashboard": False})
print(f"address={cluster.address}", flush=True)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads the pipe now: it must never fill
sys.stdin.read()  # until the test closes it, or its process ends
cluster.shutdown()
"""


def _environment() -> dict[str, str]:
    """The process's environment as an activated virtual environment has it."""
    env = dict(os.environ)
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
        env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("RAY_ADDRESS", None)
    return env


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    space = Workspace(tmp_path_factory.mktemp("docs-snippets"), _environment())
    try:
        yield space
    finally:
        space.stop_ray()


# --- Running one block ----------------------------------------------------------


def _run(block: Block, cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Runs a command for ``block``; fails the test with its output unless it exits 0."""
    try:
        result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: {block.lang} block ran past {TIMEOUT:.0f} s")
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        pytest.fail(f"{block.where}: {block.lang} block failed (exit {result.returncode}): "
                    f"{shlex.join(cmd)[:300]}\n{output}\n--- the block ---\n{block.code}")
    return result.stdout


def _sdk_flags(env: dict[str, str], which: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "nx_hal", "sdk", which], env=env, capture_output=True,
                         text=True, check=True).stdout
    return shlex.split(out)


def _as_program(block: Block) -> tuple[str, bool]:
    """The block as a whole program, and whether it was one already. A
    fragment's #include lines stay at the top; the rest becomes main's body."""
    if re.search(r"\bmain\s*\(", block.code):
        return block.code, True
    lines = block.code.splitlines()
    includes = [line for line in lines if line.lstrip().startswith("#")]
    body = [line for line in lines if not line.lstrip().startswith("#")]
    return "\n".join([*includes, "int main(void) {", *body, "  return 0;", "}", ""]), False


def _compile_and_run(block: Block, cwd: Path, env: dict[str, str]) -> None:
    source, whole = _as_program(block)
    suffix, compiler, std = (".c", os.environ.get("CC") or "cc", "-std=c99") if block.lang == "c" else (
        ".cpp", os.environ.get("CXX") or "g++", "-std=c++17")
    if shutil.which(shlex.split(compiler)[0]) is None:
        pytest.skip(f"compiler '{compiler}' not found")
    name = f"snippet_{block.line}"
    (cwd / f"{name}{suffix}").write_text(source)
    # A fragment's variables are there to be shown, not used: its warnings are not errors.
    warnings = ["-Wall", "-Wextra", *(["-Werror"] if whole else [])]
    cmd = [*shlex.split(compiler), std, *warnings, *_sdk_flags(env, "--cflags"), f"{name}{suffix}", "-o", name,
           *_sdk_flags(env, "--libs")]
    _run(block, cmd, cwd, env)
    _run(block, [str(cwd / name)], cwd, env)


def _shell_code(block: Block) -> str:
    if block.lang != "console":
        return block.code
    return "\n".join(line[2:] for line in block.code.splitlines() if line.startswith("$ ")) + "\n"


def run_block(block: Block, space: Workspace) -> None:
    """Runs one block as the documentation's reader would."""
    cwd = space.page_dir(block.page)
    env = dict(space.env)
    if block.marker == "needs":
        pytest.importorskip(block.argument, reason=f"{block.where} needs {block.argument}, not installed here")
        if block.argument == "ray":
            env["RAY_ADDRESS"] = space.start_ray()
    if block.lang == "python":
        script = cwd / f"snippet_{block.line}.py"
        script.write_text(block.code)
        _run(block, [sys.executable, script.name], cwd, env)
    elif block.lang in ("sh", "bash", "console"):
        _run(block, ["bash", "-euo", "pipefail", "-c", _shell_code(block)], cwd, env)
    elif block.lang in ("c", "cpp"):
        _compile_and_run(block, cwd, env)
    elif block.lang == "toml":
        tomllib.loads(block.code)
        config = cwd / f"snippet_{block.line}.toml"
        config.write_text(block.code)
        _run(block, [sys.executable, "-m", "nx_hal", "--config-file", str(config), "config"], cwd, env)
    else:
        pytest.fail(f"{block.where}: no way to run a '{block.lang or 'plain'}' block: give it a language "
                    f"this test runs ({', '.join(RUN)}), 'text' for output, or a marker (docs/contributing.md)")


def check_block(block: Block, space: Workspace) -> None:
    """What the test of one block does: skip, accept a file, or run it."""
    if block.marker == "no-test":
        pytest.skip(f"{block.where}: {block.argument}")
    if block.marker == "file":
        if block.lang == "toml":
            tomllib.loads(block.code)  # a file of the page: at least well-formed
        return  # written into the page's directory; the page's commands use it
    if block.lang in FILE_ONLY:
        pytest.fail(f"{block.where}: a '{block.lang}' block runs only as a file: mark it <!-- file: NAME -->")
    run_block(block, space)


Outcome = BaseException | None  # what check_block raised (pytest's skip and fail included), or None


def _check_page(blocks: list[Block], space: Workspace) -> dict[Block, Outcome]:
    outcomes: dict[Block, Outcome] = {}
    for block in blocks:  # in page order: a block may use what the ones above it made
        try:
            check_block(block, space)
            outcomes[block] = None
        except BaseException as exc:  # noqa: BLE001 -- kept, and raised again by the block's own test
            outcomes[block] = exc
    return outcomes


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, workspace: Workspace) -> dict[Block, Outcome]:
    """Runs the selected blocks once, the pages side by side (each page's
    blocks in order): nearly every block waits on a child process, so two
    pages at a time keep two cores busy. NXHAL_TEST_JOBS=1 runs one page at a time."""
    pages: dict[Path, list[Block]] = {}
    for item in request.session.items:
        if isinstance(item, pytest.Function) and item.module is request.module and hasattr(item, "callspec"):
            block = item.callspec.params.get("block")
            if isinstance(block, Block):
                pages.setdefault(block.page, []).append(block)
    jobs = max(1, int(os.environ.get("NXHAL_TEST_JOBS") or 2))
    results: dict[Block, Outcome] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        # The slowest pages first, so the last ones to finish are short.
        order = sorted(pages.values(), key=lambda blocks: -sum(b.marker == "needs" for b in blocks))
        for page_outcomes in pool.map(lambda blocks: _check_page(blocks, workspace), order):
            results.update(page_outcomes)
    return results


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.where}:{b.lang or 'plain'}" for b in BLOCKS])
def test_snippet_runs(block: Block, outcomes: dict[Block, Outcome], workspace: Workspace) -> None:
    if block not in outcomes:  # not run with the others (a test selected some other way)
        check_block(block, workspace)
        return
    outcome = outcomes[block]
    if outcome is not None:
        raise outcome


# --- The runner itself ----------------------------------------------------------


def test_every_page_has_blocks_and_markers_have_reasons() -> None:
    """The extraction finds the README's two commands, and no marker is empty."""
    readme = [b for b in BLOCKS if b.page.name == "README.md"]
    assert any("bash .ci/test" in b.code for b in readme), "the README's test command was not found"
    assert all(b.argument for b in BLOCKS if b.marker), [b.where for b in BLOCKS if b.marker and not b.argument]


def test_a_broken_snippet_fails(workspace: Workspace, tmp_path: Path) -> None:
    """The runner fails a snippet that fails verbatim, in each kind of block."""
    page = tmp_path / "broken.md"
    page.write_text("```python\nimport nx_hal\nnx_hal.no_such_function()\n```\n\n"
                    "```sh\nnx-hal run examples/no-such-model.onnx\n```\n\n"
                    "```c\n#include \"nx_hal/nx_hal_loader.h\"\nnxhal_no_such_function();\n```\n")
    broken = [Block(ROOT / "README.md", b.line, b.lang, b.code) for b in blocks_of(page)]
    assert [b.lang for b in broken] == ["python", "sh", "c"]
    for block in broken:
        with pytest.raises(pytest.fail.Exception, match="block failed"):
            run_block(block, workspace)
