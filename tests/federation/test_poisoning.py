"""Compromised gateways against the server step (the small version of
``benchmarks/bench_poisoning.py``) and the ``aggregation`` parameter on every surface."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from fedep import FedEP, FedPG
from fedep.core.baselines import client_sketch, oneshot_merge
from fedep.core.fedep import RoundReport
from fedep.core.stiefel import polar, projector_distance
from fedep.data import make_federated_data
from fedep.detectors import detector_param_table, make_estimator
from fedep.params import params_from_run_config

D, BAD = 10, (8, 9)


class Poisoned:
    """The honest cohort, with the replies of clients ``BAD`` forged every round:
    ``W = polar([V[:, :-1], a])`` and ``Pi = boost * nu (W - V)``."""

    def __init__(self, honest, a, boost=1.5):
        self.honest, self.d, self.a, self.boost = honest, honest.d, a, boost

    def local_round(self, V, clients=None, **kw) -> RoundReport:
        rep = self.honest.local_round(V, clients, **kw)
        Q = polar(V[:, :-1])
        a = self.a - Q @ (Q.T @ self.a)
        W = polar(np.column_stack([V[:, :-1], a / np.linalg.norm(a)]))
        for i in BAD:
            rep.W[i], rep.Pi[i] = W, self.boost * rep.nu[i] * (W - V)
        return rep


@pytest.fixture(scope="module")
def federation():
    data = make_federated_data(
        n_clients=D, n_features=20, n_components=3, n_samples=150, non_iid=0.3, random_state=0
    )
    blocks = [data.X_train[data.groups_train == i] for i in range(D)]
    mean = data.X_train.mean(0)
    scale = data.X_train.std(0)
    blocks = [(b - mean) / scale for b in blocks]
    # The attack direction: orthogonal to the planted (standardised) subspace.
    B = polar(data.basis / scale[:, None])
    a = np.random.default_rng(1).normal(size=20)
    a -= B @ (B.T @ a)
    return blocks, a / np.linalg.norm(a)


def _fit(blocks, rule, a=None, method=FedEP, n_rounds=60):
    est = method(n_components=3, init="oneshot", aggregation=rule, n_rounds=n_rounds, tol=0.0)
    if method is FedEP:  # the ADMM's V-step under attack (not the consensus steps')
        est.set_params(remerge=False)
    rng = np.random.default_rng(0)
    V0 = oneshot_merge([client_sketch(b, 3) for b in blocks], 3)  # init="oneshot"
    cohort = est._make_cohort(blocks, V0)
    res = est._run_rounds(cohort if a is None else Poisoned(cohort, a), V0, rng)
    return polar(res.V), res


def test_robust_rules_resist_two_crafted_gateways_of_ten(federation):
    blocks, a = federation
    clean, _ = _fit(blocks, "mean")
    got = {rule: _fit(blocks, rule, a) for rule in ("mean", "median", "trimmed")}
    dist = {rule: float(projector_distance(B, clean)) for rule, (B, _) in got.items()}
    energy = {rule: float(np.linalg.norm(B.T @ a) ** 2) for rule, (B, _) in got.items()}
    # The mean V-step takes the attack direction into the basis ...
    assert dist["mean"] > 0.5 and energy["mean"] > 0.3, (dist, energy)
    # ... the robust rules stay near the clean fit and keep the direction out (the
    # median's pull is bounded, not zero; the trimmed rule drops the forgers).
    for rule, bound in (("median", 0.15), ("trimmed", 0.05)):
        assert dist[rule] < bound and energy[rule] < 0.02, (rule, dist, energy)
        assert got[rule][1].history[-1]["downweighted"] == list(BAD)


def test_stopping_test_does_not_wait_for_excluded_gateways(federation):
    blocks, a = federation
    # tol 1e-6: stationary to 1e-6 and feasible to sqrt(tol) = 1e-3, which the forged
    # gateways (nu-weighted consensus residual ~0.012 under the mean step) never are.
    est = FedEP(n_components=3, init="oneshot", aggregation="trimmed", n_rounds=300, tol=1e-6)
    rng = np.random.default_rng(0)
    V0 = oneshot_merge([client_sketch(b, 3) for b in blocks], 3)  # init="oneshot"
    res = est._run_rounds(Poisoned(est._make_cohort(blocks, V0), a), V0, rng)
    assert res.stop_reason == "stationary" and res.n_rounds < 300
    assert all(h["n_downweighted"] == 2 for h in res.history)
    # With the mean V-step the forged clients' consensus residual never shrinks.
    mean = FedEP(n_components=3, init="oneshot", n_rounds=res.n_rounds, tol=1e-6)
    r2 = mean._run_rounds(Poisoned(mean._make_cohort(blocks, V0), a), V0, np.random.default_rng(0))
    assert r2.stop_reason == "max_rounds"


def test_estimators_fit_with_every_rule(federation):
    data = make_federated_data(n_clients=4, n_features=8, n_components=2, n_samples=60)
    for cls in (FedEP, FedPG):
        for rule in ("mean", "median", "trimmed"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                det = cls(n_components=2, aggregation=rule, n_rounds=5, random_state=0)
                det.fit(data.X_train, groups=data.groups_train)
            assert det.get_params()["aggregation"] == rule
            assert all("n_downweighted" in h for h in det.history_)
    with pytest.raises(InvalidParameterError, match="'aggregation' parameter of FedEP"):
        FedEP(aggregation="mode").fit(data.X_train)


def test_aggregation_is_on_the_cli_and_the_flower_run_config():
    import fedep.cli.fit as fit_mod
    from fedep.cli import build_parser

    args = build_parser().parse_args(
        ["fit", "--train", "t.csv", "--out", "m.fedep", "--method", "fedep",
         "--aggregation", "trimmed"]
    )  # fmt: skip
    assert fit_mod.build_estimator(args).aggregation == "trimmed"
    for method in ("fedep", "fedpg", "case1"):
        params = params_from_run_config({"aggregation": "median"}, detector_param_table())
        assert make_estimator(method, params).aggregation == "median"
    with pytest.raises(ValueError, match="aggregation does not apply to method pca"):
        make_estimator(
            "pca", params_from_run_config({"aggregation": "median"}, detector_param_table())
        )
