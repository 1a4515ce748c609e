"""A leaf's tick is written once (`LeafCore.step`, `TICKS`): the asyncio shell and the fleet
simulation carry out the same actions, in the same order, for the same trace."""

from __future__ import annotations

import math
import random
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

from edge_runtime.agents.common.core.actions import Publish, Wake, WriteCheckpoint, describe
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.core.tick import MAX_TICK_CALLS, TICKS
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.settings import AgentSettings
from edge_runtime.simulation.config import Feed, SimulationConfig
from edge_runtime.simulation.engine import Simulation
from edge_runtime.simulation.fleet import balanced_topology
from edge_runtime.simulation.fleet import low_rank_data as sim_data
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import SensorReadings

D, RANK, BLOCK = 6, 2, 20


class VirtualClock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _simulation(*, checkpoint_every: int | None) -> Simulation:
    """Two leaves, no faults: the broker of the shell's side is the test's own."""
    topology = balanced_topology(2, 2, rank=RANK, block_size=BLOCK)
    data = sim_data(2 * 130, D, RANK, seed=4)
    config = SimulationConfig(
        seed=5,
        feed=Feed(batch_size=7, interval_s=0.5),
        settings=AgentSettings(echo_timeout_s=0.0),
        checkpoint_every=checkpoint_every,
        checkpoint_interval_s=20.0,
    )
    return Simulation(topology, data, config, record=True)


@pytest.mark.mqtt
@pytest.mark.parametrize("checkpoint_every", [None, 2])
async def test_the_shell_and_the_simulation_carry_out_the_same_actions_for_one_trace(
    mosquitto, tmp_path: Path, checkpoint_every: int | None
) -> None:
    """A simulated leaf's recorded inputs (readings and ticks, with their virtual times),
    fed to a `LeafAgent` on a virtual clock against a real broker and disk, make it carry
    out the same actions, in the same order (`describe`: kind, topic, reason, seq)."""
    sim = _simulation(checkpoint_every=checkpoint_every)
    result = sim.run()
    assert result.finished
    assert sim.trace is not None and sim.recorded is not None
    leaf_id = sim.topology.leaves()[0]
    trace, expected = sim.trace[leaf_id], sim.recorded[leaf_id]
    kinds = {describe(a)[:2] for a in expected}
    assert {("publish", "subspace"), ("publish", "confirm"), ("checkpoint", "checkpoint")} <= kinds

    clock = VirtualClock()
    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, echo_timeout_s=0.0, timeout_s=5.0
    )
    agent = LeafAgent(
        sim.topology,
        leaf_id,
        settings,
        n_features=D,
        state_dir=tmp_path,
        checkpoint_every=checkpoint_every,
        checkpoint_interval_s=20.0,
        restore_from_broker=False,
        clock=clock,
    )
    core = agent.core
    done = []
    async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
        for t, kind, payload in trace:  # bounded: the recorded trace
            clock.now = t
            if kind == "readings":
                assert isinstance(payload, SensorReadings)
                await agent._ingest(
                    lambda now, r=payload: core.accept_labelled(r, now), payload.source
                )
            elif payload == "connect":
                core.connected()
                done += await agent.carry_out(client, t, "connect")
            else:
                done += await agent.carry_out(client, t, "work")
    assert [describe(a) for a in done] == [describe(a) for a in expected]
    assert (tmp_path / f"{leaf_id}.ckpt").exists()


# ------------------------------------------------------------------ the core's tick alone
def leaf(**config: object) -> LeafCore:
    checkpointing = bool(config.pop("checkpointing", True))
    cfg = NodeConfig(id="leaf", parent="root", rank=RANK, block_size=BLOCK, **config)  # type: ignore[arg-type]
    return LeafCore(
        cfg,
        policy=publish_policy_for(cfg, leaf=True),
        status_policy=StatusPolicy(),
        confirm_policy=ConfirmPolicy(),
        now=0.0,
        n_features=D,
        checkpointing=checkpointing,
        checkpoint_interval_s=60.0,
        rng=random.Random(0),
    )


def tick(core: LeafCore, now: float, name: str = "work") -> list[tuple[object, ...]]:
    """Carry out one tick as an executor does (outcomes at ``now``); its descriptions."""
    out = []
    for _ in range(MAX_TICK_CALLS):
        actions = core.step(now, timestamp=1e9 + now, tick=name)
        core.take_released()
        for action in actions:
            if isinstance(action, WriteCheckpoint):
                core.checkpoint_written(action, now)
            elif isinstance(action, Publish):
                core.published(action, now)
        out += [describe(a) for a in actions]
        if actions and isinstance(actions[-1], Wake):
            return out
    raise AssertionError(f"the tick never ended: {out}")


