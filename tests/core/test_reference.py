"""The reference's estimates from counts: the share, the threshold, the PPCA; the
feedback's exclusion rule. Seeded data, independent references (NumPy on pooled values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedep.core.feedback import FEEDBACK_RADIUS, near_attacks, pair_distance
from fedep.core.reference import (
    estimate_share,
    exceedance_level,
    ppca_from_gram,
    reference_threshold,
    share_noise,
)
from fedep.core.trimming import ScoreCounts, ppca_distance


def _split(values, parts, rng):
    """Values held apart by ``parts`` gateways (random cuts)."""
    cuts = np.sort(rng.choice(np.arange(1, values.size), parts - 1, replace=False))
    return np.split(rng.permutation(values), cuts)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.1, 0.2])
def test_share_estimate_is_within_its_noise_of_the_planted_share(share):
    errors = []
    for seed in range(5):
        rng = np.random.default_rng([seed, int(1000 * share)])
        n = 6000
        k = int(round(share * n))
        # log-scores: normal traffic, and an attack mode well above it
        train = np.r_[rng.normal(0, 1, n - k), rng.normal(6, 0.5, k)]
        ref = rng.normal(0, 1, 400)
        e = estimate_share(ScoreCounts(_split(train, 5, rng)), ScoreCounts(_split(ref, 4, rng)))
        # the independent reference: the pooled values; the cut lies in [s_(k), s_(k+1))
        s = np.sort(ref)
        q = math.ceil(e.level * ref.size)
        eps = (ref > s[q - 1]).mean()
        assert e.reference_exceedance == pytest.approx(eps)

        lo, hi = (
            min(max(((train > cut).mean() - eps) / (1 - eps), 0), 0.5) for cut in (s[q], s[q - 1])
        )
        assert lo - 1e-12 <= e.share <= hi + 1e-12
        assert e.noise == pytest.approx(share_noise(1 - e.level, 400))
        errors.append(abs(e.share - k / n))
    # within 3 points in every seed, and within 3 standard deviations of its noise
    assert max(errors) <= 0.03
    assert max(errors) <= 3 * share_noise(1 - exceedance_level(400), 400)


def test_share_estimate_misses_attacks_below_the_cut_and_says_how():
    rng = np.random.default_rng(0)
    train = np.r_[rng.normal(0, 1, 9000), rng.normal(0, 1, 1000)]  # attacks like normal
    e = estimate_share(ScoreCounts([train]), ScoreCounts([rng.normal(0, 1, 300)]))
    assert e.share < 0.05  # not identifiable from the scores: low, not invented
    assert "300 reference records" in e.describe()
    with pytest.raises(ValueError, match="reference"):
        estimate_share(ScoreCounts([train]), ScoreCounts([np.empty(0)]))


@pytest.mark.parametrize("fpr", [0.01, 0.05])
def test_reference_threshold_fpr_on_fresh_trusted_traffic_is_within_binomial_bounds(fpr):
    hits = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        ref = rng.lognormal(0, 1, 600)  # right-skewed, as residual energies are
        cut = reference_threshold(ScoreCounts([np.log(ref[:300]), np.log(ref[300:])]), fpr)
        # at most fpr of the reference above the cut, the smallest such order statistic
        assert (np.log(ref) > cut).mean() <= fpr
        k = math.ceil((1 - fpr) * ref.size)
        s = np.sort(np.log(ref))
        assert s[k - 1] <= cut < s[k]
        fresh = rng.lognormal(0, 1, 20000)
        hits.append((np.log(fresh) > cut).mean())
    # the true exceedance of the cut has mean ~ fpr and sd sqrt(fpr (1 - fpr) / n)
    sd = math.sqrt(fpr * (1 - fpr) / 600)
    assert all(h <= fpr + 4 * sd for h in hits)
    assert abs(np.mean(hits) - fpr) <= 4 * sd / math.sqrt(len(hits)) + 1 / 600


def test_ppca_from_gram_is_the_ppca_of_the_records():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3)) @ rng.normal(size=(3, 8)) + 0.2 * rng.normal(size=(300, 8))
    mean, V, lam, sigma2 = ppca_from_gram(300, X.sum(0), X.T @ X, 3)
    np.testing.assert_allclose(mean, X.mean(0), atol=1e-12)
    w, U = np.linalg.eigh(np.cov(X.T, bias=True))
    np.testing.assert_allclose(lam, w[::-1][:3], rtol=1e-9)
    assert sigma2 == pytest.approx(w[::-1][3:].mean(), rel=1e-9)
    P = V @ V.T
    np.testing.assert_allclose(P, U[:, -3:] @ U[:, -3:].T, atol=1e-8)
    d = ppca_distance(X, mean, V, lam, sigma2)
    assert d.mean() == pytest.approx(8, rel=1e-6)  # E d^2 = n under its own ML fit


def test_near_attacks_takes_the_flood_not_the_neighbours():
    rng = np.random.default_rng(2)
    n = 10
    B = np.linalg.qr(rng.normal(size=(n, 3)))[0]
    Z = np.vstack(
        [
            (rng.normal(size=(500, 3)) * [3, 2, 1.5]) @ B.T + 0.3 * rng.normal(size=(500, n)),
            np.r_[np.full(4, 5.0), np.zeros(n - 4)] + 0.02 * rng.normal(size=(60, n)),
        ]
    )
    mean, V, lam, sigma2 = ppca_from_gram(560, Z.sum(0), Z.T @ Z, 3)
    attack = np.zeros(560, bool)
    attack[[500, 501]] = True  # two confirmed records of the flood
    out = near_attacks(Z - mean, attack, V, lam, sigma2)
    assert out[500:].all() and not out[:500].any()
    assert pair_distance(Z[:1], Z[0], V, lam, sigma2)[0] == pytest.approx(0.0)
    # the rule: squared PPCA distance at most FEEDBACK_RADIUS * n_features
    d = pair_distance(Z, Z[500], V, lam, sigma2)
    np.testing.assert_array_equal(
        out,
        attack
        | (d <= FEEDBACK_RADIUS * n)
        | (pair_distance(Z, Z[501], V, lam, sigma2) <= FEEDBACK_RADIUS * n),
    )


def _halves(train, ref, rng):
    """Two (training, held half) pairs of count queries: the values are the model's,
    the same under both halves' models here (scores of a fixed model)."""
    a, b = ref[0::2], ref[1::2]
    t = ScoreCounts(_split(train, 4, rng))
    return [(t, ScoreCounts(_split(b, 3, rng))), (t, ScoreCounts(_split(a, 3, rng)))]


