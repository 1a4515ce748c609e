"""Flow-control policies on a virtual clock: no broker, no sleeps, every rule by its times."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edge_runtime.agents.common.core.policy import (
    ConfirmPolicy,
    EchoTracker,
    PublishPolicy,
    StatusPolicy,
    largest_angle,
    largest_angle_orthonormal,
    subspace_change,
)
from edge_runtime.fpca import Subspace

POLICY = PublishPolicy(min_interval_s=0.2, max_interval_s=5.0, idle_s=0.1)


def subspace(angle: float = 0.0, sv: tuple[float, ...] = (10.0, 5.0), n: int = 100) -> Subspace:
    """Two orthonormal directions in R^4, the first rotated by ``angle`` radians."""
    basis = np.zeros((4, 2))
    basis[0, 0], basis[2, 0] = math.cos(angle), math.sin(angle)
    basis[1, 1] = 1.0
    return Subspace(basis, np.array(sv), n)


def decide(now: float, **state: float | bool) -> str | None:
    """`POLICY.decide` with a node that published at 0 and last read at ``now``."""
    args: dict[str, float | bool] = {
        "last_publish": 0.0,
        "last_input": now,
        "unpublished_since": 0.0,
        "moved": False,
    }
    args.update(state)
    return POLICY.decide(now, **args)  # type: ignore[arg-type]


# ------------------------------------------------------------------ PublishPolicy
def test_the_first_snapshot_goes_out_as_soon_as_the_rate_limit_allows() -> None:
    assert decide(0.1, first=True) is None
    assert decide(0.2, first=True) == "first"
    assert POLICY.next_check(
        0.1, last_publish=0.0, last_input=0.1, unpublished_since=0.0, first=True
    ) == pytest.approx(0.2)


def test_a_moved_subspace_is_published_but_never_before_the_minimum_interval() -> None:
    assert decide(0.15, moved=True) is None
    assert decide(0.2, moved=True) == "moved"
    assert POLICY.next_check(
        0.05, last_publish=0.0, last_input=0.05, unpublished_since=0.01, moved=True
    ) == pytest.approx(0.2)


def test_a_steady_stream_inside_the_deadband_is_published_every_maximum_interval() -> None:
    assert decide(4.99, unpublished_since=0.0) is None
    assert decide(5.0, unpublished_since=0.0) == "max_interval"
    assert POLICY.next_check(
        1.0, last_publish=0.0, last_input=1.0, unpublished_since=0.0
    ) == pytest.approx(1.1)  # idle comes first
    assert POLICY.next_check(
        4.97, last_publish=0.0, last_input=4.97, unpublished_since=0.0
    ) == pytest.approx(5.0)


def test_a_stream_that_pauses_gets_its_trailing_publish_after_the_idle_time() -> None:
    assert decide(1.05, last_input=1.0) is None
    assert decide(1.1, last_input=1.0) == "idle"
    assert POLICY.next_check(
        1.0, last_publish=0.0, last_input=1.0, unpublished_since=0.5
    ) == pytest.approx(1.1)


def test_nothing_unpublished_means_no_publish_and_no_wakeup() -> None:
    assert decide(100.0, unpublished_since=math.inf, moved=True, first=True) is None
    assert (
        POLICY.next_check(1.0, last_publish=0.0, last_input=0.5, unpublished_since=math.inf)
        == math.inf
    )


@pytest.mark.parametrize(
    "state",
    [
        {"first": True},
        {"moved": True},
        {"unpublished_since": -10.0},
        {"last_input": -10.0},
    ],
)
def test_no_reason_bypasses_the_rate_limit(state: dict[str, float | bool]) -> None:
    assert decide(0.19, **state) is None
    assert decide(0.2, **state) is not None


def test_a_steady_stream_on_a_virtual_clock_publishes_about_once_per_maximum_interval() -> None:
    """Readings every 10 ms for 18 s, never moving: a publish per maximum interval and the
    trailing one when the stream stops, whatever the reading rate."""
    last_publish, unpublished_since, reasons = -math.inf, math.inf, []
    for step in range(1800):
        now = step * 0.01
        if math.isinf(last_publish):
            last_publish = now  # the rate limit counts from the first reading
        if math.isinf(unpublished_since):
            unpublished_since = now
        reason = POLICY.decide(
            now,
            last_publish=last_publish,
            last_input=now,
            unpublished_since=unpublished_since,
            moved=False,
        )
        if reason is not None:
            reasons.append(reason)
            last_publish, unpublished_since = now, math.inf
    end = 17.99
    wake = POLICY.next_check(
        end, last_publish=last_publish, last_input=end, unpublished_since=unpublished_since
    )
    assert wake == pytest.approx(end + POLICY.idle_s)
    assert (
        POLICY.decide(
            wake,
            last_publish=last_publish,
            last_input=end,
            unpublished_since=unpublished_since,
            moved=False,
        )
        == "idle"
    )
    assert reasons == ["max_interval"] * 3  # at 5.0, 10.01, 15.02; idle at 18.09


def test_the_deadband_ignores_a_stationary_stream_and_catches_rotation_spectrum_and_growth() -> (
    None
):
    base = subspace()
    same_per_sample = (10.0 * math.sqrt(1.5), 5.0 * math.sqrt(1.5))
    assert not POLICY.moved(base, subspace(0.01, sv=same_per_sample, n=150), rank=2)
    assert POLICY.moved(base, subspace(0.06), rank=2)  # angle 0.06 > 0.05 rad
    assert POLICY.moved(base, subspace(sv=(10.0, 6.5)), rank=2)  # 15 % of s_0
    assert POLICY.moved(base, subspace(n=200), rank=2)  # the count doubled
    assert POLICY.moved(None, base, rank=2)


def test_the_spectrum_is_compared_per_sample_so_growth_alone_does_not_move_it() -> None:
    grown = subspace(sv=(10.0 * math.sqrt(1.5), 5.0 * math.sqrt(1.5)), n=150)
    angle, spectrum, growth = subspace_change(subspace(), grown, rank=2)
    assert angle == pytest.approx(0.0, abs=1e-7)
    assert spectrum == pytest.approx(0.0, abs=1e-12)
    assert growth == pytest.approx(0.5)


def test_largest_angle_is_the_rotation_between_the_spans() -> None:
    assert largest_angle(subspace(0.3).basis, subspace().basis) == pytest.approx(0.3)


@pytest.mark.parametrize("seed", range(20))
def test_the_deadbands_angle_is_the_largest_principal_angle(seed: int) -> None:
    """The deadband's one-SVD form for orthonormal bases against the general one, from
    identical spans (0) through small rotations to unrelated spans."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 60))
    k = int(rng.integers(1, d + 1))
    a = np.linalg.qr(rng.normal(size=(d, k)))[0]
    scale = [0.0, 1e-6, 1e-3, 0.05, 1.0, 100.0][seed % 6]
    b = np.linalg.qr(a + scale * rng.normal(size=(d, k)))[0]
    fast = largest_angle_orthonormal(a, b)
    assert fast == pytest.approx(largest_angle(a, b), abs=1e-9)
    assert 0.0 <= fast <= math.pi / 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_interval_s": 1.0, "max_interval_s": 0.5, "idle_s": 0.1},
        {"min_interval_s": -1.0, "max_interval_s": 0.5, "idle_s": 0.1},
        {"min_interval_s": 0.1, "max_interval_s": 0.5, "idle_s": math.nan},
        {"min_interval_s": 0.1, "max_interval_s": 0.5, "idle_s": 0.1, "growth": 0.0},
    ],
)
def test_an_inconsistent_publish_policy_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        PublishPolicy(**kwargs)


