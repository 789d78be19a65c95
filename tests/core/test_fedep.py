"""FedEP core: updates against dense references, exact special cases, synthetic recovery."""

import numpy as np
import pytest

from fedep.core.fedep import FedEPCohort, FedEPSettings, aggregate_consensus
from fedep.core.stiefel import polar, projector_distance, prox_l1, random_stiefel
from fedep.data import make_federated_data
from fedep.federation.rounds import run_rounds
from fedep.federation.server import server_round

#: The model's parameters (FedEPSettings has no defaults for them: the estimator owns them).
_BASE = dict(
    alpha=1.0,
    mu=1.0,
    use_sparse=True,
    inner_max_iter=2,
    penalty_scaling="relative",
    consensus_weights="auto",
)


def _settings(**kw) -> FedEPSettings:
    return FedEPSettings(**{**_BASE, **kw})


def dense_round(X, S, U, Lam, W, mu, alpha):
    """Paper Algorithm 1 S-, U- and Lam-steps, features x samples, dense n x n algebra."""
    Xp, Up, Lp = X.T, U.T, Lam.T  # paper orientation
    n = Xp.shape[0]
    P = W @ W.T
    S_new = prox_l1(Xp - Up + Lp / mu, alpha / mu)
    Y = Xp - S_new + Lp / mu
    # U-step: (2 (I - P) + mu I) U = mu Y, solved densely.
    U_new = np.linalg.solve(2 * (np.eye(n) - P) + mu * np.eye(n), mu * Y)
    L_new = Lp + mu * (Xp - S_new - U_new)  # dual ascent (+ sign, see NOTES erratum)
    return S_new.T, U_new.T, L_new.T


@pytest.mark.parametrize("dual_rows", [4096, 1], ids=["stored-A", "recomputed-A"])
@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_data_step_matches_dense_reference(kernel, dual_rows):
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((m, 7)) for m in (30, 45, 12)]
    blocks[1][3, 2] += 25.0  # a gross error for S to absorb
    V0 = random_stiefel(7, 2, rng)
    s = _settings(alpha=1.5, mu=2.0, inner_max_iter=3, kernel=kernel, dual_rows=dual_rows)
    coh = FedEPCohort(blocks, V0, 0.01, 1.0, s)
    assert all((g.A is None) == (dual_rows == 1) for g in coh.groups)
    state = [(b, np.zeros_like(b), b.copy(), np.zeros_like(b)) for b in blocks]
    V = V0
    for _ in range(4):
        rep = coh.local_round(V)
        state = [
            (X, *dense_round(X, S, U, L, coh.W[i], s.mu, s.alpha))
            for i, (X, S, U, L) in enumerate(state)
        ]
        V, _ = server_round("fedep", rep, V)
    for i, (X, _S, U, L) in enumerate(state):
        # corruption() is the S-step at the final iterate (U, Lam).
        assert np.allclose(
            coh.corruption()[i], prox_l1(X - U + L / s.mu, s.alpha / s.mu), atol=1e-10
        )
        g = [g for g in coh.groups if i in g.clients][0]
        j = int(np.flatnonzero(g.clients == i)[0])
        n_i = X.shape[0]
        assert np.allclose(g.U[j, :n_i], U, atol=1e-10)
        assert np.allclose(s.mu * coh.duals()[i], L, atol=1e-10)
        assert np.allclose(coh.G[i], U.T @ U, atol=1e-9)
    assert abs(coh.corruption()[1][3, 2]) > 3


def test_padding_and_grouping_do_not_change_results():
    D = make_federated_data(n_clients=6, n_features=10, n_components=2, n_samples=(20, 80))
    blocks = [D.X_train[D.groups_train == i] for i in range(6)]
    V0 = random_stiefel(10, 2, np.random.default_rng(1))
    grouped = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings(max_group_rows=10_000))
    alone = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings(max_group_rows=1))
    assert len(grouped.groups) < len(alone.groups) == 6
    a = run_rounds(grouped, "fedep", V0, n_rounds=5, tol=0)
    b = run_rounds(alone, "fedep", V0, n_rounds=5, tol=0)
    assert np.allclose(a.V, b.V, atol=1e-10)
    assert np.allclose(grouped.W, alone.W, atol=1e-10)


