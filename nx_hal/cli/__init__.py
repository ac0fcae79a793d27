"""The ``nx-hal`` command: a thin layer over the library.

Human-readable by default, ``--json`` anywhere on the line for machine
output (errors too, as ``{"error": {"code": ..., "message": ...}}``).
Plugins are probed in a child process first, so a plugin that crashes or
hangs is reported, not fatal. A user's mistake (a missing file, a bad
shape, a count below one) is one line naming it, never a traceback."""

from __future__ import annotations

from nx_hal.cli.app import main

__all__ = ["main"]
