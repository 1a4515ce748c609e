"""A leaf's estimator and the privacy guarantee it publishes under. No I/O, no clock.

`LeafEstimator` is the part of `LeafCore` that makes and checks the leaf's estimator
(`FPCAEdge`, or a FedPower leaf's `GramEstimator`): its settings for a reading width, the
continual-release horizon, whether a restored one may continue under the configured
guarantee, and what a snapshot taken now would summarise (a private leaf's pending rows are
not released yet). The guarantee compared is a `PrivacyParams` on both sides: the
estimator's own (`snapshot_privacy`) and the topology's (`NodeConfig.privacy`).
`estimator_privacy` is the one place a `PrivacyParams` becomes the plain-number arguments
of the numerics (`FPCAEdge`'s ``privacy=(epsilon, delta)``, ``clip_norm``, ``mechanism``),
which sit below the wire layer and take no `PrivacyParams`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edge_runtime.fpca import FPCAEdge
from edge_runtime.fpca.privacy import NEIGHBOURS, noise_std
from edge_runtime.fpca.private_gram import release_noise_std
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import PrivacyParams, PrivacyStatus

__all__ = ["LeafEstimator", "estimator_privacy", "privacy_status", "snapshot_privacy"]


def estimator_privacy(params: PrivacyParams) -> dict[str, Any]:
    """The arguments of the numerics for the guarantee ``params``: ``privacy=(epsilon,
    delta)``, ``clip_norm`` and ``mechanism`` of `FPCAEdge` (and of
    `edge_runtime.fedpower.fedpower_noise_std` / `LocalGram` through `GramEstimator`,
    which reads them here too). The one conversion from `PrivacyParams` to plain numbers;
    `snapshot_privacy` is its inverse."""
    return {
        "privacy": (params.epsilon, params.delta),
        "clip_norm": params.clip_norm,
        "mechanism": params.mechanism,
    }


def snapshot_privacy(est: FPCAEdge) -> PrivacyParams | None:
    """The guarantee of ``est``'s snapshots: its own privacy settings (budget, clip norm,
    mechanism; replace-one neighbours, `edge_runtime.fpca.privacy.NEIGHBOURS`), or None.
    A FedPower leaf's `GramEstimator` holds its `PrivacyParams` already."""
    if est.privacy is None or isinstance(est.privacy, PrivacyParams):
        return est.privacy
    if est.clip_norm is None or est.mechanism is None:
        return None
    epsilon, delta = est.privacy
    return PrivacyParams(
        epsilon, delta, est.clip_norm, mechanism=est.mechanism, neighbours=NEIGHBOURS
    )


