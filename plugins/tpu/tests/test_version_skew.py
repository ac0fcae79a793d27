"""PJRT tables from other versions: refused before any call, or used only as
far as they reach (a fake plugin forwards to XLA CPU with a doctored table)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Driver, Outcome
from programs import results

HERE = Path(__file__).resolve().parent


def _run(run: Driver, tmp: Path, fake: Path, real: Path, mode: str, *args: str | Path,
         arrays: tuple[np.ndarray, ...] = (), options: dict[str, str] | None = None) -> Outcome:
    env = {"FAKE_PJRT_REAL": str(real), "FAKE_PJRT_MODE": mode}
    opts = {"library_path": f"s:{fake}", **(options or {})}
    if args and args[0] == "run":
        from programs import input_spec

        specs = [input_spec(tmp, i, a) for i, a in enumerate(arrays)]
        return run(*args, "--outdir", tmp, *specs, options=opts, env=env)
    return run(*args, options=opts, env=env)


X = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def test_other_major_version_is_refused(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                        cpu_backend: Path) -> None:
    out = _run(run, tmp_path, fake_pjrt, cpu_backend, "major", "devices")
    assert out.code == "UNAVAILABLE"
    assert "PJRT API 1." in out.message and "incompatible" in out.message


def test_missing_required_entry_is_refused(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                           cpu_backend: Path) -> None:
    out = _run(run, tmp_path, fake_pjrt, cpu_backend, "noclient", "devices")
    assert out.code == "UNAVAILABLE"
    assert "lacks PJRT_Client_Create" in out.message


def test_older_table_works_without_newer_entries(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                                 cpu_backend: Path) -> None:
    # Output types/dims entries are past the table's end: never called, the
    # shapes come from the output buffers instead.
    out = _run(run, tmp_path, fake_pjrt, cpu_backend, "old", "run",
               HERE / "programs" / "add.mlir", arrays=(X, X))
    assert out.returncode == 0, out.stdout
    assert out.values("OUT") == ["0 output0 invalid ?"]
    assert out.values("RESULT")[0].startswith("0 f32 4 ")
    np.testing.assert_array_equal(results(out)[0], 2 * X)
    devices = _run(run, tmp_path, fake_pjrt, cpu_backend, "old", "devices")
    assert "PJRT API 0.20" in devices.stdout


def test_newer_table_keeps_working(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                   cpu_backend: Path) -> None:
    out = _run(run, tmp_path, fake_pjrt, cpu_backend, "newer", "run",
               HERE / "programs" / "add.mlir", arrays=(X, X))
    assert out.returncode == 0, out.stdout
    np.testing.assert_array_equal(results(out)[0], 2 * X)


def test_null_entry_is_unimplemented(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                     cpu_backend: Path) -> None:
    out = _run(run, tmp_path, fake_pjrt, cpu_backend, "nullser", "run",
               HERE / "programs" / "add.mlir", "--save", str(tmp_path / "x.blob"), arrays=(X, X))
    assert out.code == "UNIMPLEMENTED"
    assert "cannot serialize" in out.message


def test_replicas_need_the_entry_that_places_them(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                                  cpu_backend: Path) -> None:
    # Not a required entry: a table without it refuses replicas, not crashes.
    two = {"cpu_device_count": "i:2"}
    out = _run(run, tmp_path, fake_pjrt, cpu_backend, "noreplicas", "run",
               HERE / "programs" / "add.mlir", "--copt", "num_replicas=i:2", arrays=(X, X, X, X),
               options=two)
    assert out.code == "UNIMPLEMENTED", out.stdout
    assert "PJRT_LoadedExecutable_AddressableDevices" in out.message
    one = _run(run, tmp_path, fake_pjrt, cpu_backend, "noreplicas", "run",
               HERE / "programs" / "add.mlir", arrays=(X, X), options=two)
    assert one.returncode == 0, one.stdout
    np.testing.assert_array_equal(results(one)[0], 2 * X)


@pytest.mark.parametrize(("version", "donation"), [
    ("1.13.3", "copy"), ("1.19.99", "copy"), ("0.30.0", "copy"), ("", "copy"), ("x", "copy"),
    ("1.20.0", "in place"), ("1.20", "in place"), ("1.20.1", "in place"), ("1.21.0", "in place"),
    ("2.0.0", "in place"),
])
def test_a_cpu_backend_donates_in_place_from_stablehlo_1_20(run: Driver, tmp_path: Path, fake_pjrt: Path,
                                                           cpu_backend: Path, version: str,
                                                           donation: str) -> None:
    """XLA CPU computes donated steps right from StableHLO 1.20 on (measured:
    bench/donation_check.py); an older, unknown or unstated version copies."""
    out = run("devices", options={"backend_paths": f"s:cpu={fake_pjrt}"},
              env={"FAKE_PJRT_REAL": str(cpu_backend), "FAKE_PJRT_MODE": "stablehlo",
                   "FAKE_PJRT_STABLEHLO": version})
    assert out.returncode == 0, out.stdout
    attrs = dict(line.split(" ", 1)[1].split("=", 1) for line in out.values("ATTR") if line.startswith("0 "))
    assert attrs["stablehlo_version"] == (version if version != "x" else "0")
    assert attrs["donation"] == donation
