"""Faults injected for real (issue 4): processes killed by pid, a real Mosquitto killed,
frozen and restarted, a straggler, a leaf lost for good, snapshots duplicated and shuffled.

Every test runs the tree root -> site-0, site-1 -> two leaves each as separate
``edge-runtime agent`` processes against a real Mosquitto, replays 2000 x 8 rank-3 readings
with ``edge-runtime replay`` (500 per leaf, in order) and compares the root's model with the
no-fault estimate. That estimate is computed offline (`faults.offline_model`): each leaf's
FPCA-Edge over its rows in order, merged up the tree in topology order. The agents compute
the very same thing when no reading is lost or counted twice, since the merge of the
children's latest snapshots does not depend on the order they arrived in;
`test_duplicated_and_shuffled_snapshots_give_the_identical_estimate` checks the real no-fault
run against it.

Measured numbers are printed (``pytest -rP`` shows them) as ``FAULTS <test>: ...`` lines.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from helpers import low_rank_data

from acceptance.faults import (
    KEEPALIVE_S,
    Cluster,
    Monitor,
    MqttProxy,
    offline_model,
    send_signal,
    stdout_of,
    wait_exit,
    write_topology,
)
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import Subspace, principal_angles
from edge_runtime.topology import Topology
from edge_runtime.wire import SubspaceMessage, encode_readings

pytestmark = [pytest.mark.mqtt, pytest.mark.timeout(150)]

N_SAMPLES, N_FEATURES, RANK, BLOCK = 2000, 8, 3, 20
PER_LEAF = N_SAMPLES // 4
SAME_ANGLE = 1e-6  # rad: "the same subspace as the no-fault run"
RATE = "400"  # samples/s over the 4 leaves: the replay takes 5 s, faults land mid-replay
CONFIRM = "30"  # replay --confirm-timeout


@dataclass
class Scenario:
    work: Path
    data_path: Path
    data: np.ndarray
    topology_path: Path
    topology: Topology
    reference: Subspace  # the no-fault root model (offline)
    expected: dict[str, int]  # samples per leaf

    def cluster(self, url: str) -> Cluster:
        return Cluster(self.work, self.topology_path, self.topology, url)


SCHEDULING_SLACK_S = 0.5  # seconds: an event loop on a loaded machine runs late


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    raw = low_rank_data(N_SAMPLES, N_FEATURES, RANK, seed=42)
    data_path = tmp_path / "readings.txt"
    np.savetxt(data_path, raw)
    data = load_dataset(data_path)  # exactly what the replay sends
    topology_path, topology = write_topology(tmp_path, rank=RANK, block_size=BLOCK)
    reference, _ = offline_model(topology, data)
    expected = {leaf: len(rows) for leaf, rows in topology.split_rows(N_SAMPLES).items()}
    assert set(expected.values()) == {PER_LEAF}
    return Scenario(tmp_path, data_path, data, topology_path, topology, reference, expected)


def report(name: str, **numbers: object) -> None:
    print(f"FAULTS {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


def largest_angle(model: SubspaceMessage, reference: Subspace) -> float:
    return float(principal_angles(model.subspace.basis, reference.basis).max())


def coverage(model: SubspaceMessage | None) -> dict[str, int]:
    return {} if model is None else {k: v for k, v in model.provenance.items() if v}


def leaf_details(mon: Monitor, topology: Topology) -> dict[str, dict]:
    """The latest status document of every leaf: samples, sequences, gaps, duplicates."""
    out = {}
    for leaf in topology.leaves():
        details = mon.details(leaf)
        if not details:
            out[leaf] = {}
            continue
        d = details[-1][1]
        extra = d.get("extra", {})
        out[leaf] = {"n_samples": d.get("n_samples")} | {
            k: extra.get(k) for k in ("ingested", "durable", "gap_rows", "duplicates")
        }
    return out


def agent_logs(cluster: Cluster) -> str:
    return "\n".join(f"--- {p.name} (pid {p.pid}):\n{p.tail(800)}" for p in cluster.history)


async def replay_result(cluster: Cluster, replay, timeout_s: float) -> tuple[int | None, dict]:
    """(exit status or None if still running after timeout_s, its JSON summary or {})."""
    code = await wait_exit(replay, timeout_s)
    summary: dict = {}
    if code == 0:
        lines = [line for line in stdout_of(replay).splitlines() if line.strip()]
        if lines:
            summary = json.loads(lines[-1])
    return code, summary


async def final_model(
    mon: Monitor, expected: dict[str, int], timeout_s: float = 30
) -> SubspaceMessage | None:
    """The root's model once it covers ``expected`` exactly (else the latest model)."""
    return await mon.wait_model(lambda m: coverage(m) == expected, timeout_s)


