"""A site of private leaves under secure aggregation, in process, on a virtual clock (issue 26).

`SecAggRelease` (leaf core) and `SecAggSite` (aggregator core) driven slot after slot; every
message goes through `edge_runtime.wire.secagg` (encode, decode) as the shells will send it.
A leaf listed in ``silent`` sends nothing from the named stage of the slot on (killed
mid-slot) and, like a restarted or reconnected leaf, reads the retained outcome afterwards.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

import numpy as np
import pytest

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.agents.aggregator.core.secagg_site import SecAggSite
from edge_runtime.agents.leaf.core.secagg_release import SecAggRelease
from edge_runtime.fpca.continual import sqrt_factorisation_coefficients
from edge_runtime.secagg import masking
from edge_runtime.secagg.accounting import (
    gram_calibration,
    site_epsilon,
    weight_off_diagonal,
)
from edge_runtime.secagg.aggregator_round import RoundTimeouts
from edge_runtime.secagg.errors import SecAggError, UnmaskRefusedError
from edge_runtime.secagg.messages import (
    KeyRoster,
    MaskedInput,
    ShareDelivery,
    SlotOutcome,
    UnmaskRequest,
)
from edge_runtime.wire.secagg import decode_secagg, encode_secagg

D = 6
CLIP = 2.0
PERIOD = 100.0
TIMEOUTS = RoundTimeouts(advertise=5.0, share=5.0, masked_input=10.0, unmask=5.0)
IDS = ("pi-00", "pi-01", "pi-02", "pi-03")
STAGES = ("advertise", "share", "input", "unmask")
_CALIBRATIONS: dict[tuple[float, int, int], object] = {}


def _wire(message):
    """Through the wire and back: what the shells will publish and read."""
    return decode_secagg(encode_secagg(message, deployment="test-site"), deployment="test-site")


def _calibration(epsilon: float, threshold: int, horizon: int):
    key = (epsilon, threshold, horizon)
    if key not in _CALIBRATIONS:
        _CALIBRATIONS[key] = gram_calibration(
            epsilon, 1e-5, D, 2.0**16, threshold, sqrt_factorisation_coefficients(horizon)
        )
    return _CALIBRATIONS[key]


class Site:
    """Leaves (`IDS` by default) and their aggregator on a virtual clock (seconds)."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        epsilon: float = 1e6,
        horizon: int = 1,
        seed: int = 0,
        ids: tuple[str, ...] = IDS,
        n_features: int = D,
        clip_norm: float = CLIP,
        calibration=None,
        noise: Mapping[str, np.random.Generator] | None = None,
    ):
        cal = calibration or _calibration(epsilon, threshold, horizon)
        self.ids = ids
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        common = {"epsilon": epsilon, "delta": 1e-5, "clip_norm": clip_norm, "horizon": horizon}
        self.leaves = {
            node: SecAggRelease(
                node, n_features, threshold=threshold, cohort=ids, calibration=cal, **common
            )
            for node in ids
        }
        self.noise = dict(noise or {n: np.random.default_rng([seed, i]) for i, n in enumerate(ids)})
        self.site = SecAggSite(
            ids,
            threshold,
            n_features,
            slot_period_s=PERIOD,
            now=self.now,
            timeouts=TIMEOUTS,
            calibration=cal,
            **common,
        )
        self.exact = {node: np.zeros((n_features, n_features)) for node in ids}
        self.outcomes: list[SlotOutcome] = []
        self.retained: SlotOutcome | None = None
        self.late = 0  # messages refused because their slot had ended

    def add_rows(self, count: int = 20) -> dict[str, np.ndarray]:
        """Each leaf reads ``count`` rows (some beyond the clip norm); returns their Grams."""
        grams = {}
        for node, leaf in self.leaves.items():
            rows = self.rng.normal(size=(count, D)) * np.linspace(1.5, 0.2, D)
            leaf.add_rows(rows)
            unit = rows / np.maximum(np.linalg.norm(rows, axis=1), CLIP)[:, None]
            grams[node] = unit.T @ unit
            self.exact[node] += grams[node]
        return grams

    def advertise(self, nodes) -> None:
        """Leaves advertise for their next slot, one ahead (fresh keys per slot)."""
        for node in nodes:
            leaf = self.leaves[node]
            ad = leaf.advertise(
                leaf.next_slot, self.rng.bytes(32), self.rng.bytes(32), self.rng.bytes(32)
            )
            assert self.site.receive(_wire(ad), self.now) == []

    def run_slot(
        self,
        silent: Mapping[str, str] | None = None,
        tamper: Mapping[str, np.ndarray] | None = None,
    ) -> SlotOutcome:
        """Advertise, wait for the slot's start, then route messages until its outcome."""
        silent = dict(silent or {})

        def sends(node: str, stage: str) -> bool:
            return node not in silent or STAGES.index(stage) < STAGES.index(silent[node])

        self.advertise([n for n in self.ids if sends(n, "advertise")])
        self.now = self.site.next_wakeup(self.now)
        queue = deque(self.site.tick(self.now))
        assert self.site.slot is not None
        for _ in range(200):  # bounded: a slot is a handful of exchanges
            if not queue:
                assert self.site.slot is not None, "the slot ended without an outcome"
                wake = self.site.next_wakeup(self.now)
                assert wake > self.now
                assert self.site.tick(wake - 1e-6) == []  # nothing before the deadline
                self.now = wake
                queue.extend(self.site.tick(self.now))
                continue
            message = _wire(queue.popleft())
            replies = []
            if isinstance(message, KeyRoster):
                for node in message.leaf_ids:
                    if sends(node, "share"):
                        replies.append(self.leaves[node].receive_roster(message))
            elif isinstance(message, ShareDelivery):
                node = message.recipient
                if sends(node, "input"):
                    masked = self.leaves[node].receive_shares(message, self.noise[node])
                    if tamper and node in tamper:
                        masked = MaskedInput(masked.slot, node, tamper[node])
                    replies.append(masked)
            elif isinstance(message, UnmaskRequest):
                for node in sorted(message.survivors):
                    if sends(node, "unmask"):
                        replies.append(self.leaves[node].unmask(message))
            else:
                assert isinstance(message, SlotOutcome)
                self.retained = message  # retained on <site>/secagg/outcome
                self.outcomes.append(message)
                for node in self.ids:
                    if node not in silent:
                        self.leaves[node].receive_outcome(message)
                break
            for reply in replies:
                try:
                    queue.extend(self.site.receive(_wire(reply), self.now))
                except SecAggError as error:  # a response after t others ended the slot
                    assert "no slot running" in str(error) and self.site.slot is None
                    self.late += 1
        else:
            raise AssertionError("the slot did not end")
        assert self.site.slot is None
        for node in silent:  # back online: the retained outcome ends its slot
            self.leaves[node].receive_outcome(self.retained)
        return self.outcomes[-1]


