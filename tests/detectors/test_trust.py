"""Fits with a trusted reference and analyst feedback (seeded federations with a
planted attack mode): the start, the share, the threshold, the feedback's counts, and
what the fit says about how it estimated the share."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from fedep import FedEP, PooledPCA
from fedep.core.stiefel import projector_distance


def _federation(seed, share=0.2, n=12, N=1600):
    """Normal records near a rank-3 subspace and a tight attack mode (``share`` of the
    records, shifted in 4 features: a flood), 4 gateways, a reference of 60 normal rows."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.standard_normal((n, 3)))[0]
    k = int(round(share / (1 - share) * N))
    X = np.vstack(
        [
            (rng.standard_normal((N, 3)) * [3.0, 2.0, 1.5]) @ B.T
            + 0.3 * rng.standard_normal((N, n)),
            np.r_[np.full(4, 5.0), np.zeros(n - 4)] + 0.05 * rng.standard_normal((k, n)),
        ]
    )
    y = np.r_[np.zeros(N, bool), np.ones(k, bool)]
    groups = rng.integers(0, 4, X.shape[0])
    ref = np.zeros(X.shape[0], bool)
    ref[rng.choice(N, 60, replace=False)] = True
    return X, y, groups, ref, B


@pytest.mark.parametrize("seed", [0, 1])
def test_reference_start_recovers_the_normal_subspace_where_trimming_from_all_does_not(seed):
    X, y, g, ref, B = _federation(seed)
    plain = PooledPCA(3, standardize=False, trim_steps=5, trim_share=0.25).fit(X, groups=g)
    with_ref = PooledPCA(3, standardize=False, contamination="auto").fit(X, groups=g, reference=ref)
    assert projector_distance(plain.components_.T, B) > 0.5  # the attack mode took a direction
    assert projector_distance(with_ref.components_.T, B) < 0.1
    assert with_ref.trim_history_[0]["start"] == "reference"
    # switched on by the reference's evidence (not by trim_steps): one selection, one fit
    assert with_ref.n_trim_steps_ == 1 and "trimming on" in with_ref.trust_["decision"]
    # the flood leaves, most normal records stay (the reference's 90 % quantile)
    assert 0.75 * (~y).sum() <= with_ref.trim_history_[0]["n_kept"] <= (~y).sum()
    assert abs(with_ref.contamination_ - y.mean()) <= 0.06  # noise ~0.04 with 60 records
    assert "60 reference records" in with_ref.contamination_reason_


def test_fedep_with_a_reference_recovers_the_subspace():
    X, y, g, ref, B = _federation(2)
    est = FedEP(3, standardize=False, contamination="auto", n_rounds=30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, groups=g, reference=ref)
    assert projector_distance(est.components_.T, B) < 0.15
    assert est.trust_["n_reference"] == 60


def test_threshold_holds_reference_fpr_on_the_reference():
    X, y, g, ref, _ = _federation(3, share=0.1)
    est = PooledPCA(3, standardize=False, contamination="auto", reference_fpr=0.05)
    est.fit(X, groups=g, reference=ref)
    flagged = est.decision_scores_[ref] > est.threshold_
    assert flagged.mean() <= 0.05
    assert est.decision_scores_[y].min() > est.threshold_  # the flood scores above it


def test_clean_training_with_a_reference_is_not_trimmed():
    X, y, g, ref, _ = _federation(4, share=0.0)
    est = PooledPCA(3, standardize=False, contamination="auto").fit(X, groups=g, reference=ref)
    assert est.n_trim_steps_ == 0 and est.contamination_ <= 0.06
    assert "no trimming" in est.trust_["decision"]


def test_auto_without_a_reference_says_so():
    X, _, g, _, _ = _federation(5, share=0.1)
    est = PooledPCA(3, standardize=False, contamination="auto").fit(X, groups=g)
    assert est.trust_ is None and "without a reference" in est.contamination_reason_
    given = PooledPCA(3, standardize=False).fit(X, groups=g)
    assert given.contamination_reason_ == "contamination=0.05 given"


def test_feedback_excludes_the_flood_near_confirmed_attacks_and_counts_what_moved():
    X, y, g, _, B = _federation(6, share=0.2)
    fb = np.full(X.shape[0], "", dtype=object)
    att = np.flatnonzero(y)
    fb[att[:8]] = "attack"  # a few confirmed records of the flood, on any gateway
    fb[np.flatnonzero(~y)[:5]] = "benign"
    est = PooledPCA(3, standardize=False).fit(X, groups=g, feedback=fb)
    assert est.feedback_["attack_labels"] == 8 and est.feedback_["benign_labels"] == 5
    # every gateway holding a confirmed flood record drops its flood, nothing else
    held = np.unique(g[att[:8]])
    expect = int(sum((y & (g == i)).sum() for i in held))
    assert est.feedback_["excluded"] == expect
    if held.size == 4:
        assert projector_distance(est.components_.T, B) < 0.1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"feedback": ["maybe"] + [""] * 199}, "feedback row 0: label 'maybe'"),
        ({"feedback": [""] * 10}, "one label per row"),
        ({"reference": np.ones(7, bool)}, "boolean mask of the 200"),
        ({"reference": np.ones((5, 3))}, r"records of shape \(5, 3\)"),
        ({"reference": np.ones((5, 4)), "reference_groups": [9] * 5}, "gateway 9"),
    ],
)
def test_bad_reference_or_feedback_is_one_line(kwargs, match):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    with pytest.raises(ValueError, match=match) as info:
        PooledPCA(2).fit(X, groups=np.arange(200) % 2, **kwargs)
    assert "\n" not in str(info.value)


