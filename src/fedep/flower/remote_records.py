"""Record trimming's view of the gateways over Flower: count and sum queries only.

:class:`RemoteRecords` is :class:`~fedep.core.trimming.TrimRecords` over messages
(``query.trim``): the server sends the standardisation, the model's parameters and
candidate cuts, and gets counts and sums back, of the training records or of a
gateway's trusted reference (``subset``); :class:`RemoteCounts` is one count search.
Every reply is checked against what was asked (:mod:`fedep.flower.checks`).
"""

from __future__ import annotations

import json

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict

from fedep.core.benign import GUARD_STEPS, MODE_SUMS
from fedep.core.stats import Moments
from fedep.core.trimming import add_ppca_sums
from fedep.flower.checks import check_subset_sums, read_count
from fedep.flower.messages import arrays_of, to_array_record
from fedep.flower.transport import Roster, ask

__all__ = ["RemoteCounts", "RemoteRecords", "moments_of"]


def moments_of(rep: Message) -> Moments:
    a = arrays_of(rep.content["moments"])
    return Moments(int(rep.content["count"]["count"]), a["mean"], a["m2"])


class RemoteCounts:
    """:class:`~fedep.core.trimming.ScoreCounts` over the gateways: each query is one
    ``query.trim`` exchange, each gateway answering with the counts of its own values.
    """

    def __init__(
        self, records: RemoteRecords, kind: str, std: dict, params: dict, subset: str = "train"
    ):
        self.records, self.kind, self.std, self.params = records, kind, std, params
        self.columns = kind == "coords"
        self.cfg = {} if subset == "train" else {"subset": subset}

        def range_of(rep):
            a = arrays_of(rep.content["range"])
            lo, hi = np.asarray(a["lo"], dtype=float), np.asarray(a["hi"], dtype=float)
            if lo.shape != hi.shape or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                raise ValueError(f"range of shapes {lo.shape}, {hi.shape} or not finite")
            n = int(rep.content["count"]["count"])
            if n < 0:
                raise ValueError("count < 0")
            return lo, hi, n

        replies = records.ask("range", kind, std, params, **self.cfg)
        ranges = records.parse(replies, range_of)
        # a gateway with no values of the subset (no reference) bounds nothing
        held = [r for r in ranges if r[2] > 0] or ranges
        lo = np.min([r[0] for r in held], axis=0)
        hi = np.max([r[1] for r in held], axis=0)
        # each gateway's count bounds its answers: a count search adds up what the
        # gateways say, so one that claims more values than it declared, or counts that
        # fall as the cut grows, would move the cut for every gateway
        self.n_of = {lab: r[2] for (lab, _), r in zip(replies, ranges, strict=True)}
        self.n = int(sum(self.n_of.values()))
        self.lo, self.hi = (lo, hi) if self.columns else (float(lo[0]), float(hi[0]))
        self.n_queries = 0

    def _counts(self, op: str, t, **cfg) -> np.ndarray:
        self.n_queries += 1
        t = np.asarray(t, dtype=float)
        t = t if self.columns else np.atleast_1d(t)

        def counts_of(label, rep):
            c = np.asarray(arrays_of(rep.content["counts"])["c"])
            if c.shape != t.shape or c.dtype.kind not in "iu" or (c < 0).any():
                raise ValueError(f"counts of shape {c.shape} and type {c.dtype}, not {t.shape}")
            if (c > self.n_of[label]).any():
                raise ValueError(f"counts above the {self.n_of[label]} values it declared")
            # a count of values at or below t cannot fall as t grows
            order = np.argsort(t, axis=-1, kind="stable")
            if (np.diff(np.take_along_axis(c, order, axis=-1), axis=-1) < 0).any():
                raise ValueError("counts that fall as the cut grows")
            return c

        reps = self.records.ask(op, self.kind, self.std, self.params, T=t, **cfg, **self.cfg)
        return sum(self.records.parse(reps, counts_of, labelled=True))

    def le(self, t) -> np.ndarray:
        return self._counts("le", t)

    def abs_le(self, t, center: float) -> np.ndarray:
        return self._counts("abs_le", t, center=float(center))


