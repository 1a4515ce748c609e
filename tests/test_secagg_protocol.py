"""One secure-aggregation slot end to end: leaves and aggregator cores, dropouts, refusals.

Bonawitz et al. 2017 Fig. 4 with threshold t, driven by a virtual clock: a leaf listed in
``quits`` sends nothing from that stage on (``advertise``, ``share``, ``input``, ``unmask``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.secagg import masking
from edge_runtime.secagg.aggregator_round import (
    AggregatorPhase,
    AggregatorRound,
    RoundTimeouts,
)
from edge_runtime.secagg.errors import SecAggError, UnmaskRefusedError
from edge_runtime.secagg.leaf_round import LeafPhase, LeafRound
from edge_runtime.secagg.messages import (
    KeyRoster,
    MaskedInput,
    ShareDelivery,
    SlotOutcome,
    UnmaskRequest,
    UnmaskResponse,
)

SLOT = 42
D = 4
M = masking.triangle_size(D)
SCALE = 2.0**20
STAGES = ("advertise", "share", "input", "unmask")


def _ids(n: int) -> list[str]:
    return [f"pi-{i:02d}" for i in range(n)]


def _leaves(ids: list[str], t: int, rng: np.random.Generator) -> dict[str, LeafRound]:
    return {
        node: LeafRound(node, SLOT, t, rng.bytes(32), rng.bytes(32), rng.bytes(32)) for node in ids
    }


def _inputs(ids: list[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for node in ids:
        x = rng.uniform(-1.0, 1.0, size=(8, D))
        out[node] = masking.encode(x.T @ x, SCALE)
    return out


def _exact(vectors: list[np.ndarray]) -> list[int]:
    return [sum(int(v[i]) for v in vectors) % 2**64 for i in range(M)]


def _sends(node: str, stage: str, quits: Mapping[str, str]) -> bool:
    return node not in quits or STAGES.index(stage) < STAGES.index(quits[node])


def _run(
    agg: AggregatorRound,
    leaves: dict[str, LeafRound],
    inputs: dict[str, np.ndarray],
    quits: Mapping[str, str],
    replace: Mapping[str, np.ndarray] | None = None,
) -> SlotOutcome:
    """Drive one slot; a phase whose senders did not all answer closes at its deadline."""
    now = 0.0

    def step(stage: str, replies: list) -> list:
        nonlocal now
        out: list = []
        for reply in replies:
            if out:  # the phase closed (the unmask phase at t answers): the rest is late
                with pytest.raises(SecAggError, match="in phase done"):
                    agg.receive(reply, now)
                continue
            out += agg.receive(reply, now)
        if not out:
            assert agg.deadline is not None
            now = agg.deadline
            assert agg.tick(now - 1e-9) == []  # not before the deadline
            out = agg.tick(now)
        return out

    out = step(
        "advertise",
        [leaf.advertise() for n, leaf in leaves.items() if _sends(n, "advertise", quits)],
    )
    if isinstance(out[0], SlotOutcome):
        return out[0]
    (roster,) = out
    assert isinstance(roster, KeyRoster)
    out = step(
        "share",
        [leaves[n].receive_roster(roster) for n in roster.leaf_ids if _sends(n, "share", quits)],
    )
    if isinstance(out[0], SlotOutcome):
        return out[0]
    masked = []
    for delivery in out:
        assert isinstance(delivery, ShareDelivery)
        node = delivery.recipient
        if _sends(node, "input", quits):
            message = leaves[node].receive_shares(delivery, inputs[node])
            if replace and node in replace:  # a leaf that sends something else
                message = MaskedInput(SLOT, node, replace[node])
            masked.append(message)
    out = step("input", masked)
    if isinstance(out[0], SlotOutcome):
        return out[0]
    (request,) = out
    assert isinstance(request, UnmaskRequest)
    responses = [
        leaves[n].unmask(request) for n in sorted(request.survivors) if _sends(n, "unmask", quits)
    ]
    out = step("unmask", responses)
    (outcome,) = out
    assert isinstance(outcome, SlotOutcome)
    assert agg.phase is AggregatorPhase.DONE and agg.deadline is None and agg.outcome is outcome
    return outcome


def _slot(n: int, t: int, seed: int, quits: Mapping[str, str] | None = None, **kwargs):
    rng = np.random.default_rng(seed)
    ids = _ids(n)
    leaves = _leaves(ids, t, rng)
    inputs = _inputs(ids, rng)
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0, **kwargs)
    return _run(agg, leaves, inputs, quits or {}), inputs, leaves


@pytest.mark.parametrize(("n", "t"), [(2, 2), (3, 2), (5, 3), (8, 5)])
def test_with_every_leaf_the_sum_is_the_exact_modular_sum(n: int, t: int) -> None:
    outcome, inputs, leaves = _slot(n, t, seed=n * 10 + t)
    assert outcome.released and outcome.reason == ""
    assert outcome.total is not None and outcome.total.dtype == np.uint64
    assert [int(v) for v in outcome.total] == _exact(list(inputs.values()))
    assert outcome.survivors == frozenset(inputs) and outcome.dropped == frozenset()
    assert all(leaf.phase is LeafPhase.UNMASKED or n > t for leaf in leaves.values())


@pytest.mark.parametrize("stage", ["input", "unmask"])
@pytest.mark.parametrize("n_quit", [1, 2, 3])
def test_up_to_n_minus_t_dropouts_are_recovered_exactly(stage: str, n_quit: int) -> None:
    n, t = 7, 4
    ids = _ids(n)
    quits = dict.fromkeys(ids[1 : 1 + 2 * n_quit : 2], stage)  # spread over the id order
    outcome, inputs, _ = _slot(n, t, seed=100 + n_quit, quits=quits)
    assert outcome.released, outcome.reason
    if stage == "input":  # quit after sharing keys: their pair masks are removed
        survivors = [node for node in ids if node not in quits]
        assert outcome.dropped == frozenset(quits)
    else:  # quit after masking: their inputs count, their unmask answers are not needed
        survivors = ids
        assert outcome.dropped == frozenset()
    assert outcome.survivors == frozenset(survivors)
    assert [int(v) for v in outcome.total] == _exact([inputs[node] for node in survivors])


def test_a_narrow_modulus_recovers_a_dropout_exactly() -> None:
    n, t, bits = 4, 3, 40
    rng = np.random.default_rng(9)
    ids = _ids(n)
    leaves = {
        node: LeafRound(node, SLOT, t, rng.bytes(32), rng.bytes(32), rng.bytes(32), bits=bits)
        for node in ids
    }
    inputs = {node: masking.encode(np.eye(D) * (i + 1), SCALE, bits) for i, node in enumerate(ids)}
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0, bits=bits)
    outcome = _run(agg, leaves, inputs, {ids[1]: "input"})
    survivors = [inputs[node] for node in ids if node != ids[1]]
    assert outcome.released and outcome.dropped == frozenset({ids[1]})
    assert [int(v) for v in outcome.total] == [
        sum(int(v[i]) for v in survivors) % 2**bits for i in range(M)
    ]
    np.testing.assert_array_equal(masking.decode(outcome.total, D, SCALE, bits), np.eye(D) * 8)


def test_dropouts_at_both_ends_of_the_masked_round_together() -> None:
    n, t = 8, 5
    ids = _ids(n)
    quits = {ids[0]: "share", ids[2]: "input", ids[7]: "unmask"}
    outcome, inputs, _ = _slot(n, t, seed=7, quits=quits)
    survivors = [node for node in ids if node not in (ids[0], ids[2])]
    assert outcome.released, outcome.reason
    assert outcome.dropped == frozenset({ids[2]})  # ids[0] never entered U_2
    assert [int(v) for v in outcome.total] == _exact([inputs[node] for node in survivors])


@pytest.mark.parametrize("stage", STAGES)
def test_fewer_than_t_survivors_skip_the_slot_and_release_nothing(stage: str) -> None:
    n, t = 5, 3
    ids = _ids(n)
    quits = dict.fromkeys(ids[: n - t + 1], stage)  # one more than the slot tolerates
    outcome, _, _ = _slot(n, t, seed=13, quits=quits)
    assert not outcome.released and outcome.total is None
    assert "t = 3" in outcome.reason
    if stage == "input":
        assert outcome.dropped == frozenset(quits) and len(outcome.survivors) == t - 1


def _masked_cohort(n: int, t: int, seed: int, quits: Mapping[str, str]):
    """Leaves after round 2 and the aggregator's unmask request."""
    rng = np.random.default_rng(seed)
    ids = _ids(n)
    leaves = _leaves(ids, t, rng)
    inputs = _inputs(ids, rng)
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0)
    (roster,) = [out for leaf in leaves.values() for out in agg.receive(leaf.advertise(), 0.0)]
    deliveries = [
        out for node in ids for out in agg.receive(leaves[node].receive_roster(roster), 0.0)
    ]
    out = []
    for delivery in deliveries:
        if _sends(delivery.recipient, "input", quits):
            out += agg.receive(
                leaves[delivery.recipient].receive_shares(delivery, inputs[delivery.recipient]), 0.0
            )
    out = out or agg.tick(agg.deadline)
    (request,) = out
    return leaves, request, agg


