"""The tpu plugin on an NVIDIA GPU through a CUDA PJRT plugin: correctness
against numpy, run once on a GPU machine (`bench/cuda_check.sh` installs the
wheels and runs this, the conformance suite and `pjrt_overhead.py --backend
cuda`). Prints one line per check and exits 1 if any value is wrong.

    python bench/cuda_check.py [--selector tpu:gpu]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import nx_hal

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "plugins" / "tpu" / "tests" / "programs"

MATMUL = """func.func public @main(%a: tensor<512x256xf32>, %b: tensor<256x128xf32>) -> tensor<512x128xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<512x256xf32>, tensor<256x128xf32>) -> tensor<512x128xf32>
  return %0 : tensor<512x128xf32>
}
"""

ADD_TYPED = """func.func public @main(%a: tensor<3x5x{t}>, %b: tensor<3x5x{t}>) -> tensor<3x5x{t}> {{
  %0 = stablehlo.add %a, %b : tensor<3x5x{t}>
  return %0 : tensor<3x5x{t}>
}}
"""

failures: list[str] = []


def check(name: str, fn: Callable[[], str]) -> None:
    t0 = time.perf_counter()
    try:
        detail = fn()
        print(f"ok    {name:<34} {detail} ({(time.perf_counter() - t0) * 1e3:.1f} ms)")
    except Exception as exc:  # every failure is reported, then the next check runs
        failures.append(name)
        print(f"FAIL  {name:<34} {type(exc).__name__}: {exc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--selector", default="tpu:gpu")
    args = parser.parse_args()
    dev = nx_hal.device(args.selector)
    print(f"device {dev.selector}: {dev}")
    rng = np.random.default_rng(0)

    def matmul() -> str:
        a = rng.standard_normal((512, 256)).astype(np.float32)
        b = rng.standard_normal((256, 128)).astype(np.float32)
        exe = dev.compile(MATMUL, format="stablehlo", cache=False)
        (c,) = exe(a, b)
        err = float(np.max(np.abs(c.to_numpy() - a @ b)))
        # TF32 may be used for f32 dots on the GPU: allow its rounding.
        assert err < 5e-2, err
        return f"max error {err:.2e} vs numpy"

    def mlp() -> str:
        x, w1, b1 = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 5), (5,)))
        w2, b2 = rng.standard_normal((5, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
        exe = dev.compile((PROGRAMS / "mlp.mlir").read_text(), format="stablehlo", cache=False)
        y, h = (o.to_numpy() for o in exe(x, w1, b1, w2, b2))
        h_ref = np.maximum(x @ w1 + b1, 0)
        err = max(float(np.max(np.abs(h - h_ref))), float(np.max(np.abs(y - (h_ref @ w2 + b2)))))
        assert err < 1e-2, err
        return f"two outputs, max error {err:.2e}"

    def dtypes() -> str:
        done = []
        for t, np_t in (("f32", np.float32), ("f16", np.float16), ("f64", np.float64), ("i32", np.int32),
                        ("i64", np.int64), ("i8", np.int8), ("ui8", np.uint8)):
            a = (rng.standard_normal((3, 5)) * 10).astype(np_t)
            b = (rng.standard_normal((3, 5)) * 10).astype(np_t)
            mlir_t = {"ui8": "ui8"}.get(t, t)
            exe = dev.compile(ADD_TYPED.format(t=mlir_t), format="stablehlo", cache=False)
            (c,) = exe(a, b)
            got = c.to_numpy()
            assert got.dtype == np_t, (t, got.dtype)
            assert np.array_equal(got, a + b) or np.allclose(got, a + b, rtol=1e-3), t
            done.append(t)
        return "add exact on " + ",".join(done)

    def buffers() -> str:
        x = rng.standard_normal((64, 64)).astype(np.float32)
        buf = dev.put(x)
        back = buf.to_numpy()
        assert np.array_equal(back, x)
        via_dlpack = np.from_dlpack(buf)
        assert np.array_equal(via_dlpack, x)
        stats = dev.memory_stats()
        return f"put/to_numpy/dlpack exact; in use {stats.bytes_in_use} B"

    def serialize() -> str:
        exe = dev.compile(MATMUL, format="stablehlo", cache=False)
        blob = exe.serialize()
        again = dev.load_executable(blob)
        a = rng.standard_normal((512, 256)).astype(np.float32)
        b = rng.standard_normal((256, 128)).astype(np.float32)
        assert np.array_equal(exe(a, b)[0].to_numpy(), again(a, b)[0].to_numpy())
        return f"{len(blob)} bytes, same results after load"

    def threads() -> str:
        exe = dev.compile(MATMUL, format="stablehlo", cache=False)
        a = rng.standard_normal((512, 256)).astype(np.float32)
        b = rng.standard_normal((256, 128)).astype(np.float32)
        expected = exe(a, b)[0].to_numpy()
        bad: list[str] = []

        def work() -> None:
            bufs = [dev.put(a), dev.put(b)]
            for _ in range(50):
                if not np.array_equal(exe(*bufs)[0].to_numpy(), expected):
                    bad.append("mismatch")

        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not bad, f"{len(bad)} mismatches"
        return "8 threads x 50 runs, identical results"

    def errors() -> str:
        exe = dev.compile(MATMUL, format="stablehlo", cache=False)
        try:
            exe(np.ones((3, 3), np.float32), np.ones((256, 128), np.float32))
        except nx_hal.InvalidArgumentError as exc:
            first = str(exc).splitlines()[0][:80]
        else:
            raise AssertionError("a wrong shape was accepted")
        try:
            dev.compile("func.func @main( this is not mlir", format="stablehlo", cache=False)
        except nx_hal.NxHalError as exc:
            return f"wrong shape: {first!r}; bad program: {type(exc).__name__}"
        raise AssertionError("a malformed program compiled")

    for name, fn in (("matmul 512x256x128 f32", matmul), ("mlp (two outputs)", mlp),
                     ("elementwise dtypes", dtypes), ("buffers and DLPack", buffers),
                     ("serialize / load", serialize), ("concurrent execution", threads),
                     ("errors", errors)):
        check(name, fn)
    print(f"{len(failures)} failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
