"""Rows and their clients, as the detectors take them: client ids checked once, and
scoring in row blocks of bounded memory."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import numpy as np

from fedep.core.scoring import residual_energies, residual_energy

#: Most bytes of one block of model coordinates while scoring (see
#: :meth:`fedep.detectors.base.BaseFederatedDetector.scoring_block_rows`).
SCORING_BLOCK_BYTES = 32 * 2**20


def _id_kind(g) -> str:
    if isinstance(g, str | bytes):
        return "text"
    if isinstance(g, numbers.Number):
        return "number"
    return "missing" if g is None else type(g).__name__


def check_groups(groups, n: int) -> np.ndarray:
    """One client id per row of X, as a 1-D array without NaN/inf.

    Parameters
    ----------
    groups : array-like of shape (n,)
    n : int
        Rows of X.

    Returns
    -------
    ndarray of shape (n,)

    Raises
    ------
    ValueError
        One line: a wrong shape, NaN/inf ids, or ids of mixed kinds.
    """
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n:
        raise ValueError(
            f"groups must be 1-D with one client id per row of X ({n} rows); "
            f"got shape {groups.shape}"
        )
    if groups.dtype.kind == "f" and not np.isfinite(groups).all():
        raise ValueError("groups holds NaN or inf client ids")
    if groups.dtype.kind == "O":
        kinds = sorted({_id_kind(g) for g in groups.tolist()})
        if len(kinds) > 1:  # 1 and "1" would be two clients that cannot be sorted
            raise ValueError(f"groups mixes client ids of kinds {', '.join(kinds)}: use one")
    return groups


def block_rows(n_features: int) -> int:
    """Rows of a block of ``n_features`` float64 model coordinates within
    :data:`SCORING_BLOCK_BYTES` (at least 1)."""
    return max(1, SCORING_BLOCK_BYTES // (8 * max(int(n_features), 1)))


def apply_in_blocks(X, groups, step: int, apply_block: Callable) -> np.ndarray:
    """``apply_block(rows, groups_of_rows)`` over ``X`` in blocks of ``step`` rows.

    Parameters
    ----------
    X : array-like or DataFrame of shape (n_samples, ...)
    groups : array-like of shape (n_samples,) or None
    step : int
        Rows per block.
    apply_block : callable
        Returns an array whose first axis is the block's rows.

    Returns
    -------
    ndarray
        The blocks' results, concatenated in row order.
    """
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    if n <= step:
        return apply_block(X, groups)
    if not hasattr(X, "iloc"):
        X = np.asarray(X)
    if groups is not None:
        groups = check_groups(groups, n)
    parts = []
    for a in range(0, n, step):
        rows = X.iloc[a : a + step] if hasattr(X, "iloc") else X[a : a + step]
        g = None if groups is None else groups[a : a + step]
        parts.append(apply_block(rows, g))
    return np.concatenate(parts)


def client_thresholds(
    blocks: list[np.ndarray],
    client_components: np.ndarray,
    levels: list[float],
    global_scores: list[np.ndarray] | None = None,
    components: np.ndarray | None = None,
    own_scores: list[np.ndarray] | None = None,
) -> np.ndarray:
    """Each client's threshold: the ``levels[i]`` quantile of the residual energies of
    its block under its own basis.

    Parameters
    ----------
    blocks : list of ndarray of shape (N_i, n_features)
        Each client's standardised records.
    client_components : ndarray of shape (n_clients, n_components, n_features)
    levels : list of float
    global_scores : list of ndarray of shape (N_i,), optional
        Each block's residual energies under ``components`` (n_components,
        n_features), already computed: reused for a client whose basis equals the
        global one (pooled PCA, a single client), where they are the same numbers.
    own_scores : list of ndarray of shape (N_i,), optional
        Each block's residual energies under its client's basis, already computed
        (:func:`training_scores`).

    Returns
    -------
    ndarray of shape (n_clients,)
    """
    out = np.empty(len(blocks))
    for i, b in enumerate(blocks):
        if own_scores is not None:
            scores = own_scores[i]
        elif global_scores is not None and np.array_equal(client_components[i], components):
            scores = global_scores[i]
        else:
            scores = residual_energy(b, client_components[i].T)
        out[i] = np.quantile(scores, levels[i])
    return out


def training_scores(
    blocks: list[np.ndarray], components: np.ndarray, client_components: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each block's residual energies under the global basis and under its client's
    own, in one pass over its records (:func:`fedep.core.scoring.residual_energies`);
    a client whose basis is the global one gets the same array twice.

    Parameters
    ----------
    blocks : list of ndarray of shape (N_i, n_features)
    components : ndarray of shape (n_components, n_features)
    client_components : ndarray of shape (n_clients, n_components, n_features)

    Returns
    -------
    global_scores, own_scores : list of ndarray of shape (N_i,)
    """
    glob, own = [], []
    for b, W in zip(blocks, client_components, strict=True):
        same = np.array_equal(W, components)
        scores = residual_energies(b, (components.T,) if same else (components.T, W.T))
        glob.append(scores[0])
        own.append(scores[-1])
    return glob, own