async def wait_all_online(
    mon: Monitor, topology: Topology, cluster: Cluster, timeout_s: float = 30
) -> None:
    """Every node's retained status is "online" (fails early, with its log, if one exits)."""

    def online() -> bool:
        return all((s := mon.status(n)) and s[-1][1] == b"online" for n in topology.nodes)

    await mon.wait_for(lambda: online() or bool(cluster.dead()), timeout_s)
    assert not cluster.dead(), f"agents exited: {cluster.dead()}"
    assert online(), {n: mon.status(n)[-1:] for n in topology.nodes}


def assert_no_fault_estimate(model: SubspaceMessage | None, sc: Scenario, replayed: int) -> None:
    assert model is not None, "the root published no model"
    assert coverage(model) == sc.expected, f"coverage {coverage(model)} != {sc.expected}"
    assert model.n_samples == replayed == N_SAMPLES
    angle = largest_angle(model, sc.reference)
    assert angle < SAME_ANGLE, f"largest principal angle {angle:.3g} rad vs the no-fault run"


# ------------------------------------------------------------------------ 1. broker crash
async def test_broker_sigkilled_mid_replay_and_restarted_loses_and_doubles_nothing(
    make_mosquitto, scenario
):
    sc = scenario
    broker = make_mosquitto(keep_dir=True)
    broker.start()
    cluster = sc.cluster(broker.url)
    try:
        async with Monitor(broker.host, broker.port, sc.topology) as mon:
            cluster.start_all()
            await wait_all_online(mon, sc.topology, cluster)
            replay = cluster.replay(sc.data_path, "--rate", RATE, "--confirm-timeout", CONFIRM)
            assert await mon.wait_for(
                lambda: (m := mon.model()) is not None and m.n_samples >= 400, 30
            ), f"the root never covered 400 samples\n{agent_logs(cluster)}"
            assert replay.popen.poll() is None, "the replay ended before the fault"
            covered_at_kill = mon.model().n_samples
            # inside the autosave window: Mosquitto has not saved anything yet
            assert not (broker.data_dir / "mosquitto.db").exists()
            broker.signal(signal.SIGKILL)
            while broker.running:
                await asyncio.sleep(0.02)
            t_kill = time.time()
            await asyncio.sleep(1.0)
            await asyncio.to_thread(broker.start)  # same port, same (empty) directory
            down_s = time.time() - t_kill
            code, summary = await replay_result(cluster, replay, 60)
            assert code == 0, f"replay exit {code}: {replay.tail()}\n{agent_logs(cluster)}"
            model = await final_model(mon, sc.expected)
            report(
                "broker_kill",
                covered_at_kill=covered_at_kill,
                down_s=round(down_s, 2),
                replay=summary,
                final_coverage=coverage(model),
                angle=None if model is None else largest_angle(model, sc.reference),
                leaves=leaf_details(mon, sc.topology),
            )
            assert_no_fault_estimate(model, sc, summary["samples"])
            assert cluster.dead() == {}
    finally:
        await cluster.stop_all()


