"""The plugin through the nx_hal core: listed as unavailable with its reason,
and never chosen. Skipped where the core package is not importable."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from conftest import Build
from nx_hal_graphcore import LIBRARY, GraphcoreCompileOptions, GraphcoreOptions, nx_hal_register

nx_hal = pytest.importorskip("nx_hal")
if not all(hasattr(nx_hal, name) for name in ("devices", "explain")):
    pytest.skip("the nx_hal core has no devices()/explain() yet", allow_module_level=True)

from nx_hal.config import load_config  # noqa: E402
from nx_hal.errors import ConfigError  # noqa: E402
from nx_hal.registry import PluginRecord, PluginSpec, Registry  # noqa: E402
from nx_hal.selection import select  # noqa: E402
from nx_hal.selectors import Selector  # noqa: E402

REASON_START = ("graphcore: the Poplar backend was not built (no Poplar SDK: POPLAR_SDK_ENABLED "
                "was off when this library was built); no IPU found: checked PCI vendor 0x1d95 "
                "under /sys/bus/pci/devices (")


def registered(build: Build, tmp_path: Path, **overrides: object) -> tuple[Registry, PluginRecord]:
    """A registry holding the freshly built library, registered the way the
    package's hook registers the installed one."""
    calls: list[dict[str, object]] = []
    nx_hal_register(lambda **kw: calls.append(kw))
    (spec,) = calls
    assert spec["name"] == "graphcore"
    assert spec["options_model"] is GraphcoreOptions
    assert spec["compile_options_model"] is GraphcoreCompileOptions
    assert spec["package"] == "nx-hal-graphcore"
    assert Path(str(spec["library"])).name == "libnxhal_graphcore.so"
    reg = Registry(load_config(overrides or None, no_config=True, cwd=tmp_path))
    record = reg.add(PluginSpec(name="graphcore", library=build.library,
                                options_model=GraphcoreOptions,
                                compile_options_model=GraphcoreCompileOptions,
                                package="nx-hal-graphcore", source="test build"))
    return reg, record


@pytest.mark.parametrize("isolate", [False, True])
def test_registry_lists_graphcore_unavailable_with_reason(build: Build, tmp_path: Path,
                                                           isolate: bool) -> None:
    reg, record = registered(build, tmp_path)
    reg.load(record, isolate=isolate)
    assert (record.state, record.code) == ("unavailable", "UNAVAILABLE")
    assert record.reason.startswith(REASON_START)
    assert record.devices == []


def test_ipu_selection_explains_why_not(build: Build, tmp_path: Path) -> None:
    reg, record = registered(build, tmp_path)
    reg.load(record, isolate=False)
    report = select(reg, [Selector.parse("ipu")], explicit=True)
    assert report.chosen is None
    text = str(report)
    assert "skipped ipu: no ipu device: plugin 'graphcore' unavailable: " + REASON_START in text
    report = select(reg, [Selector.parse("graphcore:ipu")], explicit=True)
    assert report.chosen is None
    assert "plugin 'graphcore' unavailable: " + REASON_START in str(report)


def test_bad_config_value_is_refused_before_the_library(build: Build, tmp_path: Path) -> None:
    reg, record = registered(build, tmp_path, plugins={"graphcore": {"num_ipus": 3}})
    # A value the user gave is an error, not a reason to skip the plugin's devices.
    with pytest.raises(ConfigError) as err:
        reg.load(record, isolate=False)
    assert err.value.code == "INVALID_ARGUMENT"
    assert "num_ipus" in err.value.message and "power of two" in err.value.message
    assert record.state == "pending"


def test_valid_config_reaches_the_probe(build: Build, tmp_path: Path) -> None:
    reg, record = registered(build, tmp_path, plugins={"graphcore": {
        "num_ipus": 4, "precision": "float16", "available_memory_proportion": 0.5,
        "half_partials": True}})
    reg.load(record, isolate=False)
    assert (record.state, record.code) == ("unavailable", "UNAVAILABLE")
    assert record.reason.startswith(REASON_START)


def test_installed_package_is_listed_by_nx_hal() -> None:
    """With nx-hal-graphcore installed (pip install ./plugins/graphcore)."""
    if "graphcore" not in {ep.name for ep in metadata.entry_points(group="nx_hal")}:
        pytest.skip("nx-hal-graphcore is not installed in this environment")
    if not LIBRARY.is_file():
        pytest.skip(f"nx_hal_graphcore was imported from a source tree without its library ({LIBRARY})")
    nx_hal.configure(no_config=True)
    listed = {p["name"]: p for p in nx_hal.plugins()}
    assert listed["graphcore"]["state"] == "unavailable"
    assert listed["graphcore"]["reason"].startswith(REASON_START)
    assert nx_hal.devices(kind="ipu") == []
    assert REASON_START in str(nx_hal.explain("ipu"))


def test_cli_plugins_and_doctor_show_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """`nx-hal plugins` and `nx-hal doctor` with the package installed."""
    if "graphcore" not in {ep.name for ep in metadata.entry_points(group="nx_hal")}:
        pytest.skip("nx-hal-graphcore is not installed in this environment")
    if not LIBRARY.is_file():
        pytest.skip(f"nx_hal_graphcore was imported from a source tree without its library ({LIBRARY})")
    cli = pytest.importorskip("nx_hal.cli")
    assert cli.main(["--no-config", "plugins"]) == 0
    plugins_text = capsys.readouterr().out
    assert "graphcore  [unavailable]" in plugins_text
    assert f"  reason: {REASON_START}" in plugins_text
    assert cli.main(["--no-config", "doctor", "--device", "ipu"]) == 1  # no ipu to use: a failure scripts see
    doctor_text = capsys.readouterr().out
    assert f"plugin 'graphcore' unavailable: {REASON_START}" in doctor_text
