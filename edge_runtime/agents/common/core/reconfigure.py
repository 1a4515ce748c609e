"""Which changes of a node's configuration a running node applies, and which it refuses.

A deployed topology (``edge-runtime deploy``, `edge_runtime.topology.deployed`) reaches every
running agent. `classify_config` compares the node's current `NodeConfig` with the new one:

- **live** (`LIVE_KEYS`): the publish policy (``publish_min_interval_s``,
  ``publish_max_interval_s``, ``idle_flush_s``, the deadband keys) and a leaf's declared
  sensor range (``valid_range``, ``out_of_range``). They change when the next snapshot goes
  out or which readings are kept, never what a released snapshot means, so they apply at
  once (`edge_runtime.agents.common.core.node.NodeCore.apply_config`);
- **privacy** (`GUARANTEE_KEYS`: ``epsilon``, ``delta``, ``clip_norm``, ``mechanism``,
  ``release_horizon``; the neighbour relation is fixed, replace-one): refused, reason
  ``config_privacy_change``. A snapshot is cumulative: readings released under the old
  guarantee would be merged with readings released under the new one, and no single
  guarantee would describe the result. A new guarantee needs a new epoch: restart the node
  with a fresh state (no checkpoint, its retained snapshot cleared, e.g. ``retire --forget``
  and enrol it again);
- **everything else** (rank, block size, the algorithm, the node's place in the tree, its
  sensor topic or source, the forgetting factor, centring, scoring, staleness): refused,
  reason ``config_needs_restart``. These change the estimator's state or the topics; a
  restart picks them up and starts a new epoch.

A refusal is all or nothing: a new configuration that changes a live key *and* a refused one
changes nothing. Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from edge_runtime.topology import NodeConfig

__all__ = [
    "GUARANTEE_KEYS",
    "LIVE_KEYS",
    "NEEDS_RESTART",
    "PRIVACY_CHANGE",
    "ConfigChange",
    "classify_config",
]

LIVE_KEYS: frozenset[str] = frozenset(
    {
        "publish_min_interval_s",
        "publish_max_interval_s",
        "idle_flush_s",
        "publish_angle_rad",
        "publish_spectrum_change",
        "publish_growth",
        "valid_range",
        "out_of_range",
    }
)
"""`NodeConfig` fields a running node applies at once."""

GUARANTEE_KEYS: frozenset[str] = frozenset(
    {"epsilon", "delta", "clip_norm", "mechanism", "release_horizon"}
)
"""`NodeConfig` fields that define a private leaf's guarantee: never changed while running."""

PRIVACY_CHANGE = "config_privacy_change"
"""Reject reason of a new configuration that changes the privacy guarantee."""
NEEDS_RESTART = "config_needs_restart"
"""Reject reason of a new configuration that changes what only a restart can apply."""


@dataclasses.dataclass(frozen=True)
class ConfigChange:
    """What a new configuration changes, and whether the node applies it.

    Parameters
    ----------
    changed : tuple of str
        The fields that differ (sorted), with the tree-level differences given to
        `classify_config`.
    refused : str or None
        None (applied, or nothing changed), `PRIVACY_CHANGE` or `NEEDS_RESTART`.
    blocking : tuple of str
        The changed fields behind the refusal (empty when applied).
    """

    changed: tuple[str, ...]
    refused: str | None = None
    blocking: tuple[str, ...] = ()

    @property
    def applied(self) -> bool:
        """Whether the node applies the change (nothing refused, something changed)."""
        return self.refused is None and bool(self.changed)


def classify_config(
    current: NodeConfig, new: NodeConfig, *, tree_changes: Sequence[str] = ()
) -> ConfigChange:
    """Classify the change from ``current`` to ``new`` (module docstring).

    Parameters
    ----------
    current, new : NodeConfig
        The node's configuration now, and in the new deployed topology.
    tree_changes : sequence of str, default ()
        Differences outside the node's own settings that only a restart applies (e.g.
        ``"path"``, ``"algorithm"``, ``"name"``).

    Returns
    -------
    ConfigChange
        Refused with `PRIVACY_CHANGE` when a `GUARANTEE_KEYS` field differs, else with
        `NEEDS_RESTART` when any field outside `LIVE_KEYS` (or a tree change) differs.
    """
    fields = [f.name for f in dataclasses.fields(NodeConfig)]
    changed = sorted(f for f in fields if getattr(current, f) != getattr(new, f))
    changed += sorted(tree_changes)
    privacy = tuple(f for f in changed if f in GUARANTEE_KEYS)
    if privacy:
        return ConfigChange(tuple(changed), PRIVACY_CHANGE, privacy)
    restart = tuple(f for f in changed if f not in LIVE_KEYS)
    if restart:
        return ConfigChange(tuple(changed), NEEDS_RESTART, restart)
    return ConfigChange(tuple(changed))
