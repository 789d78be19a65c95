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


def test_progress_shows_the_stopping_measure_once_known():
    import io

    from fedep._progress import RoundProgress

    out = io.StringIO()
    p = RoundProgress(2, "fedep", stream=out, tty=False)
    p(1, {"objective": 2.0, "lagrangian_change": None})
    p(2, {"objective": 1.0, "lagrangian_change": 3e-5})
    first, last = out.getvalue().splitlines()
    assert "dL" not in first and "dL=3e-05" in last
