"""Re-merges: the consensus jumps to the merged sketches of the cleaned records while
``S`` forms (``FedEP(remerge=True)``, :func:`fedep.federation.rounds.run_rounds`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedep import FedEP
from fedep.core.baselines import client_sketch, oneshot_merge
from fedep.core.fedep import gram_sketch
from fedep.core.stiefel import polar, projector_distance, random_stiefel
from fedep.data import make_federated_data
from fedep.federation.rounds import ADMM_ROOM, remerge_change


def _burst_federation(seed: int, d: int = 10, n: int = 20, r: int = 3):
    """Non-IID clients around a planted rank-3 subspace, and in 4 % of the records a
    burst: the same large value added to 5 columns (co-occurring heavy counts, as
    bytes and packets of one flow). The bursts span a direction of large variance, so
    the one-shot start (PCA of the raw records) holds it, while the robust fit's ``S``
    absorbs them and its subspace is the planted one."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.standard_normal((n, r)))[0]
    X, g = [], []
    for i in range(d):
        N = int(rng.integers(150, 300))
        Z = rng.standard_normal((N, r)) * rng.uniform(0.5, 2.0, r) + rng.normal(0, 1, r)
        Xi = Z @ B.T + 0.05 * rng.standard_normal((N, n))
        burst = rng.random(N) < 0.04
        Xi[burst, :5] += rng.uniform(5, 15, (burst.sum(), 1))
        X.append(Xi)
        g.append(np.full(N, i))
    return np.vstack(X), np.concatenate(g), B


def _trajectory(X, g, **kw):
    seen = []
    det = FedEP(n_components=3, random_state=0, **kw)
    det.set_params(callback=lambda k, V, rec: seen.append((polar(V), rec)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # each fit must reach tol (no ConvergenceWarning)
        det.fit(X, groups=g)
    final = seen[-1][0]
    dist = [float(projector_distance(B, final)) / np.sqrt(3) for B, _ in seen]
    return det, dist, [rec for _, rec in seen]


def test_consensus_is_near_its_final_subspace_within_ten_rounds():
    # Seed 3: the raw records' one-shot merge is 0.42 (rms sine of the principal angles)
    # from the fit's subspace: bursts hold a direction. The start's sketch clips them
    # (start_sketch), and consensus steps then move every direction at once.
    X, g, B = _burst_federation(3)
    det, dist, recs = _trajectory(X, g)
    bare, dist_bare, recs_bare = _trajectory(X, g, remerge=False)
    final = det.components_.T
    Z = (X - det.mean_) / det.scale_
    raw = oneshot_merge([client_sketch(Z[g == i], 3) for i in np.unique(g)], 3)
    assert projector_distance(polar(raw), final) / np.sqrt(3) > 0.3
    assert dist[9] < 0.05, dist[:12]
    assert any(r.get("remerged") for r in recs)
    assert not any("remerge_change" in r for r in recs_bare)
    # The same answer, the planted subspace (in standardised units), both at tol.
    assert det.stop_reason_ == bare.stop_reason_ == "stationary"
    assert projector_distance(det.components_.T, bare.components_.T) / np.sqrt(3) < 0.01
    planted = polar(B / det.scale_[:, None])
    assert projector_distance(det.components_.T, planted) / np.sqrt(3) < 0.02


def test_gram_sketch_is_the_client_sketch_of_the_records():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 7)) @ rng.standard_normal((7, 7))
    a = gram_sketch((X.T @ X)[None], 3)[0]
    b = client_sketch(X, 3)
    assert a.shape == b.shape == (7, 3)
    np.testing.assert_allclose(a @ a.T, b @ b.T, rtol=1e-8, atol=1e-8)  # signs may differ


def _cohort():
    data = make_federated_data(n_clients=4, n_features=8, n_components=2, n_samples=60,
                               corruption_rate=0.1, random_state=0)  # fmt: skip
    X, g = data.X_train, data.groups_train
    blocks = [(X[g == c] - X.mean(0)) / X.std(0) for c in range(4)]
    V0 = random_stiefel(8, 2, np.random.default_rng(1))
    return FedEP(n_components=2)._make_cohort(blocks, V0), V0


