"""One gateway of several is hostile: each reply it tampers with is refused with one
line naming it and the phase, it leaves the run, and the honest gateways' fit goes on.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

pytest.importorskip("flwr")

from fedep.flower import FaultPlan, run_local  # noqa: E402
from fedep.flower.messages import arrays_of, to_array_record  # noqa: E402

RUN = {"n-components": 3, "n-rounds": 3, "tol": 0.0, "random-state": 0, "min-clients": 2}
TABLE_RUN = {**RUN, "n-components": 2, "features": "auto"}


def on(message_type: str, change):
    """A tampering hook: ``change(content)`` on every reply to ``message_type``."""

    def hook(msg, reply):
        if msg.metadata.message_type == message_type:
            change(reply.content)

    return hook


def _hostile(cfgs, run, index, hook, **kw):
    return run_local(cfgs, run, faults=FaultPlan(tamper={index: hook}), **kw)[0]


def _dropped(res, label, phase, why):
    assert label not in res.clients
    assert label not in res.history[-1]["participants"]
    assert res.failed[label].startswith(f"{phase}:"), res.failed[label]
    assert why in res.failed[label], res.failed[label]
    assert "\n" not in res.failed[label]
    assert np.isfinite(res.components).all()


def _same_fit(res, cfgs, run, drop):
    """The honest gateways' fit is the fit without the hostile one."""
    ref, _ = run_local([c for i, c in enumerate(cfgs) if i != drop], run)
    assert res.clients == ref.clients
    np.testing.assert_allclose(res.components, ref.components, atol=1e-8)


def _set_arrays(content, key, **changes):
    a = arrays_of(content[key])
    a.update(changes)
    content[key] = to_array_record(**a)


def _summary(content, change):
    d = json.loads(str(content["summary"]["json"]))
    change(d)
    content["summary"] = ConfigRecord({"json": json.dumps(d)})


# ----------------------------------------------------------------- column summaries
@pytest.mark.parametrize(
    "change, why",
    [
        (lambda d: d.update(n_rows=10**15), "summary of 1000000000000000 rows"),
        (lambda d: d["columns"][0].update(n_null=-5), "n_null < 0"),
        (lambda d: d["columns"][0].update(n_null=10**15), "more null"),
        (lambda d: d.update(n_rows=-3), "rows, but it declared"),
    ],
)
def test_summary_counts_must_match_the_enrolment(table_gateways, change, why):
    res = _hostile(
        table_gateways, TABLE_RUN, 1, on("query.summaries", lambda c: _summary(c, change))
    )
    _dropped(res, "t1", "summaries", why)
    _same_fit(res, table_gateways, TABLE_RUN, 1)


def test_a_huge_top_list_is_refused_before_parsing(table_gateways):
    def huge(content):
        d = json.loads(str(content["summary"]["json"]))
        col = d["columns"][-1]
        col["top_keys"] = [f"v{i}" for i in range(1_000_000)]
        col["top_counts"] = [0] * 1_000_000
        content["summary"] = ConfigRecord({"json": json.dumps(d)})

    t = time.perf_counter()
    res = _hostile(table_gateways, TABLE_RUN, 2, on("query.summaries", huge))
    _dropped(res, "t2", "summaries", "over the cap")
    assert time.perf_counter() - t < 60


# ------------------------------------------------------------------------- moments
@pytest.mark.parametrize(
    "count, why", [(10**15, "declared"), (-7, "not a non-negative integer"), (2.5, "integer")]
)
def test_feature_moments_count_must_match_the_enrolment(table_gateways, count, why):
    def lie(content):
        content["count"] = MetricRecord({"count": count})

    res = _hostile(table_gateways, TABLE_RUN, 3, on("query.feature_moments", lie))
    _dropped(res, "t3", "feature_moments", why)
    _same_fit(res, table_gateways, TABLE_RUN, 3)


def test_table_moments_count_must_match_the_enrolment(table_gateways):
    def lie(content):
        # Not the first contact (a table declares its rows there): the reply that
        # delivers the fitted pipeline, which now carries the count alone.
        if "source" not in content:
            content["count"]["count"] = 10**15

    res = _hostile(table_gateways, TABLE_RUN, 0, on("query.moments", lie))
    _dropped(res, "t0", "moments", "declared")


