"""What verifying StableHLO before the backend's parser costs compile (nx_hal.onnx.verify).

    python bench/verify_overhead.py [--repeat 20]

For a small and a large program, as text and as a portable artifact, on
tpu:cpu, with the compile cache off:

- compile unchecked: Device.compile with the verification skipped (the baseline,
  measured in the same run);
- compile, cached verdict: Device.compile as shipped, the verdict in memory;
- check, memory / disk: the gate alone with the verdict in memory (digest +
  lookup), and with only the on-disk verdict (a new process);
- check, cold: a program never seen, parsed and verified in the already
  running converter child; the child's start is shown once, apart.

Medians (large programs: fewer compiles, interleaved with the baseline); "added"
is the check with a cached verdict, the cost each compile of a known program pays.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import nx_hal
from nx_hal.onnx import convert, verify

PROGRAMS = Path(__file__).resolve().parent.parent / "plugins" / "tpu" / "tests" / "programs"


def large_text(layers: int = 24, width: int = 512) -> bytes:
    """An MLP-like chain of ``layers`` dot + add + tanh sharing one width x width
    f32 weight: many ops, and a large dense constant (many bytes)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((width, width)).astype(np.float32)
    hexed = "0x" + weight.tobytes().hex().upper()
    t = f"tensor<1x{width}xf32>"
    w = f"tensor<{width}x{width}xf32>"
    lines = [f"func.func @main(%x: {t}) -> {t} {{",
             f'  %w = stablehlo.constant dense<"{hexed}"> : {w}',
             f"  %h0 = stablehlo.tanh %x : {t}"]
    for i in range(layers):
        lines += [
            f"  %d{i} = stablehlo.dot_general %h{i}, %w, contracting_dims = [1] x [0] : ({t}, {w}) -> {t}",
            f"  %a{i} = stablehlo.add %d{i}, %h{i} : {t}",
            f"  %h{i + 1} = stablehlo.tanh %a{i} : {t}",
        ]
    lines += [f"  return %h{layers} : {t}", "}"]
    return "\n".join(lines).encode()


def median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def variant(data: bytes, salt: int) -> bytes:
    """The same text program with different bytes (a trailing comment), for cold runs."""
    return data + f"\n// {salt}\n".encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    dev = nx_hal.device("tpu:cpu")
    target = convert.target_version_of(dev) or "1.0.0"
    small = (PROGRAMS / "add.mlir").read_bytes()
    large = large_text()
    started = time.perf_counter()
    convert.shared_worker().run(small, {}, None, False, 120, kind="verify")
    child_start = time.perf_counter() - started
    cases = {
        "small text": small,
        "small artifact": convert.reserialize_stablehlo(small, target).module,
        "large text": large,
        "large artifact": convert.reserialize_stablehlo(large, target).module,
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="nxhal-bench-verify-") as tmp:
        cache_dir = Path(tmp)
        for salt, (name, data) in enumerate(cases.items()):
            # Cold: a program never seen (text gets a fresh comment; an artifact's bytes
            # cannot change, so its cold runs forget the verdict instead).
            cold = []
            for i in range(max(3, args.repeat // 4)):
                probe = variant(data, salt * 1000 + i) if name.endswith("text") else data
                verify.clear_memory()
                start = time.perf_counter()
                verify.stablehlo(probe, cache_dir=None)
                cold.append(time.perf_counter() - start)
            verify.clear_memory()
            verify.stablehlo(data, cache_dir=cache_dir)  # writes the disk verdict

            def from_disk() -> None:
                verify.clear_memory()
                verify.stablehlo(data, cache_dir=cache_dir)

            disk = median_us(from_disk, args.repeat)
            memory = median_us(lambda: verify.check_stablehlo(data, cache_dir=cache_dir), args.repeat * 10)
            # XLA takes seconds over a large program: fewer compiles, interleaved
            # so that both columns see the same machine load.
            compiles = args.repeat if len(data) < 100_000 else max(3, args.repeat // 5)
            base_times, checked_times = [], []
            for _ in range(compiles):
                base_times.append(median_us(lambda: dev.compile(data, "stablehlo", cache=False, verify="off"), 1))
                checked_times.append(median_us(lambda: dev.compile(data, "stablehlo", cache=False), 1))
            base, checked = statistics.median(base_times), statistics.median(checked_times)
            rows.append((name, len(data), base, checked, memory, disk, statistics.median(cold) * 1e6))

    print(f"tpu:cpu, torch-mlir {convert._torch_mlir_version()}, medians of {args.repeat} "
          f"(memory check: {args.repeat * 10}); converter child start: {child_start * 1e3:.0f} ms (once)")
    header = ("program", "bytes", "compile unchecked", "compile verified", "added: check (memory)",
              "check (disk)", "check cold")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for name, size, base, checked, memory, disk, cold_us in rows:
        print(f"{name} | {size:,} | {base / 1e3:.2f} ms | {checked / 1e3:.2f} ms | {memory:.1f} µs | "
              f"{disk:.0f} µs | {cold_us / 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
