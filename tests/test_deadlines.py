"""Every rule of a core that waits for time fires, on a virtual clock, with the shell waking
only when the core says (issue 21, item 1).

A small driver plays the shell: it carries out a leaf core's tick (`LeafCore.step`) as
`LeafAgent.carry_out` does, or steps an aggregator core as `AggregatorAgent.step` does, then
"sleeps" until the tick's `Wake` (a leaf; ``core.next_wakeup(now)``) or the next input,
whichever is first, with no upper bound on the sleep. So a deadline a core forgets to
report to its shell never fires here, and the test fails: that is how the leaf's idle
durability bug was hidden (the readings after the last full block of a stream were never
checkpointed, because nothing woke the shell for them).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.common.core.actions import Publish, Wake, WriteCheckpoint
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.common.core.reject_log import MAX_REJECT_LOG_INTERVAL_S, RejectLog
from edge_runtime.agents.leaf.core.durability import (
    CHECKPOINT_INTERVAL_S,
    IDLE_CHECKPOINT_GAP_S,
    CheckpointImage,
)
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.core.tick import MAX_TICK_CALLS
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import ConfirmMessage, SensorReadings, SubspaceMessage

SRC = "replay:run:leaf"
D = 4
BLOCK = 10


@dataclass
class Events:
    """What the shell did, with the virtual time."""

    snapshots: list[tuple[float, str, int]] = field(default_factory=list)
    checkpoints: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    confirms: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    statuses: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    wakeups: int = 0


def leaf(**config: object) -> LeafCore:
    checkpointing = bool(config.pop("checkpointing", True))
    interval = float(config.pop("checkpoint_interval_s", CHECKPOINT_INTERVAL_S))  # type: ignore[arg-type]
    cfg = NodeConfig(id="leaf", parent="root", rank=2, block_size=BLOCK, **config)  # type: ignore[arg-type]
    return LeafCore(
        cfg,
        policy=publish_policy_for(cfg, leaf=True),
        status_policy=StatusPolicy(),
        confirm_policy=ConfirmPolicy(),
        now=0.0,
        n_features=D,
        checkpointing=checkpointing,
        checkpoint_interval_s=interval,
        rng=random.Random(0),
    )


def leaf_step(core: LeafCore, now: float, ev: Events) -> float:
    """`LeafAgent.carry_out` without the I/O: the core's work tick (`LeafCore.step`), each
    action's outcome reported at ``now``; returns the tick's `Wake` time."""
    for _ in range(MAX_TICK_CALLS):
        actions = core.step(now, timestamp=now)
        core.take_released()
        for action in actions:
            if isinstance(action, WriteCheckpoint):
                assert isinstance(action.state, CheckpointImage)
                core.checkpoint_written(action, now)
                ev.checkpoints.append((now, dict(action.state.ingested)))
            elif isinstance(action, Publish):
                msg = action.message
                if action.kind == "subspace":
                    assert isinstance(msg, SubspaceMessage)
                    ev.snapshots.append((now, action.reason, msg.n_samples))
                elif action.kind == "confirm":
                    assert isinstance(msg, ConfirmMessage)
                    ev.confirms.append((now, dict(msg.durable)))
                elif action.kind == "status":
                    ev.statuses.append(now)
                elif action.kind == "scores":
                    ev.scores.append(now)
                core.published(action, now)
        if actions and isinstance(actions[-1], Wake):
            return actions[-1].at
    raise AssertionError(f"the tick at {now} never ended")


def run_leaf(
    core: LeafCore,
    inputs: list[tuple[float, SensorReadings]],
    until: float,
    max_wakeups: int = 100_000,
) -> Events:
    """Deliver ``inputs`` (time-ordered) and otherwise sleep until the tick's `Wake`."""
    ev = Events()
    now, i = 0.0, 0
    while now <= until:
        while i < len(inputs) and inputs[i][0] <= now:
            applied = core.ingest(core.accept_labelled(inputs[i][1], now), now)
            if core.scoring is not None:  # as `LeafAgent._score`, for each applied block
                for block, src, seq, _ in applied:
                    docs = core.scoring.score(block, source=src, seq=seq, timestamp=now)
                    core.score_outbox.add([json.dumps(doc).encode() for doc in docs])
            i += 1
        wake = leaf_step(core, now, ev)
        ev.wakeups += 1
        assert ev.wakeups <= max_wakeups, f"busy loop at t={now}"
        assert wake == core.next_wakeup(now) or math.isinf(wake), wake
        assert wake > now or math.isinf(wake) or wake == now, wake
        wake = max(wake, now + 1e-3)  # the shell's MIN_SLEEP_S keeps it from spinning
        nxt = inputs[i][0] if i < len(inputs) else math.inf
        now = min(wake, nxt)
        if math.isinf(now):
            break
    return ev


