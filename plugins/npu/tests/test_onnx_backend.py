"""The models bundled in the onnx wheel (onnx/backend/test/data: light,
pytorch-converted, pytorch-operator, simple) run through nx_hal against their
reference outputs (rtol 1e-3, atol 1e-5, as onnx's runner uses for models).

Measured with openvino 2026.4.1 on a CPU: 136 of 149 pass. The rest are
OpenVINO's: string ops (StringNormalizer, 6), training ops (Gradient, 2),
f64 models whose reference data holds uninitialised values beyond f32 range
(OpenVINO's CPU computes f64 in f32, 4), and light_squeezenet, where
OpenVINO's own f32 result differs from the reference.

The eight simple/test_sequence_model* need sequence ops (SequenceConstruct,
SplitToSequence, ...) that OpenVINO's ONNX frontend gained over releases:
measured 0 of them pass on 2025.1, 1 on 2025.4.1 and 2026.0, 3 on 2026.2,
all 8 from 2026.3. The other 128 pass on every release the plugin allows."""

from __future__ import annotations

import numpy as np
from onnx_backend_cases import cases

from nx_hal.device import Device

# Models other than the sequence ones that must pass, on any allowed OpenVINO.
PASS_FLOOR = 128
SEQUENCE_MODELS = 8
SEQUENCE_OPS_FROM = (2026, 3)


def openvino_release(dev: Device) -> tuple[int, int]:
    major, minor = str(dev.attributes["openvino_version"]).split(".")[:2]
    return int(major), int(minor)


def test_bundled_models(dev: Device) -> None:
    passed: list[str] = []
    failed: list[str] = []
    for case in cases():
        label = f"{case.suite}/{case.name}"
        try:
            exe = dev.compile(case.model, format="onnx")
            outs = [o.to_numpy() for o in exe(*case.inputs)]
            assert len(outs) == len(case.outputs), f"{len(outs)} outputs, expected {len(case.outputs)}"
            for got, want in zip(outs, case.outputs, strict=False):
                assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
            passed.append(label)
        except Exception as exc:  # each model is one count, not one test
            reason = str(exc).strip().splitlines()
            failed.append(f"{label}: {type(exc).__name__}: {reason[-1][:120] if reason else ''}")
    total = len(passed) + len(failed)
    print(f"\nonnx bundled models: {len(passed)} of {total} pass")
    for line in failed:
        print("  FAIL", line)
    assert total >= 140, f"only {total} bundled models found"
    sequence = [label for label in passed if label.startswith("simple/test_sequence_model")]
    others = len(passed) - len(sequence)
    assert others >= PASS_FLOOR, f"{others} passed (sequence models aside), floor {PASS_FLOOR}"
    if openvino_release(dev) >= SEQUENCE_OPS_FROM:
        assert len(sequence) == SEQUENCE_MODELS, f"sequence models: {len(sequence)} passed"
