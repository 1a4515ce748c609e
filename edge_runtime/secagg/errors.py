"""Errors of the secure-aggregation cores, under `edge_runtime.errors.EdgeRuntimeError`::

    SecAggError(ValueError)    a message out of order, for another slot, malformed, or
    │                          conflicting with one received before (the shell logs and drops it)
    └── UnmaskRefusedError     a leaf refuses an unmask request: a second, different request
                               for the slot, a leaf named both survivor and dropped, fewer
                               survivors than the threshold, a leaf it holds no share of

Every message is one line naming the slot, the leaf and what was expected.
"""

from __future__ import annotations

from edge_runtime.errors import EdgeRuntimeError

__all__ = ["SecAggError", "UnmaskRefusedError"]


class SecAggError(EdgeRuntimeError, ValueError):
    """A secure-aggregation message the core refuses; its state is unchanged."""


class UnmaskRefusedError(SecAggError):
    """A leaf refuses to reveal shares (Bonawitz et al. 2017, Fig. 4 round 4's checks)."""
