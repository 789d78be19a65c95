"""What secure aggregation allows: the rules, without Flower (the command line checks
them before it starts anything)."""

from __future__ import annotations

__all__ = ["MIN_GATEWAYS", "check_secure_aggregation"]

#: Fewest gateways a secure sum takes: with two, each would learn the other's values
#: from the sum.
MIN_GATEWAYS = 3


def check_secure_aggregation(est) -> None:
    """Refuse (one line) what a server that sees sums only cannot do.

    - ``aggregation="median"`` / ``"trimmed"``: the robust rules need each gateway's
      proposal (distances between them), not their sum;
    - record trimming (``trim_steps > 0``): its count searches start from each
      gateway's smallest and largest value (a minimum and a maximum, not sums) and
      keep per-gateway kept counts;
    - raw tables with ``features="auto"`` (refused at the first contact): the column
      summaries hold category lists and quantile sketches, not sums.

    Per-gateway thresholds stay on the gateways (a finalize reply carries none) and
    the server cannot check a single reply (shapes, orthonormality, ``nu`` out of
    scale): under secure aggregation a gateway that lies is not told apart.
    """
    if est.aggregation != "mean":
        raise ValueError(
            f"secure aggregation gives the server the sum of the gateways' proposals only; "
            f"aggregation={est.aggregation!r} needs each one: use aggregation='mean' or "
            "turn secure aggregation off"
        )
    if int(est.trim_steps) > 0:
        raise ValueError(
            "secure aggregation cannot run record trimming (trim_steps > 0): its count "
            "searches need each gateway's smallest and largest value; set trim_steps=0 "
            "or turn secure aggregation off"
        )