def test_restart_is_a_round_from_W_equal_V_and_zero_duals():
    coh, V0 = _cohort()
    V = V0
    for _ in range(3):
        V = V + 0.1 * coh.local_round(V).W.mean(0)  # any moving consensus
    state = coh.state_arrays()
    assert np.abs(state["Pi"]).max() > 0
    ref, _ = _cohort()
    ref.load_state(state | {"W": np.broadcast_to(V, state["W"].shape).copy(),
                            "Pi": np.zeros_like(state["Pi"]),
                            "Lam_ssn": np.zeros_like(state["Lam_ssn"])})  # fmt: skip
    got = coh.local_round(V, restart=True, sketch_rank=2)
    want = ref.local_round(V)
    np.testing.assert_array_equal(got.W, want.W)
    np.testing.assert_array_equal(got.Pi, want.Pi)
    assert np.abs(got.Pi).max() == 0.0  # Pi = 0 + nu (V - V)
    # The data side (U, Lam, so S) was kept: a reset would give S = 0 this round.
    assert any(np.abs(s).max() > 0 for s in coh.corruption())
    # The sketch is that of the cleaned records after this round's data step.
    assert got.sketch.shape == (4, 8, 2) and want.sketch is None
    for i in range(4):
        lam, vec = np.linalg.eigh(coh.G[i])
        best = (vec[:, -2:] * lam[-2:]) @ vec[:, -2:].T
        np.testing.assert_allclose(got.sketch[i] @ got.sketch[i].T, best, atol=1e-9)


def test_remerge_phase_only_where_it_applies():
    data = make_federated_data(n_clients=6, n_features=10, n_components=2, n_samples=80,
                               corruption_rate=0.1, random_state=2)  # fmt: skip
    X, g = data.X_train, data.groups_train
    kw = dict(n_components=2, n_rounds=30, tol=1e-4, random_state=0)

    def recs(**more):
        seen = []
        det = FedEP(**kw, **more, callback=lambda k, V, rec: seen.append(rec))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            det.fit(X, groups=g)
        return seen

    on = recs()
    phase = [r for r in on if "remerge_change" in r]
    assert 1 <= len(phase) <= 30 - ADMM_ROOM
    # The consensus steps are a prefix of the rounds, every one taken; they end when a
    # step moves the subspace by at most 0.1 sqrt(tol) (or at the cap); none stops the
    # run, and the objective F(V, S) never rises twice in a row (momentum restarts).
    assert [r["round"] for r in phase] == list(range(1, len(phase) + 1))
    assert all(r["remerged"] for r in phase)
    assert len(phase) == 30 - ADMM_ROOM or phase[-1]["remerge_change"] <= 1e-3
    assert all(r["remerge_change"] > 1e-3 for r in phase[:-1])
    F = [r["merge_objective"] for r in phase]
    assert not any(F[i + 1] > F[i] and F[i + 2] > F[i + 1] for i in range(len(F) - 2))
    assert len(on) > len(phase)  # the ADMM certifies the stop
    for more in ({"remerge": False}, {"sparse_corruption": False}, {"aggregation": "median"},
                 {"client_fraction": 0.5}):  # fmt: skip
        assert not any("remerge_change" in r for r in recs(**more)), more


def test_remerge_change_is_the_rms_sine_of_the_principal_angles():
    rng = np.random.default_rng(0)
    A = random_stiefel(9, 3, rng)
    assert remerge_change(A, A @ np.linalg.qr(rng.standard_normal((3, 3)))[0]) == pytest.approx(
        0.0, abs=1e-12
    )
    Q = np.linalg.qr(rng.standard_normal((9, 9)))[0]
    theta = np.array([0.1, 0.4, 1.2])
    A = Q[:, :3]
    B = A * np.cos(theta) + Q[:, 3:6] * np.sin(theta)
    assert remerge_change(A, 2.0 * B) == pytest.approx(np.sqrt(np.mean(np.sin(theta) ** 2)))
