"""Secure aggregation on the wire (`edge_runtime.wire.secagg`): round trips, refusals, fuzz, sizes.

Every message kind round-trips; every malformed field is a `WireError` naming it, with a
reason of `edge_runtime.wire.REASONS`; random and mutated payloads raise nothing else; a
whole slot of the cores runs through the wire; the module docstring's size table is what a
slot at d = 48 measures.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edge_runtime.wire.secagg as wire_secagg
import edge_runtime.wire.secagg_fields as secagg_fields
from edge_runtime.secagg import masking
from edge_runtime.secagg.messages import (
    KeyAdvertisement,
    KeyRoster,
    MaskedInput,
    ShareDelivery,
    ShareUpload,
    SlotOutcome,
    UnmaskRequest,
    UnmaskResponse,
)
from edge_runtime.secagg.share_cipher import CIPHERTEXT_BYTES
from edge_runtime.secagg.shares import SHARE_BYTES
from edge_runtime.wire import REASONS, WireError
from edge_runtime.wire.secagg import (
    MAX_SECAGG_ENTRIES,
    MAX_SECAGG_LEAVES,
    SECAGG_KINDS,
    SECAGG_VERSION,
    decode_secagg,
    encode_secagg,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOT = 2**64 - 1  # the largest slot: a msgpack uint64
IDS = ("pi-00", "pi-01", "pi-02", "pi-03")


def _key(i: int) -> bytes:
    return bytes([i]) * 32


def _share(index: int) -> bytes:
    return index.to_bytes(4, "big") + bytes(range(66))


def _ct(i: int) -> bytes:
    return bytes([i]) * CIPHERTEXT_BYTES


def _ad(i: int, slot: int = SLOT) -> KeyAdvertisement:
    return KeyAdvertisement(slot, IDS[i], _key(2 * i + 1), _key(2 * i + 2))


def _vector(m: int = 10) -> np.ndarray:
    return np.array([0, 1, 2**63, 2**64 - 1, *range(m - 4)], dtype=np.uint64)


MESSAGES = {
    "keys": _ad(0),
    "roster": KeyRoster(SLOT, 3, tuple(_ad(i) for i in range(4))),
    "share_upload": ShareUpload(SLOT, "pi-00", tuple((IDS[i], _ct(i)) for i in (1, 2, 3))),
    "share_delivery": ShareDelivery(SLOT, "pi-01", (("pi-00", _ct(0)), ("pi-03", _ct(3)))),
    "masked_input": MaskedInput(SLOT, "pi-02", _vector()),
    "unmask_request": UnmaskRequest(SLOT, frozenset(IDS[:3]), frozenset({"pi-03"})),
    "unmask_response": UnmaskResponse(
        SLOT, "pi-00", tuple((IDS[i], _share(1)) for i in range(3)), (("pi-03", _share(1)),)
    ),
    "outcome": SlotOutcome(SLOT, _vector(), frozenset(IDS[:3]), frozenset({"pi-03"})),
}


def _fields(msg: object) -> tuple[object, ...]:
    """A message's fields, arrays as (dtype, list), for comparing eq=False messages."""
    out: list[object] = [type(msg)]
    for value in vars(msg).values():
        if isinstance(value, np.ndarray):
            value = (value.dtype.str, value.tolist())
        out.append(value)
    return tuple(out)


def _obj(name: str, /, **changes: object) -> dict[str, object]:
    obj = msgpack.unpackb(encode_secagg(MESSAGES[name]), raw=False)
    obj.update(changes)
    return obj


def _payload(name: str, /, **changes: object) -> bytes:
    return msgpack.packb(_obj(name, **changes), use_bin_type=True)


def _reason(payload: bytes, **options: object) -> str:
    with pytest.raises(WireError) as info:
        decode_secagg(payload, **options)  # type: ignore[arg-type]
    assert info.value.reason in REASONS
    assert "\n" not in str(info.value)
    return info.value.reason


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("kind", list(MESSAGES))
@pytest.mark.parametrize("deployment", [None, "motes-light"])
def test_every_kind_round_trips_to_an_equal_message(kind: str, deployment: str | None) -> None:
    msg = MESSAGES[kind]
    payload = encode_secagg(msg, deployment=deployment)
    got = decode_secagg(payload, expect=type(msg), deployment=deployment)
    assert _fields(got) == _fields(msg)
    if kind not in ("masked_input", "outcome"):
        assert got == msg


