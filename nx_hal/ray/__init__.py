"""nx_hal on a Ray cluster: devices listed per node, a pool of replicas, one
per chosen device and pinned to its node, with each node's own fallback, and
a Ray Data predictor.

import ray, nx_hal.ray
ray.init(address="auto")
print(nx_hal.ray.devices())                  # every device on every live node
with nx_hal.ray.deploy("model.onnx") as pool:
    print(pool.explain())                    # where each replica runs, and why
    outputs = pool.map((x,) for x in xs)     # in order; retried when a node is lost

Ray is an optional dependency (``pip install 'nx-hal[ray]'``): ``import
nx_hal`` never imports it.
"""

try:
    import ray as _ray  # noqa: F401 -- only to fail here, with the way out, when ray is missing
except ImportError as exc:  # pragma: no cover -- tested in a child process without ray
    raise ImportError(
        "nx_hal.ray needs Ray, which is not installed: pip install 'nx-hal[ray]'"
    ) from exc

from nx_hal.ray.nodes import NodeReport, devices, explain, survey
from nx_hal.ray.pool import Pool, PoolError, deploy
from nx_hal.ray.predictor import Predictor

__all__ = ["NodeReport", "Pool", "PoolError", "Predictor", "deploy", "devices", "explain", "survey"]