def stream(n: int, rate: float, *, start: float = 0.0, batch: int = 1, seed: int = 0):
    """``n`` readings of source ``SRC`` at ``rate`` readings/s, ``batch`` per message."""
    x = np.random.default_rng(seed).normal(size=(n, D))
    return [
        (start + i / rate, SensorReadings(x[i : i + batch], SRC, i)) for i in range(0, n, batch)
    ]


# ----------------------------------------------------------------------- leaf durability
@pytest.mark.parametrize("n", [7, 20, 25, 963])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_every_reading_of_a_stream_that_ends_becomes_durable_and_confirmed(
    n: int, checkpointing: bool
) -> None:
    """At any count (less than a block, block-aligned, a tail after the last full block):
    within max(idle_s, IDLE_CHECKPOINT_GAP_S) + the confirmation interval of the last
    reading, the leaf's confirmation says every reading is durable."""
    core = leaf(checkpointing=checkpointing)
    inputs = stream(n, 100.0, batch=8)
    last = inputs[-1][0]
    ev = run_leaf(core, inputs, until=last + 120.0)
    assert core.durable == {SRC: n - 1}
    assert ev.confirms and ev.confirms[-1][1] == {SRC: n - 1}
    when = next(t for t, durable in ev.confirms if durable == {SRC: n - 1})
    bound = max(core.idle_s, IDLE_CHECKPOINT_GAP_S if checkpointing else 0.0) + 0.5 + 0.1
    assert when <= last + bound, f"confirmed durable {when - last:.2f} s after the last reading"
    if checkpointing:
        assert ev.checkpoints[-1][1] == {SRC: n - 1}


def test_a_stream_that_never_pauses_is_checkpointed_every_interval_and_no_more_often() -> None:
    """100 readings/s for 200 s, one per message: after the first (with the first
    snapshot), checkpoints at the interval (20 s here), never closer together, and nothing
    more while the stream runs."""
    core = leaf(checkpoint_interval_s=20.0)
    inputs = stream(20_000, 100.0)
    ev = run_leaf(core, inputs, until=199.0)
    times = [t for t, _ in ev.checkpoints]
    first = ev.snapshots[0][0]
    assert times[0] == first < 1.0
    assert len(times) == 10, times  # then at first + 20, + 40, ..., + 180 s
    assert all(b - a == pytest.approx(20.0, abs=0.02) for a, b in itertools.pairwise(times))


def test_a_pause_checkpoints_no_sooner_than_the_gap_after_the_last_checkpoint() -> None:
    """Bursts of 8 readings every 3 s: the leaf is idle between bursts (its usual gap is
    short), but a checkpoint follows a pause at most every IDLE_CHECKPOINT_GAP_S."""
    core = leaf()
    inputs = []
    for k in range(20):
        inputs += stream(8, 1000.0, start=3.0 * k, seed=k)
    inputs = _renumber(inputs)
    ev = run_leaf(core, inputs, until=90.0)
    times = [t for t, _ in ev.checkpoints]
    assert all(b - a >= IDLE_CHECKPOINT_GAP_S - 1e-9 for a, b in itertools.pairwise(times))
    assert core.durable == {SRC: 159}


def _renumber(inputs):
    """One source's sequence numbers across bursts."""
    out, seq = [], 0
    for t, r in inputs:
        out.append((t, SensorReadings(r.values, SRC, seq)))
        seq += len(r.values)
    return out


def test_a_private_leaf_masks_its_pending_rows_when_idle_then_makes_them_durable() -> None:
    core = leaf(epsilon=1.0, delta=1e-5, clip_norm=10.0, noise_seed=1, mechanism="gaussian")
    inputs = stream(25, 100.0, batch=5)
    ev = run_leaf(core, inputs, until=60.0)
    est = core.estimator
    assert est is not None and est.n_pending_ == 0
    assert core.durable == {SRC: 24} and ev.checkpoints[-1][1] == {SRC: 24}
    assert ev.snapshots[-1][2] == 25


