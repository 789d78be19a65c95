"""What crosses the network, and the gateway's local helpers (data, state).

Message types (ServerApp -> ClientApp), in order:

``query.moments``
    reply: ``ArrayRecord`` ``mean``, ``m2`` (n,), ``MetricRecord`` ``count``,
    ``ConfigRecord`` ``label`` (the gateway's client id) -- per-feature statistics only.
``train.setup``
    content: ``mean``, ``scale`` (n,), the estimator settings; reply: the client's sketch
    ``(n, k)`` when ``init = "oneshot"``, else an acknowledgement.
``train`` (one per round)
    content: ``V`` (n, r) and the round number; reply: ``W``, ``Pi`` (1, n, r), ``nu``
    (1,) and the scalar metrics of :meth:`FedEPCohort.local_round`.
``evaluate.finalize``
    content: the final consensus and the run's history; the gateway writes its
    personalised model file and replies with two thresholds.

No message carries a record or any array with one entry per record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedep.core.fedep import FedEPSettings

__all__ = [
    "DEFAULT_RUN_CONFIG",
    "FlowerRunResult",
    "arrays_of",
    "load_gateway_data",
    "message_nbytes",
    "to_array_record",
]

#: Run configuration of the ServerApp (``[tool.flwr.app.config]``, ``--run-config``).
DEFAULT_RUN_CONFIG: dict[str, Any] = {
    "method": "fedep",
    "n-components": 5,
    "alpha": 1.0,
    "beta": 1e-3,
    "mu": 3.0,
    "nu": 1.0,
    "sparse-corruption": True,
    "penalty-scaling": "relative",
    "consensus-weights": "auto",
    "inner-max-iter": FedEPSettings.inner_max_iter,  # same default as FedEP()
    "lr": 0.0,  # FedPG: 0 means the per-client default step
    "rho": 0.01,
    "local-epochs": 30,
    "n-rounds": 100,
    "tol": 1e-5,
    "client-fraction": 1.0,
    "init": "random",
    "standardize": True,
    "contamination": 0.05,
    "random-state": 0,
    "min-clients": 1,  # fewest replies a round may aggregate
    "min-nodes": 1,  # SuperNodes to wait for before the first message
    "node-wait-s": 60.0,
    "round-timeout-s": 120.0,  # longest wait for the replies of one message round
    "max-misses": 1,  # a gateway that misses this many rounds in a row is left out
    "result-path": "",  # JSON written by the ServerApp (history, basis, participants)
}


@dataclass
class FlowerRunResult:
    """Outcome of a Flower federation (what the ServerApp knows).

    Attributes
    ----------
    V : ndarray of shape (n_features, n_components)
        Final consensus (not orthonormalised).
    components : ndarray of shape (n_components, n_features)
        Its polar factor: the global scoring basis.
    history : list of dict
        One record per round: the fields of :func:`~fedep.federation.server.server_round`
        plus ``participants`` (client labels that answered), ``failed``,
        ``bytes_sent`` / ``bytes_received`` (per client label) and ``time_s``.
    stop_reason : str
    n_rounds : int
    clients : list of str
        Labels of the gateways that joined, in aggregation order.
    mean, scale : ndarray of shape (n_features,)
    setup_bytes : dict
        Bytes of the moments and setup exchanges per client label.
    finalized : list of str
        Gateways that wrote their personalised model.
    """

    V: np.ndarray
    components: np.ndarray
    history: list[dict] = field(default_factory=list)
    stop_reason: str = "max_rounds"
    n_rounds: int = 0
    clients: list[str] = field(default_factory=list)
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    setup_bytes: dict = field(default_factory=dict)
    finalized: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "V": self.V.tolist(),
            "components": self.components.tolist(),
            "history": self.history,
            "stop_reason": self.stop_reason,
            "n_rounds": self.n_rounds,
            "clients": self.clients,
            "mean": None if self.mean is None else self.mean.tolist(),
            "scale": None if self.scale is None else self.scale.tolist(),
            "setup_bytes": self.setup_bytes,
            "finalized": self.finalized,
        }

    @classmethod
    def from_json(cls, d: dict) -> FlowerRunResult:
        return cls(
            V=np.asarray(d["V"], dtype=float),
            components=np.asarray(d["components"], dtype=float),
            history=d["history"],
            stop_reason=d["stop_reason"],
            n_rounds=d["n_rounds"],
            clients=d["clients"],
            mean=None if d.get("mean") is None else np.asarray(d["mean"]),
            scale=None if d.get("scale") is None else np.asarray(d["scale"]),
            setup_bytes=d.get("setup_bytes", {}),
            finalized=d.get("finalized", []),
        )

    @classmethod
    def load(cls, path) -> FlowerRunResult:
        return cls.from_json(json.loads(Path(path).read_text()))


def to_array_record(**arrays: np.ndarray) -> ArrayRecord:
    """An ``ArrayRecord`` of float64/bool numpy arrays, keyed by name."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def arrays_of(rec: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in rec.items()}


