"""RoundProgress: bounded plain output, both callback forms."""

import io

import numpy as np

from fedep._progress import MAX_LINES, RoundProgress

REC = {"objective": 1.5, "consensus_residual_rel": 0.01, "time_s": 0.002}


def test_at_most_ten_lines_for_a_100_round_fit_without_tty():
    buf = io.StringIO()
    p = RoundProgress(100, "fedep", stream=buf, tty=False)
    V = np.zeros((3, 2))
    for r in range(1, 101):
        p(r, V, REC)  # the new (round, V, record) form
    p.close()
    lines = buf.getvalue().splitlines()
    assert 2 <= len(lines) <= MAX_LINES == 10
    assert lines[0].startswith("fedep: round 1/100") and "round 100/100" in lines[-1]
    assert p.rounds_seen == 100


def test_early_stop_prints_last_round_on_close():
    buf = io.StringIO()
    p = RoundProgress(100, "x", stream=buf, tty=False)
    for r in range(1, 38):
        p(r, REC)  # the former (round, record) form
    p.close()
    lines = buf.getvalue().splitlines()
    assert "round 37/100" in lines[-1] and len(lines) <= MAX_LINES


def test_short_fit_prints_every_round_and_bar_on_tty():
    buf = io.StringIO()
    p = RoundProgress(3, "fedep", stream=buf, tty=False)
    for r in (1, 2, 3):
        p(r, None, REC)
    assert len(buf.getvalue().splitlines()) == 3
    buf = io.StringIO()
    bar = RoundProgress(3, "fedep", stream=buf, tty=True)
    for r in (1, 2, 3):
        bar(r, np.eye(2), REC)
    bar.close()
    assert "3/3" in buf.getvalue()
