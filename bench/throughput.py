"""Throughput of Executable.map (issue #32), in one run against its anchors.

Model: resnet18 from torchvision (random weights, 1x3x224x224, exported to
ONNX in a temporary directory), or examples/cnn.onnx's generator model where
torch or torchvision is missing (--small uses it too).
Rows:   npu:cpu with performance=throughput: exe.map(in_flight=N) against
        OpenVINO's own Python AsyncInferQueue with the THROUGHPUT hint on the
        same model, and `benchmark_app -hint throughput` (parsing its
        "Throughput:" line) where its binary is installed;
        tpu:cpu: exe.map(in_flight=N) against its own one-at-a-time loop;
        cpu_pinning: npu:cpu one at a time (latency hint) and map with
        pinning on and off, to choose the plugin's default;
        --ray: nx_hal.ray's pool on a local one-node Ray, npu:cpu with
        performance=throughput, its map with max_in_flight=N requests per
        replica running at once (the pool's default) against the same window
        run one at a time by the actor (actor_options max_concurrency=1: the
        pool before it ran them at once).
All f32. Prints inferences per second (median of repeats, the rows of a
table taking turns) and each row's ratio to its anchor, the table's first. Needs: nx-hal, nx-hal-npu, nx-hal-tpu, openvino, onnx,
numpy (torch + torchvision for resnet18).
Usage: python bench/throughput.py [--seconds S] [--repeats R] [--small] [--ray]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

import nx_hal
from nx_hal.dynamic import DynamicExecutable

Program = nx_hal.Executable | DynamicExecutable


def export_model(out: Path, small: bool) -> tuple[Path, tuple[int, ...], str]:
    """resnet18 as ONNX in ``out``, or the small CNN: path, input shape, name."""
    if not small:
        try:
            import torch
            import torchvision

            net = torchvision.models.resnet18(weights=None).eval()
            path = out / "resnet18.onnx"
            torch.onnx.export(net, (torch.zeros(1, 3, 224, 224),), str(path), opset_version=17,
                              input_names=["x"], dynamo=False)
            return path, (1, 3, 224, 224), "resnet18"
        except Exception as exc:  # no torch, or an export it cannot do here: the small model says why
            print(f"(resnet18 not exported: {exc}; using the small CNN)", file=sys.stderr)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import onnx
    from make_models import cnn  # type: ignore[import-not-found]

    path = out / "cnn.onnx"
    onnx.save(cnn(), str(path))
    return path, tuple(d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim), "cnn"


Run = Callable[[float], float]  # runs for about that many seconds; returns inferences/s


def rates(runs: list[Run], seconds: float, repeats: int) -> list[float]:
    """Median inferences/s of each run, the runs taking turns in each
    repeat: on a shared machine each then sees about the same load, so the
    ratios hold where single figures drift."""
    seen: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, into in zip(runs, seen, strict=True):
            into.append(run(seconds))
    return [statistics.median(r) for r in seen]


def timed(count: Callable[[float], int]) -> Run:
    """A run from a loop that returns how many inferences it did."""
    def run(seconds: float) -> float:
        t0 = time.perf_counter()
        n = count(seconds)
        return n / (time.perf_counter() - t0)
    return run


def map_run(exe: Program, x: object, in_flight: int) -> Run:
    def count(seconds: float) -> int:
        deadline = time.perf_counter() + seconds

        def items() -> Iterator[object]:
            while time.perf_counter() < deadline:
                yield x

        return sum(1 for _ in exe.map(items(), in_flight=in_flight))
    return timed(count)


def loop_run(exe: Program, x: object) -> Run:
    def count(seconds: float) -> int:
        deadline, n = time.perf_counter() + seconds, 0
        while time.perf_counter() < deadline:
            exe(x)
            n += 1
        return n
    return timed(count)


def openvino_queue(path: Path, x: np.ndarray, hint: str) -> tuple[Run, int]:
    """OpenVINO's AsyncInferQueue with its optimal number of requests."""
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": "f32"})
    jobs = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    queue = ov.AsyncInferQueue(compiled, jobs)

    def count(seconds: float) -> int:
        deadline, n = time.perf_counter() + seconds, 0
        while time.perf_counter() < deadline:
            queue.start_async({0: x})
            n += 1
        queue.wait_all()
        return n
    return timed(count), int(jobs)


def benchmark_app(path: Path) -> Run | None:
    """``benchmark_app -hint throughput``'s own figure (its "Throughput:"
    line; it times itself, so its start is not counted), or None without it."""
    exe = shutil.which("benchmark_app") or str(Path(sys.executable).with_name("benchmark_app"))
    if not Path(exe).exists():
        return None

    def run(seconds: float) -> float:
        done = subprocess.run([exe, "-m", str(path), "-d", "CPU", "-hint", "throughput", "-t",
                               str(max(1, round(seconds))), "-infer_precision", "f32"],
                              capture_output=True, text=True, timeout=600)
        found = re.search(r"Throughput:\s+([0-9.]+)\s+FPS", done.stdout)
        return float(found.group(1)) if found else float("nan")
    return run