@pytest.mark.parametrize("kind", list(MESSAGES))
def test_encoded_map_has_the_common_keys_and_exactly_the_kinds_keys(kind: str) -> None:
    obj = msgpack.unpackb(encode_secagg(MESSAGES[kind], deployment="dep"), raw=False)
    assert (obj["v"], obj["kind"], obj["slot"], obj["dep"]) == (SECAGG_VERSION, kind, SLOT, "dep")
    assert set(obj) == {"v", "kind", "slot", "dep", *wire_secagg.REQUIRED_KEYS[kind]}
    assert SECAGG_KINDS[kind] is type(MESSAGES[kind])
    assert "dep" not in msgpack.unpackb(encode_secagg(MESSAGES[kind]), raw=False)


def test_a_vector_is_m_little_endian_uint64_words_and_decodes_read_only() -> None:
    obj = _obj("masked_input")
    assert obj["m"] == 10 and obj["y"] == _vector().astype("<u8").tobytes()
    assert obj["y"][8:16] == (1).to_bytes(8, "little")
    got = decode_secagg(encode_secagg(MESSAGES["masked_input"]))
    assert isinstance(got, MaskedInput)
    assert got.vector.dtype == np.uint64 and got.vector.shape == (10,)
    assert not got.vector.flags.writeable


def test_unmask_sets_are_written_sorted_and_a_skipped_outcome_carries_no_sum() -> None:
    obj = _obj("unmask_request")
    assert obj["survivors"] == ["pi-00", "pi-01", "pi-02"] and obj["dropped"] == ["pi-03"]
    skipped = SlotOutcome(5, None, frozenset(), frozenset(), "2 of 4 leaves advertised, t = 3")
    obj = msgpack.unpackb(encode_secagg(skipped), raw=False)
    assert (obj["m"], obj["total"], obj["reason"]) == (0, None, skipped.reason)
    got = decode_secagg(encode_secagg(skipped))
    assert isinstance(got, SlotOutcome) and not got.released and got.reason == skipped.reason


def test_a_response_without_dropped_leaves_and_a_request_without_dropped_round_trip() -> None:
    response = UnmaskResponse(1, "pi-00", (("pi-00", _share(1)), ("pi-01", _share(1))), ())
    assert decode_secagg(encode_secagg(response)) == response
    request = UnmaskRequest(1, frozenset(IDS), frozenset())
    assert decode_secagg(encode_secagg(request)) == request


def test_bytearray_keys_and_ciphertexts_encode_as_bytes() -> None:
    ad = KeyAdvertisement(1, "pi-00", bytearray(_key(1)), bytearray(_key(2)))
    assert decode_secagg(encode_secagg(ad)) == KeyAdvertisement(1, "pi-00", _key(1), _key(2))


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    assert decode_secagg(_payload("keys", future=[1, 2])) == MESSAGES["keys"]


# --------------------------------------------------------------------------- refusals
def _many(n: int) -> list[str]:
    return [f"leaf-{i:03d}" for i in range(n)]


