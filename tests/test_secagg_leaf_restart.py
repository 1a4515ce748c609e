"""A secagg leaf keeps its ledger across restarts (issue 26).

With a state directory a leaf of mechanism ``"gaussian-secagg"`` writes
``<state_dir>/<node>.secagg-ledger`` after its answers are published (`SecAggLeaf.flush`):
the core's `SecAggRelease.export_ledger` and the last sequence number it revealed per
source. A new incarnation restores it (`SecAggRelease.restore_ledger`, `SecAggLeaf.resume`):
its status continues ``readings_released``, so its site, which counts each leaf's revealed
readings from its status (the larger of old and new), never under-counts it after a restart;
and it confirms, and drops as duplicates, the readings it revealed before. A corrupt or
foreign file is one warning line, counted, and the ledger starts at zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from pathlib import Path

import msgpack
import numpy as np
import pytest
from structlog.testing import capture_logs

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.agents.aggregator.core.secagg_site import SecAggSite
from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.core.secagg_release import SecAggRelease
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.agents.leaf.shell.secagg import (
    LEDGER_FORMAT,
    LEDGER_SUFFIX,
    SecAggLeaf,
    local_config,
)
from edge_runtime.secagg.aggregator_round import RoundTimeouts
from edge_runtime.secagg.errors import SecAggError
from edge_runtime.secagg.messages import KeyRoster, ShareDelivery, SlotOutcome, UnmaskRequest
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import encode_readings
from edge_runtime.wire.secagg import decode_secagg, encode_secagg
from tests.test_secagg_shells import StandIn, ad
from tests.test_secagg_shells import topology as shells_topology

D = 4  # `tests.test_secagg_shells.topology`: epsilon 1, delta 1e-5, clip norm 3, t = 3
HORIZON = 64  # its leaves' release_horizon (the topology's default)
IDS = ("pi-0", "pi-1", "pi-2", "pi-3")
TIMEOUTS = RoundTimeouts(advertise=5.0, share=5.0, masked_input=10.0, unmask=5.0)


class ShellSite:
    """``pi-0`` as a `SecAggLeaf` on a stand-in agent (every message through its topics and
    the wire), ``pi-1..3`` as bare cores, and their `SecAggSite`, on a virtual clock."""

    def __init__(self, topo: Topology, shell: SecAggLeaf, agent: StandIn) -> None:
        self.topo, self.shell, self.agent = topo, shell, agent
        self.rng = np.random.default_rng(7)
        cal = shell.release.calibration
        common = {"epsilon": 1.0, "delta": 1e-5, "clip_norm": 3.0, "horizon": HORIZON}
        self.others = {
            leaf: SecAggRelease(leaf, D, threshold=3, cohort=IDS, calibration=cal, **common)
            for leaf in IDS[1:]
        }
        self.now = 0.0
        self.site = SecAggSite(
            IDS, 3, D, slot_period_s=100.0, now=0.0, timeouts=TIMEOUTS, calibration=cal, **common
        )
        self.outcomes: list[SlotOutcome] = []

    async def _from_shell(self) -> None:
        """Publish what the shell answered and give it to the site."""
        await self.shell.flush(None)
        for _, payload, _ in self.agent.published:
            with contextlib.suppress(SecAggError):  # e.g. a 4th unmask response: late
                self.queue += self.site.receive(
                    decode_secagg(payload, deployment=self.topo.name), self.now
                )
        self.agent.published.clear()

    async def run_slot(self) -> SlotOutcome:
        self.queue: list = []
        for leaf in self.others.values():
            keys = [self.rng.bytes(32) for _ in range(3)]
            self.site.receive(leaf.advertise(leaf.next_slot, *keys), self.now)
        await self._from_shell()  # the shell's advertisement
        self.now = self.site.next_wakeup(self.now)
        self.queue += self.site.tick(self.now)
        shell, dep = self.shell, self.topo.name
        for _ in range(100):
            if not self.queue:
                self.now = self.site.next_wakeup(self.now)
                self.queue += self.site.tick(self.now)
                continue
            message = self.queue.pop(0)
            payload = encode_secagg(message, deployment=dep)
            replies = []
            if isinstance(message, KeyRoster):
                shell.handle(shell.roster_topic, payload)
                replies = [leaf.receive_roster(message) for leaf in self.others.values()]
            elif isinstance(message, ShareDelivery):
                if message.recipient == "pi-0":
                    shell.handle(shell.delivery_topic, payload)
                else:
                    leaf = self.others[message.recipient]
                    replies = [leaf.receive_shares(message, self.rng)]
            elif isinstance(message, UnmaskRequest):
                shell.handle(shell.unmask_topic, payload)
                replies = [self.others[n].unmask(message) for n in message.survivors if n != "pi-0"]
            else:
                assert isinstance(message, SlotOutcome)
                shell.handle(shell.outcome_topic, payload)
                for leaf in self.others.values():
                    leaf.receive_outcome(message)
                await self._from_shell()
                self.outcomes.append(message)
                return message
            await self._from_shell()
            for reply in replies:
                with contextlib.suppress(SecAggError):
                    self.queue += self.site.receive(reply, self.now)
        raise AssertionError("the slot did not end")


def core(**kwargs) -> SecAggRelease:
    settings = {
        "epsilon": 1.0,
        "delta": 1e-5,
        "clip_norm": 3.0,
        "threshold": 3,
        "cohort": IDS,
        "horizon": HORIZON,
    }
    return SecAggRelease("pi-0", D, **{**settings, **kwargs})


def stand_in_core() -> LeafCore:
    """A secagg leaf's `LeafCore`, as `LeafAgent` makes it (local only, no privacy), for
    `SecAggLeaf.resume`."""
    config = local_config(shells_topology().nodes["pi-0"])
    return LeafCore(
        config,
        policy=publish_policy_for(config, leaf=True),
        status_policy=StatusPolicy(),
        confirm_policy=ConfirmPolicy(),
        now=0.0,
        local_only=True,
        rng=random.Random(0),
    )


async def test_the_shell_writes_its_ledger_after_a_reveal_and_a_new_shell_restores_it(
    tmp_path: Path,
) -> None:
    topo = shells_topology()
    agent = StandIn(topo, "pi-0")
    shell = SecAggLeaf(agent, n_features=D, state_dir=tmp_path)
    path = tmp_path / f"pi-0{LEDGER_SUFFIX}"
    rows = np.random.default_rng(0).normal(size=(25, D))
    shell.add_rows(rows[:15], "sensor", 0)
    shell.add_rows(rows[15:], "sensor", 15)
    sim = ShellSite(topo, shell, agent)
    outcome = await sim.run_slot()
    assert outcome.released and "pi-0" in outcome.survivors
    assert shell.revealed == {"sensor": 24}
    doc = msgpack.unpackb(path.read_bytes())
    assert doc["format"] == LEDGER_FORMAT and doc["node"] == "pi-0"
    assert doc["revealed"] == {"sensor": 24}
    assert doc["ledger"] == shell.release.export_ledger()
    before = shell.status()
    assert before["readings_released"] == 25 and before["slots_released"] == 1
    assert before["ledger_file"]["written"] >= 2  # after the reveal, after the outcome
    shell.add_rows(rows[:5], "sensor", 25)  # pending at the "crash": not in the ledger

    again = StandIn(topo, "pi-0")
    with capture_logs() as logs:
        restored = SecAggLeaf(again, state_dir=tmp_path)  # the width from the file
    assert [e["event"] for e in logs] == ["secagg_ledger_restored"]
    status = restored.status()
    for key in ("readings_released", "slots_contributed", "slots_released", "epsilon", "last"):
        assert status[key] == before[key], key
    assert status["readings_pending"] == 0
    assert status["ledger_file"]["restored"] == 1
    # it had advertised for slot 1 (keys now gone): it advertises for slot 2
    assert status["slot"] == 2 and restored.release.slot == 2
    leaf_core = stand_in_core()
    restored.resume(leaf_core)
    assert leaf_core.durable == {"sensor": 24} and leaf_core.sequencer.last == {"sensor": 24}
    assert leaf_core.sequencer.offer("sensor", 0, rows[:25], 0.0) == []  # duplicates
    assert len(leaf_core.sequencer.offer("sensor", 25, rows[:5], 0.0)[0]) == 5  # re-sent
    await restored.flush(None)  # its advertisement out, the file follows
    assert msgpack.unpackb(path.read_bytes())["ledger"]["last_slot"] == 2
    assert again.rejects == {}


def test_the_core_ledger_round_trips_and_a_fresh_core_continues_it() -> None:
    old = core()
    old.add_rows(np.ones((3, D)))
    fresh = core()
    fresh.restore_ledger(msgpack.unpackb(msgpack.packb(old.export_ledger())))
    assert fresh.ledger() == {**old.ledger(), "readings_pending": 0, "readings_clipped": 0}
    # a revealed round not ended yet: its slot is never advertised again, epsilon at t
    rng = np.random.default_rng(1)
    old.advertise(4, rng.bytes(32), rng.bytes(32), rng.bytes(32))
    old._revealed = True  # as after `unmask` (the protocol's path: the shell test above)
    ledger = old.export_ledger()
    assert ledger["last_slot"] == 4 and ledger["epsilon"] > 0
    ledger["slots_contributed"] = 1  # (what `unmask` counts)
    restored = core()
    restored.restore_ledger(ledger)
    assert restored.next_slot == 5 and restored.slot is None
    assert restored.ledger()["epsilon"] <= restored.calibration.epsilon * (1 + 1e-6)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"leaf_id": "pi-1"}, "leaf_id"),
        ({"threshold": 4}, "threshold"),
        ({"n_features": D + 1}, "n_features"),
        ({"epsilon_target": 2.0}, "epsilon_target"),
        ({"clip_norm": 3}, "clip_norm"),  # an int is not this leaf's float
        ({"readings_released": -1}, "readings_released"),
        ({"slots_contributed": True}, "slots_contributed"),
        ({"slots_released": 2, "slots_contributed": 1, "last_slot": 3}, "exceed"),
        ({"slots_contributed": 2, "last_slot": 0}, "last_slot"),
        ({"epsilon": 5.0, "slots_contributed": 1, "last_slot": 0}, "epsilon"),
        ({"last": [1]}, "last"),
    ],
)
def test_a_ledger_of_other_settings_or_an_inconsistent_one_is_refused(
    change: dict, match: str
) -> None:
    ledger = {**core().export_ledger(), **change}
    fresh = core()
    before = fresh.ledger()
    with pytest.raises(ValueError, match=match) as info:
        fresh.restore_ledger(ledger)
    assert "\n" not in str(info.value)
    assert fresh.ledger() == before


def test_only_a_fresh_core_takes_a_ledger() -> None:
    used = core()
    used.add_rows(np.ones((2, D)))
    with pytest.raises(ValueError, match="fresh"):
        used.restore_ledger(core().export_ledger())


@pytest.mark.parametrize(
    "content",
    [
        b"\xc1 not msgpack",
        msgpack.packb([1, 2]),
        msgpack.packb({"format": LEDGER_FORMAT, "version": 2, "ledger": {}, "revealed": {}}),
    ],
)
def test_a_corrupt_ledger_file_starts_afresh_in_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / f"pi-0{LEDGER_SUFFIX}").write_bytes(content)
    (tmp_path / f".pi-0{LEDGER_SUFFIX}.0123456789abcdef.tmp").write_bytes(b"half")  # a crash
    topo = shells_topology()
    with capture_logs() as logs:
        shell = SecAggLeaf(StandIn(topo, "pi-0"), n_features=D, state_dir=tmp_path)
    assert [(e["event"], e["log_level"]) for e in logs] == [("secagg_ledger_unreadable", "warning")]
    assert "\n" not in logs[0]["error"]
    status = shell.status()
    assert status["readings_released"] == 0 and status["slot"] == 0  # a fresh start
    assert status["ledger_file"] == {
        "restored": 0,
        "unreadable": 1,
        "refused": 0,
        "written": 0,
        "write_failures": 0,
    }
    assert not list(tmp_path.glob(".*.tmp"))
    leaf_core = stand_in_core()
    shell.resume(leaf_core)
    assert leaf_core.durable == {} and shell.revealed == {}
    # without a width: no core until the first reading, as a fresh leaf
    shell = SecAggLeaf(StandIn(topo, "pi-0"), state_dir=tmp_path)
    assert shell.release is None and shell.status()["ledger_file"]["unreadable"] == 1


def _ledger_file(topo: Topology, node: str = "pi-0", **changes) -> bytes:
    ledger = core().export_ledger()
    ledger.update(changes.pop("ledger", {}))
    doc = {
        "format": LEDGER_FORMAT,
        "version": 1,
        "node": node,
        "deployment": topo.name,
        "ledger": ledger,
        "revealed": {"sensor": 9},
        **changes,
    }
    return msgpack.packb(doc)


@pytest.mark.parametrize(
    "content",
    [
        lambda topo: _ledger_file(topo, node="pi-1"),  # another node's
        lambda topo: _ledger_file(topo, deployment="another"),
        lambda topo: _ledger_file(topo, ledger={"threshold": 4}),  # another configuration
        lambda topo: _ledger_file(topo, ledger={"n_features": D + 2}),  # another width
        lambda topo: _ledger_file(topo, revealed={"sensor": -3}),
        lambda topo: _ledger_file(topo, ledger={"n_features": 10**6}),  # never allocated
    ],
)
def test_a_foreign_ledger_file_is_refused_in_one_line(tmp_path: Path, content) -> None:
    topo = shells_topology()
    (tmp_path / f"pi-0{LEDGER_SUFFIX}").write_bytes(content(topo))
    with capture_logs() as logs:
        shell = SecAggLeaf(StandIn(topo, "pi-0"), n_features=D, state_dir=tmp_path)
    assert [(e["event"], e["log_level"]) for e in logs] == [("secagg_ledger_refused", "warning")]
    assert shell.status()["ledger_file"]["refused"] == 1
    assert shell.status()["readings_released"] == 0 and shell.revealed == {}


def test_a_noise_seed_is_not_reused_after_a_restart(tmp_path: Path) -> None:
    leaves = "".join(
        f'[[nodes]]\nid = "pi-{i}"\nparent = "site"\nmechanism = "gaussian-secagg"\n'
        f"noise_seed = {5 + i}\n"
        for i in range(4)
    )
    topo = parse_topology(
        'name = "seeded"\n[defaults]\nrank = 2\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 3.0\n'
        '[[nodes]]\nid = "root"\n[[nodes]]\nid = "site"\nparent = "root"\nsecagg_slot_s = 6\n'
        + leaves
    )
    first = SecAggLeaf(StandIn(topo, "pi-0"), n_features=D, state_dir=tmp_path)
    seeded = first._noise.integers(1 << 62)
    (tmp_path / f"pi-0{LEDGER_SUFFIX}").write_bytes(_ledger_file(topo))
    again = SecAggLeaf(StandIn(topo, "pi-0"), n_features=D, state_dir=tmp_path)
    assert again.status()["ledger_file"]["restored"] == 1
    assert again._noise.integers(1 << 62) != seeded  # the OS's entropy, not the seed's stream


async def test_an_unwritable_state_directory_is_counted_not_raised(tmp_path: Path) -> None:
    topo = shells_topology()
    shell = SecAggLeaf(StandIn(topo, "pi-0"), n_features=D, state_dir=tmp_path / "missing")
    with capture_logs() as logs:
        await shell.flush(None)
        later = KeyRoster(5, 3, (ad(5, "pi-1", 3), ad(5, "pi-2", 5), ad(5, "pi-3", 7)))
        shell.handle(shell.roster_topic, encode_secagg(later, deployment=topo.name))
        await shell.flush(None)  # slot 0 carried over, slot 6 advertised: written again
    assert shell.status()["ledger_file"]["write_failures"] == 2
    assert [e["event"] for e in logs] == ["secagg_ledger_unwritable"] * 2  # failures 1 and 2


# -- against a real Mosquitto: an in-process site of four leaves --------------------------

SLOT_S = 8.0  # as tests/test_secagg_agents.py: room on a loaded machine
ROWS = 20


def broker_topology() -> Topology:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    lines = [f'prefix = "{prefix}"', "[defaults]", "rank = 2", '[[nodes]]\nid = "root"']
    lines += ["[[nodes]]", 'id = "site"', 'parent = "root"', f"secagg_slot_s = {SLOT_S}"]
    for leaf in IDS:
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "site"']
        lines += [f'sensor_topic = "{prefix}-sensors/{leaf}"', 'mechanism = "gaussian-secagg"']
        lines += ["epsilon = 1e6", "delta = 1e-5", "clip_norm = 30.0", "release_horizon = 1"]
    return parse_topology("\n".join(lines) + "\n")


async def wait_for(condition, timeout_s: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


@pytest.mark.mqtt
async def test_a_restarted_leaf_continues_its_ledger_and_the_site_counts_every_reading(
    mosquitto, tmp_path: Path
) -> None:
    import aiomqtt

    topology = broker_topology()
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    rng = np.random.default_rng(3)
    values = rng.normal(size=(ROWS + 10, D)) * np.array([5.0, 2.0, 1.0, 0.5])
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
        for agent in [site, *leaves.values()]:
            await agent.wait_connected(5)
        for leaf in IDS:
            payload = encode_readings(values[:ROWS], source="sensor", seq=0)
            await sensor.publish(topology.nodes[leaf].sensor_topic, payload, qos=1)
        await wait_for(
            lambda: all(a.release_shell.release.pending_rows == ROWS for a in leaves.values()),
            5,
            "the leaves' readings",
        )
        # slot 0: pi-0 reveals its readings, its ledger file follows
        await wait_for(lambda: site.secagg.counts["pi-0"] == ROWS, 3 * SLOT_S, "slot 0's count")
        assert (tmp_path / f"pi-0{LEDGER_SUFFIX}").is_file()
        assert leaves["pi-0"].durable == {"sensor": ROWS - 1}
        await leaves["pi-0"].aclose()

        # a new incarnation, same state directory: the ledger and what it revealed
        again = LeafAgent(topology, "pi-0", settings, n_features=D, state_dir=tmp_path)
        ledger = again.status_detail().extra["secagg"]
        assert ledger["readings_released"] == ROWS and ledger["slots_contributed"] == 1
        assert ledger["ledger_file"]["restored"] == 1
        assert again.durable == {"sensor": ROWS - 1} and again.ingested == {"sensor": ROWS - 1}
        await stack.enter_async_context(again)
        await again.wait_connected(5)
        # a publisher re-sends from 0 (the first ROWS are duplicates) and 10 new readings
        payload = encode_readings(values, source="sensor", seq=0)
        await sensor.publish(topology.nodes["pi-0"].sensor_topic, payload, qos=1)
        await wait_for(
            lambda: again.release_shell.release.pending_rows == 10, 5, "the new readings"
        )
        assert again.sequencer.duplicates == ROWS

        # a later slot reveals them: the site counts every reading pi-0 revealed
        await wait_for(
            lambda: site.secagg.counts["pi-0"] == ROWS + 10, 4 * SLOT_S, "the site's count"
        )
        assert again.release_shell.release.ledger()["readings_released"] == ROWS + 10
        assert again.durable == {"sensor": ROWS + 9}
        assert site.secagg.counts == {"pi-0": ROWS + 10, "pi-1": ROWS, "pi-2": ROWS, "pi-3": ROWS}
