"""The symmetric eigensolver's fallbacks give what the ``dstevd`` path gives.

scipy < 1.17 (Debian bookworm's 1.10, the 1.13 of PyPI) has no ``lapack.dstevd``;
there `edge_runtime.fpca._linalg` uses ``dsyevd``. Each test forces the fallback
(`EIGH_DRIVER`) and compares it with the default path, to tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.fpca import FPCAEdge, merge_subspaces, offline_subspace
from edge_runtime.fpca import _linalg as linalg
from edge_runtime.fpca.metrics import principal_angles


def _projector(basis: np.ndarray) -> np.ndarray:
    return basis @ basis.T


def _update(driver: str, monkeypatch: pytest.MonkeyPatch, *args, **kwargs):
    with monkeypatch.context() as m:
        m.setattr(linalg, "EIGH_DRIVER", driver)
        basis, sv = linalg.svd_update(*args, **kwargs)
        return np.array(basis), np.array(sv)


def test_the_default_driver_is_stevd_where_scipy_has_dstevd() -> None:
    expected = "stevd" if linalg._dstevd is not None else "syevd"
    assert expected == linalg.EIGH_DRIVER


@pytest.mark.parametrize("method", ["gram_d", "gram_small"])
@pytest.mark.parametrize(
    ("d", "t0", "k", "rank"), [(48, 20, 50, 20), (8, 3, 4, 5), (200, 20, 30, 25)]
)
def test_every_driver_gives_the_same_update(
    monkeypatch: pytest.MonkeyPatch, method: str, d: int, t0: int, k: int, rank: int
) -> None:
    rng = np.random.default_rng(d + t0 + k)
    basis = np.linalg.qr(rng.normal(size=(d, t0)))[0]
    sv = np.sort(rng.uniform(1.0, 10.0, size=t0))[::-1]
    cols = rng.normal(size=(d, k))
    results = {
        driver: _update(driver, monkeypatch, basis, sv, cols, rank, 0.9, method=method)
        for driver in linalg.EIGH_DRIVERS
    }
    s_ref = np.linalg.svd(np.hstack([0.9 * basis * sv, cols]), compute_uv=False)
    t = min(rank, t0 + k, d)
    for u, s in results.values():
        assert u.shape == (d, t)
        np.testing.assert_allclose(s, s_ref[:t], rtol=1e-10)
        np.testing.assert_allclose(u.T @ u, np.eye(t), atol=1e-12)
    first, *rest = results.values()
    for u, s in rest:
        np.testing.assert_allclose(s, first[1], rtol=1e-12)
        np.testing.assert_allclose(_projector(u), _projector(first[0]), atol=1e-10)
        # Column by column, up to sign (the eigenvalues are distinct here).
        signs = np.sign(np.einsum("ij,ij->j", u, first[0]))
        np.testing.assert_allclose(u * signs, first[0], atol=1e-8)


def test_streaming_and_merging_agree_with_either_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    w = np.linalg.qr(rng.normal(size=(48, 6)))[0]
    x = (rng.normal(size=(600, 6)) * [9.0, 6.0, 4.0, 3.0, 2.0, 1.0]) @ w.T
    x += 0.05 * rng.normal(size=x.shape)
    fitted = {}
    for driver in linalg.EIGH_DRIVERS:
        with monkeypatch.context() as m:
            m.setattr(linalg, "EIGH_DRIVER", driver)
            model = FPCAEdge(48, 6, 50).fit(x[:300])
            other = offline_subspace(x[300:], 6)
            fitted[driver] = merge_subspaces(model.subspace, other, rank=6)
    first, *rest = fitted.values()
    for merged in rest:
        np.testing.assert_allclose(merged.singular_values, first.singular_values, rtol=1e-10)
        assert principal_angles(merged.basis, first.basis).max() < 1e-8