def test_a_leaf_refuses_a_second_different_unmask_request_for_the_slot() -> None:
    n, t = 5, 3
    ids = _ids(n)
    leaves, request, _ = _masked_cohort(n, t, seed=21, quits={ids[4]: "input"})
    assert request.dropped == frozenset({ids[4]})
    leaf = leaves[ids[0]]
    first = leaf.unmask(request)
    assert [owner for owner, _ in first.mask_key_shares] == [ids[4]]
    assert ids[4] not in dict(first.self_mask_shares)
    assert leaf.unmask(request) == first  # a duplicate delivery gets the same answer
    # the malicious aggregator asks again, now calling the dropped leaf a survivor: with
    # both shares of ids[4] it could strip its masks; the leaf refuses
    again = UnmaskRequest(SLOT, request.survivors | {ids[4]}, frozenset())
    with pytest.raises(UnmaskRefusedError, match="already answered a different request"):
        leaf.unmask(again)
    assert leaf.phase is LeafPhase.UNMASKED


def test_a_leaf_refuses_a_request_naming_a_leaf_both_survivor_and_dropped() -> None:
    n, t = 5, 3
    ids = _ids(n)
    leaves, request, _ = _masked_cohort(n, t, seed=22, quits={ids[4]: "input"})
    leaf = leaves[ids[1]]
    both = UnmaskRequest(SLOT, request.survivors | {ids[4]}, request.dropped)
    with pytest.raises(UnmaskRefusedError, match="both survivor and dropped"):
        leaf.unmask(both)
    few = UnmaskRequest(SLOT, frozenset(ids[:2]), frozenset(ids[2:]))
    with pytest.raises(UnmaskRefusedError, match="fewer than t = 3"):
        leaf.unmask(few)
    not_me = UnmaskRequest(SLOT, frozenset(ids[2:4]) | {ids[0]}, frozenset({ids[1], ids[4]}))
    with pytest.raises(UnmaskRefusedError, match="not a survivor"):
        leaf.unmask(not_me)
    stranger = UnmaskRequest(SLOT, request.survivors | {"pi-99"}, request.dropped)
    with pytest.raises(UnmaskRefusedError, match="no shares of"):
        leaf.unmask(stranger)
    with pytest.raises(UnmaskRefusedError, match="slot"):
        leaf.unmask(UnmaskRequest(SLOT + 1, request.survivors, request.dropped))
    # refusals revealed nothing and changed nothing: the honest request is still answered
    assert leaf.phase is LeafPhase.MASKED
    assert leaf.unmask(request).leaf_id == ids[1]