def feed(core: LeafCore, rows: np.ndarray, first_seq: int, now: float) -> None:
    core.ingest(core.accept_labelled(SensorReadings(rows, "s", first_seq), now), now)


def test_every_tick_ends_with_the_time_to_wake() -> None:
    core = leaf()
    for name in TICKS:
        out = tick(core, 0.0, name)
        assert out[-1][0] == "wake"
        assert out[-1][1] == round(core.next_wakeup(0.0), 6) or math.isinf(core.next_wakeup(0.0))


def test_a_due_checkpoint_goes_before_the_snapshot_and_the_confirmation_after_both() -> None:
    """The device's order: the checkpoint is written before the snapshot's publish (whose
    PUBACK wait would let later readings be acknowledged), the confirmation follows both."""
    core = leaf()
    rows = np.random.default_rng(0).normal(size=(3 * BLOCK, D))
    feed(core, rows[:BLOCK], 0, 1.0)
    out = tick(core, 1.5)  # the first block: the first snapshot, and its first checkpoint
    kinds = [d[:2] for d in out]
    assert kinds.index(("publish", "subspace")) < kinds.index(("checkpoint", "checkpoint"))
    feed(core, rows[BLOCK:], BLOCK, 2.0)
    out = tick(core, 200.0)  # idle, past the interval: checkpoint due, then the idle publish
    kinds = [d[:2] for d in out]
    assert kinds[:3] == [
        ("checkpoint", "checkpoint"),
        ("publish", "subspace"),
        ("publish", "confirm"),
    ], out


def test_a_failed_checkpoint_is_retried_by_its_rules_not_in_the_same_tick() -> None:
    core = leaf()
    rows = np.random.default_rng(1).normal(size=(2 * BLOCK, D))
    feed(core, rows[:BLOCK], 0, 1.0)
    tick(core, 1.5)  # the first snapshot and checkpoint
    feed(core, rows[BLOCK:], BLOCK, 2.0)
    actions = core.step(300.0, timestamp=0.0)  # idle and past the interval: due first
    assert isinstance(actions[-1], WriteCheckpoint), actions
    assert core.checkpoint_failed(300.0) == 1  # the disk refused it
    rest: list[object] = []
    for _ in range(MAX_TICK_CALLS):
        actions = core.step(300.0, timestamp=0.0)
        for a in actions:
            if isinstance(a, Publish):
                core.published(a, 300.0)
        rest += actions
        if actions and isinstance(actions[-1], Wake):
            break
    assert not any(isinstance(a, WriteCheckpoint) for a in rest)
    last = rest[-1]
    assert isinstance(last, Wake) and last.at > 300.0


def test_a_gap_released_by_its_timeout_is_handed_to_the_caller_before_the_tick_goes_on() -> None:
    core = leaf(checkpointing=False)
    rows = np.random.default_rng(2).normal(size=(10, D))
    feed(core, rows[5:], 5, 0.0)  # seq 0..4 missing: held
    assert core.sequencer.held_rows == 5
    assert core.step(30.0, timestamp=0.0) == []  # released and applied: the caller's turn
    released = core.take_released()
    assert [(len(block), src, seq, err) for block, src, seq, err in released] == [
        (5, "s", 5, None)
    ]
    assert core.sequencer.gap_rows == 5
    assert tick(core, 30.0)[-1][0] == "wake"


def test_a_local_only_leaf_never_publishes_a_snapshot_even_on_shutdown() -> None:
    core = leaf(checkpointing=False)
    core.local_only = True
    feed(core, np.random.default_rng(3).normal(size=(3 * BLOCK, D)), 0, 1.0)
    out = tick(core, 500.0) + tick(core, 501.0, "final")
    assert not any(d[:2] == ("publish", "subspace") for d in out)
    assert math.isinf(core.unpublished_since)


def test_the_connect_tick_publishes_the_last_snapshot_again_and_a_forced_confirmation() -> None:
    core = leaf(checkpointing=False)
    feed(core, np.random.default_rng(4).normal(size=(BLOCK, D)), 0, 1.0)
    tick(core, 1.5)
    seq = core.seq
    assert seq == 1
    core.connected()
    core.connected()  # a reconnection: the confirmation changes
    out = tick(core, 2.0, "connect")
    assert out[0] == ("publish", "subspace", True, "reconnect", ("leaf", seq))
    assert out[1][:4] == ("publish", "confirm", True, "forced")
    assert core.seq == seq  # the same snapshot, not a new one
