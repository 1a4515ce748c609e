"""Checkpoint and restore of an `FPCAEdge`: its state format ``"FPCAEdge/2"`` and its checks.

`StateMixin` gives `FPCAEdge` its `get_state` / `from_state` pair: everything needed to
resume an estimator bit-exactly as plain values and arrays (what
`edge_runtime.checkpoint.save_checkpoint` stores), and the validation of such a mapping
read back from disk, one line naming the offending field. The ``_state_*`` readers and
`check_basis` are shared with `edge_runtime.fpca.snapshot` (restoring from a published
snapshot instead of a checkpoint).

The mixin holds no state of its own: it reads and writes the attributes `FPCAEdge`'s
constructor and `reset` create (``_basis``, ``_singular_values``, ``_buffer``,
``_n_pending``, ``_mean_buffer``, ``_weight``, ``_last_rank_change``, ``_gram``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from edge_runtime.fpca.streaming import FPCAEdge

__all__ = ["STATE_FORMAT", "StateMixin", "check_basis"]


class StateMixin:
    """`get_state`, `from_state` and the restore step of `FPCAEdge` (see the module docstring)."""

    __slots__ = ()

    def get_state(self) -> dict[str, np.ndarray | int | float | bool | str | None]:
        """Everything needed to resume this estimator bit-exactly, as plain values and arrays.

        `from_state` of the result continues exactly where this instance is: for any
        stream ``X`` and split ``k``, ``a.partial_fit(X[:k])`` then
        ``FPCAEdge.from_state(a.get_state()).partial_fit(X[k:])`` ends in the
        bitwise-identical state (and `subspace`) of ``partial_fit(X)`` on one instance.
        Reading the state changes nothing. Its arrays hold ``n_features * (t + k + 1) +
        t + 2`` float64 values (``t = n_tracked_`` directions, ``k < block_size`` pending
        rows), i.e. ``O(n_features * (rank + oversample + block_size))``.

        Returns
        -------
        dict
            New arrays (copies, float64) and Python scalars only, so it can be stored by
            `edge_runtime.checkpoint.save_checkpoint` (or any ``npz`` + JSON writer):

            - ``"state_format"`` : str, ``"FPCAEdge/2"`` (`from_state` also reads
              ``"FPCAEdge/1"``, which had no privacy keys).
            - The constructor parameters: ``"n_features"``, ``"rank"``,
              ``"block_size"``, ``"holdoff"`` (int), ``"oversample"``, ``"max_rank"``
              (int or None), ``"adaptive"``, ``"center"`` (bool), ``"forget"`` (float)
              and ``"rank_bounds"`` (ndarray of shape (2,)).
            - ``"rank_"``, ``"oversample_"``, ``"n_samples_seen_"``, ``"n_blocks_"``,
              ``"n_flushed_"`` : int, the attributes of the same names.
            - ``"basis"`` : ndarray of shape (n_features, t), the tracked orthonormal
              basis as stored (``t = n_tracked_``; signs as in the state, not
              normalised as in `subspace`); ``"singular_values"`` : shape (t,).
            - ``"pending"`` : ndarray of shape (k, n_features), the ``0 <= k <
              block_size`` samples of the partially filled block, oldest first.
            - ``"mean"`` : ndarray of shape (n_features,) and ``"mean_weight"`` : float
              (the effective number of samples behind the mean, see Notes of the
              class) when ``center``, else None for both.
            - ``"last_rank_change"`` : int or None, the block count at the last
              adaptive rank change (the ``holdoff`` counter); None if there was none.
            - ``"privacy"`` : ndarray ``[epsilon, delta]`` of shape (2,) or None;
              ``"clip_norm"`` : float or None; ``"chunk_size"`` : int or None;
              ``"mechanism"`` : str or None; ``"horizon"`` : int; ``"n_releases_"``,
              ``"n_clipped_"`` : int (a state without them is ``"fpca-eq8"`` with
              privacy, and counts 0).
            - With ``mechanism="gaussian"``, the `PrivateGram` keys ``"gram_*"``: the
              released running sum, the open segment's exact sum and its noise key
              (secret: a checkpoint is as sensitive as the raw readings it holds).

            The mask's random generator is not part of the state: an estimator
            restored by `from_state` draws fresh noise (masks are never replayed, so
            re-sent samples never get a mask that was already published); with
            ``"gaussian"`` it closes the open segment of the continual release and starts
            a new one with a fresh key (`PrivateGram.close_segment`).
        """
        k = self._n_pending
        return {
            "state_format": STATE_FORMAT,
            "n_features": self.n_features,
            "rank": self.rank,
            "block_size": self.block_size,
            "oversample": self.oversample,
            "adaptive": self.adaptive,
            "rank_bounds": np.array(self.rank_bounds, dtype=np.float64),
            "holdoff": self.holdoff,
            "max_rank": self.max_rank,
            "forget": self.forget,
            "center": self.center,
            "rank_": self.rank_,
            "oversample_": self.oversample_,
            "n_samples_seen_": self.n_samples_seen_,
            "n_blocks_": self.n_blocks_,
            "n_flushed_": self.n_flushed_,
            "basis": np.array(self._basis, dtype=np.float64, order="C"),
            "singular_values": np.array(self._singular_values, dtype=np.float64),
            "pending": np.array(self._buffer[:k], dtype=np.float64, order="C"),
            "mean": self._mean_buffer.copy() if self.center else None,
            "mean_weight": float(self._weight) if self.center else None,
            "last_rank_change": self._last_rank_change,
            "privacy": None if self.privacy is None else np.array(self.privacy, dtype=np.float64),
            "clip_norm": self.clip_norm,
            "chunk_size": self.chunk_size,
            "mechanism": self.mechanism,
            "horizon": self.horizon,
            "n_releases_": self.n_releases_,
            "n_clipped_": self.n_clipped_,
            **({} if self._gram is None else self._gram.get_state()),
        }

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, object],
        *,
        random_state: int | np.random.Generator | None = None,
    ) -> FPCAEdge:
        """A new estimator resuming bit-exactly from a `get_state` result.

        With privacy, "bit-exactly" holds for the state; the masks of later blocks come
        from ``random_state``, never from the generator of the saved estimator.

        Parameters
        ----------
        state : mapping
            As returned by `get_state` (the arrays may be read-only or of any memory
            layout; they are copied). Keys that `get_state` does not produce are
            ignored, so a checkpoint may carry the caller's own keys alongside.
        random_state : int, numpy Generator or None, default=None
            Source of the masks of later blocks with privacy (None: fresh OS entropy).

        Returns
        -------
        FPCAEdge
            Its preallocated buffers are the constructor's, so its memory is bounded
            exactly as for a new instance.

        Raises
        ------
        ValueError
            One line naming the offending field, if ``state`` is not a mapping, lacks a
            key, has a value of the wrong type, dtype (float64 required) or shape,
            non-finite values, a basis whose columns are not orthonormal within 1e-8
            (max-abs entry of ``basis^T basis - I``), negative or increasing singular
            values, more directions than the rank allows, or counters that contradict
            each other (e.g. ``n_samples_seen_`` vs ``n_blocks_ * block_size`` plus the
            pending rows, the rank outside its bounds, the mean weight vs the counts).
            Constructor parameters are checked by the constructor; its TypeError
            becomes a ValueError here.

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
        if not isinstance(state, Mapping):
            raise ValueError(f"FPCAEdge state must be a mapping, got {type(state).__name__}")
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"FPCAEdge state is missing {missing[0]!r}")
        if state["state_format"] not in (STATE_FORMAT, "FPCAEdge/1"):
            raise ValueError(
                f"FPCAEdge state: state_format must be {STATE_FORMAT!r}, "
                f"got {state['state_format']!r}"
            )
        privacy, clip_norm, chunk_size = _state_privacy(state)
        mechanism = state.get("mechanism") or ("fpca-eq8" if privacy is not None else "gaussian")
        horizon = state.get("horizon", 1)
        bounds = _state_array(state, "rank_bounds", 1)
        if bounds.shape != (2,):
            raise ValueError(
                f"FPCAEdge state: rank_bounds must have shape (2,), got {bounds.shape}"
            )
        try:
            edge = cls(
                _state_int(state, "n_features"),
                _state_int(state, "rank"),
                _state_int(state, "block_size"),
                oversample=_state_optional_int(state, "oversample"),
                adaptive=_state_bool(state, "adaptive"),
                rank_bounds=(float(bounds[0]), float(bounds[1])),
                holdoff=_state_int(state, "holdoff"),
                max_rank=_state_optional_int(state, "max_rank"),
                forget=_state_float(state, "forget"),
                center=_state_bool(state, "center"),
                privacy=privacy,
                clip_norm=clip_norm,
                chunk_size=chunk_size,
                random_state=random_state,
                mechanism=mechanism,  # type: ignore[arg-type]
                horizon=horizon,  # type: ignore[arg-type]
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"FPCAEdge state: {exc}") from None
        if edge._gram is not None:
            edge._gram.set_state(state)
            edge._gram.close_segment()  # never reuse the saved key (see close_segment)
        for key in ("n_releases_", "n_clipped_"):
            count = state.get(key, 0)
            if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
                raise ValueError(f"FPCAEdge state: {key} must be an integer >= 0, got {count!r}")
            setattr(edge, key, int(count))
        d, b = edge.n_features, edge.block_size

        oversample_ = _state_int(state, "oversample_")
        if oversample_ != edge.oversample_:
            raise ValueError(
                f"FPCAEdge state: oversample_ {oversample_} does not match the parameters "
                f"(expected {edge.oversample_})"
            )
        rank_ = _state_int(state, "rank_")
        if edge.adaptive:
            if not 1 <= rank_ <= edge._rank_cap:
                raise ValueError(
                    f"FPCAEdge state: rank_ {rank_} is outside [1, {edge._rank_cap}] "
                    "(adaptive rank bounds)"
                )
        elif rank_ != edge.rank:
            raise ValueError(
                f"FPCAEdge state: rank_ {rank_} differs from rank {edge.rank} (adaptive=False)"
            )
        edge.rank_ = rank_

        basis = _state_array(state, "basis", 2)
        sv = _state_array(state, "singular_values", 1)
        check_basis(basis, sv, d, edge._n_target(), "FPCAEdge state")
        t = basis.shape[1]

        pending = _state_array(state, "pending", 2)
        if pending.shape[1:] != (d,) or pending.shape[0] >= b:
            raise ValueError(
                f"FPCAEdge state: pending must have shape (k, {d}) with k < block_size {b}, "
                f"got {pending.shape}"
            )
        n_pending = pending.shape[0]
        n_seen = _state_int(state, "n_samples_seen_")
        n_blocks = _state_int(state, "n_blocks_")
        if n_seen < 0 or n_blocks < 0:
            raise ValueError(
                f"FPCAEdge state: n_samples_seen_ {n_seen} and n_blocks_ {n_blocks} must be >= 0"
            )
        # Samples summarised by the basis beyond the full blocks: those of short blocks
        # (`flush`) and, after `from_subspace` of a snapshot taken within a block, the
        # snapshot's remainder. FPCAEdge/1 states had no flush: fewer than one block.
        if state["state_format"] == "FPCAEdge/1":
            flushed = n_seen - n_blocks * b - n_pending
            consistent = 0 <= flushed < b
        else:
            flushed = _state_int(state, "n_flushed_")
            consistent = flushed >= 0 and n_seen == n_blocks * b + flushed + n_pending
        if not consistent:
            raise ValueError(
                f"FPCAEdge state: n_samples_seen_ {n_seen} does not match n_blocks_ {n_blocks} "
                f"* block_size {b} + n_flushed_ {flushed} + {n_pending} pending rows"
            )
        applied = n_seen - n_pending > 0
        if applied != (t > 0):
            raise ValueError(
                f"FPCAEdge state: basis has {t} directions after {n_seen - n_pending} "
                "samples applied (must be 0 exactly when none were)"
            )

        mean = state["mean"]
        weight = state["mean_weight"]
        if edge.center:
            mean = _state_array(state, "mean", 1)
            if mean.shape != (d,):
                raise ValueError(f"FPCAEdge state: mean must have shape ({d},), got {mean.shape}")
            weight = _state_float(state, "mean_weight")
            limit = n_seen - n_pending
            if (
                not 0.0 <= weight <= limit
                or (weight > 0.0) != applied
                or (edge.forget == 1.0 and weight != limit)
            ):
                raise ValueError(
                    f"FPCAEdge state: mean_weight {weight} is inconsistent with {limit} samples "
                    f"applied and forget {edge.forget}"
                )
        elif mean is not None or weight is not None:
            raise ValueError("FPCAEdge state: mean and mean_weight must be None when not center")

        last = _state_optional_int(state, "last_rank_change")
        # 0 is a rank change at a `flush` before the first full block (n_blocks_ was 0).
        if last is not None and not (edge.adaptive and 0 <= last <= n_blocks):
            raise ValueError(
                f"FPCAEdge state: last_rank_change {last} must be None or in [0, n_blocks_ "
                f"{n_blocks}] (and only with adaptive=True)"
            )

        edge._restore(basis, sv, n_seen, n_blocks, mean, weight, last)
        edge.n_flushed_ = flushed
        edge._buffer[:n_pending] = pending
        edge._n_pending = n_pending
        return edge

    def _restore(
        self,
        basis: np.ndarray,
        singular_values: np.ndarray,
        n_samples_seen: int,
        n_blocks: int,
        mean: np.ndarray | None,
        weight: float,
        last_rank_change: int | None,
    ) -> None:
        """Copy checked state into this freshly reset instance's buffers (no pending rows)."""
        t = basis.shape[1]
        self._current = 0
        target = self._basis_buffers[0]
        target[:, :t] = basis
        self._basis = target[:, :t]
        self._singular_values = np.array(singular_values, dtype=np.float64, copy=True)
        self.n_samples_seen_ = int(n_samples_seen)
        self.n_blocks_ = int(n_blocks)
        if self.center and mean is not None:
            self._mean_buffer[:] = mean
            self._weight = float(weight)
        self._last_rank_change = last_rank_change


