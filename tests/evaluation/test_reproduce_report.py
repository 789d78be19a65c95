"""Report sections: setup lines, ROC notes, no references outside the repository."""

import inspect

from fedep.evaluation.reproduce import report
from fedep.evaluation.reproduce.report import roc_notes, setup_section


def test_roc_notes_name_coinciding_curves_and_operating_points():
    c = {"fpr": [0.0, 0.5, 1.0], "tpr": [0.0, 0.8, 1.0], "roc_auc": 0.8}
    roc = {
        "ton-iot": {
            "FedEP": {**c, "operating_point": {"fpr": 0.05, "tpr": 0.4}},
            "FedPG": {**c, "tpr": [0.0, 0.805, 1.0], "operating_point": {"fpr": 0.06, "tpr": 0.41}},
            "PooledPCA": {**c, "tpr": [0.0, 0.6, 1.0]},
        }
    }
    text = roc_notes(roc)
    assert "FedEP and FedPG" in text and "one hides the other" in text
    assert "PooledPCA and" not in text and "and PooledPCA" not in text
    assert "FedEP FPR 5.0 % / TPR 40.0 %" in text


def test_setup_section_has_per_dataset_split_lines():
    info = {
        "n_train": 100,
        "n_val": 30,
        "val_attack_share": 0.1,
        "n_test": 50,
        "test_attack_share": 0.5,
        "n_features": 7,
        "fallback": None,
    }
    res = {
        "config": {
            "n_clients": 20,
            "rank": 5,
            "seeds": [0],
            "max_train_rows": 100,
            "max_val_rows": 30,
            "n_rounds": 10,
        },
        "data": {"splits": {"nsl-kdd": {"clean": info, "contaminated": info}}},
    }
    text = "".join(setup_section(res))
    assert "- nsl-kdd/clean: 100 train, 30 validation (10.0 % attacks), 50 test" in text
    assert "- nsl-kdd/contaminated:" in text


def test_report_writer_cites_no_notes_file():
    assert "NOTES" not in inspect.getsource(report)
