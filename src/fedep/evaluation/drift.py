"""How far a model moved from another: the drift between two models of a lineage.

:func:`model_diff` compares two fitted detectors of the same features (typically a model
and its warm-started child, ``fedep models diff A B``):

- the global bases: their principal angles (from the singular values of ``A^T B``, the
  cosines) and the projector distance ``||P_A - P_B||_F / sqrt(2)`` (the 2-norm of the
  sines; 0 for the same subspace, ``sqrt(r)`` for orthogonal ones), with its share
  ``/ sqrt(r)`` (the root mean square sine, in [0, 1]);
- the threshold: ``threshold_`` of each and the change (the same units when the child
  kept its parent's standardisation, as a warm start does);
- per gateway in both, how far its personalised basis moved (the same two measures on
  ``W_i``); gateways only in ``B`` are new, only in ``A`` gone.

- per gateway in both models with their consensus duals (``client_duals_``), its
  **pull**: the Frobenius norm of its dual ``Pi_i``, the Lagrange multiplier of ``W_i
  = V``, i.e. how hard its data pulls the consensus towards its own subspace (at a
  fixed point, the gradient of its reconstruction error), and its ratio B / A.

A gateway is **named as moved** (:func:`moved_gateways`) when, against the others,

- its basis moved far: its root mean square sine exceeds :data:`MOVED_FLOOR` and the
  robust outlier cut of the gateways' moves, ``median + 3 x 1.4826 x MAD``; or
- its pull changed far: its log pull ratio is more than ``max(log 2, 3 x 1.4826 x
  MAD)`` from the gateways' median log ratio.

The second rule is the one that sees most drifts: FedEP's personalised bases stay
within ``sqrt(tol)`` of the consensus (its stopping test), so when one gateway's data
rotates, every ``W_i`` follows the consensus alike, while that gateway's dual, the force
with which it pulls, grows (measured on a seeded synthetic federation with one gateway
rotated: its pull x7.8, the others' x0.8 to x2.0). With every gateway drifting alike,
none stands out and the global distance says so.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MOVED_FLOOR", "model_diff", "moved_gateways", "principal_angles", "subspace_move"]

#: Smallest root mean square sine of the principal angles for which a gateway's move
#: counts (0.1: about 6 degrees per direction), whatever the others did.
MOVED_FLOOR = 0.1


def principal_angles(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Principal angles (radians, increasing) between the spans of ``A`` (n, p) and
    ``B`` (n, q), orthonormal columns: ``arccos`` of the singular values of ``A^T B``
    (``min(p, q)`` of them)."""
    s = np.linalg.svd(A.T @ B, compute_uv=False)
    return np.sort(np.arccos(np.clip(s, -1.0, 1.0)))


def subspace_move(A: np.ndarray, B: np.ndarray) -> dict:
    """The distance between the spans of ``A`` and ``B`` (n, r; orthonormal columns):
    ``projector_distance`` ``||A A^T - B B^T||_F / sqrt(2)``, ``rms_sine`` (that over
    ``sqrt(max rank)``), ``max_angle_deg`` and the ``angles_deg``."""
    PA, PB = A @ A.T, B @ B.T
    dist = float(np.linalg.norm(PA - PB) / np.sqrt(2.0))
    angles = np.degrees(principal_angles(A, B))
    return {
        "projector_distance": dist,
        "rms_sine": dist / np.sqrt(max(A.shape[1], B.shape[1])),
        "max_angle_deg": float(angles.max()) if angles.size else 0.0,
        "angles_deg": [float(a) for a in angles],
    }


