"""A pool of replicas across a Ray cluster: placement (one per node, pinned),
load balancing, in-order pipelined maps, retries when a replica or its node
is lost, and placement again when capacity returns."""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
from ray.exceptions import ObjectLostError, RayActorError, RayError, RayTaskError, WorkerCrashedError

from nx_hal import programs
from nx_hal.errors import InvalidArgumentError, NxHalError
from nx_hal.ray.nodes import connect, live_nodes, pinned, prefer_list
from nx_hal.ray.replica import Replica

__all__ = ["Pool", "PoolError", "deploy"]

# Errors that say the replica (its process or its node) is gone, not that the
# request was bad: the request is retried elsewhere. NodeDiedError is raised
# by Ray as a RayActorError's cause here, so the base classes cover it.
_LOST = (RayActorError, WorkerCrashedError, ObjectLostError)
_END = object()


class PoolError(NxHalError):
    """The pool cannot finish a request: its retries are spent, or no replica
    is left and none could be placed in time."""

    code = "UNAVAILABLE"


@dataclass(eq=False)
class _Replica:
    actor: Any
    node_id: str
    info: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    served: int = 0


@dataclass
class _Stats:
    requests: int = 0
    retried: int = 0
    replicas_lost: int = 0
    replicas_placed: int = 0


