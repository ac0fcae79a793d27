"""One replica: a model compiled on its node's chosen device, run on request.
Lives in a Ray actor pinned to that node (see pool.py)."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import ray

from nx_hal.errors import NxHalError
from nx_hal.programs import Program
from nx_hal.ray.nodes import node_registry

__all__ = ["Replica", "compile_here"]


def compile_here(program: Program, prefer: list[str] | None, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Compiles ``program`` on this node's first device, in its preference
    order, that can run it; returns the executable and where it runs and why."""
    from nx_hal import api
    from nx_hal.selection import FallbackWarning

    node_registry(prefer)
    with warnings.catch_warnings():
        # The fallback is reported by explain(), not as a warning in a worker's log.
        warnings.simplefilter("ignore", FallbackWarning)
        exe, report = api.compile_anywhere(program, **options)
    device = exe.device
    info = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_address": _node_address(),
        "pid": os.getpid(),
        "selector": device.selector,
        "device": device.name,
        "plugin": device.plugin,
        "kind": device.kind,
        "chosen_by": report.chosen_by,
        "skipped": [{"selector": s.selector, "reason": s.reason} for s in report.skipped],
        "inputs": [s.to_dict() for s in exe.inputs],
        "outputs": [s.to_dict() for s in exe.outputs],
        "error": None,
    }
    return exe, info


def _node_address() -> str:
    util: Any = ray.util  # get_node_ip_address has no annotations
    return str(util.get_node_ip_address())


class Replica:
    """The actor's class. A compile that fails does not kill the actor: it is
    kept as ``describe()["error"]``, so the pool can say why a node has no
    replica instead of reporting a dead actor."""

    def __init__(self, program: Program, prefer: list[str] | None, options: dict[str, Any]) -> None:
        self._exe: Any = None
        try:
            self._exe, self._info = compile_here(program, prefer, options)
        except NxHalError as exc:
            self._info = {"node_id": ray.get_runtime_context().get_node_id(),
                          "node_address": _node_address(), "pid": os.getpid(), "error": str(exc)}

    def describe(self) -> dict[str, Any]:
        """Where this replica runs, on which device and why (or why it could not compile)."""
        return self._info

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """The model's outputs for ``inputs`` (numpy arrays; Ray hands large
        ones over read-only from its object store, without a copy)."""
        return [out.to_numpy() for out in self._exe(*inputs)]

    def run_many(self, batch: list[tuple[Any, ...]]) -> list[list[np.ndarray]]:
        """``run`` for each tuple of inputs, in one request (fewer round trips for small models)."""
        return [self.run(*inputs) for inputs in batch]
