"""Several PJRT backends in one client; libtpu and CUDA without hardware."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Driver, backends


def test_cpu_devices_and_attributes(run: Driver, cpu_backend: Path) -> None:
    out = run("devices", options={"backend_paths": f"s:cpu={cpu_backend}"})
    assert out.returncode == 0, out.stdout
    devices = out.values("DEVICE")
    assert len(devices) == int(out.values("COUNT")[0]) >= 1
    assert "kind=1 " in devices[0]  # NXHAL_DEVICE_CPU
    assert "formats=stablehlo" in devices[0]
    assert "compat_key=platform=cpu;" in devices[0] and ";stablehlo=1." in devices[0]
    attrs = dict(line.split(" ", 1)[1].split("=", 1) for line in out.values("ATTR")
                 if line.startswith("0 "))
    assert attrs["platform_name"] == "cpu"
    assert attrs["pjrt_api_version"].startswith("0.")
    assert attrs["stablehlo_version"].count(".") == 2
    assert attrs["backend_path"] == str(cpu_backend)
    assert attrs["dlpack_export"] == "zero-copy"
    diag = out.stdout[out.stdout.index("DIAG "):]
    assert f"backend cpu ({cpu_backend}): PJRT API 0." in diag
    assert "stablehlo 1." in diag and "device(s)" in diag


def test_libtpu_without_tpu_is_unavailable_quickly(run: Driver, libtpu_backend: Path) -> None:
    # The guard sets TPU_SKIP_MDS_QUERY; without it libtpu retries the GCE
    # metadata server for minutes. The timeout makes a hang a failure.
    env = {k: v for k, v in os.environ.items() if k != "TPU_SKIP_MDS_QUERY"}
    os.environ.pop("TPU_SKIP_MDS_QUERY", None)
    try:
        out = run("devices", options={"backend_paths": f"s:tpu={libtpu_backend}"}, timeout=30)
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert out.code == "UNAVAILABLE", out.stdout + out.stderr[-2000:]
    assert "libtpu.so" in out.message
    assert "TPU initialization failed" in out.message or "No jellyfish" in out.message
    seconds = float(out.values("CREATE_SECONDS")[0])
    assert seconds < 5.0, seconds


def test_libtpu_reason_while_another_process_holds_it(run: Driver, libtpu_backend: Path) -> None:
    """libtpu takes a machine-wide lockfile; off a TPU the plugin lifts it, so
    a second process still gets libtpu's own reason, not a lockfile error."""
    import subprocess
    import sys

    import pytest

    pytest.importorskip("nx_hal")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import time, nx_hal; nx_hal.configure(no_config=True); "
         "print('loaded', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "loaded"
        out = run("devices", options={"backend_paths": f"s:tpu={libtpu_backend}"}, timeout=30)
    finally:
        holder.kill()
        holder.wait()
    assert out.code == "UNAVAILABLE", out.stdout
    assert "lockfile" not in out.message
    assert "TPU initialization failed" in out.message or "No jellyfish" in out.message


