"""A secagg leaf killed between its masked input and its unmask response (issue 26).

Its masked input may be in the site's ``U_3``: the survivors then reveal shares of its self
mask and the site releases the sum with its readings. So before it publishes its masked
input for slot ``k`` it writes the in-flight record (slot ``k``, the last sequence number per
source its input covers) to ``<state_dir>/<node>.secagg-ledger``; a new incarnation learns
slot ``k``'s outcome from the site's retained outcome: released with it among the survivors
-> those readings are revealed (durable, re-sends dropped as duplicates); skipped or it not
a survivor -> re-sends go to a later slot; unknown (a later slot's outcome, or unreadable)
-> treated as released (never twice), one warning line, counted in the status.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
from structlog.testing import capture_logs

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.agents.leaf.shell.secagg import LEDGER_SUFFIX, SecAggLeaf
from edge_runtime.secagg.errors import SecAggError
from edge_runtime.secagg.messages import KeyRoster, ShareDelivery, SlotOutcome, UnmaskRequest
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import encode_readings
from edge_runtime.wire.secagg import decode_secagg, encode_secagg
from tests.test_secagg_leaf_restart import (
    IDS,
    D,
    ShellSite,
    broker_topology,
    stand_in_core,
    wait_for,
)
from tests.test_secagg_shells import StandIn, ad
from tests.test_secagg_shells import topology as shells_topology

ROWS = 25


class CrashSite(ShellSite):
    """`ShellSite` whose shell dies right after publishing its masked input: it answers
    nothing more; ``deliver`` says whether that masked input reached the site."""

    async def crash_slot(self, *, deliver: bool) -> tuple[SlotOutcome, dict]:
        self.queue = []
        for leaf in self.others.values():
            keys = [self.rng.bytes(32) for _ in range(3)]
            self.site.receive(leaf.advertise(leaf.next_slot, *keys), self.now)
        await self._from_shell()
        self.now = self.site.next_wakeup(self.now)
        self.queue += self.site.tick(self.now)
        shell, dep = self.shell, self.topo.name
        path = shell.ledger_path
        on_disk: dict = {}
        dead = False
        for _ in range(200):
            if not self.queue:
                self.now = self.site.next_wakeup(self.now)
                self.queue += self.site.tick(self.now)
                continue
            message = self.queue.pop(0)
            payload = encode_secagg(message, deployment=dep)
            replies = []
            if isinstance(message, KeyRoster):
                if not dead:
                    shell.handle(shell.roster_topic, payload)
                    await self._from_shell()
                replies = [leaf.receive_roster(message) for leaf in self.others.values()]
            elif isinstance(message, ShareDelivery):
                if message.recipient == "pi-0":
                    shell.handle(shell.delivery_topic, payload)
                    await shell.flush(None)  # the masked input goes out: then the crash
                    on_disk = msgpack.unpackb(path.read_bytes())  # written before it
                    for _, out, _ in self.agent.published:
                        if deliver:
                            self.queue += self.site.receive(decode_secagg(out, deployment=dep), 0)
                    self.agent.published.clear()
                    dead = True
                    continue
                leaf = self.others[message.recipient]
                replies = [leaf.receive_shares(message, self.rng)]
            elif isinstance(message, UnmaskRequest):
                replies = [self.others[n].unmask(message) for n in message.survivors if n != "pi-0"]
            else:
                assert isinstance(message, SlotOutcome)
                for leaf in self.others.values():
                    leaf.receive_outcome(message)
                return message, on_disk
            for reply in replies:
                with contextlib.suppress(SecAggError):
                    self.queue += self.site.receive(reply, self.now)
        raise AssertionError("the slot did not end")


async def crash(tmp_path: Path, *, deliver: bool) -> tuple[SlotOutcome, dict, np.ndarray]:
    """pi-0 takes part in slot 0 with readings 0..24 of ``sensor`` and dies after its masked
    input."""
    topo = shells_topology()
    agent = StandIn(topo, "pi-0")
    shell = SecAggLeaf(agent, n_features=D, state_dir=tmp_path)
    rows = np.random.default_rng(0).normal(size=(ROWS, D))
    shell.add_rows(rows, "sensor", 0)
    sim = CrashSite(topo, shell, agent)
    outcome, on_disk = await sim.crash_slot(deliver=deliver)
    assert on_disk["in_flight"] == [{"slot": 0, "upto": {"sensor": ROWS - 1}}]
    assert on_disk["ledger"]["in_flight"] == [{"slot": 0, "rows": ROWS}]
    assert on_disk["revealed"] == {}
    return outcome, on_disk, rows


def restart(tmp_path: Path) -> tuple[SecAggLeaf, StandIn]:
    agent = StandIn(shells_topology(), "pi-0")
    shell = SecAggLeaf(agent, state_dir=tmp_path)
    assert shell.release.unresolved_slots == [0]
    leaf_core = stand_in_core()
    shell.resume(leaf_core)
    assert leaf_core.durable == {}  # not confirmed before the outcome says
    return shell, agent


def give_outcome(shell: SecAggLeaf, outcome: SlotOutcome) -> None:
    shell.handle(shell.outcome_topic, encode_secagg(outcome, deployment=shell.deployment))


async def test_released_with_the_leaf_among_the_survivors_marks_them_revealed(
    tmp_path: Path,
) -> None:
    outcome, _, rows = await crash(tmp_path, deliver=True)
    assert outcome.released and "pi-0" in outcome.survivors  # t others unmasked its input
    shell, agent = restart(tmp_path)
    shell.add_rows(rows[:10], "sensor", 0)  # a re-send before the outcome: held
    assert shell.status()["readings_held"] == 10 and shell.release.pending_rows == 0
    with capture_logs() as logs:
        give_outcome(shell, outcome)  # the site's retained outcome
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == []
    assert shell.revealed == {"sensor": ROWS - 1}
    shell.add_rows(rows, "sensor", 0)  # the re-send of them all: duplicates
    status = shell.status()
    assert status["readings_held"] == 0 and status["readings_pending"] == 0
    assert status["duplicates"] == 10 + ROWS
    assert status["readings_released"] == ROWS and status["slots_released"] == 1
    assert status["slots_contributed"] == 1 and status["epsilon"] > 0
    assert status["slots_in_flight_unknown"] == 0 and status["in_flight"] == []
    shell.add_rows(rows[:3], "sensor", ROWS)  # new readings go on
    assert shell.release.pending_rows == 3
    await shell.flush(None)
    doc = msgpack.unpackb((tmp_path / f"pi-0{LEDGER_SUFFIX}").read_bytes())
    assert doc["revealed"] == {"sensor": ROWS - 1} and doc["in_flight"] == []
    assert doc["ledger"]["readings_released"] == ROWS
    assert agent.rejects == {}


@pytest.mark.parametrize("skipped", [False, True])
async def test_not_among_the_survivors_or_skipped_the_re_sends_are_taken(
    tmp_path: Path, skipped: bool
) -> None:
    outcome, _, rows = await crash(tmp_path, deliver=False)
    assert "pi-0" not in outcome.survivors
    if skipped:
        outcome = SlotOutcome(0, None, frozenset(), frozenset(), "too few")
    shell, agent = restart(tmp_path)
    shell.add_rows(rows[:10], "sensor", 0)  # held until the outcome says
    give_outcome(shell, outcome)
    assert shell.revealed == {}
    assert shell.release.pending_rows == 10  # the held re-send went to the next slot
    shell.add_rows(rows[10:], "sensor", 10)
    status = shell.status()
    assert status["readings_pending"] == ROWS and status["duplicates"] == 0
    assert status["readings_released"] == 0 and status["slots_carried_over"] == 1
    assert status["in_flight"] == []
    assert agent.rejects == {}


@pytest.mark.parametrize("how", ["later", "unreadable"])
async def test_an_unknown_outcome_counts_them_released_with_one_warning(
    tmp_path: Path, how: str
) -> None:
    await crash(tmp_path, deliver=True)
    shell, agent = restart(tmp_path)
    assert agent.rejects == {}
    rows = np.random.default_rng(0).normal(size=(ROWS, D))
    with capture_logs() as logs:
        if how == "later":  # down for longer than a slot: slot 0's outcome is gone
            give_outcome(shell, SlotOutcome(3, None, frozenset(), frozenset(), "too few"))
        else:
            shell.handle(shell.outcome_topic, b"\x93garbage")
    warnings = [e for e in logs if e["event"] == "secagg_in_flight_unknown"]
    assert len(warnings) == 1 and warnings[0]["readings"] == ROWS
    assert f"its {ROWS} readings" in warnings[0]["detail"]
    assert shell.revealed == {"sensor": ROWS - 1}
    shell.add_rows(rows, "sensor", 0)
    status = shell.status()
    assert status["readings_pending"] == 0 and status["duplicates"] == ROWS
    assert status["slots_in_flight_unknown"] == 1
    assert status["readings_in_flight_unknown"] == ROWS
    assert status["readings_released"] == ROWS and status["epsilon"] > 0


# -- against a real broker ----------------------------------------------------------------

BROKER_ROWS = 20


@pytest.mark.mqtt
async def test_a_leaf_stopped_after_its_masked_input_is_released_once(
    mosquitto, tmp_path: Path
) -> None:
    import aiomqtt

    topology = broker_topology()
    slot_s = 8.0
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    rng = np.random.default_rng(3)
    values = rng.normal(size=(BROKER_ROWS, D)) * np.array([5.0, 2.0, 1.0, 0.5])
    async with contextlib.AsyncExitStack() as stack:
        sensor = await stack.enter_async_context(
            aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5)
        )
        site = await stack.enter_async_context(
            AggregatorAgent(topology, "site", settings, n_features=D)
        )
        leaves = {}
        for leaf in IDS:
            state_dir = tmp_path if leaf == "pi-0" else None
            leaves[leaf] = await stack.enter_async_context(
                LeafAgent(topology, leaf, settings, n_features=D, state_dir=state_dir)
            )
        # pi-0 "dies" right after its masked input is out: it handles nothing more
        doomed = leaves["pi-0"].release_shell
        handle = doomed.handle
        dead = asyncio.Event()

        def frozen(topic: str, payload: object) -> None:
            if dead.is_set():
                return
            handle(topic, payload)
            if topic == doomed.delivery_topic:
                dead.set()

        doomed.handle = frozen  # type: ignore[method-assign]
        for agent in [site, *leaves.values()]:
            await agent.wait_connected(5)
        for leaf in IDS:
            payload = encode_readings(values, source="sensor", seq=0)
            await sensor.publish(topology.nodes[leaf].sensor_topic, payload, qos=1)
        await wait_for(dead.is_set, 3 * slot_s, "pi-0's share delivery")
        await wait_for(lambda: not doomed._outbox, 5, "pi-0's masked input published")
        await leaves["pi-0"].aclose()
        doc = msgpack.unpackb((tmp_path / f"pi-0{LEDGER_SUFFIX}").read_bytes())
        assert doc["in_flight"][0]["upto"] == {"sensor": BROKER_ROWS - 1}
        slot = doc["in_flight"][0]["slot"]

        # the site releases slot `slot` from pi-1..3's answers, pi-0's input in it
        secagg_site = site.secagg.site
        await wait_for(
            lambda: secagg_site.status()["slots_released"] >= 1, 2 * slot_s, "the release"
        )
        await wait_for(
            lambda: site.secagg.counts["pi-1"] == BROKER_ROWS, 5, "pi-1's count (its status)"
        )

        # a new incarnation, same state directory: the retained outcome of `slot`
        again = LeafAgent(topology, "pi-0", settings, n_features=D, state_dir=tmp_path)
        assert again.release_shell.release.unresolved_slots == [slot]
        await stack.enter_async_context(again)
        await again.wait_connected(5)
        await wait_for(lambda: again.release_shell.revealed, 5, "slot's retained outcome")
        status = again.release_shell.status()
        assert status["readings_released"] == BROKER_ROWS and status["slots_released"] == 1
        assert status["slots_in_flight_unknown"] == 0  # slot's own outcome, pi-0 a survivor
        # a publisher re-sends the same readings: duplicates, never in a second slot
        payload = encode_readings(values, source="sensor", seq=0)
        await sensor.publish(topology.nodes["pi-0"].sensor_topic, payload, qos=1)
        await wait_for(
            lambda: again.sequencer.duplicates + again.release_shell.duplicates >= BROKER_ROWS,
            5,
            "the re-send dropped",
        )
        assert again.release_shell.release.pending_rows == 0
        # durable once its next step has seen the reveal (at once, unless the machine is busy)
        await wait_for(
            lambda: again.durable == {"sensor": BROKER_ROWS - 1}, 5, "the released rows durable"
        )
        await wait_for(
            lambda: site.secagg.counts["pi-0"] == BROKER_ROWS, 2 * slot_s, "pi-0's count"
        )
        await asyncio.sleep(0.5)
        assert site.secagg.counts == dict.fromkeys(IDS, BROKER_ROWS)
        assert again.release_shell.release.ledger()["readings_released"] == BROKER_ROWS


async def test_a_live_leaf_whose_round_ends_without_its_outcome_never_re_sends_it(
    tmp_path: Path,
) -> None:
    """pi-0's masked input went out, it never answered, and the next thing it sees is a later
    slot's roster (slot 0's outcome lost or late): the site may have released its input, so
    its readings count as released (unknown), are revealed and never go to another slot."""
    topo = shells_topology()
    agent = StandIn(topo, "pi-0")
    shell = SecAggLeaf(agent, n_features=D, state_dir=tmp_path)
    shell.add_rows(np.random.default_rng(0).normal(size=(ROWS, D)), "sensor", 0)
    sim = CrashSite(topo, shell, agent)
    await sim.crash_slot(deliver=True)  # the site released slot 0 with pi-0's input
    assert shell.release.slot == 0 and shell.revealed == {}
    later = KeyRoster(1, 3, (ad(1, "pi-1", 3), ad(1, "pi-2", 5), ad(1, "pi-3", 7)))
    shell.handle(shell.roster_topic, encode_secagg(later, deployment=topo.name))
    ledger = shell.release.ledger()
    assert shell.release.slot != 0  # slot 0's round is over (it advertises for the next)
    assert ledger["readings_released"] == ROWS
    assert ledger["slots_in_flight_unknown"] == 1
    assert ledger["readings_in_flight_unknown"] == ROWS
    assert shell.release.pending_rows == 0  # not carried over to slot 1
    assert shell.revealed == {"sensor": ROWS - 1}
