"""Host memory that devices can alias: numpy arrays made 64-byte aligned.

XLA CPU (the tpu plugin's CPU devices) reads a host array in place only
when its data is 64-byte aligned. numpy's allocator gives malloc's 16
bytes, so each large input from numpy is copied once per call. Under
:func:`align_numpy`, the arrays numpy makes are 64-byte aligned and go into
executables without that copy (bench/roundtrip.py measures both).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from nx_hal._numpy_alloc import get_handler, handler, set_handler, set_hugepages

__all__ = ["align_numpy", "is_aligned", "ALIGNMENT"]

#: The alignment, in bytes, that :func:`align_numpy` gives and XLA CPU needs to alias.
ALIGNMENT = 64


def _multiarray() -> Any:
    try:
        import numpy._core.multiarray as multiarray
    except ImportError:  # numpy 1.x
        import numpy.core.multiarray as multiarray  # type: ignore[no-redef]
    return multiarray


# numpy's default handler and the aligned handler's capsule, one each for the process.
_handlers: dict[str, object] = {}


def _default_handler() -> object:
    """numpy's own handler: what a new thread's fresh context holds, even
    where this one holds the aligned handler or someone else's."""
    if "default" not in _handlers:
        import threading

        seen: list[object] = []
        reader = threading.Thread(target=lambda: seen.append(get_handler()), name="nx_hal-numpy-default")
        reader.start()
        reader.join()
        _handlers["default"] = seen[0]
    return _handlers["default"]


def _aligned_handler() -> object:
    if "aligned" not in _handlers:
        set_hugepages(bool(_multiarray()._get_madvise_hugepage()))
        _handlers["aligned"] = handler()
    return _handlers["aligned"]


class align_numpy:  # noqa: N801  (used like a function, as torch.set_grad_enabled is)
    """Makes the numpy arrays created from now on 64-byte aligned, or stops it.

    It takes effect at once, in the current thread's context (numpy keeps
    its allocator in a context variable: other threads, and tasks started
    before the call, keep theirs). Used as a context manager, it restores
    the allocator from before on exit::

        nx_hal.align_numpy()            # from here on, in this thread
        with nx_hal.align_numpy():      # only inside the block
            x = np.random.rand(1024, 1024).astype(np.float32)

    Arrays made before keep their memory and are freed by the allocator that
    made them. ``align_numpy(False)`` brings back numpy's default allocator.
    The cost: 64 bytes more per array, and numpy's cache of small blocks is
    not used.
    """

    def __init__(self, enabled: bool = True) -> None:
        self._previous = set_handler(_aligned_handler() if enabled else _default_handler())

    def __enter__(self) -> align_numpy:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        set_handler(self._previous)


def is_aligned(array: object, alignment: int = ALIGNMENT) -> bool:
    """Whether ``array``'s data (anything with numpy's array interface) starts at a multiple of ``alignment``."""
    import numpy as np

    return int(np.asarray(array).__array_interface__["data"][0]) % alignment == 0