def test_a_leaf_does_not_unmask_before_it_masked() -> None:
    rng = np.random.default_rng(23)
    leaf = _leaves(_ids(3), 2, rng)["pi-00"]
    with pytest.raises(UnmaskRefusedError, match="has not sent its masked input"):
        leaf.unmask(UnmaskRequest(SLOT, frozenset(_ids(3)), frozenset()))


def test_a_sum_with_one_leaf_unmasked_fails_the_bound_and_is_not_released() -> None:
    n, t = 5, 3
    rng = np.random.default_rng(31)
    ids = _ids(n)
    inputs = _inputs(ids, rng)
    bound = masking.sum_bound(n, max_abs_entry=8.0, scale=SCALE)
    plain = {ids[2]: inputs[ids[2]]}  # leaf 2 sends its encoding without any mask
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0, bound=bound)
    outcome = _run(agg, _leaves(ids, t, rng), inputs, {}, replace=plain)
    assert not outcome.released and "a mask did not cancel" in outcome.reason
    # the honest run with the same bound is released, and is within it
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0, bound=bound)
    honest = _run(agg, _leaves(ids, t, rng), inputs, {})
    assert honest.released and masking.within_bound(honest.total, bound)


def test_a_wrong_share_of_a_dropped_key_is_caught_against_its_public_key() -> None:
    n, t = 4, 3
    ids = _ids(n)
    leaves, request, agg = _masked_cohort(n, t, seed=41, quits={ids[3]: "input"})
    responses = [leaves[node].unmask(request) for node in sorted(request.survivors)]
    owner, piece = responses[0].mask_key_shares[0]
    forged = piece[:-1] + bytes([piece[-1] ^ 1])
    responses[0] = UnmaskResponse(
        SLOT, responses[0].leaf_id, responses[0].self_mask_shares, ((owner, forged),)
    )
    out = [item for response in responses for item in agg.receive(response, 1.0)]
    (outcome,) = out
    assert not outcome.released and "not its advertised one" in outcome.reason