BAD = [
    # common keys
    ("keys", {"v": 2}, "version_newer"),
    ("keys", {"v": 0}, "version"),
    ("keys", {"kind": "gossip"}, "field_type"),
    ("keys", {"kind": 1}, "field_type"),
    ("keys", {"slot": -1}, "seq"),
    ("keys", {"slot": True}, "field_type"),
    ("keys", {"slot": 1.0}, "field_type"),
    ("keys", {"dep": ""}, "field_type"),
    # ids, as the topology accepts them
    ("keys", {"leaf": ""}, "node_id"),
    ("keys", {"leaf": "a/b"}, "node_id"),
    ("keys", {"leaf": "a+"}, "node_id"),
    ("keys", {"leaf": "x" * 65}, "node_id"),
    ("keys", {"leaf": "a\tb"}, "node_id"),
    ("keys", {"leaf": "subspace"}, "node_id"),
    ("keys", {"leaf": b"pi-00"}, "field_type"),
    # key lengths
    ("keys", {"cpk": bytes(31)}, "byte_length"),
    ("keys", {"mpk": bytes(33)}, "byte_length"),
    ("keys", {"cpk": "00" * 32}, "field_type"),
    # roster
    ("roster", {"t": 1}, "field_type"),
    ("roster", {"t": 5}, "field_type"),
    ("roster", {"ads": []}, "empty"),
    ("roster", {"ads": [["pi-00", _key(1), _key(2)]], "t": 1}, "empty"),
    ("roster", {"ads": [["pi-00", _key(1), _key(2)]] * 2}, "node_id"),
    ("roster", {"ads": [["pi-00", _key(1)], ["pi-01", _key(3), _key(4)]]}, "field_type"),
    ("roster", {"ads": [["pi-00", _key(1), bytes(3)], ["pi-01", _key(3), _key(4)]]}, "byte_length"),
    ("roster", {"ads": [[n, _key(1), _key(2)] for n in _many(65)], "t": 40}, "too_large"),
    ("roster", {"ads": {"pi-00": 1}}, "field_type"),
    # share upload / delivery
    ("share_upload", {"ct": []}, "empty"),
    ("share_upload", {"ct": [["pi-00", _ct(0)]]}, "node_id"),  # to itself
    ("share_upload", {"ct": [["pi-01", _ct(0)], ["pi-01", _ct(1)]]}, "node_id"),
    ("share_upload", {"ct": [["pi-01", _ct(0)[:-1]]]}, "byte_length"),
    ("share_upload", {"ct": [["pi-01", _ct(0), 1]]}, "field_type"),
    ("share_upload", {"ct": [[n, _ct(0)] for n in _many(65)]}, "too_large"),
    ("share_delivery", {"recipient": "pi-00"}, "node_id"),  # from itself
    ("share_delivery", {"ct": [["#", _ct(0)]]}, "node_id"),
    # masked input
    ("masked_input", {"m": 0}, "shape"),
    ("masked_input", {"m": MAX_SECAGG_ENTRIES + 1}, "shape"),
    ("masked_input", {"m": 11}, "byte_length"),
    ("masked_input", {"y": bytes(79)}, "byte_length"),
    ("masked_input", {"y": [1] * 10}, "field_type"),
    # unmask request
    ("unmask_request", {"survivors": []}, "empty"),
    ("unmask_request", {"survivors": ["pi-00", "pi-00"]}, "node_id"),
    ("unmask_request", {"dropped": ["pi-00"]}, "node_id"),  # both survivor and dropped
    ("unmask_request", {"survivors": _many(40), "dropped": _many(65)[40:]}, "too_large"),
    ("unmask_request", {"dropped": "pi-03"}, "field_type"),
    # unmask response
    ("unmask_response", {"b": []}, "empty"),
    ("unmask_response", {"b": [["pi-01", _share(1)[:-1]]]}, "byte_length"),
    ("unmask_response", {"b": [["pi-01", _share(0)]]}, "field_type"),  # index 0
    ("unmask_response", {"b": [["pi-01", b"\xff" * SHARE_BYTES]]}, "field_type"),
    ("unmask_response", {"sk": [["pi-00", _share(1)]]}, "node_id"),  # in b and sk
    ("unmask_response", {"sk": [["pi-09", _share(1)]] * 2}, "node_id"),
    # outcome
    ("outcome", {"total": None}, "shape"),  # m = 10 but no sum
    ("outcome", {"m": 0}, "shape"),
    ("outcome", {"total": None, "m": 0.0}, "shape"),
    ("outcome", {"survivors": []}, "empty"),  # a sum of no survivors
    ("outcome", {"reason": "x" * 1001}, "too_large"),
    ("outcome", {"reason": None}, "field_type"),
]


@pytest.mark.parametrize(("kind", "changes", "reason"), BAD)
def test_a_bad_field_is_refused_with_its_reason_naming_the_field(
    kind: str, changes: dict[str, object], reason: str
) -> None:
    payload = _payload(kind, **changes)
    with pytest.raises(WireError) as info:
        decode_secagg(payload)
    assert info.value.reason == reason, str(info.value)
    assert reason in REASONS and "\n" not in str(info.value)
    if reason not in ("version", "version_newer"):
        assert any(key in str(info.value) for key in changes), str(info.value)


