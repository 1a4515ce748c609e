"""The Numenta Anomaly Benchmark's score, standard profile (Lavin & Ahmad, "Evaluating
Real-time Anomaly Detection Algorithms -- the Numenta Anomaly Benchmark", ICMLA 2015,
arXiv:1510.03336).

Each anomaly has a window ``[left, right]`` (rows, inclusive). The first detection ``i`` in a
window scores ``A_TP sigma(y) / sigma(-1)``, ``y = -(right - i + 1) / (right - left + 1)``,
``sigma(y) = 2 / (1 + exp(5 y)) - 1`` (-1 for ``y > 3``): ``A_TP`` at the window's first row;
later ones nothing. A detection outside the windows scores ``|A_FP| sigma(p)``, ``p = (i -
right_prev) / (width_prev - 1)`` from the previous window's end (``A_FP`` before the first);
a missed window ``A_FN``; detections in *neutral* spans are skipped. Normalised as ``100 (S -
S_null) / (S_perfect - S_null)``, summed over streams first as NAB sums its files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["STANDARD", "NabProfile", "Stream", "nab_raw", "nab_score", "scaled_sigmoid"]


@dataclass(frozen=True)
class NabProfile:
    """The weights ``A_TP``, ``A_FP`` and ``A_FN`` (the last two negative, as in NAB)."""

    a_tp: float = 1.0
    a_fp: float = -0.11
    a_fn: float = -1.0


STANDARD = NabProfile()


@dataclass(frozen=True)
class Stream:
    """One scored stream (a NAB data file): the rows of the ``detections`` (here the first
    row of each alarm event), the anomaly ``windows`` (inclusive, disjoint, sorted) and the
    ``neutral`` spans (inclusive) whose detections are ignored."""

    detections: Sequence[int]
    windows: Sequence[tuple[int, int]]
    neutral: Sequence[tuple[int, int]] = ()


def scaled_sigmoid(y: float) -> float:
    """NAB's ``2 / (1 + exp(5 y)) - 1``, and -1 for ``y > 3`` (dimensionless)."""
    if y > 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


def nab_raw(stream: Stream, profile: NabProfile = STANDARD) -> float:
    """The unnormalised NAB score of one stream (see the module)."""
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
    """NAB score of ``streams`` (summed), normalised: null detector 0, one detection at
    each window's first row 100; NaN without any window."""
    n_windows = sum(len(s.windows) for s in streams)
    if n_windows == 0:
        return float("nan")
    raw = sum(nab_raw(s, profile) for s in streams)
    null, perfect = profile.a_fn * n_windows, profile.a_tp * n_windows
    return 100.0 * (raw - null) / (perfect - null)