def test_contamination_evidence_shows_a_planted_mode_and_not_clean_traffic():
    from fedep.core.reference import DETECTION_TAILS, contamination_evidence

    shown = {0.0: 0, 0.1: 0}
    for seed in range(20):
        for share in shown:
            rng = np.random.default_rng([seed, int(100 * share)])
            n, k = 5000, int(round(share * 5000))
            train = np.r_[rng.normal(0, 1, n - k), rng.normal(2.2, 0.3, k)]  # upper range
            ref = rng.normal(0, 1, 100)
            ev = contamination_evidence(_halves(train, ref, rng))
            shown[share] += ev.detected
            # the independent reference: the mean over halves of (e - eps) / (1 - eps),
            # each cut in [s_(k), s_(k+1)) of its held half
            for p, s in zip(DETECTION_TAILS, ev.shares, strict=True):
                bounds = []
                for held in (ref[1::2], ref[0::2]):
                    h = np.sort(held)
                    q = math.ceil((1 - p) * held.size)
                    eps = ((held > h[q - 1]).sum() + 1) / (held.size + 1)
                    bounds.append(
                        [((train > c).mean() - eps) / (1 - eps) for c in h[q - 1 : q + 1]]
                    )
                lo, hi = np.mean(bounds, axis=0)[::-1]
                assert lo - 1e-12 <= s <= hi + 1e-12
    assert shown[0.0] <= 3  # a few false alarms in 20 at twice the noise, three tails
    assert shown[0.1] >= 15
    assert "reference records" in ev.describe()
