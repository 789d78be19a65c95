"""``fedep warmup`` compiles what ``fit`` and ``score`` call, quietly when asked."""

from __future__ import annotations

from fedep.cli import main
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
