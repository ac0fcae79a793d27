"""The cost of one call through nx_hal's Python API into a plugin, next to
the same call made from C through the loader, in one run.

    python bench/dispatch.py [--plugin PATH.so] [--iterations N]

Without --plugin it builds the test fixture plugin (host memory), whose own
work is negligible, so the numbers are dispatch cost. Prints a table with
the Python overhead over C per call.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def per_call_ns(fn: Callable[[], object], iterations: int, repeats: int = 5) -> float:
    """Best of ``repeats`` runs of ``iterations`` calls, in ns per call."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / iterations)
    return best


def c_baseline(plugin: Path, iterations: int, work: Path) -> dict[str, float]:
    from tests.cbuild import build_program, loader_sources

    exe = build_program("dispatch_driver", [ROOT / "bench" / "dispatch_driver.c", *loader_sources()],
                        work, extra_flags=["-O2"])
    best: dict[str, float] = {}
    for _ in range(5):
        out = subprocess.run([str(exe), str(plugin), str(iterations)], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            name, value = line.split()
            best[name] = min(best.get(name, float("inf")), float(value))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plugin", type=Path, help="plugin library (default: the host-memory test fixture)")
    parser.add_argument("--iterations", type=int, default=200_000)
    args = parser.parse_args()

    from nx_hal.config import load_config
    from nx_hal.native import ffi, lib
    from nx_hal.plugin import PluginSpec
    from nx_hal.registry import Registry

    work = Path(tempfile.mkdtemp(prefix="nxhal-bench-"))
    atexit.register(shutil.rmtree, work, True)
    plugin = args.plugin
    if plugin is None:
        from tests.cbuild import build_fixture

        plugin = build_fixture("hostmem", work)
    reg = Registry(load_config(no_config=True))
    rec = reg.load(reg.add(PluginSpec(name="bench", library=plugin)))
    if rec.state != "loaded":
        print(f"plugin failed to load: {rec.code}: {rec.reason}")
        return 1
    dev = rec.devices[0]
    n = args.iterations

    api = dev._live()  # connected now: the raw calls below use its handle
    handle = dev.handle
    stats = ffi.new("nxhal_memory_stats_t*")
    stats.struct_size = ffi.sizeof("nxhal_memory_stats_t")
    raw = per_call_ns(lambda: lib.nxhal_call_device_memory_stats(api, handle, stats), n)
    query = per_call_ns(dev.memory_stats, n)
    x = np.arange(4, dtype=np.float32)
    round_trip = per_call_ns(lambda: dev.put(x).to_numpy(), n // 4)
    c = c_baseline(plugin, n, work)

    rows = [
        ("memory_stats (trivial query)", 1, c["memory_stats"], query, raw),
        ("put + to_numpy + free, f32[4]", 3, c["round_trip_f32x4"], round_trip, None),
    ]
    print(f"plugin: {plugin} ({dev.name})")
    print(f"{'operation':<32} {'plugin calls':>12} {'C ns':>7} {'Python ns':>10} {'overhead ns':>12} "
          f"{'per call':>9} {'raw cffi ns':>12}")
    for name, calls, c_ns, py_ns, raw_ns in rows:
        raw_s = f"{raw_ns:12.0f}" if raw_ns is not None else f"{'-':>12}"
        print(f"{name:<32} {calls:12d} {c_ns:7.0f} {py_ns:10.0f} {py_ns - c_ns:12.0f} "
              f"{(py_ns - c_ns) / calls:9.0f} {raw_s}")
    print("target: under 1000 ns of Python overhead per plugin call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
