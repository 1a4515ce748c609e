"""One leaf per site killed mid-slot, as deployed (issue 26, Done-when: "One leaf per site
killed mid-slot: the slot completes from the survivors' shares, or is skipped and reported.
Nothing is released under a weaker guarantee.").

The deployment of `acceptance.scenario` (``acceptance/scenario.py``): Mosquitto from
``broker_config/secured.conf`` with the passwords and the ACL of ``edge-runtime acl``, one
``edge-runtime agent`` process per node with the unit's command line, credentials and its own
state directory (the sites' aggregators with ``--n-features 48``, the unit's
``$EDGE_AGENT_OPTIONS``), ``edge-runtime replay`` with its defaults on the Motes light data,
through ``topologies/motes-secagg.toml`` (root, site-a with pi-01..04, site-b with pi-05..08,
``t = 3`` of 4, epsilon 1.0) with ``secagg_slot_s`` shortened to `SLOT_S`.

Slot 0 takes every reading (the replay ends within it). Once a site publishes its key roster
of the next slot (retained, readable by the dashboard user), one of its leaves is SIGKILLed
(`KILLED`): mid-slot, after its advertisement for the slot went into the roster. A sibling
(`SLOWED`) is frozen from just before that slot until the kill, so that the kill always
precedes the killed leaf's masked input, however late this process sees the roster.
Read only from what the deployment publishes (the broker's messages as the read-only
dashboard user, the agents' logs, the replay's summary):

- each site's outcome of that slot is released from exactly 3 survivors, the killed leaf not
  among them (dropped before its shares, or its masks removed with the key recovered from
  the survivors' shares: the unmask request and the outcome name it ``dropped``), or is
  skipped with a reason;
- no slot of any site is ever released from fewer than ``t = 3`` survivors (outcomes, unmask
  requests, the sites' status documents);
- no guarantee weaker than the configured epsilon is ever claimed: the root's models, the
  sites' and the leaves' status ledgers all say epsilon <= 1.0, mechanism gaussian-secagg;
- the killed leaves restarted (same command, same state directory) take part again and the
  next slot releases from 4 at both sites (a second replay gives them readings: a secagg
  leaf learns the width of a reading from its first one);
- a site SIGKILLed and restarted (same command, same state directory) restores its running
  sum from its state file (its status says so, with at least the slots it had released) and
  publishes its estimate again;
- no agent exited but the killed ones, no Traceback in any log, every replay exits 0 with
  nothing unconfirmed, and the broker dropped no client for its keep-alive.

Prints one ``SECAGG-DEPLOYED`` line (``pytest -rP``) with the duration and the outcomes.
About 80 s (four slots of `SLOT_S` and the restarts), hence ``slow``: ``scripts/test.sh``
runs it (its pytest pass has no marker filter); the Python 3.13 / oldest-dependency / arm
passes (``-m "not slow"``) do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from acceptance.faults import AgentProc, send_signal, stdout_of, wait_exit
from acceptance.scenario import (
    READER,
    ROOT,
    CredentialMonitor,
    Deployment,
    Fleet,
    SecuredBroker,
    prepare,
)
from edge_runtime.secagg.messages import KeyRoster, SlotOutcome, UnmaskRequest
from edge_runtime.topology import topics as kinds
from edge_runtime.wire import WireError, decode_subspace
from edge_runtime.wire.secagg import decode_secagg

pytestmark = [pytest.mark.mqtt, pytest.mark.slow, pytest.mark.timeout(300)]

SECAGG_TOML = ROOT / "topologies" / "motes-secagg.toml"
SLOT_S = 15.0
"""The sites' slot: phase timeouts 1.25, 1.25, 3.75 and 1.25 s (half the slot, the shell's
scaling below 120 s); room for 11 processes on a loaded 2-core machine."""
KILLED = {"site-a": "pi-02", "site-b": "pi-06"}
SLOWED = {"site-a": "pi-03", "site-b": "pi-07"}
"""A sibling of the killed leaf, SIGSTOPped `FREEZE_LEAD_S` before the slot is due (after it
advertised for the slot) and SIGCONTed once the killed leaf is dead: the site waits for its
shares (the share phase, 1.25 s), so no delivery, hence no masked input of the killed leaf,
can exist before the kill, however late this process (on a loaded machine) sees the roster.
Without it the killed leaf raced its own masked input (once, 855 ms late under load: it
survived the slot). The kill lands after the killed leaf's shares (its masks are then
recovered from the survivors' shares) or before them; if the frozen sibling misses the share
phase the slot is skipped (fewer than t masked inputs): all three are allowed outcomes."""
FREEZE_LEAD_S = 2.0
KILL_AFTER_ROSTER_S = 0.25
"""The kill's delay after the roster: time for the killed leaf's shares (it answers the roster
in a few ms), well inside the share phase that its frozen sibling keeps open."""
THRESHOLD = 3
EPSILON = 1.0
N_FEATURES = 48
ONLINE_TIMEOUT_S = 60.0
EPS_SLACK = 1e-9


def secagg_topology(directory: Path) -> Path:
    """``topologies/motes-secagg.toml`` with both sites' ``secagg_slot_s`` set to `SLOT_S`."""
    text = SECAGG_TOML.read_text()
    text, n = re.subn(r"(?m)^secagg_slot_s = .*$", f"secagg_slot_s = {SLOT_S}", text)
    assert n == 2, "motes-secagg.toml no longer sets secagg_slot_s for its two sites"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "motes-secagg.toml"
    path.write_text(text)
    return path


