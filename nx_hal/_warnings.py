"""Warnings that point at the user's line, not at nx_hal's.

A fixed ``stacklevel`` is right for one call path only: a fallback warning
reaches the user through ``nx_hal.device()``, ``nx_hal.put()`` (by way of
the default device) or ``compile_anywhere``, each a different depth. The
first frame outside this package is the line the user wrote."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn_at_caller"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Issues ``message`` attributed to the nearest frame outside nx_hal."""
    level = 2  # warnings.warn's 1 is this function; 2 its caller
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        next_frame = frame.f_back
        if next_frame is None:
            break
        frame = next_frame
        level += 1
    warnings.warn(message, category, stacklevel=level)
