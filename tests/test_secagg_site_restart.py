"""A secure-aggregation site that restarts keeps its running sum (issue 26).

The core (`SecAggSite.export_state` / `restore_state`) on a virtual clock: a state through
msgpack gives the same Gram and ledger, and the next slots continue the continual release's
segment as if the site had never stopped; a state of other settings or a broken one is
refused in one line and changes nothing; slots the state does not record close their
segment. The shell (`SecAggAggregator`) writes ``<node>.secagg`` and starts afresh from a
file it cannot read or take. Against a real Mosquitto: the site's agent is closed after
slot 0 and a new one started on the same state directory continues with slot 0's sum, which
the root's model still covers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.agents.aggregator.core.secagg_site import SecAggSite
from edge_runtime.agents.aggregator.shell.secagg import STATE_FORMAT, SecAggAggregator
from edge_runtime.agents.common.core.actions import WriteCheckpoint
from tests.test_secagg_shells import D as SHELL_D
from tests.test_secagg_shells import StandIn
from tests.test_secagg_shells import topology as shell_topology
from tests.test_secagg_site import IDS, PERIOD, TIMEOUTS, Site, _calibration
from tests.test_secagg_site import D as SITE_D

IDENTITY = {"node": "site", "deployment": "test-site"}


def fresh(site: Site, *, first_slot: int, **changes) -> SecAggSite:
    """A new core for ``site``'s leaves (as a restarted shell builds it), at its clock."""
    horizon = changes.pop("horizon", site.site.horizon)
    threshold = changes.pop("threshold", site.site.threshold)
    epsilon = changes.pop("epsilon", site.site.calibration.epsilon)
    options = {
        "epsilon": epsilon,
        "delta": 1e-5,
        "clip_norm": site.site.clip_norm,
        "horizon": horizon,
        "calibration": _calibration(epsilon, threshold, horizon),
        "slot_period_s": PERIOD,
        "timeouts": TIMEOUTS,
        "now": site.now,
        "first_slot": first_slot,
    }
    options.update(changes)
    leaves = options.pop("leaf_ids", site.ids)
    return SecAggSite(leaves, threshold, SITE_D, **options)


def through_msgpack(state: dict) -> dict:
    return msgpack.unpackb(msgpack.packb(state, use_bin_type=True), raw=False)


@pytest.mark.parametrize("horizon", [1, 4])
def test_a_restored_site_has_the_same_sum_and_continues_the_segment(horizon: int) -> None:
    twin, restarted = Site(horizon=horizon, seed=3), Site(horizon=horizon, seed=3)
    for slot in range(6):  # slot 2 skipped before its unmask request (carried over)
        for site in (twin, restarted):
            site.add_rows()
            silent = {"pi-00": "share", "pi-01": "share"} if slot == 2 else {}
            site.run_slot(silent=silent)
        if slot == 1:  # the site restarts between slots 1 and 2 (mid-segment at H = 4)
            state = through_msgpack(restarted.site.export_state(IDENTITY))
            before = restarted.site.status()
            new = fresh(restarted, first_slot=restarted.retained.slot + 1)
            assert new.restore_state(state, IDENTITY) == 0
            np.testing.assert_array_equal(new.gram, restarted.site.gram)
            assert new.noise_std == restarted.site.noise_std
            assert new.status() == before
            restarted.site = new
        np.testing.assert_array_equal(restarted.site.gram, twin.site.gram)
    status = restarted.site.status()
    assert status == twin.site.status()
    assert status["slots_released"] == 5 and status["slots_unrecorded"] == 0
    np.testing.assert_allclose(restarted.site.gram, sum(restarted.exact.values()), atol=0.05)


def test_a_state_of_other_settings_or_a_broken_one_is_refused_in_one_line() -> None:
    site = Site(horizon=4, seed=4)
    site.add_rows()
    site.run_slot()
    state = through_msgpack(site.site.export_state(IDENTITY))
    cases = [
        ({"threshold": 4}, {}, "threshold differs"),
        ({"epsilon": 2e6}, {}, "calibration epsilon differs"),
        ({"horizon": 2}, {}, "horizon differs"),
        ({"leaf_ids": (*IDS[:3], "pi-09")}, {}, "leaves differs"),
        ({"clip_norm": 3.0}, {}, "clip_norm differs"),
        ({}, {"identity": {"node": "site", "deployment": "other"}}, "identity"),
        ({}, {"gram": b"\0" * 8}, "gram must be 288 bytes"),
        ({}, {"closed": np.full((SITE_D, SITE_D), np.nan).tobytes()}, "closed has non-finite"),
        ({}, {"gram": np.eye(SITE_D).tobytes()}, "gram differs from the closed output"),
        ({}, {"positions": [0, 0]}, "differ in length"),
        ({}, {"version": 2}, "version 2"),
        ({}, {"counts": {"released": 1}}, "counts must have"),
        ({}, {"next_slot": -1}, "next_slot must be an int"),
    ]
    for changes, edits, message in cases:
        new = fresh(site, first_slot=1, **changes)
        untouched = new.status()
        with pytest.raises(ValueError, match=message) as info:
            new.restore_state({**state, **edits}, IDENTITY)
        assert "\n" not in str(info.value)
        assert new.status() == untouched and not new.gram.any()  # nothing taken
    ran = fresh(site, first_slot=1)
    ran.restore_state(state, IDENTITY)
    with pytest.raises(ValueError, match="only before the site's first slot"):
        ran.restore_state(state, IDENTITY)


