"""Record trimming: trimmed probabilistic PCA by concentration steps, from counts only.

An attack in unlabelled training traffic is a whole anomalous record. The record-wise
robust model is trimmed probabilistic PCA (the Minimum Covariance Determinant
restricted to the rank-``r`` PPCA covariance): keep the ``h`` records that minimise
``sum_{j in K} d_theta(x_j)^2 + h log det C``. :func:`concentration_steps` descends it
by FAST-MCD's C-steps, alternating a PPCA fit of the kept records with the selection of
the ``h`` records of smallest PPCA distance, until the kept set no longer changes or a
cap on the steps; :func:`trimmed_ppca` is the same loop on pooled records.

Federated, no score or record leaves a gateway: the server finds the ``h``-th smallest
distance from counts only (:class:`ScoreCounts`, :func:`order_statistic`: each
gateway answers how many of its scores lie at or below candidate cuts) and the PPCA
parameters from sums (:func:`ppca_sums`). The loop is written once against
:class:`TrimRecords`, served in process by :class:`LocalRecords` and over Flower by
``fedep.flower.gateways.RemoteRecords``.

``trim_start="median"`` starts from the half of the records closest to the
coordinate-wise median (:func:`coordinate_median`, :func:`median_distance`) and takes
the standardisation from that half. :func:`estimate_contamination` estimates the share
of anomalous records from the log-scores' robust z-scores, from the same counts.

The derivation (monotone descent, why not least trimmed squares, the federated
exchange) and the measured limits of each start are in ``docs/trimming.md``; the
end-to-end measurements in ``docs/robustness.md``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedep.core._linalg import thin_svd
from fedep.core.feedback import exclusion_masks
from fedep.core.scoring import residual_energy
from fedep.core.stats import (
    Moments,
    client_moments,
    combine_moments,
    standardization_from_moments,
    subset_rows,
    subset_sums,
)

__all__ = [
    "ScoreCounts",
    "order_statistic",
    "estimate_contamination",
    "kept_count",
    "ppca_from_sums",
    "ppca_distance",
    "ppca_objective",
    "selection_step",
    "trimmed_ppca",
    "log_scores",
    "MAD_K",
    "coordinate_median",
    "median_distance",
    "keep_mask",
    "order_statistics",
    "RECORD_VALUES",
    "record_values",
    "counted_values",
    "ppca_sums",
    "add_ppca_sums",
    "TrimRecords",
    "LocalRecords",
    "trim_share",
    "median_start",
    "TRIM_STARTS",
    "selection",
    "concentration_steps",
    "describe_trimming",
]

#: Where the concentration steps start (``trim_start``): from every record, or from
#: the records nearest the coordinate-wise median (:func:`median_start`).
TRIM_STARTS = ("all", "median")

#: Robust z-score above which a record counts as contamination (chosen on synthetic
#: data: see ``tests/core/test_trimming.py`` and ``benchmarks/bench_contaminated.py``).
MAD_K = 3.0

_MAD_SCALE = 1.4826  # MAD -> standard deviation of a normal distribution

#: Candidate cuts per column in one count query. Each query is an exchange with every
#: gateway (under Flower a ClientApp start), its size only a few kB: 1024 candidates
#: narrow the bracket 1025-fold per exchange, where 64 took about a third more
#: exchanges to the same cut (measured on NSL-KDD and TON-IoT trimming fits).
N_CANDIDATES = 1024
#: The same for the per-feature searches of the coordinate-wise median, whose queries
#: carry a row of candidates per feature: 256 keeps a query of 200 features at 400 kB
#: (one or two exchanges more than 1024 in the benchmark, a quarter of the bytes).
N_COLUMN_CANDIDATES = 256


def log_scores(scores: np.ndarray) -> np.ndarray:
    """``log`` of non-negative scores, with 0 mapped to the log of the smallest positive
    double (so that the order is kept and the values are finite)."""
    return np.log(np.maximum(np.asarray(scores, dtype=float), np.finfo(float).tiny))


class ScoreCounts:
    """The only questions the server asks gateways about their values: counts.

    Parameters
    ----------
    values : list of ndarray
        Per gateway, either one 1-D array of (log-)scores (N_i,) or a matrix
        (N_i, m) of ``m`` columns searched apart (the coordinate-wise median); stays
        with the gateway.

    Attributes
    ----------
    n : int
        Total number of records (each gateway sends its count).
    lo, hi : float, or ndarray of shape (m,) for columns
        Smallest and largest value (each gateway sends its min and max).
    """

    def __init__(self, values: list[np.ndarray]):
        vals = [np.asarray(v, dtype=float) for v in values]
        self.columns = bool(vals) and all(v.ndim == 2 for v in vals)
        self._values = [np.sort(v if self.columns else v.ravel(), axis=0) for v in vals]
        nonempty = [v for v in self._values if v.shape[0]]
        self.n = int(sum(v.shape[0] for v in self._values))
        if self.columns:
            self.lo = np.min([v[0] for v in nonempty], axis=0) if nonempty else np.zeros(0)
            self.hi = np.max([v[-1] for v in nonempty], axis=0) if nonempty else np.zeros(0)
        else:
            self.lo = float(min(v[0] for v in nonempty)) if nonempty else 0.0
            self.hi = float(max(v[-1] for v in nonempty)) if nonempty else 0.0
        self.n_queries = 0

    def le(self, t) -> np.ndarray:
        """Total count of values ``<= t`` for each candidate cut (summed over gateways).

        ``t`` is 1-D for 1-D values; for columns it is (m, c), row ``j`` the cuts of
        column ``j``, and the counts are (m, c).
        """
        t = np.asarray(t, dtype=float)
        self.n_queries += 1
        if not self.columns:
            t = np.atleast_1d(t)
            return sum(np.searchsorted(v, t, side="right") for v in self._values)
        return sum(
            np.stack([np.searchsorted(v[:, j], t[j], side="right") for j in range(t.shape[0])])
            for v in self._values
        )

    def abs_le(self, t, center: float) -> np.ndarray:
        """Total count of values with ``|v - center| <= t`` for each candidate ``t`` (1-D)."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        self.n_queries += 1
        return sum(
            np.searchsorted(v, center + t, side="right") - np.searchsorted(v, center - t)
            for v in self._values
        )