@pytest.mark.parametrize("kind", list(MESSAGES))
@pytest.mark.parametrize("key", ["v", "kind", "slot"])
def test_a_missing_common_key_is_refused_as_missing_field(kind: str, key: str) -> None:
    obj = _obj(kind)
    del obj[key]
    assert _reason(msgpack.packb(obj)) == "missing_field"


KIND_KEYS = [(kind, key) for kind, keys in wire_secagg.REQUIRED_KEYS.items() for key in keys]


@pytest.mark.parametrize(("kind", "key"), KIND_KEYS)
def test_a_missing_key_of_the_kind_is_refused_naming_it(kind: str, key: str) -> None:
    obj = _obj(kind)
    del obj[key]
    with pytest.raises(WireError, match=repr(key)) as info:
        decode_secagg(msgpack.packb(obj))
    assert info.value.reason == "missing_field"


def test_the_largest_site_is_accepted_and_one_leaf_more_is_refused() -> None:
    assert MAX_SECAGG_LEAVES == 64
    ids = _many(MAX_SECAGG_LEAVES)
    ads = tuple(KeyAdvertisement(1, n, _key(i % 250), _key(i % 250 + 1)) for i, n in enumerate(ids))
    roster = KeyRoster(1, 33, ads)
    assert decode_secagg(encode_secagg(roster)) == roster
    request = UnmaskRequest(1, frozenset(ids[:40]), frozenset(ids[40:]))
    assert decode_secagg(encode_secagg(request)) == request
    with pytest.raises(WireError) as info:
        encode_secagg(UnmaskRequest(1, frozenset(ids), frozenset({"one-more"})))
    assert info.value.reason == "too_large"


def test_a_payload_above_max_bytes_is_refused_before_parsing() -> None:
    payload = encode_secagg(MESSAGES["masked_input"])
    assert decode_secagg(payload, max_bytes=len(payload))
    assert _reason(payload, max_bytes=len(payload) - 1) == "too_large"
    assert _reason(b"\xc1" * 100, max_bytes=10) == "too_large"  # not msgpack, never read
    with pytest.raises(WireError) as info:
        encode_secagg(MESSAGES["masked_input"], max_bytes=len(payload) - 1)
    assert info.value.reason == "too_large"


def test_another_kind_than_expected_on_the_topic_is_refused() -> None:
    payload = encode_secagg(MESSAGES["roster"])
    with pytest.raises(WireError, match="'roster', expected 'share_delivery'") as info:
        decode_secagg(payload, expect=ShareDelivery)
    assert info.value.reason == "field_type"
    assert decode_secagg(payload, expect=(ShareDelivery, KeyRoster)) == MESSAGES["roster"]


def test_another_or_no_deployment_is_refused_when_the_node_has_one() -> None:
    payload = encode_secagg(MESSAGES["keys"], deployment="site-a")
    assert decode_secagg(payload, deployment="site-a") == MESSAGES["keys"]
    assert decode_secagg(payload) == MESSAGES["keys"]
    assert _reason(payload, deployment="site-b") == "field_type"
    assert _reason(encode_secagg(MESSAGES["keys"]), deployment="site-a") == "field_type"


def test_invalid_options_are_plain_value_errors() -> None:
    payload = encode_secagg(MESSAGES["keys"])
    for options in ({"max_bytes": 0}, {"expect": int}, {"expect": ()}, {"deployment": ""}):
        with pytest.raises(ValueError) as info:
            decode_secagg(payload, **options)  # type: ignore[arg-type]
        assert not isinstance(info.value, WireError)
    with pytest.raises(ValueError):
        encode_secagg(MESSAGES["keys"], max_bytes=0)