def moved_gateways(moves: dict, pulls: dict | None = None, floor: float = MOVED_FLOOR) -> list:
    """The gateways that moved far (see the module docstring), in the order of
    ``moves``.

    Parameters
    ----------
    moves : dict
        Label -> root mean square sine of its basis move: named above ``floor`` and
        above ``median + 3 x 1.4826 x MAD`` of all the moves (the MAD floored at 1 % of
        the median, so that equal moves do not make every slightly larger one an
        outlier).
    pulls : dict, optional
        Label -> its pull ratio B / A (> 0): named when its log is more than
        ``max(log 2, 3 x 1.4826 x MAD)`` from the median log ratio.
    """
    named = set()
    if moves:
        v = np.array(list(moves.values()), dtype=float)
        med = float(np.median(v))
        mad = max(float(np.median(np.abs(v - med))), 0.01 * med)
        cut = max(floor, med + 3.0 * 1.4826 * mad)
        named |= {g for g, m in moves.items() if m > cut}
    if pulls:
        lr = np.log(np.array(list(pulls.values()), dtype=float))
        med = float(np.median(lr))
        cut = max(np.log(2.0), 3.0 * 1.4826 * float(np.median(np.abs(lr - med))))
        named |= {g for g, x in zip(pulls, lr, strict=True) if abs(x - med) > cut}
    return [g for g in moves if g in named]


def _names(det) -> list[str] | None:
    names = getattr(det, "feature_names_out_", None)
    return None if names is None else [str(c) for c in names]


def model_diff(a, b) -> dict:
    """The drift from model ``a`` to model ``b`` (fitted detectors of the same features).

    Returns
    -------
    dict
        ``global`` (:func:`subspace_move` of the global bases), ``threshold``
        (``a``, ``b``, ``change``), ``gateways`` (label -> :func:`subspace_move` of its
        personalised bases, for the gateways of both), ``new`` and ``gone`` gateways,
        ``moved`` (:func:`moved_gateways`), ``rule`` (the rule, in words) and
        ``lineage`` (``a_id``, ``b_parent``, ``b_is_child``: ``b`` names ``a`` as its
        parent).

    Raises
    ------
    ValueError
        One line, when the models' features differ.
    """
    na, nb = a.components_.shape[1], b.components_.shape[1]
    if na != nb or _names(a) != _names(b):
        raise ValueError(
            f"the models have different features ({na} and {nb}"
            + (", named differently" if na == nb else "")
            + "): their bases cannot be compared"
        )
    ga, gb = a.components_.T, b.components_.T
    out: dict = {"global": subspace_move(ga, gb)}
    out["global"]["rank"] = [int(ga.shape[1]), int(gb.shape[1])]
    ta, tb = float(a.threshold_), float(b.threshold_)
    out["threshold"] = {"a": ta, "b": tb, "change": tb - ta}
    la = [str(c) for c in np.asarray(a.clients_).tolist()]
    lb = [str(c) for c in np.asarray(b.clients_).tolist()]
    da, db = getattr(a, "client_duals_", None), getattr(b, "client_duals_", None)
    per, pulls = {}, {}
    for i, lab in enumerate(la):
        if lab in lb:
            j = lb.index(lab)
            per[lab] = subspace_move(a.client_components_[i].T, b.client_components_[j].T)
            if da is not None and db is not None:
                pa, pb = float(np.linalg.norm(da[i])), float(np.linalg.norm(db[j]))
                per[lab].update(pull_a=pa, pull_b=pb)
                if pa > 0 and pb > 0:
                    per[lab]["pull_ratio"] = pulls[lab] = pb / pa
    out["gateways"] = per
    out["new"] = [g for g in lb if g not in la]
    out["gone"] = [g for g in la if g not in lb]
    out["moved"] = moved_gateways({g: m["rms_sine"] for g, m in per.items()}, pulls)
    out["rule"] = (
        f"moved: its basis's rms sine > {MOVED_FLOOR} and > median + 3 x 1.4826 x MAD of "
        "the gateways', or its pull ratio's log beyond max(log 2, 3 x 1.4826 x MAD) from "
        "their median"
    )
    lin_a = getattr(a, "lineage_", None) or {}
    lin_b = getattr(b, "lineage_", None) or {}
    out["lineage"] = {
        "a_id": lin_a.get("id"),
        "b_id": lin_b.get("id"),
        "b_parent": lin_b.get("parent"),
        "b_is_child": bool(lin_a.get("id")) and lin_b.get("parent") == lin_a.get("id"),
    }
    return out
