"""Start-up time: ``python -c "import nx_hal; nx_hal.devices()"`` with an empty
probe cache (cold: each plugin is probed in a child) and with a filled one
(warm), against ``python -c "import jax; jax.devices()"`` (JAX_PLATFORMS=cpu)
measured in the same run. Best of N wall-clock times of fresh processes.
The first rows are the floor a warm start stands on: the interpreter alone,
and the modules every warm start imports (importlib.metadata for the entry
points, the cffi binding).

    python bench/startup.py [-n 7] [--jax-python PYTHON]

``--jax-python``: the interpreter of an environment with jax, when this one
has none (the jax row is then that interpreter's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NX_HAL = "import nx_hal; nx_hal.devices()"
JAX = "import jax; jax.devices()"


FLOOR = [
    ("python -c pass", "pass"),
    ("+ import importlib.metadata", "import importlib.metadata"),
    # the extension alone (dlopen, cffi's backend), without nx_hal/__init__.py
    ("+ cffi binding (nx_hal._nxhal_cffi)",
     "import glob, os, importlib.metadata, importlib.util as u; s = u.find_spec('nx_hal'); "
     "f = glob.glob(os.path.join(s.submodule_search_locations[0], '_nxhal_cffi*.so'))[0]; "
     "u.module_from_spec(u.spec_from_file_location('nx_hal._nxhal_cffi', f))"),
]


def run_once(code: str, env: dict[str, str], cwd: Path, python: str = sys.executable) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", code], env=env, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def best(code: str, env: dict[str, str], cwd: Path, n: int, before_each: str | None = None,
         python: str = sys.executable) -> float:
    times = []
    for _ in range(n):
        if before_each is not None:
            shutil.rmtree(before_each, ignore_errors=True)  # the cold case: no probe verdicts
        times.append(run_once(code, env, cwd, python))
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=7, help="runs per case (best is reported)")
    parser.add_argument("--jax-python", default=sys.executable, help="the Python to run jax with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nxhal-startup-") as tmp:
        work = Path(tmp)  # no nx_hal.toml or pyproject.toml above it to read
        # As a user who sets no NX_HAL_* variable: the cache under XDG_CACHE_HOME.
        env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
        env["XDG_CACHE_HOME"] = str(work / "xdg")
        cache = work / "xdg" / "nx_hal"
        rows: list[tuple[str, str, float]] = []
        for name, code in FLOOR:
            rows.append((name, code, best(code, env, work, args.n)))
        rows.append(("nx_hal cold (empty probe cache)", NX_HAL,
                     best(NX_HAL, env, work, args.n, before_each=str(cache / "probe"))))
        run_once(NX_HAL, env, work)  # fills the probe cache
        rows.append(("nx_hal warm (probe cache filled)", NX_HAL, best(NX_HAL, env, work, args.n)))
        # (setting an NX_HAL_* variable also costs pydantic-settings' import)
        rows.append(("nx_hal isolate_probe=false", NX_HAL,
                     best(NX_HAL, {**env, "NX_HAL_ISOLATE_PROBE": "0"}, work, args.n)))
        try:
            jax = best(JAX, {**env, "JAX_PLATFORMS": "cpu"}, work, args.n, python=args.jax_python)
        except subprocess.CalledProcessError:
            print("jax is not installed (pip install jax jaxlib): no baseline", file=sys.stderr)
            return 1
        rows.append(("jax (JAX_PLATFORMS=cpu)", JAX, jax))
        import nx_hal

        print(f"nx_hal start-up, best of {args.n} fresh processes; devices found: "
              f"{', '.join(d.selector for d in nx_hal.devices()) or 'none'}")
        print(f"{'case':34} {'seconds':>8} {'x jax':>7}")
        for name, _code, seconds in rows:
            print(f"{name:34} {seconds:8.3f} {seconds / jax:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
