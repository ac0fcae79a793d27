"""Ray stays optional: nx_hal never imports it, nx_hal.ray says how to get it,
and bad arguments are refused before any cluster is touched."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_nx_hal_does_not_import_ray() -> None:
    done = _python("import sys, nx_hal, nx_hal.api, nx_hal.cli.app; nx_hal.devices(); "
                   "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_ray_the_error_says_how_to_install_it() -> None:
    # sys.modules['ray'] = None makes "import ray" fail as if it were not installed.
    done = _python("import sys; sys.modules['ray'] = None\n"
                   "try:\n    import nx_hal.ray\n"
                   "except ImportError as exc:\n    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nx_hal.ray needs Ray, which is not installed: pip install 'nx-hal[ray]'"


def test_cli_without_ray_is_one_clear_line() -> None:
    done = _python("import sys; sys.modules['ray'] = None\n"
                   "from nx_hal.cli.app import main\n"
                   "sys.exit(main(['devices', '--ray', 'auto']))")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == ("error: FAILED_PRECONDITION: nx_hal.ray needs Ray, which is not installed: "
                                   "pip install 'nx-hal[ray]'")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"replicas": 0}, "replicas must be 'all' or a whole number >= 1, got 0"),
    ({"replicas": "some"}, "replicas must be 'all' or a whole number >= 1, got 'some'"),
    ({"max_in_flight": 0}, "max_in_flight must be a whole number >= 1"),
    ({"max_retries": -1}, "max_retries must be a whole number >= 0"),
    ({"prefer": []}, r"prefer must be selectors like 'tpu,cpu' or \['tpu', 'cpu'\], got \[\]"),
])
def test_deploy_refuses_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    pytest.importorskip("ray")
    import nx_hal.ray
    from nx_hal.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=message):
        nx_hal.ray.deploy(b"\x08\x07", **kwargs)  # type: ignore[arg-type]


def test_cli_unreachable_cluster_is_one_clear_line() -> None:
    pytest.importorskip("ray")
    import socket

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = _python(f"import sys\nfrom nx_hal.cli.app import main\nsys.exit(main(['devices', '--ray', '127.0.0.1:{port}']))")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (f"error: UNAVAILABLE: cannot reach the Ray cluster at 127.0.0.1:{port}: "
                                   "Connection refused")
