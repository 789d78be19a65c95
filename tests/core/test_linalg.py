"""The thin SVD's fallback from LAPACK's gesdd to gesvd."""

import numpy as np
import pytest

from fedep.core import _linalg
from fedep.core._linalg import thin_svd
from fedep.core.baselines import pooled_pca
from fedep.core.stiefel import polar


@pytest.fixture
def gesdd_fails(monkeypatch):
    """np.linalg.svd that never converges, as gesdd on some rank-deficient matrices."""

    def no_convergence(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(_linalg.np.linalg, "svd", no_convergence)


@pytest.mark.parametrize("shape", [(40, 6), (6, 40), (3, 12, 4)])
def test_fallback_gives_a_valid_thin_svd(gesdd_fails, shape):
    rng = np.random.default_rng(0)
    A = rng.standard_normal(shape)
    # Rank-deficient, as the matrices that made gesdd fail (in either orientation).
    A[..., -1] = A[..., 0]
    A[..., -1, :] = A[..., 0, :]
    U, s, Vt = thin_svd(A)
    k = min(shape[-2:])
    assert U.shape == (*shape[:-1], k) and s.shape == (*shape[:-2], k)
    assert Vt.shape == (*shape[:-2], k, shape[-1])
    np.testing.assert_allclose((U * s[..., None, :]) @ Vt, A, atol=1e-12)
    eye = np.eye(k)
    np.testing.assert_allclose(
        np.swapaxes(U, -1, -2) @ U, np.broadcast_to(eye, U.shape[:-2] + (k, k)), atol=1e-12
    )
    assert np.all(np.diff(s, axis=-1) <= 0) and np.all(s >= 0)
    assert np.min(s) < 1e-12 * np.max(s)  # the deficient direction is found


def test_callers_survive_a_gesdd_failure(gesdd_fails):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 8)) * np.arange(8, 0, -1)
    B = pooled_pca(X, 3)
    ref = np.linalg.eigh(X.T @ X)[1][:, ::-1][:, :3]
    np.testing.assert_allclose(np.abs(B.T @ ref), np.eye(3), atol=1e-8)
    W = polar(rng.standard_normal((2, 10, 3)))
    np.testing.assert_allclose(
        np.swapaxes(W, 1, 2) @ W, np.broadcast_to(np.eye(3), (2, 3, 3)), atol=1e-12
    )


def test_non_finite_input_still_raises(gesdd_fails):
    A = np.ones((5, 3))
    A[2, 1] = np.nan
    with pytest.raises(np.linalg.LinAlgError):
        thin_svd(A)
