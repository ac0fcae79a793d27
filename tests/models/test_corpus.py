"""The real-model corpus (issue #13): torchvision, Hugging Face transformers
and torch.nn architectures, exported with random weights by
``tests/models/export.py``, compiled on every CPU device nx_hal offers and
compared with onnxruntime.

The exports need torch (``pip install -r tests/models/requirements.txt``);
without it these tests skip, unless ``NXHAL_REQUIRE_MODELS=1`` (CI's
``.ci/models``) makes that a failure. Exports are cached under
``$NXHAL_TEST_MODELS`` (default ``~/.cache/nx_hal-test-models``), keyed by the
export script and the exporters' versions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nx_hal.compile import memo
from tests.models.corpus import (
    DEVICES,
    KNOWN_WRONG,
    MAX_RELATIVE_ERROR,
    CorpusUnavailable,
    corpus_dir,
    load_case,
    manifest,
    mismatches,
)
from tests.models.export import CORPUS
from tests.plugin_env import device_available


@pytest.fixture(scope="session")
def corpus() -> tuple[Path, dict[str, Any]]:
    try:
        folder = corpus_dir()
    except CorpusUnavailable as exc:
        if os.environ.get("NXHAL_REQUIRE_MODELS") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return folder, manifest(folder)


def test_the_corpus_spans_the_families() -> None:
    """At least 10 architectures, from the three sources and every family the issue names."""
    names = {e.name.split("-dynamo")[0] for e in CORPUS}
    families = " ".join(e.family for e in CORPUS)
    assert len(names) >= 10
    assert {e.source for e in CORPUS} >= {"torchvision", "transformers", "torch.nn"}
    for family in ("CNN", "depthwise", "vision transformer", "encoder transformer", "decoder transformer",
                   "recurrent", "Resize", "ConvTranspose", "int8 QDQ"):
        assert family in families, family
    assert any(e.exporter == "dynamo" for e in CORPUS) and any(e.exporter == "torchscript" for e in CORPUS)


@pytest.mark.parametrize("name", [e.name for e in CORPUS])
def test_every_model_exports(corpus: tuple[Path, dict[str, Any]], name: str) -> None:
    folder, manifest = corpus
    record = manifest["models"][name]
    assert record["ok"], record.get("error")
    _, outputs = load_case(folder, record, name)
    # A comparison means something only if the output is not vanishing
    # (see export.restimate_batchnorm).
    assert all(float(np.std(o)) > 1e-3 for o in outputs), [float(np.std(o)) for o in outputs]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", [e.name for e in CORPUS])
def test_model_matches_onnxruntime(corpus: tuple[Path, dict[str, Any]], name: str, device: str) -> None:
    import nx_hal

    if not device_available(device):
        pytest.skip(f"{device} is not offered here")
    folder, manifest = corpus
    record = manifest["models"][name]
    if not record["ok"]:
        pytest.fail(f"not exported: {record.get('error')}")
    if (name, device) in KNOWN_WRONG:
        # Not strict: whether it is wrong depends on the CPU's int8 kernels.
        pytest.xfail(KNOWN_WRONG[(name, device)])
    inputs, want = load_case(folder, record, name)
    exe = nx_hal.device(device).compile(folder / f"{name}.onnx")
    assert not mismatches([b.to_numpy() for b in exe(*inputs)], want)
    # Again from the compile cache (the npu plugin checks what it stores:
    # OpenVINO's CPU reloads unidirectional recurrent models wrong), not
    # from this process's executables, which would hand back `exe` itself.
    memo.clear()
    again = nx_hal.device(device).compile(folder / f"{name}.onnx")
    assert again is not exe
    assert not mismatches([b.to_numpy() for b in again(*inputs)], want)


def test_mismatches_names_each_problem() -> None:
    """The judgement the test and the corpus table share: count, shape, dtype, error."""
    want = [np.array([1.0, -2.0], np.float32), np.zeros((2, 2), np.float32)]
    assert mismatches([w.copy() for w in want], want) == []
    assert mismatches(want[:1], want) == ["1 outputs, the oracle has 2"]
    off = [want[0] * (1 + 2 * MAX_RELATIVE_ERROR), want[1]]
    assert mismatches(off, want) == [f"output 0: relative error {2 * MAX_RELATIVE_ERROR:.2e} > {MAX_RELATIVE_ERROR:g}"]
    assert mismatches([want[0], want[1].reshape(4)], want) == ["output 1: float32[4], the oracle's is float32[2, 2]"]
    assert mismatches([want[0].astype(np.float64), want[1]], want) == \
        ["output 0: float64[2], the oracle's is float32[2]"]