class SecAggFleet(Fleet):
    """`acceptance.Fleet` with ``--n-features 48`` after the unit's command line for the
    aggregators of secagg leaves (the unit's ``$EDGE_AGENT_OPTIONS``, devices/INSTALL.md)."""

    def agent_args(self, node: str) -> list[str]:
        args = super().agent_args(node)
        if self.d.topology.secagg_leaves(node):
            args += ["--n-features", str(N_FEATURES)]
        return args


# ------------------------------------------------------------------------------ reading
def secagg_messages(mon: CredentialMonitor, d: Deployment, site: str, kind: str) -> list:
    """Every decodable message of ``<site>/<kind>`` (a ``topics.SECAGG_*`` kind) the monitor
    saw, in order."""
    topic = d.topology.secagg_topic(site, kind)
    out = []
    for record in mon.on(topic):
        if record.payload:
            with contextlib.suppress(WireError):
                out.append(decode_secagg(record.payload, deployment=d.topology.name))
    return out


def outcomes(mon: CredentialMonitor, d: Deployment, site: str) -> dict[int, SlotOutcome]:
    return {o.slot: o for o in secagg_messages(mon, d, site, kinds.SECAGG_OUTCOME)}


def rosters(mon: CredentialMonitor, d: Deployment, site: str) -> dict[int, KeyRoster]:
    return {r.slot: r for r in secagg_messages(mon, d, site, kinds.SECAGG_ROSTER)}


def unmask_requests(mon: CredentialMonitor, d: Deployment, site: str) -> dict[int, UnmaskRequest]:
    return {q.slot: q for q in secagg_messages(mon, d, site, kinds.SECAGG_UNMASK)}


def status_docs(mon: CredentialMonitor, d: Deployment, node: str) -> list[dict]:
    out = []
    for record in mon.on(d.topology.status_detail_topic(node)):
        with contextlib.suppress(ValueError):
            doc = json.loads(record.payload)
            if isinstance(doc, dict):
                out.append(doc)
    return out


def secagg_extra(doc: dict) -> dict:
    extra = doc.get("extra")
    secagg = extra.get("secagg") if isinstance(extra, dict) else None
    return secagg if isinstance(secagg, dict) else {}


def summary(proc: AgentProc) -> dict:
    for line in reversed(stdout_of(proc).splitlines()):
        if line.strip().startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return {}


def describe_outcome(o: SlotOutcome | None, killed: str) -> str:
    if o is None:
        return "none"
    if not o.released:
        return f"skipped({o.reason!r})"
    how = "masks recovered" if killed in o.dropped else "dropped before its shares"
    if killed in o.survivors:
        how = "it among them"
    return f"released from {len(o.survivors)} ({how})"


async def wait_until(mon: CredentialMonitor, fleet: Fleet, predicate, timeout_s: float) -> bool:
    """``predicate()`` within ``timeout_s`` (False on timeout or when an agent died)."""
    return await mon.wait_for(lambda: predicate() or bool(fleet.dead()), timeout_s) and (
        predicate()
    )


# ------------------------------------------------------------------------------ the test
@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    directory = tmp_path_factory.mktemp("secagg")
    return prepare(directory, secagg_topology(directory), None, name="motes-secagg-short")


