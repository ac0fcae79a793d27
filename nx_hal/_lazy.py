"""Modules imported on first use, so that a start (``import nx_hal;
nx_hal.devices()``) does not pay for numpy or pydantic it never touches."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """Stands for the module ``name``, imported at the first attribute read.
    With ``keep`` each attribute read is kept on this object, so later reads
    cost what a module attribute read costs (for hot paths; a later
    monkeypatch of the module is then not seen)."""

    def __init__(self, name: str, *, keep: bool = False) -> None:
        self.__dict__["_lazy_name"] = name
        self.__dict__["_lazy_keep"] = keep

    def __getattr__(self, attr: str) -> Any:
        module: ModuleType = importlib.import_module(self.__dict__["_lazy_name"])  # thread-safe
        value = getattr(module, attr)
        if self.__dict__["_lazy_keep"]:
            self.__dict__[attr] = value
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"
