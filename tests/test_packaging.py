"""The core wheel ships every subpackage of nx_hal (setuptools' package list is explicit)."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_in_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "nx_hal").rglob("__init__.py")
             if "include" not in p.parts and "lib" not in p.parts}
    assert "nx_hal.array_api" in found
    assert found - listed == set(), f"subpackages missing from [tool.setuptools] packages: {sorted(found - listed)}"