async def test_one_leaf_per_site_killed_mid_slot_as_deployed(
    deployment: Deployment, tmp_path: Path
) -> None:
    d = deployment
    topology = d.topology
    sites = list(KILLED)
    assert {s: topology.nodes[s].secagg_threshold for s in sites} == dict.fromkeys(sites, THRESHOLD)
    assert {s: topology.nodes[s].secagg_slot_s for s in sites} == dict.fromkeys(sites, SLOT_S)
    t_begin = time.monotonic()
    broker = SecuredBroker(d, tmp_path / "broker")
    fleet = SecAggFleet(d, broker, tmp_path)
    notes: list[str] = []
    try:
        await asyncio.to_thread(broker.start)
        assert broker.port is not None and broker.port > 20000
        mon = CredentialMonitor("127.0.0.1", broker.port, topology, READER, d.password(READER))
        async with mon:
            t0 = time.time()
            fleet.start_all()

            def online() -> bool:
                return all(
                    any(r.payload == b"online" for r in mon.on(topology.status_topic(n), t0))
                    for n in topology.nodes
                )

            assert await wait_until(mon, fleet, online, ONLINE_TIMEOUT_S), (
                f"agents not online: dead {fleet.dead()}"
            )
            replay = fleet.replay(None)

            # slot 0 takes the replay's readings
            def slot_done(slot: int) -> bool:
                return all(slot in outcomes(mon, d, s) for s in sites)

            assert await wait_until(mon, fleet, lambda: slot_done(0), 3 * SLOT_S), (
                f"slot 0 did not end at both sites: dead {fleet.dead()}"
            )
            code = await wait_exit(replay, 2 * SLOT_S)
            assert code == 0, f"replay exit {code}: {replay.tail(600)}"
            first = summary(replay)
            assert first.get("unconfirmed_total") == 0, first

            # the first slot due after the replay ended (slot 1 unless the machine is slow):
            # one leaf per site SIGKILLed once its site's roster is out, a
            # sibling frozen from just before the slot until then (see SLOWED)
            def roster_time(site: str, slot: int) -> float | None:
                topic = topology.secagg_topic(site, kinds.SECAGG_ROSTER)
                for record in mon.on(topic):
                    with contextlib.suppress(WireError):
                        if decode_secagg(record.payload, deployment=topology.name).slot == slot:
                            return record.t
                return None

            def advertised(leaf: str, slot: int) -> bool:
                topic = topology.secagg_topic(leaf, kinds.SECAGG_KEYS)
                for record in mon.on(topic):
                    with contextlib.suppress(WireError):
                        if decode_secagg(record.payload, deployment=topology.name).slot == slot:
                            return True
                return False

            def grid_start(site: str) -> float:
                """When the site's slot 0 was due (monitor's clock): its slots are on a fixed
                grid, and a roster is out as the slot starts (or its advertise phase ends)."""
                seen = rosters(mon, d, site)
                return min(t - slot * SLOT_S for slot in seen if (t := roster_time(site, slot)))

            starts = {s: grid_start(s) for s in sites}
            kill_slot = 1 + max(max(rosters(mon, d, s), default=0) for s in sites)
            while any(  # room to freeze the siblings before it is due, at both sites
                r0 + kill_slot * SLOT_S - FREEZE_LEAD_S < time.time() + 0.5
                for r0 in starts.values()
            ):
                kill_slot += 1
            for site, leaf in KILLED.items():
                notes.append(f"{site} slot 0: {describe_outcome(outcomes(mon, d, site)[0], leaf)}")

            async def kill_mid_slot(site: str) -> str:
                leaf, slow = KILLED[site], SLOWED[site]
                due = starts[site] + kill_slot * SLOT_S
                assert await wait_until(
                    mon,
                    fleet,
                    lambda: advertised(leaf, kill_slot) and advertised(slow, kill_slot),
                    2 * SLOT_S,
                ), f"{leaf} and {slow} did not advertise for slot {kill_slot}"
                await asyncio.sleep(max(0.0, due - FREEZE_LEAD_S - time.time()))
                frozen = roster_time(site, kill_slot) is None
                if frozen:
                    send_signal(fleet.procs[slow], signal.SIGSTOP)
                try:
                    assert await wait_until(
                        mon, fleet, lambda: roster_time(site, kill_slot) is not None, 2 * SLOT_S
                    ), f"{site}: slot {kill_slot} did not start"
                    roster = rosters(mon, d, site)[kill_slot]
                    assert {leaf, slow} <= set(roster.leaf_ids), (site, roster.leaf_ids)
                    seen = roster_time(site, kill_slot) or time.time()
                    await asyncio.sleep(max(0.0, seen + KILL_AFTER_ROSTER_S - time.time()))
                    fleet.kill(fleet.procs[leaf])
                    killed_at = time.time()
                    assert await wait_exit(fleet.procs[leaf], 5.0) is not None
                finally:
                    if frozen:
                        send_signal(fleet.procs[slow], signal.SIGCONT)
                delay = killed_at - (roster_time(site, kill_slot) or killed_at)
                froze = f"{slow} frozen until then" if frozen else "no freeze (roster early)"
                return f"{leaf} killed {1000 * delay:.0f} ms after the roster ({froze})"

            notes += await asyncio.gather(*(kill_mid_slot(s) for s in sites))
            assert await wait_until(mon, fleet, lambda: slot_done(kill_slot), 2 * SLOT_S), (
                f"slot {kill_slot} did not end at both sites: dead {fleet.dead()}"
            )
            for site, leaf in KILLED.items():
                outcome = outcomes(mon, d, site)[kill_slot]
                notes.append(f"{site} slot {kill_slot}: {describe_outcome(outcome, leaf)}")
                if outcome.released:
                    assert leaf not in outcome.survivors, (
                        f"{site}: the kill came after {leaf}'s masked input: {notes}"
                    )
                    assert len(outcome.survivors) == THRESHOLD, (site, outcome.survivors)
                    request = unmask_requests(mon, d, site).get(kill_slot)
                    assert request is not None and request.survivors == outcome.survivors
                    assert request.dropped == outcome.dropped
                else:
                    assert outcome.reason, f"{site}: slot {kill_slot} skipped without a reason"

            # the killed leaves restarted: readings from a second replay, slot kill_slot + 1
            # releases from all 4 again
            t_restart = time.time()
            for leaf in KILLED.values():
                fleet.start(leaf)
            assert await wait_until(
                mon,
                fleet,
                lambda: all(
                    any(r.payload == b"online" for r in mon.on(topology.status_topic(n), t_restart))
                    for n in KILLED.values()
                ),
                ONLINE_TIMEOUT_S,
            ), f"restarted leaves not online: dead {fleet.dead()}"
            again = fleet.replay(None)
            next_slot = kill_slot + 1
            assert await wait_until(mon, fleet, lambda: slot_done(next_slot), 3 * SLOT_S), (
                f"slot {next_slot} did not end at both sites: dead {fleet.dead()}"
            )
            for site, leaf in KILLED.items():
                outcome = outcomes(mon, d, site)[next_slot]
                notes.append(f"{site} slot {next_slot}: {describe_outcome(outcome, leaf)}")
                assert outcome.released and len(outcome.survivors) == 4, notes
            code = await wait_exit(again, 2 * SLOT_S)
            assert code == 0, f"second replay exit {code}: {again.tail(600)}"
            second = summary(again)
            assert second.get("unconfirmed_total") == 0, second

            # the status documents caught up with the last slot (bounded)
            def statuses_caught_up() -> bool:
                return all(
                    any(
                        any(r.get("slot") == next_slot for r in secagg_extra(doc).get("recent", []))
                        for doc in status_docs(mon, d, s)
                    )
                    for s in sites
                )

            assert await wait_until(mon, fleet, statuses_caught_up, SLOT_S), "site statuses"
            models = [
                decode_subspace(r.payload) for r in mon.on(topology.model_topic()) if r.payload
            ]
            notes.append(check_guarantees(mon, d, models))

            # a site SIGKILLed and restarted (same command, same state directory): its
            # running sum comes back from <state>/<site>.secagg, so what it released before
            # stays in its estimate (without the file it would start again from zero)
            site = "site-a"
            ledgers = [secagg_extra(doc) for doc in status_docs(mon, d, site)]
            released_before = max(x.get("slots_released", 0) for x in ledgers if x)
            assert (fleet.state_dir(site) / f"{site}.secagg").is_file()
            fleet.kill(fleet.procs[site])
            assert await wait_exit(fleet.procs[site], 5.0) is not None
            t_site = time.time()
            fleet.start(site)

            def site_restored() -> bool:
                for record in mon.on(topology.status_detail_topic(site), t_site):
                    with contextlib.suppress(ValueError):
                        ledger = secagg_extra(json.loads(record.payload))
                        if ledger.get("state", {}).get("restored") == 1:
                            return ledger["slots_released"] >= released_before
                return False

            assert await wait_until(mon, fleet, site_restored, ONLINE_TIMEOUT_S + SLOT_S), (
                f"{site} restarted without its running sum: dead {fleet.dead()}"
            )
            snapshots = mon.snapshots(site, t_site)
            assert await wait_until(
                mon, fleet, lambda: bool(mon.snapshots(site, t_site)), 2 * SLOT_S
            ), f"{site} published no snapshot after its restart"
            snapshots = mon.snapshots(site, t_site)
            assert snapshots[0][1].n_samples > 0
            notes.append(
                f"{site} killed and restarted: its running sum restored ({released_before} slots "
                f"released before), first snapshot n_samples {snapshots[0][1].n_samples}"
            )
            dead = fleet.dead()
            assert not dead, f"agents exited: {sorted(dead)}: {next(iter(dead.values()))}"
    finally:
        await fleet.stop_all()
        await asyncio.to_thread(broker.stop)
    for proc in fleet.history:
        text = proc.log_path.read_text(errors="replace") + stdout_of(proc)
        assert "Traceback" not in text, f"{proc.name} ({proc.log_path}): {text[-2000:]}"
    # No agent's event loop blocks past its keep-alive (a secagg leaf once imported its
    # cores, scipy.optimize among them, at its first reading: 7 s with 8 leaves on 2 cores).
    drops = sorted(set(re.findall(r"Client (\S+) has exceeded timeout", broker.log())))
    assert not drops, f"the broker dropped {drops} for keep-alive"
    print(f"SECAGG-DEPLOYED total_s={time.monotonic() - t_begin:.1f} " + "; ".join(notes))