@pytest.mark.parametrize(
    ("msg", "reason"),
    [
        ("not a message", "field_type"),
        (MaskedInput(1, "pi-00", np.arange(3, dtype=np.int64)), "field_type"),
        (MaskedInput(1, "pi-00", np.zeros((2, 2), dtype=np.uint64)), "field_type"),
        (MaskedInput(1, "pi-00", [1, 2, 3]), "field_type"),
        (MaskedInput(1, "pi-00", np.zeros(0, dtype=np.uint64)), "shape"),
        (MaskedInput(2**64, "pi-00", _vector()), "seq"),
        (KeyRoster(1, 2, (_ad(0, slot=1), _ad(1, slot=2))), "seq"),
        (KeyRoster(1, 2, (_ad(0, slot=1), "pi-01")), "field_type"),
        (KeyRoster(1, 2, [_ad(0, slot=1), _ad(0, slot=1)]), "node_id"),
        (ShareUpload(1, "pi-00", (("pi-01",),)), "field_type"),
        (ShareUpload(1, "pi-00", "pi-01"), "field_type"),
        (UnmaskRequest(1, frozenset({"pi-00", 3}), frozenset()), "field_type"),
        (UnmaskRequest(1, frozenset({"pi-00"}), frozenset({"pi-00"})), "node_id"),
        (UnmaskResponse(1, "pi-00", (("pi-00", b"short"),), ()), "byte_length"),
        (KeyAdvertisement(1, "pi/00", _key(1), _key(2)), "node_id"),
        (KeyAdvertisement(1, "pi-00", _key(1), None), "field_type"),
    ],
)
def test_the_encoder_refuses_what_the_decoder_would(msg: object, reason: str) -> None:
    with pytest.raises(WireError) as info:
        encode_secagg(msg)  # type: ignore[arg-type]
    assert info.value.reason == reason, str(info.value)


# --------------------------------------------------------------------------- ids, imports
@pytest.mark.parametrize(
    "node_id",
    [
        "pi-01",
        "x" * 64,
        "x" * 65,
        "",
        "a/b",
        "a+b",
        "a#",
        "a\x00",
        "a\x7f",
        "é漢",
        *sorted(secagg_fields.RESERVED_IDS),
    ],
)
def test_ids_are_accepted_exactly_when_the_topology_accepts_them(node_id: str) -> None:
    from edge_runtime.topology import TopologyError
    from edge_runtime.topology.checks import check_node_id

    try:
        check_node_id(node_id)
        topology_accepts = True
    except TopologyError:
        topology_accepts = False
    try:
        wire_secagg.as_leaf_id("leaf", node_id)
        wire_accepts = True
    except WireError as exc:
        assert exc.reason == "node_id"
        wire_accepts = False
    assert wire_accepts == topology_accepts


def test_the_mirrored_id_rule_matches_the_topology() -> None:
    from edge_runtime.topology.checks import MAX_ID_LENGTH
    from edge_runtime.topology.topics import RESERVED_IDS

    assert secagg_fields.RESERVED_IDS == RESERVED_IDS, "update wire/secagg_fields"
    assert secagg_fields.MAX_LEAF_ID_CHARS == MAX_ID_LENGTH


def test_the_wire_imports_neither_cryptography_nor_shamirs() -> None:
    code = (
        "import sys; sys.modules['cryptography'] = None; sys.modules['shamirs'] = None\n"
        "import edge_runtime.wire.secagg as s\n"
        "from edge_runtime.wire import secagg\n"
        "assert secagg is s\n"
        "loaded = [m for m, mod in sys.modules.items() if mod is not None]\n"
        "print(sorted(m for m in loaded if m.startswith(('cryptography', 'shamirs'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------- fuzz
ids = st.text(
    alphabet=st.characters(exclude_characters="/+#", exclude_categories=("Cs", "Cc")),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in secagg_fields.RESERVED_IDS)
KEYS = sorted(
    {"v", "kind", "slot", "dep", *(k for ks in wire_secagg.REQUIRED_KEYS.values() for k in ks)}
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.sampled_from([*SECAGG_KINDS, *IDS])
    | st.text(max_size=8)
    | st.binary(max_size=80)
    | st.sampled_from([bytes(32), _ct(1), _share(1), bytes(80)])
)
msgpack_objects = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), children, max_size=8)
    ),
    max_leaves=12,
)


def _decode_any(payload: bytes) -> None:
    with contextlib.suppress(WireError):
        decode_secagg(payload, max_bytes=64 * 1024)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_raise_only_wire_error(payload: bytes) -> None:
    _decode_any(payload)


