"""The numpy-only kernels give what the scipy kernels they replaced gave (issue 24).

Until issue 24 `edge_runtime.fpca.linalg` called scipy's LAPACK wrappers: the Gram
formulations' eigendecomposition was ``dsytrd`` + ``dstevd`` + ``dormqr`` (``dstevd``
exists only from scipy 1.17, not in Debian bookworm's 1.10 nor PyPI's 1.13), the
QR + SVD fallback a pivoted QR. Those kernels are rebuilt here from scipy as references;
each test forces the update through one (monkeypatching the kernel) and compares it with
the numpy path, to tolerance. The last tests check that the hot path imports no scipy.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from edge_runtime.fpca import FPCAEdge, linalg, merge_subspaces, offline_subspace, principal_angles

lapack = pytest.importorskip("scipy.linalg.lapack")
sla = pytest.importorskip("scipy.linalg")

HAS_DSTEVD = hasattr(lapack, "dstevd")


def _eigh_top_stevd(a: np.ndarray, k: int, out: np.ndarray) -> np.ndarray | None:
    """The pre-issue-24 kernel: dsytrd + dstevd + dormqr on the ``k`` kept vectors."""
    n = a.shape[0]
    if n == 1:
        out[0, :k] = 1.0
        return a[0].copy()
    a = np.asfortranarray(a)
    lwork = int(lapack.dsytrd_lwork(n, lower=1)[0])
    c, d, e, tau, info = lapack.dsytrd(a, lower=1, lwork=lwork)
    assert info == 0
    w, z, info = lapack.dstevd(d, e)
    assert info == 0
    q, _, info = lapack.dormqr("L", "N", c[1:, : n - 1], tau, z[1:, n - k :], 64 * k)
    assert info == 0
    out[0] = z[0, n - k :][::-1]
    out[1:] = q[:, ::-1]
    return w


def _eigh_top_syevd(a: np.ndarray, k: int, out: np.ndarray) -> np.ndarray | None:
    """scipy's dsyevd, the fallback of commit 7798a3f where scipy had no dstevd."""
    n = a.shape[0]
    w, v, info = lapack.dsyevd(np.asfortranarray(a), lower=1)
    assert info == 0
    np.copyto(out, v[:, n - k :][:, ::-1])
    return w


REFERENCES = [
    pytest.param(
        _eigh_top_stevd,
        id="dstevd",
        marks=pytest.mark.skipif(not HAS_DSTEVD, reason="this scipy has no lapack.dstevd"),
    ),
    pytest.param(_eigh_top_syevd, id="dsyevd"),
]


def _projector(basis: np.ndarray) -> np.ndarray:
    return basis @ basis.T


def _assert_same_update(
    got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]
) -> None:
    (u, s), (u_ref, s_ref) = got, want
    assert u.shape == u_ref.shape
    np.testing.assert_allclose(s, s_ref, rtol=1e-12, atol=1e-13 * s_ref[0])
    np.testing.assert_allclose(_projector(u), _projector(u_ref), atol=1e-10)
    # Column by column, up to sign (the singular values are distinct here).
    signs = np.sign(np.einsum("ij,ij->j", u, u_ref))
    np.testing.assert_allclose(u * signs, u_ref, atol=1e-8)