# -- helpers of get_state / from_state / from_subspace --------------------------------------

STATE_FORMAT = "FPCAEdge/2"
_STATE_KEYS = (
    "state_format",
    "n_features",
    "rank",
    "block_size",
    "oversample",
    "adaptive",
    "rank_bounds",
    "holdoff",
    "max_rank",
    "forget",
    "center",
    "rank_",
    "oversample_",
    "n_samples_seen_",
    "n_blocks_",
    "basis",
    "singular_values",
    "pending",
    "mean",
    "mean_weight",
    "last_rank_change",
)
_PRIVACY_STATE_KEYS = ("privacy", "clip_norm", "chunk_size", "n_flushed_")

#: Largest ``|basis^T basis - I|`` entry accepted by `FPCAEdge.from_state`/`from_subspace`.
_ORTHONORMAL_TOL = 1e-8


def _state_privacy(
    state: Mapping[str, object],
) -> tuple[tuple[float, float] | None, float | None, int | None]:
    """``(privacy, clip_norm, chunk_size)`` of a state; all None for ``FPCAEdge/1``."""
    if state["state_format"] == "FPCAEdge/1":
        return None, None, None
    missing = [key for key in _PRIVACY_STATE_KEYS if key not in state]
    if missing:
        raise ValueError(f"FPCAEdge state is missing {missing[0]!r}")
    if state["privacy"] is None:
        return None, None, None
    budget = _state_array(state, "privacy", 1)
    if budget.shape != (2,):
        raise ValueError(f"FPCAEdge state: privacy must have shape (2,), got {budget.shape}")
    return (
        (float(budget[0]), float(budget[1])),
        _state_float(state, "clip_norm"),
        _state_optional_int(state, "chunk_size"),
    )


