"""What an aggregator knows of one child: its latest snapshot (`ChildRecord`) and which of
two snapshots of a child supersedes the other (`is_newer`), and the summary of no data an
aggregator publishes once every child is forgotten (`empty_like`). No I/O, no clock."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

import numpy as np

from edge_runtime.fpca import Subspace
from edge_runtime.wire import SubspaceMessage

__all__ = ["MAX_RETIRED_EPOCHS", "ChildRecord", "empty_like", "is_newer"]

MAX_RETIRED_EPOCHS = 16
"""Epochs remembered per child after a newer one replaced them (memory O(16) per child)."""


def is_newer(new: SubspaceMessage, current: SubspaceMessage, retired: Container[str] = ()) -> bool:
    """Whether snapshot ``new`` supersedes ``current`` from the same child.

    Within one epoch (one lineage of the child's state) the larger ``seq`` wins, so
    duplicates and late arrivals change nothing. A different epoch means the child's
    state was started afresh: it wins, unless it is one of the child's ``retired`` epochs
    (one a later epoch already replaced, e.g. the old incarnation's last snapshot still in
    flight). No wall clock is compared: a Pi without a real-time clock may restart at
    1970 or an hour behind, and its new epoch must still be taken.
    """
    if new.epoch == current.epoch:
        return new.seq > current.seq
    return new.epoch not in retired


@dataclass
class ChildRecord:
    """What an aggregator knows of one child.

    Attributes
    ----------
    snapshot : SubspaceMessage
        The child's latest snapshot (by `is_newer`).
    arrived : float
        When it arrived, seconds.
    stale : bool
        The staleness policy has been applied to it.
    merged : bool
        The merge tree holds its current contribution.
    """

    snapshot: SubspaceMessage
    arrived: float
    stale: bool = False
    merged: bool = False


def empty_like(subspace: Subspace) -> Subspace:
    """The summary of no data of ``subspace``'s width: rank 0, ``n_samples`` 0 (centred
    with a zero mean if it is), published once every child is forgotten so the forget
    reaches the levels above."""
    d = subspace.n_features
    mean = None if subspace.mean is None else np.zeros(d)
    return Subspace(np.zeros((d, 0)), np.zeros(0), 0, mean)