def test_warm_start_with_a_trusted_reference():
    X, _, g, ref, B = _federation(2)
    first = np.arange(len(X)) % 2 == 0
    kw = {"standardize": False, "contamination": "auto", "n_rounds": 30, "random_state": 0}
    model = _quiet_fit(FedEP(3, **kw), X[first], g[first], reference=ref[first])
    warm = copy.deepcopy(model).set_params(warm_start=True)
    _quiet_fit(warm, X[~first], g[~first], reference=ref[~first])
    cold = _quiet_fit(FedEP(3, **kw), X[~first], g[~first], reference=ref[~first])
    # the reference's decisions are the new period's, as a cold fit's: its records, the
    # trimming started from it, the threshold; the basis the normal subspace
    assert warm.trust_["n_reference"] == cold.trust_["n_reference"] == int(ref[~first].sum())
    assert warm.trim_history_[0]["start"] == "reference"
    assert warm.threshold_ == pytest.approx(cold.threshold_, rel=0.02)
    assert projector_distance(warm.components_.T, B) < 0.1
    assert warm.lineage_["parent"] == model.lineage_["id"]


def _quiet_fit(est, X, g, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, groups=g, **kw)


def _numpy_selection(X, ref, r, level):
    """Independent NumPy reference of the selection: a maximum-likelihood PPCA of the
    reference rows (eigendecomposition of their covariance), each row's PPCA distance,
    and the rows at or below the reference's ``ceil(level * n)``-th smallest distance."""
    R = X[ref]
    mu = R.mean(axis=0)
    w, U = np.linalg.eigh(np.cov(R.T, bias=True))
    w, U = w[::-1], U[:, ::-1]
    lam, sigma2 = w[:r], w[r:].sum() / (X.shape[1] - r)
    Z = X - mu
    T = Z @ U[:, :r]
    d2 = (T**2 / lam).sum(axis=1) + ((Z**2).sum(axis=1) - (T**2).sum(axis=1)) / sigma2
    cut = np.sort(d2[ref])[int(np.ceil(level * ref.sum())) - 1]
    return d2 <= cut


@pytest.mark.parametrize("seed", [7, 8])
def test_selection_by_a_large_reference_is_the_numpy_selection(seed):
    """From SELECT_MIN_REFERENCE records on, the fit keeps the rows at or below the
    reference's SELECT_LEVEL quantile under the reference's PPCA and is fitted once on
    them, contamination shown or not: same kept rows and basis as NumPy, the planted
    flood out."""
    from fedep.detectors.trust import SELECT_LEVEL, SELECT_MIN_REFERENCE

    for share in (0.0, 0.1):
        X, y, g, _, B = _federation(seed, share=share)
        rng = np.random.default_rng(seed)
        ref = np.zeros(X.shape[0], bool)
        ref[rng.choice(np.flatnonzero(~y), SELECT_MIN_REFERENCE + 20, replace=False)] = True
        est = PooledPCA(3, standardize=False, contamination="auto")
        est.fit(X, groups=g, reference=ref)
        keep = _numpy_selection(X, ref, 3, SELECT_LEVEL)
        # the cuts come from count queries (bisection on log-distances): a record or
        # two at the cut may fall either way
        assert est.n_trim_steps_ == 1 and abs(est.trim_history_[0]["n_kept"] - keep.sum()) <= 3
        assert "trimming on" in est.trust_["decision"]
        if share == 0.0:  # nothing to show: the decision says the reference's size chose
            assert "select whether or not contamination is shown" in est.trust_["decision"]
        Zk = X[keep] - X[keep].mean(axis=0)
        V = np.linalg.eigh(Zk.T @ Zk)[1][:, ::-1][:, :3]
        assert projector_distance(est.components_.T, V) < 0.01
        assert not (keep & y).any() and keep[~y].mean() >= 0.8
        assert projector_distance(est.components_.T, B) < 0.1


def test_a_large_reference_too_small_to_halve_still_selects_and_says_why():
    """82 records make a rank-40 PPCA but not two (41 each): no evidence, and the
    reference's size alone chooses the selection, in the decision's words."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1200, 50)) * np.linspace(3.0, 0.5, 50)
    ref = np.zeros(X.shape[0], bool)
    ref[rng.choice(X.shape[0], 82, replace=False)] = True
    est = PooledPCA(40, standardize=False, contamination="auto")
    est.fit(X, groups=np.arange(X.shape[0]) % 3, reference=ref)
    assert "halves too small for a rank-40 test" in est.trust_["decision"]
    assert "(>= 80) select" in est.trust_["decision"] and est.n_trim_steps_ == 1