def test_consensus_step_is_the_exact_minimiser():
    rng = np.random.default_rng(2)
    W = rng.standard_normal((4, 6, 2))
    Pi = rng.standard_normal((4, 6, 2))
    nu = rng.uniform(0.5, 3, 4)
    V = aggregate_consensus(W, Pi, nu)
    grad = -(Pi.sum(0) + np.tensordot(nu, W - V, axes=1))
    assert np.allclose(grad, 0, atol=1e-12)


def test_case_one_on_one_client_is_svd():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 10)) * 0.8 ** np.arange(10)
    X -= X.mean(0)
    V0 = random_stiefel(10, 3, rng)
    coh = FedEPCohort([X], V0, 0.0, 1.0, _settings(use_sparse=False, inner_max_iter=10))
    res = run_rounds(coh, "fedep", V0, n_rounds=2000, tol=1e-12)
    top = np.linalg.svd(X, full_matrices=False)[2][:3].T
    assert projector_distance(polar(res.V), top) <= 1e-6
    assert projector_distance(coh.W[0], top) <= 1e-6


@pytest.fixture(scope="module")
def federation():
    return make_federated_data(
        n_clients=20,
        n_features=30,
        n_components=5,
        n_samples=(100, 300),
        corruption_rate=0.05,
        random_state=7,
    )


def test_synthetic_federation_recovery_and_residuals(federation):
    from sklearn.metrics import roc_auc_score

    from fedep.core.baselines import pooled_pca
    from fedep.core.fedpg import FedPGCohort, FedPGSettings
    from fedep.core.scoring import residual_energy

    D = federation
    mean = D.X_train.mean(0)
    blocks = [D.X_train[D.groups_train == i] - mean for i in range(20)]
    V0 = random_stiefel(30, 5, np.random.default_rng(0))
    tol = 1e-6
    coh = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings(alpha=1.0, mu=3.0))
    res = run_rounds(coh, "fedep", V0, n_rounds=400, tol=tol)
    assert res.stop_reason == "stationary"
    last = res.history[-1]
    # Stationary (the Lagrangian's relative change per round within tol) and feasible
    # (primal residuals within sqrt(tol)).
    assert last["lagrangian_change"] <= tol
    assert max(last["consensus_residual_rel"], last["data_residual_rel"]) <= np.sqrt(tol)
    V_fedep = polar(res.V)
    pg = FedPGCohort(
        blocks,
        V0,
        FedPGSettings(
            lr=None,
            rho=0.01,
            local_epochs=30,
            consensus_weights="uniform",
            penalty_scaling="paper",  # the paper's FedPG
            manifold="grassmann",
        ),
    )
    V_fedpg = polar(run_rounds(pg, "fedpg", V0, n_rounds=100, tol=0).V)
    V_pca = pooled_pca(np.vstack(blocks), 5)
    d_ep = projector_distance(V_fedep, D.basis)
    assert d_ep < projector_distance(V_fedpg, D.basis)
    assert d_ep < projector_distance(V_pca, D.basis)
    auc = roc_auc_score(D.y_test, residual_energy(D.X_test - mean, V_fedep))
    assert auc >= 0.99
    # Most corrupted entries are caught by S, few clean ones are.
    S = np.vstack(coh.corruption())
    caught = np.abs(S) > 0
    assert caught[D.corruption_mask].mean() > 0.9
    assert caught[~D.corruption_mask].mean() < 0.05


def test_augmented_lagrangian_settles_and_is_monotone_for_large_penalty(federation):
    D = federation
    mean = D.X_train.mean(0)
    blocks = [D.X_train[D.groups_train == i] - mean for i in range(20)]
    V0 = random_stiefel(30, 5, np.random.default_rng(0))
    # Theorem 1 of the paper needs large penalties; with mu = 10 it holds here.
    coh = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings(alpha=1.0, mu=10.0))
    res = run_rounds(coh, "fedep", V0, n_rounds=60, tol=0)
    L = np.array([r["augmented_lagrangian"] for r in res.history])
    assert np.all(np.diff(L) <= 1e-8 * abs(L[0]))
    obj = np.array([r["objective"] for r in res.history])
    # At a feasible point the Lagrangian and the model objective agree.
    assert abs(L[-1] - obj[-1]) <= 1e-4 * abs(obj[-1])


