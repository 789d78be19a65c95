"""Benign modes in a fitted detector: learned from confirmed false positives, applied
at scoring, saved and checked on load (``fedep.detectors.suppression``)."""

from __future__ import annotations

import numpy as np
import pytest

import fedep
from fedep import FedEP, PooledPCA
from fedep.core.benign import MAX_MODES
from fedep.detectors.suppression import (
    MODE_ARRAYS,
    suppressed_by,
    suppressed_scores,
)
from fedep.modelfile import ModelFileError, read_model_file, write_model_file

N = 10


def _data(seed=0, n=1500):
    """Normal traffic in a 3-D subspace plus noise, a tight mode of benign records off
    the subspace (5 % of rows: the model's false positives) and attacks elsewhere."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.standard_normal((N, 3)))[0]
    X = (rng.standard_normal((n, 3)) * [3.0, 2.0, 1.0]) @ B.T + 0.2 * rng.standard_normal((n, N))
    odd = rng.standard_normal(N)
    odd -= B @ (B.T @ odd)
    odd *= 2.5 / np.linalg.norm(odd)
    k = n // 20
    u = rng.standard_normal(N)
    u /= np.linalg.norm(u)
    spot = B @ [2.0, -1.0, 0.5] + odd  # a backup job: one place, spread along one line

    def mode_records(m):
        return spot + rng.uniform(-1, 1, (m, 1)) * u + 0.01 * rng.standard_normal((m, N))

    X[:k] = mode_records(k)  # the benign mode
    mode = np.zeros(n, dtype=bool)
    mode[:k] = True
    attack = rng.standard_normal((40, N)) * 0.2 - odd  # opposite side: never suppressed
    later = mode_records(200)
    groups = rng.integers(0, 4, n)
    return X, groups, mode, attack, later


def _feedback(det, mode, k=40):
    """Triage: the ``k`` highest-scoring training rows, labelled by the truth."""
    top = np.argsort(-det.decision_scores_, kind="stable")[:k]
    fb = np.full(det.decision_scores_.shape[0], "", dtype=object)
    fb[top] = np.where(mode[top], "benign", "attack")
    return fb


@pytest.fixture(scope="module")
def fitted():
    X, groups, mode, attack, later = _data()
    base = PooledPCA(3).fit(X, groups=groups)
    fb = _feedback(base, mode)
    det = PooledPCA(3, suppression_rules=True).fit(X, groups=groups, feedback=fb)
    return base, det, X, groups, mode, attack, later, fb


def test_no_rules_unless_asked(fitted):
    _base, _det, X, groups, _m, _a, _l, fb = fitted
    det = PooledPCA(3).fit(X, groups=groups, feedback=fb)
    assert getattr(det, "benign_centres_", None) is None
    assert suppressed_by(det, X) is None


def test_modes_learned_from_confirmed_false_positives(fitted):
    base, det, X, _g, mode, attack, later, fb = fitted
    assert det.benign_centres_.shape[1] == N and 1 <= det.benign_centres_.shape[0] <= MAX_MODES
    # each rule counts the confirmed false positives it was learned from; a gateway's
    # 1-4 records nearest a centre are withheld (never a sum of so few), so at most all
    assert (det.benign_counts_ >= 5).all()
    assert 0.5 * (fb == "benign").sum() <= det.benign_counts_.sum() <= (fb == "benign").sum()
    # the benign mode's new records alert without the rules, not with them
    assert base.predict(later).mean() > 0.9
    assert det.predict(later).mean() < 0.95 * base.predict(later).mean()
    rules = suppressed_by(det, later, base.predict(later).astype(bool))
    np.testing.assert_array_equal(det.predict(later), base.predict(later) * (rules < 0))
    # the attacks off the mode still alert
    assert det.predict(attack).mean() == base.predict(attack).mean() == 1.0
    # decision_function is unchanged: the residual energy
    np.testing.assert_allclose(det.decision_function(X), base.decision_function(X), rtol=1e-9)


def test_suppressed_scores_match_a_numpy_reference(fitted):
    _b, det, X, _g, _m, attack, later, _fb = fitted
    Y = np.vstack([X[:200], attack, later])
    got = suppressed_scores(det, Y)
    Z = (Y - det.mean_) / det.scale_
    V = det.components_.T
    s = ((Z - (Z @ V) @ V.T) ** 2).sum(1)
    ref = s.copy()
    for i, r in enumerate(Z):  # record by record, mode by mode
        ratio = min(
            np.sum((r - c) ** 2) / r2
            for c, r2 in zip(det.benign_centres_, det.benign_radius2_, strict=True)
        )
        if ratio <= 1.0:
            ref[i] = min(s[i], det.threshold_ * ratio)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)
    flags = det.predict(Y).astype(bool)
    np.testing.assert_array_equal(flags, got > det.threshold_)


def test_no_benign_labels_no_modes():
    X, groups, mode, *_ = _data(1)
    det = PooledPCA(3).fit(X, groups=groups)
    assert not any(hasattr(det, k) for k in MODE_ARRAYS)
    fb = np.full(X.shape[0], "", dtype=object)
    fb[np.flatnonzero(mode)[:4]] = "benign"  # 4 < MIN_MODE_RECORDS: no rule
    det = PooledPCA(3, suppression_rules=True).fit(X, groups=groups, feedback=fb)
    assert not any(hasattr(det, k) for k in MODE_ARRAYS)
    assert suppressed_by(det, X) is None


def test_federated_fit_learns_modes_too():
    X, groups, mode, _a, later = _data(2)
    base = FedEP(3, random_state=0, n_rounds=5, tol=0.0).fit(X, groups=groups)
    det = FedEP(3, random_state=0, n_rounds=5, tol=0.0, suppression_rules=True).fit(
        X, groups=groups, feedback=_feedback(base, mode)
    )
    assert det.benign_centres_.shape[0] >= 1
    g = np.zeros(len(later), int)
    assert det.predict(later, groups=g).mean() < 0.95 * base.predict(later, groups=g).mean()


def test_modes_round_trip_a_signed_model_file(fitted, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    _b, det, X, _g, _m, attack, later, _fb = fitted
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "m.fedep"
    fedep.save(det, path, sign_key=key)
    back = fedep.load(path, verify_key=key.public_key(), require_signature=True)
    for k in MODE_ARRAYS:
        np.testing.assert_array_equal(getattr(back, k), getattr(det, k))
    Y = np.vstack([later, attack])
    np.testing.assert_array_equal(back.predict(Y), det.predict(Y))


def _rewrite(tmp_path, det, change):
    path = tmp_path / "honest.fedep"
    fedep.save(det, path)
    meta, arrays = read_model_file(path)
    arrays = dict(arrays)
    change(arrays)
    bad = tmp_path / "hostile.fedep"
    write_model_file(bad, meta, arrays)
    return bad


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.pop("benign_radius2_"), "'benign_radius2_' is missing"),
        (lambda a: a.update(benign_radius2_=-a["benign_radius2_"]), "finite and positive"),
        (
            lambda a: a["benign_centres_"].__setitem__((0, 0), np.nan),
            "centres hold NaN or inf",
        ),
        (lambda a: a.update(benign_counts_=a["benign_counts_"] * 0 + 1), "fewer than 5"),
        (
            lambda a: a.update(
                benign_centres_=np.zeros((MAX_MODES + 1, N)),
                benign_radius2_=np.ones(MAX_MODES + 1),
                benign_counts_=np.full(MAX_MODES + 1, 9),
            ),
            f"more than {MAX_MODES}",
        ),
        (lambda a: a.update(benign_centres_=a["benign_centres_"][:, :3]), "expected"),
        (lambda a: a.update(benign_counts_=a["benign_counts_"] * 1.0), "counts integer"),
    ],
)
def test_hostile_modes_are_refused_with_one_line(fitted, tmp_path, change, message):
    det = fitted[1]
    bad = _rewrite(tmp_path, det, change)
    with pytest.raises(ModelFileError) as err:
        fedep.load(bad)
    text = str(err.value)
    assert message in text and "\n" not in text


def test_no_rule_suppresses_a_confirmed_attack(fitted):
    _b, det, X, groups, mode, *_ = fitted
    fb = fitted[7].copy()
    benign = np.flatnonzero(fb == "benign")
    inside = np.flatnonzero(mode & (fb == "benign") & (suppressed_by(det, X) >= 0))
    assert inside.size  # a record of a rule's own ball ...
    fb[inside[0]] = "attack"  # ... confirmed as an attack instead
    guarded = PooledPCA(3, suppression_rules=True).fit(X, groups=groups, feedback=fb)
    rules = suppressed_by(guarded, X)
    assert rules[inside[0]] == -1
    assert (rules[fb == "attack"] == -1).all()
    assert guarded.benign_counts_.sum() <= benign.size
