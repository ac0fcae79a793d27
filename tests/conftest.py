from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

_CACHE_HOME = pytest.StashKey[str]()
_CONFIG_HOME = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--plugin", default=None, help="run the conformance suite on this plugin only")


def pytest_configure(config: pytest.Config) -> None:
    # Compile caches and other per-user state go to a throwaway directory,
    # removed when the run ends.
    import os
    import tempfile

    # .ci/sanitize builds nx_hal/_numpy_alloc.c with ASan+UBSan: that build
    # stands in for the installed extension, before anything imports it.
    sanitized = os.environ.get("NX_HAL_SANITIZED_NUMPY_ALLOC")
    if sanitized:
        import importlib.util
        import sys

        spec = importlib.util.spec_from_file_location("nx_hal._numpy_alloc", sanitized)
        assert spec is not None and spec.loader is not None, sanitized
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["nx_hal._numpy_alloc"] = module

    # A run stopped at its budget (.ci/run's timeout sends SIGTERM) ends as an
    # interrupted one: pytest then still reports the failures so far.
    import signal

    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.default_int_handler)

    config.stash[_CACHE_HOME] = os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="nxhal-test-cache-")
    # The store's per-user key (nx_hal.store.secret) too: a test run leaves
    # no key in the user's ~/.config.
    config.stash[_CONFIG_HOME] = os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="nxhal-test-config-")


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for key in (_CACHE_HOME, _CONFIG_HOME):
        folder = config.stash.get(key, None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def keep_api_state() -> Iterator[None]:
    """Restores the process's default registry and device after a test that
    calls nx_hal.configure: later tests of the same process use the
    registry nx_hal would make for them, not one with every plugin disabled."""
    from nx_hal import api

    saved = (api._registry, api._default)
    yield
    with api._lock:
        api._registry, api._default = saved


# Fixtures shared by several test modules.
from tests.plugin_env import site  # noqa: E402, F401


@pytest.fixture(scope="session")
def hostmem_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding only the host-memory fixture plugin (C and C++ programs find it there)."""
    from tests import cbuild

    out = tmp_path_factory.mktemp("hostmem")
    cbuild.build_fixture("hostmem", out)
    return out
