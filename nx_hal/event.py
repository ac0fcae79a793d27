"""Events: completion of asynchronous transfers and executions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, final

from nx_hal.errors import NxHalError
from nx_hal.native import NULL, check, error_from_status, ffi, lib

__all__ = ["Event"]

# Callbacks registered with plugins, kept alive until they fire.
_pending: dict[int, tuple[Any, Callable[[NxHalError | None], None], Any]] = {}
_pending_lock = threading.Lock()
_next_id = 0


@ffi.def_extern()  # type: ignore[untyped-decorator]
def nxhal_py_on_ready(status: Any, user_data: Any) -> None:
    key = int(ffi.cast("intptr_t", user_data))
    with _pending_lock:
        api, callback, plugin = _pending.pop(key)
    error = None if status == NULL else error_from_status(api, status, plugin)
    callback(error)


@final
class Event:
    """An asynchronous operation's completion. ``keep`` holds what must stay
    alive until it completes (host destination arrays, input buffers)."""

    __slots__ = ("_api", "_handle", "_plugin", "_keep", "__weakref__")

    def __init__(self, api: Any, handle: Any, plugin: str, keep: object = None) -> None:
        self._api = api
        self._handle = handle
        self._plugin = plugin
        self._keep = keep

    def __del__(self) -> None:
        if self._handle != NULL:
            # A pending event's work still completes: keep what it writes to.
            if not self.ready():
                self.wait()
            lib.nxhal_call_event_destroy(self._api, self._handle)
            self._handle = NULL

    def ready(self) -> bool:
        """Whether the work has finished (without waiting)."""
        out = ffi.new("int32_t*")
        check(self._api, lib.nxhal_call_event_is_ready(self._api, self._handle, out), self._plugin)
        return bool(out[0])

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until done; raises the operation's error, or
        DeadlineExceededError when ``timeout`` seconds pass first."""
        ns = -1 if timeout is None else max(0, int(timeout * 1e9))
        check(self._api, lib.nxhal_call_event_await(self._api, self._handle, ns), self._plugin)

    def add_done_callback(self, callback: Callable[[NxHalError | None], None]) -> None:
        """Calls ``callback(error_or_None)`` once when done, possibly on another thread."""
        global _next_id
        with _pending_lock:
            _next_id += 1
            key = _next_id
            _pending[key] = (self._api, callback, self._plugin)
        status = lib.nxhal_call_event_on_ready(
            self._api, self._handle, lib.nxhal_py_on_ready, ffi.cast("void*", key)
        )
        if status != NULL:
            with _pending_lock:
                _pending.pop(key, None)
            check(self._api, status, self._plugin)
