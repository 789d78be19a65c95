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


def test_outputs_that_would_destroy_an_input_or_a_special_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    train = tmp_path / "t.csv"
    pd.DataFrame(rng.normal(size=(60, 3)), columns=list("abc")).to_csv(train, index=False)
    data = train.read_bytes()
    fit = ["fit", "--train", str(train), "--method", "pca", "--n-components", "1", "--quiet"]
    # the training file itself (also through a symbolic link)
    link = tmp_path / "link.csv"
    link.symlink_to(train)
    for out in (train, link):
        capsys.readouterr()
        assert main([*fit, "--out", str(out)]) == 1
        err = capsys.readouterr().err.strip()
        assert err.endswith(f"--out must differ from --train ({str(train)!r})"), err
    assert train.read_bytes() == data
    model = tmp_path / "m.fedep"
    assert main([*fit, "--out", str(model)]) == 0
    saved = model.read_bytes()
    score = ["score", "--model", str(model), "--input", str(train)]
    capsys.readouterr()
    assert main([*score, "--output", str(model)]) == 1
    assert "--output must differ from --model" in capsys.readouterr().err
    assert model.read_bytes() == saved
    # a FIFO (and a device such as /dev/null) is not replaced by a regular file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for argv in ([*fit, "--out", str(fifo)], [*score, "--output", str(fifo)]):
        capsys.readouterr()
        assert main(argv) == 1
        assert "exists and is not a regular file" in capsys.readouterr().err
    assert not fifo.is_file() and fifo.exists()


def test_atomic_write_refuses_a_special_file(tmp_path):
    import pytest

    from fedep._atomic import atomic_write

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"), atomic_write(fifo) as fh:
        fh.write(b"x")
    assert not fifo.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]
