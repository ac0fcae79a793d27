"""Child processes that import exactly the nx_hal this process imported.

``python -m nx_hal.x`` in a child puts the child's working directory first on
its import path: run from a source checkout after ``pip install .``, the child
would import the uncompiled source tree instead of the installed package. The
child gets this process's ``sys.path`` instead.
"""

from __future__ import annotations

import os
import sys

__all__ = ["module_command"]


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs ``module`` as ``__main__`` with this process's import path."""
    path = [os.path.abspath(p) if p == "" else p for p in sys.path]
    bootstrap = (
        "import sys, runpy; "
        f"sys.path[:] = {path!r}; sys.argv[1:] = {list(args)!r}; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", bootstrap]
