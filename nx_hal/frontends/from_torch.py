"""PyTorch programs: a ``torch.nn.Module`` with example arguments, or a
``torch.export.ExportedProgram``, as ONNX (PyTorch's own exporter,
``torch.onnx.export(..., dynamo=True)``, from the ``torch.export`` graph).

ONNX is the portable form: OpenVINO reads it natively, and PJRT devices get
it as StableHLO through nx_hal's converter, so one path serves every device.
The executable takes the module's tensor arguments (flattened, in order) and
returns its tensor results flattened; they keep the exporter's names (the
``forward`` parameters' names for the inputs). A graph ``torch.export``
cannot capture (data-dependent control flow, an unsupported operator) is
refused with PyTorch's reason: ``torch.compile(model, backend="nx_hal")``
(nx_hal.torch_backend) runs such a model, with the parts it cannot
capture left to PyTorch.
"""

from __future__ import annotations

from typing import Any

from nx_hal.errors import InvalidArgumentError
from nx_hal.frontends.origin import Lowered, Origin

__all__ = ["lowered"]


def lowered(program: Any, example_args: object) -> Lowered:
    """``program`` as ONNX; ``example_args`` (a tuple of the module's
    arguments, or one tensor) is required for a module and refused for an
    ExportedProgram, which carries its own."""
    import torch

    if isinstance(program, torch.export.ExportedProgram):
        if example_args is not None:
            raise InvalidArgumentError("example_args: a torch.export.ExportedProgram carries its own inputs; "
                                       "pass it without example_args")
        exported = program
    elif isinstance(program, torch.nn.Module):
        if example_args is None:
            raise InvalidArgumentError(
                f"a torch.nn.Module ({type(program).__name__}) compiles with example inputs: "
                "compile(model, example_args=(x,)), or a torch.export.ExportedProgram")
        args = example_args if isinstance(example_args, tuple) else (example_args,)
        try:
            exported = torch.export.export(program, args)
        except Exception as exc:  # noqa: BLE001 -- torch.export's many error types all mean "cannot capture"
            raise InvalidArgumentError(
                f"torch.export cannot capture {type(program).__name__}: {_first_line(exc)} "
                "(torch.compile(model, backend='nx_hal') runs what it cannot capture in PyTorch)") from None
    else:
        raise InvalidArgumentError(f"cannot compile a {type(program).__module__}.{type(program).__name__}: pass "
                                   "a torch.nn.Module with example_args=(...) or a torch.export.ExportedProgram")
    try:
        onnx_program = torch.onnx.export(exported, dynamo=True, verbose=False)
    except Exception as exc:  # noqa: BLE001 -- the exporter's errors: an operator it has no ONNX for
        raise InvalidArgumentError(f"PyTorch's ONNX exporter refused the program: {_first_line(exc)}") from None
    if onnx_program is None:
        raise InvalidArgumentError("PyTorch's ONNX exporter returned no program")
    model = onnx_program.model_proto
    if model.ByteSize() >= 2**31:
        raise InvalidArgumentError("the exported model is over 2 GiB, more than one ONNX protobuf holds: "
                                   "save it with onnx_program.save(path, external_data=True) and compile the path")
    inits = {i.name for i in model.graph.initializer}
    inputs = tuple(i.name for i in model.graph.input if i.name not in inits)
    outputs = tuple(o.name for o in model.graph.output)
    return Lowered("onnx", model.SerializeToString(), Origin("torch", inputs, outputs, ()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:400]
