"""A pytest plugin for the array API suite's runs (tests/array_api_conformance.py
passes ``-p array_api_profile``): the suite's Hypothesis profile without the
shrink and explain phases.

A failing test fails the same with or without them: shrinking only looks for
a smaller failing example, and here every example is a new program for the
device to compile (tens of ms on OpenVINO's CPU). On npu:cpu, whose 64-bit
dtypes and a few operations fail about 200 of the suite's tests, shrinking
them took most of the run (measured: npu:cpu 638 s with shrinking).
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

PROFILE = "array-api-tests"  # the suite's own (its conftest.py registers and loads it)


@pytest.hookimpl(trylast=True)  # after the suite's conftest has registered its profile
def pytest_configure(config: pytest.Config) -> None:
    settings.register_profile(PROFILE, parent=settings.get_profile(PROFILE),
                              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
    settings.load_profile(PROFILE)
