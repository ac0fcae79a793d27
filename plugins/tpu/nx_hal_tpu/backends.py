"""Finding installed PJRT backend libraries.

This module finds the libraries that installed distributions ship (from
their records of installed files, never by an import search that would look
in the working directory; ``TPU_LIBRARY_PATH`` names libtpu explicitly) and hands them over as the
``backend_paths`` option, a ``;``-joined list of ``label=path`` entries, in
the order the C side tries them (libtpu, the CUDA plugins, XLA CPU). Each
label states the backend's family, which decides the PJRT create options it
gets: ``family:name`` (``gpu:cuda12``), or just the family when the name is
the family (``tpu``, ``cpu``). The C
library, used without Python, looks in the same places of the site-packages
it is installed in (src/backend_discovery.c); when neither finds one, both
say what to install (:data:`INSTALL_HINT`).
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Final, Literal

__all__ = ["Backend", "Family", "INSTALL_HINT", "find_backends", "backend_paths"]

#: What to install when no PJRT backend is found; the C library's reason
#: (TPU_INSTALL_HINT in src/internal.h) says the same words.
INSTALL_HINT: Final = (
    "install one with pip install 'nx-hal-tpu[cpu]' (XLA CPU), "
    "pip install 'nx-hal-tpu[tpu]' (Cloud TPU) or pip install 'nx-hal-tpu[cuda12]' "
    "/ 'nx-hal-tpu[cuda13]' (NVIDIA GPU, CUDA 12 / 13)"
)


#: The families of PJRT create options (``cpu_device_count`` for ``cpu``,
#: the ``gpu_*`` options for ``gpu``); the C side reads them from the label.
Family = Literal["cpu", "gpu", "tpu"]


class Backend:
    """One PJRT plugin library found on this machine."""

    __slots__ = ("family", "label", "path")

    def __init__(self, label: str, path: Path, family: Family) -> None:
        self.label = label
        self.path = path
        self.family: Family = family

    @property
    def option_label(self) -> str:
        """The label as ``backend_paths`` writes it, stating the family."""
        return self.label if self.label == self.family else f"{self.family}:{self.label}"

    def __repr__(self) -> str:
        return f"Backend({self.label!r}, {str(self.path)!r}, {self.family!r})"


#: The distributions that ship each backend, and the file in them.
_LIBTPU: Final = (("libtpu", "libtpu-nightly"), "libtpu/libtpu.so")
_CUDA: Final = {
    major: ((f"jax-cuda{major}-pjrt",),
            (f"jax_plugins/xla_cuda{major}/xla_cuda_plugin.so",
             f"jax_plugins/xla_cuda{major}/pjrt_c_api_gpu_plugin.so"))
    for major in (12, 13)
}
_XLA_CPU: Final = (("xla-cpu-pjrt",), "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so")


def _search_path() -> list[str]:
    """``sys.path`` without the working directory: ``python -c`` and ``python -m``
    put it first, and a library there is not one the user installed (a
    ``libtpu/libtpu.so`` or a ``libtpu-*.dist-info`` planted in a shared
    directory would otherwise be loaded)."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    return [p for p in sys.path if p not in ("", ".") and os.path.realpath(p) != cwd]


def _installed_file(distributions: tuple[str, ...], *relative: str) -> Path | None:
    """The first of ``relative`` that an installed distribution of these names
    ships and that exists, from the distribution's own record (what pip
    installed), not from an import search."""
    path = _search_path()
    for name in distributions:
        for dist in metadata.distributions(name=name, path=path):
            listed = {str(f).replace(os.sep, "/") for f in (dist.files or ())}
            for rel in relative:
                if rel in listed:
                    located = Path(str(dist.locate_file(rel)))
                    if located.is_file():
                        return located
            break  # the first distribution of a name on the path is the one Python imports
    return None


def _libtpu() -> Path | None:
    # The explicit override: a path the user named.
    env = os.environ.get("TPU_LIBRARY_PATH")
    if env and Path(env).is_file():
        return Path(env)
    return _installed_file(_LIBTPU[0], _LIBTPU[1])


def _cuda(major: int) -> Path | None:
    names, files = _CUDA[major]
    return _installed_file(names, *files)


def _xla_cpu() -> Path | None:
    return _installed_file(_XLA_CPU[0], _XLA_CPU[1])


def find_backends() -> list[Backend]:
    """Installed PJRT backends, in the order they are tried."""
    found: list[Backend] = []
    candidates: tuple[tuple[str, Family, Path | None], ...] = (
        ("tpu", "tpu", _libtpu()),
        ("cuda12", "gpu", _cuda(12)),
        ("cuda13", "gpu", _cuda(13)),
        ("cpu", "cpu", _xla_cpu()),
    )
    for label, family, path in candidates:
        if path is not None:
            found.append(Backend(label, path, family))
    return found


def backend_paths() -> str | None:
    """The ``backend_paths`` option for what is installed; None if nothing is
    (the C library then looks beside itself, and its reason is INSTALL_HINT)."""
    found = find_backends()
    if not found:
        return None
    return ";".join(f"{b.option_label}={b.path}" for b in found)