def table(title: str, anchor: str, rows: list[tuple[str, Run]], args: argparse.Namespace) -> None:
    """Measures the rows and prints them with their ratio to the first."""
    values = rates([run for _, run in rows], args.seconds, args.repeats)
    print(f"\n{title}")
    print(f"  {'path':46s} {'inf/s':>10s} {anchor:>10s}")
    for (name, _), value in zip(rows, values, strict=True):
        print(f"  {name:46s} {value:10.1f} {value / values[0]:10.2f}")


def npu_rows(path: Path, x: np.ndarray, args: argparse.Namespace) -> None:
    dev = nx_hal.device("npu:cpu")
    exe = dev.compile(path, performance="throughput", cache=False)
    queue, jobs = openvino_queue(path, x, "THROUGHPUT")
    rows: list[tuple[str, Run]] = [("OpenVINO AsyncInferQueue (THROUGHPUT hint)", queue)]
    buf = dev.put(x)
    rows += [(f"nx_hal exe.map(in_flight={n})", map_run(exe, buf, n)) for n in (1, 2, 4, 8)]
    bench_app = benchmark_app(path)
    if bench_app is not None:
        rows.append(("benchmark_app -hint throughput", bench_app))
    table(f"npu:cpu, performance=throughput (OpenVINO's optimal requests: {jobs})", "x OV queue", rows, args)


def tpu_rows(path: Path, x: np.ndarray, args: argparse.Namespace) -> None:
    dev = nx_hal.device("tpu:cpu")
    exe = dev.compile(path, cache=False)
    buf = dev.put(x)
    rows: list[tuple[str, Run]] = [("nx_hal exe(buffer), one at a time", loop_run(exe, buf))]
    rows += [(f"nx_hal exe.map(in_flight={n})", map_run(exe, buf, n)) for n in (1, 2, 4, 8)]
    table("tpu:cpu", "x loop", rows, args)


def pinning_rows(path: Path, x: np.ndarray, args: argparse.Namespace) -> None:
    dev = nx_hal.device("npu:cpu")
    buf = dev.put(x)
    for label, perf, in_flight in (("one at a time, latency hint", "latency", 0),
                                   ("map(in_flight=4), throughput hint", "throughput", 4)):
        rows: list[tuple[str, Run]] = []
        for pin in (True, False):
            exe = dev.compile(path, performance=perf, cpu_pinning=pin, cache=False)
            run = map_run(exe, buf, in_flight) if in_flight else loop_run(exe, buf)
            rows.append((f"{label}, {'pinned' if pin else 'not pinned'}", run))
        table(f"npu:cpu, cpu_pinning: {label}", "x pinned", rows, args)


def pool_run(pool: object, x: np.ndarray) -> Run:
    def count(seconds: float) -> int:
        deadline = time.perf_counter() + seconds

        def items() -> Iterator[tuple[np.ndarray]]:
            while time.perf_counter() < deadline:
                yield (x,)

        return sum(1 for _ in pool.imap(items()))  # type: ignore[attr-defined]
    return timed(count)


def ray_rows(path: Path, x: np.ndarray, args: argparse.Namespace) -> None:
    import ray

    import nx_hal.ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    pools = []
    try:
        rows: list[tuple[str, Run]] = []
        for n, concurrency in ((4, 1), (1, None), (2, None), (4, None)):
            options = {"max_concurrency": concurrency} if concurrency else {}
            pool = nx_hal.ray.deploy(path, "npu:cpu", max_in_flight=n, actor_options=options,
                                     performance="throughput")
            pools.append(pool)
            pool(x)  # warm
            label = f"pool max_in_flight={n}" + (", one at a time in the actor" if concurrency else "")
            rows.append((label, pool_run(pool, x)))
        table("nx_hal.ray pool on npu:cpu, performance=throughput, one node", "x 1 at a time", rows, args)
    finally:
        for pool in pools:
            pool.shutdown()
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per row; the median is shown")
    parser.add_argument("--small", action="store_true", help="the small CNN instead of resnet18")
    parser.add_argument("--ray", action="store_true", help="only the Ray pool's rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, shape, name = export_model(Path(tmp), args.small)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        print(f"{name} {list(shape)} f32, {sys.platform}; inferences per second (median of {args.repeats} x "
              f"{args.seconds:g} s)")
        if args.ray:
            ray_rows(path, x, args)
            return
        npu_rows(path, x, args)
        tpu_rows(path, x, args)
        pinning_rows(path, x, args)


if __name__ == "__main__":
    main()
