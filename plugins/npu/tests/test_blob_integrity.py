"""The serialized executable's digest (issue #11): OpenVINO never sees a
damaged byte. Header (little-endian): magic[8], u32 version, u32 key_len,
u32 target_len, u32 reserved, u64 payload_len, SHA-256[32]; then the key,
the target and OpenVINO's stream. The digest covers all but the key.

These are the plugin's own bytes (``Executable._serialize``): what
``serialize()`` returns is them sealed with this user's key, and
``load_executable`` hands bytes without a valid seal to the plugin only with
``trusted=True`` -- without it, they are refused before the plugin."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nx_hal
from nx_hal.device import Device

HEADER = 64


def _add() -> bytes:
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("x", "y", "z")]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", vi[:2], vi[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


@pytest.fixture(scope="module")
def blob(dev: Device) -> bytes:
    exe = dev.compile(_add(), cache=False)
    assert isinstance(exe, nx_hal.Executable)  # static shapes: one executable
    return exe._serialize()


@pytest.fixture
def untrusted_refused(dev: Device, monkeypatch: pytest.MonkeyPatch) -> Callable[[bytes], None]:
    """Checks that ``data``, loaded without ``trusted=True``, is refused
    before the plugin sees a byte."""
    reached: list[int] = []
    plugin_load = Device._deserialize

    def spy(self: Device, data: Any, *, authenticated: bool = False, options: dict[str, object] | None = None) -> Any:
        reached.append(len(data))
        return plugin_load(self, data, authenticated=authenticated, options=options)

    monkeypatch.setattr(Device, "_deserialize", spy)

    def check(data: bytes) -> None:
        reached.clear()
        with pytest.raises(nx_hal.InvalidArgumentError, match=r"native code.*trusted=True"):
            dev.load_executable(data)
        assert reached == [], "the plugin saw bytes nx_hal did not seal"

    return check


def test_header_carries_the_digest_of_all_but_the_key(dev: Device, blob: bytes) -> None:
    magic, version, key_len, target_len, reserved, payload_len = struct.unpack_from("<8sIIIIQ", blob)
    assert (magic, version, reserved) == (b"NXHALNPU", 2, 0)
    assert HEADER + key_len + target_len + payload_len == len(blob)
    assert blob[HEADER:HEADER + key_len] == dev.compat_key.encode()
    want = hashlib.sha256(blob[:32] + blob[HEADER + key_len:]).digest()
    assert blob[32:HEADER] == want
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(dev.load_executable(blob, trusted=True)(x, x)[0].to_numpy(), 2 * x)


@pytest.mark.parametrize("offset", [20, 33, -1, -1000])  # reserved, digest, payload end, payload
def test_a_flipped_byte_is_a_digest_mismatch(dev: Device, blob: bytes, offset: int,
                                             untrusted_refused: Callable[[bytes], None]) -> None:
    bad = bytearray(blob)
    bad[offset] ^= 0x10
    untrusted_refused(bytes(bad))
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: digest mismatch"):
        dev.load_executable(bytes(bad), trusted=True)


def test_lengths_past_the_blob_are_refused_before_reading(dev: Device, blob: bytes,
                                                         untrusted_refused: Callable[[bytes], None]) -> None:
    for offset, fmt, value in [(24, "<Q", 2**64 - 1), (24, "<Q", 2**63), (12, "<I", 2**32 - 1),
                               (16, "<I", 0)]:  # payload, payload, key, an empty target
        bad = bytearray(blob)
        struct.pack_into(fmt, bad, offset, value)
        untrusted_refused(bytes(bad))
        with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: truncated"):
            dev.load_executable(bytes(bad), trusted=True)


def test_serialize_seals_the_plugins_bytes(dev: Device, untrusted_refused: Callable[[bytes], None]) -> None:
    """serialize() is the plugin's bytes behind this user's seal: it loads
    as it is; the same bytes unsealed, or sealed and then changed, do not."""
    exe = dev.compile(_add(), cache=False)
    assert isinstance(exe, nx_hal.Executable)
    sealed, blob = exe.serialize(), exe._serialize()
    # The seal's magic and HMAC-SHA-256 tag, then the plugin's bytes (two
    # serializations need not be byte-identical: compared by their format).
    assert sealed[:8] == b"NXHALEX1" and sealed[40:48] == blob[:8] == b"NXHALNPU"
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(dev.load_executable(sealed)(x, x)[0].to_numpy(), 2 * x)
    untrusted_refused(blob)
    changed = bytearray(sealed)
    changed[-1] ^= 0x10
    untrusted_refused(bytes(changed))


def test_authenticated_bytes_skip_only_the_digest(dev: Device, blob: bytes) -> None:
    """``authenticated`` (the caller checked an HMAC over these bytes, as
    nx_hal's store and seal do): a changed digest field loads, the stream
    OpenVINO reads being intact; the lengths and the compat key are still
    checked, and without the option the digest is."""
    assert dev.attributes["authenticated_load"] is True
    bad = bytearray(blob)
    bad[33] ^= 0x10
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: digest mismatch"):
        dev._deserialize(bytes(bad))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(dev._deserialize(bytes(bad), authenticated=True)(x, x)[0].to_numpy(), 2 * x)
    struct.pack_into("<Q", bad, 24, 2**63)
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: truncated"):
        dev._deserialize(bytes(bad), authenticated=True)
    with pytest.raises(nx_hal.InvalidArgumentError, match="'authenticated'"):
        dev._deserialize(blob, options={"authenticated": "yes"})
    with pytest.raises(nx_hal.InvalidArgumentError, match="option 'authenticated'"):
        dev.compile(_add(), cache=False, authenticated=True)  # a deserialize option only
