"""Several threads running one executable at once get their own results."""

from __future__ import annotations

import threading

import models
import numpy as np
from conftest import ATOL, RTOL, ort_run

from nx_hal.device import Device

THREADS = 8
RUNS = 25


def _hammer(dev: Device, model_builder: object, shape: tuple[int, ...]) -> None:
    model = model_builder()  # type: ignore[operator]
    exe = dev.compile(model)
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(THREADS * RUNS)]
    expected = [ort_run(model, x)[0] for x in inputs]
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        start.wait()
        for i in range(t, len(inputs), THREADS):
            try:
                if i % 3 == 0:
                    outs, event = exe.run_async(inputs[i])
                    event.wait(30.0)
                else:
                    outs = exe(inputs[i])
                got = outs[0].to_numpy()
                if not np.allclose(got, expected[i], rtol=RTOL, atol=ATOL):
                    errors.append(f"run {i}: max error {np.abs(got - expected[i]).max()}")
            except Exception as exc:  # collected, reported below
                errors.append(f"run {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a run hung"
    assert errors == [], errors[:5]


def test_threads_static_shapes(dev: Device) -> None:
    _hammer(dev, models.cnn, (1, 3, 16, 16))


def test_threads_dynamic_batch(dev: Device) -> None:
    _hammer(dev, models.mlp, (3, 16))
