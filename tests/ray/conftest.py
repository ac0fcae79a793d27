"""One small Ray cluster for the tests of a module: three nodes of one CPU
each, the third with the npu plugin disabled (NX_HAL_DISABLE in its raylet's
environment, which its workers inherit), so fallback differs per node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

MODEL = Path(__file__).resolve().parents[2] / "examples" / "mlp.onnx"
_STORE = 80 * 1024 * 1024  # bytes of object store per node: the arrays here are small
# Ray notices a lost node after health_check_period_ms * failure_threshold:
# 0.5 s * 3 here instead of its default minute-scale wait.
_SYSTEM = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_initial_delay_ms": 0}


class ClusterInfo:
    """The cluster and what the tests need to know about it."""

    def __init__(self, cluster: Any, plain: list[str], no_npu: str) -> None:
        self.cluster = cluster
        self.plain_nodes = plain  # node ids with every plugin
        self.no_npu_node = no_npu  # node id where the npu plugin is disabled

    def node(self, node_id: str) -> Any:
        """The cluster_utils node object for ``node_id``."""
        return next(n for n in self.cluster.list_all_nodes() if n.node_id == node_id)

    def wait_dead(self, node_id: str, timeout: float = 60.0) -> None:
        """Returns once Ray lists ``node_id`` as dead."""
        import time

        import ray

        nodes: Any = ray.nodes  # unannotated in ray
        deadline = time.monotonic() + timeout
        while any(n["NodeID"] == node_id and n["Alive"] for n in nodes()):
            assert time.monotonic() < deadline, f"node {node_id} still alive after {timeout} s"
            time.sleep(0.1)

    def add_worker(self) -> str:
        """Adds a worker node like the plain ones; returns its id."""
        node = self.cluster.add_node(num_cpus=1, object_store_memory=_STORE)
        self.cluster.wait_for_nodes()
        return str(node.node_id)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[ClusterInfo]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster: Any = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": _STORE, "include_dashboard": False, "_system_config": _SYSTEM})
    try:
        second = cluster.add_node(num_cpus=1, object_store_memory=_STORE)
        third = cluster.add_node(num_cpus=1, object_store_memory=_STORE, env_vars={"NX_HAL_DISABLE": "npu"})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        assert cluster.head_node is not None
        head = cluster.head_node.node_id
        yield ClusterInfo(cluster, [head, second.node_id], third.node_id)
    finally:
        ray.shutdown()
        cluster.shutdown()


def reference(xs: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs for each input from onnxruntime: the oracle."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return [session.run(None, {"image": x})[0] for x in xs]


def inputs(n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` different inputs of the model's shape (1, 64)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 64), dtype=np.float32) for _ in range(n)]
