"""One step, as actions: an aggregator's tick is decided once, by its core.

`AggregatorCore.step(now, wall)` returns what happens at ``now`` in order (a site's running
sum written, its slot's messages, the merge, the root's model, the status document, the next
wake-up); the shell's executor (`AggregatorAgent.carry_out`) carries them out against MQTT
and the disk, the simulation's (`edge_runtime.simulation.executor.carry_out`, which the
fleet simulation runs every aggregator's step through) against its virtual broker and
state directories. The same recorded trace (child snapshots and a secure-aggregation site's
leaf messages, with their times) fed to both gives the same sequence of actions
(`describe`) and the same publishes, topic by topic, for an aggregator and for a
secure-aggregation site (slots skipped, and a slot released by real leaves,
`SecAggRelease`, recorded once). The shell's client is a stand-in that records what the
agent publishes (no broker: the executor's publishes are what is compared), its state file
is written to a real directory; the simulation's side records the same of its node
(`VirtualNode`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.common.core.actions import (
    Action,
    Publish,
    Wake,
    WriteCheckpoint,
    describe,
)
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import StatusPolicy
from edge_runtime.fpca import Subspace
from edge_runtime.settings import AgentSettings
from edge_runtime.simulation.executor import carry_out
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import SubspaceMessage

D = 4
WALL = 1.7e9  # the wall clock's origin: seconds since the Unix epoch
SETTINGS = AgentSettings(echo_timeout_s=0.0)  # no echo check: no real clock in the trace

Trace = list[tuple[float, Callable[[AggregatorCore, float], object]]]


class RecordingClient:
    """What the agent uses of an ``aiomqtt.Client``: `publish`, recorded."""

    def __init__(self) -> None:
        self.topics: list[str] = []

    async def publish(self, topic: str, payload: bytes, **kwargs: Any) -> None:
        assert isinstance(payload, bytes)
        self.topics.append(topic)


def snapshot(child: str, seq: int, rng: np.random.Generator) -> SubspaceMessage:
    """A plausible snapshot of ``child``: rank 2, ``10 seq`` samples."""
    basis, _ = np.linalg.qr(rng.normal(size=(D, 2)))
    return SubspaceMessage(
        node_id=child,
        epoch=f"{child}-epoch",
        seq=seq,
        subspace=Subspace(basis, np.array([3.0, 1.0]) * np.sqrt(seq), 10 * seq),
        timestamp=WALL + seq,
    )


def snapshots(children: list[str], times: list[float]) -> Trace:
    """Each child's snapshots at ``times`` (seq 1, 2, ...)."""
    rng = np.random.default_rng(5)
    trace: Trace = []
    for child in children:
        for seq, t in enumerate(times, start=1):
            msg = snapshot(child, seq, rng)
            trace.append((t, lambda core, now, c=child, m=msg: core.receive(c, m, now)))
    return sorted(trace, key=lambda event: event[0])


def virtual_core(agent: AggregatorAgent) -> AggregatorCore:
    """The agent's core on the virtual clock (its start at 0 s, seeded ids), holding the
    agent's release strategy. The simulation's side makes its core here too, for the same
    configuration and strategy; that agent's own executor is never called."""
    config = agent.config
    core = AggregatorCore(
        config,
        agent.topology.children(agent.node_id),
        policy=publish_policy_for(config, leaf=False),
        status_policy=StatusPolicy(),
        now=0.0,
        echo_timeout_s=0.0,
        deployment=agent.topology.name,
        rng=random.Random(3),
        release=agent.release_shell.release,
    )
    agent._core = core  # the shell's executor reports to this core
    return core


def step_times(until: float) -> list[float]:
    """The steps' times, every 0.25 s; a trace's events at ``t`` arrive after the step at
    ``t`` (before the next)."""
    return [round(0.25 * k, 6) for k in range(int(until / 0.25) + 1)]