def message_nbytes(msg: Message) -> int:
    """Serialised size of a message as Flower ships it (sum of its object contents).

    Counts the payload Flower transfers between SuperLink and SuperNode (content,
    metadata, array chunks); transport framing (gRPC, HTTP/2, TLS) is not included.
    """
    return int(sum(len(o.deflate()) for o in get_all_nested_objects(msg).values()))


def content_nbytes(content: RecordDict) -> int:
    return int(sum(len(o.deflate()) for o in get_all_nested_objects(content).values()))


# ---------------------------------------------------------------------- gateway data
def _cfg_bool(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return bool(v)


def load_gateway_data(node_config: dict) -> tuple[np.ndarray, str, list[str] | None]:
    """The gateway's own training records, from its node configuration.

    Either ``data-path`` (a CSV/Parquet table read by :func:`fedep.data.load_csv`;
    optional ``label-column`` + ``normal-label`` keep the normal rows only,
    ``client-label`` names the gateway, default the file stem), or ``dataset``
    (``nsl-kdd``, ``unsw-nb15``, ``ton-iot``) with ``partition-id`` and
    ``num-partitions``: the normal training rows of the official split, shuffled with
    ``seed`` (default 0), cut to ``max-rows`` (optional, before partitioning) and split
    into ``num-partitions`` contiguous parts (``data-dir`` optional, else
    ``FEDEP_DATA_DIR``). ``synthetic-seed`` with ``partition-id`` draws a synthetic
    gateway (tests, demos).

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
    label : str
        The client id used to order clients on the server (partition ids sort
        numerically).
    feature_names : list of str or None
    """
    cfg = dict(node_config)
    if "data-path" in cfg:
        from fedep.data import load_csv

        path = str(cfg["data-path"])
        tab = load_csv(
            path,
            label_column=cfg.get("label-column") or None,
            normal_label=cfg.get("normal-label") if "normal-label" in cfg else None,
        )
        X = tab.X if tab.y is None else tab.X[tab.y == 0]
        label = str(cfg.get("client-label", Path(path).stem))
        return np.asarray(X, dtype=float), label, list(tab.feature_names)
    if "partition-id" not in cfg:
        raise ValueError(
            "node config needs data-path='file.csv' or partition-id=i num-partitions=d "
            f"(with dataset='nsl-kdd' or synthetic-seed=s); got {sorted(cfg)}"
        )
    pid = int(cfg["partition-id"])
    label = str(cfg.get("client-label", pid))
    if "synthetic-seed" in cfg:
        rng = np.random.default_rng([int(cfg["synthetic-seed"]), pid])
        n = int(cfg.get("n-features", 12))
        rows = int(cfg.get("n-rows", 60 + 17 * pid))
        basis = np.linalg.qr(np.random.default_rng(int(cfg["synthetic-seed"])).normal(size=(n, 3)))[
            0
        ]
        X = rng.normal(size=(rows, 3)) @ basis.T * 3.0 + 0.3 * rng.normal(size=(rows, n))
        X += 0.5 * pid
        return X, label, None
    d = int(cfg["num-partitions"])
    if not 0 <= pid < d:
        raise ValueError(f"partition-id must be in [0, {d}); got {pid}")
    from fedep.data import load_dataset

    ds = load_dataset(
        str(cfg.get("dataset", "nsl-kdd")),
        cfg.get("data-dir") or None,
        feature_set=str(cfg.get("feature-set", "paper")),
    )
    X = ds.X_train[ds.y_train == 0]
    order = np.random.default_rng(int(cfg.get("seed", 0))).permutation(X.shape[0])
    if "max-rows" in cfg:
        order = order[: int(cfg["max-rows"])]
    part = np.array_split(order, d)[pid]
    return X[np.sort(part)], label, list(ds.feature_names)


def sort_labels(labels: list[str]) -> list[str]:
    """Client order: numeric labels numerically, else as strings (like ``np.unique``)."""
    try:
        return sorted(labels, key=lambda s: float(s))
    except ValueError:
        return sorted(labels)


# ---------------------------------------------------------------------- cohort state
def cohort_state(cohort) -> dict[str, np.ndarray]:
    """Every array of a cohort (and of its padded groups): its full local state."""
    out = {f"c.{k}": v for k, v in vars(cohort).items() if isinstance(v, np.ndarray)}
    for i, g in enumerate(getattr(cohort, "groups", [])):
        for k, v in vars(g).items():
            if isinstance(v, np.ndarray):
                out[f"g.{i}.{k}"] = v
    return out


def restore_cohort(cohort, state: dict[str, np.ndarray]) -> None:
    """Put arrays saved by :func:`cohort_state` back into a freshly built cohort."""
    for key, v in state.items():
        parts = key.split(".")
        target = cohort if parts[0] == "c" else cohort.groups[int(parts[1])]
        name = parts[-1]
        if not hasattr(target, name):
            raise ValueError(f"saved cohort state has unknown field {key!r}")
        setattr(target, name, np.array(v))


def bool_cfg(v) -> bool:
    return _cfg_bool(v)
