"""The checkpoint format of `FPCAEdge`, ``"FPCAEdge/2"``: writing it and checking it.

`FPCAEdge.get_state` returns, and `FPCAEdge.from_state` reads, a flat mapping of plain
values and float64 arrays (what `edge_runtime.checkpoint.save_checkpoint` stores):

- ``"state_format"`` : str, ``"FPCAEdge/2"`` (``"FPCAEdge/1"``, which had no privacy
  keys and no ``n_flushed_``, is still read).
- The checked constructor parameters: ``"n_features"``, ``"rank"``, ``"block_size"``,
  ``"holdoff"`` (int), ``"oversample"``, ``"max_rank"`` (int or None), ``"adaptive"``,
  ``"center"`` (bool), ``"forget"`` (float), ``"rank_bounds"`` (ndarray of shape (2,)).
- ``"rank_"``, ``"oversample_"``, ``"n_samples_seen_"``, ``"n_blocks_"``,
  ``"n_flushed_"`` : int, the estimator's attributes of the same names.
- ``"basis"`` : ndarray of shape (n_features, t), the tracked orthonormal basis as stored
  (``t = n_tracked_``; signs as in the state, not normalised as in `subspace`);
  ``"singular_values"`` : shape (t,).
- ``"pending"`` : ndarray of shape (k, n_features), the ``0 <= k < block_size`` samples
  of the partially filled block, oldest first.
- ``"mean"`` : ndarray of shape (n_features,) and ``"mean_weight"`` : float (the
  effective number of samples behind the mean, `edge_runtime.fpca.centring`) when
  ``center``, else None for both.
- ``"last_rank_change"`` : int or None, the block count at the last adaptive rank change
  (the ``holdoff`` counter).
- ``"privacy"`` : ndarray ``[epsilon, delta]`` of shape (2,) or None; ``"clip_norm"`` :
  float or None; ``"chunk_size"`` : int or None; ``"mechanism"`` : str or None;
  ``"horizon"`` : int; ``"n_releases_"``, ``"n_clipped_"`` : int (a state without them is
  ``"fpca-eq8"`` with privacy, and counts 0).
- With ``mechanism="gaussian"``, the `PrivateGram` keys ``"gram_*"``: the released running
  sum, the open segment's exact sum and its noise key (secret: a checkpoint is as
  sensitive as the raw readings it holds).

Its arrays hold ``n_features * (t + k + 1) + t + 2`` float64 values (plus ``3 d**2`` with
``"gaussian"``), i.e. ``O(n_features * (rank + oversample + block_size))``. The masks'
random generator is not part of it: a restored estimator draws fresh noise (masks are
never replayed; with ``"gaussian"`` the open segment is closed and a new key drawn,
`PrivateGram.close_segment`).

`constructor_kwargs` reads the parameters to build the estimator with, `read_learned` the
rest, checked against them; `check_basis` is shared with `edge_runtime.fpca.snapshot`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from edge_runtime.fpca.parameters import Params

__all__ = [
    "STATE_FORMAT",
    "Learned",
    "check_basis",
    "constructor_kwargs",
    "make_state",
    "read_learned",
]


@dataclass
class Learned:
    """What an `FPCAEdge` has learned, beyond its parameters (the state's other keys)."""

    rank_: int
    n_samples_seen_: int
    n_blocks_: int
    n_flushed_: int
    basis: np.ndarray
    singular_values: np.ndarray
    pending: np.ndarray
    mean: np.ndarray | None
    mean_weight: float | None
    last_rank_change: int | None


def make_state(
    params: Params,
    learned: Learned,
    n_releases: int,
    n_clipped: int,
    release_state: Mapping[str, object],
) -> dict[str, object]:
    """The checkpoint mapping (module docstring) of an estimator; new arrays only."""
    return {
        "state_format": STATE_FORMAT,
        "n_features": params.n_features,
        "rank": params.rank,
        "block_size": params.block_size,
        "oversample": params.oversample,
        "adaptive": params.adaptive,
        "rank_bounds": np.array(params.rank_bounds, dtype=np.float64),
        "holdoff": params.holdoff,
        "max_rank": params.max_rank,
        "forget": params.forget,
        "center": params.center,
        "rank_": learned.rank_,
        "oversample_": params.oversample_,
        "n_samples_seen_": learned.n_samples_seen_,
        "n_blocks_": learned.n_blocks_,
        "n_flushed_": learned.n_flushed_,
        "basis": np.array(learned.basis, dtype=np.float64, order="C"),
        "singular_values": np.array(learned.singular_values, dtype=np.float64),
        "pending": np.array(learned.pending, dtype=np.float64, order="C"),
        "mean": None if learned.mean is None else learned.mean.copy(),
        "mean_weight": learned.mean_weight,
        "last_rank_change": learned.last_rank_change,
        "privacy": None if params.privacy is None else np.array(params.privacy, dtype=np.float64),
        "clip_norm": params.clip_norm,
        "chunk_size": params.chunk_size,
        "mechanism": params.mechanism,
        "horizon": params.horizon,
        "n_releases_": n_releases,
        "n_clipped_": n_clipped,
        **release_state,
    }


def constructor_kwargs(state: object) -> dict[str, object]:
    """The constructor's parameters stored in ``state`` (all but ``random_state``).

    Raises
    ------
    ValueError
        One line naming the field: ``state`` not a mapping, a missing key, an unknown
        ``state_format``, a malformed ``privacy`` or ``rank_bounds``, a wrong type.
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"FPCAEdge state must be a mapping, got {type(state).__name__}")
    missing = [key for key in _STATE_KEYS if key not in state]
    if missing:
        raise ValueError(f"FPCAEdge state is missing {missing[0]!r}")
    if state["state_format"] not in (STATE_FORMAT, "FPCAEdge/1"):
        raise ValueError(
            f"FPCAEdge state: state_format must be {STATE_FORMAT!r}, got {state['state_format']!r}"
        )
    privacy, clip_norm, chunk_size = _state_privacy(state)
    mechanism = state.get("mechanism") or ("fpca-eq8" if privacy is not None else "gaussian")
    bounds = _state_array(state, "rank_bounds", 1)
    if bounds.shape != (2,):
        raise ValueError(f"FPCAEdge state: rank_bounds must have shape (2,), got {bounds.shape}")
    return {
        "n_features": _state_int(state, "n_features"),
        "rank": _state_int(state, "rank"),
        "block_size": _state_int(state, "block_size"),
        "oversample": _state_optional_int(state, "oversample"),
        "adaptive": _state_bool(state, "adaptive"),
        "rank_bounds": (float(bounds[0]), float(bounds[1])),
        "holdoff": _state_int(state, "holdoff"),
        "max_rank": _state_optional_int(state, "max_rank"),
        "forget": _state_float(state, "forget"),
        "center": _state_bool(state, "center"),
        "privacy": privacy,
        "clip_norm": clip_norm,
        "chunk_size": chunk_size,
        "mechanism": mechanism,
        "horizon": state.get("horizon", 1),
    }


def read_learned(state: Mapping[str, object], params: Params) -> Learned:
    """The learned part of ``state``, checked against the estimator's ``params``.

    Raises
    ------
    ValueError
        One line naming the offending field: a value of the wrong type, dtype (float64
        required) or shape, non-finite values, a basis whose columns are not orthonormal
        within 1e-8 (max-abs entry of ``basis^T basis - I``), negative or increasing
        singular values, more directions than the rank allows, or counters that
        contradict each other (``n_samples_seen_`` vs ``n_blocks_ * block_size`` plus the
        flushed and pending rows, the rank outside its bounds, the mean weight vs the
        counts).
    """
    d, b = params.n_features, params.block_size
    oversample_ = _state_int(state, "oversample_")
    if oversample_ != params.oversample_:
        raise ValueError(
            f"FPCAEdge state: oversample_ {oversample_} does not match the parameters "
            f"(expected {params.oversample_})"
        )
    rank_ = _state_int(state, "rank_")
    if params.adaptive:
        if not 1 <= rank_ <= params.rank_cap:
            raise ValueError(
                f"FPCAEdge state: rank_ {rank_} is outside [1, {params.rank_cap}] "
                "(adaptive rank bounds)"
            )
    elif rank_ != params.rank:
        raise ValueError(
            f"FPCAEdge state: rank_ {rank_} differs from rank {params.rank} (adaptive=False)"
        )

    basis = _state_array(state, "basis", 2)
    sv = _state_array(state, "singular_values", 1)
    check_basis(basis, sv, d, params.n_target(rank_), "FPCAEdge state")
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
    if params.center:
        mean = _state_array(state, "mean", 1)
        if mean.shape != (d,):
            raise ValueError(f"FPCAEdge state: mean must have shape ({d},), got {mean.shape}")
        weight = _state_float(state, "mean_weight")
        limit = n_seen - n_pending
        if (
            not 0.0 <= weight <= limit
            or (weight > 0.0) != applied
            or (params.forget == 1.0 and weight != limit)
        ):
            raise ValueError(
                f"FPCAEdge state: mean_weight {weight} is inconsistent with {limit} samples "
                f"applied and forget {params.forget}"
            )
    elif mean is not None or weight is not None:
        raise ValueError("FPCAEdge state: mean and mean_weight must be None when not center")

    last = _state_optional_int(state, "last_rank_change")
    # 0 is a rank change at a `flush` before the first full block (n_blocks_ was 0).
    if last is not None and not (params.adaptive and 0 <= last <= n_blocks):
        raise ValueError(
            f"FPCAEdge state: last_rank_change {last} must be None or in [0, n_blocks_ "
            f"{n_blocks}] (and only with adaptive=True)"
        )
    return Learned(
        rank_=rank_,
        n_samples_seen_=n_seen,
        n_blocks_=n_blocks,
        n_flushed_=flushed,
        basis=basis,
        singular_values=sv,
        pending=pending,
        mean=mean,  # type: ignore[arg-type]
        mean_weight=weight,  # type: ignore[arg-type]
        last_rank_change=last,
    )


# -- field readers ------------------------------------------------------------------------

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
