"""ONNX models whose weights live in other files ("external data"), made
whole before anything else sees them.

A model that names ``weights.bin`` is resolved against the model's own
directory, as ONNX defines it -- never the working directory, which is what a
vendor reading the model from memory would use (a ``weights.bin`` in the
working directory then won). Each file must stay inside that directory
(no absolute name, no ``..``, no link leading out), be a regular file, and
hold the bytes the model says it holds. Its bytes are put into the model,
so every later step -- the compile cache's key, the sandbox, the converter,
the vendor -- sees one self-contained program: changing or deleting
``weights.bin`` changes the key, and a recompile reads the new weights.

A model with external data but no directory to resolve it in (bytes, an
in-memory ModelProto) is refused by name. Models that need more than
protobuf's 2 GiB once whole are refused too, for now.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from nx_hal.errors import InvalidArgumentError, UnavailableError

__all__ = ["inline"]

# Every external tensor has an entry whose key is "location": field 1, 8
# bytes. A model without these bytes has no external data, and is left
# unparsed (the common case costs one scan of its bytes).
_MARK: Final = b"\x0a\x08location"
_PROTOBUF_LIMIT: Final = 2**31 - 1


def _tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of a graph and its subgraphs (If, Loop, Scan bodies)."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def _read(base: Path, tensor: Any, info: Any) -> tuple[bytes, str]:
    name = str(info.location)
    where = f"external data '{name}' of tensor '{tensor.name}'"
    parts = Path(name).parts
    if not name or os.path.isabs(name) or ".." in parts:
        raise InvalidArgumentError(f"{where}: the name must be a path inside the model's directory {base}")
    path = base / name
    real = Path(os.path.realpath(path))
    if real != base and base not in real.parents:
        raise InvalidArgumentError(f"{where}: {path} leads outside the model's directory {base} (to {real})")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgumentError(f"{where}: cannot open {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgumentError(f"{where}: {path} is not a regular file")
        offset = int(info.offset or 0)
        length = int(info.length) if info.length else st.st_size - offset
        if offset < 0 or length < 0 or offset + length > st.st_size:
            raise InvalidArgumentError(f"{where}: bytes {offset}..{offset + length} asked for, but {path} "
                                       f"holds {st.st_size}")
        handle.seek(offset)
        return handle.read(length), str(real)


def inline(data: bytes, model_path: Path | None) -> tuple[bytes, tuple[str, ...]]:
    """The ONNX model ``data`` with its external data put inside it, read
    from ``model_path``'s directory (``data`` itself when it has none), and
    the files read, as real paths."""
    if _MARK not in data:
        return data, ()
    try:
        import onnx
        from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    except ImportError:
        raise UnavailableError("the model may name external data files, and reading them needs the onnx "
                               "package: pip install onnx") from None
    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # not ONNX after all: the vendor's parser (in its sandbox) says what is wrong
        return data, ()
    external = [t for t in _tensors(model.graph) if uses_external_data(t)]
    if not external:
        return data, ()
    if model_path is None:
        raise InvalidArgumentError(
            f"the model keeps {len(external)} tensors in external data files ('{external[0].name}' in "
            f"'{ExternalDataInfo(external[0]).location}'), which are found next to the model's file: pass the "
            "model's path, or load it with onnx.load(path) (which reads them) and pass that")
    base = Path(os.path.realpath(model_path)).parent
    total = len(data)
    read: dict[str, None] = {}
    for tensor in external:
        raw, source = _read(base, tensor, ExternalDataInfo(tensor))
        read[source] = None
        total += len(raw)
        if total > _PROTOBUF_LIMIT:
            raise InvalidArgumentError(f"{model_path}: with its external data the model needs more than 2 GiB, "
                                       "more than one ONNX protobuf can hold; nx_hal does not take such models yet")
        tensor.raw_data = raw
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return bytes(model.SerializeToString()), tuple(read)