# ------------------------------------------------------------------------ 2. broker frozen
@pytest.mark.slow
async def test_broker_frozen_20s_is_detected_within_two_keepalives_and_recovered(
    make_mosquitto, scenario
):
    sc = scenario
    broker = make_mosquitto(keep_dir=True)
    broker.start()
    cluster = sc.cluster(broker.url)
    try:
        async with Monitor(broker.host, broker.port, sc.topology) as mon:
            cluster.start_all()
            await wait_all_online(mon, sc.topology, cluster)
            replay = cluster.replay(sc.data_path, "--rate", RATE, "--confirm-timeout", CONFIRM)
            assert await mon.wait_for(
                lambda: (m := mon.model()) is not None and m.n_samples >= 400, 30
            ), agent_logs(cluster)
            t_stop = time.time()
            broker.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(20)
            finally:
                broker.signal(signal.SIGCONT)
            t_cont = time.time()
            code, summary = await replay_result(cluster, replay, 60)
            model = await final_model(mon, sc.expected)
            detection = {}
            reconnected = {}
            for node, proc in cluster.procs.items():
                lost = [t for t in proc.event_times("connection_lost") if t >= t_stop]
                detection[node] = round(lost[0] - t_stop, 2) if lost else None
                back = [t for t in proc.event_times("connected") if t >= t_cont]
                reconnected[node] = round(back[0] - t_cont, 2) if back else None
            reconnects = {
                n: (d[-1][1].get("extra", {}).get("reconnects") if (d := mon.details(n)) else None)
                for n in sc.topology.nodes
            }
            report(
                "broker_freeze",
                detection_s=detection,
                reconnected_after_cont_s=reconnected,
                status_reconnects=reconnects,
                replay_exit=code,
                replay=summary,
                final_coverage=coverage(model),
                leaves=leaf_details(mon, sc.topology),
            )
            # The bound is two keep-alives; the log line's time comes when the agent's event
            # loop gets to run, late by a few hundred ms on a loaded 2-core machine (seen:
            # 10.03 s with four test workers), hence the scheduling slack.
            bound = 2 * KEEPALIVE_S + SCHEDULING_SLACK_S
            late = {n: d for n, d in detection.items() if d is None or d > bound}
            assert not late, f"not detected within 2 x keepalive (+ slack, {bound} s): {late}"
            assert all(v is not None for v in reconnected.values()), reconnected
            assert all(isinstance(v, int) and v >= 1 for v in reconnects.values()), reconnects
            assert code == 0, f"replay exit {code}: {replay.tail()}"
            assert_no_fault_estimate(model, sc, summary["samples"])
            assert cluster.dead() == {}
    finally:
        await cluster.stop_all()


# ------------------------------------------------------------------------ 3. aggregator crash
async def test_aggregator_sigkilled_and_restarted_rebuilds_within_2s(mosquitto, scenario):
    sc = scenario
    cluster = sc.cluster(mosquitto.url)
    victim, children = "site-0", sc.topology.children("site-0")
    try:
        async with Monitor(mosquitto.host, mosquitto.port, sc.topology) as mon:
            cluster.start_all()
            await wait_all_online(mon, sc.topology, cluster)
            replay = cluster.replay(sc.data_path, "--rate", RATE, "--confirm-timeout", CONFIRM)
            assert await mon.wait_for(
                lambda: any(s.n_samples >= 200 for _, s in mon.snapshots(victim)), 30
            ), agent_logs(cluster)
            send_signal(cluster.procs[victim], signal.SIGKILL)
            assert await wait_exit(cluster.procs[victim], 5) == -signal.SIGKILL
            await asyncio.sleep(1.0)  # the leaves keep publishing meanwhile
            proc = cluster.start(victim)
            assert await mon.wait_for(lambda: bool(proc.event_times("connected")), 20), proc.tail()
            t_connected = proc.event_times("connected")[0]
            # what the children had published (hence retained) when it reconnected
            before = {
                c: max((s.n_samples for t, s in mon.snapshots(c) if t <= t_connected), default=0)
                for c in children
            }

            def rebuilt() -> bool:
                return any(
                    all(s.provenance.get(c, 0) >= before[c] for c in children)
                    for _, s in mon.snapshots(victim, since=proc.started)
                )

            assert await mon.wait_for(rebuilt, 10), (mon.snapshots(victim)[-3:], before)
            t_rebuilt, first = next(
                (t, s)
                for t, s in mon.snapshots(victim, since=proc.started)
                if all(s.provenance.get(c, 0) >= before[c] for c in children)
            )
            code, summary = await replay_result(cluster, replay, 60)
            model = await final_model(mon, sc.expected)
            report(
                "aggregator_kill",
                children_at_reconnect=before,
                first_snapshot=dict(first.provenance),
                start_to_connect_s=round(t_connected - proc.started, 3),
                connect_to_rebuilt_s=round(t_rebuilt - t_connected, 3),
                replay=summary,
                final_coverage=coverage(model),
            )
            assert t_rebuilt - t_connected <= 2.0, "rebuild took more than 2 s after connecting"
            assert code == 0, f"replay exit {code}: {replay.tail()}"
            assert_no_fault_estimate(model, sc, summary["samples"])
            assert cluster.dead() == {}
    finally:
        await cluster.stop_all()