# ------------------------------------------------------------------- StatusPolicy
def test_status_documents_go_out_as_a_heartbeat_without_changes() -> None:
    policy = StatusPolicy(heartbeat_s=30.0, min_interval_s=2.0)
    assert not policy.decide(29.9, last_sent=0.0, changed=False)
    assert policy.decide(30.0, last_sent=0.0, changed=False)
    assert policy.next_check(5.0, last_sent=0.0, changed=False) == 30.0


def test_a_change_of_health_is_reported_at_once_but_rate_limited() -> None:
    policy = StatusPolicy(heartbeat_s=30.0, min_interval_s=2.0)
    assert not policy.decide(1.0, last_sent=0.0, changed=True)
    assert policy.next_check(1.0, last_sent=0.0, changed=True) == 2.0
    assert policy.decide(2.0, last_sent=0.0, changed=True)
    assert policy.next_check(7.0, last_sent=0.0, changed=True) == 7.0  # overdue: now


# ------------------------------------------------------------------ ConfirmPolicy
def test_a_confirmation_inside_the_interval_is_sent_when_it_ends() -> None:
    policy = ConfirmPolicy(min_interval_s=0.5)
    assert policy.decide(0.0, last_sent=-math.inf, changed=True)
    assert not policy.decide(0.3, last_sent=0.0, changed=True)  # a change 0.3 s later waits
    assert policy.next_check(0.3, last_sent=0.0, changed=True) == 0.5
    assert policy.decide(0.5, last_sent=0.0, changed=True)  # the trailing confirmation


