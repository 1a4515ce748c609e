"""Tests of `edge_runtime.wire`: exact round trips and one test per rejection reason."""

from __future__ import annotations

import json
import math
import pickle
import re
from collections.abc import Callable

import msgpack
import numpy as np
import pytest

from edge_runtime import wire
from edge_runtime.fpca.subspace import Subspace, flip_signs
from edge_runtime.wire import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_PROVENANCE_ENTRIES,
    MAX_READING_ROWS,
    ORTHONORMALITY_TOL,
    REASONS,
    SCHEMA_VERSION,
    PrivacyParams,
    PrivacyStatus,
    SensorReadings,
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

SUBSPACE_KEYS = {"v", "node", "epoch", "seq", "n", "d", "r", "dtype", "basis", "sv", "ts"}
SUBSPACE_KEYS |= {"privacy", "prov"}


# --------------------------------------------------------------------------- helpers
def orthonormal_basis(n_features: int, rank: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n_features, rank)))
    return flip_signs(q)


def make_subspace(n_features: int = 48, rank: int = 10, n_samples: int = 500) -> Subspace:
    sv = np.sort(np.random.default_rng(1).uniform(0.1, 50.0, size=rank))[::-1]
    return Subspace(orthonormal_basis(n_features, rank), sv, n_samples)


def make_message(**overrides: object) -> SubspaceMessage:
    fields: dict[str, object] = {
        "node_id": "pi-01",
        "epoch": "3f2a9c41d0e8b7a6",
        "seq": 7,
        "subspace": make_subspace(),
        "timestamp": 1_700_000_000.25,
        "privacy": PrivacyParams(epsilon=1.0, delta=1e-5, clip_norm=2.5),
        "provenance": {"pi-01": 300, "pi-02": 200},
    }
    fields.update(overrides)
    return SubspaceMessage(**fields)  # type: ignore[arg-type]


def valid_map(**overrides: object) -> dict[str, object]:
    """The decoded msgpack map of a valid message, for mutation."""
    obj = msgpack.unpackb(encode_subspace(make_message(**overrides)), raw=False)
    assert isinstance(obj, dict)
    return obj


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def assert_same_message(got: SubspaceMessage, want: SubspaceMessage) -> None:
    assert got.node_id == want.node_id
    assert got.epoch == want.epoch
    assert got.seq == want.seq
    assert got.timestamp == want.timestamp
    assert got.privacy == want.privacy
    assert dict(got.provenance) == dict(want.provenance)
    assert got.n_samples == want.n_samples
    assert got.subspace.basis.shape == want.subspace.basis.shape
    np.testing.assert_array_equal(got.subspace.basis, want.subspace.basis, strict=True)
    np.testing.assert_array_equal(
        got.subspace.singular_values, want.subspace.singular_values, strict=True
    )


def make_status(**overrides: object) -> StatusDetail:
    fields: dict[str, object] = {
        "node_id": "site-a",
        "role": "aggregator",
        "online": True,
        "rank": 10,
        "n_samples": 4096,
        "seq": 12,
        "epoch": "a1b2c3d4",
        "rejects": {"not_orthonormal": 2, "too_large": 1},
        "uptime_s": 12.5,
        "extra": {"children": {"pi-01": {"seq": 3, "n_samples": 100}}, "merges": 4},
    }
    fields.update(overrides)
    return StatusDetail(**fields)  # type: ignore[arg-type]


def status_doc(**overrides: object) -> dict[str, object]:
    doc = json.loads(encode_status(make_status()))
    doc.update(overrides)
    return doc


PRIVATE_LEAF = PrivacyStatus(
    1.0,
    1e-5,
    8230.0,
    noise_std=6.44,
    block_size=241,
    mechanism="gaussian",
    neighbours="replace-one",
    horizon=4,
    releases=3,
    clipped=17,
)


def private_status_doc(**privacy: object) -> dict[str, object]:
    """A status document of a private leaf, its ``privacy`` map updated with ``privacy``."""
    doc = json.loads(encode_status(make_status(privacy=PRIVATE_LEAF)))
    doc["privacy"].update(privacy)
    return doc