def test_slots_the_state_does_not_record_close_their_segment() -> None:
    site = Site(horizon=4, seed=5)
    site.add_rows()
    assert site.run_slot().released  # slot 0, exported after it
    state = through_msgpack(site.site.export_state(IDENTITY))
    before = site.site.gram
    site.add_rows()
    assert site.run_slot().released  # slot 1 released, then the site dies before writing
    new = fresh(site, first_slot=site.retained.slot + 1)
    assert new.restore_state(state, IDENTITY) == 1
    status = new.status()
    assert status["next_slot"] == 2 and status["slots_unrecorded"] == 1
    assert status["segments_closed_early"] == 1
    np.testing.assert_array_equal(new.gram, before)
    site.site = new
    for _ in range(2):  # slots 2, 3: the rest of the broken segment, not used
        site.add_rows()
        assert site.run_slot().released
    np.testing.assert_array_equal(site.site.gram, before)
    assert site.site.status()["slots_discarded"] == 2
    grams = site.add_rows()
    assert site.run_slot().released  # slot 4: a new segment, used
    np.testing.assert_allclose(site.site.gram, before + sum(grams.values()), atol=0.05)


def test_a_slot_running_at_export_is_unrecorded() -> None:
    site = Site(horizon=4, seed=6)
    site.add_rows()
    site.run_slot()
    site.advertise(site.ids)
    site.now = site.site.next_wakeup(site.now)
    site.site.tick(site.now)  # slot 1 starts (and is what the shell writes then)
    state = through_msgpack(site.site.export_state(IDENTITY))
    assert state["running"] == 1 and state["next_slot"] == 2
    new = fresh(site, first_slot=1)  # the retained outcome is slot 0's
    assert new.restore_state(state, IDENTITY) == 1
    assert new.status()["next_slot"] == 2  # slot 1 is never reused


# -- the shell ---------------------------------------------------------------------------------


async def step(shell: SecAggAggregator, now: float) -> None:
    """One step of the site's strategy, its actions carried out as `AggregatorAgent.carry_out`
    carries out a release strategy's (no client: the stand-in publishes to a list)."""
    release = shell.release
    for action in release.step(now, time.time()).actions:
        if isinstance(action, WriteCheckpoint):
            error = await shell.write(action)
            if error is None:
                release.checkpoint_written(action, now)
            else:
                shell.write_failed(action, error, release.checkpoint_failed(action, now, error))
        else:
            await shell.publish(None, action)
            release.published(action, now)


async def shell_in(state_dir: Path) -> tuple[SecAggAggregator, StandIn]:
    agent = StandIn(shell_topology(), "site")
    shell = SecAggAggregator(agent, n_features=SHELL_D, state_dir=state_dir)
    await shell.prepare()
    assert shell.site is not None
    return shell, agent


async def test_the_shell_writes_its_state_and_a_new_shell_restores_it(tmp_path: Path) -> None:
    shell, _ = await shell_in(tmp_path)
    assert shell.state_path == tmp_path / "site.secagg"
    shell.counts["pi-1"] = 7
    await step(shell, time.monotonic())  # the first step writes the state
    assert shell.state_counts["written"] == 1 and shell.state_path.exists()
    await step(shell, time.monotonic())  # nothing started or ended: nothing written
    assert shell.state_counts["written"] == 1
    again, _ = await shell_in(tmp_path)
    assert again.state_counts["restored"] == 1 and again.counts["pi-1"] == 7
    assert again.status()["state"]["restored"] == 1


@pytest.mark.parametrize(
    "content, counted",
    [
        (b"\x93garbage", "unreadable"),
        (b"", "unreadable"),
        (msgpack.packb({"format": "something else", "version": 1}), "unreadable"),
        (
            msgpack.packb({"format": STATE_FORMAT, "version": 1, "site": {}, "counts": {}}),
            "refused",
        ),
    ],
)
async def test_a_corrupt_or_foreign_state_file_starts_afresh_in_one_line(
    tmp_path: Path, content: bytes, counted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "site.secagg").write_bytes(content)
    (tmp_path / ".site.secagg.0123456789abcdef.tmp").write_bytes(b"half")  # a crash mid-write
    shell, _ = await shell_in(tmp_path)
    assert shell.state_counts[counted] == 1 and shell.state_counts["restored"] == 0
    assert shell.site.status()["slots_released"] == 0 and shell.site.status()["next_slot"] == 0
    assert not (tmp_path / ".site.secagg.0123456789abcdef.tmp").exists()
    await step(shell, time.monotonic())  # starts afresh: the file is replaced
    again, _ = await shell_in(tmp_path)
    assert again.state_counts["restored"] == 1