# ------------------------------------------------------------------------ 4. leaf crash
CHECKPOINT_EVERY = 1  # blocks


@pytest.mark.parametrize(
    ("sig", "resend"),
    [
        pytest.param(signal.SIGKILL, False, id="sigkill-no-resend"),
        pytest.param(signal.SIGKILL, True, id="sigkill-resend"),
        pytest.param(signal.SIGTERM, False, id="sigterm-no-resend"),
    ],
)
async def test_leaf_restarted_loses_at_most_the_checkpoint_cadence(
    mosquitto, scenario, sig, resend
):
    """The victim talks to the broker through `MqttProxy`, which records every reading it
    acknowledged (PUBACK): the broker never delivers those again, so the ones it had
    acknowledged but not checkpointed when it died — seq ``durable+1 .. last acked`` — are
    lost unless the replay re-sends them."""
    sc = scenario
    victim = "leaf-0-0"
    topic = sc.topology.nodes[victim].sensor_topic
    state_dir = sc.work / "state"
    state_dir.mkdir()
    state = ["--state-dir", str(state_dir), "--checkpoint-every", str(CHECKPOINT_EVERY)]
    debug = ["--log-level", "debug"]  # the victim's log explains a failure
    cadence = CHECKPOINT_EVERY * BLOCK
    cluster = sc.cluster(mosquitto.url)
    try:
        async with (
            MqttProxy(mosquitto.host, mosquitto.port) as proxy,
            Monitor(mosquitto.host, mosquitto.port, sc.topology) as mon,
        ):
            for node in sc.topology.nodes:
                leaf = sc.topology.is_leaf(node)
                cluster.start(
                    node,
                    broker_url=proxy.url if node == victim else None,
                    extra=(state + debug if node == victim else state) if leaf else (),
                )
            await wait_all_online(mon, sc.topology, cluster)
            flags = ["--rate", RATE, "--confirm-timeout", CONFIRM]
            replay = cluster.replay(sc.data_path, *flags, *([] if resend else ["--no-resend"]))
            assert await mon.wait_for(lambda: len(proxy.acked.get(topic, [])) >= 200, 30), (
                agent_logs(cluster)
            )
            old = cluster.procs[victim]
            t_signal = time.time()
            send_signal(old, sig)
            code = await wait_exit(old, 15)
            if sig == signal.SIGTERM:
                assert code == 0, (
                    f"SIGTERM: exit status {code} after 15 s\n{old.tail()}\n"
                    + f"SIGTERM at {t_signal:.3f}; the victim's packets around it:\n"
                    + "\n".join(
                        proxy.trace_tail(len(proxy.conns) - 1, 400, t_signal - 0.5, t_signal + 2)
                    )
                )
            assert code is not None, f"still running 15 s after {sig!r}\n{old.tail()}"
            # The proxy has passed on the dead connection's last bytes (its last PUBACKs
            # recorded) once it has closed it: wait for that, not a fixed time (0.3 s was
            # too short on a loaded machine).
            assert await mon.wait_for(lambda: not any(c.open for c in proxy.conns), 10), (
                "the proxy still holds the victim's connection 10 s after its exit"
            )
            first_conns = len(proxy.conns)
            acked = proxy.acked_through(topic, conn_below=first_conns)
            last_acked = max(acked)
            assert sorted(acked) == list(range(last_acked + 1)), "readings acked out of order"
            await asyncio.sleep(1.0)  # readings queue up in the broker meanwhile
            proc = cluster.start(victim, broker_url=proxy.url, extra=state + debug)
            assert await mon.wait_for(lambda: bool(mon.details(victim, since=proc.started)), 20), (
                proc.tail()
            )
            restored = mon.details(victim, since=proc.started)[0][1]
            sources = [s for s in restored["extra"]["durable"] if s.endswith(f":{victim}")]
            assert len(sources) <= 1, sources  # one replay run: replay:<run>:<leaf>
            durable = restored["extra"]["durable"].get(sources[0], -1) if sources else -1
            lost = last_acked - durable if not resend else 0
            rcode, summary = await replay_result(cluster, replay, 60)
            expected = dict(sc.expected)
            expected[victim] -= lost
            model = await final_model(mon, expected)
            report(
                f"leaf_{signal.Signals(sig).name}_{'resend' if resend else 'no_resend'}",
                exit_code=code,
                last_acked_seq=last_acked,
                durable_seq_restored=durable,
                acked_not_checkpointed=last_acked - durable,
                restored_n_samples=restored.get("n_samples"),
                lost_expected=lost,
                replay_exit=rcode,
                replay=summary,
                final_coverage=coverage(model),
                angle=None if model is None else largest_angle(model, sc.reference),
            )
            if sig == signal.SIGTERM:
                assert mon.status(victim) and any(
                    p == b"offline" and t <= proc.started for t, p in mon.status(victim)
                ), "no retained offline status on SIGTERM"
                assert durable == last_acked, (
                    f"SIGTERM: acknowledged up to seq {last_acked}, checkpointed {durable}"
                )
            assert restored.get("n_samples") == durable + 1, restored
            assert 0 <= lost <= cadence, f"{lost} readings lost, checkpoint cadence {cadence}"
            assert coverage(model) == expected, f"coverage {coverage(model)} != {expected}"
            assert model.n_samples == N_SAMPLES - lost
            if resend or sig == signal.SIGTERM:
                assert lost == 0
                assert rcode == 0, f"replay exit {rcode}: {replay.tail()}"
                angle = largest_angle(model, sc.reference)
                assert angle < SAME_ANGLE, f"largest principal angle {angle:.3g} rad"
            assert cluster.dead() == {}
            await cluster.stop_all()  # while the proxy still runs
    finally:
        await cluster.stop_all()


