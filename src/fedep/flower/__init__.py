"""FedEP / FedPG over Flower (1.42 Message API): one gateway = one Flower SuperNode.

Three ways to run the same federation:

- in-process (default: the estimators, through :func:`fedep.federation.rounds.run_rounds`);
- Flower apps driven in this process (:func:`run_local`): the real
  :data:`~fedep.flower.server_app.app` and
  :data:`~fedep.flower.client_app.app`, messages through an in-memory grid;
- a deployment: one SuperLink and N SuperNodes as separate processes
  (:mod:`fedep.flower.deployment`, run by the ``fedep federate`` command), the run
  submitted with ``flwr run``.

The modules: :mod:`~fedep.flower.server_app` and :mod:`~fedep.flower.client_app` (the
apps), :mod:`~fedep.flower.messages` (what crosses the network: message types, records,
signatures, sizes), :mod:`~fedep.flower.gateway_data` (a gateway's records from its node
configuration), :mod:`~fedep.flower.local` (the in-memory grid) and
:mod:`~fedep.flower.deployment` (the processes of a deployment on this machine).

Every gateway loads its own records from its node configuration, sends only
model-side quantities (moments, bases, duals, scalar metrics) and writes its
personalised model file at the end. The server side is
:func:`fedep.federation.server.server_round`, the client side
:class:`fedep.core.fedep.FedEPCohort` / :class:`fedep.core.fedpg.FedPGCohort` holding
one client: no second copy of the math.

Running the apps needs ``flwr`` (``pip install fedep[flower]``); the package and
:mod:`~fedep.flower.deployment` import without it (the command line builds its parser
from them).
"""

from __future__ import annotations

import importlib

__all__ = [
    "DEFAULT_RUN_CONFIG",
    "FaultPlan",
    "FederationResult",
    "LocalGrid",
    "run_federation",
    "run_local",
]

# Imported on first use: a ClientApp process imports ``client_app`` through this
# package, and must not pay for the ServerApp's imports (scikit-learn) on every message.
_LAZY = {
    "DEFAULT_RUN_CONFIG": "fedep.flower.server_app",
    "run_federation": "fedep.flower.server_app",
    "FaultPlan": "fedep.flower.local",
    "LocalGrid": "fedep.flower.local",
    "run_local": "fedep.flower.local",
    "FederationResult": "fedep.federation.rounds",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