def order_statistics(
    count_le, k, lo, hi, *, n_candidates=N_CANDIDATES, max_queries=40
) -> np.ndarray:
    """The ``k``-th smallest value (1-based) of each of ``m`` columns held apart, from
    counts only: ``m`` bracket searches in lockstep, one count query for all per step.

    Parameters
    ----------
    count_le : callable
        ``count_le(T)`` with ``T`` of shape (m, c) -> total counts of values ``<=
        T[j, l]`` in column ``j``, shape (m, c).
    k : int or ndarray of int, shape (m,)
        ``1 <= k <= n`` (``k <= 0`` gives ``-inf``).
    lo, hi : float or ndarray of shape (m,)
        Each column's smallest and largest value.
    n_candidates : int
        Candidate cuts per column and query.

    Returns
    -------
    ndarray of shape (m,)
        Per column, a cut ``t`` with ``count_le(t) >= k`` and no value in ``(s_(k-1),
        t)`` other than ``s_(k)``: ``t`` keeps exactly ``k`` values unless ties at
        ``s_(k)`` force more. It is ``s_(k)`` itself or lies between ``s_(k)`` and
        ``s_(k+1)``. Each column's cut is the one its search alone would give.
    """
    lo = np.array(lo, dtype=float).reshape(-1)
    hi = np.array(hi, dtype=float).reshape(-1)
    m = lo.size
    k = np.broadcast_to(np.asarray(k), (m,))
    out = np.full(m, -np.inf)
    active = k > 0
    # The first query also asks for the count at ``lo`` (the smallest value may itself
    # be the k-th, when it is tied): one exchange fewer than asking it apart.
    # Invariant after it (active columns): count_le(lo) < k <= count_le(hi).
    first = True
    for _ in range(max_queries):
        if not first:
            for j in np.flatnonzero(active):
                if np.nextafter(lo[j], np.inf) >= hi[j]:
                    out[j], active[j] = hi[j], False
        if not active.any():
            break
        T = np.repeat(hi[:, None], n_candidates + first, axis=1)  # settled columns: any cut
        for j in np.flatnonzero(active):
            inner = np.linspace(lo[j], hi[j], n_candidates + 2)[1:-1]
            T[j] = np.concatenate([[lo[j]], inner]) if first else inner
        C = count_le(T)
        for j in np.flatnonzero(active):
            t, c = T[j], C[j]
            if first and c[0] >= k[j]:
                out[j], active[j] = lo[j], False
                continue
            exact = np.flatnonzero(c == k[j])
            if exact.size:
                out[j], active[j] = t[exact[0]], False
                continue
            above = np.flatnonzero(c >= k[j])
            below = np.flatnonzero(c < k[j])
            if above.size:
                hi[j] = t[above[0]]
            if below.size:
                lo[j] = t[below[-1]]
        first = False
    out[active] = hi[active]
    return out


