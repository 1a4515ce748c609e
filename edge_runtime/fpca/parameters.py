"""The checked configuration of an `FPCAEdge`: its constructor's parameters, validated once.

`check_params` turns the parameters as given (what `FPCAEdge.get_params` returns) into a
frozen `Params` plus the release mechanism's source of randomness; it is the only place
they are checked, in a fixed order, each error one line naming the value. `FPCAEdge`
calls it from its constructor when ``n_features`` is known, else at the first `fit` or
`partial_fit` (``n_features`` then comes from ``X``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_runtime.fpca import privacy as _privacy
from edge_runtime.fpca._validation import check_forget, check_int, check_positive
from edge_runtime.fpca.adaptive_rank import check_rank_bounds, rank_cap
from edge_runtime.fpca.privacy import MECHANISMS
from edge_runtime.fpca.private_gram import check_horizon

__all__ = ["PARAM_NAMES", "PLAIN_BLOCK_SIZE", "Param", "Params", "check_params"]

#: Block size without privacy when none is given.
PLAIN_BLOCK_SIZE = 50

#: `FPCAEdge`'s constructor parameters, in the constructor's order.
PARAM_NAMES = (
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
    "privacy",
    "clip_norm",
    "chunk_size",
    "random_state",
    "mechanism",
    "horizon",
)


@dataclass(frozen=True)
class Params:
    """Checked parameters of one `FPCAEdge` (see its docstring for each).

    The fields named as the constructor's parameters hold the checked values: ints and
    floats converted, ``block_size`` and ``chunk_size`` resolved from None, ``privacy``
    a tuple of floats, ``mechanism`` None without privacy. Derived: ``oversample_`` (the
    extra directions tracked) and ``rank_cap`` (the largest reported rank).
    """

    n_features: int
    rank: int
    block_size: int
    oversample: int | None
    adaptive: bool
    rank_bounds: tuple[float, float]
    holdoff: int
    max_rank: int | None
    forget: float
    center: bool
    privacy: tuple[float, float] | None
    clip_norm: float | None
    chunk_size: int | None
    mechanism: str | None
    horizon: int
    oversample_: int
    rank_cap: int

    @property
    def max_tracked(self) -> int:
        """Most directions the state ever holds: ``min(n_features, rank_cap + oversample_)``."""
        return min(self.n_features, self.rank_cap + self.oversample_)

    def n_target(self, rank_: int) -> int:
        """Directions an update keeps at reported rank ``rank_``: ``min(rank_ + p, d)``."""
        return min(rank_ + self.oversample_, self.n_features)


class Param:
    """An `FPCAEdge` parameter as an attribute: its checked value once configured, else as given.

    A data descriptor, so the instance's ``__dict__`` holds no parameter (scikit-learn's
    checks that fitting changes no public attribute hold); setting one is refused (use
    ``set_params``). ``random_state`` always reads as given.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> object:
        if obj is None:
            return self
        checked = obj.__dict__.get("_checked")
        if checked is None or self.name == "random_state":
            return obj._given[self.name]
        return getattr(checked, self.name)

    def __set__(self, obj: Any, value: object) -> None:
        raise AttributeError(f"{self.name} is a parameter: use set_params({self.name}=...)")


def check_params(
    given: Mapping[str, object], n_features: int
) -> tuple[Params, np.random.Generator | None]:
    """Check `FPCAEdge`'s parameters ``given`` for samples of ``n_features`` features.

    Parameters
    ----------
    given : mapping
        The constructor's parameters by name (`PARAM_NAMES`), as given; its
        ``"n_features"`` is ignored in favour of ``n_features``.
    n_features : int
        ``d``, >= 1.

    Returns
    -------
    params : Params
    rng : numpy.random.Generator or None
        With privacy, the masks' source from ``random_state`` (a Generator is used as
        is; an int seeds a new one; None draws fresh OS entropy); None without privacy.

    Raises
    ------
    TypeError
        If an integer parameter is not an integer.
    ValueError
        If a parameter is out of range, or parameters contradict each other (e.g.
        ``rank > n_features``, ``center`` with ``privacy``); the message names the
        value. The checks run in the constructor's order of parameters, privacy first
        after ``center``, so the first offending value is reported.
    """
    d = check_int(n_features, "n_features", 1)
    rank = check_int(given["rank"], "rank", 1)
    center = bool(given["center"])
    privacy, clip_norm, mechanism, horizon, rng = _check_privacy(
        given["privacy"],
        given["clip_norm"],
        given["random_state"],
        given["mechanism"],
        given["horizon"],
        center,
    )
    block_size = given["block_size"]
    if block_size is None:
        block_size = _default_block_size(privacy, mechanism, horizon, d)
    block_size = check_int(block_size, "block_size", 1)
    chunk_size = _check_chunk_size(given["chunk_size"], mechanism, d, block_size)
    oversample = given["oversample"]
    oversample = None if oversample is None else check_int(oversample, "oversample", 0)
    adaptive = bool(given["adaptive"])
    holdoff = check_int(given["holdoff"], "holdoff", 1)
    max_rank = given["max_rank"]
    max_rank = None if max_rank is None else check_int(max_rank, "max_rank", 1)
    forget = check_forget(given["forget"])
    rank_bounds = check_rank_bounds(given["rank_bounds"])
    cap = rank_cap(rank, d, block_size, adaptive, max_rank)
    if oversample is None and privacy is not None and mechanism == "gaussian":
        oversample_ = d - rank  # all of the released sum's directions
    elif oversample is None:
        oversample_ = min(rank, d - rank)
    else:
        oversample_ = oversample
    params = Params(
        n_features=d,
        rank=rank,
        block_size=block_size,
        oversample=oversample,
        adaptive=adaptive,
        rank_bounds=rank_bounds,
        holdoff=holdoff,
        max_rank=max_rank,
        forget=forget,
        center=center,
        privacy=privacy,
        clip_norm=clip_norm,
        chunk_size=chunk_size,
        mechanism=mechanism,
        horizon=horizon,
        oversample_=oversample_,
        rank_cap=cap,
    )
    return params, rng


