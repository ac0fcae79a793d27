"""The fuzz driver: mutates each path's corpus with a fixed seed and feeds
every input to each plugin that takes it through a pool of worker processes.

    python -m tests.fuzz [--seconds S] [--paths a,b] [--plugins x,y] [--gate a,b]
    python -m tests.fuzz --path P --plugin X --index I [--seed S]   # reproduce one input
    python -m tests.fuzz --path P --plugin X --input FILE [--minimize]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from tests.fuzz.targets import PATHS, Path_, load_corpus, timeout_of

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0


def make_input(spec: Path_, plugin: str, corpus: list[bytes], seed: int, index: int) -> bytes:
    key = f"{seed}/{spec.name}/{plugin}/{index}" if spec.per_plugin_corpus else f"{seed}/{spec.name}/{index}"
    return spec.make(random.Random(key), corpus)


class Worker:
    def __init__(self, path: str, plugin: str, workdir: Path, n: int) -> None:
        self.log = workdir / f"worker-{path}-{plugin}-{n}.log"
        wd = workdir / f"w{n}"
        wd.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker", path, plugin, str(wd)],
            # In its own scratch directory: fuzzed options name relative
            # paths (an OpenVINO cache_dir, say) that would land in the checkout.
            cwd=wd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log.open("wb"),
            start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"},
        )
        self.buf = b""
        self.index = -1
        self.deadline = 0.0

    def fileno(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def read_line(self, timeout: float) -> bytes | None:
        """A line, or None at EOF or timeout (the caller tells them apart)."""
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self], [], [], left)[0]:
                return None
            chunk = os.read(self.fileno(), 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def send(self, index: int, data: bytes, timeout: float) -> None:
        assert self.proc.stdin is not None
        self.index, self.deadline = index, time.monotonic() + timeout
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # seen as EOF on the next read

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def close(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.kill()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # a converter child left behind
        except ProcessLookupError:
            pass

    def stderr_tail(self) -> str:
        """The end of the worker's stderr; on a fatal signal, what came just
        before Python's traceback (the vendor's last words) rather than the
        traceback's tail."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        fatal = text.rfind("Fatal Python error:")
        return text[max(0, fatal - 1200):fatal + 300] if fatal >= 0 else text[-1500:]


def death(proc: subprocess.Popen[bytes]) -> str:
    rc = proc.wait()
    return f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"


@dataclass
class Tally:
    path: str
    plugin: str
    inputs: int = 0
    ok: int = 0
    error: int = 0
    other: int = 0
    skip: int = 0
    crash: int = 0
    hang: int = 0
    seconds: float = 0.0
    note: str = ""
    findings: list[str] = field(default_factory=list)
    others: dict[str, int] = field(default_factory=dict)


def start(spec: Path_, plugin: str, workdir: Path, n: int) -> tuple[Worker, dict[str, object]]:
    w = Worker(spec.name, plugin, workdir, n)
    line = w.read_line(START_TIMEOUT)
    if line is None:
        reason = f"worker did not start ({death(w.proc) if w.proc.poll() is not None else 'timeout'})"
        w.kill()
        return w, {"unavailable": reason + ": " + w.stderr_tail()[-400:]}
    return w, json.loads(line)