class RemoteRecords:
    """:class:`~fedep.core.trimming.TrimRecords` over the gateways (``query.trim``).

    The records and the kept sets stay on the gateways; the server sends the
    standardisation, the model's parameters and candidate cuts and gets counts and
    sums back. Every gateway still in the run must answer: a count search cannot lose
    a gateway half way (the run ends with one line naming the gateway that failed).
    """

    def __init__(self, grid, gw: Roster, timeout: float, min_clients: int):
        self.grid, self.gw, self.timeout, self.min_clients = grid, gw, timeout, min_clients
        self.labels = list(gw.order)
        # the kept records' moments of the last cut, with the gateways that sent them:
        # the next kept_moments() needs no exchange while those gateways are the run's
        self._kept: tuple[list[str], list[Moments]] | None = None

    def ask(self, op: str, kind: str, std: dict | None, params: dict | None, T=None, **cfg):
        """One ``query.trim`` exchange; ``(label, reply)`` in gateway order."""
        gw = self.gw
        if len(self.labels) < self.min_clients:
            raise RuntimeError(
                f"only {len(self.labels)} gateways left for record trimming; "
                f"min-clients={self.min_clients}{gw.why()}"
            )
        rd = {"trim": ConfigRecord({"json": json.dumps({"op": op, "kind": kind, **cfg})})}
        if std is not None:
            rd["std"] = to_array_record(mean=std["mean"], scale=std["scale"])
        if params:
            rd["params"] = to_array_record(
                **{k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in params.items()}
            )
        if T is not None:
            rd["query"] = to_array_record(T=T)
        return ask(
            self.grid,
            gw,
            RecordDict(rd),
            "query.trim",
            phase=f"trim {op}",
            what="record trimming",
            timeout=self.timeout,
            min_clients=self.min_clients,
            labels=self.labels,
            require_all=True,
        )

    def parse(self, replies, read, *, labelled: bool = False) -> list:
        """``read(reply)`` (``read(label, reply)`` if ``labelled``) of each ``(label,
        reply)``; a malformed reply ends the run with one line naming its gateway."""
        out = []
        for lab, rep in replies:
            try:
                out.append(read(lab, rep) if labelled else read(rep))
            except (KeyError, ValueError, TypeError, ArithmeticError) as exc:
                raise RuntimeError(
                    f"gateway {lab} sent a malformed record-trimming reply: {exc}"
                ) from None
        return out

    def counts(self, kind, mean, scale, params, subset="train"):
        return RemoteCounts(self, kind, {"mean": mean, "scale": scale}, params, subset)

    def sums(self, subset, mean, scale):
        n = np.asarray(mean).shape[0]

        def sums_of(rep):
            a = arrays_of(rep.content["sums"])
            count = read_count(rep.content["count"]["count"])
            return check_subset_sums(count, a["total"], a["gram"], n, None)

        reps = self.ask("sums", "", {"mean": mean, "scale": scale}, None, subset=subset)
        parts = self.parse(reps, sums_of)
        return tuple(sum(p[i] for p in parts) for i in range(3))

    def exclude(self, mean, scale, params):
        def counts_of(rep):
            c = rep.content["count"]
            n_labels, n_excluded = int(c["attack-labels"]), int(c["excluded"])
            if not 0 <= n_labels <= n_excluded or n_excluded > self.gw_count(rep):
                raise ValueError(f"{n_labels} attack labels and {n_excluded} records excluded")
            return n_labels, n_excluded

        reps = self.ask("exclude", "", {"mean": mean, "scale": scale}, params)
        parts = self.parse(reps, counts_of)
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    def gw_count(self, rep) -> int:
        """The records a gateway's reply says it holds (bounds its exclusion count)."""
        return int(rep.content["count"]["count"])

    def cut(self, kind, mean, scale, params, cut, min_rows):
        std = {"mean": mean, "scale": scale}
        reps = self.ask("cut", kind, std, params, cut=float(cut), **{"min-rows": int(min_rows)})

        def kept_of(rep):
            k = rep.content["kept"]
            return int(k["n-kept"]), float(k["kept-sum"]), bool(k["changed"])

        kept = self.parse(reps, kept_of)
        moments = self.parse(reps, moments_of)
        for (lab, _), (n, *_), m in zip(reps, kept, moments, strict=True):
            if m.count != n:
                raise RuntimeError(
                    f"gateway {lab} sent a malformed record-trimming reply: moments of "
                    f"{m.count} records for {n} kept"
                )
        self._kept = ([lab for lab, _ in reps], moments)
        n_kept = int(sum(k[0] for k in kept))
        return n_kept, float(sum(k[1] for k in kept)), any(k[2] for k in kept)

    def kept_moments(self):
        if self._kept is not None and self._kept[0] == self.labels:
            return self._kept[1]
        return self.parse(self.ask("moments", "", None, None), moments_of)

    def benign_sums(self, mean, scale, centres):
        k, n = centres.shape

        def sums_of(rep):
            a = arrays_of(rep.content["sums"])
            counts, sums, grams = (np.asarray(a[key]) for key in MODE_SUMS)
            if counts.shape != (k,) or sums.shape != (k, n) or grams.shape != (k, n, n):
                raise ValueError(f"benign-mode sums of shapes {counts.shape}, {sums.shape}")
            if not (np.isfinite(sums).all() and np.isfinite(grams).all()) or counts.min() < 0:
                raise ValueError("benign-mode sums not finite, or a negative count")
            return counts.astype(np.int64), sums.astype(float), grams.astype(float)

        std = {"mean": mean, "scale": scale}
        reps = self.ask("benign-sums", "", std, {"centres": centres})
        parts = self.parse(reps, sums_of)
        return tuple(sum(p[i] for p in parts) for i in range(3))

    def attack_counts(self, mean, scale, modes):
        k, steps = modes.centres.shape[0], len(GUARD_STEPS)

        def counts_of(rep):
            c = np.asarray(arrays_of(rep.content["counts"])["c"])
            if (
                c.shape != (k, steps)
                or c.min(initial=0) < 0
                or c.max(initial=0) > self.gw_count(rep)
            ):
                raise ValueError(f"confirmed-attack counts of shape {c.shape}, not ({k}, {steps})")
            return c.astype(np.int64)

        params = {"centres": modes.centres, "radius2": modes.radius2}
        reps = self.ask("attack-counts", "", {"mean": mean, "scale": scale}, params)
        return sum(self.parse(reps, counts_of))

    def ppca_sums(self, mean, scale, V):
        r = V.shape[1]

        def sums_of(rep):
            sum_t2 = np.asarray(arrays_of(rep.content["sums"])["sum_t2"], dtype=float)
            if sum_t2.shape != (r,):
                raise ValueError(f"sum_t2 of shape {sum_t2.shape}, not ({r},)")
            return (
                int(rep.content["count"]["count"]),
                sum_t2,
                float(rep.content["count"]["sum-res"]),
            )

        reps = self.ask("ppca-sums", "", {"mean": mean, "scale": scale}, {"V": V})
        return add_ppca_sums(self.parse(reps, sums_of))
