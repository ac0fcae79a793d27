"""libnxhal_npu.so opens OpenVINO's C library at run time instead of linking
it, so it loads beside any openvino release of its requirement. These tests
check the link, the search order and the error when nothing is found. Cases
that change where the plugin looks run in a child process: the library is
loaded once per process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import pytest
from nx_hal_npu import LIBRARY

from nx_hal.device import Device

ENV = "NXHAL_NPU_OPENVINO_LIBRARY"

# Runs in a child: opens a plugin library, creates a client and prints what
# happened as JSON (plugin info, the devices' attributes or the error).
CHILD = r"""
import json, sys
import nx_hal
from nx_hal.library import open_library
from nx_hal.native import check, ffi, lib, text

library = open_library(sys.argv[1], "npu")
out = {"sdk_version": library.info.sdk_version}
try:
    client = library.create_client({}, "npu")
except nx_hal.NxHalError as e:
    out["error"] = type(e).__name__
    out["message"] = str(e)
else:
    api = library.api
    devices = []
    for handle in client.device_handles:
        count = ffi.new("size_t*")
        check(api, lib.nxhal_call_device_attribute_count(api, handle, count), "npu")
        attr = ffi.new("nxhal_attribute_t*")
        attrs = {}
        for i in range(count[0]):
            attr.struct_size = ffi.sizeof("nxhal_attribute_t")
            check(api, lib.nxhal_call_device_attribute(api, handle, i, attr), "npu")
            attrs[text(attr.name)] = text(attr.string_value)
        devices.append(attrs)
    out["devices"] = devices
print(json.dumps(out))
"""


def run_child(library: Path, **env: str) -> dict[str, object]:
    child_env = {k: v for k, v in os.environ.items() if k != ENV}
    child_env.update(env)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(library)], capture_output=True,
                          text=True, env=child_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def openvino_requirement() -> str:
    """The `openvino` requirement of the installed nx-hal-npu, e.g. openvino<2027,>=2025.1."""
    for req in requires("nx-hal-npu") or []:
        if req.replace(" ", "").startswith("openvino") and "extra" not in req:
            return req.replace(" ", "")
    raise AssertionError("nx-hal-npu declares no openvino requirement")


def wheel_libs() -> Path:
    import openvino

    return Path(openvino.__file__).parent / "libs"


def link_wheel_libs(libs: Path) -> None:
    """<libs>/* as symlinks to the wheel's libraries: another install of them."""
    libs.mkdir(parents=True)
    for f in wheel_libs().iterdir():
        (libs / f.name).symlink_to(f)


def test_plugin_does_not_link_openvino() -> None:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf (binutils)")
    dynamic = subprocess.run([readelf, "-d", str(LIBRARY)], capture_output=True, text=True,
                             check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed, "readelf listed no NEEDED entries at all: the check below would prove nothing"
    assert not [line for line in needed if "openvino" in line], dynamic
    # An RPATH into the openvino wheel would only matter for a linked library.
    assert "openvino" not in dynamic


def test_loads_the_wheel_beside_it(dev: Device) -> None:
    import openvino as ov

    library = Path(str(dev.attributes["openvino_library"]))
    assert library.parent == wheel_libs().resolve()
    assert library.name.startswith("libopenvino_c.so.")
    assert dev.attributes["openvino_version"] == ov.get_version()


def test_requirement_matches_the_plugin() -> None:
    # The C side's fix message and version check carry the same range as the
    # package metadata; the message spells it in pip's order.
    req = openvino_requirement()
    bounds = sorted(req[len("openvino"):].split(","))
    assert bounds == ["<2027", ">=2025.1"], req
    result = run_child(LIBRARY, **{ENV: "/nonexistent/libopenvino_c.so.1"})
    assert "pip install 'openvino>=2025.1,<2027'" in str(result["message"])


def test_missing_explicit_library(tmp_path: Path) -> None:
    missing = tmp_path / "libopenvino_c.so.2999"
    result = run_child(LIBRARY, **{ENV: str(missing)})
    assert result["sdk_version"] == "", "plugin_info must work, with no OpenVINO version"
    assert result["error"] == "UnavailableError"
    message = str(result["message"])
    assert f"{ENV}={missing}" in message
    assert "cannot open shared object file" in message  # dlerror's own text
    # A path the user named is the only one tried: no silent fallback to the wheel.
    assert "openvino/libs" not in message
    assert "pip install 'openvino>=" in message


def test_explicit_library_is_used(tmp_path: Path) -> None:
    # Another copy of the wheel's libraries, named explicitly, wins over the
    # wheel beside the plugin.
    libs = tmp_path / "ov" / "libs"
    link_wheel_libs(libs)
    explicit = next(libs.glob("libopenvino_c.so.*"))
    result = run_child(LIBRARY, **{ENV: str(explicit)})
    assert "error" not in result, result
    devices = result["devices"]
    assert isinstance(devices, list)
    assert [d["openvino_device"] for d in devices if d["openvino_device"] == "CPU"] == ["CPU"]
    assert {d["openvino_library"] for d in devices} == {str(explicit)}


def doctored_plugin(site: Path) -> Path:
    """A copy of the plugin in <site>/nx_hal_npu, as if installed there."""
    (site / "nx_hal_npu").mkdir(parents=True)
    copy = site / "nx_hal_npu" / LIBRARY.name
    shutil.copy2(LIBRARY, copy)
    return copy


def test_nothing_found(tmp_path: Path) -> None:
    plugin = doctored_plugin(tmp_path / "site")
    result = run_child(plugin)
    if "error" not in result:
        pytest.skip("this machine has a system-wide libopenvino_c.so")
    assert result["error"] == "UnavailableError"
    message = str(result["message"])
    # All three places, in order, each with why it failed.
    wheel = f"{(tmp_path / 'site').resolve()}/openvino/libs/libopenvino_c.so* (no such directory"
    system = "libopenvino_c.so through the system loader: libopenvino_c.so: cannot open shared object"
    assert message.index(f"${ENV}: not set") < message.index(wheel) < message.index(system)
    assert message.endswith("libopenvino_c.so.<ver>") and "pip install 'openvino>=2025.1,<2027'" in message


def test_wheel_search_takes_the_highest_that_loads(tmp_path: Path) -> None:
    plugin = doctored_plugin(tmp_path / "site")
    libs = tmp_path / "site" / "openvino" / "libs"
    link_wheel_libs(libs)
    real = next(libs.glob("libopenvino_c.so.*"))
    # A higher version that is not a library: tried first, reported, skipped.
    (libs / "libopenvino_c.so.99990").write_bytes(b"not an ELF file")
    result = run_child(plugin)
    assert "error" not in result, result
    devices = result["devices"]
    assert isinstance(devices, list) and devices
    assert {d["openvino_library"] for d in devices} == {f"{libs.resolve()}/{real.name}"}
