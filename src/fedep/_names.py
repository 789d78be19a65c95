"""Names shared by every surface (Python, CLI, Flower node config, reproduction).

Kept free of imports so that the command line can offer them as choices without loading
NumPy or pandas; :mod:`fedep.data` re-exports them.
"""

from __future__ import annotations

#: The official datasets (:func:`fedep.data.load_dataset`).
DATASETS = ("nsl-kdd", "unsw-nb15", "ton-iot")

#: How a table's rows are split into gateways (:func:`fedep.data.make_client_split`).
PARTITIONS = ("sorted", "dirichlet", "iid")

#: The hand-written feature specifications of the official datasets.
FEATURE_SETS = ("paper", "rich")

#: Every way to feed an official dataset to a detector: a hand-written specification of
#: :data:`FEATURE_SETS`, or ``"generic"``: its raw table (label columns removed) through
#: the estimator's feature pipeline, as a user's own file would go. ``"generic"`` is the
#: default wherever one is chosen (``--feature-set``, the node config's ``feature-set``).
DATASET_FEATURE_SETS = ("paper", "rich", "generic")
DEFAULT_FEATURE_SET = "generic"
