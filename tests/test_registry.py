"""Plugin discovery and loading: every way a plugin can fail is recorded with
its reason, and the other plugins still load."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import nx_hal
from nx_hal.config import load_config
from nx_hal.errors import ConfigError
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from tests.cbuild import HOST_ABI, build_fixture
from tests.plugin_env import fake_package, fixture_registry

PLUGIN_MODULE = '''
from pathlib import Path
from pydantic import BaseModel, ConfigDict, Field
import nx_hal

class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_count: int = Field(1, ge=1, le=4)
    fail_create: bool = False

@nx_hal.hookimpl
def nx_hal_register(register):
    register(name="{name}", library=Path({lib!r}), options_model=Options, package="fake-{name}")
'''


def test_entry_point_plugins_and_broken_ones(site: Path, tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-good", {"good": "fake_nxhal_good"},
                 {"fake_nxhal_good": PLUGIN_MODULE.format(name="good", lib=str(lib))})
    fake_package(site, "fake-broken", {"broken": "fake_nxhal_broken"},
                 {"fake_nxhal_broken": "import no_such_module_anywhere\n"})
    fake_package(site, "fake-raising", {"raising": "fake_nxhal_raising"},
                 {"fake_nxhal_raising": "import nx_hal\n@nx_hal.hookimpl\n"
                  "def nx_hal_register(register):\n    raise RuntimeError('boom in hook')\n"})
    fake_package(site, "fake-nolib", {"nolib": "fake_nxhal_nolib"},
                 {"fake_nxhal_nolib": PLUGIN_MODULE.format(name="nolib", lib="/nonexistent/libnxhal_x.so")})
    reg = Registry(load_config(no_config=True, cwd=tmp_path))
    reg.discover()
    reg.load_all()
    recs = reg.records
    assert recs["good"].state == "loaded"
    assert [d.name for d in recs["good"].devices] == ["fixture host memory"]
    assert recs["good"].spec is not None and recs["good"].spec.package == "fake-good"
    assert recs["broken"].state == "failed"
    assert "no_such_module_anywhere" in recs["broken"].reason
    assert recs["raising"].state == "failed" and "boom in hook" in recs["raising"].reason
    assert recs["nolib"].state == "failed" and recs["nolib"].code == "NOT_FOUND"
    assert "/nonexistent/libnxhal_x.so" in recs["nolib"].reason


def test_options_model_rejects_value_naming_source(site: Path, tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-opt", {"opt": "fake_nxhal_opt"},
                 {"fake_nxhal_opt": PLUGIN_MODULE.format(name="opt", lib=str(lib))})
    (tmp_path / "nx_hal.toml").write_text("[plugins.opt]\ndevice_count = 9\n")
    reg = Registry(load_config(cwd=tmp_path))
    reg.discover()
    # A value the user gave is an error, not a reason to skip the plugin's devices.
    with pytest.raises(ConfigError) as err:
        reg.load(reg.records["opt"])
    assert "key 'plugins.opt.device_count' in" in err.value.message
    assert "less than or equal to 4" in err.value.message
    assert reg.records["opt"].state == "pending"


def test_plugin_options_reach_the_library(site: Path, tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "libs")
    fake_package(site, "fake-opt2", {"opt2": "fake_nxhal_opt2"},
                 {"fake_nxhal_opt2": PLUGIN_MODULE.format(name="opt2", lib=str(lib))})
    reg = Registry(load_config({"plugins": {"opt2": {"device_count": 3}}}, no_config=True, cwd=tmp_path))
    reg.discover()
    assert len(reg.load(reg.records["opt2"]).devices) == 3
    reg = Registry(load_config({"plugins": {"opt2": {"fail_create": True}}}, no_config=True, cwd=tmp_path))
    reg.discover()
    rec = reg.load(reg.records["opt2"])
    assert (rec.state, rec.code) == ("unavailable", "UNAVAILABLE")
    assert "fixture asked to be unavailable" in rec.reason


@pytest.mark.parametrize(
    "fixture, code, needles",
    [
        ("other_major", "ABI_MISMATCH", ["2.", "1."]),
        ("table_smaller", "ABI_MISMATCH", []),
        ("null_entry", None, []),
        ("missing_dep", "UNAVAILABLE", ["libnxhal_fixture_dep.so"]),
        ("no_query", "NOT_FOUND", ["nxhal_query"]),
    ],
)
def test_abi_failures_recorded(tmp_path: Path, fixture: str, code: str | None, needles: list[str]) -> None:
    reg = fixture_registry(tmp_path, fixture, "hostmem")
    reg.load_all()
    rec = reg.records[f"fixture-{fixture}"]
    assert rec.state == ("unavailable" if code == "UNAVAILABLE" else "failed")
    if code:
        assert rec.code == code, rec.reason
    for needle in needles:
        assert needle in rec.reason
    assert reg.records["fixture-hostmem"].state == "loaded"  # the others still load


@pytest.mark.parametrize("fixture", ["newer_minor", "table_larger"])
def test_newer_plugins_load(tmp_path: Path, fixture: str) -> None:
    reg = fixture_registry(tmp_path, fixture)
    rec = reg.load(reg.records[f"fixture-{fixture}"])
    assert rec.state == "loaded", rec.reason
    assert rec.info is not None and rec.info.negotiated_abi == HOST_ABI


def test_crashing_probe_is_isolated(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "crash_probe", "hostmem")
    reg.load_all(isolate=True)
    rec = reg.records["fixture-crash_probe"]
    assert (rec.state, rec.code) == ("failed", "INTERNAL")
    assert "crashed (SIGSEGV)" in rec.reason
    assert reg.records["fixture-hostmem"].state == "loaded"


def test_hanging_probe_times_out(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hang_probe", "hostmem", probe_timeout=2)
    start = time.monotonic()
    reg.load_all(isolate=True)
    elapsed = time.monotonic() - start
    rec = reg.records["fixture-hang_probe"]
    assert (rec.state, rec.code) == ("failed", "DEADLINE_EXCEEDED")
    assert "within 2 s" in rec.reason
    assert elapsed < 15
    assert reg.records["fixture-hostmem"].state == "loaded"


def test_disabled_plugin(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem", disable=["fixture-hostmem"])
    reg.load_all()
    assert reg.records["fixture-hostmem"].state == "disabled"


def test_plugin_path_discovery(tmp_path: Path) -> None:
    lib = build_fixture("hostmem", tmp_path / "plugdir")
    reg = Registry(load_config({"plugin_path": [str(lib.parent)]}, no_config=True, cwd=tmp_path))
    reg.discover()
    name = lib.name[len("libnxhal_"):-3]
    assert name in reg.records
    assert reg.load(reg.records[name]).state == "loaded"


def test_plugin_path_entry_the_os_refuses_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A name too long for the OS (found by tests/fuzz) is skipped with a
    warning naming it; the entries after it still count."""
    lib = build_fixture("hostmem", tmp_path / "plugdir")
    reg = Registry(load_config({"plugin_path": ["/" + "A" * 5000, "A" * 5000, str(lib.parent)]}, no_config=True,
                               cwd=tmp_path))
    reg.discover()
    assert lib.name[len("libnxhal_"):-3] in reg.records
    assert "' cannot be read: File name too long" in caplog.text
    assert "' is not an absolute directory" in caplog.text  # relative: refused before the OS is asked


