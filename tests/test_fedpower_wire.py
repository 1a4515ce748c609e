"""The FedPower round and reply messages: round trips, validation, WireError reasons."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from edge_runtime.wire import REASONS, WireError
from edge_runtime.wire.fedpower import (
    ReplyMessage,
    RoundMessage,
    decode_reply,
    decode_round,
    encode_reply,
    encode_round,
    initial_basis,
)


def _round(basis=None, **kw) -> RoundMessage:
    fields = dict(
        root="root", epoch="e", round=3, rank=4, basis=basis, local_steps=2, timeout_s=5.0
    )
    return RoundMessage(**{**fields, **kw})


def _reply(**kw) -> ReplyMessage:
    y = np.random.default_rng(0).standard_normal((6, 4)) * 100  # not orthonormal
    fields = dict(node_id="pi-01", epoch="e", round=3, y=y, n_samples=10, sources={"s": 9})
    return ReplyMessage(**{**fields, **kw})


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_round_trip(dtype):
    z = initial_basis(1, 6, 4)
    msg = decode_round(encode_round(_round(z, deployment="dep"), dtype=dtype))
    assert (msg.round, msg.rank, msg.local_steps, msg.deployment) == (3, 4, 2, "dep")
    assert np.allclose(msg.basis, z, atol=1e-6 if dtype == "float32" else 0)
    reply = decode_reply(encode_reply(_reply(), dtype=dtype))
    assert reply.n_samples == 10 and dict(reply.sources) == {"s": 9}
    assert np.allclose(reply.y, _reply().y, rtol=1e-6 if dtype == "float32" else 0)


def test_round_without_basis_starts_from_the_seeded_basis():
    msg = decode_round(encode_round(_round(None, seed=7)))
    assert msg.basis is None and msg.n_features is None
    assert np.array_equal(msg.start_basis(6), initial_basis(7, 6, 4))
    with pytest.raises(ValueError):
        msg.start_basis(3)  # rank 4 > 3 features


def _mutated(payload: bytes, **changes) -> bytes:
    obj = msgpack.unpackb(payload, raw=False)
    obj.update(changes)
    return msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"round": 0}, "seq"),
        ({"n": 0}, "n_samples"),
        ({"r": 7}, "rank"),
        ({"y": b"\0" * 8}, "byte_length"),
        ({"dtype": "float16"}, "dtype"),
        ({"v": 2}, "version_newer"),
        ({"v": 0}, "version"),
        ({"node": "a/b"}, "node_id"),
    ],
)
def test_bad_replies_are_refused_with_a_reason(changes, reason):
    payload = encode_reply(_reply())
    with pytest.raises(WireError) as info:
        decode_reply(_mutated(payload, **changes))
    assert info.value.reason == reason and reason in REASONS


def test_non_finite_and_oversized_and_garbage():
    y = _reply().y.copy()
    y[0, 0] = np.nan
    with pytest.raises(WireError, match="non-finite") as info:
        _reply(y=y)
    assert info.value.reason == "non_finite"
    with pytest.raises(WireError) as info:
        encode_reply(_reply(y=_reply().y * 1e300), dtype="float32")
    assert info.value.reason == "non_finite"
    payload = encode_reply(_reply())
    with pytest.raises(WireError) as info:
        decode_reply(payload, max_bytes=len(payload) - 1)
    assert info.value.reason == "too_large"
    for junk in (b"", b"\xc1", b"\x93\x01\x02\x03", msgpack.packb({"v": 1})):
        with pytest.raises(WireError):
            decode_reply(junk)
        with pytest.raises(WireError):
            decode_round(junk)


def test_round_basis_must_be_orthonormal():
    payload = encode_round(_round(initial_basis(0, 6, 4)))
    bad = np.full((6, 4), 0.5, dtype="<f8").tobytes()
    with pytest.raises(WireError) as info:
        decode_round(_mutated(payload, basis=bad))
    assert info.value.reason == "not_orthonormal"
    with pytest.raises(WireError) as info:
        _round(initial_basis(0, 6, 3))  # 3 columns, rank 4
    assert info.value.reason == "rank"
    with pytest.raises(WireError):
        _round(local_steps=0)
