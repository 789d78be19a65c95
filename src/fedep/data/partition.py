"""Splitting training rows among federated clients.

Every partitioner returns an int array ``groups`` of shape ``(n_rows,)`` holding the
client id (``0 .. n_clients-1``) of every row; every row lands in exactly one client and
every client gets at least one row.

* :func:`partition_sorted` -- the paper's non-IID split: rows sorted by one feature
  (e.g. ``dst_bytes``; stable sort, so ties keep row order) and cut into ``n_clients``
  contiguous chunks whose sizes differ by at most one (the first ``n % n_clients``
  chunks are one row larger).
* :func:`partition_dirichlet` -- label skew: for every class, the class's rows are
  shuffled and shared among clients in proportions drawn from ``Dirichlet(concentration)``.
  A client left empty then takes one random row from the client holding the most rows
  (repeated until no client is empty), so every client has at least one row.
* :func:`partition_iid` -- a seeded random permutation cut into near-equal chunks.

:func:`partition_summary` and :func:`format_partition_summary` describe a partition.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "format_partition_summary",
    "partition_dirichlet",
    "partition_iid",
    "partition_sorted",
    "partition_summary",
]


def _check_n_clients(n_clients: int, n_rows: int) -> int:
    if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)):
        raise ValueError(f"n_clients must be an integer; got {n_clients!r}")
    n_clients = int(n_clients)
    if n_clients < 1:
        raise ValueError(f"n_clients must be >= 1; got {n_clients}")
    if n_clients > n_rows:
        raise ValueError(f"n_clients ({n_clients}) must not exceed the number of rows ({n_rows})")
    return n_clients


def _chunks(order: np.ndarray, n_clients: int) -> np.ndarray:
    n = len(order)
    sizes = np.full(n_clients, n // n_clients, dtype=np.int64)
    sizes[: n % n_clients] += 1
    groups = np.empty(n, dtype=np.int64)
    groups[order] = np.repeat(np.arange(n_clients, dtype=np.int64), sizes)
    return groups


def partition_sorted(values: np.ndarray, n_clients: int) -> np.ndarray:
    """Non-IID split by sorting on one feature and cutting contiguous chunks.

    Parameters
    ----------
    values : array-like of shape (n_rows,)
        The sort key (e.g. the ``dst_bytes`` column). Must be finite.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_rows``.

    Returns
    -------
    groups : ndarray of int64, shape (n_rows,)
        Client ``k`` holds the ``k``-th chunk of the stably sorted rows.
    """
    v = np.asarray(values)
    if v.ndim != 1:
        raise ValueError(f"values must be 1-D; got shape {v.shape}")
    n_clients = _check_n_clients(n_clients, len(v))
    if v.dtype.kind in "fiub":
        vf = v.astype(np.float64)
        if not np.isfinite(vf).all():
            raise ValueError("values holds NaN or infinite entries")
        order = np.argsort(vf, kind="stable")
    else:
        order = np.argsort(v, kind="stable")
    return _chunks(order, n_clients)


def partition_iid(n_rows: int, n_clients: int, random_state: int | None = 0) -> np.ndarray:
    """IID split: a seeded random permutation cut into near-equal chunks.

    Parameters
    ----------
    n_rows : int
    n_clients : int
        ``1 <= n_clients <= n_rows``.
    random_state : int or None, default=0

    Returns
    -------
    groups : ndarray of int64, shape (n_rows,)
    """
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 1:
        raise ValueError(f"n_rows must be a positive integer; got {n_rows!r}")
    n_clients = _check_n_clients(n_clients, int(n_rows))
    rng = np.random.default_rng(random_state)
    return _chunks(rng.permutation(int(n_rows)), n_clients)


def partition_dirichlet(
    labels: np.ndarray,
    n_clients: int,
    concentration: float = 0.5,
    random_state: int | None = 0,
) -> np.ndarray:
    """Label-skewed split: per class, client shares drawn from ``Dirichlet(concentration)``.

    Parameters
    ----------
    labels : array-like of shape (n_rows,)
        Class of every row (any hashable values, e.g. attack categories).
    n_clients : int
        ``1 <= n_clients <= n_rows``.
    concentration : float, default=0.5
        Dirichlet concentration (> 0); small values give strongly skewed clients.
    random_state : int or None, default=0

    Returns
    -------
    groups : ndarray of int64, shape (n_rows,)
        Every client holds at least one row (see module docstring).
    """
    lab = np.asarray(labels)
    if lab.ndim != 1:
        raise ValueError(f"labels must be 1-D; got shape {lab.shape}")
    n = len(lab)
    n_clients = _check_n_clients(n_clients, n)
    if not (np.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration must be a positive finite number; got {concentration!r}")
    rng = np.random.default_rng(random_state)
    _, codes = np.unique(lab, return_inverse=True)
    groups = np.empty(n, dtype=np.int64)
    for c in range(codes.max() + 1):
        rows = rng.permutation(np.flatnonzero(codes == c))
        p = rng.dirichlet(np.full(n_clients, float(concentration)))
        counts = rng.multinomial(len(rows), p)
        groups[rows] = np.repeat(np.arange(n_clients, dtype=np.int64), counts)
    sizes = np.bincount(groups, minlength=n_clients)
    for k in np.flatnonzero(sizes == 0):
        donor = int(np.argmax(sizes))
        row = rng.choice(np.flatnonzero(groups == donor))
        groups[row] = k
        sizes[donor] -= 1
        sizes[k] += 1
    return groups


def partition_summary(
    groups: np.ndarray,
    y: np.ndarray | None = None,
    X: np.ndarray | None = None,
    feature_names: list[str] | None = None,
) -> pd.DataFrame:
    """Per-client description of a partition.

    Parameters
    ----------
    groups : ndarray of shape (n_rows,)
    y : ndarray of shape (n_rows,), optional
        0/1 labels: adds ``attack_rows`` and ``attack_share``.
    X : ndarray of shape (n_rows, n_features), optional
        Adds the spread of the client feature means around the global ones, in global
        standard deviations: ``mean_shift`` (mean over features of ``|client mean -
        global mean| / global std``), ``max_shift`` and ``max_shift_feature``.
        Constant features count as shift 0.
    feature_names : list of str, optional
        Names for ``max_shift_feature`` (default ``x<j>``).

    Returns
    -------
    DataFrame
        One row per client (index ``client``), columns ``rows``, ``row_share`` and the
        optional ones above.
    """
    g = np.asarray(groups)
    if g.ndim != 1 or len(g) == 0:
        raise ValueError("groups must be a non-empty 1-D array")
    clients, inv = np.unique(g, return_inverse=True)
    k = len(clients)
    rows = np.bincount(inv, minlength=k)
    df = pd.DataFrame(
        {"rows": rows, "row_share": rows / len(g)}, index=pd.Index(clients, name="client")
    )
    if y is not None:
        yy = np.asarray(y)
        if yy.shape != g.shape:
            raise ValueError(f"y must have shape {g.shape}; got {yy.shape}")
        att = np.bincount(inv, weights=(yy != 0).astype(float), minlength=k)
        df["attack_rows"] = att.astype(np.int64)
        df["attack_share"] = att / rows
    if X is not None:
        Xa = np.asarray(X, dtype=np.float64)
        if Xa.ndim != 2 or Xa.shape[0] != len(g):
            raise ValueError(f"X must have shape ({len(g)}, n_features); got {Xa.shape}")
        d = Xa.shape[1]
        names = feature_names if feature_names is not None else [f"x{j}" for j in range(d)]
        if len(names) != d:
            raise ValueError(f"feature_names has {len(names)} entries for {d} features")
        sums = np.zeros((k, d))
        np.add.at(sums, inv, Xa)
        means = sums / rows[:, None]
        gmean = Xa.mean(axis=0)
        gstd = Xa.std(axis=0)
        safe = np.where(gstd > 1e-12 * (1 + np.abs(gmean)), gstd, np.inf)
        shift = np.abs(means - gmean) / safe
        df["mean_shift"] = shift.mean(axis=1)
        df["max_shift"] = shift.max(axis=1)
        df["max_shift_feature"] = [names[j] for j in shift.argmax(axis=1)]
    return df


def format_partition_summary(df: pd.DataFrame) -> str:
    """Plain-text table of :func:`partition_summary` with a totals line.

    Parameters
    ----------
    df : DataFrame
        Output of :func:`partition_summary`.

    Returns
    -------
    str
    """
    out = df.copy()
    fmt = {
        "row_share": "{:.3f}".format,
        "attack_share": "{:.3f}".format,
        "mean_shift": "{:.3f}".format,
        "max_shift": "{:.3f}".format,
    }
    for c, f in fmt.items():
        if c in out:
            out[c] = out[c].map(f)
    text = out.to_string()
    total = f"{len(df)} clients, {int(df['rows'].sum())} rows"
    total += f", rows per client min {int(df['rows'].min())} / max {int(df['rows'].max())}"
    if "attack_rows" in df:
        total += f", attack share {df['attack_rows'].sum() / df['rows'].sum():.3f}"
    if "mean_shift" in df:
        total += f", mean feature shift {df['mean_shift'].mean():.3f} std"
    return text + "\n" + total
