"""Prepared ONNX models in the store: what deviations.prepare made of a
model (the bytes to compile, the index checks, the names) kept under a key
of every input it depends on (the model's bytes, the plugin, the device's
attributes, the code that rewrites), so a warm compile reads it back instead
of importing onnx and parsing the model again (about 150 ms of a warm
compile's 250, bench/compile_cache.py). Entries are the store's: sealed by
the user's key, so a planted one is a miss."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from nx_hal.converter import PortShape, PreparedOnnx
from nx_hal.index_checks import IndexCheck
from nx_hal.store import Store, digest

__all__ = ["SECTION", "prepare"]

SECTION: Final = "prepared"
_SCHEMA: Final = "2"  # 2: the inputs' and outputs' declared shapes


def prepare(model: bytes, *, plugin: str, attributes: Mapping[str, object] | None,
            store: Store | None) -> PreparedOnnx:
    """deviations.prepare, read from ``store`` when it was made before."""
    key = _key(model, plugin, attributes) if store is not None else ""
    if store is not None:
        entry = store.get(SECTION, key)
        found = _decode(model, entry.payload, entry.meta) if entry is not None else None
        if found is not None:
            return found
    from nx_hal.onnx import deviations

    result = deviations.prepare(model, plugin=plugin, attributes=attributes)
    if store is not None:
        payload = b"" if result.model == model else result.model  # unchanged: not stored twice
        store.put(SECTION, key, payload, _meta(result, changed=result.model != model))
    return result


def _key(model: bytes, plugin: str, attributes: Mapping[str, object] | None) -> str:
    from nx_hal.onnx.convert import _code_digest

    facts = json.dumps([_SCHEMA, _code_digest(), plugin, dict(attributes or {})], sort_keys=True, default=str)
    return digest(facts, model)


def _meta(result: PreparedOnnx, *, changed: bool) -> dict[str, Any]:
    return {"changed": changed, "names": [list(n) for n in result.names] if result.names is not None else None,
            "index_checks": [c.to_json() for c in result.index_checks],
            "shapes": [[[dtype, list(dims) if dims is not None else None] for dtype, dims in side]
                       for side in result.shapes] if result.shapes is not None else None}


def _decode(model: bytes, payload: bytes, meta: dict[str, Any]) -> PreparedOnnx | None:
    """The entry for ``model`` as a PreparedOnnx; None (recomputed) for one
    this code cannot read."""
    try:
        checks = tuple(IndexCheck.from_json(c) for c in meta["index_checks"])
        names = meta["names"]
        shapes = meta["shapes"]
        return PreparedOnnx(payload if meta["changed"] else model, checks,
                            (list(names[0]), list(names[1])) if names is not None else None,
                            (_ports(shapes[0]), _ports(shapes[1])) if shapes is not None else None)
    except (KeyError, TypeError, IndexError, ValueError):
        return None


def _ports(side: list[Any]) -> tuple[PortShape, ...]:
    """Ports read back from an entry's JSON; ValueError for one malformed."""
    ports = []
    for dtype, dims in side:
        if not isinstance(dtype, str) or not (dims is None or isinstance(dims, list)):
            raise ValueError("malformed shape")
        if dims is not None and not all(d is None or isinstance(d, (int, str)) for d in dims):
            raise ValueError("malformed dim")
        ports.append((dtype, tuple(dims) if dims is not None else None))
    return tuple(ports)