def check_guarantees(mon: CredentialMonitor, d: Deployment, models: list) -> str:
    """No slot released from fewer than t; no guarantee weaker than epsilon claimed by any
    model, site ledger, leaf ledger or status document's ``privacy``. Returns what was read."""
    topology = d.topology
    n_outcomes = n_site_ledgers = n_leaf_ledgers = n_privacy = 0
    for site in KILLED:
        for o in outcomes(mon, d, site).values():
            n_outcomes += 1
            if o.released:
                assert len(o.survivors) >= THRESHOLD, (site, o.slot, o.survivors)
            else:
                assert o.reason, (site, o.slot)
        for q in unmask_requests(mon, d, site).values():
            assert len(q.survivors) >= THRESHOLD, (site, q.slot, q.survivors)
        for doc in status_docs(mon, d, site):
            ledger = secagg_extra(doc)
            if not ledger:
                continue
            n_site_ledgers += 1
            assert ledger["mechanism"] == "gaussian-secagg"
            assert ledger["threshold"] == THRESHOLD
            assert ledger["epsilon_target"] == EPSILON
            assert ledger["epsilon"] <= EPSILON + EPS_SLACK, (site, ledger)
            for r in ledger.get("recent", []):
                if r.get("released"):
                    assert r["survivors"] >= THRESHOLD, (site, r)
                    assert r.get("epsilon", 0.0) <= EPSILON + EPS_SLACK, (site, r)
                else:
                    assert r.get("reason"), (site, r)
    for leaf in topology.leaves():
        for doc in status_docs(mon, d, leaf):
            ledger = secagg_extra(doc)
            if "epsilon" in ledger:
                n_leaf_ledgers += 1
                assert ledger["mechanism"] == "gaussian-secagg"
                assert ledger["epsilon"] <= EPSILON + EPS_SLACK, (leaf, ledger)
    for node in topology.nodes:
        for doc in status_docs(mon, d, node):
            privacy = doc.get("privacy")
            if isinstance(privacy, dict) and privacy.get("epsilon") is not None:
                n_privacy += 1
                assert privacy["epsilon"] <= EPSILON + EPS_SLACK, (node, privacy)
    assert models, "the root published no model"
    for model in models:
        assert model.privacy is not None, "a model without its guarantee"
        assert model.privacy.mechanism == "gaussian-secagg"
        assert model.privacy.epsilon <= EPSILON + EPS_SLACK, model.privacy
    assert n_site_ledgers and n_leaf_ledgers, (n_site_ledgers, n_leaf_ledgers)
    return (
        f"read {len(models)} models (epsilon {max(m.privacy.epsilon for m in models):g}), "
        f"{n_outcomes} outcomes, {n_site_ledgers} site and {n_leaf_ledgers} leaf ledgers, "
        f"{n_privacy} status privacy maps"
    )