def test_records_to_dict(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem")
    reg.load_all()
    d = reg.records["fixture-hostmem"].to_dict()
    assert d["state"] == "loaded" and d["abi_version"] == HOST_ABI
    assert d["devices"] == ["fixture-hostmem:cpu:0"]


def test_spec_add_replaces(tmp_path: Path) -> None:
    reg = fixture_registry(tmp_path, "hostmem")
    reg.add(PluginSpec(name="fixture-hostmem", library=Path("/nope.so")))
    assert reg.load(reg.records["fixture-hostmem"]).code == "NOT_FOUND"
    assert isinstance(nx_hal.NotFoundError("x"), LookupError)


def test_abi_1_0_plugin_runs_under_a_newer_host(tmp_path: Path) -> None:
    """A plugin of the first published ABI: negotiated down, and the 1.1 io
    field it never writes reads as "the executable's own device"."""
    import numpy as np

    from tests.conformance.programs import add_program

    reg = fixture_registry(tmp_path, "abi_1_0")
    rec = reg.load(reg.records["fixture-abi_1_0"])
    assert rec.state == "loaded", rec.reason
    assert rec.info is not None and (rec.info.abi_version, rec.info.negotiated_abi) == ("1.0", "1.0")
    (dev,) = rec.devices
    prog = add_program(dev.formats)
    assert prog is not None
    exe = dev.compile(prog[1], prog[0], cache=False)
    assert [s.device_index for s in exe.inputs + exe.outputs] == [-1, -1, -1]
    assert exe.input_devices == (dev, dev) and exe.num_replicas == 1
    x = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(exe(dev.put(x), dev.put(x))[0].to_numpy(), 2 * x)


def test_manifest_plugins_seen_by_python_and_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin installed outside Python, known only by its manifest, is found
    by the Python registry as the C loader finds it; an untrusted manifest is
    skipped by both."""
    import json
    import os
    import subprocess

    from tests.cbuild import build_example

    lib = build_fixture("hostmem", tmp_path / "libs")
    manifests = tmp_path / "share" / "nx_hal" / "plugins"
    manifests.mkdir(parents=True)
    (manifests / "outside.json").write_text(json.dumps({
        "file_format_version": "1.0", "name": "outside", "abi_version": HOST_ABI,
        "library_path": os.path.relpath(lib, manifests)}))
    (manifests / "loose.json").write_text(json.dumps({
        "file_format_version": "1.0", "name": "loose", "abi_version": HOST_ABI, "library_path": str(lib)}))
    (manifests / "loose.json").chmod(0o666)  # writable by anyone: never trusted
    for key in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "nothing"))
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "nothing"))
    monkeypatch.setenv("NX_HAL_PLUGIN_PATH", str(manifests))

    reg = Registry(load_config(no_config=True, cwd=tmp_path))
    reg.discover()
    assert "loose" not in reg.records
    spec = reg.records["outside"].spec
    assert spec is not None and spec.library.resolve() == lib.resolve()
    assert spec.source == f"NX_HAL_PLUGIN_PATH ({manifests / 'outside.json'})"
    reg.load_all()
    assert [d.name for d in reg.records["outside"].devices] == ["fixture host memory"]

    listed = subprocess.run([str(build_example(tmp_path / "example"))], capture_output=True, text=True,
                            env=dict(os.environ), check=True).stdout
    assert "name: fixture-hostmem" in listed
    assert str(lib.resolve()) in {str(Path(p).resolve()) for p in listed.split() if p.endswith(".so")}
    assert "loose" not in listed


# -- configure() lifetimes ----------------------------------------------------------------------

LIFETIME_SCRIPT = r"""
import gc, json, os, sys
import numpy as np
import nx_hal

def usage():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {"threads": int(status["Threads"]), "rss_kib": int(status["VmRSS"].split()[0]),
            "fds": len(os.listdir("/proc/self/fd"))}

settings = {"disable": ["graphcore"], "cache_dir": sys.argv[1]}
nx_hal.configure(settings, no_config=True)
x = np.arange(12, dtype=np.float32).reshape(3, 4)
buffers = {d.selector: d.put(x) for d in nx_hal.devices() if d.index == 0}
for _ in range(10):  # allocators and caches reach their steady state
    nx_hal.configure(settings, no_config=True)
before = usage()
for _ in range(100):
    nx_hal.configure(settings, no_config=True)
after = usage()
print(json.dumps({"before": before, "after": after, "plugins": sorted(buffers),
                  "reads": {k: b.to_numpy().tolist() == x.tolist() for k, b in buffers.items()}}))
"""


def test_configure_releases_old_clients(tmp_path: Path) -> None:
    """100 configure() cycles with npu and tpu:cpu: threads, RSS and fds stay
    flat (each cycle leaked 8 threads and ~750 KiB before), and a buffer made
    before them still reads back."""
    import json
    import subprocess
    import sys

    configured = nx_hal.configure({"cache_dir": str(tmp_path)}, no_config=True)
    plugins = {p["name"]: p["state"] for p in (nx_hal.plugins() if configured.records else [])}
    if plugins.get("npu") != "loaded" or plugins.get("tpu") != "loaded":
        pytest.skip(f"needs the npu and tpu (XLA CPU) plugins installed: {plugins}")
    out = subprocess.run([sys.executable, "-c", LIFETIME_SCRIPT, str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = got["before"], got["after"]
    assert got["plugins"] == ["npu:cpu:0", "tpu:cpu:0"]
    assert all(got["reads"].values()), got["reads"]
    assert after["threads"] - before["threads"] <= 2, got
    assert after["fds"] - before["fds"] <= 2, got
    assert after["rss_kib"] - before["rss_kib"] < 4096, got  # leaking: +75 MiB


def test_library_in_the_working_directory_is_not_loaded(tmp_path: Path) -> None:
    """A libtpu.so (and a libtpu dist-info naming it) planted in the working
    directory is not loaded by ``python -c "import nx_hal; nx_hal.devices()"``,
    although ``python -c`` puts the working directory on sys.path."""
    import json
    import shutil
    import subprocess
    import sys

    pytest.importorskip("nx_hal_tpu")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    marker = tmp_path / "LOADED"
    source = tmp_path / "planted.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n'
                      f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n')
    (tmp_path / "libtpu").mkdir()
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(tmp_path / "libtpu" / "libtpu.so"), str(source)],
                   check=True)
    info = tmp_path / "libtpu-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: libtpu\nVersion: 9.9\n")
    (info / "RECORD").write_text("libtpu/libtpu.so,,\nlibtpu-9.9.dist-info/METADATA,,\n")
    code = ("import json, nx_hal, nx_hal_tpu.backends as b; nx_hal.devices(); "
            "print(json.dumps([str(x.path) for x in b.find_backends()]))")
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_LIBRARY_PATH", "NXHAL_TPU_BACKEND_PATHS")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**env, "NX_HAL_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert not any(path.startswith(str(tmp_path)) for path in found), found
    assert not marker.exists(), "the planted library was loaded"
    # The explicit override still names a library.
    named = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, env={**env, "TPU_LIBRARY_PATH": str(tmp_path / "libtpu" / "libtpu.so"),
                                             "NX_HAL_CACHE_DIR": str(tmp_path / "cache"),
                                             "NX_HAL_DISABLE": "tpu,npu,graphcore"})
    assert json.loads(named.stdout.strip().splitlines()[-1])[0] == str(tmp_path / "libtpu" / "libtpu.so")


def test_discovery_cache_key_names_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With "" on sys.path (python -c, the REPL), a plugin module may be found
    in the working directory: a cached entry from one directory must not
    serve another (a checkout's module path was kept for every later run)."""
    import sys
    from importlib import metadata

    from nx_hal import discovery

    ep = metadata.EntryPoint(name="cwd-test", value="nx_hal_cwd_test:register", group="nx_hal")
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    keys = []
    for name in ("a", "b", "a"):
        (tmp_path / name).mkdir(exist_ok=True)
        monkeypatch.chdir(tmp_path / name)
        keys.append(discovery._entry_point_key(ep))
    assert keys[0] != keys[1] and keys[0] == keys[2]


def test_plugin_options_leave_out_unset_optional_values(tmp_path: Path) -> None:
    """An option whose model default is None is not sent to the plugin (its
    library takes only options it knows, and None is no value in C)."""
    from pydantic import BaseModel

    class Options(BaseModel):
        optional: int | None = None
        count: int = 1

    reg = Registry(load_config({"plugins": {"fixture": {"count": 2}}}, no_config=True, cwd=tmp_path))
    record = reg.add(PluginSpec(name="fixture", library=tmp_path / "libnxhal_fixture.so", options_model=Options))
    assert reg.plugin_options(record) == {"count": 2}


def test_load_probes_in_a_child_as_the_setting_says(tmp_path: Path) -> None:
    """``load(record)`` follows isolate_probe; ``isolate=`` overrides it either way."""
    from nx_hal import probe

    lib = build_fixture("hostmem", tmp_path / "libs")
    for setting, given, child in ((True, None, True), (False, None, False), (True, False, False), (False, True, True)):
        reg = Registry(load_config({"isolate_probe": setting, "probe_cache": False, "cache_dir": str(tmp_path / "c")},
                                   no_config=True, cwd=tmp_path))
        before = probe.child_probes
        rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)), isolate=given)
        assert rec.state == "loaded", rec.reason
        assert (probe.child_probes > before) == child, (setting, given)