def test_libtpu_without_tpu_writes_no_log_files(run: Driver, libtpu_backend: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a TPU the plugin sends libtpu's logs to stderr, held back like its
    other output (they say only that no TPU was found), so probes fill
    neither $TMPDIR nor /tmp/tpu_logs, nor leave that folder empty; a log
    folder the user names still gets them."""
    for name in ("TPU_LOG_DIR", "LIBTPU_INIT_ARGS"):
        monkeypatch.delenv(name, raising=False)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.chdir(tmp_path)
    default = Path("/tmp/tpu_logs")  # libtpu's default folder (with TMPDIR unset)
    there = default.exists()
    out = run("devices", options={"backend_paths": f"s:tpu={libtpu_backend}"}, timeout=30,
              env={"TMPDIR": str(temp)})
    assert out.code == "UNAVAILABLE", out.stdout
    assert "No jellyfish" in out.message or "TPU initialization failed" in out.message  # the reason is kept
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["tmp"]
    assert there or not default.exists()
    chosen = tmp_path / "logs"
    out = run("devices", options={"backend_paths": f"s:tpu={libtpu_backend}"}, timeout=30,
              env={"TMPDIR": str(temp), "TPU_LOG_DIR": str(chosen)})
    assert out.code == "UNAVAILABLE", out.stdout
    assert any(chosen.iterdir()), "libtpu writes its logs where the user asks"


def test_cuda_without_gpu_is_unavailable_with_reason(run: Driver, cuda_backend: Path) -> None:
    out = run("devices", options={"backend_paths": f"s:cuda12={cuda_backend}"}, timeout=60)
    if out.returncode == 0:  # a GPU is there: then it must show as one
        assert "kind=2 " in out.values("DEVICE")[0]
        return
    assert out.code == "UNAVAILABLE", out.stdout
    assert "PJRT_Client_Create failed" in out.message
    assert "GPU" in out.message or "CUDA" in out.message


def test_all_backends_in_one_client(run: Driver, cpu_backend: Path) -> None:
    paths = backends.backend_paths()
    assert paths is not None and f"cpu={cpu_backend}" in paths
    out = run("devices", options={"backend_paths": f"s:{paths};broken=/nonexistent/libx.so"},
              timeout=60)
    assert out.returncode == 0, out.stdout
    diag = out.stdout[out.stdout.index("DIAG "):]
    # Every backend is reported: those that gave devices and why the others did not.
    assert "backend cpu" in diag and "device(s)" in diag
    assert "backend broken (/nonexistent/libx.so): not available: cannot load" in diag
    for found in backends.find_backends():
        assert f"backend {found.label} ({found.path})" in diag
    # Loading the same libraries again in a second client of the process is
    # covered by PJRT_Plugin_Initialize running once per library.


def test_vendor_logs_held_back_when_backends_fail(libtpu_backend: Path) -> None:
    """libtpu prints pages of warnings when it finds no TPU; the plugin keeps
    them off the user's terminal (its reason is in the diagnostics) unless
    NX_HAL_VENDOR_LOGS=1."""
    import subprocess
    import sys

    import pytest

    pytest.importorskip("nx_hal")
    code = ("import nx_hal; nx_hal.configure(no_config=True); "
            "print(nx_hal.registry().records['tpu'].diagnostics)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert "No jellyfish device found" in quiet.stdout  # the reason is kept
    assert "libtpu" not in quiet.stderr and "InitGoogle" not in quiet.stderr, quiet.stderr
    loud = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "NX_HAL_VENDOR_LOGS": "1"}, timeout=120)
    assert loud.returncode == 0
    assert loud.stderr.strip(), "with NX_HAL_VENDOR_LOGS=1 libtpu's own output shows"


# -- which PJRT create options a backend gets: its family, from its label or
# -- else from the platform its PJRT client reports (never from a file name)


def test_family_from_the_platform_when_nothing_states_it(run: Driver, cpu_backend: Path,
                                                         tmp_path: Path) -> None:
    # A name that says nothing: the PJRT client reports platform "cpu", so
    # cpu_device_count reaches it whether given by library_path or unlabelled.
    plain = tmp_path / "libplain.so"
    plain.symlink_to(cpu_backend)
    for given in ({"library_path": f"s:{plain}"}, {"backend_paths": f"s:{plain}"},
                  {"backend_paths": f"s:mine={plain}"}):
        out = run("devices", options={**given, "cpu_device_count": "i:3"})
        assert out.returncode == 0, out.stdout
        assert out.values("COUNT") == ["3"], given
        assert "kind=1 " in out.values("DEVICE")[0]  # NXHAL_DEVICE_CPU


def test_family_stated_by_the_label(run: Driver, cpu_backend: Path, tmp_path: Path) -> None:
    plain = tmp_path / "libplain.so"
    plain.symlink_to(cpu_backend)
    out = run("devices", options={"backend_paths": f"s:cpu:mine={plain}", "cpu_device_count": "i:3"})
    assert out.returncode == 0, out.stdout
    assert out.values("COUNT") == ["3"]
    assert f"backend mine ({plain}): PJRT API" in out.stdout  # shown by its name
    # A stated family is taken as stated: a gpu backend gets no cpu options.
    out = run("devices", options={"backend_paths": f"s:gpu:mine={cpu_backend}",
                                  "cpu_device_count": "i:3"})
    assert out.returncode == 0, out.stdout
    assert out.values("COUNT") != ["3"]
    assert "kind=1 " in out.values("DEVICE")[0]  # the kind still comes from PJRT


def test_python_labels_state_the_family() -> None:
    assert backends.Backend("cuda12", Path("/x.so"), "gpu").option_label == "gpu:cuda12"
    assert backends.Backend("cpu", Path("/x.so"), "cpu").option_label == "cpu"
    assert backends.Backend("tpu", Path("/x.so"), "tpu").option_label == "tpu"
    paths = backends.backend_paths()
    for entry in (paths.split(";") if paths else []):
        label = entry.split("=", 1)[0]
        assert label in ("cpu", "tpu") or label.startswith("gpu:"), entry
