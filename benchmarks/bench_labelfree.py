"""Label-free choices of the rank and the scaling, compared with labelled choices.

Run by hand (not a test)::

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/bench_labelfree.py \
        --data-dir ../shared/data --max-train-rows 0 --seeds 0 1 2 3 4 \
        --synthetic-seeds 3 --out benchmarks/results/labelfree.json

(``--max-train-rows 0``: every normal training row; the README's table; 15 min on a
loaded 2-core machine, most of it the factor-analysis fits on the synthetic data.)

Every statistic a rule uses is a sum over gateways (federated): each gateway's normal
training rows are split, by a seeded draw per row, into a fit part (80 %) and a held-out
part (20 %); the feature pipeline (``FeaturePipeline(scale_rule=None)``: the encoded,
unscaled features) is fitted on the fit parts, and the server receives, per gateway, the
moments and the scatter matrix ``E^T E`` (centred at the pooled fit mean) of the fit
part and of the held-out part. A candidate scaling ``s`` turns them into the covariance
of the fit part and the scatter of the held-out part in scaled units, so every rule
below is computed from ``d x d`` sums.

Rank rules (on the default scaling and on each candidate):

``gavish-donoho``
    the library's ``n_components="auto"`` (:mod:`fedep.core.rank`);
``minka``
    Minka's Laplace approximation of the PPCA evidence (scikit-learn's ``"mle"``);
``heldout-ppca``
    the rank whose maximum-likelihood PPCA (fit part) gives the held-out part the
    largest log-likelihood;
``bicv``
    Owen and Perry's bi-cross-validation: held-out rows x a random half of the
    features predicted from the other half through the rank-k PCA of the fit part
    (5 random halvings), smallest squared error;
``bicv-1se``
    the smallest rank whose bi-cross-validation error is within one standard error
    (of the paired difference over gateways) of the smallest (Breiman's 1-SE rule);
``fa-bic``, ``fa-heldout``
    factor analysis (a noise variance per feature, so the rank does not depend on the
    scaling), fitted by EM on the merged covariance alone, rank by BIC on the fit part
    or by the held-out log-likelihood, over a grid of ranks;
``variance95``, ``kaiser``
    95 % of the variance, eigenvalues above their mean.

Scaling rules: ``floor:0.1`` (today's default), and the candidate (``sd``, ``floor``,
``shrink``) with the largest held-out PPCA log-likelihood **in the original units of
the encoded features** (the Jacobian ``- sum_j log s_j`` added, so candidates are
comparable), jointly over (scaling, rank); features constant in both parts are left out
of the likelihood (no information about their scale).

Detection: pooled PCA (closed form) at every (scaling, rank), residual energy, the
validation split (from the training file, labelled) and the whole test file; ROC AUC,
and the FPR on test normal rows at the 95th percentile of the fit rows' scores (the
detectors' default ``contamination=0.05``). ``validation`` rows are the labelled
choices (best validation ROC AUC), the reference an unlabelled rule should match.

Synthetic data with a known rank: :func:`fedep.data.make_federated_data` (isotropic
noise) and the same with every feature multiplied by a log-uniform scale over three
decades plus near-constant "quiet" features (heteroscedastic, the real data's shape;
an anomaly also moves one quiet feature by 5 of its sds); reports each rule's chosen
rank minus the planted rank, and the test ROC AUC of the planted anomalies at each
rule's rank and at each scaling choice (planted rank).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from fedep.core.rank import DEGENERATE_RTOL, choose_rank
from fedep.core.stats import client_moments, combine_moments
from fedep.features import FeaturePipeline, federated_scale

CANDIDATES = [
    ("sd", 0.0),
    ("floor", 0.01),
    ("floor", 0.03),
    ("floor", 0.1),
    ("floor", 0.3),
    ("floor", 1.0),
    ("shrink", 0.1),
    ("shrink", 0.3),
]
DEFAULT = ("floor", 0.1)


# ----------------------------------------------------------------------------- sums
def federated_sums(fit_blocks, ho_blocks):
    """What the server receives: pooled fit moments, fit and held-out scatter (centred
    at the pooled fit mean), the held-out count, and each gateway's held-out scatter
    (shape (n_gateways, d, d), for the standard errors of bi-cross-validation)."""
    mom = combine_moments(client_moments(b) for b in fit_blocks)
    d = mom.mean.size
    S_fit = np.zeros((d, d))
    for b in fit_blocks:
        c = b - mom.mean
        S_fit += c.T @ c
    S_gw = np.stack([(b - mom.mean).T @ (b - mom.mean) for b in ho_blocks])
    return mom, S_fit, S_gw.sum(0), sum(b.shape[0] for b in ho_blocks), S_gw


def heldout_ppca_ll(lam, V, S_ho, n_ho, ranks):
    """Average held-out log-likelihood per row of the ML PPCA of each rank.

    ``lam``/``V``: eigenvalues (decreasing, shape (d,)) and vectors of the fit
    covariance; ``S_ho``: held-out scatter (d, d) centred at the fit mean.
    ``sigma2`` = mean of the discarded eigenvalues. Returns {rank: ll} (-inf where
    ``sigma2`` is 0).
    """
    d = lam.size
    tr = float(np.trace(S_ho)) / n_ho
    q = np.einsum("ij,ij->j", V, S_ho @ V) / n_ho  # v_k^T S v_k / n
    out = {}
    tail = np.cumsum(lam[::-1])[::-1]  # tail[k] = sum lam[k:]
    for r in ranks:
        if r >= d:
            continue
        s2 = tail[r] / (d - r)
        if not s2 > 0:
            out[r] = -np.inf
            continue
        lk = np.maximum(lam[:r], s2)
        logdet = np.log(lk).sum() + (d - r) * np.log(s2)
        quad = tr / s2 - ((1.0 / s2 - 1.0 / lk) * q[:r]).sum()
        out[r] = float(-0.5 * (d * np.log(2 * np.pi) + logdet + quad))
    return out


def minka_rank(lam_live, n):
    from sklearn.decomposition._pca import _infer_dimension

    return int(_infer_dimension(lam_live, n))


def bicv_errors(C_fit, S_ho, kmax, rng, repeats=5):
    """Bi-cross-validation error per gateway and rank 0..kmax (summed over repeats and
    both halves), shape (n_gateways, kmax + 1).

    Held-out rows x held-out features ``H`` predicted from the held-out rows' kept
    features ``K``: ``A_hat = B (C_KK)_k^+ C_KH`` (the regression on the top-k
    principal components of the kept features), from the fit covariance and each
    gateway's held-out scatter only (``S_ho``: shape (n_gateways, d, d)).
    """
    S_ho = np.asarray(S_ho)
    live = np.flatnonzero(np.diag(C_fit) > DEGENERATE_RTOL * np.diag(C_fit).max())
    err = np.zeros((S_ho.shape[0], kmax + 1))
    for _ in range(repeats):
        perm = rng.permutation(live)
        half = perm.size // 2
        for K, H in ((perm[:half], perm[half:]), (perm[half:], perm[:half])):
            w, U = np.linalg.eigh(C_fit[np.ix_(K, K)])
            w, U = w[::-1], U[:, ::-1]
            keep = w > DEGENERATE_RTOL * max(w[0], 1e-300)
            w, U = w[keep], U[:, keep]
            Q = (U.T @ C_fit[np.ix_(K, H)]) / w[:, None]  # (m, |H|)
            QQ = Q @ Q.T
            m = min(kmax, w.size)
            for g, S in enumerate(S_ho):
                P = U.T @ S[np.ix_(K, H)]  # (m, |H|)
                B = U.T @ S[np.ix_(K, K)] @ U  # (m, m)
                lin = np.concatenate([[0.0], np.cumsum((Q * P).sum(1))])
                cum = np.cumsum(np.cumsum(B * QQ, 0), 1)
                quad = np.concatenate([[0.0], np.diag(cum)])
                e = float(np.trace(S[np.ix_(H, H)])) - 2 * lin + quad
                err[g, : m + 1] += e[: m + 1]
                err[g, m + 1 :] += e[m]  # beyond the half's rank: no more components
    return err


def one_se_rank(err):
    """The smallest rank >= 1 whose total error exceeds the minimum's by no more than
    one standard error of the paired difference over gateways (Breiman's 1-SE rule)."""
    tot = err.sum(0)
    kmin = max(int(np.argmin(tot)), 1)
    diff = err - err[:, [kmin]]
    se = np.sqrt(err.shape[0] * diff.var(axis=0, ddof=1)) if err.shape[0] > 1 else 0 * tot
    ok = np.flatnonzero(diff.sum(0)[1:] <= se[1:]) + 1
    return int(ok[0]) if ok.size else kmin


def fa_ll(W, psi, S):
    """Average Gaussian log-likelihood per row of a scatter ``S`` (divided by its row
    count) under the factor model ``W W^T + diag(psi)``."""
    C = W @ W.T + np.diag(psi)
    _, logdet = np.linalg.slogdet(C)
    return float(-0.5 * (S.shape[0] * np.log(2 * np.pi) + logdet + np.trace(np.linalg.solve(C, S))))


def fa_fit_cov(S, k, psi0=None, n_iter=2000, tol=1e-6, small=1e-12):
    """Maximum-likelihood factor analysis of rank ``k`` from a covariance ``S`` (d, d)
    alone (scikit-learn's EM for ``FactorAnalysis``, written on the covariance: the
    server needs only the merged Gram matrix). Returns ``W`` (d, k), ``psi`` (d,) and
    the log-likelihood per row."""
    var = np.diag(S).copy()
    psi = var.copy() if psi0 is None else psi0.copy()
    old = -np.inf
    for it in range(n_iter):
        sp = np.sqrt(psi) + small
        lam, U = np.linalg.eigh(S / np.outer(sp, sp))
        lam, U = lam[::-1], U[:, ::-1]
        W = sp[:, None] * U[:, :k] * np.sqrt(np.maximum(lam[:k] - 1.0, 0.0))
        psi = np.maximum(var - (W**2).sum(1), small)
        if it % 10 == 9:
            ll = fa_ll(W, psi, S)
            if ll - old < tol:
                break
            old = ll
    return W, psi, fa_ll(W, psi, S)


FA_RANKS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 35, 40, 50, 60, 70, 80, 90)


