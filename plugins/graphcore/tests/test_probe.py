"""The probe on fake filesystem trees: each case must give its exact reason.

The test-hooks build reads /sys and /dev under NXHAL_GRAPHCORE_TEST_ROOT and
loads the backend named by NXHAL_GRAPHCORE_TEST_BACKEND; HOME,
IPUOF_CONFIG_PATH, IPUOF_VIPU_API_HOST and IPUOF_VIPU_API_PARTITION_ID are the
real variables, set per test. /etc/ipuof.conf.d is read under the root too.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from conftest import Build, run_driver

NOT_BUILT = ("the Poplar backend was not built (no Poplar SDK: POPLAR_SDK_ENABLED was off when "
             "this library was built)")


def make_tree(tmp_path: Path, *, pci_vendor: str | None = None, dev_ipu: bool = False,
              ipuof_dir_file: bool = False) -> tuple[Path, Path]:
    """A machine with an Intel PCI device, a tty, and optionally an IPU."""
    root = tmp_path / "root"
    home = tmp_path / "home"
    (root / "sys/bus/pci/devices/0000:00:1f.0").mkdir(parents=True)
    (root / "sys/bus/pci/devices/0000:00:1f.0/vendor").write_text("0x8086\n")
    (root / "dev").mkdir()
    (root / "dev/tty0").write_text("")
    home.mkdir()
    if pci_vendor is not None:
        (root / "sys/bus/pci/devices/0000:3b:00.0").mkdir()
        (root / "sys/bus/pci/devices/0000:3b:00.0/vendor").write_text(pci_vendor)
    if dev_ipu:
        (root / "dev/ipu0").write_text("")
    if ipuof_dir_file:
        (home / ".ipuof.conf.d").mkdir()
        (home / ".ipuof.conf.d/partition.conf").write_text("{}\n")
    return root, home


def checked(root: Path, home: Path, *, pci: int = 0, dev: int = 0,
            ipuof_env: str | None = None, ipuof_env_exists: bool = False,
            ipuof_files: int = 0, etc_files: int = 0, vipu_host: str | None = None,
            vipu_partition: str | None = None) -> str:
    env_text = ("IPUOF_CONFIG_PATH (unset)" if ipuof_env is None else
                f"IPUOF_CONFIG_PATH={ipuof_env} ({'present' if ipuof_env_exists else 'no such file'})")
    host_text = ("IPUOF_VIPU_API_HOST (unset)" if vipu_host is None else
                 f"IPUOF_VIPU_API_HOST={vipu_host}")
    partition_text = ("IPUOF_VIPU_API_PARTITION_ID (unset)" if vipu_partition is None else
                      f"IPUOF_VIPU_API_PARTITION_ID={vipu_partition}")
    return (f"PCI vendor 0x1d95 under {root}/sys/bus/pci/devices ({pci} found), "
            f"{root}/dev/ipu* ({dev} found), {env_text}, "
            f"{home}/.ipuof.conf.d/ ({ipuof_files} config file(s)), "
            f"{root}/etc/ipuof.conf.d/ ({etc_files} config file(s)), {host_text}, "
            f"{partition_text}")


def create(build: Build, root: Path, home: Path, *options: str,
           backend: Path | None = None, ipuof: str | None = None,
           vipu_host: str | None = None, vipu_partition: str | None = None,
           fake_devices: int | None = None) -> dict[str, str]:
    env: dict[str, str | None] = {
        "NXHAL_GRAPHCORE_TEST_ROOT": str(root),
        "HOME": str(home),
        "IPUOF_CONFIG_PATH": ipuof,
        "IPUOF_VIPU_API_HOST": vipu_host,
        "IPUOF_VIPU_API_PARTITION_ID": vipu_partition,
        "NXHAL_GRAPHCORE_TEST_BACKEND": str(backend) if backend is not None else None,
        "GC_FAKE_DEVICES": str(fake_devices) if fake_devices is not None else None,
    }
    return run_driver(build, build.testhooks, "create", *options, env=env)


def test_no_hardware_no_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    out = create(build, root, home)
    assert out["create.status"] == "UNAVAILABLE"
    assert out["client"] == "NULL"
    assert out["create.message"] == (
        f"graphcore: {NOT_BUILT}; no IPU found: checked {checked(root, home)}")


def test_pci_ipu_present_without_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, pci_vendor="0x1d95\n")
    out = create(build, root, home)
    assert out["create.status"] == "UNAVAILABLE"
    assert out["create.message"] == (
        "graphcore: IPU hardware is present but the Poplar SDK is not: found 1 PCI device(s) "
        "with vendor 0x1d95 (first 0000:3b:00.0); "
        + NOT_BUILT + ". Rebuild nx-hal-graphcore on this machine with the SDK enabled "
        "(see plugins/graphcore/README.md)")


def test_other_pci_vendor_is_not_an_ipu(build: Build, tmp_path: Path) -> None:
    # 0x1d96 differs from Graphcore's id in the last digit only.
    root, home = make_tree(tmp_path, pci_vendor="0x1d96\n")
    out = create(build, root, home)
    assert out["create.message"] == (
        f"graphcore: {NOT_BUILT}; no IPU found: checked {checked(root, home)}")


def test_dev_ipu0_present_without_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, dev_ipu=True)
    out = create(build, root, home)
    assert out["create.status"] == "UNAVAILABLE"
    assert out["create.message"].startswith(
        "graphcore: IPU hardware is present but the Poplar SDK is not: "
        "found 1 /dev/ipu* node(s) (first /dev/ipu0); " + NOT_BUILT)


def test_ipuof_config_path_present_without_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    config = tmp_path / "ipuof.conf"
    config.write_text("{}\n")
    out = create(build, root, home, ipuof=str(config))
    assert out["create.message"].startswith(
        "graphcore: IPU hardware is present but the Poplar SDK is not: found IPU-over-fabric "
        f"config IPUOF_CONFIG_PATH={config}; " + NOT_BUILT)


def test_ipuof_conf_d_present_without_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, ipuof_dir_file=True)
    out = create(build, root, home)
    assert out["create.message"].startswith(
        "graphcore: IPU hardware is present but the Poplar SDK is not: found IPU-over-fabric "
        f"config in {home}/.ipuof.conf.d/ (1 file(s)); " + NOT_BUILT)


def test_etc_ipuof_conf_d_present_without_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    (root / "etc/ipuof.conf.d").mkdir(parents=True)
    (root / "etc/ipuof.conf.d/pod16.conf").write_text("{}\n")
    (root / "etc/ipuof.conf.d/pod64.conf").write_text("{}\n")
    out = create(build, root, home)
    assert out["create.message"].startswith(
        "graphcore: IPU hardware is present but the Poplar SDK is not: found IPU-over-fabric "
        f"config in {root}/etc/ipuof.conf.d/ (2 file(s)); " + NOT_BUILT)


def test_only_conf_files_count(build: Build, tmp_path: Path) -> None:
    """Poplar reads *.conf files only: other files and directories named
    *.conf are no partition, in either config directory."""
    root, home = make_tree(tmp_path)
    for folder in (home / ".ipuof.conf.d", root / "etc/ipuof.conf.d"):
        folder.mkdir(parents=True)
        (folder / "README").write_text("how to make a partition\n")
        (folder / "pod16.conf.bak").write_text("{}\n")
        (folder / "pod16.conf~").write_text("{}\n")
        (folder / ".conf").write_text("{}\n")
        (folder / "subdir.conf").mkdir()
    out = create(build, root, home)
    assert out["create.message"] == (
        f"graphcore: {NOT_BUILT}; no IPU found: checked {checked(root, home)}")
    (root / "etc/ipuof.conf.d/pod16.conf").write_text("{}\n")
    out = create(build, root, home)
    assert "found IPU-over-fabric config in " + f"{root}/etc/ipuof.conf.d/ (1 file(s)); " in (
        out["create.message"])


def test_vipu_partition_env_present_without_sdk(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    out = create(build, root, home, vipu_host="vipu.example", vipu_partition="p16")
    assert out["create.message"].startswith(
        "graphcore: IPU hardware is present but the Poplar SDK is not: found V-IPU partition "
        "IPUOF_VIPU_API_PARTITION_ID=p16 on IPUOF_VIPU_API_HOST=vipu.example; " + NOT_BUILT)


def test_vipu_host_without_partition_is_not_hardware(build: Build, tmp_path: Path) -> None:
    """A host alone names no partition (nor an id alone a server): both are
    reported as checked, neither counts as an IPU."""
    root, home = make_tree(tmp_path)
    out = create(build, root, home, vipu_host="vipu.example")
    assert out["create.message"] == (
        f"graphcore: {NOT_BUILT}; no IPU found: checked "
        + checked(root, home, vipu_host="vipu.example"))
    out = create(build, root, home, vipu_partition="p16", vipu_host="")
    assert out["create.message"] == (
        f"graphcore: {NOT_BUILT}; no IPU found: checked "
        + checked(root, home, vipu_partition="p16"))


def test_ipuof_config_path_to_missing_file_is_not_hardware(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    missing = str(tmp_path / "nowhere.conf")
    out = create(build, root, home, ipuof=missing)
    assert out["create.message"] == (
        f"graphcore: {NOT_BUILT}; no IPU found: checked "
        + checked(root, home, ipuof_env=missing, ipuof_env_exists=False))


def test_everything_present_lists_all(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, pci_vendor="0x1d95", dev_ipu=True, ipuof_dir_file=True)
    (root / "dev/ipu1").write_text("")
    out = create(build, root, home)
    assert ("found 1 PCI device(s) with vendor 0x1d95 (first 0000:3b:00.0), "
            "2 /dev/ipu* node(s) (first /dev/ipu0), "
            f"IPU-over-fabric config in {home}/.ipuof.conf.d/ (1 file(s)); ") in out["create.message"]


def test_backend_needing_missing_libpoplar(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    backend = tmp_path / "libnxhal_graphcore_poplar.so"
    shutil.copy(build.backend_needs_poplar, backend)
    out = create(build, root, home, backend=backend)
    assert out["create.status"] == "UNAVAILABLE"
    assert out["create.message"] == (
        f"graphcore: the Poplar backend {backend} cannot be loaded: libpoplar.so: cannot open "
        "shared object file: No such file or directory; no IPU found: checked "
        + checked(root, home))


def test_backend_unloadable_with_hardware_present(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, dev_ipu=True)
    backend = tmp_path / "libnxhal_graphcore_poplar.so"
    shutil.copy(build.backend_needs_poplar, backend)
    out = create(build, root, home, backend=backend)
    assert out["create.message"] == (
        "graphcore: IPU hardware is present but the Poplar SDK cannot be used: found 1 /dev/ipu* "
        f"node(s) (first /dev/ipu0); the Poplar backend {backend} cannot be loaded: libpoplar.so: "
        "cannot open shared object file: No such file or directory")


def test_backend_file_missing(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    backend = tmp_path / "absent.so"
    out = create(build, root, home, backend=backend)
    assert out["create.message"].startswith(
        f"graphcore: the Poplar backend {backend} cannot be loaded: {backend}: cannot open "
        "shared object file: No such file or directory; no IPU found")


def test_backend_not_a_library(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    backend = tmp_path / "libnxhal_graphcore_poplar.so"
    backend.write_bytes(b"not an ELF file at all, but long enough to be read" * 4)
    out = create(build, root, home, backend=backend)
    assert out["create.status"] == "UNAVAILABLE"
    assert f"the Poplar backend {backend} cannot be loaded: {backend}: invalid ELF header" in (
        out["create.message"])


def test_backend_without_entry_symbol(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    out = create(build, root, home, backend=build.fake_libpoplar)
    assert out["create.message"].startswith(
        f"graphcore: the Poplar backend {build.fake_libpoplar} loaded but lacks "
        "nxhal_graphcore_backend_v1: ")


def test_backend_loads_but_finds_no_device(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, pci_vendor="0x1d95")
    out = create(build, root, home, "i:num_ipus=4", backend=build.fake_backend)
    assert out["create.status"] == "UNAVAILABLE"
    assert out["create.message"] == (
        "graphcore: Poplar fake-0.0 (test stand-in, not Poplar) found no device with 4 IPU(s) "
        "(fake DeviceManager returned no devices); found 1 PCI device(s) with vendor 0x1d95 "
        "(first 0000:3b:00.0)")


def test_backend_no_device_no_hardware_suggests_ipu_model(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path)
    out = create(build, root, home, backend=build.fake_backend)
    assert out["create.message"].endswith(
        f"no IPU found: checked {checked(root, home)}; set ipu_model=true to use Poplar's IPU Model")


def test_backend_with_devices_gives_a_client(build: Build, tmp_path: Path) -> None:
    root, home = make_tree(tmp_path, dev_ipu=True)
    out = create(build, root, home, "i:num_ipus=2", backend=build.fake_backend, fake_devices=2)
    assert out["create.status"] == "OK"
    assert out["devices"] == "2"
    assert out["device1.attr.device_id"] == "1"
    assert out["device0.compat_key"] == "graphcore:fake-0.0:ipu2:2ipu"
    assert out["diagnostics"] == (
        "graphcore: Poplar fake-0.0 (test stand-in, not Poplar), 2 device(s); hardware probe: "
        "found 1 /dev/ipu* node(s) (first /dev/ipu0)")


def test_production_library_ignores_test_hooks(build: Build, tmp_path: Path) -> None:
    """The installed library probes the real machine whatever the environment says."""
    root, home = make_tree(tmp_path, pci_vendor="0x1d95", dev_ipu=True)
    out = run_driver(build, build.library, "create", env={
        "NXHAL_GRAPHCORE_TEST_ROOT": str(root),
        "NXHAL_GRAPHCORE_TEST_BACKEND": str(build.fake_backend),
        "HOME": str(home),
    })
    assert out["create.status"] == "UNAVAILABLE"
    message = out["create.message"]
    assert NOT_BUILT in message
    assert str(root) not in message
    assert "under /sys/bus/pci/devices (" in message


def test_empty_home_falls_back_to_passwd(build: Build, tmp_path: Path) -> None:
    root, _ = make_tree(tmp_path)
    out = run_driver(build, build.testhooks, "create", env={
        "NXHAL_GRAPHCORE_TEST_ROOT": str(root), "HOME": ""})
    passwd_home = pwd.getpwuid(os.getuid()).pw_dir
    assert f", {passwd_home}/.ipuof.conf.d/ (" in out["create.message"]


def test_backend_is_looked_up_next_to_the_library(build: Build, tmp_path: Path) -> None:
    """NXHAL_GRAPHCORE_TEST_BACKEND="" marks the backend built but keeps the
    real lookup: libnxhal_graphcore_poplar.so in the plugin library's directory."""
    root, home = make_tree(tmp_path)
    plugin_dir = tmp_path / "site-packages" / "nx_hal_graphcore"
    plugin_dir.mkdir(parents=True)
    library = plugin_dir / "libnxhal_graphcore.so"
    shutil.copy(build.testhooks, library)
    env: dict[str, str | None] = {"NXHAL_GRAPHCORE_TEST_ROOT": str(root), "HOME": str(home),
                                  "NXHAL_GRAPHCORE_TEST_BACKEND": ""}
    out = run_driver(build, library, "create", "b:ipu_model=1", env=env)
    expected = plugin_dir / "libnxhal_graphcore_poplar.so"
    assert out["create.message"].startswith(
        f"graphcore: the Poplar backend {expected} cannot be loaded: {expected}: cannot open "
        "shared object file: No such file or directory")
    shutil.copy(build.fake_backend, expected)
    out = run_driver(build, library, "create", "b:ipu_model=1", env=env)
    assert out["create.status"] == "OK"
    assert out["device0.name"] == "IPU Model (fake test backend)"