def fuzz_target(spec: Path_, plugin: str, seconds: float, seed: int, jobs: int, max_inputs: int,
                save: Path, workdir: Path) -> Tally:
    tally = Tally(spec.name, plugin)
    timeout = timeout_of(spec, plugin)
    t0 = time.monotonic()
    corpus = load_corpus(spec.name)
    w, hello = start(spec, plugin, workdir, 0)
    if "unavailable" in hello:
        tally.note = f"not run: {hello['unavailable']}"
        tally.seconds = time.monotonic() - t0
        return tally
    if spec.per_plugin_corpus:
        corpus = [base64.b64decode(s) for s in cast("list[str]", hello["ready"])]  # the worker's JSON seeds
        for i, c in enumerate(corpus):  # kept, so a reproducer can use the same seeds
            (save / f"seed-{spec.name}-{plugin}-{i}.bin").write_bytes(c)
    if not corpus:
        w.close()
        tally.note = "not run: empty corpus"
        return tally
    workers = [w] + [start(spec, plugin, workdir, n)[0] for n in range(1, jobs)]
    spawned = jobs
    end = t0 + seconds
    nxt = 0
    inputs: dict[int, bytes] = {}

    def finding(kind: str, wk: Worker, how: str) -> None:
        f = save / f"{kind}-{spec.name}-{plugin}-seed{seed}-index{wk.index}.bin"
        f.write_bytes(inputs[wk.index])
        msg = (f"{kind.upper()} path={spec.name} plugin={plugin} seed={seed} index={wk.index} ({how}) "
               f"input={f}\n  reproduce: python -m tests.fuzz --path {spec.name} --plugin {plugin} "
               f"--seed {seed} --index {wk.index}   (or --input {f})")
        tally.findings.append(msg)
        print(msg + "\n  worker stderr: " + wk.stderr_tail()[-600:].replace("\n", "\n    "), flush=True)

    def replace(i: int) -> None:
        nonlocal spawned
        workers[i], hello = start(spec, plugin, workdir, spawned)
        spawned += 1
        if "unavailable" in hello:  # counted: the run stops feeding this target, says why, and fails if gated
            tally.crash += 1
            tally.findings.append(f"CRASH path={spec.name} plugin={plugin}: a replacement worker did not start: "
                                  f"{hello['unavailable']}")
            nonlocal end
            end = 0.0

    idle = list(range(len(workers)))
    busy: set[int] = set()
    while busy or (time.monotonic() < end and nxt < max_inputs):
        while idle and time.monotonic() < end and nxt < max_inputs:
            i = idle.pop()
            data = make_input(spec, plugin, corpus, seed, nxt)
            inputs[nxt] = data
            workers[i].send(nxt, data, timeout)
            busy.add(i)
            nxt += 1
        if not busy:
            break
        wait = max(0.0, min(workers[i].deadline for i in busy) - time.monotonic())
        ready = select.select([workers[i] for i in busy], [], [], wait)[0]
        for wk in ready:
            i = workers.index(wk)
            chunk = os.read(wk.fileno(), 65536)
            wk.buf += chunk
            if chunk and b"\n" not in wk.buf:
                continue  # a partial line
            line = wk.read_line(0.0) if chunk else None
            busy.discard(i)
            tally.inputs += 1
            if line is None:
                tally.crash += 1
                finding("crash", wk, death(wk.proc))
                wk.kill()
                replace(i)
            else:
                r = json.loads(line)
                kind = r["r"]
                setattr(tally, kind, getattr(tally, kind) + 1)
                if kind == "other":
                    key = f"{r['t']}: {r['m'][:120]}"
                    tally.others[key] = tally.others.get(key, 0) + 1
            del inputs[wk.index]
            idle.append(i)
        now = time.monotonic()
        for i in list(busy):
            if workers[i].deadline <= now:
                busy.discard(i)
                tally.inputs += 1
                tally.hang += 1
                finding("hang", workers[i], f"no answer in {timeout:.0f} s")
                workers[i].kill()
                del inputs[workers[i].index]
                replace(i)
                idle.append(i)
    for wk in workers:
        wk.close()
    tally.seconds = time.monotonic() - t0
    return tally


def is_gated(t: Tally, gated: set[str]) -> bool:
    """A gate entry is a path (every plugin) or path:plugin."""
    return t.path in gated or f"{t.path}:{t.plugin}" in gated


def print_table(tallies: list[Tally], gated: set[str]) -> None:
    head = f"{'path':<19} {'plugin':<10} {'inputs':>7} {'ok':>6} {'errors':>7} {'other':>6} {'skip':>5} " \
           f"{'crashes':>7} {'hangs':>5} {'s':>6}  gate"
    print(head)
    print("-" * len(head))
    for t in tallies:
        gate = "yes" if is_gated(t, gated) else "no"
        if t.note:
            print(f"{t.path:<19} {t.plugin:<10} {t.note[:150]}")
            continue
        print(f"{t.path:<19} {t.plugin:<10} {t.inputs:>7} {t.ok:>6} {t.error:>7} {t.other:>6} {t.skip:>5} "
              f"{t.crash:>7} {t.hang:>5} {t.seconds:>6.0f}  {gate}")
        for k, n in sorted(t.others.items(), key=lambda kv: -kv[1])[:3]:
            print(f"    other x{n}: {k}")


