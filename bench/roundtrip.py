"""Round trips from numpy to numpy, in one run beside the call on device
buffers and beside the vendor's own C path (issue #14).

    python bench/roundtrip.py [--rounds N] [--quick] [--skip-tpu] [--skip-npu]

Cases (µs per call, median of interleaved rounds; they never gate tests):

  tpu:cpu matmul 1024x1024 f32 (XLA CPU through the tpu plugin)
    raw C execute      bench/pjrt_capi_driver.c: execute on placed inputs
    raw C roundtrip    the same driver: BufferFromHostBuffer (copy), execute,
                       device-to-host of the output, free
    nx_hal device      ``exe(a, b)`` on Buffers already on the device
    nx_hal numpy       ``exe(x, x)[0].to_numpy()`` from numpy to numpy (an
                       array passed twice is put once)
    nx_hal numpy x, z  ``exe(x, z)[0].to_numpy()``: two arrays, each copied
                       into staging (see al64)
    nx_hal numpy copy  ``exe(x, x)[0].to_numpy(copy=True)`` where to_numpy
                       takes ``copy`` (a writable array the caller owns)
    nx_hal old path    ``exe(dev.put(x), dev.put(x))[0].to_numpy(copy=True)``:
                       what ``exe(x, x)[0].to_numpy()`` did before issue #14
                       (inputs and output copied), in the same run
    nx_hal numpy al64  ``exe(y, w)[0].to_numpy()``, two arrays made under
                       ``nx_hal.align_numpy()``: 64-byte aligned, which XLA
                       CPU aliases. numpy's own allocator gives 16-byte
                       alignment: those inputs are copied into the plugin's
                       warm staging blocks (from 64 KiB), so ``nx_hal numpy``
                       pays one memcpy per distinct input over this
  npu:cpu tiny model y[1,64] = x[1,64] · W[64,64] (OpenVINO CPU, f32)
    OpenVINO C API     bench/npu_capi_driver.c: infer + output tensor data
    nx_hal device      ``exe(xbuf)``
    nx_hal numpy       ``exe(x)[0].to_numpy()``
    nx_hal numpy copy  ``exe(x)[0].to_numpy(copy=True)``
    nx_hal old path    ``exe(dev.put(x))[0].to_numpy(copy=True)`` (as before)

Targets: tpu numpy / nx_hal device <= 1.05; npu numpy / C API <= 1.5.
jax is compared where installed (``np.asarray(jax.jit(f)(x, x))``); without
it the column says so.
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import npu_overhead  # noqa: E402  (a sibling script)
import pjrt_overhead  # noqa: E402


def per_call_us(fn: Callable[[], object], iters: int) -> float:
    # Three calls first: the previous path leaves the allocators (glibc's
    # mmap threshold, the staging pool) in its own state.
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def median_rounds(paths: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Interleaves the paths round after round, so drift on a shared machine
    hits all alike, in a new order each round, so no path always follows the
    same one (a path leaves glibc's and PJRT's allocators in its own state)."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths)
    shuffle = random.Random(14)
    for _ in range(rounds):
        shuffle.shuffle(order)
        if "raw C roundtrip" in order:  # read off the raw C execute run
            order.remove("raw C roundtrip")
            order.insert(order.index("raw C execute") + 1, "raw C roundtrip")
        for name in order:
            samples[name].append(paths[name]())
    return {name: statistics.median(v) for name, v in samples.items()}


def has_copy_kw(buf: Any) -> bool:
    return "copy" in inspect.signature(buf.to_numpy).parameters


def jax_roundtrip(iters: int) -> Callable[[], float] | None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
    except ImportError:
        return None
    fn = jax.jit(lambda a, b: a @ b)
    x = np.ones((1024, 1024), np.float32)
    return lambda: per_call_us(lambda: np.asarray(fn(x, x)), iters)


def tpu_case(nx_hal: Any, work: Path, rounds: int, iters: int) -> dict[str, float]:
    dev = nx_hal.device("tpu:cpu")
    library = pjrt_overhead.pjrt_library("cpu")
    program, shape = pjrt_overhead.MATMUL, (1024, 1024)
    x = np.ones(shape, np.float32)
    exe = dev.compile(program, format="stablehlo", cache=False)
    z = x.copy()  # a second array: exe(x, x) puts x once, exe(x, z) copies both
    a, b = dev.put(x), dev.put(x)
    if hasattr(nx_hal, "align_numpy"):
        with nx_hal.align_numpy():  # made 64-byte aligned by nx_hal's numpy allocator
            y, w = x.copy(), x.copy()
    else:  # an older nx_hal: aligned by hand
        raw = [np.empty(x.nbytes + 64, np.uint8) for _ in range(2)]
        y, w = (r[(-r.ctypes.data) % 64:][:x.nbytes].view(np.float32).reshape(shape) for r in raw)
        y[...], w[...] = x, x
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), x @ x, rtol=1e-5)
    raw: dict[str, float] = {}

    def raw_execute() -> float:  # one driver run per round gives both raw C numbers
        raw.update(pjrt_overhead.raw_c(work, library, program, shape, iters))
        return raw["execute_us"]

    paths: dict[str, Callable[[], float]] = {
        "raw C execute": raw_execute,
        "raw C roundtrip": lambda: raw["roundtrip_us"],
        "nx_hal device": lambda: per_call_us(lambda: exe(a, b), iters),
        "nx_hal numpy": lambda: per_call_us(lambda: exe(x, x)[0].to_numpy(), iters),
        "nx_hal numpy x, z": lambda: per_call_us(lambda: exe(x, z)[0].to_numpy(), iters),
    }
    if has_copy_kw(a):
        paths["nx_hal numpy copy"] = lambda: per_call_us(lambda: exe(x, x)[0].to_numpy(copy=True), iters)
        paths["nx_hal old path"] = lambda: per_call_us(
            lambda: exe(dev.put(x), dev.put(x))[0].to_numpy(copy=True), iters)
    paths["nx_hal numpy al64"] = lambda: per_call_us(lambda: exe(y, w)[0].to_numpy(), iters)
    jx = jax_roundtrip(iters)
    if jx is not None:
        paths["jax numpy"] = jx
    return median_rounds(paths, rounds)


def npu_case(nx_hal: Any, work: Path, rounds: int, iters: int) -> dict[str, float]:
    from onnx import numpy_helper

    dev = nx_hal.device("npu:cpu")
    driver = npu_overhead.build_capi_driver(work)
    m, k, n = 1, 64, 64
    model = npu_overhead.matmul_model(m, k, n)
    path = work / "tiny.onnx"
    path.write_bytes(model.SerializeToString())
    x = (np.arange(m * k) % 7 * 0.1).astype(np.float32).reshape(m, k)
    exe = dev.compile(model)
    xbuf = dev.put(x)
    expected = x @ numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(exe(x)[0].to_numpy(), expected, rtol=1e-4, atol=1e-4)
    paths: dict[str, Callable[[], float]] = {
        "OpenVINO C API": lambda: npu_overhead.capi_us(driver, path, m, k, iters),
        "nx_hal device": lambda: per_call_us(lambda: exe(xbuf), iters),
        "nx_hal numpy": lambda: per_call_us(lambda: exe(x)[0].to_numpy(), iters),
    }
    if has_copy_kw(xbuf):
        paths["nx_hal numpy copy"] = lambda: per_call_us(lambda: exe(x)[0].to_numpy(copy=True), iters)
        paths["nx_hal old path"] = lambda: per_call_us(lambda: exe(dev.put(x))[0].to_numpy(copy=True), iters)
    return median_rounds(paths, rounds)


def table(title: str, times: dict[str, float], base: str, extra: str | None = None) -> None:
    print(f"\n{title}")
    cols = f"  {'path':22s} {'us':>10s} {'x ' + base:>22s}"
    if extra:
        cols += f" {'x ' + extra:>18s}"
    print(cols)
    for name, us in times.items():
        line = f"  {name:22s} {us:10.1f} {us / times[base]:22.3f}"
        if extra:
            line += f" {us / times[extra]:18.3f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-tpu", action="store_true")
    parser.add_argument("--skip-npu", action="store_true")
    args = parser.parse_args()
    scale = 0.25 if args.quick else 1.0

    import nx_hal

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        nx_hal.configure({"cache_dir": str(work / "cache")}, no_config=True)
        if not args.skip_tpu:
            tpu = tpu_case(nx_hal, work, args.rounds, max(5, int(40 * scale)))
            table("tpu:cpu matmul 1024x1024 f32, µs per call (median)", tpu, "nx_hal device", "raw C roundtrip")
            if "jax numpy" not in tpu:
                print("  (jax is not installed: no jax column)")
            print(f"  target: nx_hal numpy / nx_hal device <= 1.05: "
                  f"{tpu['nx_hal numpy'] / tpu['nx_hal device']:.3f} "
                  f"(two arrays: {tpu['nx_hal numpy x, z'] / tpu['nx_hal device']:.3f}; "
                  f"two under align_numpy: {tpu['nx_hal numpy al64'] / tpu['nx_hal device']:.3f})")
        if not args.skip_npu:
            npu = npu_case(nx_hal, work, args.rounds, max(200, int(20000 * scale)))
            table("npu:cpu tiny 1x64·64x64 f32, µs per call (median)", npu, "OpenVINO C API")
            print(f"  target: nx_hal numpy / OpenVINO C API <= 1.5: "
                  f"{npu['nx_hal numpy'] / npu['OpenVINO C API']:.3f}")


if __name__ == "__main__":
    main()