def _upper_z(resid: np.ndarray, std: float) -> np.ndarray:
    """Residual entries over their std (diagonal ``std``, off-diagonal ``std / sqrt(2)``)."""
    rows, cols = np.triu_indices(resid.shape[0])
    scale = np.where(rows == cols, std, std / math.sqrt(2.0))
    return resid[rows, cols] / scale


def test_running_gram_is_the_exact_sum_within_the_calibrated_noise():
    site = Site(epsilon=1.0, seed=1)
    for _ in range(3):
        site.add_rows(40)
        outcome = site.run_slot()
        assert outcome.released and len(outcome.survivors) == 4
    exact = sum(site.exact.values())
    status = site.site.status()
    assert status["slots_released"] == 3 and status["slots_skipped"] == 0
    assert [r["survivors"] for r in status["recent"]] == [4, 4, 4]
    cal = site.site.calibration
    # 3 slots, each 4 shares of mu_total / 3: variance 3 * (4/3) * 2 mu_total / scale**2
    expected = math.sqrt(3 * 4 * cal.share_mu * 2.0) / 2.0**16
    assert site.site.noise_std == pytest.approx(expected, rel=1e-9)
    z = _upper_z(site.site.gram - exact, site.site.noise_std)
    assert np.max(np.abs(z)) < 5.0
    assert 0.3 < float(np.mean(z**2)) < 2.5  # 21 entries of a chi-square mean
    assert status["epsilon"] == pytest.approx(site_epsilon(cal, 4))
    assert status["epsilon"] < 1.0
    for leaf in site.leaves.values():
        ledger = leaf.ledger()
        assert ledger["readings_released"] == 120 and ledger["readings_pending"] == 0
        assert ledger["slots_contributed"] == ledger["slots_released"] == 3
        assert ledger["epsilon"] == pytest.approx(site_epsilon(cal, 4))
    basis = site.site.subspace(2, n_samples=480).basis
    top = np.linalg.eigh(exact)[1][:, ::-1][:, :2]
    assert np.linalg.norm(top.T @ basis, 2) > 0.9  # same leading direction as the exact sum


