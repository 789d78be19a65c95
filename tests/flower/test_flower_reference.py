"""A trusted reference and analyst feedback over Flower: the in-process fit's result,
from aggregates only (no reference record, score or label leaves its gateway)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr")

from fedep import load  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.detectors import FedEP  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.checks import check_subset_sums  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data  # noqa: E402

R, N_FEAT = 3, 10


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(tmp_path, d=4, seed=5):
    """Gateways holding CSV tables with 15 % of a tight attack cluster, a file of
    trusted normal records each (the last gateway has none) and a feedback file."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.standard_normal((N_FEAT, 3)))[0]
    center = np.r_[np.full(4, 5.0), np.zeros(N_FEAT - 4)]
    cols = [f"f{j}" for j in range(N_FEAT)]

    def normal(m):
        return (rng.standard_normal((m, 3)) * [3.0, 2.0, 1.5]) @ B.T + 0.3 * rng.standard_normal(
            (m, N_FEAT)
        )

    cfgs, refs, truth = [], [], []
    for i in range(d):
        m = 120 + 13 * i
        k = int(0.15 * m)
        X = normal(m)
        X[:k] = center + 0.05 * rng.standard_normal((k, N_FEAT))
        path = tmp_path / f"gw-{i}.csv"
        pd.DataFrame(X, columns=cols).to_csv(path, index=False)
        cfg = {
            "data-path": str(path),
            "client-label": str(i),
            "model-path": str(tmp_path / f"gw-{i}.fedep"),
        }
        if i < d - 1:
            Rf = normal(12)
            pd.DataFrame(Rf, columns=cols).to_csv(tmp_path / f"ref-{i}.csv", index=False)
            cfg["reference-path"] = str(tmp_path / f"ref-{i}.csv")
            refs.append(Rf)
        else:
            refs.append(np.empty((0, N_FEAT)))
        # two confirmed attacks and one confirmed false positive per gateway
        fb = tmp_path / f"fb-{i}.csv"
        fb.write_text(f"row,label\n0,attack\n1,attack\n{m - 1},benign\n")
        cfg["feedback-path"] = str(fb)
        cfgs.append(cfg)
        truth.append(np.r_[np.ones(k, bool), np.zeros(m - k, bool)])
    return cfgs[::-1], refs, truth


def test_reference_and_feedback_over_flower_are_the_inprocess_fit(tmp_path):
    params = {"n_components": R, "tol": 0.0, "random_state": 4, "features": "numeric",
              "n_rounds": 4, "contamination": "auto", "init": "random"}  # fmt: skip
    cfgs, refs, _ = _gateways(tmp_path)
    rc = {"method": "fedep", **{k.replace("_", "-"): v for k, v in params.items()}}
    res, grid = run_local(cfgs, rc)

    by_label = sorted(cfgs, key=lambda c: int(c["client-label"]))
    Xs = [load_gateway_data(c)[0] for c in by_label]
    X = np.vstack(Xs)
    groups = np.repeat(np.arange(len(Xs)), [len(x) for x in Xs])
    fb = np.full(X.shape[0], "", dtype=object)
    start = np.r_[0, np.cumsum([len(x) for x in Xs])]
    for i, x in enumerate(Xs):
        fb[start[i] + np.array([0, 1])] = "attack"
        fb[start[i] + len(x) - 1] = "benign"
    Rall = np.vstack(refs)
    rg = np.repeat(np.arange(len(refs)), [len(r) for r in refs])
    det = FedEP(**params).fit(X, groups=groups, reference=Rall, reference_groups=rg, feedback=fb)

    assert det.trust_ is not None and det.trust_["n_reference"] == Rall.shape[0]
    assert det.feedback_["attack_labels"] == 8 and det.feedback_["excluded"] >= 8
    # the reference's selection (counts under the reference's PPCA), then one fit
    assert det.n_trim_steps_ == 1 and det.trim_history_[0].get("start") == "reference"
    assert "one fit on the training records" in det.trust_["decision"]
    assert len(res.trim_history) == det.n_trim_steps_
    for a, b in zip(det.trim_history_, res.trim_history, strict=True):
        assert a["n_kept"] == b["n_kept"] and a["share"] == pytest.approx(b["share"], rel=1e-12)
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    # each gateway's model takes the server's reference threshold and share
    for i in range(4):
        m = load(tmp_path / f"gw-{i}.fedep")
        assert m.threshold_ == pytest.approx(det.threshold_, rel=1e-9)
        assert m.contamination_ == pytest.approx(det.contamination_, rel=1e-12)
        assert "reference records" in m.contamination_reason_

    # Only aggregates leave a gateway: no reply carries a reference record, and every
    # array a reference query returns is a count, a sum, a Gram matrix or a range.
    ref_rows = np.vstack([r for r in refs if len(r)])
    for _nid, msg in grid.sent:
        if msg.metadata.message_type != "query.trim" or not msg.has_content():
            continue
        for rec in msg.content.array_records.values():
            for name, arr in rec.items():
                a = np.asarray(arr.numpy(), dtype=float)
                assert a.size <= max(N_FEAT * N_FEAT, 2048), name
                if a.ndim == 2 and a.shape[1] == N_FEAT and name != "gram":
                    # no row of a reply equals a reference record
                    d2 = ((a[:, None, :] - ref_rows[None]) ** 2).sum(-1)
                    assert d2.min() > 1e-12, name


