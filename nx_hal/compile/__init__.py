"""The compile pipeline: what ``Device.compile`` runs, as ordered stages,
each a small module with one job.

    request → load (read once, hash once) → prepare (ONNX as this backend
    should run it) → convert (ONNX → StableHLO for PJRT devices) → lookup
    (this process's executables, then the store) → check (verify StableHLO,
    or a trial compile in the sandbox) → native compile → store write

Stages see the device only as a ``Target`` (``target.py``): its facts and
its native calls, never the ``Device`` class, so no stage imports upwards.
"""

from nx_hal.compile.pipeline import compile_program

__all__ = ["compile_program"]
