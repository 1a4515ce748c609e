"""The parent map of a topology as a tree: its checks, cycle detection and root paths.

A topology names each node's parent; `check_tree` checks that these links form one tree
(one root, no cycle, at least one leaf) and `root_paths` gives each node's chain of ids from
the root, the ``<path>`` of its topic names.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from edge_runtime.topology.checks import TopologyError

__all__ = ["check_tree", "root_paths"]


def check_tree(parents: Mapping[str, str | None], open_nodes: Collection[str] = ()) -> str:
    """Check that ``parents`` is one tree with children and return its root.

    Parameters
    ----------
    parents : Mapping[str, str or None]
        Each node's id -> its parent's id (None for the root), in file order.
    open_nodes : collection of str, default ()
        The open aggregators: an open root needs no declared child (it admits them at
        run time).

    Returns
    -------
    str
        The id of the one node without a parent.

    Raises
    ------
    TopologyError
        For no nodes, an unknown parent (with the closest id as a hint), zero or several
        roots, a cycle (the message draws it ``'a' -> 'b' -> 'a' (child -> parent)``), or a
        root that is not open without children.
    """
    if not parents:
        raise TopologyError("no nodes: add a root and at least one leaf as [[nodes]] tables")
    for node_id, parent in parents.items():
        if parent is not None and parent not in parents:
            import difflib  # here, on the error path: a valid tree does not load it

            close = difflib.get_close_matches(parent, list(parents), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TopologyError(f"node {node_id!r} has unknown parent {parent!r}{hint}")
    roots = [node_id for node_id, parent in parents.items() if parent is None]
    if not roots:
        cycle = _find_cycle(parents, next(iter(parents)))
        raise TopologyError(
            f"no root: every node has a parent, e.g. the cycle {_cycle_text(cycle)}; "
            "exactly one node must omit 'parent'"
        )
    if len(roots) > 1:
        names = ", ".join(repr(r) for r in roots[:-1]) + f" and {roots[-1]!r}"
        raise TopologyError(f"{len(roots)} roots {names}: exactly one node may omit 'parent'")
    root = roots[0]
    reaches_root = {root}
    for node_id in parents:
        if node_id not in reaches_root:
            chain = _walk_up(parents, node_id, reaches_root)
            if chain is None:
                raise TopologyError(
                    f"node {node_id!r} is on or under a parent cycle: "
                    f"{_cycle_text(_find_cycle(parents, node_id))}"
                )
            reaches_root.update(chain)
    if root not in open_nodes and all(parent != root for parent in parents.values()):
        raise TopologyError(
            f"root {root!r} has no children: a topology needs at least one leaf under its "
            "root, or an open root (open = true) that admits its children at run time"
        )
    return root


def _walk_up(
    parents: Mapping[str, str | None], start: str, reaches_root: set[str]
) -> list[str] | None:
    """The chain from ``start`` up to a node known to reach the root, or None on a cycle."""
    chain = [start]
    for _ in range(len(parents)):
        parent = parents[chain[-1]]
        if parent is None or parent in reaches_root:
            return chain
        if parent in chain:
            return None
        chain.append(parent)
    return None


def _find_cycle(parents: Mapping[str, str | None], start: str) -> list[str]:
    """The cycle reached by walking up from ``start`` (each id's parent is the next one)."""
    seen: dict[str, int] = {}
    chain: list[str] = []
    node: str | None = start
    for _ in range(len(parents) + 1):
        if node is None:
            break
        if node in seen:
            return chain[seen[node] :]
        seen[node] = len(chain)
        chain.append(node)
        node = parents[node]
    raise AssertionError(f"no parent cycle above {start!r}")  # callers guarantee one exists


def _cycle_text(cycle: list[str]) -> str:
    return " -> ".join(repr(node_id) for node_id in [*cycle, cycle[0]]) + " (child -> parent)"


def root_paths(parents: Mapping[str, str | None]) -> dict[str, str]:
    """Each node's chain of ids from the root, joined by ``/`` (e.g. ``"root/site-a/pi-01"``).

    Parameters
    ----------
    parents : Mapping[str, str or None]
        A tree that `check_tree` accepted: each id -> its parent's id, None for the root.

    Returns
    -------
    dict of str -> str
        Keyed by id, in the order of ``parents``; the root's path is its id.
    """
    paths: dict[str, str] = {}
    for node_id in parents:  # parents are known and acyclic, so each walk ends at the root
        chain = [node_id]
        for _ in range(len(parents)):
            parent = parents[chain[-1]]
            if parent is None:
                break
            chain.append(parent)
        paths[node_id] = "/".join(reversed(chain))
    return paths