@FUZZ
@given(msgpack_objects)
def test_random_msgpack_objects_raise_only_wire_error(obj: object) -> None:
    _decode_any(msgpack.packb(obj, use_bin_type=True))


@FUZZ
@given(st.sampled_from(list(MESSAGES)), st.sampled_from(KEYS), msgpack_objects)
def test_a_valid_payload_with_a_field_replaced_decodes_or_raises_wire_error(
    kind: str, key: str, value: object
) -> None:
    _decode_any(_payload(kind, **{key: value}))


@FUZZ
@given(st.sampled_from(list(MESSAGES)), st.data())
def test_truncated_or_bit_flipped_payloads_decode_or_raise_wire_error(
    kind: str, data: st.DataObject
) -> None:
    payload = bytearray(encode_secagg(MESSAGES[kind], deployment="dep"))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(payload) - 1))
        with pytest.raises(WireError) as info:
            decode_secagg(bytes(payload[:cut]))
        assert info.value.reason == "not_msgpack"
        return
    for bit in data.draw(st.lists(st.integers(0, 8 * len(payload) - 1), min_size=1, max_size=4)):
        payload[bit // 8] ^= 1 << (bit % 8)
    _decode_any(bytes(payload))


@FUZZ
@given(
    st.integers(0, 2**64 - 1),
    st.lists(ids, min_size=1, max_size=MAX_SECAGG_LEAVES, unique=True),
    st.data(),
)
def test_valid_requests_and_responses_always_round_trip(
    slot: int, names: list[str], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(names)))
    request = UnmaskRequest(slot, frozenset(names[:cut]), frozenset(names[cut:]))
    assert decode_secagg(encode_secagg(request)) == request
    index = data.draw(st.integers(1, 2**16))
    response = UnmaskResponse(
        slot,
        names[0],
        tuple((n, _share(index)) for n in names[:cut]),
        tuple((n, _share(index)) for n in names[cut:]),
    )
    assert decode_secagg(encode_secagg(response)) == response


# --------------------------------------------------------------------------- a slot, sizes
D = 48
DEPLOYMENT = "motes-light-2"  # 13 characters

# message, who sends it, growth: the rows of the module docstring's size table
ROWS = (
    ("KeyAdvertisement", "keys", "leaf", "2 x 32 B keys"),
    ("KeyRoster", "roster", "agg.", "75 n + 48"),
    ("ShareUpload", "share_upload", "leaf", "165 (n - 1) + 63"),
    ("ShareDelivery", "share_delivery", "agg.", "165 (n - 1) + 68"),
    ("MaskedInput", "masked_input", "leaf", "8 m + 67"),
    ("UnmaskRequest", "unmask_request", "agg.", "6 n + 68"),
    ("UnmaskResponse", "unmask_response", "leaf", "79 n + 67"),
    ("SlotOutcome", "outcome", "agg.", "8 m + 6 n + 83"),
)