def reproduce(args: argparse.Namespace, save: Path, workdir: Path) -> int:
    spec = PATHS[args.path]
    if args.input:
        data = Path(args.input).read_bytes()
    else:
        corpus = load_corpus(spec.name)
        if spec.per_plugin_corpus:
            corpus = [p.read_bytes() for p in sorted(save.glob(f"seed-{spec.name}-{args.plugin}-*.bin"))]
        data = make_input(spec, args.plugin, corpus, args.seed, args.index)
        out = save / f"input-{spec.name}-{args.plugin}-seed{args.seed}-index{args.index}.bin"
        out.write_bytes(data)
        print(f"input: {out} ({len(data)} bytes)")

    def outcome(d: bytes) -> str:
        w, hello = start(spec, args.plugin, workdir, 0)
        if "unavailable" in hello:
            return f"unavailable: {hello['unavailable']}"
        w.send(0, d, timeout_of(spec, args.plugin))
        line = w.read_line(timeout_of(spec, args.plugin))
        if line is None:
            result = f"crash ({death(w.proc)})" if w.proc.poll() is not None else "hang"
            w.kill()
            return result
        w.close()
        r = json.loads(line)
        return f"{r['r']}" + (f" ({r['t']}: {r['m']})" if "t" in r else "")

    first = outcome(data)
    print(f"outcome: {first}")
    if args.minimize and first.startswith(("crash", "hang")):
        verdict = first.split(" ")[0]
        deadline = time.monotonic() + args.seconds
        chunk = max(1, len(data) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            i, shrunk = 0, False
            while i < len(data) and time.monotonic() < deadline:
                cand = data[:i] + data[i + chunk:]
                if outcome(cand).startswith(verdict):
                    data, shrunk = cand, True
                else:
                    i += chunk
            if not shrunk:
                chunk //= 2
        out = save / f"minimized-{spec.name}-{args.plugin}.bin"
        out.write_bytes(data)
        print(f"minimized: {out} ({len(data)} bytes)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("NX_HAL_FUZZ_SEED", "1")))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("NX_HAL_FUZZ_SECONDS", "15")),
                    help="time budget per path and plugin (default 15; the onnx path on a converting "
                    "plugin gets the same time and so fewer inputs)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated paths (default: all)")
    ap.add_argument("--plugins", default="", help="comma-separated plugins (default: every plugin of each path)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("NX_HAL_FUZZ_JOBS", "2")))
    ap.add_argument("--max-inputs", type=int, default=10**9)
    ap.add_argument("--gate", default="", help="paths (or path:plugin) whose crashes or hangs fail the run (exit 1)")
    ap.add_argument("--save", default=os.environ.get("NX_HAL_FUZZ_SAVE", "/tmp/nx_hal-fuzz"),
                    help="where crashing inputs and executable seeds are written")
    ap.add_argument("--path", help="reproduce: the path")
    ap.add_argument("--plugin", help="reproduce: the plugin")
    ap.add_argument("--index", type=int, help="reproduce: the input's index")
    ap.add_argument("--input", help="reproduce: a saved input file instead of --seed/--index")
    ap.add_argument("--minimize", action="store_true", help="reproduce: shrink a crashing input (--seconds)")
    args = ap.parse_args(argv)
    save = Path(args.save)
    save.mkdir(parents=True, exist_ok=True)
    workdir = Path(__import__("tempfile").mkdtemp(prefix="nx_hal-fuzz-"))
    try:
        if args.path:
            return reproduce(args, save, workdir)
        gated = {g for g in args.gate.split(",") if g}
        only = {p for p in args.plugins.split(",") if p}
        tallies = []
        t0 = time.monotonic()
        for name in [p for p in args.paths.split(",") if p]:
            spec = PATHS[name]
            for plugin in spec.plugins:
                if only and plugin not in only:
                    continue
                print(f"# {name} on {plugin} ({args.seconds:.0f} s, seed {args.seed})", flush=True)
                tallies.append(fuzz_target(spec, plugin, args.seconds, args.seed, args.jobs, args.max_inputs,
                                           save, workdir))
        print(f"\nfuzz: seed {args.seed}, {time.monotonic() - t0:.0f} s in all")
        print_table(tallies, gated)
        bad = [t for t in tallies if is_gated(t, gated) and (t.crash or t.hang)]
        for t in tallies:
            for f in t.findings:
                print(f)
        if bad:
            print("fuzz: FAILED: crashes or hangs in gated paths: "
                  + ", ".join(f"{t.path}/{t.plugin}" for t in bad))
            return 1
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