def nested_lists(depth: int) -> dict[str, object]:
    """A map whose value is ``depth`` nested lists around a number."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return {"a": value}


def without(obj: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in obj.items() if k != key}


# --------------------------------------------------------------------------- subspace round trips
def test_float64_subspace_message_round_trips_exactly_with_privacy_and_provenance() -> None:
    msg = make_message()
    got = decode_subspace(encode_subspace(msg))
    assert_same_message(got, msg)
    assert got.privacy == PrivacyParams(1.0, 1e-5, 2.5)
    assert (got.n_features, got.rank, got.n_samples) == (48, 10, 500)


def test_subspace_message_without_privacy_or_provenance_round_trips() -> None:
    msg = make_message(privacy=None, provenance={})
    got = decode_subspace(encode_subspace(msg))
    assert_same_message(got, msg)
    assert got.privacy is None
    assert dict(got.provenance) == {}


def test_float32_subspace_message_decodes_to_the_float32_rounded_arrays_as_float64() -> None:
    msg = make_message()
    payload = encode_subspace(msg, dtype="float32")
    got = decode_subspace(payload)
    want_basis = msg.subspace.basis.astype(np.float32).astype(np.float64)
    want_sv = msg.subspace.singular_values.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(got.subspace.basis, want_basis, strict=True)
    np.testing.assert_array_equal(got.subspace.singular_values, want_sv, strict=True)
    assert msgpack.unpackb(payload)["dtype"] == "float32"


def test_float32_payload_is_about_half_the_size_of_float64() -> None:
    msg = make_message(provenance={})
    size64 = len(encode_subspace(msg))
    size32 = len(encode_subspace(msg, dtype="float32"))
    assert size32 < 0.55 * size64


def test_rank_zero_subspace_round_trips_with_empty_byte_strings() -> None:
    msg = make_message(subspace=Subspace.empty(48), privacy=None, provenance={"pi-01": 0})
    payload = encode_subspace(msg)
    obj = msgpack.unpackb(payload)
    assert (obj["r"], obj["basis"], obj["sv"]) == (0, b"", b"")
    got = decode_subspace(payload)
    assert got.subspace.basis.shape == (48, 0)
    assert got.rank == 0
    assert got.n_samples == 0


def test_rank_zero_subspace_with_samples_is_accepted() -> None:
    msg = make_message(subspace=Subspace(np.zeros((5, 0)), np.zeros(0), 20))
    assert decode_subspace(encode_subspace(msg, dtype="float32")).n_samples == 20


def test_full_rank_subspace_round_trips() -> None:
    subspace = Subspace(orthonormal_basis(6, 6), np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0]), 9)
    got = decode_subspace(encode_subspace(make_message(subspace=subspace)))
    np.testing.assert_array_equal(got.subspace.basis, subspace.basis)


def test_encoded_subspace_map_has_exactly_the_documented_keys_and_values() -> None:
    obj = msgpack.unpackb(encode_subspace(make_message()), raw=False)
    assert set(obj) == SUBSPACE_KEYS
    assert obj["v"] == SCHEMA_VERSION
    assert (obj["node"], obj["n"], obj["d"], obj["r"], obj["dtype"]) == (
        "pi-01",
        500,
        48,
        10,
        "float64",
    )
    assert obj["privacy"] == {
        "epsilon": 1.0,
        "delta": 1e-5,
        "clip_norm": 2.5,
        "mechanism": "gaussian",
        "neighbours": "replace-one",
    }
    assert obj["prov"] == {"pi-01": 300, "pi-02": 200}


def test_basis_bytes_are_little_endian_values_in_c_order() -> None:
    msg = make_message()
    obj = msgpack.unpackb(encode_subspace(msg), raw=False)
    basis = np.frombuffer(obj["basis"], dtype="<f8").reshape(48, 10)
    np.testing.assert_array_equal(basis, msg.subspace.basis)
    assert obj["basis"][:8] == np.float64(msg.subspace.basis[0, 0]).astype("<f8").tobytes()


def test_decoded_arrays_are_read_only_float64() -> None:
    got = decode_subspace(encode_subspace(make_message(), dtype="float32"))
    assert got.subspace.basis.dtype == np.float64
    assert got.subspace.singular_values.dtype == np.float64
    assert not got.subspace.basis.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        got.subspace.basis[0, 0] = 1.0


def test_decoded_provenance_is_read_only() -> None:
    got = decode_subspace(encode_subspace(make_message()))
    with pytest.raises(TypeError):
        got.provenance["pi-03"] = 1  # type: ignore[index]


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    obj = valid_map()
    obj["future_field"] = {"anything": [1, 2, 3]}
    assert decode_subspace(pack(obj)).seq == 7


def test_an_int_timestamp_and_int_privacy_values_are_accepted_as_floats() -> None:
    obj = valid_map()
    obj["ts"] = 1_700_000_000
    obj["privacy"] = {"epsilon": 2, "delta": 0.5, "clip_norm": 1, "mechanism": "gaussian"}
    got = decode_subspace(pack(obj))
    assert isinstance(got.timestamp, float)
    assert got.privacy == PrivacyParams(2.0, 0.5, 1.0)


@pytest.mark.parametrize("mechanism", ["gaussian", "fpca-eq8", "fpca-eq8+gaussian"])
def test_the_mechanism_and_neighbours_round_trip(mechanism: str) -> None:
    privacy = PrivacyParams(1.0, 1e-5, 2.5, mechanism=mechanism, neighbours="replace-one")
    msg = make_message(privacy=privacy)
    got = decode_subspace(encode_subspace(msg))
    assert got.privacy == privacy
    assert (got.privacy.mechanism, got.privacy.neighbours) == (mechanism, "replace-one")
    assert got.privacy != PrivacyParams(1.0, 1e-5, 2.5, mechanism="other-mechanism")


def test_a_privacy_map_of_an_older_peer_decodes_as_fpca_eq8_with_replace_one_neighbours() -> None:
    obj = valid_map()
    obj["privacy"] = {"epsilon": 1.0, "delta": 1e-5, "clip_norm": 2.5}  # before issue 10
    got = decode_subspace(pack(obj))
    assert got.privacy == PrivacyParams(
        1.0, 1e-5, 2.5, mechanism="fpca-eq8", neighbours="replace-one"
    )
    assert (wire.LEGACY_MECHANISM, wire.LEGACY_NEIGHBOURS) == ("fpca-eq8", "replace-one")
    obj["privacy"] = {"epsilon": 1.0, "delta": 1e-5, "clip_norm": 2.5, "mechanism": "gaussian"}
    assert decode_subspace(pack(obj)).privacy == PrivacyParams(1.0, 1e-5, 2.5)


BAD_PRIVACY_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("Gaussian", id="upper-case"),
    pytest.param("gauss ian", id="space"),
    pytest.param("gauss_ian", id="underscore"),
    pytest.param("x" * 33, id="33-characters"),
    pytest.param("gaussian\x00", id="nul"),
    pytest.param("gaußian", id="non-ascii"),
]


@pytest.mark.parametrize("key", ["mechanism", "neighbours"])
@pytest.mark.parametrize("name", BAD_PRIVACY_NAMES)
def test_bad_mechanism_or_neighbours_names_are_rejected_with_reason_privacy(
    key: str, name: str
) -> None:
    obj = valid_map()
    obj["privacy"][key] = name  # type: ignore[index]
    with pytest.raises(WireError) as info:
        decode_subspace(pack(obj))
    assert info.value.reason == "privacy"
    assert f"privacy.{key}" in str(info.value)
    with pytest.raises(WireError) as info:
        PrivacyParams(1.0, 1e-5, 2.5, **{key: name})
    assert info.value.reason == "privacy"
    with pytest.raises(WireError) as info:
        PrivacyStatus(1.0, 1e-5, 2.5, **{key: name})
    assert info.value.reason == "privacy"


def test_names_of_32_characters_from_the_allowed_set_are_accepted() -> None:
    name = "abcdefghijklmnopqrstuvwxyz0123+-"
    assert len(name) == wire.MAX_PRIVACY_NAME_CHARS == 32
    privacy = PrivacyParams(1.0, 1e-5, 2.5, mechanism=name, neighbours=name)
    assert decode_subspace(encode_subspace(make_message(privacy=privacy))).privacy == privacy


def test_a_mechanism_that_is_not_a_string_is_a_field_type_error() -> None:
    obj = valid_map()
    obj["privacy"]["mechanism"] = 8  # type: ignore[index]
    with pytest.raises(WireError) as info:
        decode_subspace(pack(obj))
    assert info.value.reason == "field_type"


def test_singular_values_equal_within_relative_slack_are_accepted() -> None:
    obj = valid_map()
    sv = np.frombuffer(obj["sv"], dtype="<f8").copy()
    sv[1] = sv[0] * (1 + 1e-13)
    obj["sv"] = sv.tobytes()
    decode_subspace(pack(obj))


def test_a_basis_slightly_off_orthonormal_within_tolerance_is_accepted() -> None:
    obj = valid_map()
    basis = np.frombuffer(obj["basis"], dtype="<f8").reshape(48, 10) * (1 + 1e-8)
    obj["basis"] = basis.tobytes()
    decode_subspace(pack(obj))
    with pytest.raises(WireError) as info:
        decode_subspace(pack(obj), tol=1e-12)
    assert info.value.reason == "not_orthonormal"


def test_a_float32_basis_computed_in_float32_passes_the_float32_tolerance_only() -> None:
    obj = valid_map()
    basis = np.frombuffer(obj["basis"], dtype="<f8").reshape(48, 10) * (1 + 2e-5)
    obj["basis"] = basis.astype("<f4").tobytes()
    obj["sv"] = np.frombuffer(obj["sv"], dtype="<f8").astype("<f4").tobytes()
    obj["dtype"] = "float32"
    decode_subspace(pack(obj))
    with pytest.raises(WireError) as info:
        decode_subspace(pack(obj), tol_float32=ORTHONORMALITY_TOL)
    assert info.value.reason == "not_orthonormal"


# --------------------------------------------------------------------------- subspace rejections
def set_key(key: str, value: object) -> Callable[[dict[str, object]], object]:
    def mutate(obj: dict[str, object]) -> object:
        obj[key] = value
        return obj

    return mutate


def edit_array(
    key: str, edit: Callable[[np.ndarray], None]
) -> Callable[[dict[str, object]], object]:
    def mutate(obj: dict[str, object]) -> object:
        values = np.frombuffer(obj[key], dtype="<f8").copy()  # type: ignore[arg-type]
        if key == "basis":
            values = values.reshape(48, 10)
        edit(values)
        obj[key] = values.tobytes()
        return obj

    return mutate


def _set(index: tuple[int, ...] | int, value: float) -> Callable[[np.ndarray], None]:
    def edit(values: np.ndarray) -> None:
        values[index] = value

    return edit


def _scale(factor: float) -> Callable[[np.ndarray], None]:
    def edit(values: np.ndarray) -> None:
        values *= factor

    return edit


def _mix_columns(values: np.ndarray) -> None:
    values[:, 1] = (values[:, 0] + values[:, 1]) / math.sqrt(2)


def _many_provenance(obj: dict[str, object]) -> object:
    obj["prov"] = {f"leaf-{i}": 1 for i in range(MAX_PROVENANCE_ENTRIES + 1)}
    return obj


SUBSPACE_REJECTIONS = [
    pytest.param(lambda o: b"\xc1", "not_msgpack", id="never-used-byte"),
    pytest.param(lambda o: pack(o)[:-3], "not_msgpack", id="truncated"),
    pytest.param(lambda o: pack(o) + b"\x00", "not_msgpack", id="trailing-byte"),
    pytest.param(lambda o: b"", "not_msgpack", id="empty-payload"),
    pytest.param(lambda o: pack({1: 2}), "not_msgpack", id="int-map-key"),
    pytest.param(lambda o: b"\x81\xa1v\xa2\xff\xfe", "not_msgpack", id="invalid-utf8-str"),
    pytest.param(set_key("x", msgpack.ExtType(5, b"payload")), "ext_type", id="ext-type"),
    pytest.param(set_key("seq", msgpack.Timestamp(5)), "ext_type", id="timestamp-ext"),
    pytest.param(lambda o: b"\x91" * 5000, "too_deep", id="nested-arrays"),
    pytest.param(lambda o: pack([1, 2, 3]), "not_map", id="array"),
    pytest.param(lambda o: pack(None), "not_map", id="nil"),
    pytest.param(set_key("v", 2), "version_newer", id="version-2-newer"),
    pytest.param(set_key("v", 2**64 - 1), "version_newer", id="version-huge-newer"),
    pytest.param(set_key("v", 0), "version", id="version-0"),
    pytest.param(set_key("v", -1), "version", id="version-negative"),
    pytest.param(set_key("v", 1.0), "field_type", id="version-float"),
    pytest.param(set_key("v", None), "field_type", id="version-nil"),
    pytest.param(set_key("v", "1"), "field_type", id="version-str"),
    pytest.param(set_key("v", True), "field_type", id="version-bool"),
    pytest.param(set_key("node", 17), "field_type", id="node-int"),
    pytest.param(set_key("node", b"pi-01"), "field_type", id="node-bytes"),
    pytest.param(set_key("epoch", None), "field_type", id="epoch-nil"),
    pytest.param(set_key("seq", True), "field_type", id="seq-bool"),
    pytest.param(set_key("seq", 7.0), "field_type", id="seq-float"),
    pytest.param(set_key("n", "500"), "field_type", id="n-str"),
    pytest.param(set_key("d", 48.0), "field_type", id="d-float"),
    pytest.param(set_key("r", False), "field_type", id="r-bool"),
    pytest.param(set_key("dtype", b"float64"), "field_type", id="dtype-bytes"),
    pytest.param(set_key("basis", "abc"), "field_type", id="basis-str"),
    pytest.param(set_key("sv", [1.0, 2.0]), "field_type", id="sv-array"),
    pytest.param(set_key("ts", "now"), "field_type", id="ts-str"),
    pytest.param(set_key("ts", True), "field_type", id="ts-bool"),
    pytest.param(set_key("privacy", [1.0, 1e-5, 1.0]), "field_type", id="privacy-array"),
    pytest.param(
        set_key("privacy", {"epsilon": "1", "delta": 0.1, "clip_norm": 1.0}),
        "field_type",
        id="privacy-epsilon-str",
    ),
    pytest.param(set_key("prov", [["pi-01", 3]]), "field_type", id="prov-array"),
    pytest.param(set_key("prov", {"pi-01": True}), "field_type", id="prov-count-bool"),
    pytest.param(set_key("prov", {"pi-01": 1.5}), "field_type", id="prov-count-float"),
    pytest.param(set_key("node", ""), "node_id", id="node-empty"),
    pytest.param(set_key("node", "site/pi-01"), "node_id", id="node-slash"),
    pytest.param(set_key("node", "pi+"), "node_id", id="node-plus"),
    pytest.param(set_key("node", "#"), "node_id", id="node-hash"),
    pytest.param(set_key("node", "pi\x0001"), "node_id", id="node-nul"),
    pytest.param(set_key("node", "n" * 129), "node_id", id="node-too-long"),
    pytest.param(set_key("epoch", ""), "epoch", id="epoch-empty"),
    pytest.param(set_key("epoch", "e" * 65), "epoch", id="epoch-too-long"),
    pytest.param(set_key("seq", -1), "seq", id="seq-negative"),
    pytest.param(set_key("seq", 2**63), "seq", id="seq-too-large"),
    pytest.param(set_key("n", -1), "n_samples", id="n-negative"),
    pytest.param(set_key("n", 2**64 - 1), "n_samples", id="n-too-large"),
    pytest.param(set_key("d", 0), "shape", id="d-zero"),
    pytest.param(set_key("d", wire.MAX_N_FEATURES + 1), "shape", id="d-too-large"),
    pytest.param(set_key("r", 49), "rank", id="rank-above-n-features"),
    pytest.param(set_key("r", -1), "rank", id="rank-negative"),
    pytest.param(set_key("dtype", "float16"), "dtype", id="dtype-float16"),
    pytest.param(set_key("dtype", "float32"), "byte_length", id="dtype-mislabelled"),
    pytest.param(set_key("r", 9), "byte_length", id="rank-mismatch"),
    pytest.param(set_key("d", 47), "byte_length", id="n-features-mismatch"),
    pytest.param(set_key("basis", b""), "byte_length", id="basis-empty"),
    pytest.param(lambda o: set_key("sv", o["sv"] + b"\0" * 8)(o), "byte_length", id="sv-long"),
    pytest.param(edit_array("basis", _set((3, 2), math.nan)), "non_finite", id="basis-nan"),
    pytest.param(edit_array("sv", _set(0, math.inf)), "non_finite", id="sv-inf"),
    pytest.param(set_key("ts", math.nan), "non_finite", id="ts-nan"),
    pytest.param(set_key("ts", -math.inf), "non_finite", id="ts-inf"),
    pytest.param(
        set_key("privacy", {"epsilon": math.inf, "delta": 0.1, "clip_norm": 1.0}),
        "non_finite",
        id="privacy-epsilon-inf",
    ),
    pytest.param(edit_array("basis", _scale(1.01)), "not_orthonormal", id="basis-scaled"),
    pytest.param(edit_array("basis", _set((0, 0), 2.0)), "not_orthonormal", id="entry-above-1"),
    pytest.param(edit_array("basis", _set((0, 0), 1e300)), "not_orthonormal", id="entry-huge"),
    pytest.param(edit_array("basis", _mix_columns), "not_orthonormal", id="columns-not-orthogonal"),
    pytest.param(edit_array("sv", _set(9, -1e-3)), "singular_values", id="sv-negative"),
    pytest.param(edit_array("sv", _set(3, 1e6)), "singular_values", id="sv-increasing"),
    pytest.param(
        set_key("privacy", {"epsilon": 0.0, "delta": 0.1, "clip_norm": 1.0}),
        "privacy",
        id="epsilon-zero",
    ),
    pytest.param(
        set_key("privacy", {"epsilon": 1.0, "delta": 0, "clip_norm": 1.0}),
        "privacy",
        id="delta-zero",
    ),
    pytest.param(
        set_key("privacy", {"epsilon": 1.0, "delta": 1.0, "clip_norm": 1.0}),
        "privacy",
        id="delta-one",
    ),
    pytest.param(
        set_key("privacy", {"epsilon": 1.0, "delta": 0.1, "clip_norm": -2.0}),
        "privacy",
        id="clip-norm-negative",
    ),
    pytest.param(
        set_key("privacy", {"epsilon": 1.0, "delta": 0.1}), "missing_field", id="privacy-partial"
    ),
    pytest.param(
        set_key("privacy", {"epsilon": 1.0, "delta": 0.1, "clip_norm": 1.0, "mechanism": "a b"}),
        "privacy",
        id="privacy-mechanism-space",
    ),
    pytest.param(
        set_key(
            "privacy", {"epsilon": 1.0, "delta": 0.1, "clip_norm": 1.0, "neighbours": "n" * 33}
        ),
        "privacy",
        id="privacy-neighbours-too-long",
    ),
    pytest.param(set_key("prov", {"pi-01": -1}), "provenance", id="prov-negative"),
    pytest.param(set_key("prov", {"a/b": 1}), "provenance", id="prov-bad-leaf-id"),
    pytest.param(set_key("prov", {"": 1}), "provenance", id="prov-empty-leaf-id"),
    pytest.param(_many_provenance, "provenance", id="prov-too-many-entries"),
]


@pytest.mark.parametrize(("mutate", "reason"), SUBSPACE_REJECTIONS)
def test_decode_subspace_rejects_bad_payloads_with_the_reason(
    mutate: Callable[[dict[str, object]], object], reason: str
) -> None:
    result = mutate(valid_map())
    payload = result if isinstance(result, bytes) else pack(result)
    with pytest.raises(WireError) as info:
        decode_subspace(payload)
    assert info.value.reason == reason
    assert reason in REASONS
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("key", sorted(SUBSPACE_KEYS))
def test_decode_subspace_rejects_a_missing_field_naming_it(key: str) -> None:
    with pytest.raises(WireError, match=repr(key)) as info:
        decode_subspace(pack(without(valid_map(), key)))
    assert info.value.reason == "missing_field"


def test_decode_subspace_rejects_a_payload_above_max_bytes_before_unpacking() -> None:
    payload = b"\xc1" * 101  # not msgpack at all: the size is checked first
    with pytest.raises(WireError, match="101 bytes, above the limit of 100") as info:
        decode_subspace(payload, max_bytes=100)
    assert info.value.reason == "too_large"


def test_decode_subspace_default_limit_is_four_mebibytes() -> None:
    with pytest.raises(WireError) as info:
        decode_subspace(b"\0" * (DEFAULT_MAX_PAYLOAD_BYTES + 1))
    assert info.value.reason == "too_large"


def test_decode_subspace_rejects_a_str_payload() -> None:
    with pytest.raises(WireError) as info:
        decode_subspace("not bytes")  # type: ignore[arg-type]
    assert info.value.reason == "field_type"


def test_decode_subspace_accepts_a_bytearray_payload() -> None:
    assert decode_subspace(bytearray(encode_subspace(make_message()))).seq == 7


def test_unknown_version_is_reported_before_missing_fields() -> None:
    with pytest.raises(WireError) as info:
        decode_subspace(pack({"v": 2, "something": "else"}))
    assert info.value.reason == "version_newer"
    with pytest.raises(WireError) as info:
        decode_subspace(pack({"v": 0, "something": "else"}))
    assert info.value.reason == "version"


def test_version_error_names_the_kind_the_version_and_the_versions_understood() -> None:
    with pytest.raises(WireError) as info:
        decode_subspace(pack(set_key("v", 7)(valid_map())))
    assert str(info.value) == (
        "subspace message has schema version 7, newer than this node understands "
        "(version 1): upgrade this node"
    )
    with pytest.raises(WireError) as info:
        decode_subspace(pack(set_key("v", 0)(valid_map())))
    assert str(info.value) == (
        "subspace message has schema version 0, older than this node understands "
        "(version 1): upgrade the sender"
    )


def test_byte_length_error_names_both_lengths() -> None:
    obj = valid_map()
    obj["basis"] = obj["basis"][:-8]  # type: ignore[index]
    with pytest.raises(WireError, match=r"basis has 3832 bytes, expected 3840"):
        decode_subspace(pack(obj))


def test_invalid_options_raise_plain_value_errors() -> None:
    payload = encode_subspace(make_message())
    with pytest.raises(ValueError, match="max_bytes") as info:
        decode_subspace(payload, max_bytes=0)
    assert not isinstance(info.value, WireError)
    with pytest.raises(ValueError, match="tolerance"):
        decode_subspace(payload, tol=math.nan)
    with pytest.raises(ValueError, match="dtype"):
        encode_subspace(make_message(), dtype="float16")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- encoder validation
def test_encode_subspace_refuses_a_basis_that_is_not_orthonormal() -> None:
    subspace = Subspace(2.0 * orthonormal_basis(5, 2), np.array([2.0, 1.0]), 10)
    with pytest.raises(WireError) as info:
        encode_subspace(make_message(subspace=subspace))
    assert info.value.reason == "not_orthonormal"


def test_encode_subspace_refuses_non_finite_values() -> None:
    basis = orthonormal_basis(5, 2)
    basis[0, 0] = math.nan
    with pytest.raises(WireError) as info:
        encode_subspace(make_message(subspace=Subspace(basis, np.array([2.0, 1.0]), 10)))
    assert info.value.reason == "non_finite"


def test_encode_subspace_refuses_singular_values_that_overflow_float32() -> None:
    subspace = Subspace(orthonormal_basis(5, 2), np.array([1e39, 1.0]), 10)
    encode_subspace(make_message(subspace=subspace))  # fine in float64
    with pytest.raises(WireError) as info:
        encode_subspace(make_message(subspace=subspace), dtype="float32")
    assert info.value.reason == "non_finite"


def test_encode_subspace_refuses_increasing_singular_values() -> None:
    subspace = Subspace(orthonormal_basis(5, 2), np.array([1.0, 2.0]), 10)
    with pytest.raises(WireError) as info:
        encode_subspace(make_message(subspace=subspace))
    assert info.value.reason == "singular_values"


def test_encode_subspace_refuses_a_payload_above_max_bytes() -> None:
    with pytest.raises(WireError) as info:
        encode_subspace(make_message(), max_bytes=1000)
    assert info.value.reason == "too_large"


def test_encode_subspace_refuses_something_that_is_not_a_message() -> None:
    with pytest.raises(WireError) as info:
        encode_subspace({"node": "pi-01"})  # type: ignore[arg-type]
    assert info.value.reason == "field_type"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        pytest.param({"node_id": "a/b"}, "node_id", id="node-id"),
        pytest.param({"epoch": ""}, "epoch", id="epoch"),
        pytest.param({"seq": -3}, "seq", id="seq"),
        pytest.param({"seq": True}, "field_type", id="seq-bool"),
        pytest.param({"timestamp": math.inf}, "non_finite", id="timestamp"),
        pytest.param({"subspace": np.eye(3)}, "field_type", id="subspace-array"),
        pytest.param({"privacy": {"epsilon": 1.0}}, "field_type", id="privacy-dict"),
        pytest.param({"provenance": {"x": -1}}, "provenance", id="provenance"),
    ],
)
def test_subspace_message_refuses_invalid_fields(overrides: dict[str, object], reason: str) -> None:
    with pytest.raises(WireError) as info:
        make_message(**overrides)
    assert info.value.reason == reason


def test_subspace_message_accepts_numpy_integers_and_normalises_them() -> None:
    msg = make_message(seq=np.int64(9), provenance={"pi-01": np.uint32(4)})
    assert type(msg.seq) is int
    assert type(msg.provenance["pi-01"]) is int


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        pytest.param((0.0, 0.1, 1.0), "privacy", id="epsilon-zero"),
        pytest.param((1.0, 1.5, 1.0), "privacy", id="delta-above-one"),
        pytest.param((1.0, 0.1, 0.0), "privacy", id="clip-norm-zero"),
        pytest.param((math.nan, 0.1, 1.0), "non_finite", id="epsilon-nan"),
        pytest.param((True, 0.1, 1.0), "field_type", id="epsilon-bool"),
    ],
)
def test_privacy_params_refuse_values_out_of_range(
    params: tuple[float, float, float], reason: str
) -> None:
    with pytest.raises(WireError) as info:
        PrivacyParams(*params)
    assert info.value.reason == reason


# --------------------------------------------------------------------------- readings
READINGS_2D = np.array([[0.5, -1.25, 3.0], [1e-300, 2.0**60, -0.0]])


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
@pytest.mark.parametrize(("source", "seq"), [(None, None), ("mote-7", 41), ("mote-7", None)])
@pytest.mark.parametrize("values", [READINGS_2D, READINGS_2D[0]], ids=["2d", "1d"])
def test_readings_round_trip_exactly(
    fmt: str, source: str | None, seq: int | None, values: np.ndarray
) -> None:
    payload = encode_readings(values, source=source, seq=seq, fmt=fmt)  # type: ignore[arg-type]
    got = decode_readings(payload, n_features=3)
    np.testing.assert_array_equal(got.values, np.atleast_2d(values), strict=True)
    assert (got.source, got.seq) == (source, seq)
    assert not got.values.flags.writeable


def test_readings_with_only_a_seq_round_trip() -> None:
    got = decode_readings(encode_readings([1.0, 2.0], seq=0, fmt="json"))
    assert (got.source, got.seq) == (None, 0)


def test_bare_readings_are_encoded_as_a_bare_array_and_numbered_ones_as_a_map() -> None:
    assert json.loads(encode_readings([1.0, 2.0], fmt="json")) == [1.0, 2.0]
    assert msgpack.unpackb(encode_readings([[1.0, 2.0]], source="s", seq=3)) == {
        "src": "s",
        "seq": 3,
        "x": [[1.0, 2.0]],
    }


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        pytest.param(b"[1, 2.5, -3]", [[1.0, 2.5, -3.0]], id="json-array"),
        pytest.param(b" \n\t[[1, 2], [3, 4e0]]", [[1.0, 2.0], [3.0, 4.0]], id="json-2d-whitespace"),
        pytest.param(pack([1, 2.5]), [[1.0, 2.5]], id="msgpack-array"),
        pytest.param(pack([[1, 2], [3, 4]]), [[1.0, 2.0], [3.0, 4.0]], id="msgpack-2d"),
        pytest.param(b'{"src": "a", "seq": 2, "x": [5, 6]}', [[5.0, 6.0]], id="json-map"),
        pytest.param(b'{"x": [[5, 6]], "unit": "lux"}', [[5.0, 6.0]], id="json-map-extra-key"),
        pytest.param(
            pack({"src": "a", "seq": None, "x": [[5, 6]]}), [[5.0, 6.0]], id="msgpack-map"
        ),
    ],
)
def test_decode_readings_accepts_every_documented_form(payload: bytes, expected: object) -> None:
    got = decode_readings(payload)
    np.testing.assert_array_equal(got.values, np.array(expected), strict=True)
    assert got.values.dtype == np.float64


def test_decode_readings_reads_float32_msgpack_numbers() -> None:
    payload = msgpack.packb([0.5, 1.5], use_single_float=True)
    np.testing.assert_array_equal(decode_readings(payload).values, [[0.5, 1.5]])


def test_decode_readings_names_the_width_and_the_expected_width() -> None:
    with pytest.raises(WireError) as info:
        decode_readings(json.dumps([1.0] * 46).encode(), n_features=48)
    assert info.value.reason == "width"
    assert str(info.value) == "reading has 46 values, expected 48"


READINGS_REJECTIONS = [
    pytest.param(b"[1, 2, 3]", "width", id="width-1d"),
    pytest.param(pack([[1, 2, 3, 4]] * 3), "width", id="width-2d"),
    pytest.param(b"[[1, 2], [3]]", "ragged", id="ragged-json"),
    pytest.param(pack([[1, 2], [3, 4, 5]]), "ragged", id="ragged-msgpack"),
    pytest.param(b"[1, NaN]", "non_finite", id="json-nan"),
    pytest.param(b"[1, Infinity]", "non_finite", id="json-infinity"),
    pytest.param(b"[-Infinity, 1]", "non_finite", id="json-minus-infinity"),
    pytest.param(b"[1e999, 1]", "non_finite", id="json-overflowing-float"),
    pytest.param(b"[" + b"9" * 500 + b", 1]", "non_finite", id="json-huge-int"),
    pytest.param(b"[" + b"9" * 320 + b", 1]", "non_finite", id="json-int-above-float-range"),
    pytest.param(pack([math.nan, 1.0]), "non_finite", id="msgpack-nan"),
    pytest.param(pack([[1.0, 2.0], [math.inf, 1.0]]), "non_finite", id="msgpack-inf"),
    pytest.param(b'["1", 2]', "field_type", id="json-string"),
    pytest.param(b"[true, 2]", "field_type", id="json-bool"),
    pytest.param(b"[null, 2]", "field_type", id="json-null"),
    pytest.param(b'[{"a": 1}, 2]', "field_type", id="json-map-value"),
    pytest.param(pack([1.0, False]), "field_type", id="msgpack-bool"),
    pytest.param(pack([1.0, b"\x00"]), "field_type", id="msgpack-bytes"),
    pytest.param(pack(42), "field_type", id="msgpack-scalar"),
    pytest.param(b'{"x": 5}', "field_type", id="map-x-scalar"),
    pytest.param(b'{"src": 5, "x": [1, 2]}', "field_type", id="map-src-int"),
    pytest.param(b'{"seq": true, "x": [1, 2]}', "field_type", id="map-seq-bool"),
    pytest.param(pack([1.0, msgpack.ExtType(1, b"")]), "ext_type", id="msgpack-ext"),
    pytest.param(pack([1.0, msgpack.Timestamp(1)]), "ext_type", id="msgpack-timestamp"),
    pytest.param(b"[[[1, 2]]]", "shape", id="nested-three-deep"),
    pytest.param(b"[1, [2]]", "shape", id="number-then-array"),
    pytest.param(b"[[1, 2], 3]", "shape", id="array-then-number"),
    pytest.param(b"[]", "empty", id="json-empty"),
    pytest.param(b"[[]]", "empty", id="json-empty-row"),
    pytest.param(pack([]), "empty", id="msgpack-empty"),
    pytest.param(b'{"x": []}', "empty", id="map-empty"),
    pytest.param(pack([[0.0, 1.0]] * (MAX_READING_ROWS + 1)), "too_many_rows", id="too-many"),
    pytest.param(b"[1, 2", "not_json", id="json-truncated"),
    pytest.param(b"{x: 1}", "not_json", id="json-unquoted-key"),
    pytest.param(b"[1, 2]]", "not_json", id="json-trailing"),
    pytest.param(b"[\xff]", "not_json", id="json-not-utf8"),
    pytest.param(b"\xc1", "not_msgpack", id="msgpack-invalid"),
    pytest.param(b"", "not_msgpack", id="empty-payload"),
    pytest.param(b"[" * 100_000, "too_deep", id="json-deep"),
    pytest.param(b"\x91" * 100_000, "too_deep", id="msgpack-deep"),
    pytest.param(b'{"src": "a"}', "missing_field", id="map-without-x"),
    pytest.param(b'{"src": "", "x": [1, 2]}', "source", id="src-empty"),
    pytest.param(pack({"src": "s" * 129, "x": [1, 2]}), "source", id="src-too-long"),
    pytest.param(b'{"seq": -1, "x": [1, 2]}', "seq", id="seq-negative"),
    pytest.param(pack({"seq": 2**63, "x": [1, 2]}), "seq", id="seq-too-large"),
    pytest.param(b'{"v": 2, "x": [1, 2]}', "version_newer", id="map-version-newer"),
    pytest.param(pack({"v": 2, "y": "?"}), "version_newer", id="newer-map-without-x"),
    pytest.param(b'{"v": 0, "x": [1, 2]}', "version", id="map-version-older"),
    pytest.param(b'{"v": "1", "x": [1, 2]}', "field_type", id="map-version-str"),
]


@pytest.mark.parametrize(("payload", "reason"), READINGS_REJECTIONS)
def test_decode_readings_rejects_bad_payloads_with_the_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(WireError) as info:
        decode_readings(payload, n_features=2)
    assert info.value.reason == reason
    assert reason in REASONS
    assert "\n" not in str(info.value)


def test_decode_readings_rejects_a_payload_above_max_bytes() -> None:
    with pytest.raises(WireError) as info:
        decode_readings(b"[" + b"1," * 60 + b"1]", max_bytes=100)
    assert info.value.reason == "too_large"


def test_decode_readings_refuses_an_invalid_n_features_option() -> None:
    with pytest.raises(ValueError, match="n_features"):
        decode_readings(b"[1]", n_features=0)


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        pytest.param([1.0, math.nan], "non_finite", id="nan"),
        pytest.param([], "empty", id="empty"),
        pytest.param(np.zeros((2, 2, 2)), "shape", id="three-dimensional"),
        pytest.param(["a", "b"], "field_type", id="strings"),
        pytest.param(np.array([True, False]), "field_type", id="bools"),
        pytest.param([[1.0], [1.0, 2.0]], "ragged", id="ragged"),
        pytest.param(np.zeros((MAX_READING_ROWS + 1, 1)), "too_many_rows", id="too-many-rows"),
    ],
)
def test_encode_readings_refuses_invalid_values(values: object, reason: str) -> None:
    with pytest.raises(WireError) as info:
        encode_readings(values)
    assert info.value.reason == reason


def test_encode_readings_refuses_an_invalid_source_and_an_unknown_format() -> None:
    with pytest.raises(WireError) as info:
        encode_readings([1.0], source="")
    assert info.value.reason == "source"
    with pytest.raises(ValueError, match="fmt"):
        encode_readings([1.0], fmt="xml")  # type: ignore[arg-type]


def test_sensor_readings_copy_their_values_and_reshape_one_reading_to_a_row() -> None:
    values = np.array([1.0, 2.0])
    readings = SensorReadings(values)
    values[0] = 99.0
    np.testing.assert_array_equal(readings.values, [[1.0, 2.0]])


# --------------------------------------------------------------------------- status
def test_status_detail_round_trips_exactly() -> None:
    status = make_status()
    assert decode_status(encode_status(status)) == status


def test_status_detail_is_plain_json_with_readable_keys() -> None:
    doc = json.loads(encode_status(make_status()).decode("utf-8"))
    assert doc["v"] == SCHEMA_VERSION
    assert doc["node_id"] == "site-a"
    assert doc["online"] is True
    assert doc["rejects"] == {"not_orthonormal": 2, "too_large": 1}
    assert doc["extra"]["children"]["pi-01"]["seq"] == 3


def test_status_detail_carries_the_privacy_ledger_as_a_json_map() -> None:
    status = make_status(role="leaf", privacy=PRIVATE_LEAF)
    doc = json.loads(encode_status(status))
    assert doc["privacy"] == {
        "mechanism": "gaussian",
        "epsilon": 1.0,
        "delta": 1e-5,
        "neighbours": "replace-one",
        "clip_norm": 8230.0,
        "noise_std": 6.44,
        "block_size": 241,
        "chunk_size": None,
        "horizon": 4,
        "releases": 3,
        "clipped": 17,
    }
    assert list(doc["privacy"]) == [
        "mechanism",
        "epsilon",
        "delta",
        "neighbours",
        "clip_norm",
        "noise_std",
        "block_size",
        "chunk_size",
        "horizon",
        "releases",
        "clipped",
    ]
    assert decode_status(encode_status(status)) == status
    aggregator = make_status(privacy=PrivacyStatus(2.0, 1e-4, 10.0, mechanism="fpca-eq8+gaussian"))
    doc = json.loads(encode_status(aggregator))
    assert doc["privacy"]["noise_std"] is None
    assert doc["privacy"]["releases"] is None
    assert doc["privacy"]["mechanism"] == "fpca-eq8+gaussian"
    assert decode_status(encode_status(aggregator)) == aggregator
    assert aggregator.privacy is not None
    assert aggregator.privacy.params == PrivacyParams(
        2.0, 1e-4, 10.0, mechanism="fpca-eq8+gaussian"
    )
    assert json.loads(encode_status(make_status()))["privacy"] is None


def test_a_status_document_without_privacy_or_with_unknown_privacy_keys_decodes() -> None:
    assert decode_status(json.dumps(without(status_doc(), "privacy")).encode()).privacy is None
    doc = private_status_doc(future_key=[1, 2])
    assert decode_status(json.dumps(doc).encode()).privacy == PRIVATE_LEAF
    doc = private_status_doc(
        noise_std=None, block_size=None, horizon=None, releases=None, clipped=None
    )
    assert decode_status(json.dumps(doc).encode()).privacy == PrivacyStatus(1.0, 1e-5, 8230.0)


def test_a_status_privacy_map_of_an_older_peer_decodes_as_fpca_eq8() -> None:
    old = {  # the map before issue 10: no mechanism, neighbours, horizon, releases, clipped
        "epsilon": 1.0,
        "delta": 1e-5,
        "clip_norm": 8630.0,
        "noise_std": 4.8,
        "block_size": 241,
        "chunk_size": 48,
    }
    got = decode_status(json.dumps({**status_doc(), "privacy": old}).encode()).privacy
    assert got == PrivacyStatus(
        1.0,
        1e-5,
        8630.0,
        noise_std=4.8,
        block_size=241,
        chunk_size=48,
        mechanism="fpca-eq8",
        neighbours="replace-one",
    )
    assert (got.horizon, got.releases, got.clipped) == (None, None, None)


def test_status_detail_refuses_privacy_of_another_type() -> None:
    with pytest.raises(WireError) as info:
        make_status(privacy=PrivacyParams(1.0, 1e-5, 1.0))
    assert info.value.reason == "field_type"


def test_status_detail_normalises_extra_tuples_and_numpy_scalars() -> None:
    status = make_status(extra={"bounds": (0.01, 0.1), "rank": np.int64(3)})
    assert status.extra["bounds"] == [0.01, 0.1]
    assert type(status.extra["rank"]) is int
    assert decode_status(encode_status(status)) == status


STATUS_REJECTIONS = [
    pytest.param(b"{", "not_json", id="truncated"),
    pytest.param(b"\xff{}", "not_json", id="not-utf8"),
    pytest.param(b"[1, 2]", "not_map", id="array"),
    pytest.param(b"[" * 100_000, "too_deep", id="deep"),
    pytest.param(status_doc(v=2), "version_newer", id="version-newer"),
    pytest.param(status_doc(v=0), "version", id="version-older"),
    pytest.param(without(status_doc(), "uptime_s"), "missing_field", id="missing-uptime"),
    pytest.param(status_doc(online="yes"), "field_type", id="online-str"),
    pytest.param(status_doc(rank=1.0), "field_type", id="rank-float"),
    pytest.param(status_doc(extra=[1]), "field_type", id="extra-array"),
    pytest.param(status_doc(node_id="a/b"), "node_id", id="node-id"),
    pytest.param(status_doc(role=""), "role", id="role-empty"),
    pytest.param(status_doc(rank=-1), "rank", id="rank-negative"),
    pytest.param(status_doc(n_samples=-5), "n_samples", id="n-samples-negative"),
    pytest.param(status_doc(seq=2**63), "seq", id="seq-too-large"),
    pytest.param(status_doc(epoch="x" * 65), "epoch", id="epoch-too-long"),
    pytest.param(status_doc(rejects={"too_large": -1}), "rejects", id="rejects-negative"),
    pytest.param(status_doc(uptime_s=-0.5), "uptime", id="uptime-negative"),
    pytest.param(status_doc(extra={"big": 2**64}), "extra", id="extra-int-beyond-64-bits"),
    pytest.param(b'{"v": 1, "uptime_s": NaN}', "non_finite", id="nan-literal"),
    pytest.param(status_doc(uptime_s=1e999), "non_finite", id="uptime-inf"),
    pytest.param(
        status_doc(extra=nested_lists(wire.MAX_JSON_DEPTH + 1)), "too_deep", id="extra-deep"
    ),
    pytest.param(status_doc(privacy=[1.0, 1e-5, 1.0]), "field_type", id="privacy-array"),
    pytest.param(private_status_doc(epsilon=0), "privacy", id="privacy-epsilon-0"),
    pytest.param(private_status_doc(delta=1), "privacy", id="privacy-delta-1"),
    pytest.param(private_status_doc(clip_norm=-2.0), "privacy", id="privacy-clip-negative"),
    pytest.param(private_status_doc(noise_std=-0.1), "privacy", id="privacy-noise-negative"),
    pytest.param(private_status_doc(block_size=0), "privacy", id="privacy-block-0"),
    pytest.param(private_status_doc(chunk_size=0), "privacy", id="privacy-chunk-0"),
    pytest.param(private_status_doc(horizon=0), "privacy", id="privacy-horizon-0"),
    pytest.param(private_status_doc(releases=-1), "privacy", id="privacy-releases-negative"),
    pytest.param(private_status_doc(clipped=-1), "privacy", id="privacy-clipped-negative"),
    pytest.param(private_status_doc(clipped=1.0), "field_type", id="privacy-clipped-float"),
    pytest.param(private_status_doc(mechanism="Gauss"), "privacy", id="privacy-mechanism-case"),
    pytest.param(private_status_doc(neighbours=""), "privacy", id="privacy-neighbours-empty"),
    pytest.param(private_status_doc(mechanism=None), "field_type", id="privacy-mechanism-null"),
    pytest.param(private_status_doc(block_size=2.5), "field_type", id="privacy-block-float"),
    pytest.param(private_status_doc(epsilon=True), "field_type", id="privacy-epsilon-bool"),
    pytest.param(private_status_doc(noise_std="1"), "field_type", id="privacy-noise-str"),
    pytest.param(private_status_doc(epsilon=1e999), "non_finite", id="privacy-epsilon-inf"),
    pytest.param(
        {**status_doc(), "privacy": {"epsilon": 1.0, "clip_norm": 1.0}},
        "missing_field",
        id="privacy-without-delta",
    ),
]


@pytest.mark.parametrize(("doc", "reason"), STATUS_REJECTIONS)
def test_decode_status_rejects_bad_documents_with_the_reason(
    doc: bytes | dict[str, object], reason: str
) -> None:
    payload = doc if isinstance(doc, bytes) else json.dumps(doc).encode("utf-8")
    with pytest.raises(WireError) as info:
        decode_status(payload)
    assert info.value.reason == reason
    assert reason in REASONS


def test_decode_status_rejects_a_payload_above_max_bytes() -> None:
    with pytest.raises(WireError) as info:
        decode_status(encode_status(make_status()), max_bytes=50)
    assert info.value.reason == "too_large"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        pytest.param({"s": {1, 2}}, "field_type", id="set"),
        pytest.param({1: "int key"}, "field_type", id="int-key"),
        pytest.param({"f": math.nan}, "non_finite", id="nan"),
        pytest.param({"s": "\ud800"}, "extra", id="lone-surrogate"),
    ],
)
def test_status_detail_refuses_extra_that_is_not_json(extra: object, reason: str) -> None:
    with pytest.raises(WireError) as info:
        make_status(extra=extra)
    assert info.value.reason == reason


def test_status_detail_refuses_a_self_referencing_extra() -> None:
    loop: dict[str, object] = {}
    loop["self"] = loop
    with pytest.raises(WireError) as info:
        make_status(extra=loop)
    assert info.value.reason == "too_deep"


# --------------------------------------------------------------------------- the error type
def test_wire_error_is_a_value_error_that_pickles_with_its_reason() -> None:
    error = WireError("rank", "rank r=5 exceeds n_features d=3")
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ValueError)
    assert (copy.reason, str(copy)) == ("rank", "rank r=5 exceeds n_features d=3")


def test_every_reason_code_is_documented_in_the_module_docstring() -> None:
    documented = set(re.findall(r"^``(\w+)``\s", wire.__doc__ or "", flags=re.MULTILINE))
    assert documented == set(REASONS)


def test_every_reason_code_is_exercised_by_a_rejection_test() -> None:
    exercised = {p.values[-1] for p in SUBSPACE_REJECTIONS + READINGS_REJECTIONS}
    exercised |= {p.values[-1] for p in STATUS_REJECTIONS}
    exercised |= {"too_large", "missing_field"}  # dedicated tests above
    assert exercised == set(REASONS)


def test_the_user_surface_pairs_each_encoder_with_its_decoder_and_every_name_resolves() -> None:
    # The exact list of names is pinned once, by test_public_api.py; here, what it must hold.
    def codec(verb: str) -> set[str]:
        return {name.removeprefix(verb) for name in wire.__all__ if name.startswith(verb)}

    assert codec("encode_") == codec("decode_") != set()
    assert {"REASONS", "WireError"} <= set(wire.__all__)
    for name in wire.__all__:  # SCHEMA_VERSIONS is built on first use
        assert getattr(wire, name) is not None
    # The limits and versions the runtime's modules import from the package stay importable.
    for name in ("MAX_N_FEATURES", "MAX_PRIVACY_NAME_CHARS", "SUBSPACE_VERSION", "with_deployment"):
        assert getattr(wire, name) is not None


def test_contract_constants_have_their_documented_values() -> None:
    assert (SCHEMA_VERSION, DEFAULT_MAX_PAYLOAD_BYTES, ORTHONORMALITY_TOL) == (
        1,
        4 * 1024 * 1024,
        1e-6,
    )
    assert wire.FLOAT32_ORTHONORMALITY_TOL == 1e-4


def test_centred_subspace_round_trips_its_mean_and_uncentred_ones_carry_no_mean_key() -> None:
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.standard_normal((7, 3)))[0]
    mean = rng.standard_normal(7)
    centred = Subspace(basis, np.array([3.0, 2.0, 1.0]), 40, mean)
    msg = SubspaceMessage("a", "e", 1, centred, 1.0)
    out = decode_subspace(encode_subspace(msg))
    np.testing.assert_array_equal(out.subspace.mean, mean)
    plain = SubspaceMessage("a", "e", 1, Subspace(basis, np.array([3.0, 2.0, 1.0]), 40), 1.0)
    assert "mean" not in msgpack.unpackb(encode_subspace(plain))
    assert decode_subspace(encode_subspace(plain)).subspace.mean is None


@pytest.mark.parametrize(
    ("mean", "reason"),
    [
        (b"\x00" * 5, "byte_length"),
        ("x", "field_type"),
        (np.full(7, np.nan).tobytes(), "non_finite"),
    ],
)
def test_decode_subspace_rejects_a_bad_mean(mean: object, reason: str) -> None:
    basis = np.linalg.qr(np.random.default_rng(6).standard_normal((7, 2)))[0]
    msg = SubspaceMessage("a", "e", 1, Subspace(basis, np.array([2.0, 1.0]), 9), 1.0)
    obj = msgpack.unpackb(encode_subspace(msg))
    obj["mean"] = mean
    with pytest.raises(WireError) as info:
        decode_subspace(msgpack.packb(obj, use_bin_type=True))
    assert info.value.reason == reason