def _update(*args, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    basis, sv = linalg.svd_update(*args, **kwargs)
    return np.array(basis), np.array(sv)


@pytest.mark.parametrize("reference", REFERENCES)
@pytest.mark.parametrize("method", ["gram_d", "gram_small"])
@pytest.mark.parametrize(
    ("d", "t0", "k", "rank"), [(48, 20, 50, 20), (8, 3, 4, 5), (200, 20, 30, 25), (48, 0, 50, 10)]
)
def test_the_numpy_eigensolver_gives_the_update_of_the_scipy_one(
    monkeypatch: pytest.MonkeyPatch, reference, method: str, d: int, t0: int, k: int, rank: int
) -> None:
    rng = np.random.default_rng(d + t0 + k)
    basis = np.linalg.qr(rng.normal(size=(d, t0)))[0]
    sv = np.sort(rng.uniform(1.0, 10.0, size=t0))[::-1]
    cols = rng.normal(size=(d, k))
    args = (basis, sv, cols, rank, 0.9)

    got = _update(*args, method=method)
    with monkeypatch.context() as m:
        m.setattr(linalg, "_eigh_top", reference)
        want = _update(*args, method=method)

    t = min(rank, t0 + k, d)
    exact = np.linalg.svd(np.hstack([0.9 * basis * sv, cols]), compute_uv=False)[:t]
    np.testing.assert_allclose(got[1], exact, rtol=1e-10)
    np.testing.assert_allclose(got[0].T @ got[0], np.eye(t), atol=1e-12)
    _assert_same_update(got, want)


@pytest.mark.parametrize("reference", REFERENCES)
def test_streaming_and_merging_agree_with_the_scipy_eigensolver(
    monkeypatch: pytest.MonkeyPatch, reference
) -> None:
    rng = np.random.default_rng(7)
    w = np.linalg.qr(rng.normal(size=(48, 6)))[0]
    x = (rng.normal(size=(600, 6)) * [9.0, 6.0, 4.0, 3.0, 2.0, 1.0]) @ w.T
    x += 0.05 * rng.normal(size=x.shape)

    def fit_and_merge():
        model = FPCAEdge(48, 6, 50).fit(x[:300])
        return merge_subspaces(model.subspace, offline_subspace(x[300:], 6), rank=6)

    got = fit_and_merge()
    with monkeypatch.context() as m:
        m.setattr(linalg, "_eigh_top", reference)
        want = fit_and_merge()
    np.testing.assert_allclose(got.singular_values, want.singular_values, rtol=1e-10)
    assert principal_angles(got.basis, want.basis).max() < 1e-8
    np.testing.assert_allclose(got.basis, want.basis, atol=1e-8)  # signs are normalised


def _qr_svd_pivoted(basis, lambda_s, cols, t):
    """The pre-issue-24 ``"qr_svd"``: scipy's pivoted QR of the residual."""
    d, t0 = basis.shape
    k = cols.shape[1]
    m = min(k, d - t0)
    small = np.zeros((t0 + m, t0 + k))
    z = basis.T @ cols
    resid = cols - basis @ z
    z2 = basis.T @ resid
    resid -= basis @ z2
    small[np.arange(t0), np.arange(t0)] = lambda_s
    small[:t0, t0:] = z + z2
    q, r, piv = sla.qr(resid, mode="economic", pivoting=True)
    small[t0:, t0 + piv] = r[:m]
    u_small, s, _ = sla.svd(small, full_matrices=False)
    new = basis @ u_small[:t0, :t] + q[:, :m] @ u_small[t0:, :t]
    return sla.qr(new, mode="economic")[0], s[:t]


@pytest.mark.parametrize(
    ("d", "t0", "k", "zero_cols"),
    [(48, 20, 10, 0), (48, 20, 50, 0), (12, 5, 10, 3), (12, 10, 6, 2), (30, 4, 30, 30)],
)
def test_qr_svd_without_pivoting_gives_the_pivoted_result(
    d: int, t0: int, k: int, zero_cols: int
) -> None:
    rng = np.random.default_rng(d * k + t0)
    basis = np.linalg.qr(rng.normal(size=(d, t0)))[0]
    lambda_s = np.sort(rng.uniform(1.0, 10.0, size=t0))[::-1]
    cols = rng.normal(size=(d, k))
    cols[:, rng.permutation(k)[:zero_cols]] = 0.0  # samples of zeros, as on a stuck sensor
    t = min(t0 + k, d)

    got = _update(basis, lambda_s, cols, t, 1.0, method="qr_svd")
    want = _qr_svd_pivoted(basis, lambda_s, cols, t)

    np.testing.assert_allclose(got[0].T @ got[0], np.eye(t), atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-13 * want[1][0])
    # The directions carrying data agree; those of zero singular value are arbitrary.
    live = int(np.sum(want[1] > 1e-10 * want[1][0]))
    np.testing.assert_allclose(
        _projector(got[0][:, :live]), _projector(want[0][:, :live]), atol=1e-10
    )


def test_thin_svd_falls_back_to_scipys_gesvd_when_gesdd_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = np.random.default_rng(3).normal(size=(20, 9))
    u, s, _ = linalg.thin_svd(a)

    def no_convergence(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge")

    with monkeypatch.context() as m:
        m.setattr(np.linalg, "svd", no_convergence)
        u2, s2, vt2 = linalg.thin_svd(a)
    np.testing.assert_allclose(s2, s, rtol=1e-13)
    np.testing.assert_allclose((u2 * s2) @ vt2, a, atol=1e-12)
    np.testing.assert_allclose(np.abs(u2.T @ u), np.eye(9), atol=1e-10)


@pytest.mark.parametrize(("ra", "rb", "shared"), [(3, 5, 0), (5, 3, 2), (4, 4, 4), (6, 2, 1)])
def test_principal_angles_are_scipys_subspace_angles(ra: int, rb: int, shared: int) -> None:
    rng = np.random.default_rng(ra * 10 + rb)
    common = rng.normal(size=(12, shared))
    a = np.hstack([common, rng.normal(size=(12, ra - shared))]) if ra > shared else common
    b = np.hstack([common @ rng.normal(size=(shared, shared)), rng.normal(size=(12, rb - shared))])
    b[:, 0] *= 1e-6  # not orthonormal, badly scaled: both orthonormalise first
    for x, y in ((a, b), (b, a), (a, a), (a, a @ rng.normal(size=(ra, ra)))):
        # Angles of ~0 taken by arccos carry ~sqrt(eps) of rounding in both.
        np.testing.assert_allclose(
            principal_angles(x, y), sla.subspace_angles(x, y), rtol=1e-8, atol=1e-7
        )


def test_private_gram_top_is_scipys_subset_eigh() -> None:
    from edge_runtime.fpca.private_gram import PrivateGram

    gram = object.__new__(PrivateGram)
    g = np.random.default_rng(5).normal(size=(10, 10))
    gram._released = g + g.T  # indefinite, as a noisy release can be
    gram.n_features = 10
    for count in (1, 4, 10):
        vectors, values = gram.top(count)
        w, v = sla.eigh(gram._released, subset_by_index=[10 - count, 9])
        np.testing.assert_allclose(values, w[::-1], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.abs(vectors.T @ v[:, ::-1]), np.eye(count), atol=1e-10)


HOT_PATH = """
import sys
import numpy as np
import edge_runtime.fpca, edge_runtime.wire
from edge_runtime.fpca import FPCAEdge, merge_many, principal_angles
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_subspace
rng = np.random.default_rng(0)
x = rng.normal(size=(400, 5)) @ rng.normal(size=(5, 48)) + 0.01 * rng.normal(size=(400, 48))
leaves = [FPCAEdge(48, 5, 50).fit(part).subspace for part in np.split(x, 4)]
merged = merge_many(leaves, rank=5)
principal_angles(merged.basis, leaves[0].basis)
decode_subspace(encode_subspace(SubspaceMessage("a", "e", 1, merged, 1.0)))
FPCAEdge(48, 5, 50, center=True, adaptive=True).fit(x)
print(sorted(m for m in sys.modules if m.split(".")[0] == "scipy"))
"""


def test_fpca_and_wire_import_and_run_the_hot_path_without_scipy() -> None:
    done = subprocess.run([sys.executable, "-c", HOT_PATH], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
