"""The real-model corpus table (issue #13), in one run: each model of
tests/models/export.py on each CPU device nx_hal offers, against onnxruntime.

Columns: compile cold (an empty compile cache: conversion, the sandbox's
trial compile, the vendor's compile) and cached (the same compile again,
from the cache); the relative error against onnxruntime's outputs (graph
optimizations off: the model's own semantics); latency numpy -> numpy,
median per call, for nx_hal and for onnxruntime (all optimizations, its
default threads) on the same inputs, and their ratio.

It is also the corpus's check in CI (.ci/models): a row whose outputs, from
the cold compile or from the store, differ from onnxruntime's as
``tests/models/test_corpus.py`` would fail them (tests.models.corpus.mismatches)
is marked WRONG and the exit status is 1, as it is for a model not exported
or not compiled. One pass, where CI used to compile every model cold twice.

With --portable, rows ``tpu:cpu/any`` give the same device on the
conversion made for any platform (``platform=None``): the baseline, in the
same run, of the rewrites a CPU gets (depthwise Convs as MatMuls); their
cold column is conversion and compile without any cache.

Needs the corpus exporters (pip install -r tests/models/requirements.txt)
or a cached export (NXHAL_TEST_MODELS). Usage:
python bench/models.py [--repeat N] [--only NAME ...] [--devices npu:cpu tpu:cpu] [--portable]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.models.corpus import (  # noqa: E402
    DEVICES,
    KNOWN_WRONG,
    MAX_RELATIVE_ERROR,
    corpus_dir,
    load_case,
    manifest,
    mismatches,
    relative_error,
)


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def ort_latency(path: Path, names: list[str], inputs: list[np.ndarray], repeat: int) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = dict(zip(names, inputs, strict=True))
    return median_ms(lambda: session.run(None, feeds), repeat)


def measure(device: str, path: Path, inputs: list[np.ndarray], want: list[np.ndarray],
            repeat: int) -> dict[str, Any]:
    import nx_hal

    dev = nx_hal.device(device)
    t = time.perf_counter()
    exe = dev.compile(path)
    cold = time.perf_counter() - t
    problems = mismatches([b.to_numpy() for b in exe(*inputs)], want)
    from nx_hal.compile import memo

    memo.clear()  # cached: from the store, as a fresh process finds it, not this process's executable
    t = time.perf_counter()
    exe = dev.compile(path)
    cached = time.perf_counter() - t
    got = [b.to_numpy() for b in exe(*inputs)]
    # The store's executable is checked too: OpenVINO's CPU has reloaded
    # unidirectional recurrent models wrong (the npu plugin checks what it stores).
    problems += [f"from the store, {p}" for p in mismatches(got, want)]
    latency = median_ms(lambda: [b.to_numpy() for b in exe(*inputs)], repeat)
    return {"cold_s": cold, "cached_ms": cached * 1e3, "error": _error(got, want), "ms": latency,
            "problems": problems}


def _error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """The largest relative error over the outputs; NaN where they cannot be compared."""
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        return float("nan")
    return max((relative_error(g, w) for g, w in zip(got, want, strict=True)), default=0.0)


def measure_portable(device: str, path: Path, inputs: list[np.ndarray], want: list[np.ndarray],
                     repeat: int) -> dict[str, Any]:
    """``measure`` for the conversion made for any platform (platform None),
    compiled as StableHLO: the baseline of the CPU-only rewrites (depthwise
    Convs as MatMuls), in the same run."""
    import nx_hal
    from nx_hal.converter import target_version_of
    from nx_hal.onnx.convert import onnx_to_stablehlo

    dev = nx_hal.device(device)
    t = time.perf_counter()
    module = onnx_to_stablehlo(path.read_bytes(), target_version=target_version_of(dev), bytecode=True,
                               use_cache=False).module
    exe = dev.compile(module, format="stablehlo", cache=False)
    cold = time.perf_counter() - t
    got = [b.to_numpy() for b in exe(*inputs)]
    latency = median_ms(lambda: [b.to_numpy() for b in exe(*inputs)], repeat)
    return {"cold_s": cold, "cached_ms": float("nan"), "error": _error(got, want), "ms": latency,
            "problems": mismatches(got, want)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--devices", nargs="*", default=DEVICES)
    parser.add_argument("--portable", action="store_true",
                        help="also rows 'DEVICE/any': tpu devices on the conversion made for any platform")
    args = parser.parse_args(argv)
    import nx_hal

    folder = corpus_dir()
    models = manifest(folder)["models"]
    with tempfile.TemporaryDirectory(prefix="nxhal-bench-models-") as cache:
        nx_hal.configure({"cache_dir": cache}, no_config=True)  # cold means an empty cache
        devices = [d for d in args.devices if nx_hal.is_available(d)]
        header = f"{'model':22} {'device':12} {'cold s':>7} {'cached ms':>9} {'rel err':>8} " \
                 f"{'nx_hal ms':>9} {'ort ms':>8} {'nx/ort':>6}"
        print(header)
        print("-" * len(header))
        failures = 0
        for name, record in models.items():
            if args.only and name not in args.only:
                continue
            if not record["ok"]:
                print(f"{name:22} not exported: {record.get('error', '')[:100]}")
                failures += 1
                continue
            path = folder / f"{name}.onnx"
            inputs, want = load_case(folder, record, name)
            ort_ms = ort_latency(path, record["inputs"], inputs, args.repeat)
            rows = [(d, measure) for d in devices]
            if args.portable:
                rows += [(d, measure_portable) for d in devices if d.startswith("tpu")]
            for device, measure_row in rows:
                label = device if measure_row is measure else f"{device}/any"
                try:
                    m = measure_row(device, path, inputs, want, args.repeat)
                except nx_hal.NxHalError as exc:
                    print(f"{name:22} {label:12} FAILED: {str(exc).splitlines()[0][:120]}")
                    failures += 1
                    continue
                verdict = ""
                if m["problems"]:
                    known = KNOWN_WRONG.get((name, device))
                    verdict = f"  known wrong: {known}" if known else "  WRONG: " + "; ".join(m["problems"])
                    failures += 0 if known else 1
                print(f"{name:22} {label:12} {m['cold_s']:7.2f} {m['cached_ms']:9.1f} {m['error']:8.1e} "
                      f"{m['ms']:9.3f} {ort_ms:8.3f} {m['ms'] / ort_ms:6.2f}{verdict}", flush=True)
    if failures:
        print(f"{failures} failed: not exported, not compiled or wrong against onnxruntime "
              f"(relative error over {MAX_RELATIVE_ERROR:g}, or outputs of another shape or dtype)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