def test_a_false_enrolment_is_caught_by_the_summaries(table_gateways):
    # Within the count spread (5000 against a median of ~145 rows) the enrolment itself
    # passes; the summaries, which must match it, do not.
    def lie(content):
        if "source" in content:
            content["count"] = MetricRecord({"count": 5000})

    res = _hostile(table_gateways, TABLE_RUN, 0, on("query.moments", lie))
    _dropped(res, "t0", "summaries", "but it declared 5000")
    _same_fit(res, table_gateways, TABLE_RUN, 0)


def test_an_outsized_table_enrolment_is_refused_at_first_contact(table_gateways):
    def lie(content):
        if "source" in content:
            content["count"] = MetricRecord({"count": 10**15})

    res = _hostile(table_gateways, TABLE_RUN, 0, on("query.moments", lie))
    _dropped(res, "t0", "first contact", "more than 100 times the gateways' median")
    _same_fit(res, table_gateways, TABLE_RUN, 0)


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda c: _set_arrays(c, "moments", mean=np.zeros(3)), "malformed first contact"),
        (lambda c: _set_arrays(c, "moments", m2=-np.ones(12)), "m2 < 0"),
        (lambda c: _set_arrays(c, "moments", mean=np.full(12, np.nan)), "NaN"),
    ],
)
def test_malformed_first_moments_are_refused_naming_the_gateway(numeric_gateways, change, why):
    res = _hostile(numeric_gateways, RUN, 2, on("query.moments", change))
    _dropped(res, "2", "first contact", why)
    _same_fit(res, numeric_gateways, RUN, 2)


# ---------------------------------------------------------------------------- Gram
def _gram(change):
    def hook(content):
        G = arrays_of(content["gram"])["G"]
        content["gram"] = to_array_record(G=change(G.copy()))

    return hook


def _asym(G):
    G[0, 1] += 1.0
    return G


def _negdiag(G):
    G[0, 0] = -1.0
    return G


@pytest.mark.parametrize(
    "hook, why",
    [
        (_gram(_asym), "not symmetric"),
        (_gram(_negdiag), "negative diagonal"),
        (_gram(lambda G: G[:3, :3]), "of 9 values"),
        (lambda c: c.__setitem__("count", MetricRecord({"count": 10**15})), "declared"),
    ],
)
def test_gram_is_checked(numeric_gateways, hook, why):
    run = {**RUN, "n-components": "auto"}
    res = _hostile(numeric_gateways, run, 4, on("query.gram", hook))
    _dropped(res, "4", "gram", why)
    assert "malformed gram reply" in res.failed["4"]


# -------------------------------------------------------------------------- rounds
def _local(**change):
    def hook(content):
        a = arrays_of(content["local"])
        for k, f in change.items():
            a[k] = f(a[k])
        content["local"] = to_array_record(**a)

    return hook


def _nan_metric(content):
    m = dict(content["metrics"])
    m["fit"] = float("nan")
    content["metrics"] = MetricRecord(m)


@pytest.mark.parametrize(
    "hook, why",
    [
        (_local(W=lambda W: 2.0 * W), "not orthonormal"),
        (_local(nu=lambda nu: nu * 1e15), "nu"),
        (_local(Pi=lambda Pi: Pi + 1e12), "Pi"),
        (_local(nu=lambda nu: -nu), "nu must be finite and positive"),
        (_nan_metric, "metric 'fit'"),
    ],
)
def test_round_reports_are_checked(numeric_gateways, hook, why):
    res = _hostile(numeric_gateways, RUN, 1, on("train", hook))
    assert res.n_rounds == RUN["n-rounds"]
    for rec in res.history:
        assert "1" not in rec["participants"]
        assert why in rec["failed"]["1"] if "1" in rec["failed"] else True
    assert res.failed["1"].startswith("round 1: invalid reply:") and why in res.failed["1"]
    assert res.finalized == ["0", "2", "3", "4"]
    np.testing.assert_allclose(res.components @ res.components.T, np.eye(3), atol=1e-10)


# -------------------------------------------------------------------------- labels
def _label(label):
    def hook(content):
        content["client"] = ConfigRecord({"label": label})

    return hook


def test_a_duplicated_label_refuses_the_later_node(numeric_gateways):
    res = _hostile(numeric_gateways, RUN, 3, on("query.moments", _label("1")))
    assert res.clients == ["0", "1", "2", "4"]
    assert res.failed == {"node 1004": "first contact: duplicate client label '1' (kept node 1002)"}


