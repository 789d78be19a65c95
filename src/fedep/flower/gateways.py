"""The gateways over Flower: :class:`FlowerGateways`, the fit driver's transport.

Each phase of :class:`fedep.federation.gateways.Gateways` is one message per gateway
(:func:`fedep.flower.transport.ask`), answered by the ClientApp's handler of the same
name (:mod:`fedep.flower.client_app`):

============================  ===============================  =========================
phase                         message                          reply
============================  ===============================  =========================
first contact                 ``query.moments``                label, moments or
                                                               ``source = table``
``features``                  ``query.summaries``,             column summaries,
                              ``query.feature_moments``        moments of encoded features
``moments`` (raw tables)      ``query.moments`` + pipeline     its count (the moments of
                                                               its outputs only when no
                                                               feature moments came)
``gram``                      ``query.gram``                   ``Z_i^T Z_i``, count
``records``                   ``query.trim``                   counts and sums
``setup``                     ``train.setup`` (+ its own       ack (+ one-shot sketch)
                              warm-start state)
``round_clients``             ``train``                        ``W_i, Pi_i, nu_i``, metrics
``finalize``                  ``evaluate.finalize``            thresholds
============================  ===============================  =========================

Every reply is checked against what was asked (shapes, finiteness, counts) and a
malformed one is refused with one line naming its gateway. No record, score or kept
set leaves a gateway.
"""

from __future__ import annotations

import json
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log

from fedep._json import jsonable
from fedep.core.fedep import RoundReport
from fedep.core.stats import Moments
from fedep.features import FeaturePipeline
from fedep.features.summaries import align_summaries
from fedep.federation.gateways import GatewaySetup, Standardization
from fedep.federation.privacy import PrivacyBudget, proposal_bound
from fedep.federation.rounds import TooFewClients
from fedep.federation.server import merge_reports, out_of_scale, validate_report
from fedep.flower.checks import (
    check_gram,
    check_label,
    outsized_counts,
    read_count,
    read_moments,
    read_summaries,
)
from fedep.flower.gateway_data import sort_labels
from fedep.flower.messages import (
    arrays_of,
    json_record,
    round_report_from,
    setup_contents,
    to_array_record,
)
from fedep.flower.remote_records import RemoteCounts, RemoteRecords
from fedep.flower.secagg import SECSUM, SecureSum, secure_sum
from fedep.flower.secure_rounds import factor, secure_round
from fedep.flower.transport import Roster, ask, exchange

__all__ = ["FlowerGateways", "RemoteClients", "RemoteCounts", "RemoteRecords"]


def _width(rep: Message) -> int:
    """The number of features a first-contact reply claims (-1: unreadable)."""
    try:
        return int(np.asarray(arrays_of(rep.content["moments"])["mean"]).size)
    except (KeyError, ValueError, TypeError):
        return -1


def _flag(rep: Message, key: str) -> bool:
    """A gateway's first-contact flag ``knows[key]`` (absent: 0); anything but 0/1 is
    taken as 1, so that a gateway's reference or feedback is never skipped."""
    rec = rep.content.metric_records.get("knows")
    return rec is not None and rec.get(key, 0) != 0