def test_the_aggregator_refuses_late_foreign_and_conflicting_messages() -> None:
    n, t = 3, 2
    rng = np.random.default_rng(51)
    ids = _ids(n)
    leaves = _leaves(ids, t, rng)
    agg = AggregatorRound(SLOT, ids, t, M, now=100.0, timeouts=RoundTimeouts(advertise=5.0))
    assert agg.deadline == 105.0
    assert agg.receive(leaves[ids[0]].advertise(), 100.0) == []
    assert agg.receive(leaves[ids[0]].advertise(), 101.0) == []  # a duplicate is ignored
    other = LeafRound(ids[0], SLOT, t, rng.bytes(32), rng.bytes(32), rng.bytes(32))
    with pytest.raises(SecAggError, match="second, different key advertisement"):
        agg.receive(other.advertise(), 101.0)
    stranger = LeafRound("pi-99", SLOT, t, rng.bytes(32), rng.bytes(32), rng.bytes(32))
    with pytest.raises(SecAggError, match="outside the cohort"):
        agg.receive(stranger.advertise(), 101.0)
    wrong_slot = LeafRound(ids[1], SLOT + 1, t, rng.bytes(32), rng.bytes(32), rng.bytes(32))
    with pytest.raises(SecAggError, match="for slot 43"):
        agg.receive(wrong_slot.advertise(), 101.0)
    agg.receive(leaves[ids[1]].advertise(), 102.0)
    with pytest.raises(SecAggError, match="after the deadline"):
        agg.receive(leaves[ids[2]].advertise(), 105.0)
    (roster,) = agg.tick(105.0)
    assert roster.leaf_ids == tuple(ids[:2]) and agg.phase is AggregatorPhase.SHARE
    with pytest.raises(SecAggError, match="in phase share"):
        agg.receive(leaves[ids[2]].advertise(), 106.0)
    # the late leaf is not in the roster: its shares are refused too
    with pytest.raises(SecAggError, match="lacks this leaf's advertisement"):
        leaves[ids[2]].receive_roster(roster)


def test_a_leaf_refuses_a_roster_it_cannot_trust() -> None:
    n, t = 4, 3
    rng = np.random.default_rng(61)
    ids = _ids(n)
    leaves = _leaves(ids, t, rng)
    ads = tuple(leaves[node].advertise() for node in ids)
    leaf = leaves[ids[0]]
    with pytest.raises(SecAggError, match="threshold 2"):
        leaf.receive_roster(KeyRoster(SLOT, 2, ads))
    with pytest.raises(SecAggError, match="fewer than t"):
        leaf.receive_roster(KeyRoster(SLOT, t, ads[:2]))
    with pytest.raises(SecAggError, match="sorted"):
        leaf.receive_roster(KeyRoster(SLOT, t, ads[::-1]))
    copied = (
        ads[0],
        ads[1],
        type(ads[2])(SLOT, ids[2], ads[1].cipher_public_key, ads[2].mask_public_key),
    )
    with pytest.raises(SecAggError, match="appears twice"):
        leaf.receive_roster(KeyRoster(SLOT, t, copied))
    guarded = LeafRound(
        ids[0], SLOT, t, rng.bytes(32), rng.bytes(32), rng.bytes(32), cohort=ids[:3]
    )
    guarded_ads = (guarded.advertise(), *ads[1:])
    with pytest.raises(SecAggError, match=r"outside the site's cohort: \['pi-03'\]"):
        guarded.receive_roster(KeyRoster(SLOT, t, guarded_ads))
    assert guarded.receive_roster(KeyRoster(SLOT, t, guarded_ads[:3])).sender == ids[0]
    low = LeafRound(ids[0], SLOT, 2, rng.bytes(32), rng.bytes(32), rng.bytes(32))
    low_ads = (low.advertise(), *ads[1:])
    with pytest.raises(SecAggError, match="not above half the roster's 4 leaves"):
        low.receive_roster(KeyRoster(SLOT, 2, low_ads))
    with pytest.raises(ValueError, match="above n / 2"):
        AggregatorRound(SLOT, ids, 2, M, now=0.0)
    assert leaf.phase is LeafPhase.ADVERTISED
    upload = leaf.receive_roster(KeyRoster(SLOT, t, ads))
    assert [recipient for recipient, _ in upload.ciphertexts] == ids[1:]
    assert leaf.receive_roster(KeyRoster(SLOT, t, ads)) is upload  # duplicate: same upload
    with pytest.raises(SecAggError, match="second, different roster"):
        leaf.receive_roster(KeyRoster(SLOT, t, ads[:3]))