async def test_a_state_of_another_site_configuration_is_refused(tmp_path: Path) -> None:
    shell, _ = await shell_in(tmp_path)
    await step(shell, time.monotonic())
    doc = msgpack.unpackb((tmp_path / "site.secagg").read_bytes(), raw=False)
    doc["site"]["config"]["threshold"] = 4
    (tmp_path / "site.secagg").write_bytes(msgpack.packb(doc, use_bin_type=True))
    again, _ = await shell_in(tmp_path)
    assert again.state_counts["refused"] == 1


async def test_an_unwritable_state_directory_is_counted_not_raised(tmp_path: Path) -> None:
    shell, _ = await shell_in(tmp_path / "missing")
    await step(shell, time.monotonic())
    assert shell.state_counts["write_failures"] == 1 and shell.state_counts["written"] == 0


# -- against a real Mosquitto ------------------------------------------------------------------


@pytest.mark.mqtt
async def test_a_restarted_site_agent_keeps_slot_0_in_the_roots_model(
    mosquitto, tmp_path: Path
) -> None:
    import aiomqtt

    from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
    from edge_runtime.agents.leaf.shell.agent import LeafAgent
    from edge_runtime.fpca import principal_angles
    from edge_runtime.settings import AgentSettings
    from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_readings
    from tests.test_secagg_agents import LEAVES, ROWS, SLOT_S, D, data, secagg_topology, wait_for

    topology = secagg_topology()
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    rows = data(1)
    exact = np.linalg.svd(np.vstack(list(rows.values())), full_matrices=False)[2][:2].T
    expected = dict.fromkeys(LEAVES, ROWS)
    models: list[SubspaceMessage] = []
    async with contextlib.AsyncExitStack() as stack:
        listener = await stack.enter_async_context(
            aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5)
        )
        await listener.subscribe(topology.model_topic(), qos=1)

        async def listen() -> None:
            async for message in listener.messages:
                if message.payload:
                    models.append(decode_subspace(bytes(message.payload)))  # type: ignore[arg-type]

        listening = asyncio.create_task(listen())
        stack.callback(listening.cancel)
        root = await stack.enter_async_context(AggregatorAgent(topology, "root", settings))
        site = AggregatorAgent(topology, "site", settings, n_features=D, state_dir=tmp_path)
        await site.__aenter__()
        stack.push_async_callback(site.aclose)  # idempotent: closed below
        leaves = [
            await stack.enter_async_context(LeafAgent(topology, leaf, settings, n_features=D))
            for leaf in LEAVES
        ]
        for agent in [root, site, *leaves]:
            await agent.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as sensor:
            for leaf, values in rows.items():
                await sensor.publish(
                    topology.nodes[leaf].sensor_topic, encode_readings(values), qos=1
                )
        await wait_for(
            lambda: site.secagg.site.status()["slots_released"] >= 1, 3 * SLOT_S, "slot 0"
        )
        await wait_for(
            lambda: bool(models) and dict(models[-1].provenance) == expected, 5, "the model"
        )
        assert np.max(principal_angles(models[-1].subspace.basis, exact)) < 0.02
        old_epoch = root.children["site"].snapshot.epoch
        await site.aclose()  # between slots 0 and 1 (slot 1 is due SLOT_S after slot 0)
        assert (tmp_path / "site.secagg").exists()

        site = await stack.enter_async_context(
            AggregatorAgent(topology, "site", settings, n_features=D, state_dir=tmp_path)
        )
        await site.wait_connected(5)
        status = site.status_detail().extra["secagg"]
        assert status["state"]["restored"] == 1
        assert status["slots_released"] >= 1 and status["recent"][0]["slot"] == 0
        assert status["next_slot"] >= 1
        # the new incarnation's snapshot reaches the root at once, with slot 0's readings
        await wait_for(
            lambda: root.children["site"].snapshot.epoch != old_epoch, 5, "the new site snapshot"
        )
        new = root.children["site"].snapshot
        assert dict(new.provenance) == expected and new.n_samples == len(LEAVES) * ROWS
        assert np.max(principal_angles(new.subspace.basis, exact)) < 0.02
        await wait_for(lambda: root.core.unpublished is False, 5, "the root's publish")
        model = root.model()
        assert dict(model.provenance) == expected
        assert np.max(principal_angles(model.subspace.basis, exact)) < 0.02
        assert dict(models[-1].provenance) == expected