class VirtualNode:
    """The simulation's virtual broker and state directory as one node sees them
    (`edge_runtime.simulation.executor.VirtualIO`): the topic of each publish, in order,
    the retained messages by topic and the last state of each file."""

    def __init__(self, topology: Topology, node_id: str) -> None:
        self.topology = topology
        self.node_id = node_id
        self.topics: list[str] = []
        self.retained: dict[str, object] = {}
        self.files: dict[str, object] = {}

    def topic(self, kind: str) -> str:
        """Where the shell publishes ``kind`` (`AggregatorAgent.carry_out`)."""
        topo, node = self.topology, self.node_id
        special = {
            "subspace": topo.subspace_topic(node),
            "model": topo.model_topic(),
            "status": topo.status_detail_topic(node),
        }
        return special.get(kind) or topo.secagg_topic(node, kind)

    def publish(self, node: str, action: Publish) -> None:
        assert node == self.node_id
        topic = self.topic(action.kind)
        self.topics.append(topic)
        if action.retain:
            self.retained[topic] = action.message

    def write(self, node: str, action: WriteCheckpoint) -> None:
        assert node == self.node_id
        self.files[action.what] = action.state


def run_simulated(
    core: AggregatorCore, broker: VirtualNode, trace: Trace, until: float
) -> list[tuple[object, ...]]:
    """The simulation's executor (`carry_out`), on the virtual clock: what it did."""
    done: list[tuple[object, ...]] = []
    events = iter(trace)
    pending = next(events, None)
    for now in step_times(until):
        actions: list[Action] = core.step(now, WALL + now)
        done += [describe(a) for a in carry_out(broker, broker.node_id, core, actions, now)]
        while pending is not None and pending[0] <= now:  # arrivals until the next step
            pending[1](core, now)
            pending = next(events, None)
    return done


async def run_shell(
    agent: AggregatorAgent, core: AggregatorCore, trace: Trace, until: float
) -> tuple[list[tuple[object, ...]], RecordingClient]:
    """The shell's executor (`AggregatorAgent.carry_out`), on the same virtual clock."""
    client = RecordingClient()
    done: list[tuple[object, ...]] = []
    events = iter(trace)
    pending = next(events, None)
    for now in step_times(until):
        actions = core.step(now, WALL + now)
        await agent.carry_out(client, actions, clock=lambda now=now: now)  # type: ignore[arg-type]
        done += [describe(a) for a in actions]
        while pending is not None and pending[0] <= now:  # arrivals until the next step
            pending[1](core, now)
            pending = next(events, None)
    return done, client


def tree() -> Topology:
    return parse_topology(
        'name = "step"\n[defaults]\nrank = 2\n'
        '[[nodes]]\nid = "root"\n'
        '[[nodes]]\nid = "a"\nparent = "root"\n[[nodes]]\nid = "b"\nparent = "root"\n'
    )


async def test_the_shell_and_the_simulation_carry_out_the_same_aggregator_actions() -> None:
    trace = snapshots(["a", "b"], [0.1, 0.2, 0.3, 2.0, 2.1, 9.0])
    simulated = virtual_core(AggregatorAgent(tree(), "root", SETTINGS))
    broker = VirtualNode(tree(), "root")
    expected = run_simulated(simulated, broker, trace, until=40.0)
    shelled = AggregatorAgent(tree(), "root", SETTINGS)
    core = virtual_core(shelled)
    got, client = await run_shell(shelled, core, trace, until=40.0)
    assert got == expected
    kinds = [d[1] for d in got if d[0] == "publish"]
    assert kinds.count("subspace") >= 3 and kinds.count("model") == kinds.count("subspace")
    assert "status" in kinds
    topo = shelled.topology
    topic = {
        "subspace": topo.subspace_topic("root"),
        "model": topo.model_topic(),
        "status": topo.status_detail_topic("root"),
    }
    assert client.topics == [topic[k] for k in kinds]  # each publish, in the core's order
    assert broker.topics == client.topics
    assert set(broker.retained) == {topic["subspace"], topic["model"], topic["status"]}
    assert core.snapshot is not None and core.snapshot.n_samples == 120
    assert simulated.snapshot is not None and simulated.snapshot.n_samples == 120
    assert all(isinstance(a, Wake) for a in core.step(40.25, WALL + 40.25))  # nothing else due


def site_tree() -> Topology:
    leaves = "".join(
        f'[[nodes]]\nid = "pi-{i}"\nparent = "site"\nmechanism = "gaussian-secagg"\n'
        for i in range(4)
    )
    return parse_topology(
        'name = "step-site"\n[defaults]\nrank = 2\nepsilon = 1.0\ndelta = 1e-5\n'
        'clip_norm = 3.0\n[[nodes]]\nid = "root"\n'
        '[[nodes]]\nid = "site"\nparent = "root"\nsecagg_slot_s = 6\n'
        + leaves
        + '[[nodes]]\nid = "plain"\nparent = "site"\nepsilon = 2.0\n'
    )