def order_statistic(
    count_le, k: int, lo: float, hi: float, *, n_candidates=N_CANDIDATES, max_queries=40
):
    """The ``k``-th smallest value (1-based) of values held apart, from counts only.

    Parameters
    ----------
    count_le : callable
        ``count_le(t)`` -> total count of values ``<= t`` for each entry of ``t``.
    k : int
        ``1 <= k <= n``.
    lo, hi : float
        The smallest and largest value.
    n_candidates : int
        Candidate cuts per query.

    Returns
    -------
    float
        A cut ``t`` with ``count_le(t) >= k`` and no value in ``(s_(k-1), t)`` other
        than ``s_(k)``: ``t`` keeps exactly ``k`` values unless ties at ``s_(k)``
        force more. It is ``s_(k)`` itself or lies between ``s_(k)`` and ``s_(k+1)``
        (:func:`order_statistics` with one column).
    """
    out = order_statistics(
        lambda T: np.asarray(count_le(T[0]))[None],
        k,
        lo,
        hi,
        n_candidates=n_candidates,
        max_queries=max_queries,
    )
    return float(out[0])


def kept_count(n: int, share: float) -> int:
    """``h = n - round(share * n)``: records kept when trimming ``share``."""
    return int(n - round(float(share) * n))


def estimate_contamination(counts: ScoreCounts, k: float = MAD_K) -> float:
    """Share of values above ``median + k * 1.4826 * MAD``, from counts only (<= 0.5).

    ``counts`` should hold log-scores (:func:`log_scores`): residual energies are
    right-skewed, their logarithms far less so.
    """
    n = counts.n
    half = (n + 1) // 2
    med = order_statistic(counts.le, half, counts.lo, counts.hi)
    spread = max(med - counts.lo, counts.hi - med)
    mad = order_statistic(lambda t: counts.abs_le(t, med), half, 0.0, spread)
    cut = med + k * _MAD_SCALE * mad
    above = n - int(counts.le(cut)[0])
    return float(min(above / n, 0.5)) if n else 0.0


def ppca_from_sums(count: int, sum_t2: np.ndarray, sum_res: float, n_features: int):
    """ML PPCA variances for a fixed basis from federated sums over the kept records.

    Parameters
    ----------
    count : int
        Kept records ``h``.
    sum_t2 : ndarray of shape (r,)
        ``sum_j t_jk^2`` (coordinates in the basis, centred at the kept mean).
    sum_res : float
        ``sum_j ||residual_j||^2``.
    n_features : int

    Returns
    -------
    lam : ndarray of shape (r,)
        Variances along the basis (floored at a tiny positive value).
    sigma2 : float
        Residual variance per remaining dimension.
    """
    r = np.asarray(sum_t2).shape[0]
    floor = np.finfo(float).eps
    lam = np.maximum(np.asarray(sum_t2, dtype=float) / count, floor)
    sigma2 = max(float(sum_res) / (count * max(n_features - r, 1)), floor)
    return lam, sigma2


def ppca_distance(X: np.ndarray, mean, B: np.ndarray, lam, sigma2):
    """``d^2`` of each row of ``X`` under the PPCA ``(mean, B, lam, sigma2)``, (N,)."""
    Z = X - mean
    T = Z @ B
    R = Z - T @ B.T
    return (T**2 / lam).sum(axis=1) + np.einsum("ij,ij->i", R, R) / sigma2


