"""Property tests of `edge_runtime.wire`: decoders fail only with `WireError`, valid data decodes.

Bounded so the file runs in seconds: every test has at most 300 examples and no deadline.
"""

from __future__ import annotations

import contextlib
import json
import math

import msgpack
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_runtime.fpca.subspace import Subspace, flip_signs
from edge_runtime.wire import (
    PrivacyParams,
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    WireError,
    decode_readings,
    decode_status,
    decode_subspace,
    encode_readings,
    encode_status,
    encode_subspace,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=300, deadline=None)

SUBSPACE_KEYS = ["v", "node", "epoch", "seq", "n", "d", "r", "dtype", "basis", "sv", "ts"]
SUBSPACE_KEYS += ["privacy", "prov"]
MAX_BYTES = 64 * 1024  # keeps generated payloads (and the decoders' work) small


def decode_any(payload: bytes) -> None:
    """Run every decoder; each must return a message or raise WireError, nothing else."""
    for decode in (decode_subspace, decode_status):
        with contextlib.suppress(WireError):
            decode(payload, max_bytes=MAX_BYTES)
    for n_features in (None, 3):
        with contextlib.suppress(WireError):
            decode_readings(payload, n_features=n_features, max_bytes=MAX_BYTES)


# --------------------------------------------------------------------------- strategies
ids = st.text(
    alphabet=st.characters(exclude_characters="/+#\x00", exclude_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.binary(max_size=40)
)
msgpack_objects = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(
            st.sampled_from(SUBSPACE_KEYS) | st.text(max_size=6), children, max_size=8
        )
    ),
    max_leaves=10,
)
json_objects = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=10,
)


# mechanism / neighbours names: 1-32 characters from [a-z0-9+-] (known ones and any other)
privacy_names = st.sampled_from(["gaussian", "fpca-eq8", "fpca-eq8+gaussian", "replace-one"]) | (
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789+-", min_size=1, max_size=32)
)


@st.composite
def subspace_messages(draw: st.DrawFn) -> SubspaceMessage:
    n_features = draw(st.integers(min_value=1, max_value=12))
    rank = draw(st.integers(min_value=0, max_value=n_features))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(n_features, rank)))
    scale = draw(st.floats(min_value=1e-6, max_value=1e6))
    sv = np.sort(rng.uniform(0.0, scale, size=rank))[::-1]
    n_samples = draw(st.integers(min_value=0, max_value=2**63 - 1))
    privacy = draw(
        st.none()
        | st.builds(
            PrivacyParams,
            epsilon=st.floats(min_value=1e-3, max_value=100.0),
            delta=st.floats(min_value=1e-12, max_value=0.5),
            clip_norm=st.floats(min_value=1e-3, max_value=1e3),
            mechanism=privacy_names,
            neighbours=privacy_names,
        )
    )
    return SubspaceMessage(
        node_id=draw(ids),
        epoch=draw(ids),
        seq=draw(st.integers(min_value=0, max_value=2**63 - 1)),
        subspace=Subspace(flip_signs(basis), sv, n_samples),
        timestamp=draw(st.floats(allow_nan=False, allow_infinity=False)),
        privacy=privacy,
        provenance=draw(
            st.dictionaries(ids, st.integers(min_value=0, max_value=2**63 - 1), max_size=5)
        ),
    )


dtypes = st.sampled_from(["float64", "float32"])
finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
readings_arrays = st.integers(min_value=1, max_value=6).flatmap(
    lambda width: st.lists(
        st.lists(finite_floats, min_size=width, max_size=width), min_size=1, max_size=8
    )
)
status_details = st.builds(
    StatusDetail,
    node_id=ids,
    role=st.sampled_from(["leaf", "aggregator", "root"]),
    online=st.booleans(),
    rank=st.integers(min_value=0, max_value=1000),
    n_samples=st.integers(min_value=0, max_value=2**63 - 1),
    seq=st.integers(min_value=0, max_value=2**63 - 1),
    epoch=ids,
    rejects=st.dictionaries(
        st.text(min_size=1, max_size=12).filter(str.isprintable), st.integers(0, 10**6), max_size=4
    ),
    uptime_s=st.floats(min_value=0.0, max_value=1e9),
    extra=st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(min_value=-(2**63), max_value=2**63 - 1)
            | finite_floats
            | st.text(max_size=8),
            lambda children: (
                st.lists(children, max_size=4)
                | st.dictionaries(st.text(max_size=6), children, max_size=4)
            ),
            max_leaves=6,
        ),
        max_size=4,
    ),
    privacy=st.none()
    | st.builds(
        PrivacyStatus,
        epsilon=st.floats(min_value=1e-3, max_value=100.0),
        delta=st.floats(min_value=1e-12, max_value=0.5),
        clip_norm=st.floats(min_value=1e-3, max_value=1e3),
        noise_std=st.none() | st.floats(min_value=0.0, max_value=1e6),
        block_size=st.none() | st.integers(min_value=1, max_value=2**62),
        chunk_size=st.none() | st.integers(min_value=1, max_value=2**62),
        mechanism=privacy_names,
        neighbours=privacy_names,
        horizon=st.none() | st.integers(min_value=1, max_value=4096),
        releases=st.none() | st.integers(min_value=0, max_value=2**62),
        clipped=st.none() | st.integers(min_value=0, max_value=2**62),
    ),
)


