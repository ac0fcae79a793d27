"""Does a PJRT CPU plugin compute a donated training step right? (issue #31)

XLA's CPU PJRT plugin from the ``xla-cpu-pjrt`` wheel (0.0.1) computes a
donated step wrongly once a donated parameter's buffer is updated in place,
so the tpu plugin copies instead of donating on CPU devices
(plugins/tpu/src/execute.c). This runs bench/train_step.py's SGD step under
JAX on a given PJRT plugin library, donated and not, against jaxlib's own CPU
client on the same data, and prints the largest loss difference of each.

Measured 2026-11-29: ``xla_cpu_pjrt.so`` 0.0.1, donated 6.5e-2 (not
donated 2.4e-7); ``lammps-jax-pjrt-cpu`` 0.11.2 (XLA's CPU plugin built from
jax 0.11.2), 2.4e-7 both ways.

    python bench/donation_check.py PLUGIN.so [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ["JAX_PLATFORMS"] = "cpu,other"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def loop(device: Any, donate: bool, steps: int) -> list[float]:
    """The loss of each of ``steps`` SGD steps on ``device``."""
    import jax
    import train_step

    xs, ys = train_step._data(steps)
    step = jax.jit(train_step._step_fn(), donate_argnums=(0,) if donate else ())
    params = jax.device_put(train_step._init(512), device)
    losses = []
    for i in range(steps):
        params, loss = step(params, jax.device_put(xs[i], device), jax.device_put(ys[i], device))
        losses.append(float(loss))
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plugin", type=Path, help="the PJRT CPU plugin library to check")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    import jax
    from jax._src import xla_bridge

    # JAX's own registration of a PJRT plugin by path (what a jax_plugins
    # package does), under a name beside jaxlib's "cpu".
    xla_bridge.register_plugin("other", priority=500, library_path=str(args.plugin), options=None)
    reference = loop(jax.devices("cpu")[0], donate=False, steps=args.steps)
    other = jax.devices("other")[0]
    print(f"{args.plugin}: {' '.join(other.client.platform_version.split())}")
    for donate in (False, True):
        got = loop(other, donate=donate, steps=args.steps)
        diff = max(abs(a - b) for a, b in zip(reference, got, strict=True))
        print(f"  {'donated' if donate else 'not donated':12} largest loss difference from jaxlib's CPU: {diff:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