def test_without_a_change_there_is_no_confirmation_and_no_wakeup() -> None:
    policy = ConfirmPolicy(min_interval_s=0.5)
    assert not policy.decide(100.0, last_sent=0.0, changed=False)
    assert policy.next_check(100.0, last_sent=0.0, changed=False) == math.inf


def test_confirmations_cost_at_most_one_message_per_interval_whatever_the_reading_rate() -> None:
    policy, last_sent, sent = ConfirmPolicy(min_interval_s=0.5), -math.inf, 0
    for step in range(1000):  # something new to confirm every 10 ms for 10 s
        now = step * 0.01
        if policy.decide(now, last_sent=last_sent, changed=True):
            last_sent, sent = now, sent + 1
    assert sent == 20


# -------------------------------------------------------------------- EchoTracker
def test_a_later_echo_of_the_same_lineage_reports_the_earlier_ones_lost_at_once() -> None:
    echo = EchoTracker(timeout_s=5.0)
    for seq in (1, 2, 3):
        echo.sent("a", seq, 0.0)
        echo.acked("a", seq, 0.0)
    echo.sent("b", 1, 0.0)  # another lineage (a restarted node) is not affected
    echo.acked("b", 1, 0.0)
    assert echo.echoed("a", 3, 0.1) == [1, 2]
    assert echo.undelivered == 2
    assert echo.awaiting == 1
    assert echo.echoed("b", 1, 0.2) == []


def test_the_bound_grows_with_the_observed_echo_latency() -> None:
    echo = EchoTracker(timeout_s=5.0, factor=4.0)
    assert echo.bound_s == 5.0
    echo.sent("a", 1, 0.0)
    echo.echoed("a", 1, 3.0)  # a loaded broker: 3 s round trip
    assert echo.bound_s == 12.0
    echo.sent("a", 2, 10.0)
    assert echo.next_check() == 22.0
    assert echo.expired(21.9) == []
    assert echo.expired(22.0) == [2]
    assert echo.undelivered == 1
    assert echo.next_check() == math.inf


def test_an_echo_after_its_report_withdraws_the_report_and_counts_late() -> None:
    echo = EchoTracker(timeout_s=5.0)
    echo.sent("a", 1, 0.0)
    assert echo.expired(5.0) == [1]
    assert echo.undelivered == 1
    assert echo.echoed("a", 1, 7.0) == []
    assert (echo.undelivered, echo.late) == (0, 1)


def test_a_timely_echo_is_neither_undelivered_nor_late() -> None:
    echo = EchoTracker(timeout_s=5.0)
    echo.sent("a", 1, 0.0)
    assert echo.echoed("a", 1, 0.05) == []
    assert echo.expired(100.0) == []
    assert (echo.undelivered, echo.late, echo.awaiting) == (0, 0, 0)


