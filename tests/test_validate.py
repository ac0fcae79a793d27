"""The loader's validation layer (NX_HAL_VALIDATE, cabi/validate.c): each
contract breach a C caller can commit through the table becomes a report
instead of undefined behaviour, and with the variable unset the plugin's own
table is handed out untouched."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests import cbuild

ROOT = cbuild.repo_root()
SANITIZE_FLAGS = ("-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=all")
REPORT = re.compile(r"^nx_hal validation: (.*)$", re.M)
STATUS = re.compile(r"^status: (\w+): (.*)$", re.M)
HEX = r"0x[0-9a-f]+"


def run(cmd: Sequence[str | Path], validate: str | None,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NX_HAL_VALIDATE"}
    if validate is not None:
        env["NX_HAL_VALIDATE"] = validate
    env.update(extra_env or {})
    return subprocess.run([str(part) for part in cmd], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cbuild.build_fixture("hostmem", tmp_path_factory.mktemp("fixture"))


def build_driver(out_dir: Path, extra_flags: Sequence[str] = ()) -> Path:
    return cbuild.build_program(
        "validate_driver", [ROOT / "tests" / "validate_driver.c", *cbuild.loader_sources()],
        out_dir, extra_flags=extra_flags)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver(tmp_path_factory.mktemp("driver"))


def scenario(driver: Path, plugin: Path, name: str, validate: str | None = "1",
             extra_env: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """Runs one scenario, which must finish; returns (stderr reports, status messages)."""
    result = run([driver, plugin, name], validate, extra_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"done: {name}" in result.stdout
    statuses = STATUS.findall(result.stdout)
    for code, message in statuses:
        assert code == "INVALID_ARGUMENT", message
        assert message.startswith("nx_hal validation: "), message
    return REPORT.findall(result.stderr), [message for _, message in statuses]


# --- Off by default -----------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "0"])
def test_off_hands_out_the_plugins_own_table(driver: Path, plugin: Path,
                                             value: str | None) -> None:
    result = run([driver, plugin, "identity"], value)
    assert result.returncode == 0, result.stderr
    assert "table: own" in result.stdout


@pytest.mark.parametrize("value", ["1", "abort", "yes"])
def test_on_hands_out_a_wrapped_table(driver: Path, plugin: Path, value: str) -> None:
    result = run([driver, plugin, "identity"], value)
    assert result.returncode == 0, result.stderr
    assert "table: wrapped" in result.stdout


# --- Correct use: no report ---------------------------------------------------


@pytest.mark.parametrize("name", ["clean", "threads"])
def test_correct_use_reports_nothing(driver: Path, plugin: Path, name: str) -> None:
    reports, statuses = scenario(driver, plugin, name)
    assert reports == [] and statuses == []


def test_hostmem_driver_reports_only_its_deliberate_breach(plugin: Path, tmp_path: Path) -> None:
    """Every ABI entry, errors and callbacks included, through the wrapped
    table: the one report is the wrong-kind handle the driver passes on purpose
    (the plugin's own message, which that check expects, is not reached)."""
    program = cbuild.build_program(
        "hostmem_driver", [ROOT / "cabi" / "tests" / "hostmem_driver.c", *cbuild.loader_sources()],
        tmp_path)
    result = run([program, plugin], "1")
    reports = REPORT.findall(result.stderr)
    assert len(reports) == 1, reports
    assert re.fullmatch(rf"device_info: device {HEX} is a live client, not a device "
                        r"\(wrong handle kind\)", reports[0])
    assert "1 check(s) failed" in result.stderr
    assert "lacks 'not a live device'" in result.stderr


# --- Breaches -----------------------------------------------------------------


def test_double_destroy(driver: Path, plugin: Path) -> None:
    reports, statuses = scenario(driver, plugin, "double_destroy")
    assert statuses == []  # every entry involved returns void: stderr is the report
    expected = [
        rf"buffer_destroy: buffer {HEX} was already destroyed \(double destroy\)",
        rf"event_destroy: event {HEX} was already destroyed \(double destroy\)",
        rf"blob_free: blob {HEX} was already freed \(double free\)",
        rf"executable_destroy: executable {HEX} was already destroyed \(double destroy\)",
        rf"status_free: status {HEX} was already freed \(double free\)",
        rf"client_destroy: client {HEX} was already destroyed \(double destroy\)",
    ]
    assert len(reports) == len(expected), reports
    for report, pattern in zip(reports, expected, strict=False):
        assert re.fullmatch(pattern, report), report


def test_use_after_free(driver: Path, plugin: Path) -> None:
    reports, statuses = scenario(driver, plugin, "use_after_free")
    expected = [
        rf"event_is_ready: event {HEX} was already destroyed \(use after free\)",
        rf"buffer_info: buffer {HEX} was already destroyed \(use after free\)",
        rf"buffer_to_host: buffer {HEX} was already destroyed \(use after free\)",
        rf"executable_execute: inputs\[0\] buffer {HEX} was already destroyed \(use after free\)",
        rf"executable_io_count: executable {HEX} was already destroyed \(use after free\)",
    ]
    assert [s.removeprefix("nx_hal validation: ") for s in statuses] == reports
    assert len(reports) == len(expected), reports
    for report, pattern in zip(reports, expected, strict=False):
        assert re.fullmatch(pattern, report), report


def test_handle_from_another_client(driver: Path, plugin: Path) -> None:
    reports, statuses = scenario(driver, plugin, "cross_client")
    assert len(reports) == 1 and len(statuses) == 1, reports
    match = re.fullmatch(rf"executable_execute: inputs\[0\] buffer {HEX} belongs to client "
                         rf"({HEX}), not to client ({HEX}) of the other handles "
                         r"\(handle from another client\)", reports[0])
    assert match and match.group(1) != match.group(2), reports[0]
    assert statuses[0] == "nx_hal validation: " + reports[0]


def test_handle_never_made_by_the_plugin(driver: Path, plugin: Path) -> None:
    reports, statuses = scenario(driver, plugin, "garbage")
    assert reports == [
        "buffer_info: buffer 0xdead0 was never made by this plugin (unknown handle)",
        "device_info: device 0xdead0 was never made by this plugin (unknown handle)",
        "client_device_count: client 0xdead0 was never made by this plugin (unknown handle)",
        "executable_execute: executable 0xdead0 was never made by this plugin (unknown handle)",
        reports[4],
        "buffer_destroy: buffer 0xdead0 was never made by this plugin (unknown handle)",
        "event_destroy: event 0xdead0 was never made by this plugin (unknown handle)",
        "client_destroy: client 0xdead0 was never made by this plugin (unknown handle)",
    ]
    assert re.fullmatch(rf"device_info: device {HEX} is a live buffer, not a device "
                        r"\(wrong handle kind\)", reports[4])
    assert len(statuses) == 5


def test_leak_at_client_destroy(driver: Path, plugin: Path) -> None:
    reports, statuses = scenario(driver, plugin, "leak")
    assert len(reports) == 2, reports
    assert re.fullmatch(rf"client_destroy: client ({HEX}) destroyed with live handles it made: "
                        r"2 buffers, 1 executable, 1 event "
                        r"\(leaked; destroy them before their client\)", reports[0])
    # The client was destroyed all the same, and what it left behind with it.
    assert re.fullmatch(rf"buffer_info: buffer {HEX} was destroyed with its client {HEX} "
                        r"\(use after free\)", reports[1])
    assert statuses == ["nx_hal validation: " + reports[1]]


def test_abort_mode_aborts_after_the_report(driver: Path, plugin: Path) -> None:
    result = run([driver, plugin, "double_destroy"], "abort")
    assert result.returncode == -signal.SIGABRT, result.stderr
    assert len(REPORT.findall(result.stderr)) == 1
    assert "buffer_destroy" in result.stderr


def sanitizers_available(tmp_path: Path) -> bool:
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    built = subprocess.run([*cbuild.compiler(), *SANITIZE_FLAGS, str(probe), "-o",
                            str(tmp_path / "probe")], capture_output=True)
    return built.returncode == 0 and subprocess.run([str(tmp_path / "probe")]).returncode == 0


def test_breaches_never_reach_the_plugin(tmp_path: Path) -> None:
    """Under AddressSanitizer a freed handle passed on to the fixture (which
    reads its tag) would be a heap-use-after-free: none is."""
    if not sanitizers_available(tmp_path):
        pytest.skip("compiler lacks -fsanitize=address,undefined")
    plugin = cbuild.build_fixture("hostmem", tmp_path / "asan", extra_flags=SANITIZE_FLAGS)
    driver = build_driver(tmp_path / "asan-driver", SANITIZE_FLAGS)
    # The leak scenario leaks on purpose; the others are checked for leaks.
    for name in ("clean", "double_destroy", "use_after_free", "cross_client", "garbage",
                 "leak", "threads"):
        leaks = "0" if name == "leak" else "1"
        scenario(driver, plugin, name,
                 extra_env={"ASAN_OPTIONS": f"detect_leaks={leaks}",
                            "UBSAN_OPTIONS": "print_stacktrace=1"})


def test_python_bindings_get_the_wrapped_table(plugin: Path) -> None:
    """nx_hal opens libraries through the same loader, so Python (and the
    conformance suite run under NX_HAL_VALIDATE) goes through the layer."""
    code = (
        "from nx_hal.library import open_library\n"
        "from nx_hal.native import ffi, lib\n"
        f"library = open_library({str(plugin)!r})\n"
        "lib.nxhal_call_buffer_destroy(library.api, ffi.cast('nxhal_buffer_t*', 0xdead0))\n"
        "print('survived')\n"
    )
    result = run([sys.executable, "-c", code], "1")
    assert result.returncode == 0, result.stderr
    assert "survived" in result.stdout
    assert REPORT.findall(result.stderr) == [
        "buffer_destroy: buffer 0xdead0 was never made by this plugin (unknown handle)"]
