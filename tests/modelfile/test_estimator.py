"""Fitted detectors to model files and back: the mapping, its checks, one definition."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import fedep
from fedep import FedEP, FedPG, LocalPCA, OneShotPCA, PooledPCA
from fedep.data import make_federated_data
from fedep.detectors import FITTED_ARRAYS, STATE_ARRAYS
from fedep.modelfile import ModelFileError, read_model_file, write_model_file

ALL = [FedEP, FedPG, PooledPCA, LocalPCA, OneShotPCA]


@pytest.fixture(scope="module")
def data():
    return make_federated_data(n_clients=5, n_features=12, n_samples=60, random_state=0)


def _fit(cls, data, **kw):
    extra = {"n_rounds": 5, "tol": 0.0} if cls in (FedEP, FedPG) else {}
    return cls(n_components=3, random_state=0, **extra, **kw).fit(
        data.X_train, groups=data.groups_train
    )


@pytest.mark.parametrize("cls", ALL)
def test_round_trip_is_exact(cls, data, tmp_path):
    det = _fit(cls, data)
    path = tmp_path / "m.fedep"
    fedep.save(det, path)
    back = fedep.load(path)
    assert type(back) is cls
    assert back.get_params() == det.get_params()
    for name in FITTED_ARRAYS:
        np.testing.assert_array_equal(getattr(back, name), getattr(det, name), err_msg=name)
    assert back.threshold_ == det.threshold_
    for g in (None, data.groups_test):
        np.testing.assert_array_equal(
            back.decision_function(data.X_test, g), det.decision_function(data.X_test, g)
        )
        np.testing.assert_array_equal(back.predict(data.X_test, g), det.predict(data.X_test, g))
    if cls in (FedEP, FedPG):
        assert back.history_ == json.loads(json.dumps(det.history_))
        assert back.n_iter_ == det.n_iter_ == 5
    state = [a for a in STATE_ARRAYS if hasattr(det, a)]
    assert len(state) == {FedEP: 3, FedPG: 2}.get(cls, 0)
    for name in state:
        np.testing.assert_array_equal(getattr(back, name), getattr(det, name), err_msg=name)
    assert back.lineage_ == det.lineage_
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
    assert names == {"__meta__.json", *(f"{a}.npy" for a in (*FITTED_ARRAYS, *state))}


def test_feature_names_and_string_clients_survive(data, tmp_path):
    import pandas as pd

    frame = pd.DataFrame(data.X_train, columns=[f"f{i}" for i in range(12)])
    groups = np.array([f"gw-{g}" for g in data.groups_train])
    det = PooledPCA(n_components=3).fit(frame, groups=groups)
    fedep.save(det, tmp_path / "m.fedep")
    back = fedep.load(tmp_path / "m.fedep")
    assert list(back.feature_names_in_) == list(frame.columns)
    assert back.clients_.tolist() == det.clients_.tolist()
    g = groups[:10]
    np.testing.assert_array_equal(back.predict(frame[:10], g), det.predict(frame[:10], g))


def _rewrite(path, out, edit):
    """Re-write a model file with edited content and VALID digests (a forger's file)."""
    meta, arrays = read_model_file(path)
    edit(meta, arrays)
    write_model_file(out, meta, arrays)
    return out


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m, a: m["scalars"].update(threshold_=-1.0), "non-finite or negative"),
        (lambda m, a: m["params"].update(n_components=4), "components for n_components=4"),
        (lambda m, a: m["params"].update(alpha=-2.0), "alpha"),
        (lambda m, a: m["params"].update(unknown=1), "unknown"),
        (lambda m, a: m.update({"class": "os.system"}), "unknown detector class"),
        (lambda m, a: m.pop("scalars"), "missing 'scalars'"),
        (lambda m, a: a.pop("scale_"), "lacks the array"),
        (lambda m, a: a.update(scale_=np.zeros(12)), "non-finite or negative"),
        (lambda m, a: a.update(mean_=np.zeros(11)), "shapes are inconsistent"),
        (lambda m, a: m.update(feature_names_in_=["a"]), "feature names"),
    ],
)
def test_consistent_but_wrong_content_is_refused(data, tmp_path, edit, match):
    det = _fit(FedEP, data)
    fedep.save(det, tmp_path / "m.fedep")
    bad = _rewrite(tmp_path / "m.fedep", tmp_path / "bad.fedep", edit)
    with pytest.raises(ModelFileError, match=match) as info:
        fedep.load(bad)
    assert "bad.fedep" in str(info.value) and "\n" not in str(info.value)


def test_altered_and_truncated_files_are_refused(data, tmp_path):
    det = _fit(PooledPCA, data)
    path = tmp_path / "m.fedep"
    fedep.save(det, path)
    raw = path.read_bytes()
    (tmp_path / "trunc.fedep").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelFileError, match="trunc.fedep"):
        fedep.load(tmp_path / "trunc.fedep")
    with pytest.raises(ModelFileError, match="nope.fedep"):
        fedep.load(tmp_path / "nope.fedep")
    (tmp_path / "junk.fedep").write_bytes(b"not a model")
    with pytest.raises(ModelFileError, match="junk.fedep"):
        fedep.load(tmp_path / "junk.fedep")


