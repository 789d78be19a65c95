"""The fit's use of what operators know: a trusted reference and analyst feedback.

Called by the one fit driver (:func:`fedep.detectors.driver.fit_gateways`) around
record trimming, over any transport (:class:`~fedep.core.trimming.TrimRecords`: count
and sum queries; no reference record, score or label leaves its gateway):

1. :func:`plan`, before the concentration steps: the gateways' confirmed attacks and
   the records near them leave the fit (:meth:`TrimRecords.exclude`, in the PPCA of
   the reference, else of every record); a PPCA of each half of the reference scores
   the training records and the other half, which shows whether the training records
   exceed the reference's tails by more than twice the noise
   (:func:`fedep.core.reference.contamination_evidence`). With
   ``contamination="auto"``, when contamination is shown or the reference holds at
   least ``SELECT_MIN_REFERENCE`` records, the fit keeps the training records at or
   below the reference's own ``SELECT_LEVEL`` quantile under a PPCA of the whole
   reference and is fitted once on them (no concentration steps). With ``trim_steps``
   given, the first selection is made under the first half's PPCA (every training
   record above the other half's ``1 - TRIM_TAIL`` quantile);
2. :func:`share_estimator`: with ``trim_steps`` given, each later selection trims every
   training record above the whole reference's ``1 - TRIM_TAIL`` quantile under the
   current fit (:func:`tail_share`);
3. :func:`finish`, after the fit: the share estimated under the final model
   (:func:`fedep.core.reference.estimate_share`) and the threshold at
   ``reference_fpr`` of the reference's scores.

Without a reference the fit is unchanged, and says so (``contamination_reason_``).
Records that declare ``has_reference`` / ``has_feedback`` False (the gateways said so at
the first contact) are asked no reference or feedback query: a fit without either costs
no exchange more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedep.core.feedback import FEEDBACK_RADIUS
from fedep.core.reference import (
    contamination_evidence,
    estimate_share,
    ppca_from_gram,
    reference_threshold,
)
from fedep.core.trimming import ppca_from_sums
from fedep.data.feedback import FEEDBACK_LABELS

__all__ = [
    "SELECT_LEVEL",
    "SELECT_MIN_REFERENCE",
    "TRIM_TAIL",
    "FEEDBACK_LABELS",
    "Trust",
    "plan",
    "share_estimator",
    "tail_share",
    "finish",
    "describe",
    "feedback_masks",
    "trusted_blocks",
]

#: The start of the concentration steps a trusted reference gives (``trim_history_``).
REFERENCE_START = "reference"
#: With ``trim_steps`` given (the user's steps, ``contamination="auto"``), a selection
#: step trims every training record above the reference's ``1 - TRIM_TAIL``
#: quantile under the current fit (:func:`tail_share`): about ``TRIM_TAIL`` of the
#: normal records, and the attacks the fit puts beyond the reference's tail, however
#: many. Chosen on the training split (attacks injected from it, the reference drawn
#: from its normal rows; see docs/reference.md): at 20 % attacks, a tail of 0.05 kept
#: 37-81 % of them, 0.1 5-81 %, 0.2 0-44 % (NSL-KDD, UNSW-NB15, TON-IoT).
TRIM_TAIL = 0.2
#: With ``contamination="auto"`` and contamination shown, the fit keeps the training
#: records at or below the reference's own ``SELECT_LEVEL`` quantile (in sample) under
#: a PPCA of the whole reference, and is fitted once on them (no concentration steps:
#: later steps under the contaminated fit let attacks back in). Chosen on the training
#: split (attacks injected from it, validated on other training rows; levels 0.85 /
#: 0.9 / 0.95 / 1; docs/reference.md).
SELECT_LEVEL = 0.9
#: From this many reference records on, the selection is made whether or not the
#: evidence shows contamination (the evidence misses half the 5-10 % cases on UNSW-NB15
#: and NSL-KDD); below it, only when shown: a PPCA of fewer records misses modes of
#: normal traffic and the selection then costs clean training up to 0.04 ROC AUC.
#: Chosen on the training split between the two sizes measured (50 and 100 records).
SELECT_MIN_REFERENCE = 80
_BOTH = ("train", "reference")


@dataclass
class Trust:
    """What the reference and the feedback decided before the concentration steps.

    Attributes
    ----------
    n_reference : int
        Trusted records over every gateway (0: none).
    steps : int
        Concentration steps to run.
    start : str
        Where they start (``trim_start``, or ``"reference"``).
    start_model : tuple or None
        ``(mean, V, lam, sigma2, share)`` of the reference's PPCA, in raw units, and
        the share its selection trims.
    start_estimate : ShareEstimate or None
        The share under the PPCA of one half of the reference (the other half held).
    evidence : Evidence or None
        Whether the training records exceed the reference's tails
        (:func:`fedep.core.reference.contamination_evidence`): switches trimming on.
    decision : str
        One line: whether and how much trimming, and why.
    feedback : dict or None
        ``attack_labels`` and ``excluded`` records (summed over the gateways).
    estimates : list of ShareEstimate
        The estimates of the later selection steps (:func:`share_estimator`).
    """

    n_reference: int
    steps: int
    start: str
    start_model: tuple | None = None
    start_estimate: object = None
    evidence: object = None
    decision: str = ""
    feedback: dict | None = None
    estimates: list = field(default_factory=list)


def _raw_model(theta, std):
    """A PPCA fitted on standardised records -> its mean in raw units."""
    mean, V, lam, sigma2 = theta
    return std.mean + mean * std.scale, V, lam, sigma2


def _params(theta) -> dict:
    return {"V": theta[1], "lam": theta[2], "sigma2": theta[3]}


def plan(est, records, std) -> Trust:
    """The reference's and the feedback's decisions before record trimming.

    Parameters
    ----------
    est : BaseFederatedDetector
        Its ``n_components_``, ``contamination``, ``trim_steps``, ``trim_share`` and
        ``trim_start``.
    records : TrimRecords
    std : Standardization
        The standardisation of every record.
    """
    r = int(est.n_components_)
    mean, scale = std.mean, std.scale
    trust = Trust(n_reference=0, steps=int(est.trim_steps), start=est.trim_start)
    has_ref = getattr(records, "has_reference", True)
    if not (has_ref or getattr(records, "has_feedback", True)):
        return trust  # no query: nothing the gateways know
    n_ref, total, gram = records.sums("reference", mean, scale) if has_ref else (0, 0, 0)
    n_ref = trust.n_reference = int(n_ref)
    ref_theta = ppca_from_gram(n_ref, total, gram, r) if n_ref > r + 1 else None
    # feedback: attacks and the records near them, in the reference's PPCA when there
    # is one (attacks cannot have steered it), else in that of every record
    if getattr(records, "has_feedback", True):
        theta = ref_theta or ppca_from_gram(*records.sums("train", mean, scale), r)
        raw = _raw_model(theta, std)
        n_labels, n_excluded = records.exclude(
            raw[0], scale, {**_params(raw), "radius": FEEDBACK_RADIUS}
        )
        if n_labels:
            trust.feedback = {"attack_labels": int(n_labels), "excluded": int(n_excluded)}
    if ref_theta is None:
        if n_ref:
            trust.decision = (
                f"{n_ref} reference records: too few for a rank-{r} model (need > {r + 1})"
            )
        return trust
    auto = est.contamination == "auto" and est.trim_share is None
    halves = _reference_halves(records, std, r) if auto else None
    if halves is not None:
        pairs = [
            (records.counts("ppca", *m), records.counts("ppca", *m, held)) for m, held in halves
        ]
        trust.evidence = contamination_evidence(pairs)
        trust.start_estimate = estimate_share(*pairs[0])
    ev = trust.evidence
    if auto and trust.steps == 0:
        said = ev.describe() if ev is not None else f"halves too small for a rank-{r} test"
        if not (ev is not None and ev.detected) and n_ref < SELECT_MIN_REFERENCE:
            trust.decision = f"no trimming: {said}"
            return trust
        why = (
            said
            if ev is not None and ev.detected
            else f"{n_ref} reference records (>= {SELECT_MIN_REFERENCE}) select whether or "
            f"not contamination is shown ({said})"
        )
        # one selection under the PPCA of the whole reference, then one fit: every
        # training record above the reference's own SELECT_LEVEL quantile leaves it
        model = _raw_model(ref_theta, std)
        counted = [records.counts("ppca", model[0], scale, _params(model), s) for s in _BOTH]
        share = tail_share(*counted, tail=1.0 - SELECT_LEVEL)
        trust.start, trust.start_model = REFERENCE_START, (*model, share)
        trust.decision = (
            f"trimming on: {why}; one fit on the training records at or below "
            f"the reference's {100 * SELECT_LEVEL:.0f} % quantile under a PPCA of the "
            f"{n_ref} reference records ({100 * share:.1f} % trimmed)"
        )
        return trust
    if trust.steps:
        if auto and halves is not None:
            # the first selection: under the PPCA of one half of the reference, every
            # training record above the other half's 1 - TRIM_TAIL quantile
            (m_mean, m_scale, m_params), held = halves[0]
            share = tail_share(records.counts("ppca", m_mean, m_scale, m_params), pairs[0][1])
            model = (m_mean, m_params["V"], m_params["lam"], m_params["sigma2"])
            what = f"a PPCA of half the {n_ref} reference records"
        else:
            share, model = _given_share(est), _raw_model(ref_theta, std)
            what = f"a PPCA of the {n_ref} reference records"
        trust.start = REFERENCE_START
        trust.start_model = (*model, share)
        trust.decision = (trust.decision + "; " if trust.decision else "") + (
            f"started from {what}, trimming {100 * share:.1f} %"
        )
    return trust


def _reference_halves(records, std, r: int):
    """The PPCA of each half of the reference (from its sums) paired with the subset
    of the other half, ``[((mean, scale, params), held_subset), ...]`` in raw units; None
    when a half is too small for a rank-``r`` model."""
    out = []
    for fit, held in (("reference-fit", "reference-held"), ("reference-held", "reference-fit")):
        n_fit, t_fit, g_fit = records.sums(fit, std.mean, std.scale)
        if n_fit <= r + 1:
            return None
        raw = _raw_model(ppca_from_gram(int(n_fit), t_fit, g_fit, r), std)
        out.append(((raw[0], std.scale, _params(raw)), held))
    return out


def tail_share(train, reference, tail: float = TRIM_TAIL) -> float:
    """The share of training records above the reference's ``1 - tail`` quantile: the
    share a selection step trims (every record the model puts beyond the reference's
    own tail), from counts only."""
    return float(estimate_share(train, reference, level=1.0 - tail).training_exceedance)


def _given_share(est) -> float:
    if est.trim_share is not None:
        return float(est.trim_share)
    return float(est.contamination) if est.contamination != "auto" else 0.0


def share_estimator(records, trust: Trust):
    """``estimate(mean, scale, params)`` for the later selection steps: the share of
    training records above the whole reference's ``1 - TRIM_TAIL`` quantile under the
    current fit (:func:`tail_share`), or None without a reference start."""
    if trust.start_model is None or trust.evidence is None:
        return None

    def estimate(mean, scale, params):
        train = records.counts("ppca", mean, scale, params)
        ref = records.counts("ppca", mean, scale, params, "reference")
        trust.estimates.append(estimate_share(train, ref))
        return tail_share(train, ref)

    return estimate


def finish(est, records, trust: Trust, mean, scale, V) -> dict | None:
    """After the fit: the final share estimate and the reference threshold.

    Returns
    -------
    dict or None
        None without a reference; else ``threshold`` (a score: ``reference_fpr`` of
        the reference records score above it), ``share`` and ``share_reason``
        (None when the share was not estimated), ``n_reference``, ``decision`` and
        ``feedback``.
    """
    if trust.n_reference == 0:
        return None
    out = {
        "n_reference": trust.n_reference,
        "decision": trust.decision,
        "feedback": trust.feedback,
        "share": None,
        "share_reason": None,
    }
    cut = reference_threshold(
        records.counts("residual", mean, scale, {"V": V}, "reference"), float(est.reference_fpr)
    )
    out["threshold"] = float(math.exp(cut))
    if est.contamination == "auto":
        lam, sigma2 = ppca_from_sums(*records.ppca_sums(mean, scale, V), V.shape[0])
        p = {"V": V, "lam": lam, "sigma2": sigma2}
        e = estimate_share(
            records.counts("ppca", mean, scale, p),
            records.counts("ppca", mean, scale, p, "reference"),
        )
        out["share"] = e.share
        out["share_reason"] = e.describe()
        out["estimate"] = e.as_dict()
    return out


def describe(trust: dict | None, contamination) -> str:
    """One line on how ``contamination_`` was obtained (``contamination_reason_``)."""
    if contamination != "auto":
        return f"contamination={contamination} given"
    if trust is None or trust.get("share") is None:
        return (
            "estimated without a reference from the training scores alone (robust z-score "
            "of the log-scores above 3): unreliable when attacks are frequent and tight; "
            "give a trusted reference for an estimate that is"
        )
    return str(trust["share_reason"])


def feedback_masks(feedback, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``benign`` and ``attack`` masks (n,) of per-row feedback: ``"benign"``,
    ``"attack"``, or ``""`` / None / NaN for an unlabelled row (one line naming the
    first bad row otherwise)."""
    fb = np.asarray(feedback, dtype=object)
    if fb.shape != (n,):
        raise ValueError(f"feedback must hold one label per row of X ({n}); got shape {fb.shape}")
    text = np.array(
        [
            "" if v is None or (isinstance(v, float) and v != v) else str(v).strip().lower()
            for v in fb
        ]
    )
    bad = np.flatnonzero(~np.isin(text, ["", *FEEDBACK_LABELS]))
    if bad.size:
        j = int(bad[0])
        raise ValueError(
            f"feedback row {j}: label {fb[j]!r} is not one of {', '.join(FEEDBACK_LABELS)} "
            "(or empty for an unlabelled row)"
        )
    return text == "benign", text == "attack"


