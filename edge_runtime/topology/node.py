"""One node of a topology and the settings its agent runs with (`NodeConfig`).

The fields, their defaults and documentation are declared in `edge_runtime.topology.keys`;
their checks live in `edge_runtime.topology.node_checks`; this module holds the class and
what is derived from its fields (privacy guarantee, block size, sensor range).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edge_runtime.declaration import declared
from edge_runtime.fpca.privacy import NEIGHBOURS, gaussian_default_block_size
from edge_runtime.topology.checks import check_n_features
from edge_runtime.topology.keys import NODE_FIELDS
from edge_runtime.topology.node_checks import check_node
from edge_runtime.wire.guarantee import PrivacyParams

if TYPE_CHECKING:  # a leaf reading its sensor topic does not load the sources
    from edge_runtime.sources.spec import SourceSpec  # noqa: F401 (a field's type hint)

__all__ = ["NodeConfig"]


@declared(NODE_FIELDS, check_node)
class NodeConfig:
    """One node of a topology and the FPCA settings its agent runs with.

    The fields are the keys `edge_runtime.topology.keys.TOPOLOGY_KEYS` declares for
    ``[[nodes]]`` and ``[defaults]``, in its order (``id``, ``parent``, ``rank`` and
    ``block_size`` may be given positionally); their types, defaults, bounds and meanings
    below come from there, as does the key reference of ``topologies/README.md``. A node is
    checked before it is built (`edge_runtime.topology.node_checks.check_node`) and holds
    normalised values: floats, tuples, and with privacy its ``mechanism`` (default
    ``"gaussian"``) and ``release_horizon`` (`DEFAULT_RELEASE_HORIZON`, 1 when
    ``forget < 1``); ``block_size`` is `DEFAULT_BLOCK_SIZE` unless the node is a private
    ``"gaussian"`` leaf that sets none (see `block_size_for`).

    Parameters
    ----------
    {parameters}

    Raises
    ------
    TopologyError
        If a value is of the wrong type or out of range, or breaks a rule between keys; the
        message names the node.
    """

    @property
    def privacy(self) -> PrivacyParams | None:
        """The guarantee a private leaf publishes under, or None (published without noise).

        A `edge_runtime.wire.PrivacyParams` of ``epsilon``, ``delta``, ``clip_norm``, the
        node's ``mechanism`` and replace-one neighbours (`edge_runtime.fpca.privacy.
        NEIGHBOURS`): the one type of a guarantee above the numerics. The leaf turns it into
        the plain-number arguments of `edge_runtime.fpca.FPCAEdge` in one place,
        `edge_runtime.agents.leaf.core.estimator.estimator_privacy`.
        """
        if self.epsilon is None or self.delta is None or self.clip_norm is None:
            return None
        assert self.mechanism is not None  # set with privacy (`check_node`)
        return PrivacyParams(
            self.epsilon,
            self.delta,
            self.clip_norm,
            mechanism=self.mechanism,
            neighbours=NEIGHBOURS,
        )

    def block_size_for(self, n_features: int) -> int:
        """The block size this node's estimator uses for readings of ``n_features`` values.

        ``block_size`` when set; for a private ``"gaussian"`` leaf without one,
        `edge_runtime.fpca.privacy.gaussian_default_block_size` ``(epsilon, delta,
        n_features, release_horizon)``. At least ``min(rank, n_features)``.

        Parameters
        ----------
        n_features : int
            Values per reading ``d``, >= 1.

        Returns
        -------
        int
            Readings per block ``b``.

        Raises
        ------
        ValueError
            If ``n_features < 1``, or the default block would exceed the memory bound of
            `gaussian_default_block_size` (set ``block_size`` then).
        """
        check_n_features(n_features)
        rank = min(self.rank, n_features)
        if self.block_size is not None:
            return max(self.block_size, rank)
        assert self.epsilon is not None and self.delta is not None  # by __post_init__
        horizon = 1 if self.release_horizon is None else self.release_horizon
        size = gaussian_default_block_size(self.epsilon, self.delta, n_features, horizon)
        return max(size, rank)

    @property
    def valid_range_width(self) -> int | None:
        """Features of a per-feature ``valid_range``; None for ``[lo, hi]`` or no range."""
        if self.valid_range is None or not isinstance(self.valid_range[0], tuple):
            return None
        return len(self.valid_range[0])

    def rejects(self, values: np.ndarray) -> np.ndarray:
        """Which readings this leaf's ``valid_range`` rejects: those with any value outside
        it, when ``out_of_range = "reject"`` (``"clip"`` and no range reject none).

        Parameters
        ----------
        values : ndarray of shape (n_samples, n_features)
            Readings, in the sensors' units.

        Returns
        -------
        ndarray of shape (n_samples,), bool
            True where the leaf drops the reading (`LeafCore.screen` does the same).

        Raises
        ------
        ValueError
            As `range_bounds` (per-feature bounds of another width).
        """
        bounds = self.range_bounds(values.shape[1])
        if bounds is None or self.out_of_range == "clip":
            return np.zeros(values.shape[0], dtype=bool)
        lo, hi = bounds
        return ((values < lo) | (values > hi)).any(axis=1)

    def range_bounds(self, n_features: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(lo, hi)``, each of shape ``(n_features,)`` float64, of ``valid_range`` for
        readings of ``n_features`` values; None without a range.

        Parameters
        ----------
        n_features : int
            Values per reading, >= 1.

        Returns
        -------
        tuple of two ndarray of shape (n_features,), float64, or None
            Copies, in the sensors' units; ``lo < hi`` in every feature.

        Raises
        ------
        ValueError
            If ``n_features < 1`` or per-feature bounds are of another width.
        """
        check_n_features(n_features)
        if self.valid_range is None:
            return None
        width = self.valid_range_width
        if width is not None and width != n_features:
            raise ValueError(
                f"valid_range of node {self.id!r} has {width} values per bound, the readings "
                f"have {n_features}"
            )
        lo, hi = (
            np.broadcast_to(np.asarray(bound, dtype=np.float64), (n_features,)).copy()
            for bound in self.valid_range
        )
        return lo, hi

    def reading_norm_sq_bound(self, n_features: int) -> float | None:
        """Largest squared Euclidean norm of a reading of ``n_features`` values inside
        ``valid_range``, ``sum_j max(lo_j**2, hi_j**2)``; None without a range or when
        per-feature bounds are of another width (the leaf then rejects every reading).

        Parameters
        ----------
        n_features : int
            Values per reading, >= 1.

        Returns
        -------
        float or None
            In the readings' squared units.

        Raises
        ------
        ValueError
            If ``n_features < 1``.
        """
        check_n_features(n_features)
        width = self.valid_range_width
        if self.valid_range is None or (width is not None and width != n_features):
            return None
        bounds = self.range_bounds(n_features)
        assert bounds is not None
        lo, hi = bounds
        return float(np.maximum(lo * lo, hi * hi).sum())
