"""A replay you can trust (issue 11 item 3), against a real Mosquitto and real agents.

- Each run is a new source (``replay:<run>:<leaf>``): a second replay into running agents adds
  its readings; ``resume`` continues a run where its leaves stopped.
- Readings the leaves reject end the replay with exit 1 and a one-line summary within
  ``--confirm-timeout`` + 5 s, with and without ``--no-resend``.
- A broker lost after the replay reached it and before its own connection: retried, every
  reading confirmed; never reached: the replay fails at once.
- The broker SIGKILLed and restarted on the same port while the replay awaits confirmations:
  the replay reconnects, re-sends what was lost and ends with every reading confirmed, 20 of
  20 runs (agents in this process, a small tree, a few hundred readings per run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

from acceptance.faults import write_topology
from edge_runtime.broker import LocalMosquitto
from edge_runtime.monitor import ModelWatcher, wait_online
from edge_runtime.replay import Replayer
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.workers import AgentHost
from tests.helpers import low_rank_data, tree_topology

pytestmark = pytest.mark.mqtt

ROOT = Path(__file__).resolve().parent.parent


def fast_settings(broker: LocalMosquitto) -> AgentSettings:
    """Short timeouts and backoff: a restarted broker is found again within a second."""
    assert broker.port is not None
    return AgentSettings(
        host=broker.host,
        port=broker.port,
        timeout_s=3.0,
        reconnect_min_s=0.05,
        reconnect_max_s=0.5,
    )


async def root_covers(topology: Topology, settings: AgentSettings, n: int, timeout_s: float):
    """The root's model once it covers ``n`` samples (None after ``timeout_s``)."""
    async with ModelWatcher(topology, settings) as watcher:
        try:
            return await watcher.wait_until(lambda m: m is not None and m.n_samples == n, timeout_s)
        except TimeoutError:
            return watcher.model


# ------------------------------------------------------------------------ new runs, resume
async def test_two_replays_into_running_agents_are_two_sources_and_the_root_covers_both(
    mosquitto,
):
    topology = tree_topology()
    settings = fast_settings(mosquitto)
    first, second = low_rank_data(400, 8, 3, seed=1), low_rank_data(400, 8, 3, seed=2)
    async with AgentHost(topology, list(topology.nodes), settings, 8):
        a = await Replayer(topology, first, settings, confirm_timeout_s=10).run()
        b = await Replayer(topology, second, settings, confirm_timeout_s=10).run()
        model = await root_covers(topology, settings, 800, 20)
    assert a.run_id != b.run_id
    for stats in (a, b):
        assert (stats.rows, stats.confirmed, stats.rejected, dict(stats.unconfirmed)) == (
            400,
            400,
            0,
            {},
        )
    assert model is not None and model.n_samples == 800


async def test_resume_continues_the_run_after_what_the_leaves_confirmed(mosquitto):
    topology = tree_topology()
    settings = fast_settings(mosquitto)
    data = low_rank_data(400, 8, 3, seed=3)
    async with AgentHost(topology, list(topology.nodes), settings, 8) as host:
        part = await Replayer(topology, data[:200], settings, run_id="run-a").run()
        assert (part.rows, part.confirmed, dict(part.unconfirmed)) == (200, 200, {})
        rest = await Replayer(topology, data, settings, run_id="run-a", resume=True).run()
        model = await root_covers(topology, settings, 400, 20)
        ingested = {a.node_id: dict(a.ingested) for a in host.agents if topology.is_leaf(a.node_id)}
    assert (rest.skipped, rest.rows, rest.confirmed, dict(rest.unconfirmed)) == (200, 200, 200, {})
    assert model is not None and model.n_samples == 400
    assert ingested == {leaf: {f"replay:run-a:{leaf}": 99} for leaf in topology.leaves()}
    with pytest.raises(ValueError, match="run id"):
        Replayer(topology, data, settings, resume=True)
    with pytest.raises(ValueError, match="run id"):
        Replayer(topology, data, settings, run_id="a/b")