def _per_block(mask: np.ndarray, order: np.ndarray, blocks) -> list[np.ndarray]:
    """A per-row mask of the training rows, split as ``blocks`` (rows ``order``)."""
    m = mask[order]
    ends = np.cumsum([b.shape[0] for b in blocks])
    return [m[e - b.shape[0] : e] for b, e in zip(blocks, ends, strict=True)]


def trusted_blocks(
    blocks, order, labels, *, reference=None, reference_groups=None, feedback=None, transform=None
):
    """Each gateway's reference records and confirmed attacks, from ``fit``'s arguments.

    Parameters
    ----------
    blocks : list of ndarray of shape (N_i, n)
        The gateways' training records (model features).
    order : ndarray of shape (N,)
        Row ``order[i]`` of the training data is the i-th of the concatenated blocks.
    labels : ndarray
        The gateways' ids, in block order.
    reference : array-like, optional
        A boolean mask (N,) of trusted training rows, or trusted records of their own
        (M, n_features), or a DataFrame with the training columns.
    reference_groups : array-like of shape (M,), optional
        The gateway of each trusted record (default: the only gateway).
    feedback : array-like of shape (N,), optional
        Per training row: ``"benign"``, ``"attack"`` or empty.
    transform : callable, optional
        Turns trusted records into model features (the feature pipeline's).

    Returns
    -------
    reference : list of ndarray of shape (M_i, n)
    attack, benign : list of ndarray of bool, shape (N_i,), or None
        The confirmed attacks and false positives per gateway.
    report : dict
        ``benign_labels`` (rows protected from trimming), ``attack_labels``.
    """
    n_rows = int(sum(b.shape[0] for b in blocks))
    n_feat = blocks[0].shape[1]
    ref = [np.empty((0, n_feat)) for _ in blocks]
    mask = np.zeros(n_rows, dtype=bool)
    if reference is not None:
        arr = reference if hasattr(reference, "columns") else np.asarray(reference)
        if not hasattr(arr, "columns") and arr.ndim == 1:
            if arr.shape != (n_rows,) or arr.dtype.kind != "b":
                raise ValueError(
                    f"reference: a 1-D reference must be a boolean mask of the {n_rows} "
                    f"training rows; got shape {arr.shape} and type {arr.dtype}"
                )
            mask |= arr
        else:
            R = np.asarray(transform(arr) if transform is not None else arr, dtype=float)
            if R.ndim != 2 or R.shape[1] != n_feat:
                raise ValueError(f"reference: records of shape {R.shape}, not (M, {n_feat})")
            if not np.isfinite(R).all():
                raise ValueError("reference: records hold NaN or inf")
            if reference_groups is None:
                if len(blocks) != 1:
                    raise ValueError(
                        "reference: give reference_groups (the gateway of each record)"
                    )
                g = np.zeros(R.shape[0], dtype=int)
            else:
                rg = np.asarray(reference_groups)
                if rg.shape != (R.shape[0],):
                    raise ValueError(f"reference_groups: shape {rg.shape}, not ({R.shape[0]},)")
                g = np.searchsorted(labels, rg).clip(0, len(labels) - 1)
                unknown = np.flatnonzero(np.asarray(labels)[g] != rg)
                if unknown.size:
                    raise ValueError(
                        f"reference_groups: gateway {rg[unknown[0]].tolist()!r} (reference row "
                        f"{int(unknown[0])}) has no training records"
                    )
            ref = [R[g == i] for i in range(len(blocks))]
    report = {"benign_labels": 0, "attack_labels": 0}
    attack = benign_blocks = None
    if feedback is not None:
        benign, att = feedback_masks(feedback, n_rows)
        report = {"benign_labels": int(benign.sum()), "attack_labels": int(att.sum())}
        attack = _per_block(att, order, blocks)
        benign_blocks = _per_block(benign, order, blocks)
    if mask.any():
        ref = [
            np.concatenate([r, b[m]])
            for r, b, m in zip(ref, blocks, _per_block(mask, order, blocks), strict=True)
        ]
    return ref, attack, benign_blocks, report
