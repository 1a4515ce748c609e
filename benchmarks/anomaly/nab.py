"""The Numenta Anomaly Benchmark's score, standard profile (Lavin & Ahmad 2015).

Each labelled anomaly has a window ``[left, right]`` (rows, inclusive). Walking through
the detections in time order:

- the first detection in a window scores ``A_TP * sigma(y) / sigma(-1)`` with the
  relative position ``y = -(right - i + 1) / (right - left + 1)`` (``-1`` at the window's
  first row, near 0 at its last) and the scaled sigmoid ``sigma(y) = 2 / (1 + exp(5 y))
  - 1`` (``-1`` for ``y > 3``); dividing by ``sigma(-1) = 0.9866`` makes a detection at
  the window's first row worth exactly ``A_TP``. Later detections in the same window
  count nothing;
- a detection outside every window is a false positive worth ``|A_FP| * sigma(p)`` with
  ``p = (i - right_prev) / (width_prev - 1)`` measured from the end of the previous window
  (about 0 just after it, ``-|A_FP|`` far from it), or ``-|A_FP|`` before the first window;
- a window with no detection scores ``A_FN``.

Standard profile: ``A_TP = 1``, ``A_FP = -0.11``, ``A_FN = -1``. The raw score is
normalised as ``100 * (S - S_null) / (S_perfect - S_null)``: the null detector (no
detection) scores ``S_null = A_FN * n_windows`` (0 normalised), the perfect one (one
detection at each window's first row) ``S_perfect = A_TP * n_windows`` (100). As NAB
sums its data files before normalising, `nab_score` takes several streams at once.

Detections in a *neutral* span (here: a CONSTANT fault while the truth is flat, where
nothing is wrong) are skipped. NAB's own probationary period is the warm-up here, which
is not scored at all.

Reference: A. Lavin, S. Ahmad, "Evaluating Real-time Anomaly Detection Algorithms -- the
Numenta Anomaly Benchmark", IEEE ICMLA 2015, arXiv:1510.03336.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["STANDARD", "NabProfile", "Stream", "nab_raw", "nab_score", "scaled_sigmoid"]


@dataclass(frozen=True)
class NabProfile:
    """Application profile: the weights ``A_TP``, ``A_FP`` and ``A_FN`` (signs as in NAB's
    paper: ``A_FP`` and ``A_FN`` negative)."""

    a_tp: float = 1.0
    a_fp: float = -0.11
    a_fn: float = -1.0


#: NAB's standard profile.
STANDARD = NabProfile()


@dataclass(frozen=True)
class Stream:
    """One scored stream (a NAB data file).

    Attributes
    ----------
    detections : sequence of int
        Rows where the detector raised an alarm (here: the first row of each alarm event).
    windows : sequence of (int, int)
        Anomaly windows ``(left, right)``, inclusive rows, disjoint, sorted.
    neutral : sequence of (int, int)
        Inclusive row spans whose detections are ignored.
    """

    detections: Sequence[int]
    windows: Sequence[tuple[int, int]]
    neutral: Sequence[tuple[int, int]] = ()


def scaled_sigmoid(y: float) -> float:
    """NAB's ``2 / (1 + exp(5 y)) - 1``, and -1 for ``y > 3`` (dimensionless)."""
    if y > 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


def nab_raw(stream: Stream, profile: NabProfile = STANDARD) -> float:
    """The unnormalised NAB score of one stream (see the module).

    Parameters
    ----------
    stream : Stream
        Detections, windows and neutral spans (row indices).
    profile : NabProfile, default=STANDARD

    Returns
    -------
    float
        Sum of true-positive rewards, false-positive penalties and missed windows' ``A_FN``.
    """
    max_tp = scaled_sigmoid(-1.0)
    windows = sorted(stream.windows)
    hit = [False] * len(windows)
    score = 0.0
    for i in sorted(set(stream.detections)):
        if any(lo <= i <= hi for lo, hi in stream.neutral):
            continue
        prev = None
        for k, (lo, hi) in enumerate(windows):
            if lo <= i <= hi:
                if not hit[k]:
                    hit[k] = True
                    y = -(hi - i + 1) / (hi - lo + 1)
                    score += profile.a_tp * scaled_sigmoid(y) / max_tp
                break
            if hi < i:
                prev = (lo, hi)
        else:
            if prev is None:
                score += profile.a_fp  # before any window: sigma = -1
            else:
                lo, hi = prev
                p = (i - hi) / max(hi - lo, 1)
                score += -profile.a_fp * scaled_sigmoid(p)
    score += profile.a_fn * hit.count(False)
    return score


def nab_score(streams: Sequence[Stream], profile: NabProfile = STANDARD) -> float:
    """NAB score of several streams, normalised to null = 0 and perfect = 100.

    Parameters
    ----------
    streams : sequence of Stream
        Raw scores and the null and perfect detectors' scores are summed over them.
    profile : NabProfile, default=STANDARD

    Returns
    -------
    float
        ``100 (S - S_null) / (S_perfect - S_null)``; NaN if there is no window at all.
    """
    n_windows = sum(len(s.windows) for s in streams)
    if n_windows == 0:
        return float("nan")
    raw = sum(nab_raw(s, profile) for s in streams)
    null = profile.a_fn * n_windows
    perfect = profile.a_tp * n_windows
    return 100.0 * (raw - null) / (perfect - null)
