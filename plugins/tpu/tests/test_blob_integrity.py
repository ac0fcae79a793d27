"""The serialized executable's digest (issue #11): every byte but the compat
key is checked before PJRT, which aborts or crashes on damaged bytes, sees
any. Layout: magic, u32 version, u32 key length, key, 32-byte SHA-256,
u32 signature length, signature, u64 payload length, payload."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np
import pytest
from conftest import PROGRAMS

nx_hal = pytest.importorskip("nx_hal")
if not hasattr(nx_hal, "devices"):
    pytest.skip("the nx_hal core has no devices() yet", allow_module_level=True)

X = np.arange(4, dtype=np.float32)


def _blob(dev: Any) -> tuple[bytes, int]:
    """A serialized add and the offset of its digest."""
    data = dev.compile((PROGRAMS / "add.mlir").read_text(), format="stablehlo", cache=False).serialize()
    assert data[:8] == b"NXHALTPU"
    (key_len,) = struct.unpack_from("<I", data, 12)
    return data, 16 + key_len


def test_digest_covers_all_but_the_key(devices: list[Any]) -> None:
    dev = devices[0]
    data, at = _blob(dev)
    assert struct.unpack_from("<I", data, 8) == (2,)  # the format that carries a digest
    want = hashlib.sha256(data[:16] + data[at + 32:]).digest()
    assert data[at:at + 32] == want
    (y,) = dev.load_executable(data)(X, X)
    np.testing.assert_array_equal(y.to_numpy(), 2 * X)


@pytest.mark.parametrize("where", ["digest", "signature", "payload_start", "payload_end"])
def test_a_flipped_byte_is_a_digest_mismatch(devices: list[Any], where: str) -> None:
    data, at = _blob(devices[0])
    (sig_len,) = struct.unpack_from("<I", data, at + 32)
    offset = {"digest": at + 5, "signature": at + 36, "payload_start": at + 36 + sig_len + 8,
              "payload_end": len(data) - 1}[where]
    bad = bytearray(data)
    bad[offset] ^= 0x40
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: digest mismatch"):
        devices[0].load_executable(bytes(bad))


def test_size_fields_past_the_blob_are_refused_before_reading(devices: list[Any]) -> None:
    data, at = _blob(devices[0])
    (sig_len,) = struct.unpack_from("<I", data, at + 32)
    huge_sig = bytearray(data)
    struct.pack_into("<I", huge_sig, at + 32, 0xFFFFFFF0)
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: truncated"):
        devices[0].load_executable(bytes(huge_sig))
    huge_payload = bytearray(data)
    struct.pack_into("<Q", huge_payload, at + 36 + sig_len, 2**63 + 5)
    with pytest.raises(nx_hal.InvalidArgumentError, match="truncated or has trailing bytes"):
        devices[0].load_executable(bytes(huge_payload))
    huge_key = bytearray(data)
    struct.pack_into("<I", huge_key, 12, 0xFFFFFFFF)
    with pytest.raises(nx_hal.InvalidArgumentError, match="truncated"):
        devices[0].load_executable(bytes(huge_key))


def test_a_version_1_blob_is_another_format(devices: list[Any]) -> None:
    data, _ = _blob(devices[0])
    old = bytearray(data)
    struct.pack_into("<I", old, 8, 1)
    with pytest.raises(nx_hal.FailedPreconditionError, match="format version 1, this plugin reads 2"):
        devices[0].load_executable(bytes(old))
