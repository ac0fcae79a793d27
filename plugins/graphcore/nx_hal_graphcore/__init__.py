"""nx-hal-graphcore: registers the Graphcore IPU plugin library with nx_hal.

The library always loads; without the Poplar SDK (or an IPU) its
client_create says precisely what is missing, and nx_hal reports that.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy

from nx_hal_graphcore.options import GraphcoreCompileOptions, GraphcoreOptions

__all__ = [
    "GraphcoreCompileOptions",
    "GraphcoreOptions",
    "LIBRARY",
    "BACKEND_LIBRARY",
    "nx_hal_register",
]

# The same marker as nx_hal.hookimpl (pluggy matches markers by project
# name), so importing this module does not import the core.
hookimpl = pluggy.HookimplMarker("nx_hal")

LIBRARY = Path(__file__).with_name("libnxhal_graphcore.so")
"""The always-built plugin library."""
BACKEND_LIBRARY = Path(__file__).with_name("libnxhal_graphcore_poplar.so")
"""The Poplar backend it loads; present only in wheels built with the SDK."""


@hookimpl
def nx_hal_register(register: Callable[..., Any]) -> None:
    """Registers libnxhal_graphcore.so as plugin ``graphcore``."""
    register(
        name="graphcore",
        library=LIBRARY,
        options_model=GraphcoreOptions,
        compile_options_model=GraphcoreCompileOptions,
        package="nx-hal-graphcore",
    )
