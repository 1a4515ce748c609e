"""A leaf's estimator and the privacy guarantee it publishes under. No I/O, no clock.

`LeafEstimator` is the part `LeafCore` holds (attribute ``estimators``) that makes and checks
the leaf's estimator (`FPCAEdge`; a FedPower leaf's core makes a `GramEstimator` instead): its
settings for a reading width, the continual-release horizon, and whether a restored one may
continue under the configured guarantee. The guarantee compared is a `PrivacyParams` on both
sides: the estimator's own (`snapshot_privacy`) and the topology's (`NodeConfig.privacy`).
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
    """The estimator part of a leaf core: makes and checks the leaf's estimators.

    Holds the guarantee and the noise source; the core passes the settings (``config``)
    on each call, so an applied configuration needs no copy here.

    Parameters
    ----------
    privacy : PrivacyParams or None
        The configured guarantee (`NodeConfig.privacy`).
    noise : int, numpy.random.Generator or None
        What a new private estimator draws its noise from (a seed, a generator, or None:
        the operating system's entropy).

    Attributes
    ----------
    privacy, noise
        As given; ``noise`` is replaced by the shell after a restore.
    noise_restarts : int
        Restores counted, for the noise seed of a restored estimator (set by the shell).
    """

    def __init__(self, privacy: PrivacyParams | None, noise: int | Any | None) -> None:
        self.privacy = privacy
        self.noise = noise
        self.noise_restarts = 0

    def horizon(self, config: NodeConfig) -> int:
        """The continual-release horizon an estimator runs with under ``config`` (1 unless
        the mechanism is "gaussian", `NodeConfig.release_horizon`)."""
        horizon = config.release_horizon
        return 1 if self.privacy is None or horizon is None else horizon

    def options(self, config: NodeConfig, n_features: int) -> dict[str, Any]:
        """FPCAEdge settings under ``config`` for readings of ``n_features`` values.

        Raises
        ------
        ValueError
            If the default block of a private "gaussian" leaf is too large
            (`NodeConfig.block_size_for`).
        """
        rank = min(config.rank, n_features)
        privacy: dict[str, Any] = {}
        if self.privacy is not None:
            privacy = {
                **estimator_privacy(self.privacy),
                "horizon": self.horizon(config),
                "chunk_size": config.chunk_size,
                "random_state": self.noise,
            }
        return {
            "rank": rank,
            "block_size": config.block_size_for(n_features),
            "oversample": None
            if config.oversample is None
            else min(config.oversample, n_features - rank),
            "adaptive": config.adaptive,
            "rank_bounds": config.rank_bounds,
            "holdoff": config.holdoff,
            "forget": config.forget,
            "center": config.center,
            **privacy,
        }

    @staticmethod
    def from_state(state: Mapping[str, Any], random_state: Any = None) -> FPCAEdge:
        """The estimator of a checkpoint's ``state`` (`FPCAEdge.from_state`)."""
        return FPCAEdge.from_state(state, random_state=random_state)

    def new(self, config: NodeConfig, n_features: int) -> FPCAEdge:
        """A fresh estimator under ``config``; raises ValueError for settings the mechanism
        rejects (eq. (8)'s delta bound, a default block too large), here rather than at the
        first block."""
        options = self.options(config, n_features)
        if self.privacy is not None and self.privacy.mechanism == "fpca-eq8":
            noise_std(self.privacy.epsilon, self.privacy.delta, n_features, 1)
        return FPCAEdge(n_features, **options)

    def mismatch(self, config: NodeConfig, est: FPCAEdge) -> str | None:
        """Why a restored estimator ``est`` may not continue under ``config``, or None:
        another guarantee (`snapshot_privacy`: budget, clip norm, mechanism, or privacy at
        all) or another continual-release horizon."""
        privacy = snapshot_privacy(est)
        if privacy != self.privacy:
            return f"privacy {privacy}, configured {self.privacy}"
        horizon = self.horizon(config)
        if self.privacy is not None and est.horizon != horizon:
            return f"release horizon {est.horizon}, configured {horizon}"
        return None


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