def _ppca_fit(X, r):
    """ML PPCA of the rows of ``X``: (mean, basis, lam, sigma2)."""
    mu = X.mean(axis=0)
    _, _, vt = thin_svd(X - mu)
    B = vt[:r].T
    T = (X - mu) @ B
    R = (X - mu) - T @ B.T
    lam, sigma2 = ppca_from_sums(X.shape[0], (T**2).sum(0), float((R**2).sum()), X.shape[1])
    return mu, B, lam, sigma2


def ppca_objective(X: np.ndarray, keep: np.ndarray, theta) -> float:
    """``L(K, theta) = sum_{j in K} d_theta(x_j)^2 + |K| log det C``."""
    mu, B, lam, sigma2 = theta
    n, r = X.shape[1], B.shape[1]
    logdet = float(np.log(lam).sum() + (n - r) * np.log(sigma2))
    return float(ppca_distance(X[keep], mu, B, lam, sigma2).sum() + keep.sum() * logdet)


def selection_step(scores: np.ndarray, h: int) -> np.ndarray:
    """The C-step's selection: a boolean mask of the ``h`` smallest scores (stable ties)."""
    keep = np.zeros(scores.shape[0], dtype=bool)
    keep[np.argsort(scores, kind="stable")[:h]] = True
    return keep


