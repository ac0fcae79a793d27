"""The cluster's devices: one probe task pinned to each live node lists that
node's devices and explains its choice with the node's own config, so the
answer is the node's, not the driver's."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, TypedDict

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from nx_hal.errors import InvalidArgumentError, UnavailableError

# ray's functions that carry no annotations, called through Any: strict mypy
# then passes both with ray installed and without it (where ray is Any anyway).
_ray: Any = ray

__all__ = ["NodeReport", "connect", "devices", "explain", "live_nodes", "pinned", "survey"]


class NodeReport(TypedDict):
    """What one node says: its devices, the device its preference order
    chooses and every choice skipped with its reason (``error``: why the node
    could not be asked, e.g. nx_hal missing there)."""

    node_id: str
    address: str
    devices: list[dict[str, Any]]
    chosen: str | None
    chosen_by: str | None
    skipped: list[dict[str, str]]
    explain: str
    error: str | None


def connect(address: str | None = None) -> None:
    """Joins the Ray cluster at ``address`` unless this process already has
    (``None``: the one Ray finds, ``ray.init(address="auto")``)."""
    if ray.is_initialized():
        return
    if address not in (None, "auto", "local"):
        _check_reachable(address)
    try:
        ray.init(address=address or "auto", log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UnavailableError(f"cannot join the Ray cluster at {address or 'auto'}: {exc}") from None


def _check_reachable(address: str) -> None:
    """Fails at once when nothing listens at ``host:port``: ray.init would
    retry an unreachable address for minutes before saying so."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # not host:port: Ray parses it and says what is wrong
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UnavailableError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def live_nodes() -> list[tuple[str, str]]:
    """``(node_id, address)`` of every live node, in the order Ray lists them."""
    return [(n["NodeID"], n["NodeManagerAddress"]) for n in _ray.nodes() if n.get("Alive")]


def pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
    """A strategy that runs on ``node_id`` or not at all (soft=False): a
    replica elsewhere would use another node's devices under this node's name."""
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def prefer_list(prefer: str | list[str] | None) -> list[str] | None:
    """``"tpu,cpu"`` or ``["tpu", "cpu"]`` as a list of selectors (None: the node's own config)."""
    if prefer is None:
        return None
    items = [p.strip() for p in prefer.split(",")] if isinstance(prefer, str) else list(prefer)
    if not items or not all(isinstance(p, str) and p for p in items):
        raise InvalidArgumentError(f"prefer must be selectors like 'tpu,cpu' or ['tpu', 'cpu'], got {prefer!r}")
    return items


def node_registry(prefer: list[str] | None) -> Any:
    """This process's registry, rebuilt with ``prefer`` when given (the node's
    environment and files still apply: a plugin disabled there stays so)."""
    from nx_hal import api

    return api.configure(prefer=prefer) if prefer is not None else api.registry()


def _probe(prefer: list[str] | None) -> dict[str, Any]:
    from nx_hal import api

    reg = node_registry(prefer)
    report = api.explain()
    return {
        "devices": [d.info() for d in reg.devices()],
        "chosen": report.chosen.selector if report.chosen else None,
        "chosen_by": report.chosen_by,
        "skipped": [{"selector": s.selector, "reason": s.reason} for s in report.skipped],
        "explain": str(report),
        "pid": os.getpid(),
    }


# A task, not an actor: the answer is all it leaves behind. Made here rather
# than with a decorator, which mypy cannot type where ray is not installed.
_probe_task: Any = ray.remote(num_cpus=0, max_retries=0)(_probe)


def survey(address: str | None = None, *, prefer: str | list[str] | None = None,
           timeout: float = 120.0) -> list[NodeReport]:
    """Asks every live node, in parallel, for its devices and its choice."""
    sels = prefer_list(prefer)
    connect(address)
    nodes = live_nodes()
    refs = [_probe_task.options(scheduling_strategy=pinned(node_id)).remote(sels) for node_id, _ in nodes]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    reports: list[NodeReport] = []
    for (node_id, address_), ref in zip(nodes, refs, strict=True):
        base: NodeReport = {"node_id": node_id, "address": address_, "devices": [], "chosen": None,
                            "chosen_by": None, "skipped": [], "explain": "", "error": None}
        if ref not in ready:
            ray.cancel(ref, force=True)
            base["error"] = f"no answer within {timeout:g} s"
        else:
            try:
                found = ray.get(ref)
            except ray.exceptions.RayError as exc:
                base["error"] = _short(exc)
            else:
                base["devices"], base["chosen"], base["chosen_by"] = found["devices"], found["chosen"], found["chosen_by"]
                base["skipped"], base["explain"] = found["skipped"], found["explain"]
                for dev in base["devices"]:
                    dev["node_id"], dev["node_address"] = node_id, address_
        reports.append(base)
    return reports


def devices(address: str | None = None, *, prefer: str | list[str] | None = None) -> list[dict[str, Any]]:
    """Every device on every live node, each ``Device.info()`` with its node's
    ``node_id`` and ``node_address``. ``explain()`` says what each node chose."""
    return [dev for node in survey(address, prefer=prefer) for dev in node["devices"]]


def explain(address: str | None = None, *, prefer: str | list[str] | None = None) -> list[NodeReport]:
    """Per node: the device its preference order chooses and every choice
    skipped with its reason (the cluster's ``nx_hal.explain()``)."""
    return survey(address, prefer=prefer)


def _short(exc: BaseException) -> str:
    """A Ray error's cause in one line, without Ray's remote traceback."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"
