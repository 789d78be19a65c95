"""Outputs are atomic: a failed write leaves the previous model intact."""

from __future__ import annotations

import errno
import os

import numpy as np
import pandas as pd

from fedep.cli import main


def test_full_disk_keeps_the_old_model(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.normal(size=(200, 4)), columns=list("abcd")).to_csv(
        tmp_path / "t.csv", index=False
    )
    model = tmp_path / "m.fedep"
    argv = ["fit", "--train", str(tmp_path / "t.csv"), "--method", "pca", "--n-components", "2",
            "--out", str(model), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    good = model.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    capsys.readouterr()
    assert main([*argv[:-3], "--random-state", "3", "--out", str(model), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "No space left" in err and len(err.splitlines()) == 1
    assert model.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.fedep", "t.csv"]


def test_unwritable_output_is_found_before_training(tmp_path, capsys):
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.normal(size=(50, 3)), columns=list("abc")).to_csv(
        tmp_path / "t.csv", index=False
    )
    (tmp_path / "dir.fedep").mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (tmp_path / "dir.fedep", blocker / "m.fedep"):
        capsys.readouterr()
        assert main(["fit", "--train", str(tmp_path / "t.csv"), "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert str(out.name) in err or str(out.parent) in err
        assert "training" not in err
