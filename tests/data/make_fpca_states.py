"""Writes the ``fpca_state_*.ckpt`` fixtures of ``tests/test_fpca_sklearn.py``.

Run once, at the commit whose `FPCAEdge` wrote them (b1cf019, before FPCAEdge became one
class): ``.venv/bin/python tests/data/make_fpca_states.py``. For each configuration it
saves, with `edge_runtime.checkpoint.save_checkpoint`, the estimator's state mid-block
(``*_before``), the state `FPCAEdge.from_state` restores from it with ``random_state=7``
(``*_restored``) and that restored estimator's state after 77 more samples
(``*_after``). The new code must restore ``*_before`` to ``*_restored`` and continue to
``*_after``, key for key and bit for bit. Do not re-run it with later code: the files are
the old code's output, which is what the test guards.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_runtime.checkpoint import save_checkpoint
from edge_runtime.fpca import FPCAEdge

HERE = Path(__file__).resolve().parent
CONFIGS = {
    "plain": {"center": True, "adaptive": True, "forget": 0.99},
    "gaussian": {"privacy": (1.0, 1e-3), "clip_norm": 4.0, "horizon": 4},
    "eq8": {"privacy": (1.0, 1e-3), "clip_norm": 4.0, "mechanism": "fpca-eq8"},
}


def data() -> np.ndarray:
    """300 rows of 8 features: a rank-3 signal plus noise (seed 12)."""
    rng = np.random.default_rng(12)
    return rng.normal(size=(300, 3)) @ rng.normal(size=(3, 8)) + 0.1 * rng.normal(size=(300, 8))


def main() -> None:
    x = data()
    for name, kwargs in CONFIGS.items():
        first = FPCAEdge(8, 3, 20, random_state=3, **kwargs).partial_fit(x[:133])  # type: ignore[arg-type]
        save_checkpoint(HERE / f"fpca_state_{name}_before.ckpt", first.get_state())
        restored = FPCAEdge.from_state(first.get_state(), random_state=7)
        save_checkpoint(HERE / f"fpca_state_{name}_restored.ckpt", restored.get_state())
        restored.partial_fit(x[133:210])
        save_checkpoint(HERE / f"fpca_state_{name}_after.ckpt", restored.get_state())


if __name__ == "__main__":
    main()
