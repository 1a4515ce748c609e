"""The FedPower leaf's estimator: its `LocalGram` behind the interface `LeafCore` drives.

`GramEstimator` has the attributes `LeafCore` reads of an `FPCAEdge` (``n_samples_seen_``,
``tracked_subspace``, ``get_state`` ...), so a FedPower leaf shares the FPCA leaf's whole data
path, and runs a round's noisy local iterations (`iterate`) within its privacy budget.
No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edge_runtime.agents.leaf.core.estimator import estimator_privacy
from edge_runtime.fedpower import LocalGram, local_iterations
from edge_runtime.fedpower.accounting import (
    fedpower_noise_std,
    power_step_sensitivity,
)
from edge_runtime.fpca import Subspace
from edge_runtime.wire import PrivacyParams

__all__ = ["GramEstimator"]


class GramEstimator:
    """A `LocalGram` with the attributes `LeafCore` reads of an `FPCAEdge`.

    Its ``tracked_subspace`` is the Gram matrix itself, exactly, as a full-rank subspace
    ``S = U diag(sigma**2) U^T`` (eigendecomposition): a non-private leaf's snapshot on its
    own ``subspace`` topic is its restore point (a restarted leaf without a checkpoint
    rebuilds ``S`` from it) and what makes its readings durable; the federation never reads
    it. A private estimator's Gram is never published (`FedPowerLeafCore`).

    Privacy (a `PrivacyParams` ``privacy`` and ``iterations`` ``T``; its plain numbers for
    `edge_runtime.fedpower` come from `edge_runtime.agents.leaf.core.estimator.estimator_privacy`):
    rows are clipped into the unit ball (`LocalGram` ``clip_norm``) and `iterate` adds
    i.i.d. Gaussian noise to every local product. ``noise_std_`` is ``sigma =
    fedpower_noise_std(epsilon, delta, T, power_step_sensitivity(rank))`` in the units of
    ``S Q`` (unit-ball rows, `edge_runtime.fedpower.accounting`); the iterations run on
    ``A = S / n`` (the reply's weight is ``n``), so each product gets ``sigma / n``, which
    is ``(S Q + sigma G) / n``: the calibrated mechanism followed by post-processing.
    At most ``T`` iterations are run (`budget_left`).
    Memory: ``8 d**2`` bytes.

    Parameters
    ----------
    n_features : int
        ``d``, the width of a reading; ``S`` is ``(d, d)`` float64.
    rank : int
        ``r``, columns of the basis a round iterates (capped at ``d``).
    privacy : PrivacyParams, optional
        The guarantee (``epsilon``, ``delta``, ``clip_norm``, ``mechanism``); default None:
        no clipping, no noise. Kept as the attribute ``privacy`` (``params`` is the same
        object), with ``clip_norm`` and ``mechanism`` read from it.
    iterations : int, optional
        ``T``, local iterations the budget covers; required (``>= 1``) with ``privacy``.
    random_state : int, numpy.random.Generator or None, optional
        The noise generator's seed (`numpy.random.default_rng`); None: OS entropy.

    Raises
    ------
    ValueError
        With ``privacy`` but without ``iterations >= 1``, or from `fedpower_noise_std`
        for a budget it cannot calibrate.
    """

    chunk_size = None
    n_pending_ = 0
    horizon = 1

    def __init__(
        self,
        n_features: int,
        rank: int,
        *,
        privacy: PrivacyParams | None = None,
        iterations: int | None = None,
        random_state: Any = None,
    ) -> None:
        self.n_features_ = n_features
        self.rank_ = min(rank, n_features)
        self.block_size = 1
        self.n_blocks_ = 0
        self.n_releases_ = 0  # local iterations run (each one a noisy release when private)
        self.n_clipped_ = 0
        self.privacy: PrivacyParams | None = privacy
        if privacy is None:
            self.iterations: int | None = None
            self.noise_std_: float | None = None
            self.gram = LocalGram(n_features)
        else:
            if iterations is None or iterations < 1:
                raise ValueError(
                    f"a private FedPower leaf needs iterations T >= 1, got {iterations}"
                )
            numbers = estimator_privacy(privacy)
            epsilon, delta = numbers["privacy"]
            self.iterations = int(iterations)
            self.noise_std_ = fedpower_noise_std(
                epsilon, delta, self.iterations, power_step_sensitivity(self.rank_)
            )
            self.gram = LocalGram(n_features, clip_norm=numbers["clip_norm"])
        self.rng = np.random.default_rng(random_state)

    @property
    def params(self) -> PrivacyParams | None:
        """The guarantee (``privacy``), as `FedPowerLeafCore.privacy_mismatch` compares it."""
        return self.privacy

    @property
    def clip_norm(self) -> float | None:
        """The guarantee's clip norm (None: not private), as `FPCAEdge.clip_norm`."""
        return None if self.privacy is None else self.privacy.clip_norm

    @property
    def mechanism(self) -> str | None:
        """The guarantee's mechanism (None: not private), as `FPCAEdge.mechanism`."""
        return None if self.privacy is None else self.privacy.mechanism

    @property
    def last_noise_std_(self) -> float | None:
        """``sigma`` in unit-ball ``S Q`` units (what the status ledger reports)."""
        return self.noise_std_

    @property
    def budget_left(self) -> int | None:
        """Local iterations the budget still covers (None: not private)."""
        return None if self.iterations is None else self.iterations - self.n_releases_

    def iterate(self, z: np.ndarray, steps: int) -> np.ndarray:
        """``steps`` local iterations on ``A = S / n`` from ``z`` (noisy when private).

        Raises
        ------
        ValueError
            If the budget does not cover ``steps`` more iterations, or ``z`` does not fit.
        """
        left = self.budget_left
        if left is not None and steps > left:
            raise ValueError(
                f"privacy budget covers {left} more local iterations, round asks {steps}"
            )
        n = self.gram.n_samples
        sigma = 0.0 if self.noise_std_ is None or n == 0 else self.noise_std_ / n
        y = local_iterations(self.gram.matrix, z, steps, rng=self.rng, noise_std=sigma)
        self.n_releases_ += steps
        return y

    @property
    def n_samples_seen_(self) -> int:
        return self.gram.n_samples

    def partial_fit(self, rows: np.ndarray) -> GramEstimator:
        """Add rows ``(n, d)``; ValueError for a wrong width or a non-finite value."""
        before = self.gram.n_samples
        self.gram.add(rows)
        if self.clip_norm is not None and self.gram.n_samples > before:
            x = np.asarray(rows, dtype=np.float64).reshape(-1, self.n_features_)
            self.n_clipped_ += int(np.count_nonzero(np.linalg.norm(x, axis=1) > self.clip_norm))
        self.n_blocks_ += 1
        return self

    def flush(self) -> None:
        return None

    @property
    def tracked_subspace(self) -> Subspace:
        """``S`` as a full-rank subspace (eigenvalues clipped at 0, descending)."""
        values, vectors = np.linalg.eigh(self.gram.gram)
        order = np.argsort(values)[::-1]
        sv = np.sqrt(np.clip(values[order], 0.0, None))
        return Subspace(vectors[:, order], sv, self.gram.n_samples)

    @classmethod
    def from_subspace(cls, subspace: Subspace, rank: int) -> GramEstimator:
        """Rebuild ``S = U diag(sigma**2) U^T`` from a leaf's own full-rank snapshot."""
        basis = np.asarray(subspace.basis, dtype=np.float64)
        d = basis.shape[0]
        if basis.shape[1] != d:
            raise ValueError(f"snapshot has rank {basis.shape[1]}, a Gram needs {d}")
        q, _ = np.linalg.qr(basis)
        q *= np.sign(np.sum(q * basis, axis=0))  # the float32 basis, re-orthonormalised
        s = (q * np.asarray(subspace.singular_values) ** 2) @ q.T
        out = cls(d, rank)
        out.gram = LocalGram.from_state(
            {"gram": (s + s.T) / 2, "n_samples": int(subspace.n_samples), "clip_norm": None}
        )
        return out

    def get_state(self) -> dict[str, object]:
        """Checkpoint state (arrays and JSON values); a private one holds its guarantee
        and ledger (iterations run, readings clipped) too."""
        state: dict[str, object] = {
            "fedpower_gram": self.gram.gram.copy(),
            "fedpower_n": self.gram.n_samples,
            "fedpower_rank": self.rank_,
            "fedpower_blocks": self.n_blocks_,
            "fedpower_iterations_run": self.n_releases_,
            "fedpower_clipped": self.n_clipped_,
        }
        p = self.privacy
        if p is not None:
            state["fedpower_privacy"] = {**p.to_json(), "iterations": self.iterations}
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any], random_state: Any = None) -> GramEstimator:
        """Inverse of `get_state`; ValueError (one line) for a bad state."""
        if "fedpower_gram" not in state:
            raise ValueError("checkpoint holds no FedPower Gram (an FPCA leaf's checkpoint?)")
        gram = np.asarray(state["fedpower_gram"], dtype=np.float64)
        n = state["fedpower_n"]
        raw = state.get("fedpower_privacy")
        privacy, iterations = None, None
        if raw is not None:
            raw = dict(raw)
            iterations = int(raw.pop("iterations"))
            privacy = PrivacyParams(**raw)
        out = cls(
            gram.shape[0],
            int(state["fedpower_rank"]),
            privacy=privacy,
            iterations=iterations,
            random_state=random_state,
        )
        clip = out.gram.clip_norm  # the guarantee's, set by __init__
        out.gram = LocalGram.from_state({"gram": gram, "n_samples": n, "clip_norm": clip})
        out.n_blocks_ = int(state.get("fedpower_blocks", 0))
        out.n_releases_ = int(state.get("fedpower_iterations_run", 0))
        out.n_clipped_ = int(state.get("fedpower_clipped", 0))
        return out
