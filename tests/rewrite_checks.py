"""Checks the tests of nx_hal.onnx.rewrites share: run a model on
onnxruntime, compare a rewritten model with its original, expect a refusal."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import pytest


def ort_run(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's CPU outputs for ``model`` on ``feeds``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # an unused initializer of a rewritten model is not news
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, feeds)]


def ops(model: Any) -> set[str]:
    """The op types of the main graph."""
    return {n.op_type for n in model.graph.node}


def assert_rewritten_same(model: Any, feeds: dict[str, np.ndarray], gone: Collection[str], *,
                          want: list[Any] | None = None, rtol: float = 1e-5, atol: float = 1e-6) -> Any:
    """Rewrites ``model``; checks that no op of ``gone`` is left, that the
    result passes ONNX's full check, and that onnxruntime on it gives
    ``want`` (default: onnxruntime on ``model``), dtype, shape and values.
    Returns the rewritten model."""
    import onnx

    from nx_hal.onnx import rewrites

    rewritten = rewrites.apply(model)
    assert not ops(rewritten) & set(gone), ops(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    expected = [np.asarray(w) for w in (want if want is not None else ort_run(model, feeds))]
    got = ort_run(rewritten, feeds)
    assert len(got) == len(expected)
    for g, w in zip(got, expected, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64) if g.dtype.kind == "f" else g,
                                   w.astype(np.float64) if w.dtype.kind == "f" else w, rtol=rtol, atol=atol)
    return rewritten


def assert_refused(model: Any, *words: str, reason: str = "unsupported-operator") -> Any:
    """``rewrites.apply(model)`` raises ConversionError with ``reason``, its
    message holding every one of ``words``. Returns the error."""
    from nx_hal.onnx import rewrites
    from nx_hal.onnx.convert import ConversionError

    with pytest.raises(ConversionError) as err:
        rewrites.apply(model)
    assert err.value.reason == reason
    for word in words:
        assert word in str(err.value), str(err.value)
    return err.value