# ----------------------------------------------------------------------- leaf publishing
def test_the_trailing_publish_fires_once_the_stream_pauses() -> None:
    core = leaf(checkpointing=False)
    inputs = stream(25, 100.0, batch=5)
    ev = run_leaf(core, inputs, until=30.0)
    last = inputs[-1][0]
    t, reason, n = ev.snapshots[-1]
    assert n == 25 and reason in ("idle", "moved")  # the tail is in the last snapshot
    assert t <= last + core.idle_s + 0.11


def test_a_stream_that_never_pauses_publishes_within_the_maximum_interval() -> None:
    core = leaf(checkpointing=False)
    inputs = stream(3_000, 100.0)
    ev = run_leaf(core, inputs, until=29.0)
    times = [t for t, _, _ in ev.snapshots]
    gaps = np.diff([0.0, *times, 29.0])
    assert gaps.max() <= core.policy.max_interval_s + 0.02, gaps


def test_readings_that_arrive_during_a_publish_do_not_make_every_slot_a_publish() -> None:
    """A publish takes time (the PUBACK's round trip); readings that arrive meanwhile are
    unpublished since then. They were counted from the change the snapshot had just
    published, so once a stream had run for ``max_interval_s`` every rate-limit slot
    published "max_interval" (seen: 115 snapshots in 20 s at 100 readings/s)."""
    core = leaf(checkpointing=False)
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(D, 2)))[0]
    x = rng.normal(size=(6_000, 2)) * [10.0, 5.0] @ basis.T + 0.01 * rng.normal(size=(6_000, D))
    publish_s = 0.004  # from `make_snapshot` to `snapshot_published`
    ev, seq = Events(), 0

    def deliver(now: float) -> None:
        nonlocal seq
        for block, _, _ in core.accept_labelled(SensorReadings(x[seq : seq + 1], SRC, seq), now):
            core.apply(block, now)
        seq += 1

    for i in range(2_900):  # a reading every 10 ms for 29 s
        now = i / 100.0
        deliver(now)
        reason = core.snapshot_due(now)
        if reason is not None:
            msg = core.make_snapshot(now, reason)
            assert msg is not None
            deliver(now + publish_s / 2)  # arrives before the PUBACK
            core.snapshot_published(msg, now + publish_s)
            ev.snapshots.append((now, reason, msg.n_samples))
    reasons = [reason for _, reason, _ in ev.snapshots]
    assert reasons.count("max_interval") <= 30.0 / core.policy.max_interval_s + 1, reasons
    times = [t for t, _, _ in ev.snapshots]
    assert np.diff([0.0, *times]).max() <= core.policy.max_interval_s + 0.02  # still bounded


def test_confirmations_go_at_most_every_interval_with_a_trailing_one() -> None:
    core = leaf(checkpointing=False)
    inputs = stream(2_000, 100.0, batch=10)
    ev = run_leaf(core, inputs, until=40.0)
    times = [t for t, _ in ev.confirms]
    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(times))
    assert ev.confirms[-1][1] == {SRC: 1999}


def test_a_gap_nobody_fills_is_given_up_at_its_timeout() -> None:
    core = leaf(checkpointing=False)
    x = np.ones((5, D))
    inputs = [(0.0, SensorReadings(x, SRC, 0)), (0.1, SensorReadings(x, SRC, 10))]
    ev = run_leaf(core, inputs, until=30.0)
    assert core.sequencer.gap_rows == 5 and core.n_samples == 10
    assert core.durable == {SRC: 14}
    released = next(t for t, _, n in ev.snapshots if n == 10)
    assert (
        0.1 + core.sequencer.gap_timeout_s <= released <= 0.1 + core.sequencer.gap_timeout_s + 1.2
    )


def test_the_status_heartbeat_fires_with_nothing_else_to_do() -> None:
    core = leaf(checkpointing=False)
    ev = run_leaf(core, [], until=95.0)
    assert ev.statuses == pytest.approx([30.0, 60.0, 90.0])
    assert ev.wakeups <= 5  # slept from one heartbeat to the next


# ----------------------------------------------------------------------- aggregator
def test_the_scores_interval_document_goes_out_when_its_interval_ends() -> None:
    """``score = "interval"``: one document per ``score_interval_s`` while readings are
    scored, each at the end of its interval (the scoring's deadline wakes the leaf), and
    none once nothing is scored."""
    core = leaf(score="interval", score_detector="faults", score_interval_s=5.0, score_warmup=20)
    ev = run_leaf(core, stream(600, 10.0), until=200.0)  # readings for 60 s
    assert 10 <= len(ev.scores) <= 13, ev.scores
    gaps = np.diff(ev.scores)
    assert gaps.min() >= 5.0 - 1e-9 and gaps.max() <= 5.0 + 0.2, gaps
    assert ev.scores[-1] <= 60.0 + 5.0 + 0.2  # then nothing is scored: no more documents