@pytest.mark.parametrize("horizon", [1, 4])
def test_one_leaf_killed_after_shares_completes_from_three_survivors(horizon):
    site = Site(seed=2, horizon=horizon)
    grams = site.add_rows()
    outcome = site.run_slot(silent={"pi-02": "input"})
    assert outcome.released
    assert outcome.survivors == frozenset(IDS) - {"pi-02"}
    assert outcome.dropped == {"pi-02"}
    survivors = sum(grams[n] for n in IDS if n != "pi-02")
    np.testing.assert_allclose(site.site.gram, survivors, atol=0.02)
    killed = site.leaves["pi-02"].ledger()
    assert killed["slots_carried_over"] == 1 and killed["readings_pending"] == 20
    assert site.site.status()["recent"][-1]["survivors"] == 3
    site.add_rows()
    assert site.run_slot().released
    np.testing.assert_allclose(site.site.gram, sum(site.exact.values()), atol=0.02)


def test_two_killed_skip_the_slot_and_the_others_carry_over():
    site = Site(seed=3)
    site.add_rows()
    outcome = site.run_slot(silent={"pi-00": "input", "pi-03": "input"})
    assert not outcome.released
    assert "2 masked inputs arrived, t = 3" in outcome.reason
    status = site.site.status()
    assert status["slots_skipped"] == 1 and status["slots_released"] == 0
    assert status["recent"][-1]["reason"] == outcome.reason
    assert not status["recent"][-1]["after_unmask_request"]
    np.testing.assert_array_equal(site.site.gram, np.zeros((D, D)))  # nothing released
    for leaf in site.leaves.values():
        ledger = leaf.ledger()
        assert ledger["slots_carried_over"] == 1 and ledger["slots_contributed"] == 0
        assert ledger["readings_pending"] == 20 and ledger["epsilon"] == 0.0
    site.add_rows()
    assert site.run_slot().released
    np.testing.assert_allclose(site.site.gram, sum(site.exact.values()), atol=0.02)
    for leaf in site.leaves.values():
        assert leaf.ledger()["readings_released"] == 40


def test_deadlines_fire_on_the_virtual_clock():
    site = Site(seed=4)
    site.add_rows()
    site.advertise(IDS[:3])  # pi-03 never advertises
    assert site.site.next_wakeup(0.0) == PERIOD
    assert site.site.tick(PERIOD - 1e-6) == [] and site.site.slot is None
    assert site.site.tick(PERIOD) == []  # due: the slot starts with 3 of 4 advertisements
    assert site.site.slot == 0
    assert site.site.next_wakeup(PERIOD) == PERIOD + TIMEOUTS.advertise
    assert site.site.tick(PERIOD + TIMEOUTS.advertise - 1e-6) == []
    (roster,) = site.site.tick(PERIOD + TIMEOUTS.advertise)
    assert isinstance(roster, KeyRoster) and roster.leaf_ids == IDS[:3]
    uploads = [site.leaves[n].receive_roster(_wire(roster)) for n in IDS[:2]]  # pi-02 silent
    now = PERIOD + TIMEOUTS.advertise + 1.0
    for upload in uploads:
        assert site.site.receive(_wire(upload), now) == []
    deadline = PERIOD + TIMEOUTS.advertise + TIMEOUTS.share
    assert site.site.next_wakeup(now) == deadline
    (outcome,) = site.site.tick(deadline)
    assert isinstance(outcome, SlotOutcome) and not outcome.released
    assert "2 leaves shared keys, t = 3" in outcome.reason
    assert site.site.slot is None and site.site.next_wakeup(deadline) == 2 * PERIOD
    for leaf in site.leaves.values():
        leaf.receive_outcome(_wire(outcome))
    # a shell that wakes late starts one slot and keeps the grid
    site.advertise(IDS)
    assert site.site.slot_due(3.5 * PERIOD) == 1
    assert site.site.next_wakeup(3.5 * PERIOD) == 3.5 * PERIOD + TIMEOUTS.share  # roster out
    assert site.site.tick(3.5 * PERIOD)[0].slot == 1