# ------------------------------------------------------------------------ rejected readings
@pytest.mark.parametrize("no_resend", [False, True], ids=["resend", "no-resend"])
async def test_a_replay_the_leaves_reject_exits_1_with_a_one_line_summary_in_time(
    mosquitto, tmp_path, no_resend
):
    """Agents running with 48-feature data get a 6-column file: exit 1 within
    ``--confirm-timeout`` + 5 s, one line on stderr naming sent/confirmed/rejected/unconfirmed."""
    path, topology = write_topology(tmp_path)
    settings = fast_settings(mosquitto)
    wide = tmp_path / "wide.csv"
    narrow = tmp_path / "narrow.csv"
    np.savetxt(wide, low_rank_data(80, 48, 3, seed=4), delimiter=",")
    np.savetxt(narrow, low_rank_data(400, 6, 3, seed=5), delimiter=",")
    confirm_timeout = 3.0
    async with AgentHost(topology, list(topology.nodes), settings, 48):
        for data in (wide,):  # the agents are running with 48-feature data
            args = ["--data", str(data), "--confirm-timeout", "10"]
            code, out, err, _ = await cli_replay(path, mosquitto, args)
            assert code == 0, err
        args = ["--data", str(narrow), "--confirm-timeout", f"{confirm_timeout:g}"]
        code, out, err, elapsed = await cli_replay(
            path, mosquitto, args + (["--no-resend"] if no_resend else [])
        )
    assert code == 1, (out, err)
    assert elapsed < confirm_timeout + 5, f"{elapsed:.1f} s"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for word in ("sent 400", "confirmed 0", "rejected", "unconfirmed 400"):
        assert word in lines[0], lines[0]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["sent"] == 400 and summary["confirmed"] == 0
    assert lines[0].startswith(f"edge-runtime: replay run {summary['run']} ") or (
        f"replay run {summary['run']} " in lines[0]
    )


