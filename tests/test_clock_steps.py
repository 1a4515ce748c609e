"""Wall-clock steps (issue 21, item 6): what NTP does at boot on a Pi without a real-time clock.

A Raspberry Pi has no battery-backed clock: it boots at 1970 (or at the time
``fake-hwclock`` saved, up to an hour behind), and NTP then steps the wall clock by hours or
decades. Every deadline of the runtime runs on ``time.monotonic()`` (the cores take ``now`` as
an argument; the shells pass ``time.monotonic()``), and the wall clock (``time.time()``) is
only the ``timestamp`` of snapshots, scores documents and FedPower rounds. These tests step
the wall clock by +1 h, -1 h and from 1970 to now, and check that nothing stalls, is reordered
or rejected:

- the leaf and the aggregator cores on a virtual monotonic clock, the wall clock given to
  ``make_snapshot`` stepped mid-stream: every decision is the same as without the step;
- a leaf restarted from its checkpoint after the clock stepped back (it continues under a new
  epoch when its retained snapshot covers more than the checkpoint,
  `LeafCore.continue_after`), and a restarted aggregator (a new epoch at every start):
  their parent must take the new epoch's snapshots (`is_newer` compares no wall clock: a
  new epoch wins unless a later one already replaced it; before, it ordered epochs by
  ``timestamp`` and ignored the new one until the clock passed the old one's);
- replay, leaves with state directories and aggregators as real agents against a real
  Mosquitto, with ``time.time`` stepped while the replay runs: every reading confirmed
  durable, the root's model covers them all, nothing rejected.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy
from edge_runtime.agents.common.shell.core_shell import status_policy_of
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import FPCAEdge
from edge_runtime.monitor import ModelWatcher
from edge_runtime.replay import Replayer
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import SensorReadings, SubspaceMessage
from tests.helpers import low_rank_data, tree_topology

NOW = 1.78e9  # wall clock after NTP, seconds since the Unix epoch
HOUR = 3600.0
STEPS = {  # wall clock before the step -> after it
    "+1h": (NOW, NOW + HOUR),
    "-1h": (NOW, NOW - HOUR),
    "1970->now": (1.0, NOW),  # booted at the epoch, then NTP
}
MIN_SLEEP_S, MAX_SLEEP_S = 0.002, 1.0  # the shell's clamp of a sleep (agents/common/shell/agent.py)
RATE = 20.0  # readings/s
BATCH = 4


# ------------------------------------------------------------------ core driver
class Wall:
    """A wall clock that runs with the virtual monotonic clock and steps once."""

    def __init__(self, before: float, after: float, at: float) -> None:
        self.before, self.after, self.at = before, after, at

    def __call__(self, now: float) -> float:
        return (self.before if now < self.at else self.after - self.at) + now


def leaf_core(topology: Topology, node: str, now: float) -> LeafCore:
    """A checkpointing leaf core, as `LeafAgent` builds it with a state directory."""
    s = AgentSettings()
    cfg = topology.nodes[node]
    return LeafCore(
        cfg,
        policy=publish_policy_for(cfg, leaf=True),
        status_policy=status_policy_of(s),
        confirm_policy=ConfirmPolicy(s.confirm_interval_s),
        now=now,
        checkpointing=True,
        echo_timeout_s=s.echo_timeout_s,
        rng=random.Random(f"{node}@{now}"),  # a restart draws other ids
    )


def aggregator_core(topology: Topology, node: str, now: float) -> AggregatorCore:
    """An aggregator core, as `AggregatorAgent` builds it."""
    s = AgentSettings()
    cfg = topology.nodes[node]
    return AggregatorCore(
        cfg,
        topology.children(node),
        policy=publish_policy_for(cfg, leaf=False),
        status_policy=status_policy_of(s),
        now=now,
        echo_timeout_s=s.echo_timeout_s,
        deployment=topology.name,
        rng=random.Random(f"{node}@{now}"),  # a restart draws another epoch
    )


class Tree:
    """One leaf under one aggregator, stepped as their shells step them (virtual clock)."""

    def __init__(self, topology: Topology, leaf: LeafCore, agg: AggregatorCore, wall: Wall):
        self.topology, self.leaf, self.agg, self.wall = topology, leaf, agg, wall
        self.now = 0.0
        self.refused: list[str] = []  # the aggregator's non-None receive results
        self.published: list[SubspaceMessage] = []  # the leaf's snapshots, in order
        self.agg_published: list[SubspaceMessage] = []
        self.checkpoint: tuple[dict, dict, int, int] | None = None
        self.confirmed: dict[str, int] = {}
        self.longest_sleep = 0.0

    def step_leaf(self) -> None:
        core, now = self.leaf, self.now
        for block in core.expire(now):
            core.apply(block, now)
        reason = core.snapshot_due(now)
        if reason is not None:
            msg = core.make_snapshot(self.wall(now), reason)
            assert msg is not None
            core.snapshot_published(msg, now)
            self.published.append(msg)
            result = self.agg.receive(msg.node_id, msg, now)
            if result is not None:
                self.refused.append(result)
            self.step_agg()
        if core.checkpoint_due(now):
            self.checkpoint = core.checkpoint_state()
            _state, ingested, n, blocks = self.checkpoint
            core.checkpointed(ingested, n, blocks, now=now)
        confirm = core.confirm_due(now)
        if confirm is not None:
            self.confirmed = dict(confirm.durable)
            core.confirm_sent(now)
        if core.status_due(now):
            core.status_sent(now)

    def step_agg(self) -> None:
        core, now = self.agg, self.now
        reason = core.snapshot_due(now)
        if reason is not None:
            msg = core.make_snapshot(self.wall(now), reason)
            assert msg is not None
            core.snapshot_published(msg, now)
            self.agg_published.append(msg)

    def sleep(self, core: LeafCore | AggregatorCore) -> float:
        delay = core.next_wakeup(self.now) - self.now
        return self.now + min(max(delay, MIN_SLEEP_S), MAX_SLEEP_S)

    def run(self, data: np.ndarray, source: str, first_seq: int, until: float) -> None:
        """Feed ``data`` at `RATE` in batches of `BATCH`, then idle until ``until``."""
        t_read = self.now + BATCH / RATE
        row = 0
        wake_leaf = wake_agg = self.now
        while True:
            t_next = min(wake_leaf, wake_agg)
            if row < len(data) and t_read <= t_next:
                self.now = t_read
                values = data[row : row + BATCH]
                readings = SensorReadings(values, source, first_seq + row)
                for block in self.leaf.accept(readings, self.now):
                    self.leaf.apply(block, self.now)
                row += len(values)
                t_read += BATCH / RATE
                self.step_leaf()
                wake_leaf = self.sleep(self.leaf)
                continue
            if t_next >= until:
                self.now = until
                return
            self.now = t_next
            if wake_leaf <= wake_agg:
                self.step_leaf()
                wake_leaf = self.sleep(self.leaf)
            else:
                self.step_agg()
                wake_agg = self.sleep(self.agg)
            self.longest_sleep = max(self.longest_sleep, min(wake_leaf, wake_agg) - self.now)


def summary(tree: Tree) -> dict[str, object]:
    """What the leaf and the aggregator did, without the wall-clock timestamps."""
    leaf, agg = tree.leaf, tree.agg
    return {
        "leaf_seqs": [m.seq for m in tree.published],
        "leaf_n": [m.n_samples for m in tree.published],
        "leaf_decisions": dict(leaf.decisions),
        "checkpoints": leaf.durability.checkpoints,
        "durable": dict(leaf.durable),
        "confirmed": dict(tree.confirmed),
        "agg_n": [m.n_samples for m in tree.agg_published],
        "agg_decisions": dict(agg.decisions),
        "rejects": dict(leaf.rejects) | {f"agg:{k}": v for k, v in agg.rejects.items()},
        "refused": list(tree.refused),
    }


def run_tree(wall: Wall, n: int = 400) -> Tree:
    topology = tree_topology(sites=1, leaves_per_site=2)
    leaf = leaf_core(topology, "leaf-0-0", 0.0)
    agg = aggregator_core(topology, "site-0", 0.0)
    tree = Tree(topology, leaf, agg, wall)
    tree.run(low_rank_data(n, 8, 3, seed=5), "sensor", 0, until=n / RATE + 120.0)
    return tree


# ------------------------------------------------------------------ core tests
@pytest.mark.parametrize("step", list(STEPS))
def test_leaf_and_aggregator_cores_do_the_same_through_a_wall_clock_step(step):
    """Stepped mid-stream, the wall clock changes only the timestamps: the same snapshots,
    checkpoints, confirmations and merges as with a clock that never steps, every reading
    durable and confirmed, nothing rejected, and no core sleeping longer than the shell's
    clamp (no stall)."""
    before, after = STEPS[step]
    n = 200
    stepped = run_tree(Wall(before, after, at=n / RATE / 2), n)
    steady = run_tree(Wall(NOW, NOW, at=math.inf), n)
    assert summary(stepped) == summary(steady)
    s = summary(stepped)
    assert s["durable"] == s["confirmed"] == {"sensor": n - 1}
    assert s["rejects"] == {} and s["refused"] == []
    assert s["agg_n"][-1] == n and s["leaf_n"][-1] == n
    assert s["leaf_seqs"] == list(range(1, len(s["leaf_seqs"]) + 1))
    assert stepped.longest_sleep <= MAX_SLEEP_S + 1e-9
    stamps = [m.timestamp for m in stepped.published]
    assert max(stamps) - min(stamps) > HOUR / 2  # the step shows in the timestamps


def _restarted_leaf(wall_after: float) -> tuple[Tree, Tree]:
    """A leaf that checkpointed, published more, crashed and restarted from its checkpoint
    (`LeafCore.restore_checkpoint`, then `continue_after` its retained snapshot: a new
    epoch, as the retained snapshot covers more samples), its wall clock now
    ``wall_after`` at the restart; the same aggregator core throughout."""
    topology = tree_topology(sites=1, leaves_per_site=2)
    data = low_rank_data(600, 8, 3, seed=7)
    first = Tree(
        topology,
        leaf_core(topology, "leaf-0-0", 0.0),
        aggregator_core(topology, "site-0", 0.0),
        Wall(NOW, NOW, at=math.inf),
    )
    # readings, a pause (the idle checkpoint), more readings and their idle publish: the
    # crash comes before the next checkpoint (due 10 s after the last), so the retained
    # snapshot covers more than the checkpoint
    first.run(data[:200], "sensor", 0, until=200 / RATE + 1.0)
    checkpoints = first.leaf.durability.checkpoints  # with the first snapshot, and after the pause
    assert checkpoints >= 1
    first.run(data[200:260], "sensor", 200, until=first.now + 60 / RATE + 2.0)
    assert first.leaf.durability.checkpoints == checkpoints and first.checkpoint is not None
    state, _, _, _ = first.checkpoint
    retained = first.published[-1]
    assert retained.n_samples > first.leaf.durability.checkpointed_n
    t0 = first.now + 30.0  # down for 30 s
    leaf = leaf_core(topology, "leaf-0-0", t0)
    leaf.restore_checkpoint(dict(state), FPCAEdge.from_state(dict(state)), t0)
    leaf.continue_after(retained)
    assert leaf.epoch != retained.epoch  # a lineage that forgot some samples
    second = Tree(topology, leaf, first.agg, Wall(wall_after, wall_after, at=math.inf))
    second.now = t0
    wall_at_restart = first.wall(first.now)
    second.wall = Wall(wall_after - t0, wall_after - t0, at=math.inf)
    resume = leaf.durable["sensor"] + 1
    second.run(data[resume:], "sensor", resume, until=t0 + (600 - resume) / RATE + 120.0)
    assert wall_at_restart == pytest.approx(NOW + first.now)
    return first, second


def test_a_leaf_restarted_with_its_clock_ahead_is_taken_by_its_aggregator():
    _, second = _restarted_leaf(NOW + HOUR)
    assert second.refused == []
    assert second.agg.children["leaf-0-0"].snapshot.epoch == second.leaf.epoch
    assert second.agg_published[-1].provenance["leaf-0-0"] == 600


@pytest.mark.parametrize("wall_after", [NOW - HOUR, 1.0], ids=["-1h", "1970"])
def test_a_leaf_restarted_after_its_clock_stepped_back_is_taken_by_its_aggregator(wall_after):
    """A Pi rebooted after a power cut, its clock restored an hour behind by fake-hwclock or
    at 1970 before NTP: the restarted leaf's snapshots (a new epoch) must reach the merge."""
    _, second = _restarted_leaf(wall_after)
    assert second.refused == []
    assert second.agg.children["leaf-0-0"].snapshot.epoch == second.leaf.epoch
    assert second.agg_published[-1].provenance["leaf-0-0"] == 600


