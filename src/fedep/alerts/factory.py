"""Alerts from a fitted model: one JSON-ready record per anomalous flow record.

:class:`AlertFactory` scores a block of records with the model's own pipeline
(:func:`fedep.alerts.scoring.score_block`, as ``fedep score`` does) and makes an alert
for each record whose score is above its threshold::

    {"event": "alert", "ts": 1732744578.25, "uid": "C1x...", "id.orig_h": "10.0.0.5",
     "id.orig_p": 51234, "id.resp_h": "10.0.0.9", "id.resp_p": 23, "proto": "tcp",
     "service": null, "score": 41.3, "threshold": 2.07, "probability": 1.0,
     "top_features": [{"feature": "resp_bytes", "share": 0.81}, ...],
     "gateway": "gw3", "model": {"id": "fedep-3fa9c2d81b04", "digest": "3fa9c2..."},
     "log": {"file": "conn.log", "line": 1207}}

The identifying fields (:data:`~fedep.alerts.fields.ID_FIELDS`) are those the input
has, in that order, with their values as read (a missing value is ``null``). ``share``
is the feature's part of the record's residual energy (the score): the shares of all
features sum to 1, those of the top ``k`` to at most 1. An alert holds no wall-clock
time: the same records scored by the same model give the same alerts, whether by
``fedep score`` or ``fedep watch``. With ``ecs=True`` the same content is written under
Elastic Common Schema names (:func:`fedep.alerts.ecs.to_ecs`).

A model's id and digest: a model file stores no id. :func:`model_identity` takes the
file's integrity digest (SHA-256 of its whole content, the value a signature signs,
checked when the file was loaded: ``det.file_sha256_``) and derives the id from it:
``<class>-<first 12 hex digits>`` (``fedep-3fa9c2d81b04``), the same for the same file
wherever it is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fedep.alerts.ecs import to_ecs
from fedep.alerts.fields import ID_FIELDS, PORT_FIELDS, json_column
from fedep.alerts.scoring import feature_shares, score_block_rules
from fedep.data.errors import DataError, bad_value_error
from fedep.detectors.columns import (
    client_ids,
    numeric_matrix,
    output_feature_names,
    used_columns,
)
from fedep.detectors.suppression import describe_rule
from fedep.features import FeatureError

__all__ = ["AlertFactory", "Batch", "model_identity"]


def model_identity(det) -> tuple[str, str]:
    """The id and digest that name a loaded model in its alerts.

    Parameters
    ----------
    det : BaseFederatedDetector
        A detector loaded from a model file (``fedep.load``), which sets
        ``file_sha256_``.

    Returns
    -------
    model_id : str
        ``<class name, lower case>-<first 12 hex digits of the digest>``.
    model_digest : str
        The file's verified integrity digest (64 hex digits).

    Raises
    ------
    ValueError
        If ``det`` was not loaded from a model file (no digest: save it first).
    """
    digest = getattr(det, "file_sha256_", None)
    if not isinstance(digest, str) or not digest:
        raise ValueError(
            f"this {type(det).__name__} was not loaded from a model file, so it has no "
            "digest: save it (fedep.save) and load it, or pass model_id and model_digest"
        )
    return f"{type(det).__name__.lower()}-{digest[:12]}", digest


def _finite_list(a: np.ndarray) -> list:
    """``a.tolist()`` with None for NaN or infinity (JSON has neither): a score that
    overflows (an extreme value) is flagged and written as null."""
    out = a.tolist()
    bad = ~np.isfinite(a)
    if bad.any():
        if a.ndim == 1:
            for i in np.flatnonzero(bad).tolist():
                out[i] = None
        else:
            for i, j in zip(*np.nonzero(bad), strict=True):
                out[int(i)][int(j)] = None
    return out


@dataclass
class Batch:
    """What :meth:`AlertFactory.score` made of one block of records.

    Attributes
    ----------
    n_records : int
    scores : ndarray of float64, shape (n_records,)
        Residual energy of each record.
    flagged : ndarray of bool, shape (n_records,)
        Score above the record's threshold.
    alerts : list of dict
        JSON-ready, one per flagged record, in record order.
    thresholds : ndarray of float64, shape (n_records,) or None
        The threshold each record was compared with.
    model : dict or None
        ``{"id", "digest"}`` of the model that scored the block.
    gateways : ndarray of str, shape (n_records,) or None
        Each record's gateway when a client column names it (else the block's
        ``gateway`` holds for every record).
    records : list of dict or None
        With ``score(..., all_records=True)``: one record per input record, in order:
        the alerts, and for the others the same fields with ``"event": "score"``
        (``"suppressed"`` for a suppressed alert).
    suppressed : list of dict
        One per record above its threshold whose alert a benign mode learned from
        analyst feedback suppressed (``detectors.suppression``), in record order: the
        alert's fields with ``"event": "suppressed"`` and ``suppressed_by`` naming
        the rule, for audit.
    audit : list of dict
        The alerts and the suppressed alerts, in record order.
    """

    n_records: int
    scores: np.ndarray
    flagged: np.ndarray
    alerts: list[dict]
    thresholds: np.ndarray | None = None
    model: dict | None = None
    gateways: np.ndarray | None = field(default=None, repr=False)
    records: list[dict] | None = field(default=None, repr=False)
    suppressed: list[dict] = field(default_factory=list, repr=False)
    audit: list[dict] = field(default_factory=list, repr=False)


class AlertFactory:
    """Scores blocks of flow records and makes an alert of each anomalous one.

    Parameters
    ----------
    det : BaseFederatedDetector
        A fitted detector (with a feature pipeline: it reads columns by name).
    model_id, model_digest : str
        What names the model in every alert (:func:`model_identity`).
    top_k : int, default 3
        Features named in each alert, largest share first (0: none).
    ecs : bool, default False
        Write alerts and events under Elastic Common Schema names.
    threshold : float, optional
        One threshold for every record. Default: the model's own (a known gateway's
        personalised threshold, else ``threshold_``), as ``fedep score`` flags.
    client_column : str, optional
        A column naming each record's gateway (its personalised basis and threshold
        when the model knows it); overrides the ``gateway`` given to :meth:`score`.

    Attributes
    ----------
    needed_columns : list of str
        Raw columns the model reads (and ``client_column``).
    passthrough_columns : list of str
        :data:`~fedep.alerts.fields.ID_FIELDS`: read along when the input has them.
    model : dict
        ``{"id": model_id, "digest": model_digest}``.
    """

    def __init__(
        self,
        det,
        *,
        model_id: str,
        model_digest: str,
        top_k: int = 3,
        ecs: bool = False,
        threshold: float | None = None,
        client_column: str | None = None,
    ) -> None:
        if not hasattr(det, "components_"):
            raise ValueError(f"{type(det).__name__} is not fitted")
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0, not {top_k!r}")
        self.det = det
        self.names = output_feature_names(det)
        self.top_k = min(int(top_k), len(self.names))
        self.ecs = bool(ecs)
        self.client_column = client_column
        self.model = {"id": str(model_id), "digest": str(model_digest)}
        self._pipeline = getattr(det, "features_", None) is not None
        self._inputs = used_columns(det)
        self.needed_columns = list(self._inputs)
        if client_column is not None and client_column not in self.needed_columns:
            self.needed_columns.append(client_column)
        self.passthrough_columns = list(ID_FIELDS)
        self._threshold: float | None = None
        if threshold is not None:
            self.threshold = threshold

    # ------------------------------------------------------------------ threshold
    @property
    def threshold(self) -> float:
        """The threshold every record is compared with when one is set (``threshold=``
        or :meth:`recalibrate`); else the model's ``threshold_`` (a known gateway's
        records: its own threshold)."""
        return float(self.det.threshold_) if self._threshold is None else self._threshold

    @threshold.setter
    def threshold(self, value: float | None) -> None:
        if value is None:
            self._threshold = None
            return
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"threshold must be a finite number, not {value!r}")
        self._threshold = v

    def row_thresholds(self, groups: np.ndarray | None, n: int) -> np.ndarray:
        """The threshold of each of ``n`` records, shape (n,)."""
        if self._threshold is not None:
            return np.full(n, self._threshold)
        return np.asarray(self.det.row_thresholds(groups, n), dtype=np.float64)

    def recalibrate(self, recent_scores: np.ndarray, target_rate: float) -> dict:
        """Set one threshold for every record: the ``1 - target_rate`` quantile of
        recent scores (no refit), and say so.

        Parameters
        ----------
        recent_scores : array-like of shape (n,)
            Recent records' scores (:attr:`Batch.scores`); non-finite ones are ignored.
        target_rate : float
            The share of records to flag, in (0, 1).

        Returns
        -------
        dict
            The event to write into the alert stream: ``{"event": "threshold_changed",
            "old", "new", "n_scores", "target_rate", "share_above_old", "model"}``
            (``share_above_old``: the share of the recent scores above the old
            threshold); under ECS names with ``ecs=True``.
        """
        s = np.asarray(recent_scores, dtype=np.float64).ravel()
        s = s[np.isfinite(s)]
        if s.size == 0:
            raise ValueError("recalibration needs at least one finite recent score")
        rate = float(target_rate)
        if not 0.0 < rate < 1.0:
            raise ValueError(f"target_rate must be in (0, 1), not {target_rate!r}")
        old = self.threshold
        new = float(np.quantile(s, 1.0 - rate))
        self._threshold = new
        event = {
            "event": "threshold_changed",
            "old": old,
            "new": new,
            "n_scores": int(s.size),
            "target_rate": rate,
            "share_above_old": float(np.mean(s > old)),
            "model": dict(self.model),
        }
        return to_ecs(event) if self.ecs else event

    # ------------------------------------------------------------------ scoring
    def _gateways(self, frame: pd.DataFrame, gateway, source, gateways) -> np.ndarray | None:
        if gateways is not None:
            g = np.asarray(gateways).astype(str)
            if g.shape != (len(frame),):
                raise ValueError(f"gateways must hold one id per record ({len(frame)})")
            return g
        col = self.client_column
        if col is not None:
            if col not in frame.columns:
                raise DataError(source, f"client column {col!r} is not a column", column=col)
            # each distinct id's text once (a block holds few gateways): stripped, "" when
            # missing, as fedep score reads a client column
            codes, uniques = pd.factorize(frame[col], use_na_sentinel=True)
            text = np.array([str(u).strip() for u in uniques.tolist()] + [""], dtype=str)
            return text[codes]  # code -1 (missing): the last entry
        if gateway is None:
            return None
        return np.full(len(frame), str(gateway))

    def _features(self, frame: pd.DataFrame, first: int, source, where: str):
        """The model's input: the frame with its index as the rows' numbers (the
        pipeline names a bad value's row by it), or the numeric matrix."""
        if self._pipeline:
            return frame.set_axis(range(first, first + len(frame)))
        missing = [c for c in self._inputs if c not in frame.columns]
        if missing:
            raise DataError(source, f"lacks the model's column {missing[0]!r}", column=missing[0])
        return numeric_matrix(frame, self._inputs, source, first=first, where=where)

    def score(
        self,
        frame: pd.DataFrame,
        *,
        gateway: str | None,
        source: str,
        first_line: int,
        where: str = "line",
        offsets: np.ndarray | None = None,
        gateways: np.ndarray | None = None,
        all_records: bool = False,
    ) -> Batch:
        """Score every record of ``frame``; an alert for each above its threshold.

        Parameters
        ----------
        frame : DataFrame of n records
            The :attr:`needed_columns` (any order, extra columns ignored) and whichever
            :attr:`passthrough_columns` the input has.
        gateway : str or None
            The gateway the records come from (its personalised basis and threshold
            when the model knows it); ignored with ``client_column``.
        source : str
            The file, for the alerts' ``log.file`` and errors.
        first_line : int
            Number of the first record (its line in ``source``; see ``where``).
        where : {"line", "row"}, default "line"
            Whether ``first_line`` counts file lines or data rows (formats without
            lines); the alerts' ``log`` key.
        offsets : array-like of int, shape (n,), optional
            Byte offset of each record's line in ``source``: ``log.offset``.
        gateways : array-like of str, shape (n,), optional
            Each record's gateway as read (overrides ``gateway`` and the
            ``client_column``'s values).
        all_records : bool, default False
            Also make a record of every record (:attr:`Batch.records`).

        Returns
        -------
        Batch

        Raises
        ------
        fedep.data.DataError
            One line naming ``source``, the record's line (or row) and the column of a
            value the model cannot read.
        """
        if where not in ("line", "row"):
            raise ValueError(f"where must be 'line' or 'row', not {where!r}")
        n = len(frame)
        gws = self._gateways(frame, gateway, source, gateways)
        if n == 0:
            empty = np.empty(0)
            none = [] if all_records else None
            return Batch(0, empty, np.zeros(0, bool), [], empty, dict(self.model), gws, none)
        groups = None if gws is None else client_ids(gws, self.det)
        X = self._features(frame, int(first_line), source, where)
        thr = self.row_thresholds(groups, n)
        try:
            scores, flags, probs, idx, vals, rules = score_block_rules(
                self.det, X, groups, self._inputs, self.top_k, thr
            )
        except FeatureError as exc:
            if not isinstance(exc.row, int | np.integer) or exc.row < 0:
                raise DataError(source, str(exc)) from None
            raise bad_value_error(exc, source, **{where: int(exc.row)}) from None
        flagged = flags.astype(bool)
        held = rules >= 0
        rows = np.arange(n) if all_records else np.flatnonzero(flagged | held)
        log = (source, int(first_line), where, offsets)
        made = self._records(frame, rows, flagged, scores, thr, probs, idx, vals, gws, log)
        for i in np.flatnonzero(held[rows]).tolist():
            made[i]["event"] = "suppressed"
            made[i]["suppressed_by"] = describe_rule(self.det, int(rules[rows[i]]))
        if self.ecs:
            made = [to_ecs(a) for a in made]
        alerts = [m for m, f in zip(made, flagged[rows].tolist(), strict=True) if f]
        quiet = [m for m, h in zip(made, held[rows].tolist(), strict=True) if h]
        audit = [m for m, a in zip(made, (flagged | held)[rows].tolist(), strict=True) if a]
        return Batch(
            n, scores, flagged, alerts, thr, dict(self.model), gws,
            made if all_records else None, quiet, audit,
        )  # fmt: skip

    def _records(self, frame, rows, flagged, scores, thr, probs, idx, vals, gws, log) -> list[dict]:
        """The records of ``rows``: an alert where flagged, else ``"event": "score"``;
        ``log``: (source, first number, "line" or "row", byte offsets or None)."""
        if rows.size == 0:
            return []
        sub = frame if rows.size == len(frame) else frame.iloc[rows]
        cols = [c for c in ID_FIELDS if c in frame.columns and c != self.client_column]
        values = [json_column(sub[c], c in PORT_FIELDS) for c in cols]
        score_l = _finite_list(scores[rows])
        thr_l = _finite_list(thr[rows])
        prob_l = _finite_list(probs[rows])
        tops: list[list[dict]] = [[] for _ in range(rows.size)]
        if self.top_k > 0:
            shares = _finite_list(feature_shares(vals[rows], scores[rows]))
            names = self.names
            tops = [
                [{"feature": names[j], "share": sh} for j, sh in zip(ix, row, strict=True)]
                for ix, row in zip(idx[rows].tolist(), shares, strict=True)
            ]
        gw_l = [None] * rows.size if gws is None else gws[rows].tolist()
        model = self.model
        events = np.where(flagged[rows], "alert", "score").tolist()
        source, first, where, offsets = log
        source = str(source)
        numbers = (rows + first).tolist()
        off = None if offsets is None else np.asarray(offsets)[rows].tolist()
        out = []
        for j in range(rows.size):
            a: dict = {"event": events[j]}
            for c, v in zip(cols, values, strict=True):
                a[c] = v[j]
            a["score"] = score_l[j]
            a["threshold"] = thr_l[j]
            a["probability"] = prob_l[j]
            a["top_features"] = tops[j]
            a["gateway"] = gw_l[j]
            a["model"] = dict(model)
            a["log"] = {"file": source, where: numbers[j]}
            if off is not None:
                a["log"]["offset"] = int(off[j])
            out.append(a)
        return out
