"""FPCA-Edge: streaming, block-based truncated SVD with bounded memory (eq. (2)-(4)).

One estimator class, `FPCAEdge`; the maths it runs are functions of their own modules:
the block update (eq. (3), `edge_runtime.fpca.linalg.svd_update`), the centred mean
(`edge_runtime.fpca.centring`), the adaptive rank (eq. (4),
`edge_runtime.fpca.adaptive_rank`), the release mechanism of a private block
(`edge_runtime.fpca.release`), the parameter checks (`edge_runtime.fpca.parameters`), the
checkpoint format (`edge_runtime.fpca.state`) and snapshots (`edge_runtime.fpca.snapshot`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edge_runtime.fpca._validation import NotFittedError, check_batch, check_samples
from edge_runtime.fpca.adaptive_rank import rank_step
from edge_runtime.fpca.centring import centre_rows
from edge_runtime.fpca.linalg import TrackedBasis
from edge_runtime.fpca.parameters import PARAM_NAMES, Param, Params, check_params
from edge_runtime.fpca.release import Fold, make_release
from edge_runtime.fpca.snapshot import fold_pending, read_snapshot
from edge_runtime.fpca.state import Learned, constructor_kwargs, make_state, read_learned
from edge_runtime.fpca.subspace import Subspace, flip_signs

__all__ = ["FPCAEdge"]


class FPCAEdge:
    """Streaming rank-``r`` PCA of a sample stream, one block update at a time (FPCA-Edge).

    Samples (rows) are buffered into blocks of ``b = block_size``; each full block ``B``
    updates the state to the truncated SVD of ``[forget * U S, B^T]`` (eq. (3)), from the
    current basis and the block only. The state tracks ``t = min(rank_ + oversample_,
    n_features)`` directions and reports the leading ``rank_``. **Memory** is constant and
    allocated once: at most ``n_features * (3 t + b + 3) + min(n_features, t + b + 1)**2 +
    t`` float64 values (62 KB at d = 48, r = 10, b = 50; ``tests/test_fpca_memory.py``),
    plus ``3 d**2`` with ``mechanism="gaussian"``. **Time** per block: ``O(n_features (t +
    b)**2 + min(n_features, t + b)**3)``. Any chunking into `partial_fit` calls gives the
    bitwise-identical state. A scikit-learn transformer, without depending on it.

    Parameters
    ----------
    n_features : int or None
        ``d >= 1``; None: from the first `fit`/`partial_fit` (each `fit` re-learns it).
        Given, the parameters are checked (TypeError, ValueError naming the value,
        `~.parameters.check_params`) and memory allocated here, else at the first fit.
    rank : int
        Reported rank ``r`` (the initial one if ``adaptive``), ``1 <= rank <= d``.
    block_size : int or None, default=None
        ``b >= 1`` samples per update; None: 50, or with privacy the mechanism's
        (`edge_runtime.fpca.privacy.gaussian_default_block_size`, ``default_block_size``).
    oversample : int or None, default=None
        Extra directions ``p >= 0``; None: ``min(rank, d - rank)`` (``d - rank`` with
        ``"gaussian"``).
    adaptive : bool, default=False
        Move the rank after each block by eq. (4) (`edge_runtime.fpca.adaptive_rank`).
    rank_bounds : tuple of (float, float), default=(0.01, 0.10)
        Eq. (4)'s ``0 < lower < upper < 1`` on the last direction's relative weight.
    holdoff : int, default=1
        Minimum blocks between two adaptive rank changes.
    max_rank : int or None, default=None
        Limit of the adaptive rank; None: ``min(d, block_size)``.
    forget : float, default=1.0
        ``lambda`` in (0, 1] of eq. (2): a sample ``j`` blocks old weighs ``lambda**(2 j)``.
    center : bool, default=False
        Summarise the samples minus their streaming mean (Ross et al. 2008, as
        scikit-learn's PCA); False (the paper's) summarises them about the origin.
    privacy : tuple of (float, float) or None, default=None
        ``(epsilon, delta)``: all results are ``(epsilon, delta)``-DP per sample,
        replace-one (`edge_runtime.fpca.release`). Not with ``center``.
    clip_norm : float or None, default=None
        Required with ``privacy``: samples are clipped to this norm ``C`` (data units).
    chunk_size : int or None, default=None
        ``"fpca-eq8"``: columns ``c`` of eq. (7) per chunk; None: ``min(d, b)``.
    random_state : int, numpy Generator or None, default=None
        With ``privacy``, the noise's source (None: OS entropy); never reuse a seed
        across restarts of one stream.
    mechanism : {"gaussian", "fpca-eq8"}, default="gaussian"
        With ``privacy``: the analytic Gaussian mechanism on each block's Gram matrix,
        or the paper's streaming MOD-SuLQ (eq. (5)-(8)), kept for reproduction.
    horizon : int, default=1
        ``"gaussian"``: releases per segment of the continual release
        (`edge_runtime.fpca.continual`), 1-4096; ``forget < 1`` needs 1.

    Attributes
    ----------
    components_ : ndarray of shape (r, n_features)
        The reported directions as rows, ``r <= rank_`` (`subspace`'s basis, transposed);
        also ``singular_values_``, ``explained_variance_``, ``explained_variance_ratio_``.
    mean_ : ndarray of shape (n_features,) or None
        With ``center``, the mean of the applied blocks.
    n_samples_seen_ : int
        ``n_blocks_ * block_size + n_flushed_ + n_pending_``: full blocks, samples of
        short blocks (`flush`, `from_subspace`) and pending ones.
    n_features_, n_features_in_, rank_, oversample_, n_tracked_ : int
        ``d``, the current reported rank, ``p``, the directions in the state.
    n_releases_, n_clipped_, last_noise_std_ : int, int, float or None
        Private blocks released and samples clipped (never reset); the last release's
        noise std in unit-ball units.
    n_features, rank, block_size, ... : the parameters
        Checked once configured (``block_size``, ``chunk_size`` resolved, ``mechanism``
        None without privacy); `get_params` returns them as given.

    Notes
    -----
    Grammenos et al. (2020): block update eq. (3), forgetting eq. (2), adaptive rank eq.
    (4), streaming MOD-SuLQ eq. (5)-(8). Results have deterministic signs (the
    largest-|.| entry of each column positive). Per-block problems are small: run under
    ``threadpoolctl.threadpool_limits(1, "blas")`` where other work competes. Accuracy,
    oversampling and speed are measured in ``benchmarks/report/REPORT.md``.

    References
    ----------
    A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
    Component Analysis." NeurIPS 2020. arXiv:1907.08059.
    D. A. Ross, J. Lim, R.-S. Lin, M.-H. Yang. "Incremental Learning for Robust Visual
    Tracking." IJCV 77, 2008. doi:10.1007/s11263-007-0075-7.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import FPCAEdge, error_ratio
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 3)) @ rng.normal(size=(3, 12))
    >>> X += 0.01 * rng.normal(size=X.shape)
    >>> edge = FPCAEdge(n_features=12, rank=3, block_size=20).partial_fit(X[:333])
    >>> edge = edge.partial_fit(X[333:])
    >>> edge.n_samples_seen_, edge.n_blocks_, edge.subspace.rank, edge.n_tracked_
    (500, 25, 3, 6)
    >>> error_ratio(X, edge.subspace.basis) < 1.001
    True
    >>> centred = FPCAEdge(None, 3, 20, center=True).fit(X + 5.0)
    >>> bool(np.allclose(centred.mean_, X.mean(axis=0) + 5.0))
    True
    >>> centred.transform(X[:4]).shape, centred.components_.shape
    ((4, 3), (3, 12))
    """

    # The parameters as attributes: checked once configured (`parameters.Param`).
    n_features, rank, block_size, oversample = Param(), Param(), Param(), Param()
    adaptive, rank_bounds, holdoff, max_rank = Param(), Param(), Param(), Param()
    forget, center, privacy, clip_norm = Param(), Param(), Param(), Param()
    chunk_size, random_state, mechanism, horizon = Param(), Param(), Param(), Param()

    def __init__(
        self,
        n_features: int | None,
        rank: int,
        block_size: int | None = None,
        *,
        oversample: int | None = None,
        adaptive: bool = False,
        rank_bounds: tuple[float, float] = (0.01, 0.10),
        holdoff: int = 1,
        max_rank: int | None = None,
        forget: float = 1.0,
        center: bool = False,
        privacy: tuple[float, float] | None = None,
        clip_norm: float | None = None,
        chunk_size: int | None = None,
        random_state: int | np.random.Generator | None = None,
        mechanism: str = "gaussian",
        horizon: int = 1,
    ) -> None:
        given = locals()
        self._given = {name: given[name] for name in PARAM_NAMES}
        self._checked: Params | None = None
        if n_features is not None:
            self._configure(n_features)

    # -- configuration (scikit-learn's parameter protocol) ------------------------------

    def get_params(self, deep: bool = True) -> dict[str, object]:
        """The constructor's parameters as given (scikit-learn's protocol; ``deep`` unused)."""
        return dict(self._given)

    def set_params(self, **params: object) -> FPCAEdge:
        """Record parameters as given (scikit-learn's protocol); ``self``, now unfitted.

        The learned state is dropped; the next `fit` or `partial_fit` checks the
        parameters. ValueError if a name is not a constructor parameter.
        """
        unknown = sorted(set(params) - set(PARAM_NAMES))
        if unknown:
            raise ValueError(
                f"Invalid parameter {unknown[0]!r} for estimator FPCAEdge. "
                f"Valid parameters are: {sorted(PARAM_NAMES)!r}."
            )
        if params:
            given = {**self._given, **params}
            self.__dict__.clear()
            self._given, self._checked = given, None
        return self

    def _configure(self, n_features: int) -> None:
        """Check the parameters for ``n_features``; allocate the buffers; empty state."""
        params, rng = check_params(self._given, n_features)
        release = make_release(params, rng)
        release.reset()  # may raise (forget with horizon); the gaussian release's first key
        d, t, n_cols = params.n_features, params.max_tracked, params.block_size + params.center
        self._checked, self._release = params, release
        self.n_features_, self.oversample_ = d, params.oversample_
        # Allocated once: the block (+ the mean-correction row if centred), basis, mean.
        self._buffer = np.empty((n_cols, d))
        self._state = TrackedBasis(d, t, n_cols)
        self._mean_buffer = np.zeros(d)
        self._block_mean = np.empty(d)
        self._empty()

    def _params(self) -> Params:
        if self._checked is None:
            raise NotFittedError("FPCAEdge is not fitted: call fit or partial_fit first")
        return self._checked

    def _empty(self) -> None:
        """The learned state of no samples (the release mechanism is not touched)."""
        self.rank_ = self._params().rank
        self.n_samples_seen_ = 0
        self.n_blocks_ = 0
        self.n_flushed_ = 0
        self._n_pending = 0
        self._state.empty()
        self._mean_buffer.fill(0.0)
        self._weight = 0.0  # effective number of samples behind the mean (center=True)
        self._last_rank_change: int | None = None

    def reset(self) -> FPCAEdge:
        """Forget all samples (``"gaussian"``: a new released sum, new key); ``self``."""
        self._params()
        self._release.reset()
        self._empty()
        return self

    # -- learning -------------------------------------------------------------------------

    def partial_fit(self, X: np.ndarray, y: None = None) -> FPCAEdge:  # noqa: N803
        """Add samples ``X`` ``(n_samples, n_features)``; each completed block updates; ``self``.

        1-D ``X`` is one sample (once ``n_features`` is known); zero rows is a no-op; ``X``
        is copied, never modified or kept; ``y`` is ignored. Raises ValueError for a wrong
        number of features (``"X has 46 features, expected 48"``), not 1-D or 2-D, NaN or
        infinity, TypeError if not real numeric; the state is unchanged then.
        """
        if self._checked is None:
            n_features = self._given["n_features"]
            self._configure(check_batch(X).shape[1] if n_features is None else n_features)
        x = check_samples(X, self._params().n_features)
        return self._consume(x)

    def fit(self, X: np.ndarray, y: None = None) -> FPCAEdge:  # noqa: N803
        """`reset`, then `partial_fit` ``X``: the subspace of ``X`` alone; ``self``.

        Errors as `partial_fit` (and for zero samples), before the state is reset. With
        ``n_features=None``, ``X`` must be 2-D and sets it afresh.
        """
        if self._given["n_features"] is None:
            x = check_batch(X)  # re-learns n_features: checked before anything changes
        else:
            if self._checked is None:
                self._configure(self._given["n_features"])
            x = check_samples(X, self._params().n_features)
        if not x.shape[0]:
            raise ValueError(f"fit needs at least one sample, got X of shape {x.shape}")
        if self._given["n_features"] is None:
            self._configure(x.shape[1])
            return self._consume(x)
        return self.reset()._consume(x)

    def _consume(self, x: np.ndarray) -> FPCAEdge:
        """Copy checked samples ``x`` into the block buffer, applying each full block."""
        n = x.shape[0]
        b = self._params().block_size
        buffer = self._buffer
        start = 0
        while start < n:  # one iteration per block touched: <= n / block_size + 1
            pending = self._n_pending
            take = min(b - pending, n - start)
            buffer[pending : pending + take] = x[start : start + take]
            self._n_pending = pending + take
            start += take
            if self._n_pending == b:
                self._apply_block(b)
        self.n_samples_seen_ += n
        return self

    def _apply_block(self, k: int) -> None:
        """Apply the first ``k`` buffered rows as one block: release, then eq. (3)."""
        p = self._params()
        rows = self._buffer[:k]
        if p.center:  # never with privacy
            n_cols, self._weight = centre_rows(
                self._buffer, k, self._mean_buffer, self._weight, self._block_mean, p.forget
            )
            rows = self._buffer[:n_cols]
        step = self._release.release(rows, p.n_target(self.rank_), self.rank_)
        if isinstance(step, Fold):
            self._state.update(*step, p.n_target(self.rank_), p.forget, self.rank_)
        else:
            self._state.set(*step)
        self._end_block(k)

    def _end_block(self, k: int) -> None:
        """After an applied block of ``k`` samples: empty buffer, counts, eq. (4)'s rank step."""
        p = self._params()
        self._n_pending = 0
        if k == p.block_size:  # a full block, or a short one (`flush`)
            self.n_blocks_ += 1
        else:
            self.n_flushed_ += k
        if not p.adaptive:
            return
        sv, last = self._state.singular_values, self._last_rank_change
        step = rank_step(sv, self.rank_, p.rank_cap, p.rank_bounds, self.n_blocks_, last, p.holdoff)
        if step:
            self.rank_ += step
            if step < 0:  # the last tracked direction is dropped at once
                self._state.truncate(p.n_target(self.rank_))
            self._last_rank_change = self.n_blocks_

    def flush(self) -> FPCAEdge:
        """Apply the pending partial block now, as a short block (a no-op if none); ``self``.

        Without privacy the pending rows are folded in by eq. (3), as `subspace` does on a
        copy. With privacy they are released as a block of ``k < block_size`` rows whose
        noise is calibrated to ``k``: each flush adds as much noise as a full block, so
        flush only when the stream pauses or ends (a leaf flushes after ``idle_flush_s``).
        """
        k = self._n_pending if self._checked is not None else 0
        if not k:
            return self
        p = self._params()
        if p.privacy is not None:
            self._apply_block(k)
            return self
        basis, sv, mean, weight = self._folded()
        self._state.set(basis, sv)
        if mean is not None:
            self._mean_buffer[:] = mean
            self._weight = weight
        self._end_block(k)
        return self

    # -- what it reports --------------------------------------------------------------------

    def _folded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float]:
        p, pending = self._params(), self._buffer[: self._n_pending]
        mean = self._mean_buffer if p.center else None
        return fold_pending(self._state, pending, mean, self._weight, p, self.rank_)

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
        """Basis, singular values, mean and sample count of a snapshot (module `snapshot`)."""
        p = self._params()
        if p.privacy is not None or not self._n_pending:
            mean = self._mean_buffer.copy() if p.center else None
            n = self.n_samples_seen_ - self._n_pending
            return self._state.basis, self._state.singular_values, mean, n
        basis, sv, mean, _ = self._folded()
        return basis, sv, mean, self.n_samples_seen_

    @property
    def tracked_subspace(self) -> Subspace:
        """All ``t`` tracked directions, pending rows folded in (not with privacy), what a leaf
        publishes: ``basis`` ``(d, t)``, ``singular_values`` ``(t,)``, ``n_samples``
        summarised, ``mean`` if ``center``. Reading it changes nothing."""
        basis, sv, mean, n = self._snapshot()
        return Subspace(flip_signs(basis), sv.copy(), n, mean)

    @property
    def subspace(self) -> Subspace:
        """The leading ``r <= rank_`` directions of `tracked_subspace` (none before a sample)."""
        basis, sv, mean, n = self._snapshot()
        r = min(self.rank_, basis.shape[1])
        return Subspace(flip_signs(basis[:, :r]), sv[:r].copy(), n, mean)

    n_tracked_ = property(lambda self: int(self._state.basis.shape[1]), doc="Directions held.")
    n_pending_ = property(lambda self: self._n_pending, doc="Samples in the partial block.")
    n_features_in_ = property(lambda self: self.n_features_, doc="``n_features_``.")
    n_releases_ = property(lambda self: self._release.n_releases, doc="Private releases.")
    n_clipped_ = property(lambda self: self._release.n_clipped, doc="Samples clipped.")
    last_noise_std_ = property(lambda self: self._release.last_noise_std, doc="Unit-ball units.")
    _gram = property(lambda self: self._release.gram, doc="The gaussian release's Gram sum.")

    @property
    def mean_(self) -> np.ndarray | None:
        """Mean of the applied blocks when ``center`` (a copy), else None; `subspace` ``.mean``
        (what `transform` centres on) also folds in the pending rows."""
        return self._mean_buffer.copy() if self._params().center else None

    def _fitted_subspace(self) -> Subspace:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError("FPCAEdge has summarised no sample: fit or partial_fit first")
        return self.subspace

    @property
    def components_(self) -> np.ndarray:
        """``(r, n_features)``: the reported directions as rows (`subspace` ``.basis.T``)."""
        return self._fitted_subspace().basis.T.copy()

    @property
    def singular_values_(self) -> np.ndarray:
        """``(r,)``: the reported singular values (`subspace` ``.singular_values``)."""
        return self._fitted_subspace().singular_values

    @property
    def explained_variance_(self) -> np.ndarray:
        """``(r,)``: ``singular_values_**2 / (n_samples - 1)`` (about 0 unless ``center``)."""
        snap = self._fitted_subspace()
        return snap.singular_values**2 / max(snap.n_samples - 1, 1)

    @property
    def explained_variance_ratio_(self) -> np.ndarray:
        """``(r,)``: shares of the variance of the *tracked* directions (`tracked_subspace`).

        The total variance is not kept (what the updates truncate is lost): an upper bound
        of the share of the total, exact when all ``n_features`` directions are tracked.
        """
        snap = self._fitted_subspace()
        total = float(np.sum(self.tracked_subspace.singular_values**2))
        return snap.singular_values**2 / total if total > 0.0 else snap.singular_values * 0.0

    def __sklearn_is_fitted__(self) -> bool:
        """True once the state summarises at least one sample (`subspace` has a direction)."""
        if self._checked is None:
            return False
        private = self._checked.privacy is not None
        return self.n_samples_seen_ - (self._n_pending if private else 0) > 0

    def transform(self, X: np.ndarray) -> np.ndarray:  # noqa: N803
        """Coordinates ``(X - mean) @ basis`` ``(n_samples, r)`` of ``X`` ``(n_samples, d)``.

        ``basis`` and ``mean`` (none unless ``center``) are `subspace`'s. Raises
        NotFittedError (a ValueError and AttributeError) before any sample is summarised;
        ValueError, TypeError as `partial_fit`, and for a 1-D ``X``.
        """
        snap = self._fitted_subspace()
        x = check_batch(X)
        if x.shape[1] != self.n_features_:
            raise ValueError(f"X has {x.shape[1]} features, expected {self.n_features_}")
        if snap.mean is not None:
            x = x - snap.mean
        return x @ np.ascontiguousarray(snap.basis)  # C order: as the basis on the wire

    def inverse_transform(self, X: np.ndarray) -> np.ndarray:  # noqa: N803
        """Samples ``X @ basis.T + mean`` ``(n, n_features)`` of coordinates ``X`` ``(n, r)``."""
        snap = self._fitted_subspace()
        z = check_batch(X)
        if z.shape[1] != snap.rank:
            raise ValueError(f"X has {z.shape[1]} columns, expected the rank {snap.rank}")
        out = z @ snap.basis.T
        return out if snap.mean is None else out + snap.mean

    def fit_transform(self, X: np.ndarray, y: None = None) -> np.ndarray:  # noqa: N803
        """`fit` ``X``, then `transform` it."""
        return self.fit(X).transform(X)

    def __sklearn_tags__(self) -> object:
        """scikit-learn's tags (imported here: scikit-learn is not a dependency)."""
        from sklearn.utils import Tags, TargetTags, TransformerTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(),
            non_deterministic=self._given["privacy"] is not None,
        )

    # -- checkpoints and snapshots ------------------------------------------------------

    def _learned(self) -> Learned:
        p = self._params()
        return Learned(  # views: `make_state` copies
            rank_=self.rank_,
            n_samples_seen_=self.n_samples_seen_,
            n_blocks_=self.n_blocks_,
            n_flushed_=self.n_flushed_,
            basis=self._state.basis,
            singular_values=self._state.singular_values,
            pending=self._buffer[: self._n_pending],
            mean=self._mean_buffer if p.center else None,
            mean_weight=float(self._weight) if p.center else None,
            last_rank_change=self._last_rank_change,
        )

    def _restore(self, learned: Learned) -> None:
        """Copy checked ``learned`` state into this freshly configured instance's buffers."""
        self.rank_ = learned.rank_
        self._state.set(learned.basis, learned.singular_values, spare=False)
        self.n_samples_seen_ = int(learned.n_samples_seen_)
        self.n_blocks_ = int(learned.n_blocks_)
        self.n_flushed_ = learned.n_flushed_
        if self._params().center and learned.mean is not None:
            self._mean_buffer[:] = learned.mean
            self._weight = float(learned.mean_weight or 0.0)
        self._last_rank_change = learned.last_rank_change
        k = learned.pending.shape[0]
        self._buffer[:k] = learned.pending
        self._n_pending = k

    def get_state(self) -> dict[str, object]:
        """Everything needed to resume bit-exactly, as plain values and new float64 arrays.

        ``FPCAEdge.from_state(a.get_state())`` continues exactly where ``a`` is. The keys
        (format ``"FPCAEdge/2"``) are listed in `edge_runtime.fpca.state`. With
        ``"gaussian"`` it holds the noise key: as sensitive as the raw readings.
        """
        rel = self._release
        return make_state(
            self._params(), self._learned(), rel.n_releases, rel.n_clipped, rel.get_state()
        )

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, object],
        *,
        random_state: int | np.random.Generator | None = None,
    ) -> FPCAEdge:
        """A new estimator resuming bit-exactly from a `get_state` result ``state``.

        ``state``'s arrays may have any layout (they are copied); other keys are ignored,
        so a checkpoint may carry the caller's own. ``random_state``: with privacy, the
        noise of later blocks (never the saved estimator's). ValueError, one line naming
        the offending field (`edge_runtime.fpca.state.read_learned`), for a bad state.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(130, 6))
        >>> first = FPCAEdge(6, 2, 20, center=True).partial_fit(X[:77])
        >>> resumed = FPCAEdge.from_state(first.get_state()).partial_fit(X[77:])
        >>> whole = FPCAEdge(6, 2, 20, center=True).partial_fit(X)
        >>> bool(np.array_equal(resumed.subspace.basis, whole.subspace.basis))
        True
        """
        kwargs = constructor_kwargs(state)
        assert isinstance(state, Mapping)
        try:
            edge = cls(**kwargs, random_state=random_state)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"FPCAEdge state: {exc}") from None
        edge._release.set_state(state)
        edge._restore(read_learned(state, edge._params()))
        return edge

    @classmethod
    def from_subspace(
        cls,
        subspace: Subspace,
        *,
        rank: int,
        block_size: int = 50,
        current_rank: int | None = None,
        **params: object,
    ) -> FPCAEdge:
        """A new estimator continuing from a published (tracked) snapshot ``subspace``.

        Its basis (the leading ``min(rank_ + oversample_, d)`` directions), singular
        values, ``n_samples`` and (centred) ``mean`` become the state, ``n_features``
        comes from it; no pending rows. ``rank``, ``block_size`` and ``**params`` are the
        constructor's: the publisher's configuration; ``current_rank`` its ``rank_``
        (None: ``rank``). With ``"gaussian"`` the released sum restarts as ``U diag(s**2)
        U^T / clip_norm**2``. What is lost against a checkpoint: `edge_runtime.fpca.snapshot`.
        A leaf's restore without a checkpoint; also the fitted model of
        `edge_runtime.model.load_model`. TypeError if ``subspace`` is not a `Subspace`;
        the constructor's errors, and `~.snapshot.read_snapshot`'s ValueError.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(130, 6))
        >>> snapshot = FPCAEdge(6, 2, 20).partial_fit(X[:60]).tracked_subspace
        >>> resumed = FPCAEdge.from_subspace(snapshot, rank=2, block_size=20)
        >>> resumed = resumed.partial_fit(X[60:])
        >>> whole = FPCAEdge(6, 2, 20).partial_fit(X)
        >>> bool(np.array_equal(resumed.subspace.basis, whole.subspace.basis))
        True
        """
        if not isinstance(subspace, Subspace):
            raise TypeError(f"subspace must be a Subspace, got {type(subspace).__name__}")
        edge = cls(subspace.n_features, rank, block_size, **params)  # type: ignore[arg-type]
        learned = read_snapshot(subspace, edge._params(), current_rank)
        edge._restore(learned)
        edge._release.resume(learned.basis, learned.singular_values)
        return edge

    def __repr__(self) -> str:
        if self._checked is None:
            given = ", ".join(f"{name}={self._given[name]!r}" for name in PARAM_NAMES[:3])
            return f"FPCAEdge({given}, ...)"
        return (
            f"FPCAEdge(n_features={self.n_features}, rank={self.rank}, "
            f"block_size={self.block_size}, oversample={self.oversample_}, "
            f"adaptive={self.adaptive}, center={self.center}, privacy={self.privacy}, "
            f"clip_norm={self.clip_norm}, mechanism={self.mechanism!r}, rank_={self.rank_}, "
            f"n_samples_seen_={self.n_samples_seen_})"
        )