async def cli_replay(
    topology: Path, broker: LocalMosquitto, extra: list[str], timeout_s: float = 60
) -> tuple[int | None, str, str, float]:
    """``edge-runtime replay`` as a subprocess (the agents keep running in this loop)."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edge_runtime.cli", "replay",
        "--topology", str(topology), "--broker", broker.url, "--wait-online", "10", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - start


# ------------------------------------------------------------------------ chaos
CHAOS_RUNS = 20
CHAOS_ROWS = 300


@pytest.mark.slow
async def test_broker_killed_and_restarted_while_the_replay_awaits_confirmations_20_of_20(
    make_mosquitto,
):
    """Each run: fresh agents of a 1x2 tree and a fresh run; the broker is SIGKILLed the
    moment the replay has published its last reading (unacknowledged publishes in flight,
    nothing confirmed yet) and restarted on the same port 0.3 s later. The replay must end
    with every reading confirmed durable, and every leaf must hold exactly its rows."""
    broker = make_mosquitto(keep_dir=True)  # restarted in the same directory
    broker.start()
    settings = fast_settings(broker)
    failures: list[str] = []
    durations: list[float] = []
    for run in range(CHAOS_RUNS):
        t0 = time.monotonic()
        topology = tree_topology(sites=1, leaves_per_site=2)
        data = low_rank_data(CHAOS_ROWS, 8, 3, seed=100 + run)
        killed = asyncio.Event()

        def on_sent(rows: int, killed: asyncio.Event = killed) -> None:
            if rows == CHAOS_ROWS and not killed.is_set():
                broker.signal(signal.SIGKILL)
                killed.set()

        async with AgentHost(topology, list(topology.nodes), settings, 8) as host:
            replayer = Replayer(topology, data, settings, confirm_timeout_s=15)
            task = asyncio.create_task(replayer.run(on_sent))
            async with asyncio.timeout(10):
                await killed.wait()
            async with asyncio.timeout(5):
                while broker.running:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            await asyncio.to_thread(broker.start)  # same port
            async with asyncio.timeout(30):
                stats = await task
            held = {
                a.node_id: (a.n_samples, dict(a.ingested))
                for a in host.agents
                if topology.is_leaf(a.node_id)
            }
        expected = {
            leaf: (len(rows), {replayer.source(leaf): len(rows) - 1})
            for leaf, rows in replayer.assignment.items()
        }
        durations.append(time.monotonic() - t0)
        if stats.unconfirmed or stats.reconnects < 1 or held != expected:
            failures.append(
                f"run {run}: unconfirmed {dict(stats.unconfirmed)}, reconnects "
                f"{stats.reconnects}, error {stats.error}, leaves {held} != {expected}"
            )
    print(
        f"chaos: {CHAOS_RUNS - len(failures)}/{CHAOS_RUNS} passed, "
        f"{sum(durations):.1f} s total, slowest run {max(durations):.2f} s"
    )
    assert not failures, "\n".join(failures)


async def test_a_replay_that_reached_the_broker_survives_losing_it_before_its_first_connection(
    make_mosquitto,
):
    """``edge-runtime replay`` first waits for the leaves online on a connection of its own,
    then connects again to replay. A broker lost in between (a restart) is retried with
    backoff and the run ends with every reading confirmed (``run(reached=True)``, what the
    command passes); only a replay that never reached the broker fails at once (a wrong
    address). The acceptance schedule with seed 2 kills the broker in that gap under load."""
    broker = make_mosquitto(keep_dir=True)  # restarted in the same directory, same port
    broker.start()
    settings = fast_settings(broker)
    topology = tree_topology(sites=1, leaves_per_site=2)
    data = low_rank_data(200, 8, 3, seed=11)
    async with AgentHost(topology, list(topology.nodes), settings, 8) as host:
        assert await wait_online(topology, topology.leaves(), settings, 10.0) == []
        broker.signal(signal.SIGKILL)
        async with asyncio.timeout(5):
            while broker.running:
                await asyncio.sleep(0.01)
        with pytest.raises(aiomqtt.MqttError):  # never reached: the wrong-address case
            async with asyncio.timeout(10):
                await Replayer(topology, data, settings).run()
        replayer = Replayer(topology, data, settings, confirm_timeout_s=15)
        task = asyncio.create_task(replayer.run(reached=True))
        await asyncio.sleep(0.5)
        assert not task.done(), "the replay gave up on a broker it had reached"
        await asyncio.to_thread(broker.start)
        async with asyncio.timeout(30):
            stats = await task
        held = {a.node_id: a.n_samples for a in host.agents if topology.is_leaf(a.node_id)}
    assert stats.error is None and stats.reconnects >= 1
    assert stats.unconfirmed == {} and stats.confirmed == len(data)
    assert held == {leaf: len(rows) for leaf, rows in replayer.assignment.items()}


async def test_a_resumed_run_at_a_rate_continues_at_once() -> None:
    """Issue 21 (acceptance finding B): ``--resume`` with ``--rate`` used to wait as long as
    the killed run had been sending (the schedule counted from its start) before sending
    the first unconfirmed reading. Now the schedule continues at that reading: it is due at
    once."""
    from edge_runtime.topology import parse_topology

    topology = parse_topology(
        '[defaults]\nrank = 1\n[[nodes]]\nid = "root"\n[[nodes]]\nid = "a"\nparent = "root"\n'
    )
    data = np.zeros((1000, 2))
    replayer = Replayer(topology, data, AgentSettings(), rate=100.0, run_id="r1", resume=True)
    stream = replayer._streams["a"]
    stream.ingested = 599  # the leaf's retained confirmation: 600 readings ingested
    replayer.confirm_timeout_s = 0.0  # no waiting for confirmations here
    await replayer._resume()
    assert stream.skipped == 600
    start = time.monotonic()
    assert replayer._due(stream, start) > stream.sent  # due now, not in 6 s


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
