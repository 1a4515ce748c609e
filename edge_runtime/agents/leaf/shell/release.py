"""How a leaf releases its readings: the leaf's release strategy, chosen once by mechanism.

A leaf releases what it ingests through one mechanism, its node's ``mechanism``:

- ``none``, ``gaussian`` and ``fpca-eq8``: the core's own snapshots are the release (the
  noise, if any, is the business of the core's estimator, `edge_runtime.fpca.FPCAEdge`), and
  a checkpoint makes readings durable. `DirectShell`: nothing to subscribe to, publish or
  write besides what the core decides.
- ``gaussian-secagg``: the leaf publishes no snapshot; its readings reach its site only as
  masked increments of a secure sum, slot after slot, and are durable once revealed in a
  slot. `edge_runtime.agents.leaf.shell.secagg.SecAggLeaf`, with the slot protocol inside
  it (its core: `edge_runtime.agents.leaf.core.secagg_release.SecAggRelease`).

`LeafAgent` (`edge_runtime.agents.leaf.shell.agent`) holds the one `ReleaseShell` that
`release_shell_for` chooses from the mechanism and calls it unconditionally, so the agent has
no branch on the mechanism. The aggregator's side of the same strategies is
`edge_runtime.agents.aggregator.shell.release`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edge_runtime.topology import NodeConfig
from edge_runtime.topology.keys import SECAGG_MECHANISM

__all__ = ["CHECKPOINT_SUFFIX", "DirectShell", "Flushed", "ReleaseShell", "release_shell_for"]

CHECKPOINT_SUFFIX = ".ckpt"
"""A leaf's checkpoint is ``<state_dir>/<node><CHECKPOINT_SUFFIX>`` (`DirectShell`)."""


@dataclass(frozen=True)
class Flushed:
    """What a release strategy's `ReleaseShell.flush` changed for its leaf.

    Attributes
    ----------
    durable : dict of str to int or None
        Per sensor source, the last sequence number the strategy released (durable for the
        leaf's publishers: `LeafCore.mark_durable`); None when the core's own checkpoints
        and snapshots decide what is durable.
    status_due : bool
        The leaf's status document should go out at once (what it reports moved).
    """

    durable: dict[str, int] | None = None
    status_due: bool = False


class ReleaseShell(Protocol):
    """The interface `LeafAgent` calls its release strategy through.

    Built before the leaf's core (`release_shell_for`), which it shapes
    (`publishes_snapshots`, `core_config`, `checkpoint_path`), then bound to it (`resume`).
    """

    publishes_snapshots: bool
    """Whether the leaf's core publishes its snapshots (False: the estimate stays on the
    device, the core is ``local_only``)."""

    def core_config(self, config: NodeConfig) -> NodeConfig:
        """The node's settings for the leaf's core (its local estimator)."""
        ...

    def checkpoint_path(self, state_dir: Path | None, node_id: str) -> Path | None:
        """Where the leaf's core checkpoints in ``state_dir`` (None: it never does)."""
        ...

    def resume(self, core: Any) -> None:
        """Bind the leaf's `LeafCore`, before any reading, giving it what the strategy
        restored."""
        ...

    def subscriptions(self) -> list[str]:
        """Topic filters the strategy reads besides the leaf's own (QoS ``settings.qos``)."""
        ...

    def owns(self, topic: str) -> bool:
        """Whether an inbound message on ``topic`` is the strategy's."""
        ...

    def handle(self, topic: str, payload: object) -> None:
        """Take an inbound message of `owns`. Never raises for the message (a bad one is a
        reject)."""
        ...

    def readings_applied(
        self, rows: np.ndarray, source: str | None = None, first_seq: int | None = None
    ) -> None:
        """Readings the core applied, ``(n_rows, n_features)`` floats in the data's units
        (screened), from ``source`` starting at sequence number ``first_seq`` (None: bare
        readings). Called on the event loop, in the order applied."""
        ...

    async def flush(self, client: Any) -> Flushed:
        """At each pass of the leaf's work loop, before the core's tick: publish what the
        strategy has to (``client``: the `aiomqtt.Client`) and say what that changed."""
        ...

    async def on_connected(self, client: Any) -> None:
        """After every (re)connection, before the core's ``connect`` tick."""
        ...

    def status_extra(self) -> dict[str, object]:
        """The strategy's entries of the status document's ``extra``."""
        ...


class DirectShell:
    """The release of a leaf whose own snapshots are the release (mechanisms ``none``,
    ``gaussian`` and ``fpca-eq8``): the core publishes and checkpoints, the strategy adds
    nothing."""

    publishes_snapshots = True

    def core_config(self, config: NodeConfig) -> NodeConfig:
        """``config`` as it is (the estimator adds the configured noise itself)."""
        return config

    def checkpoint_path(self, state_dir: Path | None, node_id: str) -> Path | None:
        """``<state_dir>/<node_id>.ckpt``, or None without a state directory."""
        return None if state_dir is None else Path(state_dir) / f"{node_id}{CHECKPOINT_SUFFIX}"

    def resume(self, core: Any) -> None:
        """Nothing restored."""

    def subscriptions(self) -> list[str]:
        """None."""
        return []

    def owns(self, topic: str) -> bool:
        """Never."""
        return False

    def handle(self, topic: str, payload: object) -> None:
        """Never called (`owns` is False)."""

    def readings_applied(
        self, rows: np.ndarray, source: str | None = None, first_seq: int | None = None
    ) -> None:
        """Nothing to do: the core's estimator has them."""

    async def flush(self, client: Any) -> Flushed:
        """Nothing to publish; durability is the core's."""
        return Flushed()

    async def on_connected(self, client: Any) -> None:
        """Nothing to publish again."""

    def status_extra(self) -> dict[str, object]:
        """Nothing to report."""
        return {}


def release_shell_for(
    agent: Any, n_features: int | None = None, state_dir: Path | str | None = None
) -> ReleaseShell:
    """The release strategy of ``agent``'s leaf, by its node's ``mechanism``.

    Parameters
    ----------
    agent : LeafAgent
        The leaf, its core not built yet: its ``config``, ``topology``, ``node_id``,
        ``settings``, ``log``, ``reject``, ``publish`` and ``wake`` are used.
    n_features : int or None, default None
        The width of a reading, when known.
    state_dir : path or None, default None
        Where the strategy keeps its state (`SecAggLeaf`'s ledger; restored now).

    Returns
    -------
    ReleaseShell
        `SecAggLeaf` for ``"gaussian-secagg"`` (loaded only then: its accounting imports
        scipy), else `DirectShell`.

    Raises
    ------
    SecAggError
        A secure-aggregation leaf without the ``secagg`` extra installed
        (`edge_runtime.secagg.require_extra`; a ValueError).
    """
    if agent.config.mechanism == SECAGG_MECHANISM:
        from edge_runtime.agents.leaf.shell.secagg import SecAggLeaf

        return SecAggLeaf(agent, n_features, state_dir=state_dir)
    return DirectShell()
