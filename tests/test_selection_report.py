"""Selection, read as its user reads it: the exact reason each selector chose
nothing, which device an index picks, the fallback alternatives, and the
text of the report (header, format, skips, plugin lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nx_hal.config import load_config
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from nx_hal.selection import FallbackWarning, Report, Skip, select, warn_fallback
from nx_hal.selectors import Selector
from tests.cbuild import build_fixture
from tests.plugin_env import fixture_registry

HOSTMEM_DIAGNOSTICS = "fixture: {n} host memory device(s), compat key 'fixture-hostmem-v1'"


def sels(*texts: str) -> list[Selector]:
    return [Selector.parse(t) for t in texts]


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    """fixture-hostmem with three cpu devices, and fixture-other_major (fails: ABI major 2)."""
    tmp = tmp_path_factory.mktemp("three")
    reg = fixture_registry(tmp, "hostmem", "other_major", plugins={"fixture-hostmem": {"device_count": 3}})
    reg.load_all()
    assert reg.records["fixture-hostmem"].state == "loaded"
    return reg


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    """Plugins under the names of the packages that bring each kind: 'npu' and
    'graphcore' load (the host-memory fixture: one cpu device each), 'tpu' fails."""
    tmp = tmp_path_factory.mktemp("providers")
    lib = build_fixture("hostmem", tmp / "libs")
    reg = Registry(load_config(no_config=True, cwd=tmp))
    reg.add(PluginSpec(name="npu", library=lib))
    reg.add(PluginSpec(name="graphcore", library=lib))
    reg.add(PluginSpec(name="tpu", library=tmp / "missing" / "libnxhal_tpu.so"))
    reg.load_all()
    assert [r.state for r in reg.records.values()] == ["loaded", "loaded", "failed"]
    return reg


# -- which device an index, a preference list and an explicit choice give ------------------------

@pytest.mark.parametrize("index", [0, 1, 2])
def test_index_picks_that_device_and_only_it(three: Registry, index: int) -> None:
    report = select(three, sels(f"fixture-hostmem:cpu:{index}"), explicit=True)
    assert report.chosen is not None and report.chosen.selector == f"fixture-hostmem:cpu:{index}"
    assert report.chosen is three.records["fixture-hostmem"].devices[index]
    assert report.chosen_by == f"fixture-hostmem:cpu:{index}"
    assert report.alternatives == [] and report.skipped == []


def test_index_past_the_last_device(three: Registry) -> None:
    report = select(three, sels("fixture-hostmem:cpu:3"), explicit=True)
    assert report.chosen is None
    assert report.skipped == [Skip("fixture-hostmem:cpu:3", "index 3 out of range (3 matching device(s))")]


def test_index_of_a_kind_the_plugin_lacks_says_what_it_has(three: Registry) -> None:
    """An index says nothing about range when no device matches at all."""
    report = select(three, sels("fixture-hostmem:gpu:0"), explicit=True)
    assert report.chosen is None
    assert report.skipped == [Skip(
        "fixture-hostmem:gpu:0",
        "plugin 'fixture-hostmem' has no gpu device (it has: cpu); " + HOSTMEM_DIAGNOSTICS.format(n=3),
        absent=True,
    )]


def test_preferences_after_the_choice_become_alternatives(three: Registry) -> None:
    devs = three.records["fixture-hostmem"].devices
    report = select(three, sels("fixture-hostmem:cpu:2", "gpu", "cpu"), explicit=False)
    assert report.chosen is devs[2] and report.chosen_by == "fixture-hostmem:cpu:2"
    # Later preferences: each device once, in order, named by the selector that found it;
    # one that finds nothing after the choice is not a skip.
    assert report.alternatives == [(devs[0], "cpu"), (devs[1], "cpu")]
    assert report.skipped == []


def test_a_required_preference_that_matches_ends_the_walk(three: Registry) -> None:
    devs = three.records["fixture-hostmem"].devices
    report = select(three, sels("fixture-hostmem:cpu:1!", "cpu"), explicit=False)
    assert report.chosen is devs[1] and report.alternatives == []


def test_a_failed_preference_before_the_choice_is_skipped_with_its_reason(three: Registry) -> None:
    record = three.records["fixture-other_major"]
    report = select(three, sels("fixture-other_major", "cpu"), explicit=False)
    assert report.chosen is three.records["fixture-hostmem"].devices[0]
    assert report.skipped == [Skip("fixture-other_major",
                                   f"plugin 'fixture-other_major' failed: ABI_MISMATCH: {record.reason}")]


# -- why a selector chose nothing ------------------------------------------------------------------

def test_named_plugin_that_failed_to_load(three: Registry) -> None:
    record = three.records["fixture-other_major"]
    assert record.state == "failed" and record.code == "ABI_MISMATCH"
    report = select(three, sels("fixture-other_major"), explicit=True)
    assert report.chosen is None
    (skip,) = report.skipped
    assert skip.reason == f"plugin 'fixture-other_major' failed: ABI_MISMATCH: {record.reason}"
    assert "(ABI 2.0) refused host ABI" in skip.reason


def test_named_plugin_not_installed(three: Registry) -> None:
    report = select(three, sels("tpu:cpu"), explicit=True)
    assert report.skipped == [Skip("tpu:cpu", "plugin 'tpu' is not installed (pip install nx-hal-tpu)", absent=True)]


def test_kind_no_package_provides(three: Registry) -> None:
    report = select(three, sels("other"), explicit=True)
    assert report.skipped == [Skip("other", "no other device: no installed plugin offers one", absent=True)]


def test_kind_reasons_name_each_provider(providers: Registry) -> None:
    missing = providers.records["tpu"].reason
    assert missing.endswith("libnxhal_tpu.so does not exist")
    report = select(providers, sels("gpu"), explicit=True)
    assert report.chosen is None
    # A failed provider says why; a loaded one what it has and what it would need.
    # The loaded plugins' diagnostics say nothing of gpus, so they are not quoted.
    assert report.skipped == [Skip("gpu", (
        f"no gpu device: plugin 'tpu' failed: NOT_FOUND: {missing}; "
        "plugin 'npu' has no gpu device (it has: cpu); that needs an Intel GPU with its OpenVINO driver"))]


def test_kind_reason_without_a_hint(providers: Registry) -> None:
    report = select(providers, sels("ipu"), explicit=True)
    assert report.skipped == [Skip("ipu", "no ipu device: plugin 'graphcore' has no ipu device (it has: cpu)",
                                    absent=True)]


def test_kind_reason_quotes_what_a_loaded_plugin_says_of_that_kind(providers: Registry,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers.records["graphcore"], "diagnostics",
                        "IPU: no IPU-M2000 found (is the driver loaded?)\nhost link ok\n  ipu firmware 2.6  ")
    # What a failed plugin's diagnostics say is not quoted: its failure is the reason.
    monkeypatch.setattr(providers.records["tpu"], "diagnostics", "ipu: not here")
    report = select(providers, sels("ipu"), explicit=True)
    assert report.skipped == [Skip("ipu", (
        "no ipu device: plugin 'graphcore' has no ipu device (it has: cpu); "
        "plugin 'graphcore' says: IPU: no IPU-M2000 found (is the driver loaded?); ipu firmware 2.6"), absent=True)]


# -- the report's text ------------------------------------------------------------------------------

def test_report_text_preference_order(three: Registry) -> None:
    record = three.records["fixture-other_major"]
    report = select(three, sels("npu", "fixture-hostmem:cpu"), explicit=False)
    assert str(report).splitlines() == [
        "device selection (preference order: npu, fixture-hostmem:cpu): "
        "chosen fixture-hostmem:cpu:0 (fixture host memory) for 'fixture-hostmem:cpu'",
        "  skipped npu: no npu device: plugin 'npu' not installed (pip install nx-hal-npu)",
        "plugins:",
        "  fixture-hostmem: loaded, 3 device(s): fixture-hostmem:cpu:0 (fixture host memory), "
        "fixture-hostmem:cpu:1 (fixture host memory), fixture-hostmem:cpu:2 (fixture host memory)",
        "    " + HOSTMEM_DIAGNOSTICS.format(n=3),
        f"  fixture-other_major: failed: ABI_MISMATCH: {record.reason}",
    ]


def test_report_text_requested_with_a_format(three: Registry) -> None:
    report = select(three, sels("fixture-hostmem:cpu:1"), explicit=True, program_format="fixture-elementwise")
    lines = str(report).splitlines()
    assert lines[:2] == [
        "device selection (requested: fixture-hostmem:cpu:1, programs in 'fixture-elementwise'): "
        "chosen fixture-hostmem:cpu:1 (fixture host memory) for 'fixture-hostmem:cpu:1'",
        "plugins:",
    ]
    assert report.to_dict()["program_format"] == "fixture-elementwise" and report.to_dict()["explicit"]


def test_report_text_when_nothing_is_installed(tmp_path: Path) -> None:
    reg = Registry(load_config(no_config=True, cwd=tmp_path))
    report = select(reg, sels("cpu"), explicit=True)
    assert str(report) == "\n".join([
        "device selection (requested: cpu): no device chosen",
        "  skipped cpu: no cpu device: plugin 'npu' not installed (pip install nx-hal-npu); "
        "plugin 'tpu' not installed (pip install nx-hal-tpu)",
        "plugins:",
        "  none installed (pip install nx-hal-npu, nx-hal-tpu or nx-hal-graphcore)",
    ])


def test_report_text_of_a_plugin_not_loaded_with_diagnostics(tmp_path: Path) -> None:
    record = Registry(load_config(no_config=True, cwd=tmp_path)).add(PluginSpec(name="npu", library=tmp_path / "x.so"))
    record.state, record.reason, record.diagnostics = "unavailable", "no NPU driver", "looked in /dev/accel\nfound 0"
    text = str(Report(selectors=["npu"], explicit=True, program_format=None, plugins=[record]))
    assert text.splitlines() == [
        "device selection (requested: npu): no device chosen",
        "plugins:",
        "  npu: unavailable: no NPU driver",
        "    looked in /dev/accel",
        "    found 0",
    ]


# -- absent hardware: what makes a skip "absent" and a report quiet -----------------------------

@pytest.mark.parametrize(("state", "absent"), [("unavailable", True), ("disabled", True), ("failed", False)])
def test_a_provider_absent_or_failed(providers: Registry, monkeypatch: pytest.MonkeyPatch, state: str,
                                     absent: bool) -> None:
    """Unavailable (no SDK or device) and disabled plugins mean the hardware
    is not here; a failed one is something to tell, for a kind and by name."""
    monkeypatch.setattr(providers.records["tpu"], "state", state)
    (by_kind,) = select(providers, sels("gpu"), explicit=True).skipped
    (by_name,) = select(providers, sels("tpu"), explicit=True).skipped
    assert (by_kind.absent, by_name.absent) == (absent, absent)


def test_devices_that_refuse_the_format_are_not_absent(three: Registry) -> None:
    (skip,) = select(three, sels("fixture-hostmem"), explicit=True, program_format="onnx").skipped
    assert not skip.absent and "not 'onnx'" in skip.reason


def test_a_report_is_quiet_only_when_nothing_failed(providers: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    # tpu failed: said in full, though the gpu itself is simply not here
    report = select(providers, sels("ipu", "cpu"), explicit=False)
    assert report.chosen is not None and [s.absent for s in report.skipped] == [True]
    assert not report.quiet()
    monkeypatch.setattr(providers.records["tpu"], "state", "unavailable")
    assert select(providers, sels("ipu", "cpu"), explicit=False).quiet()
    assert select(providers, sels("cpu"), explicit=False).quiet()  # nothing skipped
    assert not select(providers, sels("ipu"), explicit=True).quiet()  # nothing chosen
    monkeypatch.setattr(providers.records["npu"], "state", "failed")
    assert not select(providers, sels("graphcore"), explicit=False).quiet()
    # A skip that is not absence (devices refusing the format) is said in full too.
    monkeypatch.setattr(providers.records["npu"], "state", "loaded")
    assert not select(providers, sels("npu", "graphcore"), explicit=False, program_format="onnx").quiet()


@pytest.mark.parametrize(("names", "line"), [
    ([], ""), (["gpu"], "no gpu device here"), (["tpu", "gpu"], "no tpu or gpu device here"),
    (["ipu", "tpu", "npu:cpu"], "no ipu, tpu or npu:cpu device here"),
])
def test_absent_line(names: list[str], line: str) -> None:
    report = Report(selectors=names, explicit=False, program_format=None,
                    skipped=[Skip(n, "why", absent=True) for n in names])
    assert report.absent_line() == line


def test_the_fallback_warning_is_one_line_when_quiet(providers: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loud = select(providers, sels("ipu", "cpu"), explicit=False)
    with pytest.warns(FallbackWarning) as caught:
        warn_fallback(loud)
    assert str(caught[0].message).startswith("nx_hal fell back to npu:cpu:0 (fixture host memory); skipped ipu: "
                                             "no ipu device: plugin 'graphcore' has no ipu device")
    monkeypatch.setattr(providers.records["tpu"], "state", "unavailable")
    with pytest.warns(FallbackWarning) as caught:
        warn_fallback(select(providers, sels("ipu", "gpu", "cpu"), explicit=False))
    assert str(caught[0].message) == ("nx_hal runs on npu:cpu:0 (fixture host memory): no ipu or gpu device here "
                                      "(nx_hal.explain() says why)")


def test_a_skip_is_a_value() -> None:
    """Reports are shared (explain, the fallback warning, --json): a skip in
    one cannot be changed under another."""
    import dataclasses

    skip = Skip("gpu", "why", absent=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        skip.absent = False  # type: ignore[misc]
    assert skip == Skip("gpu", "why", absent=True) and skip != Skip("gpu", "why")
