"""A training loop on a device: an MLP classifier on MNIST-sized synthetic data
(784 features, 10 classes), its SGD step written in JAX with the parameters
donated (``jax.jit(step, donate_argnums=0)``), lowered once and compiled on
an nx_hal device, then run for N steps with the parameters never leaving the
device. Beside it, JAX's own loop over the same step, data and initial
parameters, in the same run; and the nx_hal loop without donation.

Prints a table: steps/s of each loop and the ratio to JAX's, the largest
difference between the loss curves, and the resident memory (RSS) growth
after warm-up. Donation is checked too: a donated step's new parameters live
where the old ones were.

A device donates in place where its attribute ``donation`` says "in place":
on a CPU, an XLA CPU plugin of StableHLO 1.20 or newer, for example
``NX_HAL_PLUGINS__TPU__BACKEND_PATHS=cpu=$(python -c 'import
lammps_jax_pjrt_cpu as p; print(p.PLUGIN_PATH)')``; the default one copies
(the table's first line says which). What donation saves in memory is
measured by tests/test_donation.py with one 64 MiB parameter: this MLP's
1.6 MiB are lost in the allocator's reuse.

    python bench/train_step.py [--steps 1000] [--device tpu:cpu] [--hidden 512] [--jax-on PLUGIN.so]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

BATCH = 128
FEATURES, CLASSES = 784, 10


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _data(steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Batches of a fixed random linear teacher's labels: learnable, so the loss falls."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    xs = rng.standard_normal((min(steps, 64), BATCH, FEATURES)).astype(np.float32)
    labels = np.argmax(xs @ teacher, axis=-1)
    ys = np.eye(CLASSES, dtype=np.float32)[labels]
    return xs, ys


def _step_fn(lr: float = 0.05) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        logits = h @ params["w2"] + params["b2"]
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    def step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    return step


def _init(hidden: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"b1": np.zeros(hidden, np.float32), "b2": np.zeros(CLASSES, np.float32),
            "w1": (rng.standard_normal((FEATURES, hidden)) * np.sqrt(2 / FEATURES)).astype(np.float32),
            "w2": (rng.standard_normal((hidden, CLASSES)) * np.sqrt(2 / hidden)).astype(np.float32)}


def jax_loop(params0: dict[str, np.ndarray], xs: np.ndarray, ys: np.ndarray, steps: int,
             donate: bool, plugin: str | None = None) -> tuple[list[float], float, float]:
    """(losses, seconds, RSS growth after warm-up in MiB) of JAX's own loop,
    on jaxlib's CPU or on the PJRT plugin library ``plugin``."""
    import jax

    device = None
    if plugin is not None:
        from jax._src import xla_bridge

        # JAX's own registration of a PJRT plugin by path (what a jax_plugins package does).
        xla_bridge.register_plugin("other", priority=500, library_path=plugin, options=None)
        device = jax.devices("other")[0]
    step = jax.jit(_step_fn(), donate_argnums=(0,) if donate else ())
    params = jax.device_put(params0, device)
    losses = []
    rss0 = 0.0
    start = 0.0
    for i in range(steps):
        if i == 10:  # after the compile and the allocator's warm-up
            jax.block_until_ready(params)
            rss0, start = _rss_mib(), time.perf_counter()
        params, loss = step(params, xs[i % len(xs)], ys[i % len(ys)])
        losses.append(loss)
    jax.block_until_ready(params)
    seconds = time.perf_counter() - start
    return [float(v) for v in losses], seconds, _rss_mib() - rss0


def nx_loop(params0: dict[str, np.ndarray], xs: np.ndarray, ys: np.ndarray, steps: int, selector: str,
            donate: bool) -> tuple[list[float], float, float, bool]:
    """(losses, seconds, RSS growth after warm-up, whether the new parameters
    took the donated ones' memory) of the same step compiled by nx_hal."""
    import jax

    import nx_hal

    lowered = jax.jit(_step_fn(), donate_argnums=(0,) if donate else ()).lower(params0, xs[0], ys[0])
    dev = nx_hal.device(selector)
    exe = dev.compile(lowered)
    names = sorted(params0)  # the flattened leaves: a dict's keys in order
    params = [dev.put(params0[k]) for k in names]
    before = np.from_dlpack(params[0]).ctypes.data  # a view, dropped before the run
    losses = []
    in_place = False
    rss0 = 0.0
    start = 0.0
    for i in range(steps):
        if i == 10:
            rss0, start = _rss_mib(), time.perf_counter()
        *params, loss = exe(*params, xs[i % len(xs)], ys[i % len(ys)])
        if i == 0:
            in_place = np.from_dlpack(params[0]).ctypes.data == before
        losses.append(loss)
    values = [float(v.to_numpy()) for v in losses]  # read once at the end, as JAX's loop is
    seconds = time.perf_counter() - start
    return values, seconds, _rss_mib() - rss0, in_place


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--device", default="tpu:cpu")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--jax-on", metavar="PLUGIN.so",
                        help="run JAX's loop on this PJRT plugin library rather than jaxlib's CPU: "
                             "the same XLA as a tpu:cpu over it, so the loss curves compare one XLA")
    args = parser.parse_args()
    if args.steps <= 10:
        parser.error("--steps must be over 10 (the first 10 are warm-up)")
    xs, ys = _data(args.steps)
    params0 = _init(args.hidden)
    timed = args.steps - 10

    if args.jax_on:
        os.environ["JAX_PLATFORMS"] = "cpu,other"
    jl, js, jm = jax_loop(params0, xs, ys, args.steps, donate=True, plugin=args.jax_on)
    nl, ns, nm, moved = nx_loop(params0, xs, ys, args.steps, args.device, donate=True)
    ul, us, um, umoved = nx_loop(params0, xs, ys, args.steps, args.device, donate=False)
    diff = max(abs(a - b) for a, b in zip(jl, nl, strict=True))
    import nx_hal

    print(f"MLP {FEATURES}-{args.hidden}-{CLASSES}, batch {BATCH}, {args.steps} SGD steps "
          f"(timed: the last {timed}); loss {jl[0]:.4f} -> {jl[-1]:.4f}; {args.device} donation: "
          f"{nx_hal.device(args.device).attributes.get('donation')}")
    print()
    print("| loop | steps/s | vs jax.jit | RSS growth after warm-up | new params in the old memory |")
    print("|---|---|---|---|---|")
    print(f"| jax.jit, donate_argnums=0 | {timed / js:.0f} | 1.00 | {jm:+.1f} MiB | |")
    print(f"| nx_hal {args.device}, donated | {timed / ns:.0f} | {js / ns:.2f} | {nm:+.1f} MiB | {moved} |")
    print(f"| nx_hal {args.device}, not donated | {timed / us:.0f} | {js / us:.2f} | {um:+.1f} MiB | {umoved} |")
    print()
    rel = max(abs(a - b) / abs(a) for a, b in zip(jl, nl, strict=True))
    print(f"largest loss difference from JAX's loop: {diff:.2e}, relative {rel:.2e} (donated); "
          f"{max(abs(a - b) for a, b in zip(jl, ul, strict=True)):.2e} (not donated); "
          f"donated against not donated: {max(abs(a - b) for a, b in zip(nl, ul, strict=True)):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