def site_trace() -> Trace:
    """Three leaves advertise for slot 0 before it starts; no shares follow, so slot 0 is
    skipped at its share deadline; slot 1 starts with nobody; a plain child publishes."""
    pytest.importorskip("cryptography")
    from edge_runtime.secagg.messages import KeyAdvertisement

    def advertise(leaf: str, key: int) -> Callable[[AggregatorCore, float], object]:
        ad = KeyAdvertisement(0, leaf, bytes([key]) * 32, bytes([key + 1]) * 32)

        def deliver(core: AggregatorCore, now: float) -> object:
            release: Any = core.release
            assert release.receive(ad, now) is None
            return None

        return deliver

    trace: Trace = [(1.0 + 0.1 * i, advertise(f"pi-{i}", 2 * i + 1)) for i in range(3)]
    return sorted(trace + snapshots(["plain"], [0.5, 3.0]), key=lambda event: event[0])


async def test_the_shell_and_the_simulation_carry_out_the_same_site_actions(
    tmp_path: Path,
) -> None:
    pytest.importorskip("shamirs")
    trace = site_trace()
    simulated = virtual_core(
        AggregatorAgent(site_tree(), "site", SETTINGS, n_features=D, state_dir=tmp_path)
    )
    simulated.release.start(0.0)  # type: ignore[attr-defined]
    broker = VirtualNode(site_tree(), "site")
    expected = run_simulated(simulated, broker, trace, until=14.0)
    shelled = AggregatorAgent(
        site_tree(), "site", SETTINGS, n_features=D, state_dir=tmp_path / "shell"
    )
    (tmp_path / "shell").mkdir()
    core = virtual_core(shelled)
    core.release.start(0.0)  # type: ignore[attr-defined]
    got, client = await run_shell(shelled, core, trace, until=14.0)
    assert got == expected
    kinds = [d[1] for d in got if d[0] != "wake"]
    # the first step writes the state; slot 0 starts at 6 s: written, then its roster; it is
    # skipped at its share deadline: written, its outcome, the status at once; slot 1 starts
    # at 12 s (written) and is skipped at its advertise deadline (written, outcome, status)
    assert [k for k in kinds if k != "subspace"] == [
        "secagg-site",
        "secagg-site",
        "secagg/roster",
        "secagg-site",
        "secagg/outcome",
        "status",
        "secagg-site",
        "secagg-site",
        "secagg/outcome",
        "status",
    ]
    assert kinds.count("subspace") == 2  # the plain child's snapshots, merged
    topo = shelled.topology
    assert topo.secagg_topic("site", "secagg/roster") in client.topics
    assert topo.secagg_topic("site", "secagg/outcome") in client.topics
    assert broker.topics == client.topics  # each publish, in the same order
    assert (tmp_path / "shell" / "site.secagg").is_file()  # the running sum, on disk
    assert set(broker.files) == {"secagg-site"}  # and in the virtual state directory
    assert list(tmp_path.iterdir()) == [tmp_path / "shell"]  # the simulation wrote no file
    for site in (core, simulated):
        status = site.status_extra(14.0)["secagg"]
        assert status["slots_skipped"] == 2 and status["state"]["written"] == 5  # type: ignore[index]


