"""``fedep warmup`` compiles what ``fit`` and ``score`` call, quietly when asked."""

from __future__ import annotations

import sys

from fedep.cli import main, warmup
from fedep.core import _kernels
from fedep.data import _tails


def test_warmup_compiles_the_fit_and_score_kernels(capsys):
    assert main(["warmup", "--quiet"]) == 0
    out = capsys.readouterr()
    assert out.out == ""
    if _kernels.HAVE_NUMBA:
        for kernel in (_kernels.manpg_clients, _kernels.fused_data_step, _tails._write_kernel):
            assert kernel.signatures
    assert main(["warmup"]) == 0
    assert capsys.readouterr().out.startswith(("kernels ready (", "numba is not installed"))


def test_warmup_prints_no_model_warning_whatever_the_signing_settings(capsys, monkeypatch):
    # a user who requires signed models with a key of their own: the warm-up signs its
    # throw-away model itself and says nothing about it
    monkeypatch.setenv("FEDEP_REQUIRE_SIGNATURE", "1")
    monkeypatch.setenv("FEDEP_VERIFY_KEY", "hmac:the-users-own-secret")
    assert main(["warmup", "--quiet"]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "")


def test_a_failed_warm_up_fit_is_one_line(capsys, monkeypatch):
    def failing(argv):
        print("fedep: error: disk full", file=sys.stderr)
        return 1

    monkeypatch.setattr(warmup, "main", failing)
    assert main(["warmup", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "fedep: error: the warm-up fit and score failed: disk full"
