"""`Agent.wake_on_input`: input that changes no decision moves the work loop's sleep to the
core's `next_wakeup` instead of running a pass (issue 24); anything else wakes the loop."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.common.shell.agent import MAX_SLEEP_S
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import load_topology
from edge_runtime.wire import SensorReadings

TOPOLOGY = Path(__file__).resolve().parents[1] / "topologies" / "minimal.toml"


def _leaf(monkeypatch: pytest.MonkeyPatch, *, decisive: bool, in_s: float) -> LeafAgent:
    agent = LeafAgent(load_topology(TOPOLOGY), "leaf-1", AgentSettings(), n_features=4)
    monkeypatch.setattr(agent.core, "input_decisive", lambda: decisive)
    monkeypatch.setattr(agent.core, "next_wakeup", lambda now: now + in_s)
    return agent


async def test_input_that_changes_no_decision_moves_the_sleep_to_the_next_wakeup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _leaf(monkeypatch, decisive=False, in_s=0.5)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(0.05) as timeout:
        agent._sleep = (timeout, time.monotonic())
        agent.wake_on_input()
        assert not agent._wake.is_set()
        assert timeout.when() == pytest.approx(loop.time() + 0.5, abs=0.05)
        agent._sleep = None


async def test_the_moved_sleep_ends_at_most_max_sleep_after_it_began(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _leaf(monkeypatch, decisive=False, in_s=60.0)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(0.05) as timeout:
        agent._sleep = (timeout, time.monotonic() - 0.25)
        agent.wake_on_input()
        assert timeout.when() == pytest.approx(loop.time() + MAX_SLEEP_S - 0.25, abs=0.05)
        agent._sleep = None


@pytest.mark.parametrize(("decisive", "in_s"), [(True, 0.5), (False, 0.0), (False, -1.0)])
async def test_decisive_or_due_input_wakes_the_loop_at_once(
    monkeypatch: pytest.MonkeyPatch, decisive: bool, in_s: float
) -> None:
    agent = _leaf(monkeypatch, decisive=decisive, in_s=in_s)
    async with asyncio.timeout(10.0) as timeout:
        agent._sleep = (timeout, time.monotonic())
        agent.wake_on_input()
        assert agent._wake.is_set()
        assert timeout.when() == pytest.approx(asyncio.get_running_loop().time() + 10.0, abs=0.5)
        agent._sleep = None


async def test_input_while_the_loop_runs_or_its_sleep_expires_wakes_it_or_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _leaf(monkeypatch, decisive=False, in_s=0.5)
    agent.wake_on_input()  # not sleeping: a pass is running, it asks again after it
    assert agent._wake.is_set()
    agent._wake.clear()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.0) as timeout:
            agent._sleep = (timeout, time.monotonic())
            try:
                await asyncio.sleep(1.0)
            finally:
                agent.wake_on_input()  # expired, its TimeoutError on the way: no reschedule
                agent._sleep = None
    assert not agent._wake.is_set()


async def test_scores_waiting_for_the_work_loop_make_input_decisive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _leaf(monkeypatch, decisive=False, in_s=0.5)
    assert not agent._input_decisive()
    agent.core.score_outbox.add([b"{}"])
    assert agent._input_decisive()


def test_a_leaf_core_is_decisive_on_a_completed_block_until_its_deadband_judged_it() -> None:
    config = load_topology(TOPOLOGY).nodes["leaf-1"]  # blocks of 20 readings
    core = LeafCore(
        config,
        policy=publish_policy_for(config, leaf=True),
        status_policy=StatusPolicy(),
        confirm_policy=ConfirmPolicy(),
        now=0.0,
        n_features=8,
        rng=random.Random(0),
    )
    rows = np.random.default_rng(0).normal(size=(60, 8))

    def take(start: int, stop: int, now: float) -> None:  # as `LeafAgent._ingest`
        for block, _, _ in core.accept_labelled(SensorReadings(rows[start:stop]), now):
            core.apply(block, now)

    take(0, 20, 1.0)
    assert core.input_decisive()  # the first block: the first snapshot may be due
    assert core.snapshot_due(1.5) == "first"
    msg = core.make_snapshot(1.5, "first")
    assert msg is not None
    core.snapshot_published(msg, 1.5)
    assert not core.input_decisive()
    take(20, 30, 2.0)
    assert not core.input_decisive()  # half a block: only deadlines move (`next_wakeup`)
    take(30, 40, 3.0)
    assert core.input_decisive()  # a completed block: the deadband must judge it
    core.snapshot_due(3.0)
    assert not core.input_decisive()
