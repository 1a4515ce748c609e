"""A leaf whose readings are all rejected does not spin its work loop.

The core is driven on a virtual clock the way the shell drives it (`Agent.work` and
`Agent.wake_on_input`): a tick at each wake-up, the next one at the core's `next_wakeup`
clamped to ``[MIN_SLEEP_S, MAX_SLEEP_S]`` after it; a reading wakes the loop at once only when
the core says it may be decisive, else moves the wake-up to the core's new deadline. A
deadline the core reports but then declines to act on (the publish policy's maximum interval,
while dropped readings wait for a checkpoint) would make this loop wake every
``MIN_SLEEP_S``: hundreds of times a second.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_runtime.agents.common.shell.agent import MAX_SLEEP_S, MIN_SLEEP_S
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.wire import SensorReadings
from tests.test_deadlines import D, Events, leaf, leaf_step

RATE = 20.0  # readings per second, one per message
HOUR = 3600.0
VALID = (0.0, 2000.0)


class Shell:
    """The work loop's wake-ups on a virtual clock (no sleeps, bounded)."""

    def __init__(self, core: LeafCore) -> None:
        self.core, self.ev = core, Events()
        self.wake, self.slept, self.steps = 0.0, 0.0, 0
        self.seq = 0

    def step(self, now: float) -> None:
        wake = leaf_step(self.core, now, self.ev)
        self.steps += 1
        self.slept = now
        self.wake = now + min(max(wake - now, MIN_SLEEP_S), MAX_SLEEP_S)

    def reading(self, now: float, values: np.ndarray) -> None:
        core = self.core
        core.ingest(core.accept_labelled(SensorReadings(values, "s", self.seq), now), now)
        self.seq += values.shape[0]
        decisive = core.input_decisive()
        when = now if decisive else min(core.next_wakeup(now), self.slept + MAX_SLEEP_S)
        self.wake = now if when <= now + MIN_SLEEP_S else when

    def run(self, start: float, end: float, offset: float, seed: int) -> None:
        """Readings at `RATE` from ``start`` to ``end``, each ``offset`` plus noise."""
        rng = np.random.default_rng(seed)
        t_read = start + 0.5 / RATE
        limit = int((end - start) * RATE) * 4 + 10_000
        for _ in range(limit):  # bounded
            if t_read <= self.wake:
                if t_read >= end:
                    return
                self.reading(t_read, rng.normal(size=(1, D)) + offset)
                t_read += 1.0 / RATE
            elif self.wake >= end:
                return
            else:
                self.step(self.wake)
        raise AssertionError(f"{limit} passes and events did not reach t={end}: the loop spins")


@pytest.mark.parametrize("checkpointing", [True, False])
@pytest.mark.parametrize("accepted_first", [True, False])
def test_an_hour_of_rejected_readings_wakes_the_leaf_about_once_a_second(
    checkpointing: bool, accepted_first: bool
) -> None:
    core = leaf(valid_range=VALID, checkpointing=checkpointing)
    shell = Shell(core)
    start = 0.0
    if accepted_first:  # a leaf that has published, as on the day before the rejecting one
        shell.run(0.0, 60.0, offset=1000.0, seed=1)
        assert shell.ev.snapshots
        start = 60.0
    before = shell.steps
    rejected0 = core.rejects["out_of_range"]
    shell.run(start, start + HOUR, offset=5000.0, seed=2)  # every reading above the range
    assert core.rejects["out_of_range"] - rejected0 == int(HOUR * RATE)
    steps = shell.steps - before
    # The loop sleeps at most MAX_SLEEP_S (1 s); a few more passes for status documents,
    # confirmations and checkpoints. A spinning loop makes hundreds a second.
    assert steps <= 2.0 * HOUR / MAX_SLEEP_S, steps


def test_rejected_readings_still_become_durable_with_a_checkpoint() -> None:
    core = leaf(valid_range=VALID, checkpointing=True)
    shell = Shell(core)
    shell.run(0.0, 60.0, offset=1000.0, seed=1)
    shell.run(60.0, 60.0 + 600.0, offset=5000.0, seed=2)
    last = shell.seq - 1
    # After the stream stops, the leaf's deadlines carry the rest (bounded idle time).
    end = 60.0 + 600.0 + 300.0
    for _ in range(10_000):
        if shell.wake >= end or math.isinf(shell.wake):
            break
        shell.step(shell.wake)
    assert core.durable["s"] == last
    assert shell.ev.checkpoints and shell.ev.checkpoints[-1][1]["s"] == last
    assert shell.ev.confirms[-1][1]["s"] == last


def test_a_private_leaf_with_pending_rows_does_not_spin_while_its_readings_are_rejected() -> None:
    core = leaf(
        valid_range=VALID, epsilon=1.0, delta=1e-5, clip_norm=10.0, noise_seed=1,
        mechanism="gaussian",
    )
    shell = Shell(core)
    shell.run(0.0, 60.0, offset=1000.0, seed=1)
    shell.run(60.0, 60.0 + 5.0 / RATE, offset=1000.0, seed=3)  # half a block, pending
    est = core.estimator
    assert est is not None and est.n_pending_ > 0
    before = shell.steps
    start = 60.0 + 5.0 / RATE
    shell.run(start, start + HOUR, offset=5000.0, seed=2)
    assert shell.steps - before <= 2.0 * HOUR / MAX_SLEEP_S, shell.steps - before
    # Once the rejected stream stops, the pending rows are masked, published, made durable.
    end = start + HOUR + 300.0
    for _ in range(10_000):
        if shell.wake >= end or math.isinf(shell.wake):
            break
        shell.step(shell.wake)
    assert est.n_pending_ == 0
    assert core.durable["s"] == shell.seq - 1
