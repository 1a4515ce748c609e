"""Secure-aggregation sites of a topology: their rules, and their defaults filled in.

A *site* is an aggregator whose children include leaves of mechanism ``"gaussian-secagg"``
(`SECAGG_MECHANISM`): those ``n`` leaves send their releases masked to it, and it learns only
their noisy sum, slot by slot (docs/secure_aggregation.md). `check_secagg` is part of
`Topology`'s validation; every problem is a one-line `TopologyError` naming the node, the
key, its value and what was expected:

- the site's secagg leaves share one calibration: ``epsilon``, ``delta``, ``clip_norm`` and
  ``release_horizon`` (their noise shares add up to the site's noise only then), and
  ``forget = 1`` (the secure sum does not forget);
- ``3 <= n <= MAX_SECAGG_LEAVES`` (`edge_runtime.wire.secagg_fields`, 64): with two leaves
  each would learn the other's release from the sum, and ``2 t > n`` with ``t <= n`` leaves
  ``t = 2``, no dropout tolerated;
- ``secagg_threshold`` ``t``: ``2 t > n`` (the leaves refuse a roster otherwise: an
  aggregator sending different unmask requests to different leaves then needs ``2 t > n``
  answers) and ``t <= n``. Default ``n - 1``: one dropout per slot is tolerated, and it is
  more accurate than the minimum ``floor(n / 2) + 1`` at ``n > 4``. Every leaf adds ``1 / t``
  of the site's noise variance, so a slot all ``n`` leaves survive carries ``n / t`` of it:
  ``n / (n - 1)`` (1.33 at ``n = 4``, 1.14 at ``n = 8``) against 1.6 for the minimum at
  ``n = 8``. Measured offline (benchmarks/report/secagg.md, Motes light, two sites of 4):
  ``t = 3`` of 4 gives 2.480, ``t = 4`` (no dropout tolerated) 2.336;
- ``secagg_slot_s``: default `DEFAULT_SECAGG_SLOT_S` (600 s, why in its docstring);
- the site is a declared aggregator, not an open one (the cohort a leaf accepts in a roster
  comes from the topology); the keys sit only on a site, never on a leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from edge_runtime.topology.checks import TopologyError
from edge_runtime.topology.keys import DEFAULT_SECAGG_SLOT_S, SECAGG_KEYS, SECAGG_MECHANISM
from edge_runtime.topology.node import NodeConfig

__all__ = ["MIN_SECAGG_LEAVES", "check_secagg", "default_threshold", "secagg_children"]

MIN_SECAGG_LEAVES = 3
"""Fewest secagg leaves of one site (see the module docstring)."""

_SHARED = ("epsilon", "delta", "clip_norm", "release_horizon")


def default_threshold(n: int) -> int:
    """``secagg_threshold`` of a site of ``n >= 3`` secagg leaves that sets none: ``n - 1``."""
    return n - 1


def secagg_children(
    nodes: Mapping[str, NodeConfig], children: Mapping[str, Sequence[str]], node_id: str
) -> list[str]:
    """The children of ``node_id`` of mechanism ``"gaussian-secagg"``, in file order."""
    return [c for c in children[node_id] if nodes[c].mechanism == SECAGG_MECHANISM]


def _max_leaves() -> int:
    from edge_runtime.wire.secagg_fields import MAX_SECAGG_LEAVES  # only for a secagg site

    return MAX_SECAGG_LEAVES


def check_secagg(
    nodes: dict[str, NodeConfig],
    children: Mapping[str, Sequence[str]],
    aggregators: frozenset[str],
) -> None:
    """Check the topology's secure-aggregation sites and fill in their defaults in ``nodes``.

    Parameters
    ----------
    nodes : dict of str to NodeConfig
        Every node; a site's `NodeConfig` is replaced by one with ``secagg_threshold`` and
        ``secagg_slot_s`` set.
    children : mapping of str to sequence of str
        Each node's children, in file order.
    aggregators : frozenset of str
        The nodes with children or open.

    Raises
    ------
    TopologyError
        One line naming the node, key, value and what was expected (module docstring).
    """
    for node_id, node in nodes.items():
        given = [key for key in SECAGG_KEYS if getattr(node, key) is not None]
        if node_id not in aggregators and given:
            raise TopologyError(
                f"node {node_id!r}: {given[0]} = {getattr(node, given[0])} is a key of the "
                f"aggregator that sums secagg leaves, and {node_id!r} is a leaf"
            )
        if node_id not in aggregators:
            continue
        site = secagg_children(nodes, children, node_id)
        if not site:
            if given:
                raise TopologyError(
                    f"node {node_id!r}: {given[0]} = {getattr(node, given[0])} is only used on "
                    f"an aggregator with leaves of mechanism {SECAGG_MECHANISM!r}, and it has none"
                )
            continue
        nodes[node_id] = _check_site(node, site, nodes)


def _check_site(node: NodeConfig, site: list[str], nodes: Mapping[str, NodeConfig]) -> NodeConfig:
    where = f"node {node.id!r}"
    n = len(site)
    if node.open:
        raise TopologyError(
            f"{where}: open = true, but its children {site[0]!r}, ... have mechanism "
            f"{SECAGG_MECHANISM!r}; expected a closed aggregator (a secagg site's leaves come "
            "from the topology)"
        )
    first = nodes[site[0]]
    for leaf in site:
        config = nodes[leaf]
        if config.forget != 1.0:
            raise TopologyError(
                f"node {leaf!r}: forget = {config.forget} with mechanism "
                f"{SECAGG_MECHANISM!r}, expected 1 (the site's secure sum does not forget)"
            )
        for key in _SHARED:
            if getattr(config, key) != getattr(first, key):
                raise TopologyError(
                    f"node {leaf!r}: {key} = {getattr(config, key)}, expected "
                    f"{getattr(first, key)} as on {site[0]!r} (the secagg leaves of "
                    f"{node.id!r} share one calibration)"
                )
    if n < MIN_SECAGG_LEAVES:
        raise TopologyError(
            f"{where}: {n} children of mechanism {SECAGG_MECHANISM!r} ({', '.join(site)}), "
            f"expected at least {MIN_SECAGG_LEAVES} (with two, each leaf learns the other's "
            "release from the sum)"
        )
    most = _max_leaves()
    if n > most:
        raise TopologyError(
            f"{where}: {n} children of mechanism {SECAGG_MECHANISM!r}, expected at most "
            f"{most} (MAX_SECAGG_LEAVES; split the site)"
        )
    threshold = node.secagg_threshold
    if threshold is None:
        threshold = default_threshold(n)
    elif not (2 * threshold > n and threshold <= n):
        raise TopologyError(
            f"{where}: secagg_threshold = {threshold}, expected {n // 2 + 1} to {n} "
            f"(2 t > n and t <= n for its {n} secagg leaves)"
        )
    slot = DEFAULT_SECAGG_SLOT_S if node.secagg_slot_s is None else node.secagg_slot_s
    return replace(node, secagg_threshold=threshold, secagg_slot_s=slot)
