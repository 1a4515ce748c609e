"""Acceptance: the deployment exactly as documented, end to end (issue 21, item 2).

Short form for CI of `acceptance` (the scenario runner; ``python -m benchmarks.acceptance``
runs many seeds): a Mosquitto from ``broker_config/secured.conf`` with the passwords and the
ACL of SECURITY.md, one ``edge-runtime agent`` process per node with the unit's command line,
credentials and its own state directory, ``edge-runtime replay`` with its defaults (as fast
as possible: no ``--rate``) and at ``--rate 1000`` and ``--rate 100`` on the built-in Motes
data, at ``--rate 1000`` on scikit-learn's digits, then seeded fault schedules that together
cover every fault kind. Each run: replay exit 0 with every reading confirmed durable, the
root covering every accepted reading exactly, the no-fault model (principal angle, error
ratio). Each run prints one ``ACCEPTANCE`` line (``pytest -rP`` shows them).
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import aiomqtt
import pytest

from acceptance.scenario import (
    KINDS,
    READER,
    REPLAY_USER,
    Deployment,
    Fleet,
    SecuredBroker,
    describe,
    digits_deployment,
    expected_window_s,
    motes_deployment,
    run_scenario,
    schedule,
    unit_exec_start,
)

pytestmark = [pytest.mark.mqtt, pytest.mark.timeout(300)]

CI_SCHEDULES = {  # seed: kinds it must include; together every kind of acceptance.KINDS
    1: ("broker_kill_persist", "leaf_freeze", "root_kill"),
    2: ("broker_kill_fresh", "aggregator_kill", "replay_kill"),
    3: ("leaf_kill", "replay_kill", "broker_kill_persist"),
}


@pytest.fixture(scope="module")
def motes(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return motes_deployment(tmp_path_factory.mktemp("motes"))


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return digits_deployment(tmp_path_factory.mktemp("digits"))


def test_ci_schedules_cover_every_fault_kind() -> None:
    assert {k for kinds in CI_SCHEDULES.values() for k in kinds} == set(KINDS)


def test_schedule_is_a_function_of_the_seed(motes: Deployment) -> None:
    first = schedule(7, motes.topology, 10.0)
    assert first == schedule(7, motes.topology, 10.0)
    assert first != schedule(8, motes.topology, 10.0)
    assert {schedule(s, motes.topology, 10.0, n_faults=1)[0].kind for s in range(7)} == set(KINDS)
    for fault in schedule(3, motes.topology, 10.0, n_faults=6, include=KINDS[:6]):
        assert 0.5 <= fault.at_s <= 9.0
        if fault.kind == "leaf_freeze":
            assert fault.down_s > 1.5 * 5.0  # past the broker's 1.5 keep-alives


def test_agents_run_the_units_exec_start_with_the_units_credentials(
    motes: Deployment, tmp_path: Path
) -> None:
    broker = SecuredBroker(motes, tmp_path / "broker")
    broker.port = 20001  # not started: only the command line is checked
    fleet = Fleet(motes, broker, tmp_path)
    words = [
        w.replace("${EDGE_TOPOLOGY}", str(motes.topology_path))
        .replace("%i", "pi-01")
        .replace("${EDGE_BROKER}", broker.url)
        .replace("${STATE_DIRECTORY}", str(fleet.state_dir("pi-01")))
        for w in unit_exec_start()
        if w != "$EDGE_AGENT_OPTIONS"  # unset on a plain-text loopback broker
    ]
    args = fleet.agent_args("pi-01")
    assert args[-len(words) :] == words, shlex.join(args)
    assert Path(args[0]).name == "edge-runtime"  # the console script, as the unit runs it
    assert fleet.agent_env("pi-01")["PYTHONOPTIMIZE"] == "2"  # -OO, as the unit runs it
    # credentials as the unit passes them: user name = node id, the password in a file
    assert motes.password_path("pi-01").stat().st_mode & 0o077 == 0
    assert motes.password("pi-01") not in motes.password_file.read_text()  # hashed


async def test_the_broker_enforces_passwords_and_the_generated_acl(
    motes: Deployment, tmp_path: Path
) -> None:
    broker = SecuredBroker(motes, tmp_path / "broker")
    await asyncio.to_thread(broker.start)
    try:
        assert broker.port is not None and broker.port > 20000
        for user, password in ((None, None), ("pi-01", "wrong"), ("mallory", "x")):
            with pytest.raises(aiomqtt.MqttError):
                async with aiomqtt.Client(
                    "127.0.0.1", broker.port, username=user, password=password, timeout=3
                ):
                    pass
        for user in ("pi-01", "root", READER, REPLAY_USER):
            async with aiomqtt.Client(
                "127.0.0.1", broker.port, username=user, password=motes.password(user), timeout=3
            ):
                pass
        assert motes.acl_file.read_text().count("\nuser ") >= len(motes.topology.nodes) + 1
    finally:
        broker.stop()
    assert not broker.running


def _report(result) -> None:
    print("ACCEPTANCE " + describe(result))


@pytest.mark.parametrize("rate", [None, 1000.0, 100.0], ids=["max", "1000", "100"])
async def test_motes_without_faults_every_reading_durable_and_covered(
    motes: Deployment, tmp_path: Path, rate: float | None
) -> None:
    result = await run_scenario(motes, tmp_path, rate=rate)
    _report(result)
    assert result.passed, describe(result)
    assert result.replays == 1 and result.replay_summary["confirmed"] == motes.data.shape[0]


async def test_second_dataset_digits_without_faults(digits: Deployment, tmp_path: Path) -> None:
    assert digits.data.shape == (1797, 64)
    assert all(n % 40 for n in digits.sent.values())  # tails that are not whole blocks
    result = await run_scenario(digits, tmp_path, rate=1000.0)
    _report(result)
    assert result.passed, describe(result)


@pytest.mark.parametrize("seed", sorted(CI_SCHEDULES))
async def test_motes_under_a_seeded_fault_schedule(
    motes: Deployment, tmp_path: Path, seed: int
) -> None:
    rate = 1000.0
    faults = schedule(
        seed,
        motes.topology,
        expected_window_s(motes, rate),
        n_faults=len(CI_SCHEDULES[seed]),
        include=CI_SCHEDULES[seed],
    )
    result = await run_scenario(motes, tmp_path, rate=rate, faults=faults, seed=seed)
    _report(result)
    assert result.passed, describe(result)