# ------------------------------------------------------------------------ 5. straggler
async def test_straggler_10x_slower_does_not_hold_the_root_back(mosquitto, scenario):
    sc = scenario
    straggler = "leaf-1-1"
    fast_leaves = [leaf for leaf in sc.topology.leaves() if leaf != straggler]
    prefix = sc.topology.prefix
    # the same tree seen by two replays: the fast leaves' rows, and the straggler's rows
    fast_topo, _ = write_topology(
        sc.work,
        "fast.toml",
        prefix=prefix,
        sites={"site-0": ["leaf-0-0", "leaf-0-1"], "site-1": ["leaf-1-0"]},
        rank=RANK,
        block_size=BLOCK,
    )
    slow_topo, _ = write_topology(
        sc.work, "slow.toml", prefix=prefix, sites={"site-1": [straggler]}, rank=RANK,
        block_size=BLOCK,
    )  # fmt: skip
    split = sc.topology.split_rows(N_SAMPLES)
    fast_data, slow_data = sc.work / "fast.txt", sc.work / "slow.txt"
    np.savetxt(fast_data, sc.data[np.concatenate([split[leaf] for leaf in fast_leaves])])
    np.savetxt(slow_data, sc.data[split[straggler]])
    fast_rate, slow_rate = 1500, 50  # per leaf: 500/s and 50/s
    cluster = sc.cluster(mosquitto.url)
    try:
        async with Monitor(mosquitto.host, mosquitto.port, sc.topology) as mon:
            cluster.start_all()
            await wait_all_online(mon, sc.topology, cluster)
            t0 = time.time()
            slow = cluster.replay(
                slow_data, "--rate", str(slow_rate), "--confirm-timeout", CONFIRM,
                topology=slow_topo,
            )  # fmt: skip
            fast = cluster.replay(
                fast_data, "--rate", str(fast_rate), "--confirm-timeout", CONFIRM,
                topology=fast_topo,
            )  # fmt: skip
            fast_code, fast_summary = await replay_result(cluster, fast, 30)
            t_fast_done = time.time()

            def fast_covered(m: SubspaceMessage) -> bool:
                return all(m.provenance.get(leaf, 0) == PER_LEAF for leaf in fast_leaves)

            await mon.wait_model(fast_covered, 15)
            first_fast = next(((t, m) for t, m in mon.models() if fast_covered(m)), None)
            slow_running_then = slow.popen.poll() is None
            slow_code, slow_summary = await replay_result(cluster, slow, 40)
            t_slow_done = time.time()
            model = await final_model(mon, sc.expected)
            during = [  # the root's models while the straggler's replay ran
                m.provenance.get(straggler, 0) for t, m in mon.models() if t0 <= t <= t_slow_done
            ]
            report(
                "straggler",
                fast_replay_s=round(t_fast_done - t0, 2),
                slow_replay_s=round(t_slow_done - t0, 2),
                fast_covered_after_s=None if first_fast is None else round(first_fast[0] - t0, 2),
                straggler_then=None
                if first_fast is None
                else first_fast[1].provenance.get(straggler, 0),
                model_updates_while_straggling=len(during),
                straggler_values=len(set(during)),
                final_coverage=coverage(model),
            )
            assert fast_code == 0, fast.tail()
            assert slow_code == 0, slow.tail()
            assert first_fast is not None, "the root never covered the fast leaves"
            # the root did not wait: the fast leaves were covered while the straggler had
            # sent at most half of its readings and was still sending
            assert slow_running_then
            assert first_fast[1].provenance.get(straggler, 0) <= PER_LEAF // 2
            # and kept publishing as the straggler's data arrived: its 500 readings over
            # 10 s cross the publish deadband (count doubled: 50 -> 100 -> 200 -> 400, or
            # the 5 s maximum interval) at least 4 times while it sends (counted from the
            # start: the fast leaves' coverage can come after its first step, which then
            # fell outside a window opened there: [62, 143, 304] once on a loaded machine)
            assert len(set(during) - {0}) >= 4, sorted(set(during))
            assert during == sorted(during)
            assert_no_fault_estimate(model, sc, fast_summary["samples"] + slow_summary["samples"])
            assert cluster.dead() == {}
    finally:
        await cluster.stop_all()