class FlowerGateways:
    """:class:`~fedep.federation.gateways.Gateways` over a Flower grid.

    Made by :meth:`connect` (the first contact); every later phase is one exchange.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    roster : Roster
        The gateways that answered the first contact.
    method : str
        The estimator's method name, sent with the setup (each gateway rebuilds and
        validates the estimator).
    timeout : float
        Longest wait for one phase's replies.
    min_clients : int
        Fewest gateways a phase may continue with.
    max_misses : int
        Rounds in a row a gateway may miss before it leaves the run.
    pipeline_params : dict
        The feature pipeline's parameters (gateways holding raw tables).
    first_moments : dict of label -> Moments, or None
        The numeric gateways' moments from the first contact (None: raw tables).
    declared : dict of label -> int
        Each gateway's record count, declared at first contact: every later count it
        sends (summaries, moments, Gram) must equal it.
    columns : dict of label -> int
        Each raw-table gateway's declared number of columns (bounds its summaries).
    secure : bool
        Secure aggregation (:mod:`fedep.flower.secagg`): the moments, the Gram
        matrices, the sketches and every round come to the server as SecAgg+ sums only.
    n_features : int or None
        The numeric gateways' declared number of features (secure aggregation).
    privacy : PrivacyBudget or None
        Differential privacy: every gateway noises its releases
        (:mod:`fedep.flower.gateway_privacy`); the server counts them.
    """

    def __init__(
        self,
        grid,
        roster: Roster,
        *,
        method: str,
        timeout: float,
        min_clients: int,
        max_misses: int,
        pipeline_params: dict | None = None,
        first_moments: dict[str, Moments] | None = None,
        declared: dict[str, int] | None = None,
        columns: dict[str, int] | None = None,
        secure: bool = False,
        n_features: int | None = None,
        privacy: PrivacyBudget | None = None,
    ):
        self.grid, self.roster, self.method = grid, roster, method
        self.privacy = privacy
        self.timeout, self.min_clients, self.max_misses = timeout, min_clients, max_misses
        self.pipeline_params = dict(pipeline_params or {})
        self._moments = first_moments
        # each gateway's record count (and table columns) declared at first contact
        self.declared = dict(declared or {})
        self.columns = dict(columns or {})
        self.secure, self.n_features = bool(secure), n_features
        self._pipe: FeaturePipeline | None = None
        # each raw-table gateway's moments of its encoded features (the scaling phase):
        # its outputs' moments follow from them (FeaturePipeline.output_moments)
        self._encoded: dict[str, Moments] | None = None
        self._records: RemoteRecords | None = None
        self._clients: RemoteClients | None = None

    @property
    def labels(self) -> list[str]:
        return self.roster.order

    def _ask(self, content, message_type: str, phase: str, what: str, **kw):
        return ask(
            self.grid,
            self.roster,
            content,
            message_type,
            phase=phase,
            what=what,
            timeout=self.timeout,
            min_clients=self.min_clients,
            **kw,
        )

    def _parse(self, replies, phase: str, read) -> list:
        """``(label, read(label, reply))`` of the replies ``read`` accepts; a refused one
        drops its gateway (one line naming it and ``phase``)."""
        return self.roster.parse(
            replies, phase, read, min_clients=self.min_clients, what=f"the {phase} phase"
        )

    def _secure_sum(self, what: str, shapes: dict, *, group_id=None, **arrays) -> SecureSum:
        """A SecAgg+ sum of the gateways' values ``what`` (:mod:`fedep.flower.secagg`);
        the gateways that leave it leave the run."""
        rd = RecordDict(
            {SECSUM: ConfigRecord({"json": json.dumps({"what": what, **arrays.pop("query", {})})})}
        )
        for key, arrs in arrays.items():
            rd[key] = to_array_record(**arrs)
        out = secure_sum(
            self.grid,
            self.roster,
            rd,
            shapes,
            phase=f"secure_{what}",
            timeout=self.timeout,
            min_clients=self.min_clients,
            group_id=group_id,
        )
        self.roster.order = [lab for lab in self.roster.order if lab in out.labels]
        return out

    def _reader(self, n_features: int):
        """A reader of moments of ``n_features`` features over the declared records."""

        def read(lab, rep):
            return read_moments(rep, count=self.declared.get(lab), n_features=n_features)

        return read

    @classmethod
    def connect(
        cls,
        grid,
        nodes: list[int],
        *,
        features: str,
        timeout: float,
        min_clients: int,
        secure: bool = False,
        privacy: PrivacyBudget | None = None,
        **kw,
    ) -> FlowerGateways:
        """The first contact: every node's label and its moments (or, with
        ``features="auto"`` and a raw table, ``source = table``).

        Each gateway declares its record count (its moments' count, or a table's rows):
        its enrolment, which every later count it sends must equal. A label outside
        :data:`~fedep.flower.checks.LABEL_PATTERN`, or taken by a node of lower id, is
        refused naming the node; fewer than ``min_clients`` gateways left end the run, as
        does a run mixing raw tables with numeric sources. With ``privacy``, every
        gateway gets the run's budget and replies noised moments (one release).
        """
        query: dict = {"mode": "auto"} if features == "auto" else {}
        if secure:  # the enrolment only: the moments come as a secure sum
            query = {"mode": "count", "auto": features == "auto"}
        if privacy is not None:
            query["dp"] = privacy.query()
            if not secure:
                privacy.spend()  # the moments of the first contact
        content = json_record("features", query) if query else RecordDict()
        replies, failed, sent, received = exchange(
            grid, dict.fromkeys(nodes, content), "query.moments", "moments", timeout
        )
        label_of, refused = {}, {}
        for nid in sorted(replies):
            try:
                lab = replies[nid].content["client"]["label"]
            except KeyError:
                lab = None
            why = check_label(lab)
            if why is None and lab in label_of.values():
                first_node = next(n for n, x in label_of.items() if x == lab)
                why = f"duplicate client label {lab!r} (kept node {first_node})"
            if why is not None:
                refused[nid] = why
            else:
                label_of[nid] = lab
        order = sort_labels(list(label_of.values()))
        roster = Roster(
            order=order, node_of={lab: n for n, lab in label_of.items()}, label_of=label_of
        )
        roster.fail(failed, "moments")
        roster.fail(refused, "first contact")
        roster.add_bytes("moments", sent, received)
        roster.keep_answered(
            {n: r for n, r in replies.items() if n in label_of}, min_clients, "the first contact"
        )
        by_label = [(lab, replies[roster.node_of[lab]]) for lab in roster.order]
        tables = [lab for lab, rep in by_label if "source" in rep.content]
        numeric = [lab for lab, _ in by_label if lab not in tables]
        if tables and privacy is not None:
            raise RuntimeError(
                "differential privacy: gateways "
                + ", ".join(tables)
                + " hold raw tables; the feature pipeline's column summaries are not "
                "noised; run with features='numeric' or without dp-epsilon"
            )
        if tables and secure:
            raise RuntimeError(
                "secure aggregation: gateways "
                + ", ".join(tables)
                + " hold raw tables; the feature pipeline's column summaries (category "
                "counts, quantile sketches) cannot be summed securely; run with "
                "features='numeric' or without secure aggregation"
            )
        if tables and numeric:
            raise RuntimeError(
                "features='auto': gateways "
                + ", ".join(tables)
                + " hold raw tables (data-path) but gateways "
                + ", ".join(numeric)
                + " hold numeric records (dataset partition or synthetic); give every "
                "gateway the same kind of source, or run with features='numeric'"
            )
        # the enrolment: each gateway's record count (and its table's columns), which
        # every later reply of it must agree with
        if tables:

            def enrol(lab, rep):
                src = rep.content["source"]
                return read_count(rep.content["count"]["count"]), read_count(src["n-columns"])

        elif secure:

            def enrol(lab, rep):
                c = rep.content["count"]
                return read_count(c["count"]), read_count(c["n-features"])

        else:
            widths = [_width(rep) for _, rep in by_label]
            n_features = max(set(widths), key=widths.count)  # the gateways' majority

            def enrol(lab, rep):
                return read_moments(rep, count=None, n_features=n_features)

        enrolled = roster.parse(
            by_label, "first contact", enrol, min_clients=min_clients, what="the first contact"
        )
        counts = {lab: (v[0] if (tables or secure) else v.count) for lab, v in enrolled}
        for lab, why in outsized_counts(counts).items():
            roster.drop(lab, "first contact", why, min_clients, "the first contact")
            del counts[lab]
        enrolled = [(lab, v) for lab, v in enrolled if lab in counts]
        first = None if (tables or secure) else {lab: m for lab, m in enrolled}
        columns = {lab: v[1] for lab, v in enrolled} if tables else {}
        knows = {k: any(_flag(rep, k) for _, rep in by_label) for k in ("reference", "feedback")}
        holding = [
            lab for lab, rep in by_label if _flag(rep, "reference") or _flag(rep, "feedback")
        ]
        if privacy is not None and holding:
            raise RuntimeError(
                "differential privacy: gateways " + ", ".join(holding) + " hold a trusted "
                "reference or analyst feedback, whose queries are not noised; remove their "
                "reference-path / feedback-path or run without dp-epsilon"
            )
        n_features = None
        if secure:
            widths = [v[1] for _, v in enrolled]
            n_features = max(set(widths), key=widths.count)  # the gateways' majority
            for lab, v in enrolled:
                if v[1] != n_features:
                    roster.drop(
                        lab,
                        "first contact",
                        f"{v[1]} features, not {n_features}",
                        min_clients,
                        "the first contact",
                    )
            counts = {lab: c for lab, c in counts.items() if lab in roster.order}
        gateways = cls(
            grid,
            roster,
            timeout=timeout,
            min_clients=min_clients,
            first_moments=first,
            declared=counts,
            columns=columns,
            secure=secure,
            n_features=n_features,
            privacy=privacy,
            **kw,
        )
        gateways.knows = knows
        return gateways

    def features(self, fitted=None) -> FeaturePipeline | None:
        """The feature pipeline of gateways holding raw tables, in two phases:
        ``query.summaries`` (each gateway's column summaries -> merged -> decisions)
        and ``query.feature_moments`` (moments of the encoded features -> scaling).
        ``fitted`` (a warm start's): that pipeline, sent with the moments phase."""
        if self._moments is not None and fitted is not None:
            msg = "the model has a feature pipeline but the gateways hold numeric records"
            raise RuntimeError(f"warm start: {msg}; give them raw tables")
        if self._moments is not None or self.secure:
            return None
        if fitted is not None:
            self._pipe = fitted
            return fitted
        pipe = FeaturePipeline(**self.pipeline_params)
        sent = {"params": jsonable(pipe.get_params())}
        content = RecordDict({"pipeline": ConfigRecord({"json": json.dumps(sent)})})
        replies = self._ask(content, "query.summaries", "summaries", "the column summaries")
        max_cat = pipe.summary_categories

        def summary_of(lab, rep):
            text = rep.content["summary"]["json"]
            cols = self.columns.get(lab)
            return read_summaries(
                text, count=self.declared.get(lab), n_columns=cols, max_categories=max_cat
            )

        summaries = [s for _, s in self._parse(replies, "summaries", summary_of)]
        pipe.fit_from_summaries(align_summaries(summaries))
        if not any(d.used for d in pipe.decisions_):
            raise RuntimeError(
                "the feature pipeline kept no column of the gateways' tables (every column "
                "was excluded: identifiers, addresses, timestamps, constants, free text ...)"
            )
        if pipe.scale_rule is not None:
            content = json_record("pipeline", pipe.to_dict())
            replies = self._ask(
                content, "query.feature_moments", "feature_moments", "the feature moments"
            )
            n_out = len(pipe.get_feature_names_out())
            parsed = self._parse(replies, "feature_moments", self._reader(n_out))
            pipe.fit_scaling([m for _, m in parsed])
            self._encoded = dict(parsed)
        log(INFO, "fedep: feature pipeline fitted: %d features", len(pipe.get_feature_names_out()))
        self._pipe = pipe
        return pipe

    def moments(self) -> list[Moments]:
        """The first contact's moments, or (raw tables) the moments of the pipeline's
        outputs: the fitted pipeline goes to every gateway, which transforms its table
        and keeps the result. Only the gateways still in the run: a gateway dropped
        since does not count in what is merged from them afterwards. Under secure
        aggregation, one pooled moments: two secure sums (the records' sum, then the
        squared deviations from the pooled mean)."""
        if self._moments is None and self.secure and self.privacy is not None:
            self._moments = [self._private_secure_moments()]
        if self._moments is None and self.secure:
            n = self.n_features
            first = self._secure_sum("moments", {"n": (1,), "sum": (n,)})
            total = sum(self.declared[lab] for lab in first.labels)
            if abs(float(first.sums["n"][0]) - total) > 0.5 + float(first.bound["n"][0]):
                raise RuntimeError(
                    f"secure aggregation: the summed record count {first.sums['n'][0]:.1f} "
                    f"is not the {total} the gateways declared"
                )
            mean = first.sums["sum"] / total
            second = self._secure_sum("m2", {"m2": (n,)}, std={"mean": mean})
            if second.labels != first.labels:  # a gateway left between the two sums
                raise RuntimeError(
                    "secure aggregation: gateways "
                    + ", ".join(sorted(set(first.labels) - set(second.labels)))
                    + " left between the two sums of the moments"
                )
            self._moments = [Moments(total, mean, np.maximum(second.sums["m2"], 0.0))]
        if self._moments is None:
            self._moments = self._pipeline_moments()
        if self.secure:
            return self._moments  # one pooled sum: no gateway's share can be taken out
        return [self._moments[lab] for lab in self.roster.order if lab in self._moments]

    def _pipeline_moments(self) -> dict[str, Moments]:
        """Every raw-table gateway transforms its table by the fitted pipeline and keeps
        the result; it replies its outputs' moments only when the server lacks its
        encoded features' moments (no scaling phase: ``scale_rule=None``, a warm
        start), else its record count, which must be the one it declared."""
        pipe, encoded = self._pipe, self._encoded
        query = {"mode": "pipeline", "pipeline": pipe.to_dict(), "moments": encoded is None}
        replies = self._ask(json_record("features", query), "query.moments", "moments",
                            "the moments")  # fmt: skip
        n_out = len(pipe.get_feature_names_out())
        if encoded is None:
            return dict(self._parse(replies, "moments", self._reader(n_out)))

        def kept(lab, rep):
            c = rep.content["count"]
            n, width = read_count(c["count"]), read_count(c["n-features"], "n-features")
            if n != self.declared.get(lab) or width != n_out:
                raise ValueError(
                    f"{n} records of {width} features, but it declared "
                    f"{self.declared.get(lab)} records and the pipeline has {n_out} features"
                )
            return pipe.output_moments(encoded[lab])

        return dict(self._parse(replies, "moments", kept))

    def _private_secure_moments(self) -> Moments:
        """The pooled moments of a private secure run: one secure sum of each gateway's
        noised ``sum x`` and ``sum x**2`` (one release; no second sum about the mean)."""
        n = self.n_features
        out = self._secure_sum("moments", {"n": (1,), "sum": (n,), "sq": (n,)})
        self.privacy.spend()
        total = sum(self.declared[lab] for lab in out.labels)
        if abs(float(out.sums["n"][0]) - total) > 0.5 + float(out.bound["n"][0]):
            raise RuntimeError(
                f"secure aggregation: the summed record count {out.sums['n'][0]:.1f} "
                f"is not the {total} the gateways declared"
            )
        return Moments.from_sums(total, out.sums["sum"], np.maximum(out.sums["sq"], 0.0))

    def gram(self, std: Standardization) -> tuple[np.ndarray, list[int]]:
        n = std.mean.shape[0]
        if self.secure:
            out = self._secure_sum("gram", {"G": (n, n)}, std=_std_arrays(std))
            G = out.sums["G"]
            return 0.5 * (G + G.T), [self.declared[lab] for lab in out.labels]
        content = RecordDict({"std": to_array_record(**_std_arrays(std))})
        replies = self._ask(content, "query.gram", "gram", "the Gram matrices")

        def gram_of(lab, rep):
            count = read_count(rep.content["count"]["count"])
            G = arrays_of(rep.content["gram"])["G"]
            return check_gram(G, n, count, self.declared.get(lab)), count

        parsed = self._parse(replies, "gram", gram_of)
        total = np.zeros((n, n))
        for _, (G, _) in parsed:
            total += G
        return total, [c for _, (_, c) in parsed]

    def records(self) -> RemoteRecords:
        if self._records is None:
            self._records = RemoteRecords(self.grid, self.roster, self.timeout, self.min_clients)
            knows = getattr(self, "knows", {})
            self._records.has_reference = bool(knows.get("reference", True))
            self._records.has_feedback = bool(knows.get("feedback", True))
        return self._records

    def benign_sums(self, std: Standardization, centres: np.ndarray) -> tuple:
        return self.records().benign_sums(std.mean, std.scale, centres)

    def attack_counts(self, std: Standardization, modes) -> np.ndarray:
        return self.records().attack_counts(std.mean, std.scale, modes)

    def setup(
        self, std: Standardization, setup: GatewaySetup, start: dict | None = None
    ) -> list[np.ndarray] | None:
        """``train.setup``: the standardisation and the estimator's parameters to every
        gateway still in the run; each validates the estimator, drops its previous model
        state and replies its sketch when ``setup.sketch_rank`` > 0. With ``start`` (a
        warm start), each gateway gets its own carried state only (``setup_contents``)."""
        records = self.records()
        self.roster.order = [lab for lab in self.roster.order if lab in records.labels]
        settings = {
            "method": self.method,
            "params": setup.params,
            "rank": setup.rank,
            "rank_reason": setup.rank_reason,
        }
        k_sketch = 0 if self.secure else setup.sketch_rank
        # every gateway of a warm start settles its data side before round 1
        warm = int(start is not None)
        cfg = {"json": json.dumps(settings), "sketch-rank": k_sketch, "warm-start": warm}
        config = ConfigRecord(cfg)
        content = RecordDict({"std": to_array_record(**_std_arrays(std)), "settings": config})
        if start is not None:  # each gateway its own carried state
            n = std.mean.shape[0]
            content = setup_contents(content, start, self.roster.order, n, setup.rank)
        replies = self._ask(content, "train.setup", "setup", "the setup")
        records.labels = list(self.roster.order)
        if not setup.sketch_rank:
            return None
        n = std.mean.shape[0]
        if self.privacy is not None:
            self.privacy.spend()  # each gateway's noised Gram matrix
        if self.secure:  # the merge needs sum_i B_i B_i^T only: one factor of it
            out = self._secure_sum("sketch", {"BB": (n, n)}, query={"rank": setup.sketch_rank})
            records.labels = list(self.roster.order)
            return [factor(out.sums["BB"])]
        if self.privacy is not None:  # noised Gram matrices: their sum, factored
            grams = [G for _, G in self._parse(replies, "setup", _private_gram(n))]
            records.labels = list(self.roster.order)
            return [factor(np.sum(grams, axis=0))]

        def sketch_of(lab, rep):
            B = np.asarray(arrays_of(rep.content["sketch"])["B"], dtype=float)
            if B.ndim != 2 or B.shape[0] != n or B.shape[1] > setup.sketch_rank:
                raise ValueError(f"a sketch of shape {B.shape}, not ({n}, <={setup.sketch_rank})")
            if not np.isfinite(B).all():
                raise ValueError("a sketch holding NaN or inf")
            return B

        sketches = [B for _, B in self._parse(replies, "setup", sketch_of)]
        records.labels = list(self.roster.order)
        return sketches

    def round_clients(self, V0: np.ndarray) -> RemoteClients:
        self._clients = RemoteClients(
            self.grid,
            self.roster,
            V0,
            timeout=self.timeout,
            min_clients=self.min_clients,
            max_misses=self.max_misses,
            records=self.records(),
            declared=self.declared,
            secure=self,
            privacy=self.privacy,
        )
        return self._clients

    def client_bases(self) -> None:
        return None  # each gateway keeps its personalised basis

    def client_states(self) -> None:
        return None  # each gateway keeps its personalised state (in its model file)

    def kept_blocks(self, std: Standardization) -> list[np.ndarray]:
        raise ValueError("the records stay on the gateways: this method needs them in one place")

    def finalize(self, outcome) -> list[str]:
        """``evaluate.finalize``: every gateway still active writes its personalised
        model; returns the labels of those that confirmed."""
        clients = self._clients
        res = outcome.federation
        final = {
            "history": res.history,
            "n_rounds": res.n_rounds,
            "stop_reason": res.stop_reason,
            "trim_history": outcome.trim_history,
            "trust": outcome.trust,
            "lineage": outcome.lineage,  # the run's: every gateway's file records it
            "secure_aggregation": self.secure,
            "differential_privacy": self.privacy is not None,
        }
        content = RecordDict(
            {
                "global": to_array_record(V=res.V, components=outcome.components),
                "final": ConfigRecord({"json": json.dumps(jsonable(final))}),
            }
        )
        if outcome.benign_modes is not None:  # every gateway's model suppresses the same
            m = outcome.benign_modes
            content["benign"] = to_array_record(
                benign_centres_=m.centres, benign_radius2_=m.radius2, benign_counts_=m.counts
            )
        targets = {
            self.roster.node_of[lab]: content
            for lab in clients.active
            if lab in clients.initialised
        }
        replies, failed, _, _ = exchange(
            self.grid, targets, "evaluate.finalize", "finalize", self.timeout
        )
        self.roster.fail(failed, "finalize")
        return sorted(self.roster.label_of[n] for n in replies)