class Pool:
    """Replicas of one model across the cluster; build it with ``deploy()``.

    ``pool(*inputs)`` runs once on the least busy replica; ``pool.map(inputs)``
    runs many, at most ``max_in_flight`` requests per replica, running on
    its device at once, and returns the outputs in the order of the inputs.
    A request whose replica is lost is sent again to another (at most ``max_retries`` times per
    request); each input's result is kept once, so nothing is lost or
    duplicated. Thread-compatible, not thread-safe: one caller at a time.

    Inputs are numpy arrays or ObjectRefs (``ray.put(x)``: resolved on the
    replica's node, never sent through the caller). Arrays above Ray's
    inline limit (100 KiB) travel through the object store and reach the
    replica read-only without a copy; outputs come back the same way, as
    read-only views of the object store's copy.
    """

    def __init__(self, program: programs.Program, *, prefer: list[str] | None, replicas: int | str,
                 options: dict[str, Any], max_in_flight: int, max_retries: int,
                 placement_timeout: float, refresh_interval: float, actor_options: dict[str, Any]) -> None:
        self._program_ref = ray.put(program)  # once in the object store, fetched by each replica's node
        self._prefer = prefer
        self._replicas_wanted = replicas
        self._options = options
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.placement_timeout = placement_timeout
        self.refresh_interval = refresh_interval
        self._actor_class: Any = ray.remote(Replica)
        # The pool retries and places again itself: Ray restarting an actor
        # would hide the loss and replay requests behind the pool's back.
        # max_concurrency: the requests a replica holds run at once, each on
        # its own thread of the actor (an executable runs on several threads
        # at once, the GIL released while the device works), as
        # Executable.map keeps them in flight; one at a time they would only
        # queue in the actor.
        self._actor_options = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0,
                               "max_concurrency": max_in_flight, **actor_options}
        self._live: list[_Replica] = []
        self._starting: dict[Any, _Replica] = {}  # describe() ref -> replica being placed
        self._refused: dict[str, str] = {}  # node_id -> why no replica can run there
        self._lost: list[dict[str, Any]] = []
        self._events: list[tuple[float, str]] = []  # (time.monotonic(), what happened): see events()
        self._turn = itertools.count()
        self._last_refresh = 0.0
        self.stats = _Stats()
        self._closed = False

    # -- placement -----------------------------------------------------------------------------

    def _targets(self) -> list[str]:
        """Nodes that should get a new replica now."""
        nodes = [n for n, _ in live_nodes() if n not in self._refused]
        held = [r.node_id for r in [*self._live, *self._starting.values()]]
        if self._replicas_wanted == "all":
            return [n for n in nodes if n not in held]
        missing = int(self._replicas_wanted) - len(held)
        targets: list[str] = []
        counts = {n: held.count(n) for n in nodes}
        for _ in range(max(missing, 0)):
            if not counts:
                break
            node = min(counts, key=lambda n: counts[n])  # spread: the node with fewest replicas
            counts[node] += 1
            targets.append(node)
        return targets

    def refresh(self, wait: float = 0.0) -> int:
        """Starts a replica on each node that should have one and has none (a
        node that joined, a replica lost on a live node); returns how many
        were started. ``wait``: seconds to wait for the replicas starting to
        be ready. ``map`` calls it every ``refresh_interval`` seconds and
        after each loss, without waiting."""
        self._last_refresh = time.monotonic()
        started = 0
        for node_id in self._targets():
            actor = self._actor_class.options(**self._actor_options, scheduling_strategy=pinned(node_id)).remote(
                self._program_ref, self._prefer, self._options)
            self._starting[actor.describe.remote()] = _Replica(actor, node_id)
            self._event(f"placing a replica on node {node_id[:12]}")
            started += 1
        if wait > 0:
            self._wait_started(wait)
        return started

    def _settle(self, timeout: float) -> None:
        """Collects replicas that finished starting (waiting up to ``timeout`` s for the first)."""
        for ref, rep in list(self._starting.items()):
            if time.monotonic() - rep.started > self.placement_timeout:
                # Never scheduled (its node went away unnoticed, or has no room): give
                # up on it, so that its node may be tried again by the next refresh.
                del self._starting[ref]
                self._event(f"replica on node {rep.node_id[:12]} not started within {self.placement_timeout:g} s")
                ray.kill(rep.actor, no_restart=True)
        if not self._starting:
            return
        ready, _ = ray.wait(list(self._starting), num_returns=len(self._starting), timeout=timeout)
        if not ready and timeout > 0:
            ready, _ = ray.wait(list(self._starting), num_returns=1, timeout=0)
        for ref in ready:
            rep = self._starting.pop(ref)
            try:
                info = ray.get(ref)
            except RayError as exc:
                # The node went away while the replica started: try again when capacity returns.
                self._lost.append({"node_id": rep.node_id, "reason": f"lost while starting: {type(exc).__name__}"})
                self._event(f"replica on node {rep.node_id[:12]} lost while starting ({type(exc).__name__})")
                continue
            if info.get("error"):
                self._refused[rep.node_id] = info["error"]
                self._event(f"node {rep.node_id[:12]} cannot run the model: {info['error']}")
                ray.kill(rep.actor)
                continue
            rep.info = info
            self._live.append(rep)
            self._event(f"replica ready on node {rep.node_id[:12]}: {info['selector']}")
            self.stats.replicas_placed += 1

    def _wait_started(self, timeout: float) -> None:
        """Waits until every replica being placed has started or failed."""
        deadline = time.monotonic() + timeout
        while self._starting and time.monotonic() < deadline:
            self._settle(deadline - time.monotonic())

    def _drop(self, rep: _Replica, reason: str) -> None:
        if rep in self._live:
            self._live.remove(rep)
            self.stats.replicas_lost += 1
            self._lost.append({"node_id": rep.node_id, "selector": rep.info.get("selector"), "reason": reason})
            self._event(f"replica on node {rep.node_id[:12]} dropped: {reason}; {len(self._live)} left")
            self._last_refresh = 0.0  # place again at once where the node is still alive
            try:
                ray.kill(rep.actor, no_restart=True)
            except RayError:
                pass  # already gone with its node

    def _ensure_replicas(self) -> None:
        """Some replica is live, or one is placed within ``placement_timeout`` s, or PoolError."""
        deadline = time.monotonic() + self.placement_timeout
        while not self._live:
            if not self._starting:
                self.refresh()
            self._settle(min(1.0, max(deadline - time.monotonic(), 0)))
            if self._live:
                return
            if time.monotonic() >= deadline:
                refused = "".join(f"\n  node {n[:12]}: {why}" for n, why in self._refused.items())
                raise PoolError(f"no replica is running and none could be placed within "
                                f"{self.placement_timeout:g} s{refused or ' (no live node accepted one)'}")
            if not self._starting:
                time.sleep(0.5)  # no node to place on yet: wait for capacity

    # -- requests ------------------------------------------------------------------------------

    def _pick(self) -> _Replica | None:
        """The live replica with the fewest requests in flight (ties taken in turn), if one has room."""
        free = [r for r in self._live if r.in_flight < self.max_in_flight]
        if not free:
            return None
        least = min(r.in_flight for r in free)
        ties = [r for r in free if r.in_flight == least]
        return ties[next(self._turn) % len(ties)]

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        """The model's outputs for one set of inputs, from the least busy
        replica (another one if that replica is lost, as in ``map``)."""
        if self._closed:
            raise PoolError("the pool was shut down")
        # One request: ray.get on its reference, without map's bookkeeping
        # (ray.wait and a second call cost about 0.2 ms here).
        for attempt in range(self.max_retries + 1):
            self._ensure_replicas()
            if time.monotonic() - self._last_refresh > self.refresh_interval:
                self.refresh()
            rep = self._pick() or min(self._live, key=lambda r: r.in_flight)
            rep.in_flight += 1
            self.stats.requests += 1
            try:
                outputs: list[np.ndarray] = ray.get(rep.actor.run.remote(*inputs))
            except RayTaskError as exc:
                raise _request_error(exc, 0) from None
            except _LOST as exc:
                self._drop(rep, f"{type(exc).__name__} during a request")
                last = exc
                if attempt < self.max_retries:
                    self.stats.retried += 1
                continue
            finally:
                rep.in_flight -= 1
            rep.served += 1
            return outputs
        raise PoolError(f"input 0: its replica was lost {self.max_retries + 1} times "
                        f"(max_retries={self.max_retries}); last: {type(last).__name__}") from None

    def map(self, inputs: Iterable[Sequence[Any]]) -> list[list[np.ndarray]]:
        """One list of output arrays per tuple of inputs, in the inputs' order.

        The inputs are read lazily: at most ``max_in_flight`` requests per
        replica are outstanding, so a long iterable is never all in memory.
        """
        return list(self.imap(inputs))

    def imap(self, inputs: Iterable[Sequence[Any]]) -> Iterator[list[np.ndarray]]:
        """``map`` as an iterator: each result as soon as it and all before it are done."""
        if self._closed:
            raise PoolError("the pool was shut down")
        source = iter(inputs)
        held: dict[int, tuple[Any, ...]] = {}  # inputs sent and not yet answered
        retry: list[int] = []  # heap: the oldest first, so the order of results is not held up
        attempts: dict[int, int] = {}
        pending: dict[Any, tuple[int, _Replica]] = {}
        done: dict[int, list[np.ndarray]] = {}
        next_index = next_out = 0
        exhausted = False
        try:
            self._ensure_replicas()
            while True:
                if time.monotonic() - self._last_refresh > self.refresh_interval:
                    self.refresh()
                if self._starting:
                    self._settle(0)
                while (retry or not exhausted) and (rep := self._pick()) is not None:
                    if retry:
                        index = heapq.heappop(retry)
                    else:
                        item = next(source, _END)
                        if item is _END:
                            exhausted = True
                            break
                        held[next_index] = _as_args(item, next_index)
                        index, next_index = next_index, next_index + 1
                    rep.in_flight += 1
                    self.stats.requests += 1
                    pending[rep.actor.run.remote(*held[index])] = (index, rep)
                while next_out in done:
                    yield done.pop(next_out)
                    next_out += 1
                if not pending:
                    if exhausted and not retry:
                        return
                    self._ensure_replicas()  # every replica is lost: place again or give up
                    continue
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.refresh_interval)
                for ref in ready:
                    index, rep = pending.pop(ref)
                    rep.in_flight -= 1
                    try:
                        done[index] = ray.get(ref)
                    except RayTaskError as exc:
                        raise _request_error(exc, index) from None
                    except _LOST as exc:
                        self._drop(rep, f"{type(exc).__name__} during a request")
                        attempts[index] = attempts.get(index, 0) + 1
                        if attempts[index] > self.max_retries:
                            raise PoolError(f"input {index}: its replica was lost {attempts[index]} times "
                                            f"(max_retries={self.max_retries}); last: {type(exc).__name__}: "
                                            f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
                        self.stats.retried += 1
                        heapq.heappush(retry, index)
                        self._event(f"input {index} queued again (attempt {attempts[index] + 1})")
                        continue
                    del held[index]
                    rep.served += 1
        finally:
            for ref in pending:  # an error or an abandoned iterator: the rest is not wanted
                try:
                    ray.cancel(ref)
                except (RayError, ValueError):
                    pass  # its actor is gone, or it already finished
            for _, rep in pending.values():
                rep.in_flight = 0

    # -- reports and lifetime ------------------------------------------------------------------

    def _event(self, text: str) -> None:
        self._events.append((time.monotonic(), text))
        del self._events[:-1000]  # the latest only: a long-lived pool must not grow without end

    def events(self) -> list[tuple[float, str]]:
        """What the pool did about placement and faults, as ``(time.monotonic(), text)``, oldest first."""
        return list(self._events)

    def replicas(self) -> list[dict[str, Any]]:
        """Each live replica: node, address, process, device selector, the
        preference it was chosen for, the devices skipped on its node with
        reasons, and how many requests it has answered."""
        return [{**r.info, "served": r.served} for r in self._live]

    def explain(self) -> str:
        """Where each replica runs and why, which nodes have none and why, and the replicas lost."""
        lines = [f"pool of {len(self._live)} replica(s)"
                 + (f", {len(self._starting)} starting" if self._starting else "")]
        for r in self._live:
            i = r.info
            lines.append(f"  node {r.node_id[:12]} ({i['node_address']}): {i['selector']} ({i['device']}) "
                         f"for '{i['chosen_by']}'")
            for s in i["skipped"]:
                lines.append(f"    skipped {s['selector']}: {s['reason']}")
        for node_id, why in self._refused.items():
            lines.append(f"  node {node_id[:12]}: no replica: {why}")
        for lost in self._lost:
            lines.append(f"  lost a replica on node {lost['node_id'][:12]}: {lost['reason']}")
        return "\n".join(lines)

    def shutdown(self) -> None:
        """Stops every replica (idempotent)."""
        self._closed = True
        for rep in [*self._live, *self._starting.values()]:
            try:
                ray.kill(rep.actor, no_restart=True)
            except RayError:
                pass
        self._live.clear()
        self._starting.clear()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"<nx_hal.ray.Pool {len(self._live)} replica(s) on {len({r.node_id for r in self._live})} node(s)>"


def _as_args(item: Any, index: int) -> tuple[Any, ...]:
    if isinstance(item, np.ndarray) or not isinstance(item, Sequence) or isinstance(item, (str, bytes)):
        raise InvalidArgumentError(f"input {index}: expected a tuple of input arrays, got {type(item).__name__} "
                                   "(for one input per request, pass (x,) tuples)")
    return tuple(item)


def _request_error(exc: RayTaskError, index: int) -> Exception:
    """The replica's own error for a bad request, named by its input index;
    Ray's remote traceback is left out."""
    cause = exc.cause
    if isinstance(cause, NxHalError):
        return type(cause)(f"input {index}: {cause.message}", plugin=cause.plugin)
    return PoolError(f"input {index}: the replica failed: {type(cause).__name__}: {cause}")


def deploy(model: Any, prefer: str | list[str] | None = None, replicas: int | str = "all", *,
           format: str | None = None, max_in_flight: int = 2, max_retries: int = 3,
           placement_timeout: float = 60.0, refresh_interval: float = 2.0,
           actor_options: dict[str, Any] | None = None, address: str | None = None,
           **compile_options: Any) -> Pool:
    """Places the model on the cluster and returns the pool once its replicas have started.

    ``model``: a path, bytes or an onnx.ModelProto, read here and sent to the
    nodes through the object store (a node need not have the file).
    ``prefer``: selectors in order (``"tpu,npu,cpu"``); None: each node's own
    config. Each replica compiles with its node's fallback and compile cache.
    ``replicas``: ``"all"``, one replica per live node, or a number spread
    over the nodes. ``actor_options`` go to Ray (default ``num_cpus=0``: a
    replica holds a device, not a CPU slot). Compile options go to the device.
    """
    if replicas != "all" and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1):
        raise InvalidArgumentError(f"replicas must be 'all' or a whole number >= 1, got {replicas!r}")
    for name, value in (("max_in_flight", max_in_flight), ("max_retries", max_retries + 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{name} must be a whole number >= {1 if name == 'max_in_flight' else 0}")
    program = programs.load(model, format, ())
    sels = prefer_list(prefer)
    connect(address)
    pool = Pool(program, prefer=sels, replicas=replicas, options=compile_options, max_in_flight=max_in_flight,
                max_retries=max_retries, placement_timeout=placement_timeout, refresh_interval=refresh_interval,
                actor_options=dict(actor_options or {}))
    pool.refresh(wait=placement_timeout)
    if not pool._live:
        report = pool.explain()
        pool.shutdown()
        raise PoolError(f"no node could run the model\n{report}")
    return pool
