"""The plugin hook: how an installed package tells nx_hal about its library.

A package registers under the entry-point group ``nx_hal`` a module that
implements :func:`nx_hal_register`; it calls ``register(...)`` once per
library it ships. Hook project name: ``"nx_hal"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["hookspec", "hookimpl", "Register", "HookSpecs", "PROJECT"]

PROJECT = "nx_hal"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """The callback a plugin module receives (keyword arguments only)."""

    def __call__(
        self,
        *,
        name: str,
        library: str | Path,
        options_model: type[BaseModel] | None = None,
        compile_options_model: type[BaseModel] | None = None,
        package: str | None = None,
    ) -> None:
        """Registers the library at ``library`` as plugin ``name``.

        ``options_model`` validates the plugin's client options from config;
        ``compile_options_model`` validates ``Device.compile`` keyword options;
        ``package`` is the distribution name shown by ``nx-hal plugins``.
        """


class HookSpecs:
    """Hooks nx_hal calls. Added in nx_hal 0.1."""

    @hookspec
    def nx_hal_register(self, register: Register) -> None:
        """Register this package's plugin libraries by calling ``register``."""