@pytest.mark.parametrize("wall_after", [NOW - HOUR, 1.0], ids=["-1h", "1970"])
def test_a_restarted_aggregator_with_its_clock_stepped_back_is_taken_by_its_parent(wall_after):
    topology = tree_topology(sites=1, leaves_per_site=2)
    first = run_tree(Wall(NOW, NOW, at=math.inf))
    root = aggregator_core(topology, "root", 0.0)
    old = first.agg_published[-1]
    assert root.receive("site-0", old, first.now) is None
    # the site restarts with a new epoch and rebuilds from its children's retained snapshots
    t = first.now + 10.0
    site = aggregator_core(topology, "site-0", t)
    assert site.receive("leaf-0-0", first.published[-1], t) is None
    assert site.snapshot_due(t) is not None
    new = site.make_snapshot(wall_after, "first")
    assert new is not None and new.epoch != old.epoch
    assert root.receive("site-0", new, t) is None
    assert root.children["site-0"].snapshot.epoch == new.epoch


def test_an_aggregator_takes_one_epoch_in_seq_order_whatever_the_timestamps():
    """Within one epoch only ``seq`` orders snapshots: timestamps stepped back or to 1970
    change nothing, and a late, older ``seq`` stays a duplicate."""
    tree = run_tree(Wall(NOW, NOW, at=math.inf))
    msgs = tree.published
    topology = tree.topology
    agg = aggregator_core(topology, "site-0", 0.0)
    stamps = [NOW, NOW - HOUR, 1.0, NOW + HOUR, 2.0]
    from dataclasses import replace

    for i, msg in enumerate(msgs):
        assert agg.receive(msg.node_id, replace(msg, timestamp=stamps[i % 5]), float(i)) is None
    assert agg.receive(msgs[0].node_id, msgs[-2], 1e6) == "duplicate"
    assert agg.children["leaf-0-0"].snapshot.seq == msgs[-1].seq