def assert_same_message(got: SubspaceMessage, want: SubspaceMessage, dtype: str) -> None:
    assert (got.node_id, got.epoch, got.seq, got.n_samples) == (
        want.node_id,
        want.epoch,
        want.seq,
        want.n_samples,
    )
    assert got.timestamp == want.timestamp
    assert got.privacy == want.privacy
    assert dict(got.provenance) == dict(want.provenance)
    wire_dtype = np.float64 if dtype == "float64" else np.float32
    np.testing.assert_array_equal(
        got.subspace.basis, want.subspace.basis.astype(wire_dtype).astype(np.float64), strict=True
    )
    np.testing.assert_array_equal(
        got.subspace.singular_values,
        want.subspace.singular_values.astype(wire_dtype).astype(np.float64),
        strict=True,
    )


# --------------------------------------------------------------------------- garbage in
@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_never_raise_anything_but_wire_error(payload: bytes) -> None:
    decode_any(payload)


@FUZZ
@given(msgpack_objects)
def test_random_msgpack_objects_never_raise_anything_but_wire_error(obj: object) -> None:
    decode_any(msgpack.packb(obj, use_bin_type=True))


@FUZZ
@given(json_objects)
def test_random_json_documents_never_raise_anything_but_wire_error(obj: object) -> None:
    decode_any(json.dumps(obj).encode("utf-8"))


# --------------------------------------------------------------------------- valid data decodes
@ROUND_TRIP
@given(subspace_messages(), dtypes)
def test_valid_subspace_messages_always_decode_to_what_was_encoded(
    msg: SubspaceMessage, dtype: str
) -> None:
    got = decode_subspace(encode_subspace(msg, dtype=dtype))  # type: ignore[arg-type]
    assert_same_message(got, msg, dtype)


@ROUND_TRIP
@given(
    readings_arrays,
    st.none() | ids,
    st.none() | st.integers(min_value=0, max_value=2**63 - 1),
    st.sampled_from(["msgpack", "json"]),
)
def test_valid_readings_always_decode_to_what_was_encoded(
    rows: list[list[float]], source: str | None, seq: int | None, fmt: str
) -> None:
    values = np.array(rows)
    payload = encode_readings(values, source=source, seq=seq, fmt=fmt)  # type: ignore[arg-type]
    got = decode_readings(payload, n_features=values.shape[1])
    np.testing.assert_array_equal(got.values, values, strict=True)
    assert (got.source, got.seq) == (source, seq)


@ROUND_TRIP
@given(status_details)
def test_valid_status_details_always_decode_to_what_was_encoded(status: StatusDetail) -> None:
    assert decode_status(encode_status(status)) == status


# --------------------------------------------------------------------------- mutations
@FUZZ
@given(subspace_messages(), dtypes, st.data())
def test_truncated_subspace_payloads_are_rejected_as_not_msgpack(
    msg: SubspaceMessage, dtype: str, data: st.DataObject
) -> None:
    payload = encode_subspace(msg, dtype=dtype)  # type: ignore[arg-type]
    cut = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    try:
        decode_subspace(payload[:cut])
    except WireError as exc:
        assert exc.reason == "not_msgpack"
    else:
        raise AssertionError(f"a payload truncated to {cut} of {len(payload)} bytes decoded")


