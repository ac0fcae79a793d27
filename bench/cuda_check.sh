#!/usr/bin/env bash
# The tpu plugin over a CUDA PJRT plugin, in one run on a machine with an
# NVIDIA GPU and no network (the device tool's machines: jax-cuda13-pjrt is
# installed there, nx_hal is not).
#
#   bash bench/cuda_check.sh WHEELDIR [OUTDIR]
#
# WHEELDIR holds the nx-hal and nx-hal-tpu wheels and the dependencies the
# machine lacks (pydantic, pydantic-settings, cffi, ...), and `hdr/`, a
# directory with xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h for the raw C
# baseline of the benchmark. Runs: the devices and the fallback report; the
# correctness checks against numpy (bench/cuda_check.py); the ABI conformance
# suite on the tpu plugin's GPU device; bench/pjrt_overhead.py --backend cuda,
# nx_hal next to the raw PJRT C API and jax.jit on the same GPU.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$(realpath "${1:?usage: bash bench/cuda_check.sh WHEELDIR [OUTDIR]}")
out=${2:-${OUT:-/tmp/cuda_check}}
mkdir -p "$out"
site=/tmp/nxhal-site
status=0
# Each step is bounded: a hang costs one step, not the machine's time.
run() { echo; echo "== $*"; timeout 150 "$@" || { echo "(exit $?)"; status=1; }; }

python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl || exit 1
export PYTHONPATH="$site:$wheels/hdr" PATH="$site/bin:$PATH" PYTHONUNBUFFERED=1
# Two clients share the GPU in the benchmark (nx_hal's and jax's): neither
# takes 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false NX_HAL_PLUGINS__TPU__GPU_PREALLOCATE=false

run nvidia-smi -L
run python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
run nx-hal --version
run nx-hal devices
run nx-hal doctor
run python3 "$root/bench/cuda_check.py"
# The suite from a copy of tests/, so that the installed nx_hal is imported,
# not the checkout's uncompiled source.
rm -rf /tmp/nxhal-tests && mkdir -p /tmp/nxhal-tests && cp -r "$root/tests" /tmp/nxhal-tests/
(cd /tmp/nxhal-tests && NX_HAL_PREFER=gpu run python3 -m pytest tests/conformance --plugin tpu -q -p no:cacheprovider)
# From C: the example against the SDK in the wheel, the tpu plugin opened by
# name and given the CUDA PJRT plugin through its override variable (the
# CUDA plugin lives in another environment's site-packages here).
cuda=$(cd /tmp && python3 -c "from nx_hal_tpu.backends import find_backends; print(next(str(b.path) for b in find_backends() if b.label.startswith('cuda')))")
run cc -std=c99 -I"$site/nx_hal/include" "$root/examples/c/list_devices.c" -o /tmp/list_devices \
  -L"$site/nx_hal/lib" -l:libnxhal_loader.so.1 -Wl,-rpath,"$site/nx_hal/lib" -ldl
NX_HAL_PLUGIN_PATH="$site/nx_hal_tpu" NXHAL_TPU_BACKEND_PATHS="cuda=$cuda" run /tmp/list_devices tpu
run python3 "$root/bench/pjrt_overhead.py" --backend cuda --iterations 2000 --matmul-iterations 50
exit $status
