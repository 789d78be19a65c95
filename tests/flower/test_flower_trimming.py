"""Record trimming over Flower: the same concentration steps as the in-process fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr")

from fedep import load  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.detectors import FedEP, FedPG  # noqa: E402
from fedep.flower import FaultPlan, run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data, load_gateway_table  # noqa: E402
from fedep.params import InvalidParameterError  # noqa: E402

R = 3


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(tmp_path, d=4, seed=3, n=10):
    """Gateways holding CSV tables: records near a rank-3 subspace and a tight cluster
    of outlier records (15%, like a flood of near-identical attack flows), unlabelled.
    Listed in reverse: the server must still take them in client-label order."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.standard_normal((n, 3)))[0]
    center = np.r_[np.full(4, 5.0), np.zeros(n - 4)]
    cfgs = []
    for i in range(d):
        m = 90 + 13 * i
        k = int(0.15 * m)
        X = (rng.standard_normal((m, 3)) * [3.0, 2.0, 1.5]) @ B.T + 0.3 * rng.standard_normal(
            (m, n)
        )
        X[:k] = center + 0.05 * rng.standard_normal((k, n))
        X += 0.2 * i + 10.0  # positive: the feature pipeline may take logarithms
        path = tmp_path / f"gw-{i}.csv"
        pd.DataFrame(X, columns=[f"f{j}" for j in range(n)]).to_csv(path, index=False)
        cfgs.append(
            {
                "data-path": str(path),
                "client-label": str(i),
                "model-path": str(tmp_path / f"gw-{i}.fedep"),
            }
        )
    return cfgs[::-1]


def _pooled(cfgs, features):
    """The in-process reference's input: the gateways' records in label order."""
    cfgs = sorted(cfgs, key=lambda c: int(c["client-label"]))
    if features == "auto":
        frames = [load_gateway_table(c)[0] for c in cfgs]
        X = pd.concat(frames, ignore_index=True)
        Xs = frames
    else:
        Xs = [load_gateway_data(c)[0] for c in cfgs]
        X = np.vstack(Xs)
    groups = np.repeat(np.arange(len(cfgs)), [len(x) for x in Xs])
    return Xs, X, groups


CASES = [
    # trimming from every record, a fixed share, a random start
    ("fedep", FedEP, {"trim_steps": 3, "trim_share": 0.2, "n_rounds": 5, "init": "random"}),
    # the robust start, the share estimated ("auto"), one-shot start, the automatic rank
    ("fedep", FedEP, {"trim_steps": 2, "trim_start": "median", "contamination": "auto",
                      "n_rounds": 4, "n_components": "auto"}),
    # FedPG, the median start without standardisation, a given contamination
    ("fedpg", FedPG, {"trim_steps": 2, "trim_start": "median", "contamination": 0.1,
                      "n_rounds": 3, "standardize": False}),
    # through the federated feature pipeline (centred and scaled by it; the trimming
    # relocates and rescales from the start set on its outputs)
    ("fedep", FedEP, {"trim_steps": 2, "trim_start": "median", "trim_share": 0.2,
                      "n_rounds": 3, "features": "auto"}),
]  # fmt: skip


@pytest.mark.parametrize("method, cls, params", CASES)
def test_trimming_over_flower_is_the_inprocess_fit(tmp_path, method, cls, params):
    params = {"n_components": R, "tol": 0.0, "random_state": 4, "features": "numeric", **params}
    cfgs = _gateways(tmp_path)
    rc = {"method": method, **{k.replace("_", "-"): v for k, v in params.items()}}
    res, grid = run_local(cfgs, rc)
    Xs, X, groups = _pooled(cfgs, params["features"])
    det = cls(**params).fit(X, groups=groups)

    assert det.n_trim_steps_ >= 1
    assert len(res.trim_history) == det.n_trim_steps_
    for a, b in zip(det.trim_history_, res.trim_history, strict=True):
        assert a["n_kept"] == b["n_kept"] and a["share"] == pytest.approx(b["share"], abs=0)
        assert a["changed"] == b["changed"]
        assert b["objective"] == pytest.approx(a["objective"], rel=1e-9)
    assert det.trim_history_[0]["n_kept"] < X.shape[0]  # records were trimmed
    assert res.n_rounds == det.n_iter_
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    np.testing.assert_allclose(res.mean, det.mean_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.scale, det.scale_, rtol=1e-12)
    for a, b in zip(det.history_, res.history, strict=True):
        assert b["objective"] == pytest.approx(a["objective"], rel=1e-8)

    # Each gateway's model: its personalised basis as in-process, scores alike.
    assert res.finalized == ["0", "1", "2", "3"]
    for i in range(4):
        m = load(tmp_path / f"gw-{i}.fedep")
        assert projector_distance(m.client_components_[0].T, det.client_components_[i].T) <= 1e-8
        g = np.full(len(Xs[i]), i)
        # the gateway's model knows its file's column names: give it a frame
        Xi = (
            Xs[i]
            if isinstance(Xs[i], pd.DataFrame)
            else pd.DataFrame(Xs[i], columns=m.feature_names_in_)
        )
        np.testing.assert_allclose(
            m.decision_function(Xi, groups=g),
            det.decision_function(Xs[i], groups=g),
            rtol=1e-6,
            atol=1e-9,
        )

    # The kept records' moments ride on the cut replies: no separate moments exchange
    # while the gateways stay (none leaves here).
    ops = [m.metadata.group_id for _, m in grid.sent if m.metadata.message_type == "query.trim"]
    assert "trim-cut" in ops and "trim-moments" not in ops

    # The trimming exchanges carry counts and sums: no record, no per-record array.
    n = X.shape[1]
    replies = [(nid, m) for nid, m in grid.sent if m.metadata.message_type == "query.trim"]
    assert replies
    for nid, msg in replies:
        Xi = det._transform_input(Xs[int(cfgs[grid.node_ids.index(nid)]["client-label"])])
        for rec in msg.content.array_records.values():
            for name, arr in rec.items():
                a = arr.numpy()
                assert Xi.shape[0] not in a.shape, (name, a.shape)
                if a.shape == (n,):
                    assert np.abs(Xi - a).max(axis=1).min() > 1e-9, name  # not a record