def aggregator(**config: object) -> AggregatorCore:
    cfg = NodeConfig(id="root", parent=None, rank=2, **config)  # type: ignore[arg-type]
    return AggregatorCore(
        cfg,
        ["a", "b"],
        policy=publish_policy_for(cfg, leaf=False),
        status_policy=StatusPolicy(),
        now=0.0,
        rng=random.Random(0),
    )


def snapshots_of(child: str, times: list[float]):
    """Snapshots of ``child`` with growing n_samples, one per time."""
    core = leaf(checkpointing=False)
    core.node_id = child
    core.config = NodeConfig(id=child, parent="root", rank=2, block_size=BLOCK)
    x = np.random.default_rng(len(child)).normal(size=(10 * len(times), D))
    out = []
    for k, t in enumerate(times):
        core.apply(x[10 * k : 10 * k + 10], t)
        msg = core.make_snapshot(t, "moved")
        assert msg is not None
        out.append((t, child, msg))
    return out


def run_aggregator(core: AggregatorCore, arrivals, until: float) -> list[tuple[float, int]]:
    published: list[tuple[float, int]] = []
    now, i, wakeups = 0.0, 0, 0
    while now <= until:
        while i < len(arrivals) and arrivals[i][0] <= now:
            _, child, msg = arrivals[i]
            assert core.receive(child, msg, now) is None
            i += 1
        core.check_staleness(now)  # AggregatorAgent.step
        reason = core.snapshot_due(now)
        if reason is not None:
            msg = core.make_snapshot(now, reason)
            assert msg is not None
            core.snapshot_published(msg, now)
            published.append((now, msg.n_samples))
        if core.status_due(now):
            core.status_sent(now)
        wakeups += 1
        assert wakeups < 10_000
        wake = max(core.next_wakeup(now), now + 1e-3)
        nxt = arrivals[i][0] if i < len(arrivals) else math.inf
        now = min(wake, nxt)
        if math.isinf(now):
            break
    return published


def test_an_aggregator_coalesces_a_burst_and_publishes_a_trailing_merge_covering_it() -> None:
    core = aggregator()
    times = [0.001 * k for k in range(50)]
    arrivals = sorted(snapshots_of("a", times) + snapshots_of("b", times), key=lambda a: a[0])
    published = run_aggregator(core, arrivals, until=5.0)
    gaps = np.diff([t for t, _ in published])
    assert (gaps >= core.policy.min_interval_s - 1e-9).all()
    assert published[-1][1] == 1000  # the last arrival of each child is covered
    assert published[-1][0] <= 0.049 + core.policy.max_interval_s + 0.06


def test_an_arrival_during_an_aggregator_publish_does_not_make_every_slot_a_publish() -> None:
    """The aggregator's form of the leaf's rule above: a child's snapshot that arrives
    between the merge and the PUBACK is unpublished since the merge."""
    core = aggregator()
    times = [0.02 * k for k in range(1_000)]  # each child every 20 ms for 20 s
    arrivals = iter(sorted(snapshots_of("a", times) + snapshots_of("b", times), key=lambda a: a[0]))
    reasons = []
    for t, child, msg in arrivals:
        assert core.receive(child, msg, t) is None
        reason = core.snapshot_due(t)
        if reason is None:
            continue
        out = core.make_snapshot(t, reason)
        assert out is not None
        t2, child2, msg2 = next(arrivals)  # arrives before the PUBACK
        assert core.receive(child2, msg2, t2) is None
        core.snapshot_published(out, t2)
        reasons.append(reason)
    assert reasons.count("max_interval") <= 20.0 / core.policy.max_interval_s + 1, reasons


def test_a_silent_child_is_dropped_when_its_staleness_deadline_comes() -> None:
    core = aggregator(stale_policy="drop", stale_after_s=20.0)
    arrivals = sorted(
        snapshots_of("a", [0.0]) + snapshots_of("b", [0.0, 5.0, 25.0]), key=lambda a: a[0]
    )
    published = run_aggregator(core, arrivals, until=60.0)
    assert [n for t, n in published if t < 20.0][-1] == 30  # a (10) and b (20)
    dropped = [t for t, n in published if n == 20 and t > 5.0]  # b alone: a silent since 0 s
    assert dropped and 20.0 <= dropped[0] <= 20.2


