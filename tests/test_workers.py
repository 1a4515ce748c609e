"""Agents in worker processes: balanced groups, the same answer, clear failures, no leftovers."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal

import pytest
from helpers import low_rank_data, tree_topology

from edge_runtime.broker import free_port
from edge_runtime.runner import run_topology, shared_loop_settings
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import parse_topology
from edge_runtime.workers import (
    AgentHost,
    WorkerError,
    WorkerPool,
    assign_nodes,
    peak_rss_bytes,
)
from edge_runtime.workers.pool import Job


def settings_for(broker) -> AgentSettings:
    # float64 snapshots on the wire: the runs are compared with each other to 1e-9
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


def subtrees_split(topology, groups: list[list[str]]) -> int:
    """Aggregators whose subtree is not wholly in one group."""
    where = {node: i for i, group in enumerate(groups) for node in group}
    split = 0
    for node in topology.aggregators():
        below = [n for n in topology.nodes if topology.path(n).startswith(topology.path(node))]
        split += len({where[n] for n in below}) > 1
    return split


# ----------------------------------------------------------------------- assignment
@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_assignment_covers_every_node_once_in_groups_within_one_of_each_other(workers):
    topology = tree_topology(sites=4, leaves_per_site=5)
    groups = assign_nodes(topology, workers)
    assert len(groups) == workers
    assert sorted(n for g in groups for n in g) == sorted(topology.nodes)
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_assignment_splits_at_most_one_subtree_per_cut_besides_the_root(workers):
    topology = tree_topology(sites=4, leaves_per_site=5)
    groups = assign_nodes(topology, workers)
    # the root's subtree is everything, so it is always split; each cut splits at most one more
    assert subtrees_split(topology, groups) <= 1 + (workers - 1)


def test_two_workers_on_an_even_tree_keep_every_site_whole():
    topology = tree_topology(sites=2, leaves_per_site=4)  # 11 nodes: root, 2 x (site + 4)
    first, second = assign_nodes(topology, 2)
    assert first == ["root", "site-0", "leaf-0-0", "leaf-0-1", "leaf-0-2", "leaf-0-3"]
    assert second == ["site-1", "leaf-1-0", "leaf-1-1", "leaf-1-2", "leaf-1-3"]


def test_never_more_groups_than_nodes():
    topology = tree_topology(sites=1, leaves_per_site=1)
    assert assign_nodes(topology, 8) == [["root"], ["site-0"], ["leaf-0-0"]]


def test_assignment_needs_at_least_one_worker():
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        assign_nodes(tree_topology(), 0)


def test_a_workers_job_carries_the_topology_through_pickle():
    topology = tree_topology(sites=2, leaves_per_site=2)
    job = Job.make(
        topology,
        ["site-0"],
        settings=AgentSettings(),
        n_features=5,
        connect_timeout_s=None,
        log_level="warning",
    )
    again = pickle.loads(pickle.dumps(job)).topology()
    assert again == topology
    assert again.path("leaf-1-0") == topology.path("leaf-1-0")


def test_a_workers_job_carries_an_open_aggregators_admit_table_through_pickle():
    text = "[defaults]\nrank = 3\n[[nodes]]\nid = 'root'\nopen = true\n"
    text += "[nodes.admit]\nrank = 3\nblock_size = 40\n"
    topology = parse_topology('name = "open"\n' + text)
    job = Job.make(
        topology,
        ["root"],
        settings=AgentSettings(),
        n_features=5,
        connect_timeout_s=None,
        log_level="warning",
    )
    again = pickle.loads(pickle.dumps(job)).topology()
    assert again == topology
    assert again.admitted_leaf("root", "pi-09").block_size == 40


def test_a_crowded_loop_gets_a_keepalive_it_can_answer_and_a_device_keeps_its_own():
    """One second of keepalive per 100 agents in a loop (measured at 10,240 leaves: 5 s lost
    every connection, 60 s none); an MQTT operation may take as long."""
    base = AgentSettings(keepalive_s=5, timeout_s=10.0)
    assert shared_loop_settings(base, 1) is base
    assert shared_loop_settings(base, 500) is base
    crowded = shared_loop_settings(base, 5_121)
    assert (crowded.keepalive_s, crowded.timeout_s) == (52, 52.0)
    assert crowded.host == base.host and crowded.qos == base.qos
    assert shared_loop_settings(AgentSettings(keepalive_s=90), 5_121).keepalive_s == 90


def test_peak_rss_is_the_high_water_mark_of_this_process_in_bytes():
    assert 10 * 2**20 < peak_rss_bytes() < 64 * 2**30


# ------------------------------------------------------------------------- real runs
@pytest.mark.mqtt
async def test_two_workers_give_the_in_process_answer(mosquitto):
    data = low_rank_data(800, 20, 4, seed=5)
    summaries = {}
    for workers in (1, 2):
        topology = tree_topology(sites=2, leaves_per_site=2, rank=4, block_size=16)
        summaries[workers] = await run_topology(
            topology, data, settings_for(mosquitto), settle_timeout_s=20, workers=workers
        )
    one, two = summaries[1], summaries[2]
    assert two.workers == 2 and one.workers == 1
    assert two.covered and two.leaves_reporting == 4 and two.root_n_samples == 800
    assert abs(two.error_ratio - one.error_ratio) < 1e-9
    assert two.messages > 0 and two.payload_bytes > 0 and two.merges > 0
    assert two.rejects == 0 and two.undelivered == 0
    # this process and two workers, each at least a Python with numpy
    assert two.peak_rss_bytes > one.peak_rss_bytes


@pytest.mark.mqtt
async def test_the_summary_times_every_reading_from_its_send_to_the_root(mosquitto):
    topology = tree_topology(sites=2, leaves_per_site=2, rank=4, block_size=16)
    summary = await run_topology(
        topology, low_rank_data(400, 12, 4, seed=2), settings_for(mosquitto), settle_timeout_s=20
    )
    assert summary.covered
    assert summary.readings_per_s is not None and summary.readings_per_s > 0
    assert 0 < summary.latency_p50_s <= summary.latency_p95_s <= summary.wall_s
    assert summary.resent == 0 and summary.undelivered == 0


@pytest.mark.mqtt
async def test_a_worker_killed_while_running_is_one_error_and_no_process_is_left(mosquitto):
    topology = tree_topology(sites=2, leaves_per_site=2)
    pool = WorkerPool(topology, assign_nodes(topology, 2), settings_for(mosquitto), 6)
    with pytest.raises(WorkerError) as raised:
        async with pool:
            os.kill(pool.pids[1], signal.SIGKILL)
            await pool.guard(asyncio.sleep(60))
    message = str(raised.value)
    assert "worker 2/2" in message and "SIGKILL" in message and "while running" in message
    assert "\n" not in message
    for pid in pool.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: gone


async def test_agents_that_cannot_reach_the_broker_fail_the_start_in_one_line():
    topology = tree_topology(sites=1, leaves_per_site=2)
    settings = AgentSettings(port=free_port(), timeout_s=1.0, reconnect_max_s=0.2)
    pool = WorkerPool(topology, assign_nodes(topology, 2), settings, 6, connect_timeout_s=2.0)
    with pytest.raises(WorkerError, match=r"did not connect to the broker at 127\.0\.0\.1"):
        async with pool:
            pass
    for pid in pool.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_the_same_failure_in_this_process_is_the_same_error():
    topology = tree_topology(sites=1, leaves_per_site=2)
    settings = AgentSettings(port=free_port(), timeout_s=1.0, reconnect_max_s=0.2)
    with pytest.raises(WorkerError, match=r"4 of 4 agents \(root, site-0, leaf-0-0 and 1 more\)"):
        async with AgentHost(topology, list(topology.nodes), settings, 6, connect_timeout_s=1.0):
            pass


async def test_a_worker_that_crashes_while_starting_reports_its_error():
    topology = tree_topology(sites=1, leaves_per_site=1)
    pool = WorkerPool(topology, [["root"], ["no-such-node"]], AgentSettings(), 6)
    with pytest.raises(WorkerError, match=r"worker 2/2 .*KeyError.*no-such-node"):
        async with pool:
            pass


@pytest.mark.mqtt
async def test_closing_the_pool_stops_every_agent_and_reports_them_all(mosquitto):
    topology = tree_topology(sites=2, leaves_per_site=2)
    groups = assign_nodes(topology, 2)
    async with WorkerPool(topology, groups, settings_for(mosquitto), 6) as pool:
        reports = await pool.close()
        assert await pool.close() is reports  # idempotent
    assert [r.pid for r in reports] == pool.pids
    assert [[a.node for a in r.agents] for r in reports] == groups
    for report in reports:
        assert report.peak_rss_bytes > 10 * 2**20
        # every agent announced itself online, then offline
        assert all(a.messages_published >= 2 for a in report.agents)


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
