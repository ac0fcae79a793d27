"""nx-hal-plugin-template: registers the template plugin library with nx_hal.

The plugin (name ``template``) keeps its "device" in host memory and runs the
``template-elementwise`` format; it is a starting point for vendors, not a
backend. nx_hal imports this module through the ``nx_hal`` entry point and
calls :func:`nx_hal_register`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LIBRARY", "TemplateOptions", "nx_hal_register"]

# The same marker as nx_hal.hookimpl (pluggy matches markers by project
# name), so importing this module does not import the core.
hookimpl = pluggy.HookimplMarker("nx_hal")

LIBRARY = Path(__file__).with_name("libnxhal_template.so")
"""The plugin library, installed next to this module by CMakeLists.txt."""


class TemplateOptions(BaseModel):
    """Client options of the template (``nx_hal`` config section ``template``).

    The C library checks the same rules again (``template_client_create``);
    this model gives Python users the error early, naming the config key.
    """

    model_config = ConfigDict(extra="forbid")

    device_count: int | None = Field(default=None, ge=1, le=8, strict=True)
    """How many host-memory devices the client shows (default 1)."""


@hookimpl
def nx_hal_register(register: Callable[..., Any]) -> None:
    """Registers libnxhal_template.so as plugin ``template``."""
    register(
        name="template",
        library=LIBRARY,
        options_model=TemplateOptions,
        package="nx-hal-plugin-template",
    )