class LeafEstimator:
    """The estimator part of `LeafCore` (a mixin: `LeafCore` holds the attributes below).

    Attributes
    ----------
    config : NodeConfig
        The leaf's settings (rank, block size, privacy, ...).
    privacy : PrivacyParams or None
        The configured guarantee (`NodeConfig.privacy`).
    noise : int, numpy.random.Generator or None
        What a new private estimator draws its noise from (a seed, a generator, or None:
        the operating system's entropy).
    estimator : FPCAEdge or None
        None until the width of a reading is known.
    """

    config: NodeConfig
    privacy: PrivacyParams | None
    noise: int | Any | None
    estimator: FPCAEdge | None

    @property
    def horizon(self) -> int:
        """The continual-release horizon this leaf's estimator runs with (1 unless the
        mechanism is "gaussian", `NodeConfig.release_horizon`)."""
        horizon = self.config.release_horizon
        return 1 if self.privacy is None or horizon is None else horizon

    def estimator_options(self, n_features: int) -> dict[str, Any]:
        """FPCAEdge settings of this leaf for readings of ``n_features`` values.

        Raises
        ------
        ValueError
            If the default block of a private "gaussian" leaf is too large
            (`NodeConfig.block_size_for`).
        """
        cfg = self.config
        rank = min(cfg.rank, n_features)
        privacy: dict[str, Any] = {}
        if self.privacy is not None:
            privacy = {
                **estimator_privacy(self.privacy),
                "horizon": self.horizon,
                "chunk_size": cfg.chunk_size,
                "random_state": self.noise,
            }
        return {
            "rank": rank,
            "block_size": cfg.block_size_for(n_features),
            "oversample": None
            if cfg.oversample is None
            else min(cfg.oversample, n_features - rank),
            "adaptive": cfg.adaptive,
            "rank_bounds": cfg.rank_bounds,
            "holdoff": cfg.holdoff,
            "forget": cfg.forget,
            "center": cfg.center,
            **privacy,
        }

    @staticmethod
    def estimator_from_state(state: Mapping[str, Any], random_state: Any = None) -> FPCAEdge:
        """The estimator of a checkpoint's ``state`` (`FPCAEdge.from_state`)."""
        return FPCAEdge.from_state(state, random_state=random_state)

    def new_estimator(self, n_features: int) -> FPCAEdge:
        """A fresh estimator; raises ValueError for settings the mechanism rejects (eq. (8)'s
        delta bound, a default block too large), here rather than at the first block."""
        options = self.estimator_options(n_features)
        if self.privacy is not None and self.privacy.mechanism == "fpca-eq8":
            noise_std(self.privacy.epsilon, self.privacy.delta, n_features, 1)
        return FPCAEdge(n_features, **options)

    def privacy_mismatch(self, est: FPCAEdge) -> str | None:
        """Why a restored estimator ``est`` may not continue under this leaf's configuration,
        or None: another guarantee (`snapshot_privacy`: budget, clip norm, mechanism, or
        privacy at all) or another continual-release horizon."""
        privacy = snapshot_privacy(est)
        if privacy != self.privacy:
            return f"privacy {privacy}, configured {self.privacy}"
        if self.privacy is not None and est.horizon != self.horizon:
            return f"release horizon {est.horizon}, configured {self.horizon}"
        return None

    @property
    def n_samples(self) -> int:
        """Samples ingested so far."""
        return 0 if self.estimator is None else self.estimator.n_samples_seen_

    def cells(self) -> int:
        """Matrix cells a block update touches (the shell offloads large ones to a thread)."""
        est = self.estimator
        return 0 if est is None else est.n_features_ * (est.rank_ + est.block_size)

    def snapshot_n(self) -> int:
        """Samples a snapshot taken now would summarise (a private leaf's pending rows are
        not in it until they are flushed)."""
        est = self.estimator
        if est is None:
            return 0
        if est.privacy is None:
            return est.n_samples_seen_
        return est.n_samples_seen_ - est.n_pending_


def privacy_status(
    privacy: PrivacyParams | None, est: Any, config: NodeConfig, horizon: int
) -> PrivacyStatus | None:
    """A private leaf's ledger for its status document, or None without privacy.

    The guarantee ``privacy`` and, from the estimator ``est`` (None before the width of a
    reading is known): ``noise_std`` -- for ``"gaussian"`` sigma, the std of the entries of
    each release's noise ``W`` (`release_noise_std`, known before the first reading); for
    ``"fpca-eq8"`` omega of eq. (8) of the last masked block, or of one full block before
    the first -- ``block_size`` (None for a ``"gaussian"`` leaf without one before the width
    is known), ``chunk_size`` (``"fpca-eq8"``), ``horizon`` (``"gaussian"``: the leaf's
    continual-release ``horizon``), ``releases`` (blocks released, `FPCAEdge.n_releases_`)
    and ``clipped`` (readings scaled down to ``clip_norm``, `FPCAEdge.n_clipped_`).
    """
    if privacy is None:
        return None
    gaussian = privacy.mechanism == "gaussian"
    horizon = horizon if gaussian else None
    block_size = config.block_size
    if block_size is not None:
        block_size = max(block_size, config.rank)
    chunk_size = config.chunk_size
    releases = clipped = 0
    sigma = release_noise_std(privacy.epsilon, privacy.delta, horizon) if gaussian else None
    if est is not None:
        block_size, chunk_size = est.block_size, est.chunk_size
        releases, clipped = est.n_releases_, est.n_clipped_
        if est.last_noise_std_ is not None:
            sigma = est.last_noise_std_
        elif not gaussian:
            try:
                sigma = noise_std(privacy.epsilon, privacy.delta, est.n_features_, block_size)
            except ValueError:
                sigma = None
    return PrivacyStatus(
        privacy.epsilon,
        privacy.delta,
        privacy.clip_norm,
        noise_std=sigma,
        block_size=block_size,
        chunk_size=chunk_size,
        mechanism=privacy.mechanism,
        neighbours=privacy.neighbours,
        horizon=horizon,
        releases=releases,
        clipped=clipped,
    )
