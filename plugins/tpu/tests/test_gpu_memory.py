"""The GPU memory guard: XLA's CUDA client preallocates 75% of a GPU, and
when other processes hold that memory it aborts the process at a later
allocation (seen on an H100 shared by 14 processes, with a free-memory check
before each client too: they start together). So a GPU client allocates as
needed unless the user asks for preallocation; then it is refused when NVML
says it cannot fit now. A fake NVML gives the numbers and a fake PJRT library (over XLA CPU)
prints the create options it was given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE.parent

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from nx_hal_tpu import TpuCompileOptions, TpuOptions
from nx_hal.config import load_config
from nx_hal.plugin import PluginSpec
from nx_hal.registry import Registry
from pathlib import Path
opts = json.loads(sys.argv[3])
reg = Registry(load_config({"plugins": {"tpu": opts}, "cache_dir": sys.argv[4]}, no_config=True))
reg.add(PluginSpec(name="tpu", library=Path(sys.argv[2]), options_model=TpuOptions,
                   compile_options_model=TpuCompileOptions, package="nx-hal-tpu", source="test"))
reg.load_all(isolate=False)
rec = reg.records["tpu"]
print("STATE", rec.state, flush=True)
print("REASON", json.dumps(rec.reason), flush=True)
print("DIAGNOSTICS", json.dumps(rec.diagnostics), flush=True)
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nvml") / "libfake_nvml.so"
    subprocess.run([os.environ.get("CC", "cc"), "-std=c99", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    str(HERE / "fake_nvml.c"), "-o", str(out)], check=True)
    return out


def _create(tmp_path: Path, plugin_library: Path, fake_pjrt: Path, cpu_backend: Path, fake_nvml: Path,
            free_mib: int, total_mib: int, **options: object) -> tuple[str, str, str, list[str]]:
    pytest.importorskip("nx_hal")
    env = dict(os.environ, FAKE_PJRT_REAL=str(cpu_backend), FAKE_PJRT_MODE="options",
               NXHAL_NVML_LIBRARY=str(fake_nvml), FAKE_NVML_FREE_MIB=str(free_mib),
               FAKE_NVML_TOTAL_MIB=str(total_mib))
    opts = {"backend_paths": f"gpu:fake={fake_pjrt}", **options}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(PLUGIN_DIR), str(plugin_library), json.dumps(opts),
                           str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    fields = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in lines if ln.startswith(("STATE", "REASON",
                                                                                          "DIAGNOSTICS"))}
    created = [ln.split(" ", 2)[2] for ln in lines if ln.startswith("FAKE_PJRT create_option")]
    return fields["STATE"], json.loads(fields["REASON"]), json.loads(fields["DIAGNOSTICS"]), created


def test_gpu_clients_allocate_as_needed_unless_asked(tmp_path: Path, plugin_library: Path, fake_pjrt: Path,
                                                     cpu_backend: Path, fake_nvml: Path) -> None:
    # Whatever NVML says: processes starting together all see a free GPU.
    for free_mib in (80_000, 10_000):
        state, _, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, fake_nvml,
                                       free_mib=free_mib, total_mib=80_000)
        assert state == "loaded"
        assert created == ["preallocate=0"]
    _, _, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, fake_nvml,
                               free_mib=60_000, total_mib=80_000, gpu_memory_fraction=0.5)
    assert sorted(created) == ["memory_fraction=0.5", "preallocate=0"]


def test_asked_for_preallocation_that_fits_is_passed_on(tmp_path: Path, plugin_library: Path, fake_pjrt: Path,
                                                        cpu_backend: Path, fake_nvml: Path) -> None:
    # 50% of 80,000 MiB plus 256 MiB of headroom fits in 60,000 MiB free.
    state, _, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, fake_nvml,
                                   free_mib=60_000, total_mib=80_000, gpu_memory_fraction=0.5,
                                   gpu_preallocate=True)
    assert state == "loaded"
    assert sorted(created) == ["memory_fraction=0.5", "preallocate=1"]
    # The default 75% does not fit in the same 60,000 MiB.
    state, reason, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, fake_nvml,
                                        free_mib=60_000, total_mib=80_000, gpu_preallocate=True)
    assert state == "unavailable" and created == []
    assert "preallocating 75% of it does not fit" in reason


def test_asked_for_preallocation_that_cannot_fit_is_refused(tmp_path: Path, plugin_library: Path,
                                                            fake_pjrt: Path, cpu_backend: Path,
                                                            fake_nvml: Path) -> None:
    state, reason, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, fake_nvml,
                                        free_mib=10_000, total_mib=80_000, gpu_preallocate=True)
    assert state == "unavailable"
    assert created == []  # refused before PJRT_Client_Create
    assert "GPU 0 has 10000 MiB free of 80000 MiB" in reason
    assert "set gpu_preallocate=false, or a gpu_memory_fraction below 0.12" in reason


def test_allocating_as_needed_is_never_second_guessed(tmp_path: Path, plugin_library: Path, fake_pjrt: Path,
                                                      cpu_backend: Path, fake_nvml: Path) -> None:
    state, _, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, fake_nvml,
                                   free_mib=100, total_mib=80_000, gpu_preallocate=False)
    assert state == "loaded"
    assert created == ["preallocate=0"]


def test_no_nvml_passes_asked_preallocation_on(tmp_path: Path, plugin_library: Path, fake_pjrt: Path,
                                               cpu_backend: Path) -> None:
    state, _, _, created = _create(tmp_path, plugin_library, fake_pjrt, cpu_backend, tmp_path / "no-nvml.so",
                                   free_mib=100, total_mib=80_000, gpu_preallocate=True)
    assert state == "loaded"
    assert created == ["preallocate=1"]