def test_wrong_dual_sign_breaks_feasibility(federation):
    """The paper's printed minus sign on Pi does not drive W_i - V to zero."""
    D = federation
    blocks = [D.X_train[D.groups_train == i] - D.X_train.mean(0) for i in range(20)]
    V0 = random_stiefel(30, 5, np.random.default_rng(0))
    good = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings(use_sparse=False))
    r_good = run_rounds(good, "fedep", V0, n_rounds=40, tol=0)
    bad = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings(use_sparse=False))
    V = V0
    for _ in range(40):
        # local_round adds nu (W - V); subtracting twice first nets the printed
        # erratum update Pi <- Pi - nu (W - V).
        bad.Pi -= 2 * bad.nu[:, None, None] * (bad.W - V)
        rep = bad.local_round(V)
        V, rec = server_round("fedep", rep, V)
    assert r_good.history[-1]["consensus_residual_rel"] < 1e-3
    assert rec["consensus_residual_rel"] > 10 * r_good.history[-1]["consensus_residual_rel"]


def test_partial_participation_leaves_others_untouched(federation):
    D = federation
    blocks = [D.X_train[D.groups_train == i] for i in range(20)]
    V0 = random_stiefel(30, 5, np.random.default_rng(0))
    coh = FedEPCohort(blocks, V0, 1e-3, 1.0, _settings())
    W_before = coh.W.copy()
    rep = coh.local_round(V0, np.array([2, 5]))
    assert rep.W.shape[0] == 2
    others = np.setdiff1d(np.arange(20), [2, 5])
    assert np.array_equal(coh.W[others], W_before[others])
    assert not np.allclose(coh.W[[2, 5]], W_before[[2, 5]])


@pytest.mark.parametrize("dual_rows", [4096, 1], ids=["stored-A", "recomputed-A"])
@pytest.mark.parametrize("chunk_rows", [7, 64, 4096])
def test_fused_kernel_matches_numpy_reference(chunk_rows, dual_rows):
    # Uneven clients in padded groups, chunks cutting through clients and rows,
    # and partial participation: the compiled kernel and the NumPy reference
    # must produce the same iterates and the same per-client metrics.
    D = make_federated_data(
        n_clients=9, n_features=12, n_components=3, n_samples=(15, 90), random_state=4
    )
    blocks = [D.X_train[D.groups_train == i] for i in range(9)]
    V0 = random_stiefel(12, 3, np.random.default_rng(5))
    runs = {}
    for kernel in ("numpy", "numba"):
        s = _settings(alpha=0.7, mu=2.5, chunk_rows=chunk_rows, kernel=kernel, dual_rows=dual_rows)
        coh = FedEPCohort(blocks, V0, 1e-3, 1.0, s)
        V, reports = V0, []
        for k in range(6):
            clients = None if k % 2 == 0 else np.array([0, 2, 3, 7])
            rep = coh.local_round(V, clients)
            reports.append(rep.metrics)
            V, _ = server_round("fedep", rep, V)
        runs[kernel] = (coh, V, reports)
    (a, Va, ra), (b, Vb, rb) = runs["numpy"], runs["numba"]
    assert np.allclose(Va, Vb, atol=1e-10)
    assert np.allclose(a.G, b.G, rtol=1e-10, atol=1e-9)
    assert np.allclose(a.lmax, b.lmax, rtol=1e-10)
    for ga, gb in zip(a.groups, b.groups, strict=True):
        assert np.allclose(ga.U, gb.U, atol=1e-10)
    for Aa, Ab in zip(a.duals(), b.duals(), strict=True):
        assert np.allclose(Aa, Ab, atol=1e-10)
    for ma, mb in zip(ra, rb, strict=True):
        for key in ("fit", "l1", "lam_terms", "data_residual", "projection", "grad_scale", "l21"):
            assert np.allclose(ma[key], mb[key], rtol=1e-9, atol=1e-9), key
    for Sa, Sb in zip(a.corruption(), b.corruption(), strict=True):
        assert np.allclose(Sa, Sb, atol=1e-10)


def test_unknown_kernel_is_rejected():
    with pytest.raises(ValueError, match="kernel"):
        FedEPCohort([np.ones((5, 3))], np.eye(3)[:, :1], 0.0, 1.0, _settings(kernel="c"))


