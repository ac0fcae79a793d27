from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--plugin", default=None, help="run the conformance suite on this plugin only")


def pytest_configure(config: pytest.Config) -> None:
    # Compile caches and other per-user state go to a throwaway directory.
    import os
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="nxhal-test-cache-")


# Fixtures shared by several test modules.
from tests.plugin_env import site  # noqa: E402, F401