def _private_gram(n: int):
    """A reader of a private setup reply's noised Gram matrix (n, n)."""

    def read(lab, rep):
        G = np.asarray(arrays_of(rep.content["gram"])["G"], dtype=float)
        if G.shape != (n, n) or not np.isfinite(G).all():
            raise ValueError(
                f"a noised Gram matrix of shape {G.shape}, not ({n}, {n}), or not finite"
            )
        if not np.allclose(G, G.T, rtol=0, atol=1e-9 * max(1.0, float(np.abs(G).max()))):
            raise ValueError("a noised Gram matrix that is not symmetric")
        return G

    return read


def _private_form(rep: RoundReport, V: np.ndarray, bound: float) -> None:
    """Refuse a private round reply not of the released form (``Pi = 0``, ``nu = 1``,
    ``||W - V|| <= bound``: the clip radius plus the noise's norm, but with
    probability ``exp(-32)``)."""
    if np.any(rep.Pi != 0) or np.any(rep.nu != 1):
        raise ValueError("a private proposal with Pi != 0 or nu != 1")
    far = float(np.linalg.norm(rep.W[0] - V))
    if far > bound:
        raise ValueError(f"a private proposal {far:.3g} from V, beyond its noise ({bound:.3g})")


def _std_arrays(std: Standardization) -> dict[str, np.ndarray]:
    return {"mean": std.mean, "scale": std.scale, "constant": std.constant}