def _slot_through_the_wire(n: int, seed: int) -> tuple[dict[str, int], SlotOutcome, list[int]]:
    """One slot of the cores at d = 48 whose every message is encoded and decoded; the bytes
    of each kind (all of one kind have the same size), the outcome and the exact sum."""
    from edge_runtime.secagg.aggregator_round import AggregatorRound
    from edge_runtime.secagg.leaf_round import LeafRound

    m = masking.triangle_size(D)
    rng = np.random.default_rng(seed)
    names = [f"pi-{i:02d}" for i in range(n)]
    leaves = {
        u: LeafRound(u, 7, n // 2 + 1, rng.bytes(32), rng.bytes(32), rng.bytes(32)) for u in names
    }
    agg = AggregatorRound(7, names, n // 2 + 1, m, now=0.0)
    sizes: dict[str, set[int]] = {}

    def wire(msg):
        payload = encode_secagg(msg, deployment=DEPLOYMENT)
        sizes.setdefault(wire_secagg.TAG_OF[type(msg)], set()).add(len(payload))
        got = decode_secagg(payload, expect=type(msg), deployment=DEPLOYMENT)
        assert _fields(got) == _fields(msg)
        return got

    def to_agg(messages):
        out = []
        for msg in messages:
            out += agg.receive(wire(msg), 0.0)
        return [wire(msg) for msg in out]

    (roster,) = to_agg(leaf.advertise() for leaf in leaves.values())
    deliveries = to_agg(leaves[u].receive_roster(roster) for u in roster.leaf_ids)
    inputs = {}
    for delivery in deliveries:
        x = rng.uniform(-1.0, 1.0, size=(8, D))
        inputs[delivery.recipient] = masking.encode(x.T @ x, 2.0**20)
    (request,) = to_agg(
        leaves[d.recipient].receive_shares(d, inputs[d.recipient]) for d in deliveries
    )
    # every survivor answers (the aggregator closes at t; the rest are measured, not sent)
    responses = [leaves[u].unmask(request) for u in sorted(request.survivors)]
    for response in responses[n // 2 + 1 :]:
        wire(response)
    (outcome,) = to_agg(responses[: n // 2 + 1])
    exact = [sum(int(v[i]) for v in inputs.values()) % 2**64 for i in range(m)]
    assert all(len(s) == 1 for s in sizes.values()), sizes
    return {kind: s.pop() for kind, s in sizes.items()}, outcome, exact


def _private_snapshot_bytes(dtype: str) -> int:
    """A private leaf's snapshot today: d = 48, rank 10, uncentred, with its guarantee."""
    from edge_runtime.fpca.subspace import Subspace, flip_signs
    from edge_runtime.wire import PrivacyParams, SubspaceMessage, encode_subspace

    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.normal(size=(D, 10)))
    sv = np.sort(rng.uniform(1.0, 10.0, size=10))[::-1]
    msg = SubspaceMessage(
        "pi-00",
        "0123456789abcdef0123456789abcdef",
        12,
        Subspace(flip_signs(basis), sv, 1000),
        1.7e9,
        PrivacyParams(1.0, 1e-5, 8230.0, "gaussian", "replace-one"),
        {"pi-00": 1000},
        {"sensors/pi-00": 999},
        DEPLOYMENT,
    )
    return len(encode_subspace(msg, dtype=dtype))  # type: ignore[arg-type]


def _n(count: int) -> str:
    return f"{count:,}".replace(",", " ")


def _table(sizes: dict[int, dict[str, int]]) -> str:
    lines = [f"    {'message (sender)':<28}{'n = 4':>9}{'n = 8':>9}    grows as"]
    for name, kind, who, growth in ROWS:
        label = f"{name} ({who})"
        lines.append(f"    {label:<28}{_n(sizes[4][kind]):>9}{_n(sizes[8][kind]):>9}    {growth}")
    for n in (4, 8):
        s = sizes[n]
        sent = s["keys"] + s["share_upload"] + s["masked_input"] + s["unmask_response"]
        got = s["roster"] + s["share_delivery"] + s["unmask_request"]
        sizes[n]["leaf"] = sent + got
    total = f"{_n(sizes[4]['leaf']):>9}{_n(sizes[8]['leaf']):>9}"
    lines.append(f"    {'one leaf, sent + received':<28}{total}")
    return "\n".join(lines)


def test_a_slot_runs_through_the_wire_and_its_sizes_are_the_documented_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("cryptography")
    pytest.importorskip("shamirs")
    sizes = {}
    for n in (4, 8):
        sizes[n], outcome, exact = _slot_through_the_wire(n, seed=n)
        assert outcome.released and outcome.total is not None
        assert outcome.total.tolist() == exact  # the exact modular sum, through the wire
    table = _table(sizes)
    snapshot = {dtype: _private_snapshot_bytes(dtype) for dtype in ("float32", "float64")}
    with capsys.disabled():
        print(f"\n{table}\nprivate snapshot today: {snapshot}; float64 Gram {8 * D * D}")
    doc = wire_secagg.__doc__ or ""
    assert table in doc, f"update the size table of wire/secagg.py:\n{table}"
    for dtype, size in snapshot.items():
        assert f"{dtype}: {_n(size)} bytes" in doc, (dtype, size)
    assert sizes[4]["masked_input"] == 8 * masking.triangle_size(D) + 67