def test_a_leaf_is_not_idle_between_the_bursts_of_a_regular_stream() -> None:
    """Readings every 0.5 s: the trailing publish waits for a pause of about two such gaps,
    not for the policy's 0.05 s, so a paced stream is not published burst by burst."""
    from edge_runtime.agents.common.core.node import publish_policy_for
    from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
    from edge_runtime.agents.leaf.core.leaf import IDLE_GAPS, LeafCore
    from edge_runtime.topology import NodeConfig
    from edge_runtime.wire import SensorReadings

    config = NodeConfig(id="leaf", parent="root", rank=2, block_size=10)
    policy = publish_policy_for(config, leaf=True)
    core = LeafCore(
        config,
        policy=policy,
        status_policy=StatusPolicy(),
        confirm_policy=ConfirmPolicy(),
        now=0.0,
        n_features=4,
        rng=random.Random(0),
    )
    rng = np.random.default_rng(0)
    for i in range(20):
        t = 0.5 * i
        for block in core.accept(SensorReadings(rng.normal(size=(3, 4)), "s", 3 * i), t):
            core.apply(block, t)
        if i >= 5:  # the average gap has settled near 0.5 s
            assert not core.idle(t + 0.5 * 1.5), core.idle_s
    assert core.idle_s == pytest.approx(IDLE_GAPS * 0.5, rel=0.05)
    assert core.idle(9.5 + core.idle_s)
    assert policy.idle_s < core.idle_s


# The echo check under load (issue 21: 731 publish_not_delivered at 10,240 leaves in one
# run, nothing denied). Every case below is a message the broker delivered or never got.
def _publish(echo: EchoTracker, seq: int, sent: float, acked: float, epoch: str = "a") -> None:
    echo.sent(epoch, seq, sent)
    echo.acked(epoch, seq, acked)


def test_a_publish_that_failed_is_never_reported_even_when_a_later_one_comes_back() -> None:
    """The connection broke during the publish of seq 1 (never PUBACKed: it may never have
    reached the broker); seq 2, published after the reconnection, comes back first."""
    echo = EchoTracker(timeout_s=5.0)
    echo.sent("a", 1, 0.0)
    echo.failed("a", 1)
    echo.connected(1.0)
    _publish(echo, 2, 1.5, 1.6)
    assert echo.echoed("a", 2, 1.7) == []
    assert echo.expired(1000.0) == []
    assert (echo.undelivered, echo.awaiting, echo.failed_publishes) == (0, 0, 1)
    assert echo.echoed("a", 1, 2.0) == []  # it did reach the broker after all: no report
    assert (echo.undelivered, echo.late) == (0, 0)


def test_the_order_rule_needs_the_puback_before_the_later_publish() -> None:
    """seq 2 is sent while seq 1 awaits its PUBACK (no order at the broker is known)."""
    echo = EchoTracker(timeout_s=5.0)
    echo.sent("a", 1, 0.0)
    _publish(echo, 2, 0.1, 0.2)
    assert echo.echoed("a", 2, 0.3) == []
    echo.acked("a", 1, 0.4)
    assert echo.echoed("a", 1, 0.5) == []
    assert echo.undelivered == 0


def test_a_retained_copy_on_resubscribing_does_not_report_what_the_shell_republished() -> None:
    """At connection start the shell subscribes (the broker queues the retained seq 3, a
    publish whose PUBACK timed out on the old connection but which arrived), then re-publishes
    its latest acknowledged snapshot seq 2; the retained 3 is read after 2 was PUBACKed."""
    echo = EchoTracker(timeout_s=5.0)
    _publish(echo, 2, 0.0, 0.1)
    echo.sent("a", 3, 1.0)
    echo.failed("a", 3)  # PUBACK timed out
    echo.connected(20.0)
    _publish(echo, 2, 20.1, 20.2)  # on_connected: the latest snapshot again
    assert echo.echoed("a", 3, 20.3) == []  # the retained copy: no order known
    assert echo.echoed("a", 2, 20.4) == []
    assert (echo.undelivered, echo.awaiting) == (0, 0)


