"""One node of a topology and the settings its agent runs with (`NodeConfig`).

The checks of the settings live in `edge_runtime.topology.node_checks`; this module holds
the fields, their documentation and what is derived from them (block size, sensor range).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edge_runtime.fpca.privacy import NEIGHBOURS, gaussian_default_block_size
from edge_runtime.topology.checks import check_n_features
from edge_runtime.topology.keys import DEFAULT_SCORE_WARMUP
from edge_runtime.topology.node_checks import check_node
from edge_runtime.wire.guarantee import PrivacyParams

if TYPE_CHECKING:  # a leaf reading its sensor topic does not load the sources (issue 24)
    from edge_runtime.sources.spec import SourceSpec

__all__ = ["NodeConfig"]


@dataclass(frozen=True)
class NodeConfig:
    """One node of a topology and the FPCA settings its agent runs with.

    Parameters
    ----------
    id : str
        A single MQTT topic level: non-empty, at most `MAX_ID_LENGTH` characters, without
        ``/``, ``+``, ``#``, NUL or other control characters, and none of `RESERVED_IDS`.
    parent : str or None
        The parent's id; ``None`` for the root.
    rank : int
        Initial rank ``r`` of the node's subspace, >= 1 (for an aggregator, the rank Merge_r
        truncates to, Alg. 2).
    block_size : int or None, default None
        Block size ``b`` of the streaming update, eq. (3) (a private leaf releases one
        block at a time); >= ``rank``. None gives `DEFAULT_BLOCK_SIZE` (50), except on a
        private leaf of mechanism ``"gaussian"``, where it stays None and the leaf uses
        `edge_runtime.fpca.privacy.gaussian_default_block_size` ``(epsilon, delta,
        n_features, release_horizon)`` once the width of a reading is known (see
        `block_size_for`): the smallest block whose release noise has an expected spectral
        norm of at most a tenth of the block's largest possible eigenvalue (517 readings at
        epsilon 1, delta 1e-5, d 48, horizon 1; 799 at horizon 64). A mechanism
        ``"fpca-eq8"`` leaf keeps 50, as before.
    adaptive : bool, default False
        Adapt the rank after each block, eq. (4).
    rank_bounds : tuple of float (lower, upper), default (0.01, 0.10)
        Bounds on the energy ratio of eq. (4), ``0 < lower < upper < 1``.
    holdoff : int, default 1
        Blocks between two rank changes, >= 1.
    idle_flush_s : float or None, default None
        Seconds, > 0: a node with unpublished data publishes once no input (readings for a
        leaf, child snapshots for an aggregator) has arrived for this long (the trailing
        publish; a private leaf masks its pending readings then). None: the role's default,
        `edge_runtime.agents.common.core.policy.LEAF_PUBLISH` / ``AGGREGATOR_PUBLISH``.
    publish_min_interval_s, publish_max_interval_s : float or None, default None
        Seconds, >= 0: least time between two snapshots of this node, and most time a change
        may wait while unpublished (max >= min). None: the role's default.
    publish_angle_rad, publish_spectrum_change, publish_growth : float or None, default None
        The publish deadband (`edge_runtime.agents.common.core.policy.PublishPolicy`):
        largest principal angle (radians, >= 0), relative change of the normalised spectrum
        (> 0), relative growth of the sample count (> 0). None: the role's default.
    sensor_topic : str or None, default None
        MQTT topic filter a leaf reads its sensor readings from (``"sensors/<id>"`` when parsed
        from TOML); ``None`` for aggregators.
    share : float, default 1.0
        Relative share of a dataset's rows for the contiguous split, finite and > 0.
    oversample : int or None, default None
        Extra directions ``p >= 0`` tracked beyond ``rank`` (`FPCAEdge`'s ``oversample``);
        snapshots carry ``rank + p`` directions and aggregators merge at ``rank + p``, the
        root's model is truncated to ``rank``. None uses `FPCAEdge`'s default.
    forget : float, default 1.0
        Forgetting factor ``lambda`` in (0, 1] of a leaf's block updates, eq. (2).
    center : bool, default False
        Track the streaming mean and summarise centred data (merged with the mean
        correction); the paper's default is uncentred.
    stale_policy : {"keep", "drop", "downweight"}, default "keep"
        What an aggregator does with a child whose last snapshot is older than
        ``stale_after_s``: keep it (its data still counts), drop it from the merge, or
        scale its singular values by ``stale_weight``.
    stale_after_s : float, default 60.0
        Seconds without a new snapshot after which a child is stale, > 0.
    stale_weight : float, default 0.5
        Factor in (0, 1) on a stale child's singular values under ``"downweight"``.
    epsilon : float or None, default None
        Differential privacy of a leaf: the budget epsilon per reading, finite and > 0,
        for replace-one neighbours. ``epsilon``, ``delta`` and ``clip_norm`` are given
        together or not at all; None (all three) publishes without noise. Leaves only: an
        aggregator reports the weakest guarantee of its children.
    delta : float or None, default None
        The privacy failure probability, ``0 < delta < 1`` (keep it below 1 / the number of
        readings for a meaningful guarantee).
    clip_norm : float or None, default None
        Euclidean norm, in the readings' units, > 0, each reading is clipped to before it
        enters a block (the sensitivity bound behind eq. (8)).
    chunk_size : int or None, default None
        Columns ``c >= 1`` of a block's masked covariance built at a time (eq. (7)); only
        with mechanism ``"fpca-eq8"``. None uses `FPCAEdge`'s default,
        ``min(n_features, block_size)``.
    noise_seed : int or None, default None
        Seed ``>= 0`` of the leaf's noise generator, for reproducible experiments; needs
        privacy. None draws from the operating system's entropy. Anyone who knows the seed
        can regenerate the noise and remove it, so leave it unset in deployments; two
        leaves of one topology may not share a seed (their noise would cancel in the
        difference of their snapshots). It cannot be set in ``[defaults]``.
    mechanism : str or None, default None
        The private mechanism of a leaf, one of `edge_runtime.fpca.privacy.MECHANISMS`:
        ``"gaussian"`` (the default with privacy: the Gaussian mechanism on each block's
        Gram matrix, analytic calibration, continual release) or ``"fpca-eq8"`` (streaming
        MOD-SuLQ, eq. (8) of Grammenos et al. 2020, to reproduce the paper). Needs privacy;
        None without it.
    release_horizon : int or None, default None
        Releases per segment of the square-root factorisation of a ``"gaussian"`` leaf
        (`edge_runtime.fpca.continual`), 1 to `edge_runtime.fpca.continual.MAX_HORIZON`;
        1 noises each block independently. Defaults to `DEFAULT_RELEASE_HORIZON` (64), or
        to 1 when ``forget < 1`` (the factorisation releases plain prefix sums, which a
        forgetting factor would not be; an explicit value > 1 with ``forget < 1`` is an
        error). None for ``"fpca-eq8"`` and without privacy.
    source : SourceSpec or None, default None
        A leaf's local sensor source (`edge_runtime.sources.SourceSpec` of kind
        ``"command"``, ``"file"`` or ``"serial"``): the leaf reads its readings from it and
        does not subscribe to ``sensor_topic`` (which keeps its default value). None: the
        leaf reads ``sensor_topic`` over MQTT (a TOML ``source = { kind = "mqtt", topic =
        "..." }`` sets ``sensor_topic``). Leaves only; not in ``[defaults]``.
    score : {"off", "reading", "interval"}, default "off"
        Anomaly scoring of a leaf's readings (`edge_runtime.agents.leaf.core.scoring`,
        `edge_runtime.agents.leaf.core.fault_scoring`): none, one JSON document per reading,
        or one per ``score_interval_s``, on ``<prefix>/<path>/scores``. Leaves of FPCA
        topologies only (a ``[defaults]`` value skips aggregators).
    score_detector : {"faults", "static"}, default "faults"
        What scores: ``"faults"``, the streaming sensor-fault detector
        (`edge_runtime.fpca.FaultDetector`: adaptive limits, names the suspected sensor
        and the fault kind) warmed on the leaf's own first ``score_warmup`` readings, no
        model needed; ``"static"``, Q and T^2 against the root's model with static limits
        at ``score_alpha`` (the scoring before issue 25, unchanged).
    score_warmup : int, default `DEFAULT_SCORE_WARMUP`
        Readings (>= 2; a few hundred or more for useful limits) the ``"faults"`` detector
        is warmed on, the leaf's first ones after it starts, assumed clean; buffered as
        ``score_warmup x n_features`` float64 (8 bytes each) until the detector is built,
        then freed. Ignored by ``"static"``.
    score_interval_s : float, default 10.0
        Seconds of one batch in ``"interval"`` mode, > 0.
    score_alpha : float, default 0.01
        Significance in (0, 1) of the Q and T^2 limits (``score_detector = "static"``; the
        fault detector's limits are adaptive, at its own per-rule risks).
    score_allow_private : bool, default False
        Let a private leaf publish scores: each document reveals a reading's Q and T^2,
        which the privacy guarantee does not cover, so a private leaf refuses ``score``
        without it.
    valid_range : tuple or None, default None
        The range a leaf's sensors can produce, in their units, from their datasheet (never
        from the data): ``(lo, hi)`` for every feature, or ``((lo_1, ..., lo_d), (hi_1,
        ..., hi_d))`` per feature (TOML: ``[lo, hi]`` or ``[[lo_1, ...], [hi_1, ...]]``);
        finite, ``lo < hi`` for every feature. Every reading is checked against it before
        it reaches the estimator or the scoring (`edge_runtime.agents.leaf.core.leaf.LeafCore`);
        per-feature bounds of another width than the readings reject every reading
        (reason ``valid_range_width``). None: no check. Leaves only (a ``[defaults]``
        value skips aggregators).
    out_of_range : {"reject", "clip"}, default "reject"
        What a leaf does with a reading that has a value outside ``valid_range``: drop it
        (counted in ``rejects["out_of_range"]``; it still counts as ingested in its
        source's sequence) or clip each value into the range (counted as ``clipped``).
        ``"clip"`` needs ``valid_range``.
    max_reading_rate : float or None, default None
        Readings per second a leaf's sensor can produce at most (declared, finite, > 0),
        for the plausibility checks upstream (`Topology.max_reading_rate`). None: not
        declared. Leaves only.
    open : bool, default False
        An open aggregator: besides the children the topology declares, it admits any
        child whose snapshot arrives on a child topic under its path (the broker's ACL
        decides who may publish there), holding it to the settings of
        `Topology.admitted_leaf`. A node with ``open = True`` is an aggregator even
        without declared children. Not in ``[defaults]``.
    secagg_threshold : int or None, default None
        On an aggregator whose children include leaves of mechanism ``"gaussian-secagg"``
        (a secure-aggregation site of ``n`` such leaves): ``t``, the fewest inputs a
        released slot sums, ``2 t > n`` and ``t <= n``; up to ``n - t`` leaves may drop out
        of a slot. None: ``n - 1`` (filled in by `Topology`). Not in ``[defaults]``.
    secagg_slot_s : float or None, default None
        On such an aggregator: seconds between release slots, >= 2. None:
        `edge_runtime.topology.keys.DEFAULT_SECAGG_SLOT_S` (600, filled in by `Topology`).
        Not in ``[defaults]``.

    Raises
    ------
    TopologyError
        If a value is of the wrong type or out of range; the message names the node.
    """

    id: str
    parent: str | None
    rank: int
    block_size: int | None = None
    adaptive: bool = False
    rank_bounds: tuple[float, float] = (0.01, 0.10)
    holdoff: int = 1
    idle_flush_s: float | None = None
    publish_min_interval_s: float | None = None
    publish_max_interval_s: float | None = None
    publish_angle_rad: float | None = None
    publish_spectrum_change: float | None = None
    publish_growth: float | None = None
    sensor_topic: str | None = None
    share: float = 1.0
    oversample: int | None = None
    forget: float = 1.0
    center: bool = False
    stale_policy: str = "keep"
    stale_after_s: float = 60.0
    stale_weight: float = 0.5
    epsilon: float | None = None
    delta: float | None = None
    clip_norm: float | None = None
    chunk_size: int | None = None
    noise_seed: int | None = None
    mechanism: str | None = None
    release_horizon: int | None = None
    source: SourceSpec | None = None
    score: str = "off"
    score_interval_s: float = 10.0
    score_alpha: float = 0.01
    score_allow_private: bool = False
    score_detector: str = "faults"
    score_warmup: int = DEFAULT_SCORE_WARMUP
    valid_range: tuple[float, float] | tuple[tuple[float, ...], tuple[float, ...]] | None = None
    out_of_range: str = "reject"
    max_reading_rate: float | None = None
    open: bool = False
    secagg_threshold: int | None = None
    secagg_slot_s: float | None = None

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

    def __post_init__(self) -> None:
        check_node(self)  # raises TopologyError; normalises some fields in place

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