def test_subset_sums_replies_are_checked():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(20, 4))
    count, total, gram = check_subset_sums(20, Z.sum(0), Z.T @ Z, 4, None)
    assert count == 20 and gram.shape == (4, 4)
    with pytest.raises(ValueError, match="sum of squares allows"):
        check_subset_sums(20, Z.sum(0) + 100.0, Z.T @ Z, 4, None)  # no 20 records give it
    with pytest.raises(ValueError, match="not symmetric"):
        check_subset_sums(20, Z.sum(0), Z.T @ Z + np.triu(np.ones((4, 4)), 1), 4, None)
    with pytest.raises(ValueError, match="expected shape"):
        check_subset_sums(20, Z.sum(0)[:3], Z.T @ Z, 4, None)
    with pytest.raises(ValueError, match="declared 19"):
        check_subset_sums(20, Z.sum(0), Z.T @ Z, 4, 19)


def test_benign_modes_over_flower_are_the_inprocess_modes(tmp_path):
    """Confirmed false positives (a benign mode off the subspace, 8 per gateway) give
    every gateway's model the in-process fit's suppression rules, from sums only."""
    rng = np.random.default_rng(11)
    B = np.linalg.qr(rng.standard_normal((N_FEAT, 3)))[0]
    odd = rng.standard_normal(N_FEAT)
    odd -= B @ (B.T @ odd)
    odd *= 2.5 / np.linalg.norm(odd)
    cols = [f"f{j}" for j in range(N_FEAT)]
    cfgs, Xs = [], []
    for i in range(3):
        m = 150 + 10 * i
        X = (rng.standard_normal((m, 3)) * [3.0, 2.0, 1.0]) @ B.T
        X += 0.2 * rng.standard_normal((m, N_FEAT))
        X[:12] += odd + 0.1 * rng.standard_normal((12, N_FEAT))
        path = tmp_path / f"gw-{i}.csv"
        pd.DataFrame(X, columns=cols).to_csv(path, index=False)
        fb = tmp_path / f"fb-{i}.csv"
        fb.write_text("row,label\n" + "".join(f"{j},benign\n" for j in range(8)))
        cfgs.append({"data-path": str(path), "client-label": str(i), "feedback-path": str(fb),
                     "model-path": str(tmp_path / f"gw-{i}.fedep")})  # fmt: skip
        Xs.append(X)
    params = {"n_components": R, "tol": 0.0, "random_state": 4, "features": "numeric",
              "n_rounds": 3, "suppression_rules": True}  # fmt: skip
    rc = {"method": "fedep", **{k.replace("_", "-"): v for k, v in params.items()}}
    res, grid = run_local(cfgs, rc)
    X = np.vstack([load_gateway_data(c)[0] for c in cfgs])
    groups = np.repeat(np.arange(3), [len(x) for x in Xs])
    fb = np.full(X.shape[0], "", dtype=object)
    start = np.r_[0, np.cumsum([len(x) for x in Xs])]
    for i in range(3):
        fb[start[i] : start[i] + 8] = "benign"
    det = FedEP(**params).fit(X, groups=groups, feedback=fb)
    assert res.benign_modes is not None and det.benign_centres_.shape[0] >= 1
    assert 8 <= det.benign_counts_.sum() <= 24  # a gateway's 1-4 nearest a centre withheld
    np.testing.assert_array_equal(res.benign_modes.counts, det.benign_counts_)
    np.testing.assert_allclose(res.benign_modes.centres, det.benign_centres_, atol=1e-8)
    np.testing.assert_allclose(res.benign_modes.radius2, det.benign_radius2_, rtol=1e-8)
    for i in range(3):  # each gateway's model file suppresses with the same rules
        m = load(tmp_path / f"gw-{i}.fedep")
        np.testing.assert_allclose(m.benign_centres_, det.benign_centres_, atol=1e-8)
    # the gateways' benign-mode replies are per-centre counts, sums and Gram matrices
    replies = [
        msg.content["sums"]
        for _n, msg in grid.sent
        if msg.metadata.message_type == "query.trim"
        and msg.has_content()
        and "sums" in msg.content.array_records
        and "grams" in msg.content["sums"]
    ]
    assert replies and all(set(r) == {"counts", "sums", "grams"} for r in replies)
