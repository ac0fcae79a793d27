"""What a Ray cluster adds per request: nx_hal.ray's pool against a local
nx_hal executable and against a plain Ray actor running onnxruntime, in one
run, on a local cluster of 1, then 2, then 3 nodes (ray.cluster_utils, one
CPU each; nodes are added to the same cluster and the pool places a replica
on each new one).

Latency: sequential requests, one at a time (median, microseconds).
Throughput: a map of --requests inputs, at most 2 requests in flight per
replica (the pool's default; the plain actors get the same window).

All nodes of a local cluster share this machine's cores: on 2 cores the table
shows Ray's overhead per request, not a speed-up from more nodes.
Model: examples/mlp.onnx (1x64 -> 1x10). Needs: nx-hal[ray], onnxruntime.
Usage: python bench/ray_overhead.py [--nodes 3] [--requests 300] [--latency 100]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MODEL = Path(__file__).resolve().parents[1] / "examples" / "mlp.onnx"
STORE = 80 * 1024 * 1024


class OrtActor:
    """The baseline on Ray: onnxruntime in an actor, nothing of nx_hal."""

    def __init__(self, model: bytes) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def run(self, x: np.ndarray) -> list[np.ndarray]:
        return list(self.session.run(None, {"image": x}))


def latency_us(call: Callable[[np.ndarray], Any], xs: list[np.ndarray]) -> float:
    for x in xs[:30]:
        call(x)  # warm-up
    times = []
    for x in xs:
        start = time.perf_counter()
        call(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def throughput(run_all: Callable[[list[np.ndarray]], Any], xs: list[np.ndarray]) -> float:
    start = time.perf_counter()
    run_all(xs)
    return len(xs) / (time.perf_counter() - start)


def windowed(actors: list[Any], xs: list[np.ndarray], per_actor: int = 2) -> list[Any]:
    """Round-robin over ``actors``, at most ``per_actor`` requests in flight each, results in order."""
    import ray

    results: list[Any] = [None] * len(xs)
    pending: dict[Any, int] = {}
    for i, x in enumerate(xs):
        if len(pending) >= per_actor * len(actors):
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                results[pending.pop(ref)] = ray.get(ref)
        pending[actors[i % len(actors)].run.remote(x)] = i
    for ref, i in pending.items():
        results[i] = ray.get(ref)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, help="up to this many nodes (default 3)")
    parser.add_argument("--requests", type=int, default=300, help="inputs per throughput map (default 300)")
    parser.add_argument("--latency", type=int, default=100, help="sequential requests for latency (default 100)")
    args = parser.parse_args()

    import onnxruntime as ort
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import nx_hal
    import nx_hal.ray

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 64), dtype=np.float32) for _ in range(max(args.requests, args.latency))]
    lat_xs, thr_xs = xs[:args.latency], xs[:args.requests]
    rows: list[tuple[str, str, float, float]] = []

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nx_hal.FallbackWarning)
        exe, _ = nx_hal.compile_anywhere(str(MODEL))
    local = f"nx_hal executable, {exe.device.selector}"
    rows.append(("local", local, latency_us(lambda x: exe(x)[0].to_numpy(), lat_xs),
                 throughput(lambda batch: [exe(x)[0].to_numpy() for x in batch], thr_xs)))
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    rows.append(("local", "onnxruntime session", latency_us(lambda x: session.run(None, {"image": x}), lat_xs),
                 throughput(lambda batch: [session.run(None, {"image": x}) for x in batch], thr_xs)))

    started = time.perf_counter()
    cluster: Any = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": STORE, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        model = MODEL.read_bytes()
        ort_actor = ray.remote(OrtActor)
        actors: list[Any] = []
        pool = nx_hal.ray.deploy(MODEL)
        for n in range(1, args.nodes + 1):
            if n > 1:
                cluster.add_node(num_cpus=1, object_store_memory=STORE)
                cluster.wait_for_nodes()
                pool.refresh(wait=120)
            placed = {r["node_id"] for r in pool.replicas()}
            for node_id in placed - {a[0] for a in actors}:
                strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
                actors.append((node_id, ort_actor.options(num_cpus=0, scheduling_strategy=strategy).remote(model)))
            handles = [a for _, a in actors]
            ray.get([a.run.remote(xs[0]) for a in handles])  # every actor up
            # Ray starts spare workers for a while after a placement: on 2 cores
            # they would be measured as the first row's overhead.
            time.sleep(3)
            where = f"{n} node{'s' if n > 1 else ''}"
            rows.append((where, f"nx_hal.ray pool, {len(placed)} replica(s)",
                         latency_us(lambda x: pool(x), lat_xs),
                         throughput(lambda batch: pool.map((x,) for x in batch), thr_xs)))
            rows.append((where, f"Ray actor + onnxruntime, {len(handles)} actor(s)",
                         latency_us(lambda x: ray.get(handles[0].run.remote(x)), lat_xs),
                         throughput(lambda batch: windowed(handles, batch), thr_xs)))
        pool.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()

    print(f"nx_hal.ray overhead: examples/mlp.onnx (1x64 -> 1x10), ray {ray.__version__}, "
          f"{os.cpu_count()} CPU core(s) on this machine")
    print(f"{'WHERE':<8} {'PATH':<44} {'LATENCY p50 (us)':>17} {'THROUGHPUT (req/s)':>19}")
    for where, path, lat, thr in rows:
        print(f"{where:<8} {path:<44} {lat:>17.0f} {thr:>19.0f}")
    print(f"(latency: median of {len(lat_xs)} sequential requests; throughput: {len(thr_xs)} requests, "
          f"2 in flight per replica; cluster part {time.perf_counter() - started:.0f} s)")
    if (os.cpu_count() or 1) <= 2:
        print(f"note: every node of this local cluster shares the same {os.cpu_count()} core(s): the rows show "
              "the overhead Ray adds per request, not the speed-up more nodes would give on real machines.")
    else:
        print("note: every node of a local cluster shares this machine's cores: more nodes add Ray's overhead, "
              "not compute.")


if __name__ == "__main__":
    main()