@pytest.mark.parametrize(
    ("scaling", "weights", "expected"),
    [
        ("relative", "auto", "curvature"),
        ("paper", "auto", "uniform"),
        ("relative", "samples", "samples"),
        ("paper", "samples", "samples"),
        ("relative", "uniform", "uniform"),
        ("paper", "curvature", "curvature"),
    ],
)
def test_consensus_weights_set_nu_and_the_v_step(scaling, weights, expected):
    rng = np.random.default_rng(6)
    blocks = [rng.standard_normal((m, 6)) * rng.uniform(0.5, 2.0) for m in (10, 40, 25)]
    V0 = random_stiefel(6, 2, rng)
    s = _settings(penalty_scaling=scaling, consensus_weights=weights)
    coh = FedEPCohort(blocks, V0, 1e-3, 0.5, s)
    sizes = np.array([10, 40, 25], dtype=float)
    lmax = np.array([np.linalg.eigvalsh(b.T @ b)[-1] for b in blocks])
    want = {"curvature": lmax, "samples": sizes, "uniform": np.ones(3)}[expected]
    assert np.allclose(coh.nu, 0.5 * want)
    rep = coh.local_round(V0)
    V, _ = server_round("fedep", rep, V0)
    # The V-step is the nu-weighted mean of W_i + Pi_i / nu_i: sample-weighted for
    # "samples", the plain mean for "uniform".
    target = rep.W + rep.Pi / rep.nu[:, None, None]
    assert np.allclose(V, np.tensordot(want / want.sum(), target, axes=1), atol=1e-12)


def test_unknown_consensus_weights_are_rejected():
    with pytest.raises(ValueError, match="consensus_weights"):
        FedEPCohort([np.ones((5, 3))], np.eye(3)[:, :1], 0.0, 1.0, _settings(consensus_weights="x"))


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_recomputed_duals_follow_the_stored_ones(kernel):
    # A client of many rows keeps no A (recomputed from U and the last data step's
    # basis): the same iterates as storing A, over rounds with partial participation,
    # a restart and a checkpoint round trip.
    rng = np.random.default_rng(7)
    blocks = [rng.standard_normal((m, 8)) @ rng.standard_normal((8, 8)) for m in (300, 40, 260)]
    blocks[0][5, 1] += 30.0
    V0 = random_stiefel(8, 3, rng)
    runs = {}
    for dual_rows in (10**6, 100):
        s = _settings(alpha=0.8, mu=1.5, kernel=kernel, dual_rows=dual_rows, max_group_rows=1)
        coh = FedEPCohort(blocks, V0, 1e-3, 1.0, s)
        V, metrics = V0, []
        for k in range(6):
            clients = None if k % 2 == 0 else np.array([0, 1])
            rep = coh.local_round(V, clients, restart=k == 3)
            metrics.append(rep.metrics)
            V, _ = server_round("fedep", rep, V)
            if k == 4:  # a gateway's checkpoint: state out, into a fresh cohort
                fresh = FedEPCohort(blocks, V0, 1e-3, 1.0, s)
                fresh.load_state(coh.state_arrays())
                coh = fresh
        runs[dual_rows] = (coh, V, metrics)
    (a, Va, ma), (b, Vb, mb) = runs[10**6], runs[100]
    assert [g.A is None for g in b.groups] == [True, True, False]  # 300, 260 rows; 40
    assert "dual_basis.0" in b.state_arrays() and "A.0" in a.state_arrays()
    assert np.allclose(Va, Vb, atol=1e-10)
    assert np.allclose(a.W, b.W, atol=1e-10)
    assert np.allclose(a.G, b.G, rtol=1e-10, atol=1e-9)
    for Aa, Ab in zip(a.duals(), b.duals(), strict=True):
        assert np.allclose(Aa, Ab, atol=1e-10)
    for Sa, Sb in zip(a.corruption(), b.corruption(), strict=True):
        assert np.allclose(Sa, Sb, atol=1e-10)
    assert abs(b.corruption()[0][5, 1]) > 3
    for x, y in zip(ma, mb, strict=True):
        for key in ("fit", "l1", "lam_terms", "data_residual", "projection", "grad_scale"):
            assert np.allclose(x[key], y[key], rtol=1e-9, atol=1e-9), key
