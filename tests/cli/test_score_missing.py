"""``fedep score`` names a model column that no input row holds a value in (the
pipeline imputes it): one warning per column and run, every row still written."""

from __future__ import annotations

import pandas as pd
import pytest

from fedep.cli import main

from ._helpers import UNSIGNED


def _warnings(err: str) -> list[str]:
    # the column warnings (not the one that says the model is unsigned)
    return [
        ln
        for ln in err.splitlines()
        if ln.startswith("fedep: warning: ") and not ln.startswith(UNSIGNED)
    ]


@pytest.mark.parametrize("fmt", ["csv", "tsv"])  # the streamed path and the table path
@pytest.mark.parametrize("chunksize", ["7", "100000"])
def test_all_missing_column_warns_once(files, tmp_path, capsys, fmt, chunksize):
    df = pd.read_csv(files.test, dtype=str, keep_default_na=False)
    df["f1"] = ""  # every value missing
    df.loc[::2, "f2"] = "-"  # some missing: no warning
    inp = tmp_path / f"in.{fmt}"
    df.to_csv(inp, index=False, sep="," if fmt == "csv" else "\t")
    out = tmp_path / "out.csv"
    capsys.readouterr()
    args = ["score", "--model", str(files.model), "--input", str(inp), "--output", str(out)]
    assert main([*args, "--quiet", "--chunksize", chunksize]) == 0
    err = capsys.readouterr().err
    assert _warnings(err) == [
        f"fedep: warning: {inp}: column 'f1' is missing in every row; the model imputes "
        "it (scores may be meaningless for it)"
    ], err
    assert "Traceback" not in err
    assert len(pd.read_csv(out)) == len(df)


def test_no_warning_when_every_column_has_values(files, tmp_path, capsys):
    out = tmp_path / "out.csv"
    capsys.readouterr()
    args = ["score", "--model", str(files.model), "--input", str(files.test)]
    assert main([*args, "--output", str(out), "--chunksize", "7"]) == 0
    assert _warnings(capsys.readouterr().err) == []
