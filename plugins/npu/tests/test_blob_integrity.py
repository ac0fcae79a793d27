"""The serialized executable's digest (issue #11): OpenVINO never sees a
damaged byte. Header (little-endian): magic[8], u32 version, u32 key_len,
u32 target_len, u32 reserved, u64 payload_len, SHA-256[32]; then the key,
the target and OpenVINO's stream. The digest covers all but the key."""

from __future__ import annotations

import hashlib
import struct

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
    return dev.compile(_add(), cache=False).serialize()


def test_header_carries_the_digest_of_all_but_the_key(dev: Device, blob: bytes) -> None:
    magic, version, key_len, target_len, reserved, payload_len = struct.unpack_from("<8sIIIIQ", blob)
    assert (magic, version, reserved) == (b"NXHALNPU", 2, 0)
    assert HEADER + key_len + target_len + payload_len == len(blob)
    assert blob[HEADER:HEADER + key_len] == dev.compat_key.encode()
    want = hashlib.sha256(blob[:32] + blob[HEADER + key_len:]).digest()
    assert blob[32:HEADER] == want
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(dev.load_executable(blob)(x, x)[0].to_numpy(), 2 * x)


@pytest.mark.parametrize("offset", [20, 33, -1, -1000])  # reserved, digest, payload end, payload
def test_a_flipped_byte_is_a_digest_mismatch(dev: Device, blob: bytes, offset: int) -> None:
    bad = bytearray(blob)
    bad[offset] ^= 0x10
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: digest mismatch"):
        dev.load_executable(bytes(bad))


def test_lengths_past_the_blob_are_refused_before_reading(dev: Device, blob: bytes) -> None:
    for offset, fmt, value in [(24, "<Q", 2**64 - 1), (24, "<Q", 2**63), (12, "<I", 2**32 - 1),
                               (16, "<I", 0)]:  # payload, payload, key, an empty target
        bad = bytearray(blob)
        struct.pack_into(fmt, bad, offset, value)
        with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: truncated"):
            dev.load_executable(bytes(bad))