def test_a_broken_mask_is_detected_and_the_slot_skipped():
    site = Site(seed=5)
    grams = site.add_rows()
    plain = masking.encode(weight_off_diagonal(grams["pi-01"]), 2.0**16)  # not masked
    outcome = site.run_slot(tamper={"pi-01": plain})
    assert not outcome.released
    assert "a mask did not cancel" in outcome.reason
    status = site.site.status()
    assert status["slots_skipped"] == 1 and status["recent"][-1]["after_unmask_request"]
    np.testing.assert_array_equal(site.site.gram, np.zeros((D, D)))
    for leaf in site.leaves.values():  # they revealed: spent, at the worst case t, not re-sent
        ledger = leaf.ledger()
        assert ledger["slots_revealed_skipped"] == 1 and ledger["readings_pending"] == 0
        assert ledger["readings_released"] == 20
        assert ledger["epsilon"] == pytest.approx(site_epsilon(leaf.calibration, 3))


def test_too_few_unmask_answers_skip_at_the_deadline_and_only_the_silent_carry_over():
    site = Site(seed=12)
    first = site.add_rows()
    outcome = site.run_slot(silent={"pi-00": "unmask", "pi-01": "unmask"})
    assert not outcome.released
    assert "2 survivors answered the unmask request, t = 3" in outcome.reason
    assert site.site.status()["recent"][-1]["after_unmask_request"]
    for node in ("pi-02", "pi-03"):  # answered: spent (worst case t), not re-sent
        ledger = site.leaves[node].ledger()
        assert ledger["slots_revealed_skipped"] == 1 and ledger["readings_pending"] == 0
    for node in ("pi-00", "pi-01"):  # never answered: nothing revealed, carried over
        ledger = site.leaves[node].ledger()
        assert ledger["slots_carried_over"] == 1 and ledger["readings_pending"] == 20
    second = site.add_rows()
    assert site.run_slot().released
    expected = sum(second.values()) + first["pi-00"] + first["pi-01"]
    np.testing.assert_allclose(site.site.gram, expected, atol=0.02)


@pytest.mark.parametrize("horizon", [1, 4])
def test_continual_release_gives_the_prefix_sums_through_a_skipped_slot(horizon):
    site = Site(horizon=horizon, seed=6)
    for slot in range(6):  # two segments at H = 4; slot 2 skipped before unmasking
        site.add_rows()
        silent = {"pi-00": "share", "pi-01": "share"} if slot == 2 else {}
        outcome = site.run_slot(silent=silent)
        assert outcome.released == (slot != 2)
        if outcome.released:  # slot 2's readings carry over into slot 3
            np.testing.assert_allclose(site.site.gram, sum(site.exact.values()), atol=0.05)
    status = site.site.status()
    assert status["slots_released"] == 5 and status["slots_discarded"] == 0


def test_a_skip_after_unmasking_closes_the_segment():
    site = Site(horizon=4, seed=7)
    site.add_rows()
    assert site.run_slot().released
    site.add_rows()
    plain = masking.encode(np.eye(D), 2.0**16)
    assert not site.run_slot(tamper={"pi-03": plain}).released  # revealed, then skipped
    before = site.site.gram
    site.add_rows()
    assert site.run_slot().released  # slot 2 of the broken segment: not used
    np.testing.assert_array_equal(site.site.gram, before)
    assert site.site.status()["slots_discarded"] == 1
    site.add_rows()
    site.run_slot()  # slot 3: still the broken segment
    grams = site.add_rows()
    assert site.run_slot().released  # slot 4: a new segment, used again
    status = site.site.status()
    assert status["segments_closed_early"] == 1 and status["slots_discarded"] == 2
    # slots 1-3's readings are spent for the leaves (revealed), lost for the estimate
    np.testing.assert_allclose(site.site.gram, before + sum(grams.values()), atol=0.05)
    assert all(leaf.ledger()["readings_released"] == 100 for leaf in site.leaves.values())


def test_threshold_must_be_above_half_the_site():
    with pytest.raises(ValueError, match="2 t > n"):
        SecAggSite(
            IDS,
            2,
            D,
            epsilon=1.0,
            delta=1e-5,
            clip_norm=CLIP,
            slot_period_s=PERIOD,
            now=0.0,
            timeouts=TIMEOUTS,
        )
    with pytest.raises(ValueError, match="slot_period_s"):
        SecAggSite(
            IDS,
            3,
            D,
            epsilon=1.0,
            delta=1e-5,
            clip_norm=CLIP,
            slot_period_s=10.0,
            now=0.0,
            timeouts=TIMEOUTS,
            calibration=_calibration(1e6, 3, 1),
        )


