"""The serialized executable's digest (issue #11): every byte but the compat
key is checked before PJRT, which aborts or crashes on damaged bytes, sees
any. Layout: magic, u32 version, u32 key length, key, 32-byte SHA-256,
u32 signature length, signature, u64 payload length, payload.

These are the plugin's own bytes (``Executable._serialize``): ``serialize()``
returns them sealed with this user's key, and ``load_executable`` hands
bytes without a valid seal to the plugin only with ``trusted=True``. Each
damaged blob here is first shown refused without it, before PJRT or the
plugin sees a byte."""

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
    """A serialized add (the plugin's bytes) and the offset of its digest."""
    data = dev.compile((PROGRAMS / "add.mlir").read_text(), format="stablehlo", cache=False)._serialize()
    assert data[:8] == b"NXHALTPU"
    (key_len,) = struct.unpack_from("<I", data, 12)
    return data, 16 + key_len


def test_digest_covers_all_but_the_key(devices: list[Any]) -> None:
    dev = devices[0]
    data, at = _blob(dev)
    assert struct.unpack_from("<I", data, 8) == (2,)  # the format that carries a digest
    want = hashlib.sha256(data[:16] + data[at + 32:]).digest()
    assert data[at:at + 32] == want
    (y,) = dev.load_executable(data, trusted=True)(X, X)
    np.testing.assert_array_equal(y.to_numpy(), 2 * X)


def _refused_untrusted(dev: Any, data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """``data`` without trusted=True: refused before the plugin sees it."""
    from nx_hal.device import Device

    def never(self: Any, blob: Any, **options: object) -> Any:
        raise AssertionError("the plugin saw bytes nx_hal did not seal")

    with monkeypatch.context() as m:
        m.setattr(Device, "_deserialize", never)
        with pytest.raises(nx_hal.InvalidArgumentError, match=r"native code.*trusted=True"):
            dev.load_executable(data)


def test_serialize_seals_the_plugins_bytes(devices: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    exe = devices[0].compile((PROGRAMS / "add.mlir").read_text(), format="stablehlo", cache=False)
    sealed, data = exe.serialize(), exe._serialize()
    # The seal's magic and HMAC-SHA-256 tag, then the plugin's bytes (two
    # serializations need not be byte-identical: compared by their format).
    assert sealed[:8] == b"NXHALEX1" and sealed[40:48] == data[:8] == b"NXHALTPU"
    (y,) = devices[1].load_executable(sealed)(X, X)
    np.testing.assert_array_equal(y.to_numpy(), 2 * X)
    _refused_untrusted(devices[0], data, monkeypatch)
    changed = bytearray(sealed)
    changed[-1] ^= 0x40
    _refused_untrusted(devices[0], bytes(changed), monkeypatch)


@pytest.mark.parametrize("where", ["digest", "signature", "payload_start", "payload_end"])
def test_a_flipped_byte_is_a_digest_mismatch(devices: list[Any], where: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    data, at = _blob(devices[0])
    (sig_len,) = struct.unpack_from("<I", data, at + 32)
    offset = {"digest": at + 5, "signature": at + 36, "payload_start": at + 36 + sig_len + 8,
              "payload_end": len(data) - 1}[where]
    bad = bytearray(data)
    bad[offset] ^= 0x40
    _refused_untrusted(devices[0], bytes(bad), monkeypatch)
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: digest mismatch"):
        devices[0].load_executable(bytes(bad), trusted=True)


def test_size_fields_past_the_blob_are_refused_before_reading(devices: list[Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    data, at = _blob(devices[0])
    (sig_len,) = struct.unpack_from("<I", data, at + 32)
    huge_sig = bytearray(data)
    struct.pack_into("<I", huge_sig, at + 32, 0xFFFFFFF0)
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: truncated"):
        devices[0].load_executable(bytes(huge_sig), trusted=True)
    huge_payload = bytearray(data)
    struct.pack_into("<Q", huge_payload, at + 36 + sig_len, 2**63 + 5)
    with pytest.raises(nx_hal.InvalidArgumentError, match="truncated or has trailing bytes"):
        devices[0].load_executable(bytes(huge_payload), trusted=True)
    huge_key = bytearray(data)
    struct.pack_into("<I", huge_key, 12, 0xFFFFFFFF)
    with pytest.raises(nx_hal.InvalidArgumentError, match="truncated"):
        devices[0].load_executable(bytes(huge_key), trusted=True)
    for bad in (huge_sig, huge_payload, huge_key):
        _refused_untrusted(devices[0], bytes(bad), monkeypatch)


def test_a_version_1_blob_is_another_format(devices: list[Any]) -> None:
    data, _ = _blob(devices[0])
    old = bytearray(data)
    struct.pack_into("<I", old, 8, 1)
    with pytest.raises(nx_hal.FailedPreconditionError, match="format version 1, this plugin reads 2"):
        devices[0].load_executable(bytes(old), trusted=True)


def test_authenticated_bytes_skip_only_the_digest(devices: list[Any]) -> None:
    """``authenticated`` (the caller checked an HMAC over these bytes, as
    nx_hal's store and seal do): a changed digest field loads, the payload
    PJRT reads being intact; the sizes are still checked, and without the
    option the digest is."""
    dev = devices[0]
    assert dev.attributes["authenticated_load"] is True
    data, at = _blob(dev)
    bad = bytearray(data)
    bad[at + 5] ^= 0x40
    with pytest.raises(nx_hal.InvalidArgumentError, match="corrupted executable: digest mismatch"):
        dev._deserialize(bytes(bad))
    (y,) = dev._deserialize(bytes(bad), authenticated=True)(X, X)
    np.testing.assert_array_equal(y.to_numpy(), 2 * X)
    (sig_len,) = struct.unpack_from("<I", data, at + 32)
    struct.pack_into("<Q", bad, at + 36 + sig_len, 2**63 + 5)
    with pytest.raises(nx_hal.InvalidArgumentError, match="truncated or has trailing bytes"):
        dev._deserialize(bytes(bad), authenticated=True)
    with pytest.raises(nx_hal.InvalidArgumentError, match="'authenticated'"):
        dev._deserialize(data, options={"authenticated": 1.5})