class RemoteClients:
    """The gateways as the round loop sees them (:class:`~fedep.federation.rounds.RoundClients`).

    ``local_round`` sends ``V`` to the chosen gateways still active, waits for their
    replies, drops errors and replies that fail
    :func:`~fedep.federation.server.validate_report`, and merges the rest in
    client-label order. A gateway that misses ``max_misses`` rounds in a row is left
    out of later ones; fewer than ``min_clients`` valid replies end the run.
    """

    def __init__(
        self,
        grid,
        gw: Roster,
        V0,
        *,
        timeout,
        min_clients,
        max_misses,
        records=None,
        declared=None,
        secure: FlowerGateways | None = None,
        privacy: PrivacyBudget | None = None,
    ):
        self.grid, self.gw, self.V0 = grid, gw, V0
        self.declared = dict(declared or {})
        self.n_features, self.r = V0.shape
        self.timeout, self.min_clients, self.max_misses = timeout, min_clients, max_misses
        # record trimming's view of the run: a gateway left out of the rounds leaves it
        self.records = records
        self.d = len(gw.order)
        self.active = list(gw.order)
        self.misses = dict.fromkeys(gw.order, 0)
        self.initialised: set[str] = set()
        self.rnd = 0
        # secure aggregation: each round is a secure sum of the gateways' round sums
        self.secure = secure if secure is not None and secure.secure else None
        self.privacy = privacy

    def local_round(self, V, clients=None, *, restart=False, sketch_rank=0, hold=0) -> RoundReport:
        gw = self.gw
        self.rnd += 1
        chosen = gw.order if clients is None else [gw.order[i] for i in clients]
        targets = [lab for lab in chosen if lab in self.active]
        contents = {}
        cfg = {"round": self.rnd}
        if restart or sketch_rank or hold:  # consensus steps (FedEP.remerge): as in-process
            cfg.update(
                {"restart": int(bool(restart)), "sketch-rank": int(sketch_rank), "hold": int(hold)}
            )
        for lab in targets:
            rd = {"global": to_array_record(V=V), "round": ConfigRecord(cfg)}
            if lab not in self.initialised:
                rd["init"] = to_array_record(V0=self.V0)
            contents[gw.node_of[lab]] = RecordDict(rd)
        if self.privacy is not None:
            self.privacy.spend()  # each gateway's noised proposal
        if self.secure is not None:
            return secure_round(
                self, targets, {gw.node_of[t]: contents[gw.node_of[t]] for t in targets}
            )
        private = self.privacy is not None
        bound = proposal_bound(self.privacy.z, self.n_features, self.r) if private else 0.0
        replies, failed, s_b, r_b = exchange(
            self.grid, contents, "train", str(self.rnd), self.timeout
        )
        reports, answered = [], []
        for lab in targets:
            nid = gw.node_of[lab]
            if nid not in replies:
                continue
            try:
                rep = round_report_from(replies[nid])
                validate_report(rep, self.n_features, self.r, orthonormal=not private)
                if private:
                    _private_form(rep, V, bound)
            except (KeyError, ValueError, TypeError, ArithmeticError) as exc:
                line = " ".join(str(exc).split())[:300] or type(exc).__name__
                failed[nid] = f"invalid reply: {line}"
                continue
            reports.append(rep)
            answered.append(lab)
        # a reply well formed but out of scale (nu, Pi) would steer V by itself
        counts = [self.declared.get(lab) for lab in answered]
        for i, why in sorted(out_of_scale(reports, counts).items(), reverse=True):
            failed[gw.node_of[answered[i]]] = f"invalid reply: {why}"
            del reports[i], answered[i]
        self.account(targets, answered, {gw.label_of[n]: w for n, w in failed.items()})
        rep = merge_reports(reports)
        rep.info = {
            "participants": answered,
            "failed": {gw.label_of[n]: why for n, why in failed.items()},
            "bytes_sent": {gw.label_of[n]: b for n, b in s_b.items()},
            "bytes_received": {gw.label_of[n]: b for n, b in r_b.items()},
        }
        return rep

    def account(self, targets: list[str], answered: list[str], failed: dict[str, str]) -> None:
        """Count the round's misses (a gateway missing ``max_misses`` rounds in a row
        leaves the run); fewer than ``min_clients`` answers end it."""
        gw = self.gw
        self.initialised.update(targets)
        for lab in targets:
            if lab in answered:
                self.misses[lab] = 0
                continue
            self.misses[lab] += 1
            why = failed.get(lab)
            gw.failed[lab] = f"round {self.rnd}: {why}"
            log(WARNING, "fedep: gateway %s failed round %d: %s", lab, self.rnd, why)
            if self.misses[lab] >= self.max_misses:
                self.active.remove(lab)
                if self.records is not None and lab in self.records.labels:
                    self.records.labels.remove(lab)
        if len(answered) < self.min_clients:
            log(
                WARNING,
                "fedep: round %d has %d replies < min-clients=%d; stopping",
                self.rnd,
                len(answered),
                self.min_clients,
            )
            raise TooFewClients(f"round {self.rnd}: {len(answered)} valid replies")
