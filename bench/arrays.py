"""Array operations on nx_hal devices against jax.numpy and numpy, in one run.

    python bench/arrays.py [--quick]

Prints three tables:
  1. dispatch: a warm ``x + y`` (f32[4]) and ``x @ y`` (f32[1024, 1024]) per
     call, on each CPU device nx_hal offers, beside jax.numpy's eager dispatch
     (JAX_PLATFORMS=cpu) and numpy; ratios against jax.
  2. first call: what compiling one operation costs per device.
  3. jit: a small MLP written with the namespace, run eagerly and through
     ``xp.jit``, beside the same MLP as an ONNX model through Device.compile
     and ``jax.jit``.
jax is optional (pip install jax); without it its columns say n/a.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# jax on the same kind of device as the nx_hal rows it is compared with: --gpu
# measures tpu:gpu (the CUDA PJRT plugin) beside jax on CUDA.
os.environ.setdefault("JAX_PLATFORMS", "cuda" if "--gpu" in sys.argv else "cpu")

import nx_hal  # noqa: E402
import nx_hal.array_api as xp  # noqa: E402

try:
    import jax
    import jax.numpy as jnp
except ImportError:  # the jax columns say n/a
    jax = None
    jnp = None


def per_call(fn: Callable[[], Any], budget: float) -> float:
    """Median seconds per call over rounds of a timed loop (after a warm-up)."""
    fn()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > budget / 10 or n > 1 << 20:
            break
        n *= 2
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - start) / n)
    return statistics.median(rounds)


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e6:9.2f} us" if seconds < 1e-3 else f"{seconds * 1e3:9.3f} ms"


def ratio(a: float | None, b: float | None) -> str:
    """a / b, or n/a where either is missing."""
    return "n/a" if a is None or b is None else f"{a / b:.2f}x"


def devices(gpu: bool) -> list[Any]:
    out = []
    for selector in (("tpu:gpu",) if gpu else ("tpu:cpu", "npu:cpu")):
        if nx_hal.is_available(selector):
            out.append(nx_hal.device(selector))
    return out


def dispatch_table(devs: list[Any], budget: float) -> None:
    print("## dispatch: warm call, median per call")
    print(f"{'op':<22}{'device':<12}{'nx_hal':>14}{'jax.numpy':>14}{'numpy':>14}{'nx/jax':>9}")
    rng = np.random.default_rng(0)
    cases = [("x + y  f32[4]", (4,), lambda a, b: a + b),
             ("x @ y  f32[1024,1024]", (1024, 1024), lambda a, b: a @ b)]
    for name, shape, op in cases:
        a = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape).astype(np.float32)
        t_np = per_call(lambda: op(a, b), budget)
        t_jax = None
        if jnp is not None:
            ja, jb = jnp.asarray(a), jnp.asarray(b)
            t_jax = per_call(lambda: op(ja, jb).block_until_ready(), budget)
        for dev in devs:
            xa, xb = xp.asarray(a, device=dev), xp.asarray(b, device=dev)
            # An nx_hal call returns when its output is ready (the plugins run synchronously).
            t_nx = per_call(lambda: op(xa, xb), budget)
            print(f"{name:<22}{dev.plugin + ':' + dev.kind:<12}{fmt(t_nx):>14}{fmt(t_jax):>14}{fmt(t_np):>14}"
                  f"{ratio(t_nx, t_jax):>9}")


def first_call_table(devs: list[Any]) -> None:
    print("\n## first call: compiling one operation (a shape not seen before)")
    print(f"{'op':<28}{'device':<12}{'first call':>14}{'warm call':>14}")
    for dev in devs:
        for name, fn in (("sin(x) f32[3,517]", lambda x: xp.sin(x)), ("sum(x, axis=1) f32[3,517]",
                                                                        lambda x: xp.sum(x, axis=1))):
            x = xp.asarray(np.ones((3, 517), np.float32), device=dev)
            start = time.perf_counter()
            fn(x)
            first = time.perf_counter() - start
            warm = per_call(lambda: fn(x), 0.2)
            print(f"{name:<28}{dev.plugin + ':' + dev.kind:<12}{fmt(first):>14}{fmt(warm):>14}")


def mlp_onnx(w1: np.ndarray, w2: np.ndarray, w3: np.ndarray) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(w, name) for w, name in ((w1, "w1"), (w2, "w2"), (w3, "w3"))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("MatMul", ["r2", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def jit_table(devs: list[Any], budget: float) -> None:
    print("\n## jit: MLP 64-256-256-10, batch 32, f32 (median per call)")
    print(f"{'path':<34}{'device':<12}{'per call':>14}{'vs ONNX model':>15}")
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((64, 256)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((256, 256)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((256, 10)).astype(np.float32) * 0.1
    x = rng.standard_normal((32, 64)).astype(np.float32)
    want = np.maximum(np.maximum(x @ w1, 0) @ w2, 0) @ w3
    # XLA on NVIDIA GPUs multiplies f32 matrices in TF32 by default (about 1e-3 relative).
    tol = 2e-2 if any(d.kind == "gpu" for d in devs) else 1e-3
    for dev in devs:
        p1, p2, p3 = (xp.asarray(w, device=dev) for w in (w1, w2, w3))

        def mlp(v: Any) -> Any:
            return xp.maximum(xp.maximum(v @ p1, 0.0) @ p2, 0.0) @ p3

        fast = xp.jit(mlp)
        xv = xp.asarray(x, device=dev)
        for out in (mlp(xv), fast(xv)):
            np.testing.assert_allclose(np.asarray(out), want, rtol=tol, atol=tol / 10)
        t_onnx = None
        try:
            exe = dev.compile(mlp_onnx(w1, w2, w3), "onnx")
        except nx_hal.NxHalError as exc:  # ONNX on a PJRT device needs torch-mlir
            print(f"(the ONNX model on {dev.selector}: {exc.message.splitlines()[0][:100]})")
        else:
            xb = dev.put(x)
            np.testing.assert_allclose(exe(xb)[0].to_numpy(), want, rtol=tol, atol=tol / 10)
            t_onnx = per_call(lambda: exe(xb), budget)
        t_eager = per_call(lambda: mlp(xv), budget)
        t_jit = per_call(lambda: fast(xv), budget)
        for path, t in (("nx_hal.array_api eager (5 ops)", t_eager), ("nx_hal.array_api jit (1 program)", t_jit),
                        ("ONNX model, Device.compile", t_onnx)):
            print(f"{path:<34}{dev.plugin + ':' + dev.kind:<12}{fmt(t):>14}{ratio(t, t_onnx):>15}")
    if jax is not None:
        j1, j2, j3, jx = (jnp.asarray(v) for v in (w1, w2, w3, x))
        jmlp = jax.jit(lambda v: jnp.maximum(jnp.maximum(v @ j1, 0.0) @ j2, 0.0) @ j3)
        t_jax = per_call(lambda: jmlp(jx).block_until_ready(), budget)
        print(f"{'jax.jit':<34}{'jax ' + os.environ['JAX_PLATFORMS']:<12}{fmt(t_jax):>14}{'':>15}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing budget")
    parser.add_argument("--gpu", action="store_true", help="tpu:gpu (CUDA PJRT) against jax on CUDA")
    args = parser.parse_args()
    budget = 0.2 if args.quick else 1.0
    devs = devices(args.gpu)
    if not devs:
        print("no CPU device: install nx-hal-npu or nx-hal-tpu[cpu]")
        return 1
    jax_note = f"jax {jax.__version__}" if jax is not None else "jax not installed"
    print(f"# nx_hal.array_api vs jax.numpy ({jax_note}) and numpy {np.__version__}; one process, one run\n")
    dispatch_table(devs, budget)
    first_call_table(devs)
    jit_table(devs, budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