# ------------------------------------------------------------------------ 6. leaf lost
async def test_leaf_dead_for_good_keeps_its_contribution_and_is_marked_offline(mosquitto, scenario):
    """Two leaves die and never come back: leaf-0-1 by SIGKILL (its socket closes), and
    leaf-1-1 by SIGKILL behind a proxy that keeps its connection open and silent, as after a
    power cut, so the broker learns of it only through the keepalive."""
    sc = scenario
    crashed, cut_off = "leaf-0-1", "leaf-1-1"
    alive = ["leaf-0-0", "leaf-1-0"]
    cluster = sc.cluster(mosquitto.url)
    try:
        async with (
            MqttProxy(mosquitto.host, mosquitto.port) as proxy,
            Monitor(mosquitto.host, mosquitto.port, sc.topology) as mon,
        ):
            for node in sc.topology.nodes:
                cluster.start(node, broker_url=proxy.url if node == cut_off else None)
            await wait_all_online(mon, sc.topology, cluster)
            replay = cluster.replay(sc.data_path, "--confirm-timeout", CONFIRM)
            code, _ = await replay_result(cluster, replay, 60)
            assert code == 0, f"replay exit {code}: {replay.tail()}\n{agent_logs(cluster)}"
            model = await final_model(mon, sc.expected)
            assert coverage(model) == sc.expected
            proxy.hold_on_client_close = True
            t_kill = time.time()
            for node in (crashed, cut_off):
                send_signal(cluster.procs[node], signal.SIGKILL)
            for node in (crashed, cut_off):
                assert await wait_exit(cluster.procs[node], 5) == -signal.SIGKILL

            def offline_at(node: str) -> float | None:
                times = [t for t, p in mon.status(node) if p == b"offline" and t >= t_kill]
                return times[0] - t_kill if times else None

            # A closed socket: the broker publishes the Will at once. A silent connection:
            # Mosquitto 2.0 disconnects a client once now - last packet > keepalive * 3 // 2
            # whole seconds, checking only every 6 s (keepalive.c: last_check + 5 < now), so
            # 1.5 x keepalive plus up to 7 s of the broker's own granularity.
            limits = {crashed: 1.5 * KEEPALIVE_S + 2.0, cut_off: 1.5 * KEEPALIVE_S + 7.0}
            await mon.wait_for(
                lambda: offline_at(crashed) is not None and offline_at(cut_off) is not None,
                max(limits.values()) + 1,
            )
            offline_s = {n: offline_at(n) for n in (crashed, cut_off)}
            # more data for the living leaves: the root merges again, keeping the dead ones
            extra = low_rank_data(2 * BLOCK, N_FEATURES, RANK, seed=7)
            async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
                for leaf in alive:
                    for i, row in enumerate(extra):
                        payload = encode_readings(row, source=f"extra:{leaf}", seq=i)
                        await client.publish(sc.topology.nodes[leaf].sensor_topic, payload, qos=1)
            expected = {**sc.expected, **{leaf: PER_LEAF + len(extra) for leaf in alive}}
            model = await final_model(mon, expected)
            total = N_SAMPLES + len(alive) * len(extra)
            watch = cluster.watch("--json", "--until-samples", str(total), "--timeout", "15")
            wcode = await wait_exit(watch, 25)
            lines = [json.loads(x) for x in stdout_of(watch).splitlines() if x.strip()]
            nodes = lines[-1].get("nodes") if lines else None
            report(
                "leaf_lost",
                offline_after_s={
                    n: None if v is None else round(v, 2) for n, v in offline_s.items()
                },
                final_coverage=coverage(model),
                watch_exit=wcode,
                watch_nodes=nodes,
            )
            for node, seconds in offline_s.items():
                assert seconds is not None and seconds <= limits[node], (
                    f"{node} not offline within {limits[node]} s: {seconds}"
                )
            assert coverage(model) == expected, f"coverage {coverage(model)} != {expected}"
            assert model.n_samples == total
            assert wcode == 0, watch.tail()
            assert nodes is not None, f"watch --json gave no 'nodes': {lines[-1:]}"
            assert nodes.get(crashed) == "offline" and nodes.get(cut_off) == "offline", nodes
            assert all(nodes.get(leaf) in ("online", "stale") for leaf in alive), nodes
            await cluster.stop_all()  # while the proxy still runs
    finally:
        await cluster.stop_all()