def test_the_order_rule_does_not_cross_a_reconnection() -> None:
    """seq 1's echo was in flight when the connection broke; seq 2 (new connection) comes
    back first. seq 1 is superseded, not reported; a redelivered echo of 1 is harmless."""
    echo = EchoTracker(timeout_s=5.0)
    _publish(echo, 1, 0.0, 0.1)
    echo.connected(3.0)
    _publish(echo, 2, 3.1, 3.2)
    assert echo.echoed("a", 2, 3.3) == []
    assert (echo.undelivered, echo.superseded, echo.awaiting) == (0, 1, 0)
    assert echo.echoed("a", 1, 3.4) == []
    assert (echo.undelivered, echo.late) == (0, 0)


def test_the_clock_starts_at_the_puback_and_again_at_a_reconnection() -> None:
    echo = EchoTracker(timeout_s=5.0, factor=4.0)
    echo.sent("a", 1, 0.0)
    echo.acked("a", 1, 1.0)  # the publish waited 1 s in the client: bound 4 x 1 s... at least 5
    assert echo.bound_s == 5.0
    assert echo.next_check() == 6.0
    assert echo.expired(5.9) == []
    echo.connected(5.5)  # reconnected: the echo may come on the new connection
    assert echo.next_check() == 10.5
    assert echo.expired(10.4) == []
    assert echo.expired(10.5) == [1]


def test_the_bound_follows_the_event_loop_lag_before_any_echo_is_seen() -> None:
    """A first snapshot under load: no echo latency learnt yet, but the shell's timed
    sleeps end late; the bound covers the lag at once."""
    echo = EchoTracker(timeout_s=30.0, factor=4.0)
    _publish(echo, 1, 0.0, 0.0)
    echo.load(12.0)  # the work loop woke 12 s late
    assert echo.bound_s == 48.0
    assert echo.expired(40.0) == []
    assert echo.echoed("a", 1, 41.0) == []
    assert (echo.undelivered, echo.late) == (0, 0)
    for _ in range(32):  # the load passes: the window forgets it
        echo.load(0.001)
    assert echo.bound_s == 4 * 41.0  # the slow echo is still remembered
    echo.load(-1.0)  # nonsense is ignored
    echo.load(math.nan)


def test_the_bound_follows_the_puback_round_trip() -> None:
    echo = EchoTracker(timeout_s=5.0, factor=4.0)
    _publish(echo, 1, 0.0, 3.0)  # the broker took 3 s to acknowledge
    assert echo.bound_s == 12.0
    assert echo.next_check() == 15.0


def test_an_acl_denied_lineage_is_still_reported_after_a_reconnection() -> None:
    """Nothing ever comes back (every publish denied): the snapshot re-published on the new
    connection is reported once the bound has passed since its PUBACK."""
    echo = EchoTracker(timeout_s=5.0)
    _publish(echo, 1, 0.0, 0.01)
    echo.connected(2.0)
    _publish(echo, 1, 2.1, 2.11)  # re-published on connection: one record, restarted
    assert echo.awaiting == 1
    assert echo.expired(7.0) == []
    assert echo.expired(7.11) == [1]
    assert echo.undelivered == 1


def test_an_oversized_snapshot_is_reported_at_once_when_the_next_one_comes_back() -> None:
    """message_size_limit drops seq 1; seq 2 (smaller, PUBACKed after 1 was) comes back."""
    echo = EchoTracker(timeout_s=30.0)
    _publish(echo, 1, 0.0, 0.01)
    _publish(echo, 2, 0.5, 0.51)
    assert echo.echoed("a", 2, 0.52) == [1]
    assert echo.undelivered == 1


def test_an_echo_that_beats_its_puback_is_not_reported() -> None:
    echo = EchoTracker(timeout_s=5.0)
    echo.sent("a", 1, 0.0)
    assert echo.echoed("a", 1, 0.1) == []
    echo.acked("a", 1, 0.2)
    assert (echo.awaiting, echo.undelivered) == (0, 0)
    assert echo.bound_s == 5.0


def test_memory_stays_bounded_for_a_caller_that_never_acks() -> None:
    echo = EchoTracker(timeout_s=5.0)
    for seq in range(5000):
        echo.sent("a", seq, float(seq))
        echo.echoed("a", seq, float(seq))
    assert echo.awaiting == 0
    assert len(echo._sent_at) <= 1025