def test_a_status_document_follows_the_end_of_a_stream_without_waiting_for_the_heartbeat() -> None:
    core = leaf()
    inputs = stream(963, 100.0, batch=8)
    ev = run_leaf(core, inputs, until=40.0)
    last = inputs[-1][0]
    durable_at = next(t for t, durable in ev.checkpoints if durable == {SRC: 962})
    after = [t for t in ev.statuses if t >= durable_at]
    assert after and after[0] <= durable_at + 2.0 + 1e-6, (last, durable_at, ev.statuses)


def test_a_sensor_that_sends_every_15_s_checkpoints_about_once_an_interval_not_every_pause() -> (
    None
):
    """A message of 64 readings every 15 s for 6 h: each one is a pause, but the pauses
    spend a bucket of IDLE_CHECKPOINT_BURST refilled one per interval (measured before:
    11,520 fsyncs a day), and the last message is durable soon after the stream ends."""
    core = leaf()
    inputs = _renumber([(15.0 * k, r) for k in range(1440) for _, r in stream(64, 1e4, seed=k % 7)])
    ev = run_leaf(core, inputs, until=15.0 * 1440 + 150.0)
    hours = 6.0
    per_day = len(ev.checkpoints) * 24 / hours
    assert per_day <= 2 * 86_400 / CHECKPOINT_INTERVAL_S, per_day  # <= 1,440 at 120 s
    assert core.durable == {SRC: 64 * 1440 - 1}


def test_a_reason_that_keeps_firing_backs_off_to_a_few_lines_an_hour() -> None:
    """A sensor rejecting a reading every 0.1 s for a day: the reject log's interval doubles
    while the reason keeps firing (up to an hour), so the day costs about a hundred lines
    (25,332 before), and it is back to the first interval after a quiet one."""
    log = RejectLog(3, 10.0)
    lines = 0
    for i in range(864_000):
        t = 0.1 * i
        lines += log.allow("out_of_range", t)[0]
        lines += len(log.due(t))
    assert lines <= 150, lines
    quiet = 86_400.0 + 2 * MAX_REJECT_LOG_INTERVAL_S
    assert [log.allow("out_of_range", quiet + k)[0] for k in range(4)] == [True] * 3 + [False]


def test_blocks_due_asks_for_a_checkpoint_once_the_cadence_of_blocks_is_complete() -> None:
    """With ``checkpoint_every`` the shell checkpoints before it acknowledges the message
    that completed the cadence (`LeafCore.blocks_due`): acknowledged readings not in
    a checkpoint never exceed ``checkpoint_every`` blocks."""
    core = leaf(checkpoint_interval_s=1e9)
    core.durability.checkpoint_every = 2
    x = np.random.default_rng(0).normal(size=(10 * BLOCK, D))
    acked_beyond, now = [], 0.0
    for seq in range(0, len(x), 3):  # messages of 3 readings, blocks of BLOCK
        now += 0.01
        for block, _, _ in core.accept_labelled(SensorReadings(x[seq : seq + 3], SRC, seq), now):
            core.apply(block, now)
        if core.blocks_due():  # LeafAgent.handle: checkpoint, then acknowledge
            _, ingested, n, blocks = core.checkpoint_state()
            core.checkpointed(ingested, n, blocks, now=now)
        acked_beyond.append(core.n_samples - core.durability.checkpointed_n)
    assert max(acked_beyond) < 2 * BLOCK, acked_beyond  # never a whole cadence unsaved
    assert core.durability.checkpoints == 5  # one per 2 blocks of the 10
    assert not core.blocks_due()


def test_the_first_checkpoint_goes_with_the_first_snapshot() -> None:
    """A leaf killed between its first snapshot and its first checkpoint would restart from
    the retained float32 snapshot without its pending rows (the acceptance benchmark saw
    the model move by 6e-3 rad): the first checkpoint is written in the same step."""
    core = leaf()
    inputs = stream(2_000, 100.0)  # never pauses: no pause checkpoint before the interval
    ev = run_leaf(core, inputs, until=15.0)
    first_snapshot = ev.snapshots[0][0]
    assert first_snapshot < 1.0
    assert ev.checkpoints and ev.checkpoints[0][0] == first_snapshot
    assert len(ev.checkpoints) == 1  # then the interval (120 s) again