# ------------------------------------------------------------------------ 7. dup + shuffle
async def test_duplicated_and_shuffled_snapshots_give_the_identical_estimate(
    mosquitto, scenario, tmp_path
):
    """A no-fault run records every leaf snapshot it published; re-published twice each, in
    shuffled order, to a fresh set of aggregators, they give the identical root model."""
    sc = scenario
    cluster = sc.cluster(mosquitto.url)
    try:
        async with Monitor(mosquitto.host, mosquitto.port, sc.topology) as mon:
            cluster.start_all()
            await wait_all_online(mon, sc.topology, cluster)
            replay = cluster.replay(sc.data_path, "--rate", "2000")
            code, summary = await replay_result(cluster, replay, 60)
            assert code == 0, f"replay exit {code}: {replay.tail()}\n{agent_logs(cluster)}"
            model = await final_model(mon, sc.expected)
            assert_no_fault_estimate(model, sc, summary["samples"])
            await mon.wait_quiet(sc.topology.model_topic(), 1.0, 10)
            original = mon.model()
            recorded = [
                (leaf, r.payload)
                for leaf in sc.topology.leaves()
                for r in mon.on(sc.topology.subspace_topic(leaf))
                if r.payload
            ]
        await cluster.stop_all()

        # a fresh tree (new prefix, new agents) fed the recorded snapshots twice, shuffled
        topo2_path, topo2 = write_topology(tmp_path, "fresh.toml", rank=RANK, block_size=BLOCK)
        fresh = Cluster(tmp_path / "fresh", topo2_path, topo2, mosquitto.url)
        cluster = fresh
        async with Monitor(mosquitto.host, mosquitto.port, topo2) as mon2:
            fresh.start_all(topo2.aggregators())
            assert await mon2.wait_for(
                lambda: all(
                    (s := mon2.status(n)) and s[-1][1] == b"online" for n in topo2.aggregators()
                ),
                30,
            ), agent_logs(fresh)
            messages = recorded * 2
            random.Random(4).shuffle(messages)
            async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
                for leaf, payload in messages:
                    await client.publish(topo2.subspace_topic(leaf), payload, qos=1)
            again = await final_model(mon2, sc.expected)
            await mon2.wait_quiet(topo2.model_topic(), 1.0, 10)
            again = mon2.model()
            duplicates = {
                n: (d[-1][1].get("extra", {}).get("duplicates") if (d := mon2.details(n)) else None)
                for n in ("site-0", "site-1")
            }
            report(
                "dup_shuffle",
                snapshots_recorded=len(recorded),
                published=len(messages),
                aggregator_duplicates=duplicates,
                final_coverage=coverage(again),
            )
            assert again is not None
            assert coverage(again) == coverage(original) == sc.expected
            assert again.n_samples == original.n_samples == N_SAMPLES
            np.testing.assert_array_equal(again.subspace.basis, original.subspace.basis)
            np.testing.assert_array_equal(
                again.subspace.singular_values, original.subspace.singular_values
            )
            assert cluster.dead() == {}
    finally:
        await cluster.stop_all()
