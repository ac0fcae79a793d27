from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--plugin", default=None, help="run the conformance suite on this plugin only")
