"""The two datasets of section (h), each split into contiguous leaves.

- **Motes light**: `edge_runtime.datasets.load_dataset("motes-light")` (7712 x 48,
  lux, uncentred), ``n_leaves`` contiguous parts (8 leaves of 964 rows: each leaf a time
  span of the fleet's readings, as the runtime's Motes topology splits them). Clip norm
  `benchmarks.privacy.motes_tree.MOTES_CLIP` (8230 lux, section (f)).
- **Synth, heterogeneous**: `benchmarks.synth.synth` ``(alpha, d, n)`` (i.i.d. Gaussian rows
  with the power-law spectrum ``i ** -alpha``, largest row norm 1), rows *sorted by their
  angle in the plane of the two leading offline principal directions* and then split into
  contiguous leaves, so that leaf ``l`` sees the sector ``[l, l+1) * 2 pi / L`` of that
  plane: every leaf's local leading eigenvectors differ from the others' (non-i.i.d.
  leaves, the case where FedPower's OPT alignment matters; i.i.d. leaves would all
  converge to nearly the same basis). Clip norm 1 (no row is clipped).

Samples are rows, ``(n_samples, n_features)``, float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.privacy.motes_tree import MOTES_CLIP
from benchmarks.synth import synth

__all__ = ["MOTES", "SYNTH", "Dataset", "load"]

MOTES = "Motes light"
SYNTH = "Synth het."


@dataclass(frozen=True, eq=False)
class Dataset:
    """One dataset split into leaves.

    Attributes
    ----------
    name : str
        `MOTES` or `SYNTH`.
    parts : tuple of ndarray of shape (n_l, d)
        The leaves' rows, contiguous; their concatenation is all the rows.
    clip_norm : float
        Row norm bound ``C`` for the private runs (readings' units).
    """

    name: str
    parts: tuple[np.ndarray, ...]
    clip_norm: float

    @property
    def x(self) -> np.ndarray:
        """All rows, ``(n, d)``."""
        return np.concatenate(self.parts)

    @property
    def n_features(self) -> int:
        """``d``."""
        return int(self.parts[0].shape[1])


def _sorted_by_angle(x: np.ndarray) -> np.ndarray:
    """``x`` with its rows sorted by ``atan2(x v2, x v1)`` (``v1, v2``: top right singular
    vectors of ``x``)."""
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    angle = np.arctan2(x @ vt[1], x @ vt[0])
    return x[np.argsort(angle, kind="stable")]


def load(
    name: str,
    *,
    n_leaves: int = 8,
    motes_rows: int | None = None,
    synth_shape: tuple[int, int] = (48, 8000),
    synth_alpha: float = 1.0,
) -> Dataset:
    """`MOTES` (its first ``motes_rows`` rows; None: all) or `SYNTH` (``synth_shape = (d,
    n)``, seed 0), split into ``n_leaves`` contiguous leaves.

    Raises
    ------
    ValueError
        For an unknown ``name``.
    """
    if name == MOTES:
        from edge_runtime.datasets import load_dataset

        x = np.ascontiguousarray(load_dataset("motes-light")[:motes_rows], dtype=np.float64)
        clip = MOTES_CLIP
    elif name == SYNTH:
        d, n = synth_shape
        x = _sorted_by_angle(synth(synth_alpha, d, n, seed=0))
        clip = 1.0
    else:
        raise ValueError(f"unknown dataset {name!r}; choose {MOTES!r} or {SYNTH!r}")
    return Dataset(name, tuple(np.array_split(x, n_leaves)), float(clip))
