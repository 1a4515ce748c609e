"""The two datasets of section (h) in contiguous leaves (rows ``(n, d)``, float64): `MOTES`,
Motes light as section (f) splits and clips it, and `SYNTH`, `benchmarks.synth.synth` with its
rows sorted by angle in the plane of the two leading principal directions, so every leaf sees a
different sector (non-i.i.d. leaves, where FedPower's OPT matters).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.privacy.motes_tree import MOTES_CLIP, load_motes
from benchmarks.synth import synth

__all__ = ["MOTES", "SYNTH", "Dataset", "load"]

MOTES, SYNTH = "Motes light", "Synth het."


@dataclass(frozen=True, eq=False)
class Dataset:
    """``name`` (`MOTES`, `SYNTH`), the leaves' contiguous ``parts`` and the clip norm ``C``."""

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


def load(
    name: str, *, n_leaves: int = 8, motes_rows: int | None = None,
    synth_shape: tuple[int, int] = (48, 8000), synth_alpha: float = 1.0,
) -> Dataset:  # fmt: skip
    """`MOTES` (its first ``motes_rows`` rows; None: all) or `SYNTH` (``synth_shape = (d, n)``,
    seed 0) in ``n_leaves`` contiguous leaves; ValueError for another ``name``."""
    if name == MOTES:
        return Dataset(name, load_motes(motes_rows, n_leaves).parts, MOTES_CLIP)
    if name == SYNTH:
        x = synth(synth_alpha, *synth_shape, seed=0)
        vt = np.linalg.svd(x, full_matrices=False)[2]
        x = x[np.argsort(np.arctan2(x @ vt[1], x @ vt[0]), kind="stable")]
        return Dataset(name, tuple(np.array_split(x, n_leaves)), 1.0)
    raise ValueError(f"unknown dataset {name!r}; choose {MOTES!r} or {SYNTH!r}")