def test_an_unsafe_label_is_refused_by_node_id(numeric_gateways, caplog):
    bad = "evil\n\x1b[31mFAKE: all good"
    res = _hostile(numeric_gateways, RUN, 0, on("query.moments", _label(bad)))
    assert res.clients == ["1", "2", "3", "4"]
    why = res.failed["node 1001"]
    assert why.startswith("first contact: unsafe client label") and "\\x1b" in why
    assert "\x1b" not in caplog.text and "evil\n" not in caplog.text


def test_the_run_stops_only_below_min_clients(numeric_gateways):
    # three of five hostile, min-clients 3: one line naming them, no traceback of numpy
    hooks = {i: on("query.moments", _label("0")) for i in (1, 2, 3)}
    with pytest.raises(RuntimeError, match=r"only 2 gateways answered the first contact"):
        run_local(numeric_gateways, {**RUN, "min-clients": 3}, faults=FaultPlan(tamper=hooks))


def test_an_unreadable_reply_is_named_not_a_numpy_message(numeric_gateways):
    def broken(content):
        content["local"] = ArrayRecord()

    res = _hostile(numeric_gateways, RUN, 2, on("train", broken))
    assert res.failed["2"].startswith("round 1: invalid reply:")


# ------------------------------------------------------------------ the checks alone
def test_validate_report_and_out_of_scale():
    from fedep.core.fedep import RoundReport
    from fedep.federation.server import REQUIRED_METRICS, out_of_scale, validate_report

    rng = np.random.default_rng(0)
    W = np.stack([np.linalg.qr(rng.normal(size=(6, 2)))[0] for _ in range(4)])
    metrics = {k: np.ones(4) for k in REQUIRED_METRICS}
    rep = RoundReport(W=W, Pi=0.1 * rng.normal(size=W.shape), nu=np.ones(4), metrics=metrics)
    validate_report(rep, 6, 2)
    reps = [
        RoundReport(W=W[i : i + 1], Pi=rep.Pi[i : i + 1], nu=np.array([1.0 + i]), metrics={})
        for i in range(4)
    ]
    assert out_of_scale(reps, [100] * 4) == {}
    reps[2].nu = np.array([1e9])
    assert list(out_of_scale(reps, [100] * 4)) == [2]
    with pytest.raises(ValueError, match="lacks the metrics"):
        validate_report(RoundReport(W=W, Pi=rep.Pi, nu=np.ones(4), metrics={}), 6, 2)


def test_honest_wide_vocabularies_pass_the_summary_checks(tmp_path):
    """A column with more distinct values than the pipeline's max_categories (NSL-KDD's
    counts have 130-216): honest top lists hold up to 4 x max(64, max_categories)."""
    cfgs = []
    for i in range(3):
        rng = np.random.default_rng(i)
        n = 2000
        df = pd.DataFrame(
            {
                "srv_count": rng.integers(0, 200, n),  # about 200 distinct values, repeated
                "bytes": rng.lognormal(6.0, 1.5, n).round(1),
                "proto": rng.choice(["tcp", "udp"], n),
            }
        )
        path = tmp_path / f"w{i}.csv"
        df.to_csv(path, index=False)
        cfgs.append({"data-path": str(path), "client-label": f"w{i}"})
    res, _ = run_local(cfgs, {**TABLE_RUN, "min-clients": 3})
    assert res.failed == {} and res.finalized == ["w0", "w1", "w2"]


# ------------------------------------------------------------- enrolment and drops
def test_an_outsized_first_declared_count_is_refused(numeric_gateways):
    # The first contact's count is the enrolment every later count must match; one
    # claiming 1e12 records would own the merged moments. Above 100 times the median
    # of the declared counts it is refused at first contact, naming the gateway.
    res = _hostile(
        numeric_gateways,
        RUN,
        1,
        on(
            "query.moments", lambda c: c.__setitem__("count", MetricRecord({"count": 10**12}))
        ),  # fmt: skip
    )
    _dropped(res, "1", "first contact", "more than 100 times the gateways' median")
    _same_fit(res, numeric_gateways, RUN, 1)


def test_moments_of_a_gateway_dropped_later_do_not_count(numeric_gateways):
    # Gateway 4's first-contact moments were merged into the scaling; it is dropped at
    # the Gram phase: the fit (scaling, rank, bases) is the fit without it.
    run = {**RUN, "n-components": "auto"}
    res = _hostile(numeric_gateways, run, 4, on("query.gram", _gram(_asym)))
    _dropped(res, "4", "gram", "not symmetric")
    _same_fit(res, numeric_gateways, run, 4)