def _state_int(state: Mapping[str, object], key: str) -> int:
    value = state[key]
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"FPCAEdge state: {key} must be an integer, got {value!r}")
    return int(value)


def _state_optional_int(state: Mapping[str, object], key: str) -> int | None:
    value = state[key]
    if value is None:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"FPCAEdge state: {key} must be an integer or None, got {value!r}")
    return int(value)


def _state_bool(state: Mapping[str, object], key: str) -> bool:
    value = state[key]
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"FPCAEdge state: {key} must be a bool, got {value!r}")
    return bool(value)


def _state_float(state: Mapping[str, object], key: str) -> float:
    value = state[key]
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise ValueError(f"FPCAEdge state: {key} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"FPCAEdge state: {key} must be finite, got {out}")
    return out


def _state_array(state: Mapping[str, object], key: str, ndim: int) -> np.ndarray:
    value = state[key]
    if not isinstance(value, np.ndarray):
        raise ValueError(f"FPCAEdge state: {key} must be an ndarray, got {type(value).__name__}")
    if value.dtype != np.float64:
        raise ValueError(f"FPCAEdge state: {key} must have dtype float64, got {value.dtype}")
    if value.ndim != ndim:
        raise ValueError(f"FPCAEdge state: {key} must be {ndim}-D, got shape {value.shape}")
    if not np.isfinite(value).all():
        raise ValueError(f"FPCAEdge state: {key} contains NaN or infinity")
    return value


def check_basis(
    basis: np.ndarray, sv: np.ndarray, n_features: int, max_rank: int, where: str
) -> None:
    """ValueError unless ``basis`` (d, t <= max_rank) is orthonormal and ``sv`` (t,) fits it."""
    if basis.shape[0] != n_features or basis.shape[1] > max_rank:
        raise ValueError(
            f"{where}: basis must have shape ({n_features}, t) with t <= {max_rank}, "
            f"got {basis.shape}"
        )
    if sv.shape != (basis.shape[1],):
        raise ValueError(
            f"{where}: singular_values must have shape ({basis.shape[1]},), got {sv.shape}"
        )
    if not (np.isfinite(basis).all() and np.isfinite(sv).all()):
        raise ValueError(f"{where}: basis or singular_values contain NaN or infinity")
    if basis.shape[1]:
        error = float(np.max(np.abs(basis.T @ basis - np.eye(basis.shape[1]))))
        if not error <= _ORTHONORMAL_TOL:
            raise ValueError(
                f"{where}: basis is not orthonormal (max |B^T B - I| = {error:.3g} > "
                f"{_ORTHONORMAL_TOL:g})"
            )
    if np.any(sv < 0.0) or np.any(sv[1:] > sv[:-1]):
        raise ValueError(f"{where}: singular_values must be non-negative and non-increasing")
