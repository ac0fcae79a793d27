"""nx_hal as a ``torch.compile`` backend: ``torch.compile(model,
backend="nx_hal")`` (registered through the ``torch_dynamo_backends``
entry point), or with a device named, ``torch.compile(model,
backend="nx_hal", options={"device": "tpu:cpu"})``.

Each graph TorchDynamo captures is exported (``torch.export``, then ONNX)
and compiled on the device: the best one present, as ``nx_hal.compile``
chooses, unless ``options`` names one. What Dynamo cannot capture (a graph
break: a print, a ``.item()``, Python the tracer does not follow) runs in
PyTorch between the graphs, as with every backend of that API. A graph this
backend cannot take (an operator the exporter lacks, a device that refuses
it, gradients to compute: it runs inference only) runs in PyTorch too, with
a warning saying why, never silently.

Tensors go in as numpy arrays over the tensors' memory (CPU tensors: no
copy) and come out through DLPack (``torch.from_dlpack``: no copy where the
device shares host memory).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from nx_hal.errors import NxHalError

__all__ = ["backend"]

_OPTIONS = ("device",)


def backend(gm: Any, example_inputs: Sequence[Any], options: dict[str, object] | None = None) -> Callable[..., Any]:
    """The compiled form of Dynamo's graph ``gm`` (a torch.fx.GraphModule),
    or ``gm.forward`` with a warning where nx_hal cannot run it."""
    import torch

    import nx_hal
    from nx_hal.errors import InvalidArgumentError

    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise InvalidArgumentError(f"torch.compile(backend='nx_hal'): unknown option(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(_OPTIONS)})")
    selector = options.get("device")
    if selector is not None and not isinstance(selector, str):
        raise InvalidArgumentError(f"torch.compile(backend='nx_hal'): option 'device' must be a selector like "
                                   f"'tpu:cpu', got {selector!r}")
    why = _unsupported(torch, example_inputs)
    if why is not None:
        return _eager(gm, why)
    args = tuple(example_inputs)
    try:
        if selector is not None:
            exe = nx_hal.device(selector).compile(gm, example_args=args)
        else:
            exe, _ = nx_hal.compile_anywhere(gm, example_args=args)
    except NxHalError as exc:
        if selector is not None and isinstance(exc, InvalidArgumentError) and "selector" in exc.message:
            raise
        return _eager(gm, exc.message)
    as_list = isinstance(gm.graph.output_node().args[0], list)

    def run(*inputs: Any) -> Any:
        outs = exe(*(t.detach().numpy(force=True) for t in inputs))
        results = [torch.from_dlpack(o) for o in outs]
        return results if as_list else tuple(results)

    return run


def _unsupported(torch: Any, inputs: Sequence[Any]) -> str | None:
    """Why these inputs cannot go to nx_hal (None: they can)."""
    for value in inputs:
        if not isinstance(value, torch.Tensor):
            return (f"the graph takes a {type(value).__name__} (a symbolic size: compile with "
                    "torch.compile(..., dynamic=False))")
        if value.requires_grad and torch.is_grad_enabled():
            return "the graph needs gradients, and nx_hal runs inference only (use torch.no_grad())"
    return None


def _eager(gm: Any, why: str) -> Callable[..., Any]:
    warnings.warn(f"nx_hal: this graph runs in PyTorch, not on an nx_hal device: {why}", RuntimeWarning,
                  stacklevel=2)
    forward: Callable[..., Any] = gm.forward
    return forward