def test_a_bad_trim_value_is_refused_before_any_message(tmp_path):
    from fedep.flower import DEFAULT_RUN_CONFIG

    # derived from the estimators' parameter table like every other key
    assert {"trim-steps", "trim-share", "trim-start", "contamination"} <= set(DEFAULT_RUN_CONFIG)
    for key, bad in (("trim-steps", -1), ("trim-share", 0.7), ("trim-start", "mean")):
        with pytest.raises(InvalidParameterError) as e:
            run_local(_gateways(tmp_path), {"n-components": R, key: bad})
        msg = str(e.value)
        assert "\n" not in msg and key.replace("-", "_") in msg


def test_a_gateway_that_leaves_during_the_rounds_is_left_out_of_later_steps(tmp_path):
    rc = {"n-components": R, "n-rounds": 3, "tol": 0.0, "features": "numeric", "trim-steps": 2}
    rc.update({"trim-share": 0.2, "round-timeout-s": 0.3})
    cfgs = _gateways(tmp_path)[::-1]  # gateway index i holds label i
    res, _ = run_local(cfgs, rc, faults=FaultPlan(vanish={3: 2}))
    assert len(res.trim_history) == 2
    # gone in round 2 of the first fit: every selection counts the other gateways' records
    n = sum(len(x) for x in _pooled(cfgs, "numeric")[0][:3])
    assert [h["n_kept"] for h in res.trim_history] == [n - round(0.2 * n)] * 2
    assert res.finalized == ["0", "1", "2"] and "3" in res.failed


def test_a_gateway_failing_a_count_query_ends_the_run_with_one_line(tmp_path):
    rc = {"n-components": R, "n-rounds": 2, "tol": 0.0, "features": "numeric", "trim-steps": 1}
    cfgs = _gateways(tmp_path)[::-1]
    with pytest.raises(RuntimeError) as e:
        run_local(cfgs, rc, faults=FaultPlan(error_type={2: "query.trim"}))
    msg = str(e.value)
    assert "\n" not in msg and "record trimming" in msg and "gateway 2" in msg


def test_trimming_queries_are_signed_and_verified(tmp_path):
    secret = "hmac:a-shared-trimming-secret"
    cfgs = [{**c, "verify-key": secret} for c in _gateways(tmp_path)]
    rc = {"n-components": R, "n-rounds": 2, "tol": 0.0, "features": "numeric", "trim-steps": 1}
    res, grid = run_local(cfgs, {**rc, "sign-key": secret, "trim-start": "median"})
    assert res.finalized == ["0", "1", "2", "3"] and len(res.trim_history) == 1
    assert any(m.metadata.message_type == "query.trim" for _, m in grid.sent)


def test_a_malformed_trimming_reply_ends_the_run_naming_its_gateway():
    from fedep.flower.gateways import RemoteRecords
    from fedep.flower.transport import Roster

    gw = Roster(order=["a", "b"], node_of={"a": 1, "b": 2}, label_of={1: "a", 2: "b"})
    records = RemoteRecords(None, gw, timeout=1.0, min_clients=1)
    assert records.parse([("a", {"x": 1})], lambda rep: rep["x"]) == [1]
    with pytest.raises(RuntimeError, match="^gateway b sent a malformed record-trimming reply"):
        records.parse([("a", {"x": 1}), ("b", {})], lambda rep: rep["x"])