def test_site_refuses_strangers_and_past_slots():
    site = Site(seed=8)
    site.add_rows()
    site.run_slot()
    leaf = SecAggRelease(
        "pi-09", D, epsilon=1e6, delta=1e-5, clip_norm=CLIP, threshold=3,
        calibration=_calibration(1e6, 3, 1),
    )  # fmt: skip
    ad = leaf.advertise(1, bytes(32), bytes([1]) * 32, bytes(32))
    with pytest.raises(SecAggError, match="not a site leaf"):
        site.site.receive(ad, site.now)
    stale = site.leaves["pi-00"]
    with pytest.raises(ValueError, match="above 0"):
        stale.advertise(0, bytes(32), bytes([1]) * 32, bytes(32))


def test_leaf_duplicates_and_checks():
    site = Site(seed=9)
    leaf = site.leaves["pi-00"]
    with pytest.raises(ValueError, match=r"shape \(n_samples, 6\)"):
        leaf.add_rows(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="non-finite"):
        leaf.add_rows(np.full((1, D), np.nan))
    assert leaf.pending_rows == 0
    ad = leaf.advertise(0, bytes(32), bytes([1]) * 32, bytes([2]) * 32)
    assert leaf.advertise(0, bytes([3]) * 32, bytes([4]) * 32, bytes(32)) == ad  # same slot
    assert leaf.next_slot == 0
    leaf.end_slot()  # nothing revealed: carried over, next slot 1
    assert leaf.next_slot == 1 and leaf.ledger()["slots_carried_over"] == 1
    with pytest.raises(ValueError, match="calibration"):
        SecAggRelease(
            "pi-00", D, epsilon=2.0, delta=1e-5, clip_norm=CLIP, threshold=3,
            calibration=_calibration(1e6, 3, 1),
        )  # fmt: skip


def test_a_late_start_never_wakes_the_shell_before_the_round_can_move():
    site = Site(seed=10)
    site.advertise(IDS[:3])  # pi-03 is silent: the advertise phase runs to its deadline
    late = 2 * PERIOD - 1.0  # the shell slept through most of the first period
    assert site.site.slot_due(late) == 0
    assert site.site.next_wakeup(late) == late + TIMEOUTS.advertise  # not the grid's 2 * PERIOD
    assert site.site.slot_due(2 * PERIOD) is None  # the next slot waits for this one


def test_leaf_answers_duplicates_alike_and_counts_once():
    site = Site(seed=11)
    site.add_rows()
    leaf = site.leaves["pi-00"]
    site.advertise(IDS)
    site.now = site.site.next_wakeup(site.now)
    (roster,) = site.site.tick(site.now)
    deliveries = []
    for node in IDS:
        upload = site.leaves[node].receive_roster(_wire(roster))
        assert site.leaves[node].receive_roster(_wire(roster)) == upload  # QoS 1 duplicate
        deliveries += site.site.receive(_wire(upload), site.now)
    requests = []
    for delivery in deliveries:
        node = delivery.recipient
        masked = site.leaves[node].receive_shares(_wire(delivery), site.noise[node])
        again = site.leaves[node].receive_shares(_wire(delivery), site.noise[node])
        np.testing.assert_array_equal(again.vector, masked.vector)
        requests += site.site.receive(_wire(masked), site.now)
    (request,) = requests
    response = leaf.unmask(_wire(request))
    assert leaf.unmask(_wire(request)) == response
    assert leaf.ledger()["readings_released"] == 20 and leaf.ledger()["slots_contributed"] == 1
    other = UnmaskRequest(request.slot, frozenset(IDS[:3]), frozenset({"pi-03"}))
    with pytest.raises(UnmaskRefusedError):
        leaf.unmask(other)  # a second, different request: refused, nothing more revealed
    assert leaf.ledger()["readings_released"] == 20
    with pytest.raises(SecAggError, match="current round is 0"):
        leaf.receive_roster(KeyRoster(5, 3, roster.advertisements))
    leaf.observe_slot(5)  # what the shell does on a later slot's roster: the round ends
    assert leaf.slot is None and leaf.next_slot == 6
    assert leaf.ledger()["last"]["revealed"]  # counted at the worst case, t survivors