def fa_rank_rules(S_fit, S_ho, n, n_ho, info):
    """Factor-analysis ranks (per-feature noise, so invariant to the scaling): BIC on
    the fit part and the held-out log-likelihood, over ``FA_RANKS``; features constant
    in the fit part are left out."""
    keep = np.flatnonzero(info & (np.diag(S_fit) > 0))
    C, H = S_fit[np.ix_(keep, keep)] / n, S_ho[np.ix_(keep, keep)] / n_ho
    sd = np.sqrt(np.diag(C))
    C, H = C / np.outer(sd, sd), H / np.outer(sd, sd)  # FA is scale-equivariant
    d = keep.size
    bic, ho, psi = {}, {}, None
    for k in FA_RANKS:
        if k >= d - 1:
            break
        W, psi, ll = fa_fit_cov(C, k, psi0=psi)
        n_par = d * k - k * (k - 1) / 2 + d
        bic[k] = -2 * n * ll + n_par * np.log(n)
        ho[k] = fa_ll(W, psi, H)
    return {"fa-bic": min(bic, key=bic.get), "fa-heldout": max(ho, key=ho.get)}


def rank_rules(C_fit, S_ho, n_ho, counts, rng, S_gw):
    """Each label-free rule's rank from the fit covariance (scaled units) and held-out
    scatter; also returns the held-out log-likelihood curve (scaled units)."""
    n = int(sum(counts))
    lam, V = np.linalg.eigh(C_fit)
    lam, V = np.maximum(lam[::-1], 0.0), V[:, ::-1]
    live = lam[lam > DEGENERATE_RTOL * lam[0]]
    p = live.size
    ranks = list(range(1, p))
    ll = heldout_ppca_ll(lam, V, S_ho, n_ho, ranks)
    cum = np.cumsum(live) / live.sum()
    err = bicv_errors(C_fit, S_gw, max(p // 2 - 1, 1), rng)
    out = {
        "gavish-donoho": choose_rank(C_fit * n, counts).rank,
        "minka": min(max(minka_rank(live, n), 1), p - 1),
        "heldout-ppca": max(ll, key=ll.get),
        "bicv": max(int(np.argmin(err.sum(0))), 1),
        "bicv-1se": one_se_rank(err),
        "variance95": int(np.searchsorted(cum, 0.95) + 1),
        "kaiser": int((live > live.mean()).sum()),
    }
    return out, ll


# ------------------------------------------------------------------------- detection
def detection(C_fit, Zfit, sets, ranks):
    """Pooled-PCA residual energy at every rank: ROC AUC per labelled set and the FPR
    at the 95th percentile of the fit rows' scores (contamination 0.05)."""
    _, V = np.linalg.eigh(C_fit)
    V = V[:, ::-1]
    res = {}

    def tails(Z):
        T2 = (Z @ V) ** 2
        return np.cumsum(T2[:, ::-1], axis=1)[:, ::-1]  # [:, r] energy beyond rank r

    tf = tails(Zfit)
    tz = {k: (tails(Z), y) for k, (Z, y) in sets.items()}
    for r in ranks:
        if r >= V.shape[1]:
            continue
        thr = float(np.quantile(tf[:, r], 0.95))
        row = {}
        for k, (t, y) in tz.items():
            row[f"{k}_roc_auc"] = float(roc_auc_score(y, t[:, r]))
            row[f"{k}_fpr"] = float(np.mean(t[y == 0, r] > thr))
        res[r] = row
    return res


def evaluate(fit_blocks, ho_blocks, sets, rng, candidates=CANDIDATES, grid=(5, 10, 20, 30)):
    """Every scaling candidate: its rank rules, its held-out likelihood in original
    units, detection at the ranks involved. ``sets``: {name: (E, y)} encoded rows."""
    mom, S_fit, S_ho, n_ho, S_gw = federated_sums(fit_blocks, ho_blocks)
    counts = [b.shape[0] for b in fit_blocks]
    n = mom.count
    var_fit, var_ho = np.diag(S_fit) / n, np.diag(S_ho) / n_ho
    # constant as in federated_scale: sd <= 1e-12 (1 + |mean|), per feature (the
    # encoded features' units differ by many orders of magnitude)
    tiny = (1e-12 * (1.0 + np.abs(mom.mean))) ** 2
    info = (var_fit > tiny) | (var_ho > tiny)
    Efit = np.vstack(fit_blocks)
    fa = fa_rank_rules(S_fit, S_ho, n, n_ho, info)
    out = {}
    for rule, par in candidates:
        mean, s = federated_scale(mom, rule, par)
        C = S_fit / np.outer(s, s) / n
        Sh = S_ho / np.outer(s, s)
        rules, _ = rank_rules(C, Sh, n_ho, counts, rng, S_gw / np.outer(s, s))
        rules.update(fa)
        # likelihood in original units over the informative features
        Ci, Si = C[np.ix_(info, info)], Sh[np.ix_(info, info)]
        lam, V = np.linalg.eigh(Ci)
        lam, V = np.maximum(lam[::-1], 0.0), V[:, ::-1]
        ll = heldout_ppca_ll(lam, V, Si, n_ho, range(1, int(info.sum())))
        jac = -float(np.log(s[info]).sum())
        ll_orig = {r: v + jac for r, v in ll.items()}
        r_ll = max(ll_orig, key=ll_orig.get)
        Zs = {k: ((E - mean) / s, y) for k, (E, y) in sets.items()}
        ranks = sorted(set(grid) | set(rules.values()) | {r_ll})
        det = detection(C, (Efit - mean) / s, Zs, ranks)
        out[f"{rule}:{par:g}"] = {
            "rank_rules": rules,
            "heldout_ll_orig_best_rank": r_ll,
            "heldout_ll_orig": ll_orig[r_ll],
            "heldout_ll_orig_at": {str(r): ll_orig[r] for r in ranks if r in ll_orig},
            "detection": {str(r): v for r, v in det.items()},
        }
    return out


def summarize(res, grid=(5, 10, 20, 30)):
    """The table: each (scaling rule, rank rule) choice with its test ROC AUC / FPR."""
    key = f"{DEFAULT[0]}:{DEFAULT[1]:g}"
    rows = {}
    d = res[key]
    for rr, r in d["rank_rules"].items():
        rows[f"{key} / {rr}"] = {"rank": r, **d["detection"][str(r)]}
    ll_best = max(res, key=lambda k: res[k]["heldout_ll_orig"])
    e = res[ll_best]
    r = e["heldout_ll_orig_best_rank"]
    rows["heldout-ll scaling / heldout-ll rank"] = {
        "scaling": ll_best,
        "rank": r,
        **e["detection"][str(r)],
    }
    for rr in ("gavish-donoho", "heldout-ppca", "bicv", "bicv-1se", "minka"):
        r = e["rank_rules"][rr]
        rows[f"heldout-ll scaling / {rr}"] = {
            "scaling": ll_best,
            "rank": r,
            **e["detection"][str(r)],
        }
    # labelled references: rank on the default scaling, and (scaling, rank) jointly
    gr = [r for r in grid if str(r) in d["detection"]]
    rv = max(gr, key=lambda r: d["detection"][str(r)]["val_roc_auc"])
    rows[f"{key} / validation rank"] = {"rank": rv, **d["detection"][str(rv)]}
    best = max(
        ((k, r) for k in res for r in grid if str(r) in res[k]["detection"]),
        key=lambda kr: res[kr[0]]["detection"][str(kr[1])]["val_roc_auc"],
    )
    rows["validation scaling+rank"] = {
        "scaling": best[0],
        "rank": best[1],
        **res[best[0]]["detection"][str(best[1])],
    }
    return rows


# ------------------------------------------------------------------------------ data
def real(name, data_dir, max_train_rows, seed=0):
    from fedep.evaluation.reproduce.config import MODES
    from fedep.evaluation.reproduce.run import _best_data

    cfg = json.loads(json.dumps(MODES["full"]))
    sp = _best_data(data_dir, [name], cfg, "generic").split(
        name, "clean", seed, max_train_rows=max_train_rows
    )
    g = np.asarray(sp.groups_train)
    rng = np.random.default_rng(seed)
    ho = rng.uniform(size=len(sp.X_train)) < 0.2
    labs = np.unique(g)
    pipe = FeaturePipeline(scale_rule=None).fit(sp.X_train[~ho], groups=g[~ho])
    E = pipe.encode(sp.X_train)
    fit_blocks = [E[(g == k) & ~ho] for k in labs]
    ho_blocks = [E[(g == k) & ho] for k in labs if ((g == k) & ho).any()]
    sets = {
        "val": (pipe.encode(sp.X_val), np.asarray(sp.y_val)),
        "test": (pipe.encode(sp.X_test), np.asarray(sp.y_test)),
    }
    t0 = time.perf_counter()
    res = evaluate(fit_blocks, ho_blocks, sets, np.random.default_rng(seed))
    return {
        "n_fit": int((~ho).sum()),
        "n_heldout": int(ho.sum()),
        "n_val": len(sp.y_val),
        "n_test": len(sp.y_test),
        "n_features": int(E.shape[1]),
        "seconds_rules": time.perf_counter() - t0,
        "table": summarize(res),
        "by_scaling": res,
    }


def synthetic_case(seed, rank, n_features, noise, hetero):
    from fedep.data import make_federated_data

    D = make_federated_data(
        n_clients=10,
        n_features=n_features,
        n_components=rank,
        n_samples=(150, 400),
        noise=noise,
        # no per-client rotation: the pooled records then have the planted rank
        client_variation=0.0,
        corruption_rate=0.0,
        anomaly_scale=0.4,
        n_test_per_client=100,
        random_state=seed,
    )
    X, Xt, g = D.X_train, D.X_test, D.groups_train
    if hetero:
        rng = np.random.default_rng(1000 + seed)
        # quiet features: tiny noise, no signal; anomalies also leave them
        q = max(n_features // 6, 1)
        Xq = 0.01 * noise * rng.standard_normal((X.shape[0], q))
        Xqt = 0.01 * noise * rng.standard_normal((Xt.shape[0], q))
        # a deviation of 5 of their sds on one quiet feature per anomaly: visible only
        # where the scaling keeps the quiet features' weight
        a = np.flatnonzero(D.y_test == 1)
        Xqt[a, rng.integers(0, q, a.size)] += 5 * 0.01 * noise * rng.choice([-1.0, 1.0], a.size)
        X, Xt = np.hstack([X, Xq]), np.hstack([Xt, Xqt])
        units = 10 ** rng.uniform(-1.5, 1.5, X.shape[1])
        X, Xt = X * units, Xt * units
    rng = np.random.default_rng(seed)
    ho = rng.uniform(size=X.shape[0]) < 0.2
    labs = np.unique(g)
    fit_blocks = [X[(g == k) & ~ho] for k in labs]
    ho_blocks = [X[(g == k) & ho] for k in labs]
    res = evaluate(fit_blocks, ho_blocks, {"test": (Xt, D.y_test)}, rng, grid=(rank,))
    key = f"{DEFAULT[0]}:{DEFAULT[1]:g}"
    ll_best = max(res, key=lambda k: res[k]["heldout_ll_orig"])
    auc = {k: v["detection"][str(rank)]["test_roc_auc"] for k, v in res.items()}
    det = res[key]["detection"]
    by_rule = {k: det[str(v)]["test_roc_auc"] for k, v in res[key]["rank_rules"].items()}
    r_ll = res[ll_best]["heldout_ll_orig_best_rank"]
    by_rule["heldout-ll scaling+rank"] = res[ll_best]["detection"][str(r_ll)]["test_roc_auc"]
    return {
        "test_roc_auc_by_rank_rule": by_rule,
        "rank_errors": {k: v - rank for k, v in res[key]["rank_rules"].items()},
        "heldout_ll_rank_error": res[ll_best]["heldout_ll_orig_best_rank"] - rank,
        "heldout_ll_scaling": ll_best,
        "test_roc_auc_at_planted_rank": auc,
    }


def synthetic(seeds):
    rows = []
    for hetero in (False, True):
        for noise in (0.2, 0.5, 1.0):
            for rank in (3, 10):
                for n_features in (30, 60):
                    for seed in range(seeds):
                        c = synthetic_case(seed, rank, n_features, noise, hetero)
                        c.update(hetero=hetero, noise=noise, rank=rank, n_features=n_features)
                        c["seed"] = seed
                        rows.append(c)
    agg = {}
    for hetero in (False, True):
        sub = [r for r in rows if r["hetero"] == hetero]
        errs = {}
        for r in sub:
            for k, e in r["rank_errors"].items():
                errs.setdefault(k, []).append(e)
            errs.setdefault("heldout-ll (its scaling)", []).append(r["heldout_ll_rank_error"])
        picks = [r["heldout_ll_scaling"] for r in sub]
        agg["hetero" if hetero else "isotropic"] = {
            "rank_error": {
                k: {
                    "exact": float(np.mean(np.asarray(v) == 0)),
                    "within_1": float(np.mean(np.abs(v) <= 1)),
                    "mean_abs": float(np.mean(np.abs(v))),
                }
                for k, v in errs.items()
            },
            "heldout_ll_scaling_picks": {p: picks.count(p) for p in sorted(set(picks))},
            "mean_test_roc_auc_at_planted_rank": {
                k: float(np.mean([r["test_roc_auc_at_planted_rank"][k] for r in sub]))
                for k in sub[0]["test_roc_auc_at_planted_rank"]
            },
            "mean_test_roc_auc_by_rank_rule": {
                k: float(np.mean([r["test_roc_auc_by_rank_rule"][k] for r in sub]))
                for k in sub[0]["test_roc_auc_by_rank_rule"]
            },
            "mean_test_roc_auc_heldout_ll_scaling": float(
                np.mean([r["test_roc_auc_at_planted_rank"][r["heldout_ll_scaling"]] for r in sub])
            ),
        }
        print(json.dumps(agg["hetero" if hetero else "isotropic"]), flush=True)
    return {"summary": agg, "cases": rows}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--datasets", nargs="*", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    ap.add_argument("--max-train-rows", type=int, default=20000, help="0: every row")
    ap.add_argument("--synthetic-seeds", type=int, default=3)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0], help="real-data split seeds")
    ap.add_argument("--out", default="benchmarks/results/labelfree.json")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = {"settings": vars(a)}
    if a.synthetic_seeds:
        res["synthetic"] = synthetic(a.synthetic_seeds)
    res["real"] = {}
    for name in a.datasets:
        cap = a.max_train_rows or None
        runs = {str(sd): real(name, a.data_dir, cap, sd) for sd in a.seeds}
        keys = runs[str(a.seeds[0])]["table"]
        mean = {
            k: {
                m: float(np.mean([r["table"][k][m] for r in runs.values()]))
                for m in ("rank", "val_roc_auc", "test_roc_auc", "test_fpr")
            }
            for k in keys
        }
        res["real"][name] = {"mean_over_seeds": mean, "seeds": runs}
        for k, v in mean.items():
            print(
                f"{name:10s} {k:45s} r={v['rank']:5.1f} val={v['val_roc_auc']:.3f} "
                f"test={v['test_roc_auc']:.3f} fpr={v['test_fpr']:.3f}",
                flush=True,
            )
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
    res["seconds"] = time.perf_counter() - t0
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