# ------------------------------------------------------------- replay, processes' code
class SteppedTime:
    """``time.time`` replaced: ``offset`` seconds off the real clock, changed mid-run."""

    def __init__(self, offset: float) -> None:
        self.offset = offset
        self._real = time.time

    def __call__(self) -> float:
        return self._real() + self.offset


@pytest.mark.mqtt
@pytest.mark.parametrize("step", list(STEPS))
async def test_replay_leaves_and_aggregators_through_a_wall_clock_step(
    step, mosquitto, tmp_path: Path, monkeypatch
):
    """Real agents (leaves with state directories, as the systemd unit runs them) and a real
    replay at a rate, while ``time.time`` steps: every reading confirmed durable, the root's
    model covers them all, no reject anywhere, and the replay takes no longer than without
    a step would (no stall: bounded by its rate plus the leaves' idle checkpoint)."""
    before, after = STEPS[step]
    clock = SteppedTime(before - time.time())
    monkeypatch.setattr(time, "time", clock)
    topology = tree_topology(sites=1, leaves_per_site=2)
    assert mosquitto.port is not None
    settings = AgentSettings(
        host=mosquitto.host,
        port=mosquitto.port,
        timeout_s=3.0,
        reconnect_min_s=0.05,
        reconnect_max_s=0.5,
    )
    data = low_rank_data(600, 8, 3, seed=11)
    agents = [
        LeafAgent(topology, leaf, settings, state_dir=tmp_path / leaf, restore_from_broker=False)
        for leaf in topology.leaves()
    ] + [AggregatorAgent(topology, node, settings) for node in ("site-0", "root")]
    for leaf in topology.leaves():
        (tmp_path / leaf).mkdir()

    async def step_later() -> None:
        await asyncio.sleep(1.0)
        clock.offset = after - clock._real()

    started = time.monotonic()
    async with contextlib_async(agents):
        stepper = asyncio.create_task(step_later())
        stats = await Replayer(topology, data, settings, rate=300.0, confirm_timeout_s=30).run()
        await stepper
        async with ModelWatcher(topology, settings) as watcher:
            model = await watcher.wait_until(
                lambda m: m is not None and m.n_samples == len(data), 20.0
            )
        rejects = {a.node_id: dict(a.rejects) for a in agents if a.rejects}
    elapsed = time.monotonic() - started
    assert (stats.rows, stats.confirmed, stats.rejected, dict(stats.unconfirmed)) == (
        600,
        600,
        0,
        {},
    )
    assert stats.resent == 0
    assert model is not None and model.n_samples == 600
    assert rejects == {}
    # 2 s of sending at 300/s, then the idle checkpoint within max(idle_s, 10 s)
    assert elapsed < 2.0 + 10.0 + 15.0
    if step != "+1h":
        assert model.timestamp > after - 60.0  # the model was stamped after the step


class contextlib_async:  # noqa: N801 - a small async context manager over several agents
    def __init__(self, agents: list) -> None:
        self.agents = agents

    async def __aenter__(self) -> None:
        for agent in self.agents:
            await agent.__aenter__()
        for agent in self.agents:
            await agent.wait_connected(10.0)

    async def __aexit__(self, *exc: object) -> None:
        for agent in reversed(self.agents):
            await agent.aclose()


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
