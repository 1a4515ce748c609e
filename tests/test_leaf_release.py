"""A leaf's release strategy (`edge_runtime.agents.leaf.shell.release`): chosen once from the
node's ``mechanism``, it shapes the leaf's core (snapshots or none, checkpoints or none, the
estimator's privacy) and is the only part of `LeafAgent` that knows the mechanism. No broker:
the agents are built, never run.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.agents.leaf.shell.release import DirectShell, Flushed, release_shell_for
from edge_runtime.topology import Topology, parse_topology

D = 4
PRIVACY = ("epsilon = 1.0", "delta = 1e-5", "clip_norm = 5.0")
SECAGG_LEAVES = ("pi-0", "pi-1", "pi-2")
AGENT_MODULE = Path(__file__).resolve().parents[1] / "edge_runtime/agents/leaf/shell/agent.py"


def direct_topology(mechanism: str | None) -> Topology:
    """A root over one leaf ``pi`` of ``mechanism`` (None: no privacy)."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    lines = [f'prefix = "{prefix}"', "[defaults]", "rank = 2"]
    if mechanism is not None:
        lines += [f'mechanism = "{mechanism}"', *PRIVACY]
    lines += ["[[nodes]]", 'id = "root"', "[[nodes]]", 'id = "pi"', 'parent = "root"']
    lines += [f'sensor_topic = "{prefix}-sensors/pi"']
    return parse_topology("\n".join(lines) + "\n")


def secagg_topology() -> Topology:
    """A root over a site of three leaves of mechanism ``"gaussian-secagg"``."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    lines = [f'prefix = "{prefix}"', "[defaults]", "rank = 2"]
    lines += ["[[nodes]]", 'id = "root"', "[[nodes]]", 'id = "site"', 'parent = "root"']
    for leaf in SECAGG_LEAVES:
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "site"']
        lines += [f'sensor_topic = "{prefix}-sensors/{leaf}"', 'mechanism = "gaussian-secagg"']
        lines += [*PRIVACY, "release_horizon = 1"]
    return parse_topology("\n".join(lines) + "\n")


@pytest.mark.parametrize("mechanism", [None, "gaussian", "fpca-eq8"])
async def test_a_leaf_whose_snapshots_are_its_release_publishes_and_checkpoints_them(
    mechanism: str | None, tmp_path: Path
) -> None:
    leaf = LeafAgent(direct_topology(mechanism), "pi", n_features=D, state_dir=tmp_path)
    assert isinstance(leaf.release_shell, DirectShell)
    assert leaf.checkpoint_path == tmp_path / "pi.ckpt"
    assert leaf.core.checkpointing and not leaf.core.local_only
    assert leaf.core.config == leaf.config  # the estimator keeps the configured guarantee
    assert leaf.subscriptions() == [leaf.config.sensor_topic]
    assert await leaf.release_shell.flush(None) == Flushed(durable=None, status_due=False)
    assert "secagg" not in leaf.status_detail().extra


def test_a_leaf_without_a_state_directory_never_checkpoints() -> None:
    leaf = LeafAgent(direct_topology("gaussian"), "pi", n_features=D)
    assert leaf.checkpoint_path is None and not leaf.core.checkpointing


def test_a_secure_aggregation_leaf_releases_through_its_sites_slots_only(
    tmp_path: Path,
) -> None:
    pytest.importorskip("cryptography")
    pytest.importorskip("shamirs")
    from edge_runtime.agents.leaf.shell.secagg import SecAggLeaf

    topology = secagg_topology()
    leaf = LeafAgent(topology, "pi-0", n_features=D, state_dir=tmp_path)
    release = leaf.release_shell
    assert isinstance(release, SecAggLeaf)
    assert leaf.checkpoint_path is None and not leaf.core.checkpointing
    assert leaf.core.local_only  # no snapshot of its own
    assert leaf.core.config.epsilon is None and leaf.core.config.mechanism is None
    assert set(release.subscriptions()) <= set(leaf.subscriptions())
    assert all(release.owns(topic) for topic in release.subscriptions())
    assert not release.owns(leaf.config.sensor_topic)
    release.readings_applied(np.ones((3, D)), "s", 0)
    assert release.release is not None and release.release.pending_rows == 3
    assert leaf.status_detail().extra["secagg"] == release.status()


def test_the_factory_chooses_by_mechanism_alone() -> None:
    pytest.importorskip("cryptography")
    pytest.importorskip("shamirs")
    direct = LeafAgent(direct_topology(None), "pi")
    assert isinstance(release_shell_for(direct), DirectShell)
    secagg = LeafAgent(secagg_topology(), "pi-1")
    assert type(release_shell_for(secagg)) is type(secagg.release_shell)
    assert not isinstance(secagg.release_shell, DirectShell)


def test_the_leaf_agent_has_no_branch_on_secure_aggregation() -> None:
    text = AGENT_MODULE.read_text(encoding="utf-8").lower()
    assert "secagg" not in text
    assert "mechanism ==" not in text