def _check_privacy(
    privacy: object,
    clip_norm: object,
    random_state: object,
    mechanism: object,
    horizon: object,
    center: bool,
) -> tuple[tuple[float, float] | None, float | None, str | None, int, np.random.Generator | None]:
    """``(privacy, clip_norm, mechanism, horizon, rng)`` checked; all None/1 without privacy.

    Raises ValueError naming the value: an unknown ``mechanism``; ``horizon`` out of
    range, or not 1 without privacy or with ``"fpca-eq8"``; ``clip_norm`` without privacy,
    or missing or not > 0 with it; ``privacy`` not ``(epsilon, delta)`` in range
    (`privacy.check_budget`); ``center`` with privacy; a ``random_state`` that is not an
    int, a Generator or None. TypeError if ``horizon`` is not an integer.
    """
    if mechanism not in MECHANISMS:
        raise ValueError(
            f"mechanism must be one of {', '.join(map(repr, MECHANISMS))}, got {mechanism!r}"
        )
    checked_horizon = check_horizon(horizon)
    if checked_horizon != 1 and mechanism != "gaussian":
        raise ValueError(f"horizon {horizon!r} is only used with mechanism 'gaussian'")
    if privacy is None:
        if clip_norm is not None:
            raise ValueError(f"clip_norm {clip_norm!r} is only used with privacy")
        if checked_horizon != 1:
            raise ValueError(f"horizon {horizon!r} is only used with privacy")
        return None, None, None, checked_horizon, None
    try:
        epsilon, delta = privacy  # type: ignore[misc]
    except (TypeError, ValueError):
        raise ValueError(f"privacy must be (epsilon, delta), got {privacy!r}") from None
    budget = _privacy.check_budget(epsilon, delta)
    if clip_norm is None:
        raise ValueError("privacy needs clip_norm (the norm samples are clipped to)")
    clip = check_positive(clip_norm, "clip_norm")
    if center:
        raise ValueError(
            "center=True cannot be combined with privacy: the mean would be released without noise"
        )
    if isinstance(random_state, np.random.Generator):
        rng = random_state
    elif random_state is None or (
        isinstance(random_state, int | np.integer) and not isinstance(random_state, bool)
    ):
        rng = np.random.default_rng(random_state)
    else:
        raise ValueError(
            f"random_state must be an int seed, a numpy Generator or None, got {random_state!r}"
        )
    return budget, clip, str(mechanism), checked_horizon, rng


def _default_block_size(
    privacy: tuple[float, float] | None, mechanism: str | None, horizon: int, n_features: int
) -> int:
    """The block size when none is given: 50 without privacy, else the mechanism's.

    ``"gaussian"``: `privacy.gaussian_default_block_size`; ``"fpca-eq8"``:
    `privacy.default_block_size` (``T`` of Lemma 2.2). Raises their ValueError when the
    block would exceed `privacy.MAX_DEFAULT_BLOCK_BYTES`.
    """
    if privacy is None:
        return PLAIN_BLOCK_SIZE
    if mechanism == "gaussian":
        return _privacy.gaussian_default_block_size(*privacy, n_features, horizon)
    return _privacy.default_block_size(*privacy, n_features)


def _check_chunk_size(
    chunk_size: object, mechanism: str | None, n_features: int, block_size: int
) -> int | None:
    """Columns ``c`` of eq. (7) per chunk with ``"fpca-eq8"`` (None: ``min(d, b)``), else None.

    ValueError if ``chunk_size`` is given for another mechanism (or without privacy), or
    < 1; TypeError if it is not an integer.
    """
    if mechanism != "fpca-eq8":
        if chunk_size is not None:
            raise ValueError(f"chunk_size {chunk_size!r} is only used with mechanism 'fpca-eq8'")
        return None
    return check_int(
        min(n_features, block_size) if chunk_size is None else chunk_size, "chunk_size", 1
    )
