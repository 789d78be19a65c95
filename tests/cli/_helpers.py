"""Helpers shared by the command-line tests."""

from __future__ import annotations

import pandas as pd

N_FEATURES = 6
FEATURES = [f"f{j}" for j in range(N_FEATURES)]


def frame(X, groups, labels) -> pd.DataFrame:
    """A table with a client column ``host``, a text column ``note`` (some values with
    a comma, so quoted) and a ``label`` column around the features."""
    df = pd.DataFrame(X, columns=FEATURES)
    df.insert(0, "host", [f"gw{g}" for g in groups])
    df.insert(1, "note", ["ok, fine" if i % 5 == 0 else "x" for i in range(len(df))])
    df["label"] = labels
    return df


UNSIGNED = "fedep: warning: model "


def one_error_line(capsys) -> str:
    """The one ``fedep: error:`` line on stderr (fails on anything else)."""
    err = capsys.readouterr().err
    # the one line that says a loaded model is unsigned (tests/cli/test_signing.py)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(UNSIGNED)]
    assert len(lines) == 1, err
    assert lines[0].startswith("fedep: error: "), err
    assert "Traceback" not in err
    return lines[0]