def test_a_missing_plugin_path_entry_is_quiet_only_when_absolute(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing absolute directory is no error (as in the C loader); a
    relative entry, missing or not, is skipped with the reason."""
    monkeypatch.chdir(tmp_path)
    for entry, warned in ((str(tmp_path / "absent"), False), ("absent", True)):
        caplog.clear()
        reg = Registry(load_config({"plugin_path": [entry]}, no_config=True, cwd=tmp_path))
        reg.discover()
        assert any(entry in r.getMessage() for r in caplog.records) == warned, (entry, caplog.text)


def test_a_bug_in_the_binding_fails_the_plugin_with_its_trace(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception that is not the plugin's error (a bug on nx_hal's side of
    the binding) fails that plugin as INTERNAL, naming the exception, and
    takes nothing else down."""
    import sys

    registry_module = sys.modules["nx_hal.registry"]  # nx_hal.registry is also a function's name

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug in the binding")

    lib = build_fixture("hostmem", tmp_path / "libs")
    monkeypatch.setattr(registry_module.PluginLink, "attach", broken)
    reg = Registry(load_config({"isolate_probe": False}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib)), isolate=False)
    assert (rec.state, rec.code) == ("failed", "INTERNAL")
    assert "KeyError" in rec.reason and "a bug in the binding" in rec.reason