@FUZZ
@given(subspace_messages(), dtypes, st.data())
def test_bit_flipped_subspace_payloads_decode_or_raise_wire_error(
    msg: SubspaceMessage, dtype: str, data: st.DataObject
) -> None:
    payload = bytearray(encode_subspace(msg, dtype=dtype))  # type: ignore[arg-type]
    flips = data.draw(st.lists(st.integers(0, 8 * len(payload) - 1), min_size=1, max_size=4))
    for bit in flips:
        payload[bit // 8] ^= 1 << (bit % 8)
    try:
        got = decode_subspace(bytes(payload))
    except WireError:
        return
    basis = got.subspace.basis
    assert np.isfinite(basis).all()
    gram_error = np.abs(basis.T @ basis - np.eye(got.rank)).max(initial=0.0)
    assert gram_error <= 1e-4


@FUZZ
@given(subspace_messages(), st.sampled_from(SUBSPACE_KEYS))
def test_subspace_payloads_missing_a_field_are_rejected_as_missing_field(
    msg: SubspaceMessage, key: str
) -> None:
    obj = msgpack.unpackb(encode_subspace(msg))
    del obj[key]
    try:
        decode_subspace(msgpack.packb(obj, use_bin_type=True))
    except WireError as exc:
        assert exc.reason == "missing_field"
    else:
        raise AssertionError(f"a payload without {key!r} decoded")


@FUZZ
@given(subspace_messages(), st.sampled_from(SUBSPACE_KEYS), msgpack_objects)
def test_subspace_payloads_with_a_field_of_another_value_decode_or_raise_wire_error(
    msg: SubspaceMessage, key: str, value: object
) -> None:
    obj = msgpack.unpackb(encode_subspace(msg))
    obj[key] = value
    try:
        got = decode_subspace(msgpack.packb(obj, use_bin_type=True))
    except WireError:
        return
    assert got.n_features == got.subspace.basis.shape[0]
    assert math.isfinite(got.timestamp)


@FUZZ
@given(readings_arrays, st.sampled_from(["msgpack", "json"]), st.data())
def test_mutated_readings_payloads_decode_or_raise_wire_error(
    rows: list[list[float]], fmt: str, data: st.DataObject
) -> None:
    payload = bytearray(encode_readings(rows, source="s", seq=1, fmt=fmt))  # type: ignore[arg-type]
    cut = data.draw(st.integers(min_value=0, max_value=len(payload)))
    payload = payload[:cut] if data.draw(st.booleans()) else payload
    for bit in data.draw(st.lists(st.integers(0, 8 * max(len(payload), 1) - 1), max_size=3)):
        if payload:
            payload[bit // 8] ^= 1 << (bit % 8)
    try:
        got = decode_readings(bytes(payload))
    except WireError:
        return
    assert got.values.ndim == 2
    assert np.isfinite(got.values).all()


@FUZZ
@given(
    status_details,
    st.sampled_from(["node_id", "online", "rank", "rejects", "extra", "privacy"]),
    json_objects,
)
def test_status_documents_with_a_field_of_another_value_decode_or_raise_wire_error(
    status: StatusDetail, key: str, value: object
) -> None:
    doc = json.loads(encode_status(status))
    doc[key] = value
    with contextlib.suppress(WireError):
        decode_status(json.dumps(doc).encode("utf-8"))


def _decode_value_by_value(payload: bytes, n_features: int | None) -> object:
    """`decode_readings` without its numpy fast path (``float64_rows``), as an outcome."""
    from edge_runtime.wire import readings

    fast, readings.float64_rows = readings.float64_rows, lambda data: None
    try:
        got = decode_readings(payload, n_features=n_features)
        return got.values.tobytes(), got.values.shape, got.source, got.seq
    except WireError as exc:
        return exc.reason, str(exc)
    finally:
        readings.float64_rows = fast


@FUZZ
@given(
    readings_arrays,
    st.booleans(),
    st.sampled_from([None, 1, 3, 6]),
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from([0x00, 0x90, 0x92, 0xCB, 0xDC, 0xCA]))
    ),
    st.booleans(),
)
def test_readings_fast_path_decodes_exactly_as_value_by_value(
    rows: list[list[float]],
    flat: bool,
    n_features: int | None,
    edits: list[tuple[int, int]],
    cut: bool,
) -> None:
    payload = bytearray(msgpack.packb(rows[0] if flat else rows))
    for at, byte in edits:  # msgpack array headers and float tags, anywhere
        payload[at % len(payload)] = byte
    if cut:
        payload = payload[:-1]
    try:
        got = decode_readings(bytes(payload), n_features=n_features)
        outcome: object = got.values.tobytes(), got.values.shape, got.source, got.seq
    except WireError as exc:
        outcome = exc.reason, str(exc)
    assert outcome == _decode_value_by_value(bytes(payload), n_features)
