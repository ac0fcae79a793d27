"""The real-model corpus's files: exported once per export script and
exporter versions (by ``tests/models/export.py``, in a child process: torch
stays out of the caller's), kept under ``$NXHAL_TEST_MODELS`` (default
``~/.cache/nx_hal-test-models``). Shared by tests/models and bench/models.py."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

# The bar: every model within 1e-4 of onnxruntime, relative to the
# output's largest magnitude, on every CPU device.
MAX_RELATIVE_ERROR = 1e-4
DEVICES = ["npu:cpu", "tpu:cpu"]
# Results a device gets wrong on some machines, measured, with why: the test
# expects them to fail (xfail), the corpus table marks them and does not count
# them as failures. Empty: the int8 QDQ CNN OpenVINO's CPU got 11% off
# without VNNI is now corrected by nx_hal.onnx.deviations (issue 29).
KNOWN_WRONG: dict[tuple[str, str], str] = {}


class CorpusUnavailable(Exception):
    """The corpus is not cached and cannot be exported here (the reason)."""


EXPORTERS = ("torch", "torchvision", "transformers", "onnxscript", "onnx", "onnxruntime")
REPO = Path(__file__).resolve().parents[2]


def _versions() -> dict[str, str]:
    found = {}
    for name in EXPORTERS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def corpus_key() -> str:
    """The export script and the versions that shape an export."""
    h = hashlib.sha256((Path(__file__).parent / "export.py").read_bytes())
    h.update(json.dumps(_versions(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def corpus_dir() -> Path:
    """The corpus for this export script and these exporters, exported now
    if not cached; CorpusUnavailable without the exporters or when the
    export fails."""
    root = Path(os.environ.get("NXHAL_TEST_MODELS") or Path.home() / ".cache" / "nx_hal-test-models")
    folder = root / corpus_key()
    if (folder / "manifest.json").exists():
        return folder
    missing = [m for m in ("torch", "torchvision", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise CorpusUnavailable(f"the corpus exporters are not installed ({', '.join(missing)}): "
                                "pip install -r tests/models/requirements.txt")
    partial = folder.with_name(folder.name + f".{os.getpid()}.tmp")
    done = subprocess.run([sys.executable, "-m", "tests.models.export", str(partial)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise CorpusUnavailable(f"the corpus export failed ({done.returncode}):\n{done.stderr[-4000:]}")
    partial.rename(folder)
    return folder


def manifest(folder: Path) -> dict[str, Any]:
    """What the export recorded per model (ok, error, inputs, exporter, ...)."""
    data: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return data


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| over max |want|: one number per output, 0 for equal."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    return diff / scale if scale > 0 else diff


def mismatches(got: list[np.ndarray], want: list[np.ndarray]) -> list[str]:
    """What is wrong with ``got`` against the oracle's ``want``: the count of
    outputs, each one's shape and dtype, its relative error over
    MAX_RELATIVE_ERROR. Empty when it matches. The test and the corpus table
    (bench/models.py) both judge a result by this."""
    if len(got) != len(want):
        return [f"{len(got)} outputs, the oracle has {len(want)}"]
    problems = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape or g.dtype != w.dtype:
            problems.append(f"output {i}: {g.dtype}{list(g.shape)}, the oracle's is {w.dtype}{list(w.shape)}")
        elif relative_error(g, w) > MAX_RELATIVE_ERROR:
            problems.append(f"output {i}: relative error {relative_error(g, w):.2e} > {MAX_RELATIVE_ERROR:g}")
    return problems


def load_case(folder: Path, record: dict[str, Any], name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The inputs in the model's order and the oracle's outputs."""
    data = np.load(folder / f"{name}.npz")
    outputs = sorted((k for k in data.files if k.startswith("out:")), key=lambda k: int(k[4:]))
    return [data[f"in:{k}"] for k in record["inputs"]], [data[k] for k in outputs]


