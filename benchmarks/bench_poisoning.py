"""Poisoned gateways against the server step: ROC AUC, rounds and time per round.

Run by hand (not a test)::

    python benchmarks/bench_poisoning.py --out benchmarks/results/poisoning.json

Ten gateways hold an IID split of the NORMAL training rows of NSL-KDD
(``feature_set="rich"``); FedEP (rank 10, ``init="oneshot"``, otherwise the
estimator's default parameters, read with ``FedEP().get_params()``) is fitted with the
public core pieces the estimator is made of: the one-shot merge of the gateways'
sketches (:func:`fedep.core.baselines.oneshot_merge`), the core cohort
(:func:`fedep.core.cohort.make_cohort`) and the one round loop
(:func:`fedep.federation.rounds.run_rounds`, with ``aggregation=`` the rule and the
estimator's re-merges). ``f`` of the gateways are compromised: every round they
replace what they send (the honest cohort still runs them; only their rows of the
reply are overwritten; a sketch asked for a re-merge is the forged basis with the
honest sketch's column norms):

- ``random``: a random orthonormal basis and a zero dual;
- ``crafted``: ``W_bad = polar([V[:, :r-m], A])`` with ``A`` the top ``m``
  (``--attack-dims``, default 7) principal directions of the ATTACK training rows
  (standardised with the federation's mean and scale, uncentred: the directions of
  largest attack energy about the normal mean), orthonormalised against
  ``V[:, :r-m]``; and the dual ``Pi = boost * nu (W_bad - V)`` (``--boost``, default
  1.5), which pulls the mean V-step towards ``W_bad`` (so that attacks along ``A`` fall
  inside the normal subspace and score low). One direction (``m = 1``) costs the
  mean V-step only ~0.007 ROC AUC on NSL-KDD (attacks spread over many directions);
  the loss saturates at ~0.045 from ``m = 7``; ``boost = 5`` makes the mean V-step
  diverge (``||V||`` grows without bound).

- ``rotated``: colluders all send one basis, ``V`` with its last ``m`` columns turned
  by ``--angle`` (default 0.2 rad) towards the attack directions, and a zero dual:
  identical, near-honest bases that drag the consensus a little further each round;
- ``nu``: the ``crafted`` basis with ``nu`` reported 999 times too large (within the
  Flower server's out-of-scale bound of 1e3) and the dual scaled with it.

Rules: ``mean``, ``median``, ``trimmed`` and ``grassmann``
(:mod:`fedep.core.aggregation`); ``--dataset`` picks NSL-KDD, UNSW-NB15 or TON-IoT.

Scores: ROC AUC of the residual energy under ``polar(V)`` on the full KDDTest+
split; rounds run; seconds per round (median over the run, whole round). Also the
time of the server step alone per rule on the same shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
from _common import write_json
from sklearn.metrics import roc_auc_score

from fedep import FedEP, FedPG
from fedep.core.aggregation import robust_step
from fedep.core.baselines import client_sketch, oneshot_merge
from fedep.core.cohort import cohort_spec, make_cohort
from fedep.core.fedep import FedEPSettings, RoundReport
from fedep.core.fedpg import FedPGSettings
from fedep.core.scoring import residual_energy
from fedep.core.stats import client_moments, combine_moments, standardization_from_moments
from fedep.core.stiefel import polar, projector_distance, random_stiefel
from fedep.data import load_dataset, partition_iid
from fedep.federation.rounds import FederationResult, run_rounds


class PoisonedCohort:
    """An honest cohort whose clients ``bad`` send forged replies.

    Parameters
    ----------
    honest : RoundClients
        The cohort that runs every client honestly.
    bad : sequence of int
        Positions of the compromised clients.
    kind : {"random", "crafted", "rotated", "nu"}
    directions : ndarray of shape (n, m), optional
        The attack directions (``"crafted"``): they replace the last ``m`` columns of
        ``V`` (orthogonalised against the others) in the forged basis.
    boost : float
        Scale of the crafted dual.
    seed : int
    """

    def __init__(self, honest, bad, kind, directions=None, boost=5.0, seed=0, angle=0.2):
        self.honest, self.d = honest, honest.d
        self.bad = np.asarray(sorted(bad), dtype=int)
        self.kind, self.boost, self.angle = kind, float(boost), float(angle)
        self.A = None if directions is None else np.atleast_2d(directions.T).T
        self.rng = np.random.default_rng(seed)

    def forge(self, V: np.ndarray, nu: float) -> tuple[np.ndarray, np.ndarray]:
        """One forged ``(W, Pi)`` (n, r) against the consensus ``V``."""
        n, r = V.shape
        if self.kind == "random":
            return random_stiefel(n, r, self.rng), np.zeros((n, r))
        m = self.A.shape[1]
        if self.kind == "rotated":
            B = polar(V)
            A = polar(self.A - B @ (B.T @ self.A))
            turned = np.cos(self.angle) * B[:, r - m :] + np.sin(self.angle) * A
            return polar(np.column_stack([B[:, : r - m], turned])), np.zeros((n, r))
        Q = polar(V[:, : r - m])
        A = polar(self.A - Q @ (Q.T @ self.A))
        W = polar(np.column_stack([V[:, : r - m], A]))
        return W, self.boost * nu * (W - V)

    def local_round(self, V, clients=None, **kw) -> RoundReport:
        """The honest round (``kw``: the loop's ``restart`` / ``sketch_rank``), forged
        at the compromised clients."""
        rep = self.honest.local_round(V, clients, **kw)
        pos = np.arange(self.d) if clients is None else np.asarray(clients)
        for j, c in enumerate(pos):
            if c in self.bad:
                if self.kind == "nu":
                    rep.nu[j] *= 999.0
                rep.W[j], rep.Pi[j] = self.forge(V, float(rep.nu[j]))
                if rep.sketch is not None:
                    k = rep.sketch.shape[2]
                    rep.sketch[j] = rep.W[j][:, :k] * np.linalg.norm(rep.sketch[j], axis=0)
        return rep


def load(data_dir: str, d: int, seed: int, attack_dims: int = 1, dataset: str = "nsl-kdd"):
    ds = load_dataset(dataset, data_dir, feature_set="rich")
    Xn = ds.X_train[ds.y_train == 0]
    groups = partition_iid(Xn.shape[0], d, random_state=seed)
    raw = [Xn[groups == i] for i in range(d)]
    mean, scale, _ = standardization_from_moments(combine_moments(client_moments(b) for b in raw))
    blocks = [(b - mean) / scale for b in raw]
    Xa = (ds.X_train[ds.y_train == 1] - mean) / scale
    a = np.linalg.svd(Xa, full_matrices=False)[2][:attack_dims].T
    Zte = (ds.X_test - mean) / scale
    return blocks, a, Zte, ds.y_test


def federation(method: str, rank: int, rule: str, n_rounds: int) -> dict:
    """The estimator's default parameters as the core's cohort and loop settings.

    ``FedEP`` / ``FedPG`` hyper-parameters (public, ``get_params()``) translated as
    the estimators translate them, with ``n_components``, ``aggregation`` and
    ``n_rounds`` set here.
    """
    if method == "fedep":
        p = FedEP().get_params()
        settings = FedEPSettings(
            alpha=float(p["alpha"]),
            mu=float(p["mu"]),
            use_sparse=bool(p["sparse_corruption"]),
            inner_max_iter=int(p["inner_max_iter"]),
            penalty_scaling=p["penalty_scaling"],
            consensus_weights=p["consensus_weights"],
        )
        spec = cohort_spec("fedep", settings, beta=float(p["beta"]), nu=float(p["nu"]))
        remerge = bool(p["remerge"] and p["sparse_corruption"])
    else:
        p = FedPG().get_params()
        settings = FedPGSettings(
            lr=None if p["lr"] is None else float(p["lr"]),
            rho=float(p["rho"]),
            local_epochs=int(p["local_epochs"]),
            consensus_weights=p["consensus_weights"],
            penalty_scaling=p["penalty_scaling"],
            manifold=p["manifold"],
        )
        spec, remerge = cohort_spec("fedpg", settings), False
    return {
        "method": method,
        "spec": spec,
        "rank": rank,
        "aggregation": rule,
        "n_rounds": n_rounds,
        "tol": float(p["tol"]),
        "remerge": remerge,
    }


def fit_once(
    fed: dict, blocks, bad, kind, a, boost, seed, angle=0.2
) -> tuple[FederationResult, float]:
    """One federation from the one-shot start, with ``bad`` clients forging replies."""
    rng = np.random.default_rng(seed)
    r = fed["rank"]
    V0 = oneshot_merge([client_sketch(b, r) for b in blocks], r)
    honest = make_cohort(fed["spec"], blocks, V0)
    cohort = PoisonedCohort(honest, bad, kind, a, boost, seed, angle) if len(bad) else honest
    t0 = time.perf_counter()
    res = run_rounds(
        cohort,
        fed["method"],
        V0,
        n_rounds=fed["n_rounds"],
        tol=fed["tol"],
        rng=rng,
        aggregation=fed["aggregation"],
        remerge=fed["remerge"],
    )
    return res, time.perf_counter() - t0


def server_step_cost(n, r, d, repeats=200):
    """Median seconds of the server step alone per rule, on (d, n, r) replies."""
    rng = np.random.default_rng(0)
    V = random_stiefel(n, r, rng)
    W = polar(V + 0.01 * rng.standard_normal((d, n, r)))
    Pi = 0.01 * rng.standard_normal((d, n, r))
    nu = rng.random(d) + 1.0
    out = {}
    for rule in ("mean", "median", "trimmed", "grassmann"):
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            robust_step("fedep", W, Pi, nu, rule)
            ts.append(time.perf_counter() - t0)
        out[rule] = float(np.median(ts))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="/work/shared/data")
    p.add_argument("--dataset", default="nsl-kdd", choices=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--out", default="benchmarks/results/poisoning.json")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--f", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--kinds", nargs="+", default=["crafted", "rotated", "nu"])
    p.add_argument("--rules", nargs="+", default=["mean", "median", "trimmed", "grassmann"])
    p.add_argument("--angle", type=float, default=0.2)
    p.add_argument("--methods", nargs="+", default=["fedep"])
    p.add_argument("--boost", type=float, default=1.5)
    p.add_argument("--attack-dims", type=int, default=7)
    p.add_argument("--n-rounds", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    blocks, a, Zte, yte = load(
        args.data_dir, args.clients, args.seed, args.attack_dims, dataset=args.dataset
    )
    n = blocks[0].shape[1]
    rows, clean = [], {}
    for method in args.methods:
        for f in args.f:
            for kind in args.kinds if f else ["none"]:
                # The poisoned gateways: the last f (the split is IID).
                bad = list(range(args.clients - f, args.clients))
                for rule in args.rules:
                    fed = federation(method, args.rank, rule, args.n_rounds)
                    res, wall = fit_once(
                        fed, blocks, bad, kind, a, args.boost, args.seed, args.angle
                    )
                    B = polar(res.V)
                    auc = float(roc_auc_score(yte, residual_energy(Zte, B)))
                    if f == 0:
                        clean[(method, rule)] = B
                    ref = clean.get((method, "mean"))
                    times = [h["time_s"] for h in res.history]
                    last = res.history[-1] if res.history else {}
                    row = {
                        "method": method,
                        "attack": kind,
                        "f": f,
                        "aggregation": rule,
                        "roc_auc": auc,
                        "rounds": res.n_rounds,
                        "stop_reason": res.stop_reason,
                        "s_per_round": float(np.median(times)),
                        "wall_s": wall,
                        # sum of squared cosines of the attack directions with span(B)
                        "attack_energy_in_basis": float(np.linalg.norm(B.T @ a) ** 2),
                        "dist_to_clean_mean": None
                        if ref is None
                        else float(projector_distance(B, ref)),
                        "downweighted_last": last.get("downweighted"),
                    }
                    rows.append(row)
                    print(
                        f"{method:5s} {kind:7s} f={f} {rule:7s} auc={auc:.4f} "
                        f"rounds={res.n_rounds:3d} ({res.stop_reason}) "
                        f"{row['s_per_round'] * 1e3:.1f} ms/round "
                        f"a-energy={row['attack_energy_in_basis']:.3f} "
                        f"dist={row['dist_to_clean_mean']}",
                        flush=True,
                    )
    out = {
        "setup": {
            "dataset": f"{args.dataset} (rich), normal training rows, IID split",
            "clients": args.clients,
            "rank": args.rank,
            "n_features": n,
            "rows": int(sum(b.shape[0] for b in blocks)),
            "boost": args.boost,
            "angle": args.angle,
            "load": os.getloadavg()[0],
            "n_rounds": args.n_rounds,
            "seed": args.seed,
            "machine": platform.platform(),
        },
        "server_step_s": server_step_cost(n, args.rank, args.clients),
        "results": rows,
    }
    write_json(args.out, out)
    print(json.dumps(out["server_step_s"]))


if __name__ == "__main__":
    main()