class _Reply:
    def __init__(self, content):
        self.content = content


def _counting_records(values: dict, lie: dict | None = None):
    """A RemoteRecords whose gateways answer range / count queries from ``values``
    (label -> 1-D array); ``lie[label](counts) -> counts`` falsifies a gateway's counts."""
    from flwr.app import ConfigRecord, RecordDict

    from fedep.flower.gateways import RemoteRecords
    from fedep.flower.messages import to_array_record
    from fedep.flower.transport import Roster

    lie = lie or {}

    class Records(RemoteRecords):
        def ask(self, op, kind, std, params, T=None, **cfg):
            out = []
            for lab, v in values.items():
                if op == "range":
                    rd = {
                        "range": to_array_record(lo=v[:1] * 0 + v.min(), hi=v[:1] * 0 + v.max()),
                        "count": ConfigRecord({"count": len(v)}),
                    }
                else:
                    c = (v[None, :] <= np.atleast_1d(T)[:, None]).sum(axis=1).astype(np.int64)
                    rd = {"counts": to_array_record(c=lie.get(lab, lambda c: c)(c))}
                out.append((lab, _Reply(RecordDict(rd))))
            return out

    labels = list(values)
    gw = Roster(order=labels, node_of={lab: i for i, lab in enumerate(labels)}, label_of={})
    return Records(None, gw, timeout=1.0, min_clients=1)


def test_count_search_over_gateways_finds_the_order_statistic():
    from fedep.core.trimming import order_statistic

    rng = np.random.default_rng(0)
    values = {"a": rng.normal(size=40), "b": rng.normal(3.0, 1.0, size=25)}
    counts = _counting_records(values).counts("dist", None, None, None)
    pooled = np.sort(np.concatenate(list(values.values())))
    assert counts.n == 65
    for k in (1, 13, 33, 65):
        t = order_statistic(counts.le, k, counts.lo, counts.hi)
        assert (pooled <= t).sum() == k and t >= pooled[k - 1]


@pytest.mark.parametrize(
    "lie, says",
    [
        (lambda c: c + 30, "counts above the 20 values it declared"),  # more than it holds
        (lambda c: c[::-1].copy(), "counts that fall as the cut grows"),  # not monotone
    ],
)
def test_a_gateway_lying_in_a_count_search_ends_the_run_naming_it(lie, says):
    from fedep.core.trimming import order_statistic

    rng = np.random.default_rng(1)
    values = {"a": rng.normal(size=30), "b": rng.normal(size=20)}
    counts = _counting_records(values, lie={"b": lie}).counts("dist", None, None, None)
    with pytest.raises(RuntimeError) as e:
        order_statistic(counts.le, 25, counts.lo, counts.hi)
    msg = str(e.value)
    assert msg.startswith("gateway b sent a malformed record-trimming reply") and says in msg


def test_a_cut_reply_whose_moments_disagree_with_its_kept_count_ends_the_run():
    from flwr.app import ConfigRecord, RecordDict

    from fedep.flower.gateways import RemoteRecords
    from fedep.flower.messages import to_array_record
    from fedep.flower.transport import Roster

    def reply(n_kept, n_moments):
        return _Reply(
            RecordDict(
                {
                    "kept": ConfigRecord({"n-kept": n_kept, "kept-sum": 1.0, "changed": 1}),
                    "moments": to_array_record(mean=np.zeros(2), m2=np.ones(2)),
                    "count": ConfigRecord({"count": n_moments, "n-features": 2}),
                }
            )
        )

    class Records(RemoteRecords):
        sent: list = []

        def ask(self, op, kind, std, params, T=None, **cfg):
            self.sent.append(op)
            return [("a", reply(5, 5)), ("b", reply(4, self.b_moments))]

    gw = Roster(order=["a", "b"], node_of={"a": 1, "b": 2}, label_of={})
    ok = Records(None, gw, timeout=1.0, min_clients=1)
    ok.b_moments = 4
    assert ok.cut("ppca", 0.0, 1.0, {}, 0.5, 1)[0] == 9
    assert [m.count for m in ok.kept_moments()] == [5, 4] and ok.sent == ["cut"]
    ok.labels = ["a"]  # a gateway left: the cached moments are stale, ask again
    ok.kept_moments()
    assert ok.sent == ["cut", "moments"]
    bad = Records(None, gw, timeout=1.0, min_clients=1)
    bad.b_moments = 7
    with pytest.raises(RuntimeError, match="^gateway b sent a malformed record-trimming reply"):
        bad.cut("ppca", 0.0, 1.0, {}, 0.5, 1)