def test_a_leaf_refuses_shares_that_are_not_for_it() -> None:
    n, t = 3, 2
    ids = _ids(n)
    rng = np.random.default_rng(71)
    leaves = _leaves(ids, t, rng)
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0)
    (roster,) = [out for leaf in leaves.values() for out in agg.receive(leaf.advertise(), 0.0)]
    deliveries = [
        out for node in ids for out in agg.receive(leaves[node].receive_roster(roster), 0.0)
    ]
    vector = _inputs(ids[:1], rng)[ids[0]]
    for_b = deliveries[1]
    with pytest.raises(SecAggError, match="for 'pi-01'"):
        leaves[ids[0]].receive_shares(for_b, vector)
    readdressed = ShareDelivery(SLOT, ids[0], for_b.ciphertexts[1:])  # pi-02's ciphertext for pi-01
    with pytest.raises(SecAggError, match="do not authenticate"):
        leaves[ids[0]].receive_shares(readdressed, vector)
    with pytest.raises(SecAggError, match="fewer than t"):
        leaves[ids[0]].receive_shares(ShareDelivery(SLOT, ids[0], ()), vector)
    assert leaves[ids[0]].phase is LeafPhase.SHARED
    masked = leaves[ids[0]].receive_shares(deliveries[0], vector)
    assert leaves[ids[0]].receive_shares(deliveries[0], vector) is masked
    assert np.count_nonzero(masked.vector == vector) <= 1


@settings(
    max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    n=st.integers(2, 6),
    data=st.data(),
)
def test_a_slot_releases_exactly_the_survivors_sum_or_nothing(n: int, data: st.DataObject) -> None:
    t = data.draw(st.integers(max(2, n // 2 + 1), n), label="t")
    ids = _ids(n)
    stages = data.draw(
        st.lists(st.sampled_from((*STAGES, "never")), min_size=n, max_size=n), label="quits"
    )
    quits = {node: stage for node, stage in zip(ids, stages, strict=True) if stage != "never"}
    outcome, inputs, _ = _slot(n, t, seed=n * 1000 + t, quits=quits)
    entered = [node for node in ids if _sends(node, "input", quits)]  # U_3, if all got there
    answered = [node for node in entered if _sends(node, "unmask", quits)]
    reached = [node for node in ids if _sends(node, "share", quits)]
    if min(len(entered), len(answered), len(reached)) >= t:
        assert outcome.released, outcome.reason
        assert outcome.survivors == frozenset(entered)
        assert [int(v) for v in outcome.total] == _exact([inputs[node] for node in entered])
    else:
        assert not outcome.released and outcome.total is None


def test_a_masked_input_after_the_deadline_is_refused_and_its_leaf_counted_dropped() -> None:
    n, t = 4, 3
    ids = _ids(n)
    rng = np.random.default_rng(81)
    leaves = _leaves(ids, t, rng)
    inputs = _inputs(ids, rng)
    agg = AggregatorRound(SLOT, ids, t, M, now=0.0, timeouts=RoundTimeouts(masked_input=5.0))
    (roster,) = [out for leaf in leaves.values() for out in agg.receive(leaf.advertise(), 0.0)]
    deliveries = [
        out for node in ids for out in agg.receive(leaves[node].receive_roster(roster), 1.0)
    ]
    assert agg.deadline == 6.0
    masked = {
        d.recipient: leaves[d.recipient].receive_shares(d, inputs[d.recipient]) for d in deliveries
    }
    for node in ids[:3]:
        assert agg.receive(masked[node], 2.0) == []
    with pytest.raises(SecAggError, match="after the deadline"):
        agg.receive(masked[ids[3]], 6.0)
    (request,) = agg.tick(6.0)
    assert request.dropped == frozenset({ids[3]})
    with pytest.raises(SecAggError, match="in phase unmask"):
        agg.receive(masked[ids[3]], 6.5)
    # the late leaf is not asked, and would refuse: it is named dropped, not a survivor
    with pytest.raises(UnmaskRefusedError, match="not a survivor"):
        leaves[ids[3]].unmask(request)
    out = [item for node in ids[:3] for item in agg.receive(leaves[node].unmask(request), 7.0)]
    (outcome,) = out
    assert [int(v) for v in outcome.total] == _exact([inputs[node] for node in ids[:3]])