def released_trace() -> Trace:
    """A recorded run of slot 0 that releases: three of the four leaves (``t = 3``) read
    rows, advertise at 1 s and answer the site's roster, deliveries and unmask request as
    soon as each is out; then each reports its revealed readings (its status document).
    Recorded against a site of its own, stepped as the executors step theirs."""
    pytest.importorskip("cryptography")
    pytest.importorskip("shamirs")
    from edge_runtime.agents.leaf.core.secagg_release import SecAggRelease
    from edge_runtime.secagg.messages import KeyRoster, ShareDelivery, SlotOutcome, UnmaskRequest

    agent = AggregatorAgent(site_tree(), "site", SETTINGS, n_features=D)
    core = virtual_core(agent)
    release: Any = core.release
    site = release.start(0.0)
    rng = np.random.default_rng(11)
    ids = ("pi-0", "pi-1", "pi-2")
    leaves = {
        n: SecAggRelease(
            n,
            D,
            epsilon=1.0,
            delta=1e-5,
            clip_norm=3.0,
            threshold=site.threshold,
            horizon=site.horizon,
            cohort=site.leaf_ids,
            calibration=site.calibration,
        )
        for n in ids
    }
    noise = {n: np.random.default_rng([11, i]) for i, n in enumerate(ids)}
    trace: Trace = []

    def send(now: float, message: object) -> None:
        def deliver(core: AggregatorCore, now: float, message: object = message) -> object:
            assert core.release.receive(message, now) is None  # type: ignore[attr-defined]
            return None

        trace.append((now, deliver))
        deliver(core, now)

    def report(now: float, leaf: str, count: int) -> None:
        def deliver(core: AggregatorCore, now: float) -> object:
            return core.release.count(leaf, count)  # type: ignore[attr-defined]

        trace.append((now, deliver))
        deliver(core, now)

    released = []
    for now in step_times(14.0):
        for action in core.step(now, WALL + now):
            if not isinstance(action, Publish):
                continue
            core.published(action, now)
            message = action.message
            if isinstance(message, KeyRoster):
                for n in message.leaf_ids:
                    send(now, leaves[n].receive_roster(message))
            elif isinstance(message, ShareDelivery):
                leaf = message.recipient
                send(now, leaves[leaf].receive_shares(message, noise[leaf]))
            elif isinstance(message, UnmaskRequest):
                for n in sorted(message.survivors):
                    send(now, leaves[n].unmask(message))
            elif isinstance(message, SlotOutcome):
                released.append(message.released)
                for n in ids:
                    leaves[n].receive_outcome(message)
                    report(now, n, 20)
        if now == 1.0:
            for member in leaves.values():
                member.add_rows(rng.normal(size=(20, D)))
                send(now, member.advertise(0, rng.bytes(32), rng.bytes(32), rng.bytes(32)))
    assert released[0] is True
    return trace


async def test_a_released_slot_gives_the_same_actions_to_the_shell_and_the_simulation(
    tmp_path: Path,
) -> None:
    trace = released_trace()
    simulated = virtual_core(
        AggregatorAgent(site_tree(), "site", SETTINGS, n_features=D, state_dir=tmp_path / "sim")
    )
    simulated.release.start(0.0)  # type: ignore[attr-defined]
    broker = VirtualNode(site_tree(), "site")
    expected = run_simulated(simulated, broker, trace, until=14.0)
    shelled = AggregatorAgent(site_tree(), "site", SETTINGS, n_features=D, state_dir=tmp_path)
    core = virtual_core(shelled)
    core.release.start(0.0)  # type: ignore[attr-defined]
    got, client = await run_shell(shelled, core, trace, until=14.0)
    assert got == expected
    kinds = [d[1] for d in got if d[0] != "wake"]
    secagg = [k for k in kinds if k.startswith("secagg/")]
    assert secagg[:2] == ["secagg/roster", "secagg/delivery/pi-0"]
    assert "secagg/unmask" in secagg and "secagg/outcome" in secagg
    outcome = kinds.index("secagg/outcome")
    assert kinds[outcome - 1] == "secagg-site"  # on disk before the outcome is out
    assert kinds[outcome + 1 : outcome + 3] == ["status", "subspace"]  # the site's estimate
    merged = core.snapshot  # pi-3 sat the slot out: it revealed nothing
    assert merged is not None
    assert merged.provenance == {"pi-0": 20, "pi-1": 20, "pi-2": 20, "pi-3": 0}
    assert merged.privacy is not None and merged.privacy.mechanism == "gaussian-secagg"
    assert core.status_extra(14.0)["secagg"]["slots_released"] == 1  # type: ignore[index]
    assert shelled.topology.secagg_topic("site", "secagg/unmask") in client.topics
    assert broker.topics == client.topics  # each publish, in the same order
    assert (tmp_path / "site.secagg").is_file()
    released = simulated.snapshot  # the simulated site merged the same release
    assert released is not None and released.provenance == merged.provenance
    assert simulated.status_extra(14.0)["secagg"]["slots_released"] == 1  # type: ignore[index]