def test_signed_models(data, tmp_path):
    det = _fit(PooledPCA, data)
    secret = "hmac:" + "s" * 32
    fedep.save(det, tmp_path / "s.fedep", sign_key=secret)
    back = fedep.load(tmp_path / "s.fedep", verify_key=secret, require_signature=True)
    np.testing.assert_array_equal(back.components_, det.components_)
    fedep.save(det, tmp_path / "u.fedep")
    with pytest.raises(ModelFileError, match="not signed"):
        fedep.load(tmp_path / "u.fedep", verify_key=secret, require_signature=True)
    with pytest.raises(ModelFileError, match="signature"):
        fedep.load(tmp_path / "s.fedep", verify_key="hmac:" + "t" * 32)


def test_persistence_imports_the_estimators_never_the_reverse():
    import ast
    import pathlib

    src = pathlib.Path(fedep.__file__).parent
    names = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for f in sorted((src / "detectors").glob("*.py"))
        for n in ast.walk(ast.parse(f.read_text()))
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert "fedep.detectors.base" in names
    assert not any("persistence" in (m or "") or "modelfile" in (m or "") for m in names)


@pytest.mark.parametrize("cls", [FedEP, PooledPCA, OneShotPCA])
def test_automatic_rank_round_trip(cls, data, tmp_path):
    extra = {"n_rounds": 3, "tol": 0.0} if cls is FedEP else {}
    det = cls(random_state=0, **extra).fit(data.X_train, groups=data.groups_train)
    assert det.n_components == "auto" and det.rank_reason_.startswith(f"r={det.n_components_}:")
    fedep.save(det, tmp_path / "m.fedep")
    meta, _ = read_model_file(tmp_path / "m.fedep")
    assert meta["params"]["n_components"] == "auto"
    assert meta["scalars"]["n_components_"] == det.n_components_
    back = fedep.load(tmp_path / "m.fedep")
    assert back.n_components == "auto"
    assert (back.n_components_, back.rank_reason_) == (det.n_components_, det.rank_reason_)
    assert back.components_.shape == (det.n_components_, 12)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m, a: m["scalars"].update(n_components_=3), "n_components='auto'"),
        (lambda m, a: m["scalars"].update(rank_reason_=""), "rank_reason_"),
        (lambda m, a: m["scalars"].update(rank_reason_=3), "rank_reason_"),
        (lambda m, a: a.update(components_=a["components_"][:1]), "components"),
    ],
)
def test_inconsistent_automatic_rank_is_refused(data, tmp_path, edit, match):
    det = PooledPCA().fit(data.X_train, groups=data.groups_train)
    assert det.n_components_ == 2  # heavy sparse corruption hides weaker directions
    fedep.save(det, tmp_path / "m.fedep")
    bad = _rewrite(tmp_path / "m.fedep", tmp_path / "bad.fedep", edit)
    with pytest.raises(ModelFileError, match=match):
        fedep.load(bad)


def test_files_without_the_fitted_rank_load_with_the_given_one(data, tmp_path):
    # Model files written before n_components="auto" hold no n_components_.
    det = _fit(PooledPCA, data)
    fedep.save(det, tmp_path / "m.fedep")

    def drop(meta, arrays):
        meta["scalars"].pop("n_components_")
        meta["scalars"].pop("rank_reason_")

    back = fedep.load(_rewrite(tmp_path / "m.fedep", tmp_path / "old.fedep", drop))
    assert back.n_components_ == 3 and back.rank_reason_ == "r=3: n_components=3 given"


@pytest.mark.parametrize(("cls", "reason"), [(FedEP, "stationary"),
                                             (FedPG, "objective_stationary")])  # fmt: skip
def test_files_from_before_the_named_stop_reasons_load_with_todays_name(
    cls, reason, data, tmp_path
):
    # Earlier versions wrote stop_reason_ = "converged" for a fit that met tol.
    det = _fit(cls, data)
    fedep.save(det, tmp_path / "m.fedep")

    def older(meta, arrays):
        meta["scalars"]["stop_reason_"] = "converged"

    old = _rewrite(tmp_path / "m.fedep", tmp_path / "old.fedep", older)
    assert fedep.load(old).stop_reason_ == reason
    assert fedep.load(tmp_path / "m.fedep").stop_reason_ == "max_rounds"  # others kept


@pytest.mark.parametrize("bad", [None, 3, b"m.fedep"])
def test_a_path_that_is_not_a_path_is_one_clear_type_error(data, bad):
    det = _fit(PooledPCA, data)
    with pytest.raises(TypeError, match="model file's path must be a str or os.PathLike"):
        fedep.load(bad)
    with pytest.raises(TypeError, match="model file's path must be a str or os.PathLike"):
        fedep.save(det, bad)
