"""Prepared ONNX models in the store (nx_hal.onnx.prepared): a warm compile
reads what deviations.prepare made instead of importing onnx and parsing the
model again; the entry is keyed by everything the result depends on, and one
that is damaged, planted or of another shape is recomputed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from nx_hal.onnx import deviations, prepared  # noqa: E402
from nx_hal.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _gather_relu() -> bytes:
    """Relu (rewritten for OpenVINO's NaN) and a Gather fed by a graph input
    (an index check at each run): both parts of a prepared model."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Gather", ["r", "ids"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                                           helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return data


def test_a_prepared_model_reads_back_equal(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    model = _gather_relu()
    want = deviations.prepare(model, plugin="npu")
    assert want.model != model and want.index_checks and want.names == (["x", "ids"], ["y"])
    first = prepared.prepare(model, plugin="npu", attributes={"a": 1}, store=store)
    assert first == want and store.misses == 1
    again = prepared.prepare(model, plugin="npu", attributes={"a": 1}, store=store)
    assert again == want and store.hits == 1
    assert again.index_checks[0].extents == want.index_checks[0].extents


def test_an_unchanged_model_is_not_stored_twice(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    nodes = [helper.make_node("Add", ["a", "b"], ["c"])]
    graph = helper.make_graph(nodes, "add", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    assert prepared.prepare(model, plugin="npu", attributes=None, store=store).model == model
    entries = [p for p in (tmp_path / "cache" / prepared.SECTION).rglob("*") if p.is_file()]
    assert len(entries) == 1 and len(entries[0].read_bytes()) < len(model) + 400  # metadata, not the model again
    assert prepared.prepare(model, plugin="npu", attributes=None, store=store).model == model
    assert store.hits == 1


@pytest.mark.parametrize(("plugin", "attributes"), [
    ("tpu", {"int8_pairs_saturate": True}),            # another plugin: other rewrites
    ("npu", {"int8_pairs_saturate": False}),           # another machine fact
    ("npu", {"int8_pairs_saturate": True, "x": 2}),    # any other attribute
])
def test_the_key_follows_plugin_and_attributes(tmp_path: Path, plugin: str, attributes: dict[str, object]) -> None:
    store = Store(tmp_path / "cache")
    model = _gather_relu()
    prepared.prepare(model, plugin="npu", attributes={"int8_pairs_saturate": True}, store=store)
    prepared.prepare(model, plugin=plugin, attributes=attributes, store=store)
    assert store.hits == 0 and store.misses == 2


def test_the_key_follows_the_rewriting_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed rewrite must not keep serving what the old one made."""
    from nx_hal.onnx import convert

    store = Store(tmp_path / "cache")
    model = _gather_relu()
    prepared.prepare(model, plugin="npu", attributes=None, store=store)
    monkeypatch.setattr(convert, "_code_digest", lambda: "other code")
    prepared.prepare(model, plugin="npu", attributes=None, store=store)
    assert store.hits == 0 and store.misses == 2


def test_an_entry_this_code_cannot_read_is_recomputed(tmp_path: Path) -> None:
    """Written under the right key (so sealed) but without the fields: a miss, never an error."""
    store = Store(tmp_path / "cache")
    model = _gather_relu()
    key = prepared._key(model, "npu", None)
    assert store.put(prepared.SECTION, key, b"junk", {"changed": True})
    assert prepared.prepare(model, plugin="npu", attributes=None, store=store) == deviations.prepare(model, plugin="npu")


def test_a_warm_compile_in_a_new_process_does_not_parse_the_model(tmp_path: Path) -> None:
    """Through the installed package: the second process compiles from the
    store without importing onnx, and runs as the first did (names, the NaN
    rewrite and the index check kept)."""
    model = tmp_path / "g.onnx"
    model.write_bytes(_gather_relu())
    code = f"""
import sys, numpy as np, nx_hal
try:
    dev = nx_hal.device("npu:cpu")
except nx_hal.NxHalError as exc:
    print("SKIP", exc); sys.exit(0)
exe = dev.compile({str(model)!r})
x = np.array([[np.nan, -1, 2, 3, 4], [5, 6, -7, 8, 9]], np.float32)
(y,) = exe(x, np.array([0, 2, 4], np.int64))
try:
    exe(x, np.array([0, 9, 4], np.int64))
    refused = "no"
except nx_hal.InvalidArgumentError as exc:
    refused = "index 9" in str(exc)
print([s.name for s in exe.inputs], np.isnan(y.to_numpy()[0, 0]), y.to_numpy()[1].tolist(), refused,
      "onnx" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    env["NX_HAL_CACHE_DIR"] = str(tmp_path / "cache")
    lines = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        if out.stdout.startswith("SKIP"):
            pytest.skip(out.stdout)
        lines.append(out.stdout.strip().splitlines()[-1])
    assert lines[0] == "['x', 'ids'] True [5.0, 0.0, 9.0] True True"  # the cold compile parses it
    assert lines[1] == "['x', 'ids'] True [5.0, 0.0, 9.0] True False"  # the warm one reads the store
