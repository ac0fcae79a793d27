"""Inputs that ran a child past its deadline or out of memory, remembered.

A program that takes a child 90 s and is then killed takes 90 s again on
every retry, and one that exhausts the memory limit does so again too. So
the outcome is kept in the store beside the section's verdicts, with the
limit it hit: the same input under the same or a smaller limit fails at
once with the same error, and a larger limit (or no memory limit) tries
again. ``nx-hal cache clear --section SECTION`` forgets them.
"""

from __future__ import annotations

from typing import Final

from nx_hal.errors import DeadlineExceededError, NxHalError, ResourceExhaustedError
from nx_hal.store.store import Store, digest

__all__ = ["remember", "known"]

_TIMED_OUT: Final = "timed-out"
_OUT_OF_MEMORY: Final = "out-of-memory"


def _key(what: str) -> str:
    return digest("limit outcome 1", what)


def remember(store: Store | None, section: str, what: str, error: NxHalError, limit: float) -> None:
    """Keeps that ``what`` (a verdict's digest) hit ``limit``: seconds for a
    DeadlineExceededError, bytes (0: none) for a ResourceExhaustedError."""
    if store is None or not isinstance(error, (DeadlineExceededError, ResourceExhaustedError)):
        return
    reason = _TIMED_OUT if isinstance(error, DeadlineExceededError) else _OUT_OF_MEMORY
    store.put_json(section, _key(what), {"reason": reason, "limit": limit, "message": error.message})


def _covered(reason: str, recorded: float, now: float) -> bool:
    if reason == _TIMED_OUT:
        return now <= recorded
    # Out of memory under `recorded` bytes: any limit at most that fails too;
    # without a limit (0) the child may get what it needs.
    return now != 0 and (recorded == 0 or now <= recorded)


def known(store: Store | None, section: str, what: str, *, timeout: float, memory_limit: int,
          plugin: str | None = None) -> NxHalError | None:
    """The error to raise at once when ``what`` hit a limit no larger than
    today's, else None."""
    info = store.get_json(section, _key(what)) if store is not None else None
    if info is None or info.get("reason") not in (_TIMED_OUT, _OUT_OF_MEMORY):
        return None
    reason, recorded = str(info["reason"]), info.get("limit")
    if not isinstance(recorded, (int, float)):
        return None
    now = timeout if reason == _TIMED_OUT else memory_limit
    if not _covered(reason, float(recorded), float(now)):
        return None
    message = (f"{info.get('message', '')} (remembered from an earlier try: this input fails at once under "
               "the same limit; raise the limit, or `nx-hal cache clear` to try again)")
    if reason == _TIMED_OUT:
        return DeadlineExceededError(message, plugin=plugin)
    return ResourceExhaustedError(message, plugin=plugin)
