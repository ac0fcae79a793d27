"""What nx_hal costs over PJRT, in one run: a tiny add (f32[4]) and a
1024x1024 matmul on the `tpu` plugin's XLA CPU device (or --selector),
execute-only and full round trip, plus cold compile against a warm compile
served from nx_hal's compile cache.

    python bench/pjrt_overhead.py [--iterations N] [--backend cpu|cuda] [--selector SEL]

Columns (µs per call, best of 5 batches; they never gate tests):

  raw C    bench/pjrt_capi_driver.c, built here, straight on the PJRT C API.
           execute: execute on already-placed inputs, await completion,
           free the outputs. roundtrip: BufferFromHostBuffer of each input
           (kImmutableOnlyDuringCall: copied during the call), execute,
           device-to-host of output 0 into a host array that is filled on
           return -- on a CPU buffer with a dense layout by awaiting its
           ready event and a memcpy from PJRT_Buffer_UnsafePointer, else
           PJRT_Buffer_ToHostBuffer -- then free every buffer. The line
           below the table gives the round trip when device-to-host always
           goes through PJRT_Buffer_ToHostBuffer (XLA CPU runs that copy on
           a worker thread: tens of µs of hand-off for 16 bytes).
  nx_hal   the same through nx_hal's Python API and the tpu plugin.
           execute: ``exe(*buffers)`` (awaits completion, returns owned
           output buffers; runs in nx_hal._fastpath's tp_call, and the
           outputs are freed by its tp_dealloc). roundtrip: ``exe(dev.put(x), dev.put(x))[0]
           .to_numpy(copy=True)`` -- put copies (complete on return), and
           ``copy=True`` fills a new numpy array, the same work as raw C
           (plain ``to_numpy()`` is a read-only view: bench/roundtrip.py
           measures that path against the call on device buffers).
  ratio    nx_hal / raw C.
  jax.jit  execute: ``fn(a, b).block_until_ready()`` on inputs already on
           the device. roundtrip: ``np.asarray(fn(x, x))`` from numpy. Note
           that on CPU jax copies nothing here: aligned numpy inputs are
           aliased (kImmutableZeroCopy) and ``np.asarray`` is a read-only
           view of the output's memory, so its round trip does less work
           than the other two columns, which copy in and out.
  nx/jax   nx_hal / jax.jit.

Needs nx-hal and nx-hal-tpu installed, and xla-cpu-pjrt (its header builds
the C baseline).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

ADD = """module @add {
  func.func public @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %y : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""

MATMUL = """module @matmul {
  func.func public @main(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    return %0 : tensor<1024x1024xf32>
  }
}
"""

CASES: dict[str, tuple[str, tuple[int, ...]]] = {
    "add f32[4]": (ADD, (4,)),
    "matmul 1024x1024": (MATMUL, (1024, 1024)),
}


def best_us(fn: Callable[[], object], iterations: int, repeats: int = 5) -> float:
    """Best of ``repeats`` batches of ``iterations`` calls, in µs per call."""
    fn()  # warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - t0) / iterations * 1e6)
    return best


def pjrt_cpu_plugin() -> Path:
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("xla-cpu-pjrt is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def pjrt_library(backend: str) -> Path:
    """The PJRT plugin the raw C baseline runs on: the same one nx_hal's tpu
    plugin finds for ``backend`` ("cpu", or "cuda" for a CUDA PJRT plugin)."""
    if backend == "cpu":
        return pjrt_cpu_plugin() / "xla_cpu_pjrt.so"
    from nx_hal_tpu.backends import find_backends

    found = [b.path for b in find_backends() if b.label.startswith("cuda")]
    if not found:
        sys.exit("no CUDA PJRT plugin is installed (pip install 'nx-hal-tpu[cuda12]')")
    return found[0]


def raw_c(work: Path, library: Path, program: str, shape: tuple[int, ...],
          iterations: int) -> dict[str, float]:
    pkg = pjrt_cpu_plugin()  # the PJRT C API header
    exe = work / "pjrt_capi_driver"
    if not exe.exists():
        subprocess.run(["cc", "-std=gnu99", "-O2", f"-I{pkg / 'include'}",
                        str(ROOT / "bench" / "pjrt_capi_driver.c"), "-o", str(exe), "-ldl"],
                       check=True)
    src = work / f"prog{len(shape)}_{shape[0]}.mlir"
    src.write_text(program)
    out = subprocess.run([str(exe), str(library), str(src), "2",
                          *map(str, shape), "--", str(iterations)],
                         capture_output=True, text=True, check=True)
    return {k: float(v) for k, v in (line.split() for line in out.stdout.splitlines())}


def through_nx_hal(dev: Any, program: str, shape: tuple[int, ...],
                   iterations: int) -> dict[str, float]:
    x = np.ones(shape, np.float32)
    exe = dev.compile(program, format="stablehlo", cache=False)
    bufs = [dev.put(x), dev.put(x)]
    return {
        "execute_us": best_us(lambda: exe(*bufs), iterations),
        "roundtrip_us": best_us(lambda: exe(dev.put(x), dev.put(x))[0].to_numpy(copy=True), iterations),
    }


def through_jax(program_shape: tuple[int, ...], matmul: bool, iterations: int,
                backend: str) -> dict[str, float] | None:
    # Compare on the same device; on CPU, skip GPU probing.
    os.environ.setdefault("JAX_PLATFORMS", backend)
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    cpu = jax.devices(backend)[0]
    fn = jax.jit((lambda a, b: a @ b) if matmul else (lambda a, b: a + b))
    x = np.ones(program_shape, np.float32)
    a = jax.device_put(jnp.asarray(x), cpu)
    b = jax.device_put(jnp.asarray(x), cpu)
    fn(a, b).block_until_ready()
    return {
        "execute_us": best_us(lambda: fn(a, b).block_until_ready(), iterations),
        "roundtrip_us": best_us(lambda: np.asarray(fn(x, x)), iterations),
    }


def compile_times(dev: Any, cache_dir: Path) -> tuple[float, float]:
    """Cold compile (cache empty) and warm compile (cache hit), in ms."""
    program = MATMUL.replace("@matmul", "@matmul_cache_probe")
    t0 = time.perf_counter()
    dev.compile(program, format="stablehlo")
    cold = (time.perf_counter() - t0) * 1e3
    warm = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dev.compile(program, format="stablehlo")
        warm = min(warm, (time.perf_counter() - t0) * 1e3)
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--matmul-iterations", type=int, default=20)
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                        help="PJRT backend: XLA CPU, or a CUDA PJRT plugin on a GPU machine")
    parser.add_argument("--selector", default=None, help="nx_hal device (default tpu:cpu / tpu:gpu)")
    args = parser.parse_args()
    selector = args.selector or ("tpu:cpu" if args.backend == "cpu" else "tpu:gpu")
    library = pjrt_library(args.backend)

    import nx_hal

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        nx_hal.configure({"cache_dir": str(work / "cache")}, no_config=True)
        dev = nx_hal.device(selector)
        rows = []
        for name, (program, shape) in CASES.items():
            n = args.iterations if shape == (4,) else args.matmul_iterations
            c = raw_c(work, library, program, shape, n)
            py = through_nx_hal(dev, program, shape, n)
            jx = through_jax(shape, shape != (4,), n, args.backend)
            rows.append((name, c, py, jx))
        cold, warm = compile_times(dev, work / "cache")

    print(f"device: {dev.selector} ({dev.name}); raw C on {library.name}; times in µs per call, best of 5")
    header = f"{'case':<18} {'mode':<10} {'raw C':>10} {'nx_hal':>10} {'ratio':>7} {'jax.jit':>10} {'nx/jax':>7}"
    print(header)
    print("-" * len(header))
    for name, c, py, jx in rows:
        for mode in ("execute", "roundtrip"):
            key = f"{mode}_us"
            j = f"{jx[key]:10.1f}" if jx else f"{'-':>10}"
            jr = f"{py[key] / jx[key]:7.2f}" if jx else f"{'-':>7}"
            print(f"{name:<18} {mode:<10} {c[key]:10.1f} {py[key]:10.1f} "
                  f"{py[key] / c[key]:7.2f} {j} {jr}")
    for name, c, _py, _jx in rows:
        if "roundtrip_tohost_us" in c:
            print(f"{name}: raw C roundtrip with PJRT_Buffer_ToHostBuffer: "
                  f"{c['roundtrip_tohost_us']:.1f}")
    print(f"compile (matmul): cold {cold:.1f} ms, warm from cache {warm:.2f} ms, "
          f"speed-up {cold / warm:.1f}x")
    print("targets: execute ratio <= 2.0 (add), <= 1.05 (matmul); nx/jax <= 0.5 (add); "
          "cache speed-up >= 10x")


if __name__ == "__main__":
    main()