def trimmed_ppca(X: np.ndarray, r: int, h: int, *, keep=None, max_steps=100):
    """Centralised trimmed PPCA by C-steps (the reference of the federated loop).

    Parameters
    ----------
    X : ndarray of shape (N, n)
    r : int
        Rank.
    h : int
        Records kept.
    keep : ndarray of bool, shape (N,), optional
        Initial kept set (default every record: the first fit is plain PCA).

    Returns
    -------
    keep : ndarray of bool, shape (N,)
        Final kept set (``h`` records).
    theta : tuple
        ``(mean, basis, lam, sigma2)`` fitted on ``keep``.
    objective : list of float
        ``L(K_{t+1}, theta_t)`` after each selection step, then ``L`` at the end
        (non-increasing).
    """
    keep = np.ones(X.shape[0], dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    objective = []
    theta = _ppca_fit(X[keep], r)
    for _ in range(max_steps):
        new = selection_step(ppca_distance(X, *theta), h)
        objective.append(ppca_objective(X, new, theta))
        if np.array_equal(new, keep):
            break
        keep = new
        theta = _ppca_fit(X[keep], r)
        objective.append(ppca_objective(X, keep, theta))
    return keep, theta, objective


def coordinate_median(counts) -> np.ndarray:
    """Coordinate-wise median of rows held apart, from counts only.

    Parameters
    ----------
    counts : ScoreCounts (columns) or list of ndarray of shape (N_i, n)
        Count queries over each feature (:class:`ScoreCounts` of the gateways'
        records, or a remote equivalent); a list of record blocks is wrapped.

    Returns
    -------
    ndarray of shape (n,)
        Per feature, a value ``t`` with exactly ``ceil(N/2)`` values ``<= t`` unless
        ties force more: the lower median ``s_(ceil(N/2))`` or a point between it and
        the next value (:func:`order_statistics`, every feature in one search).
    """
    if isinstance(counts, list):
        counts = ScoreCounts(counts)
    return order_statistics(
        counts.le, (counts.n + 1) // 2, counts.lo, counts.hi, n_candidates=N_COLUMN_CANDIDATES
    )


def median_distance(X: np.ndarray, median: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``a(x) = sum_f |x_f - m_f| / s_f`` of each row of ``X``, shape (N,)."""
    return (np.abs(X - median) / scale).sum(axis=1)


def keep_mask(values: np.ndarray, cut: float, min_rows: int) -> np.ndarray:
    """One gateway's rows whose value is at or below the global ``cut``, or, when that
    leaves fewer than ``min_rows``, its ``min_rows`` smallest (so that it can still
    fit); boolean, shape (N_i,)."""
    k = values <= cut
    if k.sum() < min_rows:
        k = np.zeros_like(k)
        k[np.argsort(values, kind="stable")[:min_rows]] = True
    return k


# ---------------------------------------------------------------- the federated loop
#: What a gateway computes of each of its records for the trimming queries, given the
#: standardisation and the parameters the server sends (:func:`record_values`):
#: ``coords`` the standardised record (n,), ``median`` its L1 distance to ``median``,
#: ``residual`` its residual energy in ``V``, ``ppca`` its PPCA distance
#: ``(V, lam, sigma2)``.
RECORD_VALUES = ("coords", "median", "residual", "ppca")
_LOGGED = ("residual", "ppca")  # counted as logarithms: right-skewed


def record_values(kind: str, Z: np.ndarray, params: dict) -> np.ndarray:
    """One gateway's values of ``kind`` (:data:`RECORD_VALUES`) for its standardised
    records ``Z`` (N_i, n): (N_i, n) for ``coords``, else (N_i,)."""
    if kind == "coords":
        return Z
    if kind == "median":
        return median_distance(Z, params["median"], 1.0)
    V = params["V"]
    res = residual_energy(Z, V)
    if kind == "residual":
        return res
    if kind == "ppca":
        T = Z @ V
        sigma2 = float(np.reshape(params["sigma2"], -1)[0])  # a float, or (1,) off the wire
        return (T**2 / params["lam"]).sum(axis=1) + res / sigma2
    raise ValueError(f"unknown record values {kind!r}; expected one of {RECORD_VALUES}")


def counted_values(kind: str, values: np.ndarray) -> np.ndarray:
    """What the count queries see of ``values``: log-scores for the right-skewed
    kinds (the same order), the values themselves otherwise."""
    return log_scores(values) if kind in _LOGGED else values


def ppca_sums(Z: np.ndarray, V: np.ndarray, keep: np.ndarray | None):
    """One gateway's sums for the PPCA variances (:func:`ppca_from_sums`): its kept
    count, ``sum_j t_jk^2`` (r,) and ``sum_j ||residual_j||^2`` over its kept rows."""
    if keep is not None:
        Z = Z[keep]
    T = Z @ V
    return int(Z.shape[0]), (T**2).sum(axis=0), float(residual_energy(Z, V).sum())


class TrimRecords(Protocol):
    """The gateways as the trimming loop sees them: their records stay with them.

    Every method takes the standardisation ``mean``, ``scale`` (n,) the gateways
    apply to their records, and ``params`` for :func:`record_values`. In-process:
    :class:`LocalRecords`; over Flower, messages to the gateways
    (``fedep.flower.gateways.RemoteRecords``).
    """

    def counts(self, kind: str, mean, scale, params: dict, subset: str = "train"):
        """Count queries (``n``, ``lo``, ``hi``, ``le``, ``abs_le`` of
        :class:`ScoreCounts`) over the counted values of ``kind`` of every record of
        ``subset`` (:data:`SUBSETS`; a gateway without a reference has none)."""

    def sums(self, subset: str, mean, scale):
        """The gateways' :func:`subset_sums` of their standardised records of
        ``subset``, summed in gateway order: ``(count, sum, gram)``."""

    def exclude(self, mean, scale, params: dict) -> tuple[int, int]:
        """Each gateway drops from every later fit its records near its confirmed
        attacks (:func:`fedep.core.feedback.near_attacks` with ``params`` ``V``,
        ``lam``, ``sigma2``, ``radius``); returns the attack labels and the records
        excluded, summed."""

    def cut(self, kind: str, mean, scale, params: dict, cut: float, min_rows: int):
        """Each gateway keeps its records whose counted value is at or below ``cut``
        (:func:`keep_mask`); returns ``(n_kept, kept_sum, changed)``: the records kept,
        the sum of their values, and whether any gateway's kept set changed."""

    def kept_moments(self) -> list[Moments]:
        """Each gateway's moments of its kept records (unstandardised)."""

    def ppca_sums(self, mean, scale, V):
        """The gateways' :func:`ppca_sums`, summed in gateway order."""


class LocalRecords:
    """:class:`TrimRecords` over blocks held in this process (``fit``).

    Parameters
    ----------
    blocks : list of ndarray of shape (N_i, n)
        The gateways' records, unstandardised.
    reference : list of ndarray of shape (M_i, n), optional
        Each gateway's trusted records (M_i may be 0), unstandardised.
    attack, benign : list of ndarray of bool, shape (N_i,), optional
        Each gateway's records an analyst confirmed as attacks / as false positives
        (never trimmed nor excluded).

    Attributes
    ----------
    keep : list of ndarray of bool, shape (N_i,), or None
        The kept records (None: every record).
    excluded : list of ndarray of bool, shape (N_i,), or None
        The records :meth:`exclude` dropped from every fit (never kept).
    """

    def __init__(self, blocks: list[np.ndarray], reference=None, attack=None, benign=None):
        self.blocks = blocks
        n = blocks[0].shape[1] if blocks else 0
        self.reference = reference or [np.empty((0, n)) for _ in blocks]
        self.attack, self.benign = attack, benign
        self.keep: list[np.ndarray] | None = None
        self.excluded: list[np.ndarray] | None = None
        self.has_reference, self.has_feedback = any(map(len, self.reference)), attack is not None
        self._std = None

    def standardized(self, mean, scale) -> list[np.ndarray]:
        """The blocks standardised by ``(mean, scale)`` (kept for the next call)."""
        if self._std is not None and all(
            np.array_equal(a, b) for a, b in zip(self._std[:2], (mean, scale), strict=True)
        ):
            return self._std[2]
        if not (np.any(mean) or np.any(scale != 1.0)):
            Z = self.blocks  # (b - 0) / 1 == b: no standardised copy of the records
        else:
            Z = [(b - mean) / scale for b in self.blocks]
        self._std = (np.array(mean), np.array(scale), Z)
        return Z

    def kept(self, Z: list[np.ndarray]) -> list[np.ndarray]:
        """The kept rows of each block of ``Z``."""
        return Z if self.keep is None else [z[k] for z, k in zip(Z, self.keep, strict=True)]

    def _subset(self, subset, mean, scale) -> list[np.ndarray]:
        if subset == "train":
            return self.standardized(mean, scale)
        return [(subset_rows(R, subset) - mean) / scale for R in self.reference]

    def counts(self, kind, mean, scale, params, subset="train"):
        Z = self._subset(subset, mean, scale)
        return ScoreCounts([counted_values(kind, record_values(kind, z, params)) for z in Z])

    def sums(self, subset, mean, scale):
        parts = [subset_sums(z) for z in self._subset(subset, mean, scale)]
        return tuple(sum(p[i] for p in parts) for i in range(3))

    def exclude(self, mean, scale, params):
        Z = self.standardized(mean, scale)
        if self.attack is None or not any(a.any() for a in self.attack):
            return 0, 0
        self.excluded = exclusion_masks(Z, self.attack, self.benign, params)
        attack = self.attack
        self.keep = [~e for e in self.excluded]
        return int(sum(a.sum() for a in attack)), int(sum(e.sum() for e in self.excluded))

    def cut(self, kind, mean, scale, params, cut, min_rows):
        values = [record_values(kind, z, params) for z in self.standardized(mean, scale)]
        counted = [counted_values(kind, v) for v in values]
        if self.excluded is not None:
            counted = [np.where(e, np.inf, c) for c, e in zip(counted, self.excluded, strict=True)]
        if self.benign is not None:
            counted = [np.where(b, -np.inf, c) for c, b in zip(counted, self.benign, strict=True)]
        new = [keep_mask(c, cut, min_rows) for c in counted]
        old = self.keep
        changed = old is None or not all(map(np.array_equal, new, old))
        self.keep = new
        kept = np.concatenate([v[k] for v, k in zip(values, new, strict=True)])
        return int(kept.size), float(kept.sum()), changed

    def kept_moments(self):
        return [client_moments(b) for b in self.kept(self.blocks)]

    def ppca_sums(self, mean, scale, V):
        Z = self.standardized(mean, scale)
        keep = self.keep or [None] * len(Z)
        return add_ppca_sums(ppca_sums(z, V, k) for z, k in zip(Z, keep, strict=True))


def add_ppca_sums(parts):
    """The gateways' :func:`ppca_sums`, summed in order (the in-process sums' order)."""
    count, sum_t2, sum_res = 0, 0, 0
    for c, t2, res in parts:
        count, sum_t2, sum_res = count + c, sum_t2 + t2, sum_res + res
    return count, sum_t2, sum_res


def trim_share(records: TrimRecords, mean, scale, V, share, contamination) -> float:
    """The share trimmed at a selection step: ``share`` (``trim_share``), else
    ``contamination``, estimated (:func:`estimate_contamination`) for ``"auto"`` from
    the count queries over the log residual energies in ``V``."""
    if share is not None:
        return float(share)
    if contamination == "auto":
        return estimate_contamination(records.counts("residual", mean, scale, {"V": V}))
    return float(contamination)


def median_start(records: TrimRecords, mean, scale, min_rows: int) -> None:
    """The robust start ``K_0``: each gateway keeps its records at or below the global
    ``ceil(N/2)``-th smallest L1 distance to the coordinate-wise median (both from
    counts only), in the units ``scale``."""
    med = coordinate_median(records.counts("coords", mean, scale, {}))
    params = {"median": med}
    c = records.counts("median", mean, scale, params)
    cut = order_statistic(c.le, c.n - c.n // 2, c.lo, c.hi)
    records.cut("median", mean, scale, params, cut, min_rows)


def selection(
    records: TrimRecords,
    mean,
    scale,
    V,
    share,
    contamination,
    min_rows: int,
    estimate=None,
    model=None,
):
    """The C-step's selection from sums and counts only (see the module docstring).

    Each gateway sends its kept count, per-component sums of squared coordinates in
    ``V`` (n, r) and its kept residual energy: the server forms the PPCA variances.
    Each gateway computes the PPCA distance of every record; the share to trim is
    :func:`trim_share` of ``share`` and ``contamination``; the server finds from counts
    of log-distances the cut keeping ``h = N - round(share N)`` records; each gateway
    keeps its records at or below it, and at least ``min_rows`` of its own.

    Returns
    -------
    record : dict
        ``share`` trimmed, ``n_kept`` and ``objective`` (the trimmed PPCA objective
        ``L(K_new, theta)`` at this fit).
    changed : bool
        Whether any gateway's kept set changed.
    """
    if model is None:
        lam, sigma2 = ppca_from_sums(*records.ppca_sums(mean, scale, V), V.shape[0])
    else:  # the variances of a model fitted elsewhere (the reference start)
        lam, sigma2 = model
    params = {"V": V, "lam": lam, "sigma2": sigma2}
    if estimate is not None and share is None and contamination == "auto":
        share = float(estimate(mean, scale, params))  # the reference's estimate
    share = trim_share(records, mean, scale, V, share, contamination)
    c = records.counts("ppca", mean, scale, params)
    cut = order_statistic(c.le, kept_count(c.n, share), c.lo, c.hi)
    n_kept, kept_sum, changed = records.cut("ppca", mean, scale, params, cut, min_rows)
    logdet = float(np.log(lam).sum() + (V.shape[0] - V.shape[1]) * np.log(sigma2))
    record = {"share": share, "n_kept": n_kept, "objective": float(kept_sum + n_kept * logdet)}
    return record, changed


def concentration_steps(
    records: TrimRecords,
    fit,
    mean,
    scale,
    *,
    steps: int,
    start: str,
    share,
    contamination,
    min_rows: int,
    rescale: bool,
    start_model=None,
    estimate=None,
    kept: bool = False,
):
    """The federated trimming loop, in-process or over Flower (the one driver).

    Parameters
    ----------
    records : TrimRecords
    fit : callable
        ``fit(mean, scale, V, same)`` fits the model on the kept records standardised
        by ``(mean, scale)``, given the previous consensus ``V`` (None: the first fit)
        and ``same``, whether the kept records are those of the previous fit (the
        estimators start from ``V`` only then or with ``init="random"``); returns the
        consensus ``V`` (n, r, orthonormal) and whatever the caller needs of the fit.
    mean, scale : ndarray of shape (n,)
        The standardisation of every record.
    steps : int
        ``trim_steps``; 0 is one fit (on the start selection with ``start_model``).
    start : {"all", "median", "reference"}
        ``"reference"``: the first selection is made under ``start_model``.
    share, contamination
        ``trim_share`` and ``contamination``: the share trimmed at a step
        (:func:`trim_share`).
    min_rows : int
        Records each gateway keeps at least.
    rescale : bool
        With ``start="median"``: take the scale from the start set.
    start_model : tuple, optional
        ``(mean, V, lam, sigma2, share)``: a PPCA of the trusted reference, in the
        units ``scale``; with ``start="reference"`` ``K_0`` is the selection under it
        trimming ``share``.
    estimate : callable, optional
        ``estimate(mean, scale, params)`` -> the share to trim for ``"auto"``.
    kept : bool
        Whether the records already hold a kept set (feedback's exclusions).

    Returns
    -------
    mean, scale : ndarray of shape (n,)
        The final standardisation.
    V, fitted
        What the last ``fit`` returned.
    history : list of dict
        One record per selection step (:func:`selection`), with ``changed``: whether
        any gateway's kept set changed at that step (:func:`describe_trimming`).
    """
    history: list[dict] = []
    if steps and start == "median":
        median_start(records, mean, scale, min_rows)
        kept = True
        # Standardise with the moments of the start set: attacks inflate the standard
        # deviations (most of all of features constant in normal traffic) before any
        # PCA is fitted; so do they a feature pipeline's own centring and scaling,
        # fitted on every record, which is why this applies after one too (the
        # records are then the pipeline's outputs). Fixed from here on.
        mean, start_scale, _ = standardization_from_moments(combine_moments(records.kept_moments()))
        if rescale:
            scale = start_scale
    elif start == "reference" and start_model is not None:  # steps=0: one fit on it
        ref_mean, ref_V, lam, sigma2, ref_share = start_model
        record, _ = selection(
            records, ref_mean, scale, ref_V, ref_share, contamination, min_rows, None, (lam, sigma2)
        )
        record.update(changed=True, start="reference")
        history.append(record)
        kept = True
    V = fitted = None
    same = False  # whether the kept records are those of the previous fit
    for step in range(steps + 1):
        if kept:
            # The location is fitted on the kept records (part of the trimmed
            # objective); the units (scale) stay fixed (those of every record, or of
            # the robust start set), so that the objective of successive steps is
            # comparable and the C-steps descend.
            mean = combine_moments(records.kept_moments()).mean
        V, fitted = fit(mean, scale, V, same)
        if step == steps:
            break
        record, changed = selection(
            records, mean, scale, V, share, contamination, min_rows, estimate
        )
        record["changed"] = bool(changed)
        history.append(record)
        # A share of 0 ("auto") after the fit on every record keeps every record again.
        same = not changed or (not kept and record["share"] == 0.0)
        if kept and not changed:
            break
        kept = True
    return mean, scale, V, fitted, history


def describe_trimming(history: list[dict], n_records: int | None = None) -> str:
    """One line on a record trimming run from its history (:func:`concentration_steps`):
    the selection steps, the share trimmed, the records kept and why it stopped.

    The loop stops when the kept set no longer changes (a fixed point of the C-steps)
    or after ``trim_steps`` selections; a last step that still changed the kept set
    means the step cap ended it.
    """
    if not history:
        return "record trimming: off (trim_steps=0)"
    shares = [100.0 * float(h["share"]) for h in history]
    if max(shares) - min(shares) < 0.05:
        trimmed = f"{shares[-1]:.1f} % trimmed at each"
    else:
        trimmed = "trimmed " + " -> ".join(f"{v:.1f}" for v in shares) + " %"
    last = history[-1]
    stop = (
        "at the step cap (trim_steps) with the kept set still changing"
        if last.get("changed", False)
        else "the kept set stopped changing"
    )
    n = len(history)
    of = f" of {n_records}" if n_records is not None else ""
    return (
        f"record trimming: {n} selection step{'s' if n != 1 else ''}, {trimmed}; kept "
        f"{int(last['n_kept'])}{of} records; stopped: {stop}"
    )
