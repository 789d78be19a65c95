"""What crosses the network, and the gateway's local helpers (data, state).

Message types (ServerApp -> ClientApp), in order:

``query.moments``
    reply: ``ArrayRecord`` ``mean``, ``m2`` (n,), ``MetricRecord`` ``count``,
    ``ConfigRecord`` ``label`` (the gateway's client id) -- per-feature statistics only.
    With ``features = "auto"`` the message carries ``features`` (``{"mode": "auto"}``); a
    gateway holding a raw table (``data-path``) then checks its table and replies
    ``source`` (``kind = "table"``) and its label instead of moments: its features come
    from a :class:`~fedep.features.FeaturePipeline` fitted in the two phases below,
    after which the server asks ``query.moments`` again with ``{"mode": "pipeline",
    "pipeline": <FeaturePipeline.to_dict()>}`` and the gateway replies the moments of
    its transformed table (which it keeps, with the pipeline, for the later phases).
``query.summaries`` (tables only)
    reply: ``ConfigRecord`` ``summary``: ``FeaturePipeline.summarize(frame).to_dict()``
    as JSON -- column summaries (counts, moments, sketches, top categories), no record.
``query.feature_moments`` (tables only)
    content: the pipeline with its column decisions (``to_dict()`` JSON); reply:
    ``mean``, ``m2`` (n_out,) and ``count`` of the gateway's encoded features.
``query.gram`` (``n-components`` "auto" only)
    content: ``mean``, ``scale`` (n,); reply: ``ArrayRecord`` ``G`` (n, n) = ``Z^T Z`` of
    the gateway's standardised records and ``count`` -- second moments, no record; the
    server chooses the rank from their sum (:func:`fedep.core.rank.choose_rank`).
``query.trim`` (``trim-steps`` > 0 only; record trimming, :mod:`fedep.core.trimming`)
    content: ``trim`` (JSON: ``op``, the ``kind`` of per-record values, ``cut``,
    ``min-rows``, ``center``), the standardisation ``mean``, ``scale`` (n,), the model
    ``params`` (``V`` (n, r), ``lam`` (r,), ``sigma2``, or the coordinate-wise
    ``median`` (n,)) and candidate cuts ``T`` ((c,), or (n, c) per feature); reply:
    counts of the gateway's values at or below each cut (same shape as ``T``), its
    count and smallest / largest value (``range``), its kept count and sums
    (``ppca-sums``: ``sum t_k^2`` (r,), residual energy; ``cut``: kept count, sum of
    kept values, whether its kept set changed, and the moments of its kept records,
    which spares the next ``moments`` exchange) or the moments of its kept records.
    The kept set stays on the gateway.
``train.setup``
    content: ``mean``, ``scale`` (n,), the estimator settings with the rank and its
    reason; reply: the client's sketch ``(n, k)`` (of its kept records) when ``init =
    "oneshot"``, else an acknowledgement. With record trimming the setup and the
    ``train`` rounds run once per concentration step, on the kept records, from the
    merge of their sketches, as in-process (warm-started at the previous step's
    consensus only when the kept records are unchanged or ``init="random"``:
    ``_warm_start``).
``train`` (one per round)
    content: ``V`` (n, r) and the round number; reply: ``W``, ``Pi`` (1, n, r), ``nu``
    (1,) and the scalar metrics of :meth:`FedEPCohort.local_round`. In FedEP's first
    rounds (``remerge``, :func:`fedep.federation.rounds.run_rounds`) the round config
    also holds ``restart`` (restart the ADMM at ``V``) and ``sketch-rank`` ``k``; the
    reply then adds ``sketch`` (1, n, k), the one-shot sketch of the gateway's cleaned
    records ``X_i - S_i`` (from its n x n Gram matrix; no record).
``evaluate.finalize``
    content: the final consensus and the run's history; the gateway writes its
    personalised model file (with its feature pipeline) and replies with two thresholds.

No message carries a record or any array with one entry per record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedep._errors import one_line

__all__ = [
    "GatewayDataError",
    "arrays_of",
    "holds_table",
    "load_gateway_data",
    "load_gateway_table",
    "message_nbytes",
    "to_array_record",
]


def to_array_record(**arrays: np.ndarray) -> ArrayRecord:
    """An ``ArrayRecord`` of float64/bool numpy arrays, keyed by name."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def content_digest(content: RecordDict, message_type: str, group_id: str) -> str:
    """SHA-256 over a message's type, group and every record except ``signature``.

    Arrays count by name, dtype, shape and bytes; config and metric records by their
    canonical JSON. What a gateway verifies before it acts on a server message.
    """
    import hashlib
    import json

    h = hashlib.sha256(f"{message_type}\0{group_id}\0".encode())
    for key in sorted(content.keys()):
        if key == "signature":
            continue
        rec = content[key]
        h.update(f"[{key}]".encode())
        if isinstance(rec, ArrayRecord):
            for name, a in sorted(arrays_of(rec).items()):
                a = np.ascontiguousarray(a)
                h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
                h.update(a.tobytes())
        else:
            h.update(json.dumps(dict(rec), sort_keys=True, default=str).encode())
    return h.hexdigest()


def sign_message(msg: Message, key) -> None:
    """Attach a ``signature`` record (Ed25519 or HMAC, :mod:`fedep.modelfile`) to ``msg``."""
    import json

    from flwr.app import ConfigRecord

    from fedep.modelfile.signing import sign_digest

    digest = content_digest(msg.content, msg.metadata.message_type, msg.metadata.group_id)
    msg.content["signature"] = ConfigRecord({"json": json.dumps(sign_digest(digest, key))})


def verify_message(msg: Message, key) -> None:
    """Refuse a server message that is unsigned or altered (ValueError, one line)."""
    import json

    from fedep.modelfile.signing import verify_digest

    if "signature" not in msg.content.config_records:
        raise ValueError(
            f"refused {msg.metadata.message_type} message: not signed (verify-key is set)"
        )
    try:
        block = json.loads(str(msg.content["signature"]["json"]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"refused {msg.metadata.message_type} message: {exc}") from None
    digest = content_digest(msg.content, msg.metadata.message_type, msg.metadata.group_id)
    try:
        verify_digest(block, digest, key)
    except ValueError as exc:
        raise ValueError(f"refused {msg.metadata.message_type} message: {exc}") from None


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
class GatewayDataError(ValueError):
    """The gateway's records cannot be loaded; the message is one line naming the problem."""


def load_gateway_data(node_config: dict) -> tuple[np.ndarray, str, list[str] | None]:
    """The gateway's own training records, from its node configuration.

    Either ``data-path`` (a CSV/Parquet table read by :func:`fedep.data.load_csv`;
    optional ``label-column`` + ``normal-label`` keep the normal rows only,
    ``client-label`` names the gateway, default the file stem), or ``dataset``
    (``nsl-kdd``, ``unsw-nb15``, ``ton-iot``) with ``partition-id`` and
    ``num-partitions``: the normal training rows of the official split, shuffled with
    ``seed`` (default 0), cut to ``max-rows`` (optional, before partitioning) and split
    into ``num-partitions`` contiguous parts (``data-dir`` optional, else
    ``FEDEP_DATA_DIR``), as numeric features when ``feature-set`` is ``'rich'`` or
    ``'paper'`` (``'generic'``, the default, is a raw table: :func:`load_gateway_table`).
    ``synthetic-seed`` with ``partition-id`` draws a synthetic gateway (tests, demos).

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
    label : str
        The client id used to order clients on the server (partition ids sort
        numerically).
    feature_names : list of str or None

    Raises
    ------
    GatewayDataError
        (a ``ValueError``) with a one-line message naming the file, dataset or node
        config key and the problem: a missing or unreadable file, a malformed table, no
        rows, non-finite values, a bad node config.
    """
    try:
        X, label, names = _load_gateway_data(dict(node_config))
    except GatewayDataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GatewayDataError(f"gateway data: {one_line(exc)}") from exc
    where = node_config.get("data-path") or node_config.get("dataset") or "synthetic"
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise GatewayDataError(f"gateway data: {where}: no records ({X.shape[0]} rows)")
    if not np.isfinite(X).all():
        raise GatewayDataError(f"gateway data: {where}: non-finite values (NaN or inf)")
    return X, label, names


def holds_table(node_config: dict) -> bool:
    """Whether the gateway's records are a raw table (``data-path``, or a partition of an
    official dataset with ``feature-set='generic'``, the default) rather than numeric
    features (a partition with ``feature-set`` ``'rich'`` or ``'paper'``, a synthetic
    gateway)."""
    cfg = dict(node_config)
    return "data-path" in cfg or (_is_partition(cfg) and _feature_set(cfg) == "generic")


def _is_partition(cfg: dict) -> bool:
    """A partition of an official dataset (not a file, not a synthetic gateway)."""
    return "data-path" not in cfg and "partition-id" in cfg and "synthetic-seed" not in cfg


def _feature_set(cfg: dict) -> str:
    from fedep._names import DATASET_FEATURE_SETS, DEFAULT_FEATURE_SET

    fs = str(cfg.get("feature-set", DEFAULT_FEATURE_SET))
    if fs not in DATASET_FEATURE_SETS:
        raise GatewayDataError(
            f"gateway data: feature-set must be one of {', '.join(DATASET_FEATURE_SETS)}; "
            f"got {fs!r}"
        )
    return fs


def _table_label(cfg: dict, path: str) -> str:
    from fedep.data.readers import gateway_id

    return str(cfg.get("client-label", gateway_id(path)))


def load_gateway_table(node_config: dict):
    """The gateway's raw training table (``data-path``, or an official dataset's
    partition with ``feature-set='generic'``: the rows :func:`load_gateway_data` would
    give, every column but the labels), for the feature pipeline.

    The file is read by :func:`fedep.data.read_table` (CSV/TSV, Zeek TSV or JSON logs,
    Parquet, Arrow; node config ``format``, ``delimiter`` and ``infinity`` as its
    options). With ``label-column`` the rows labelled as attacks are dropped (labels 0/1,
    or every value but ``normal-label``) and the column is removed: it is never a
    feature. The table stays on the gateway.

    Returns
    -------
    frame : DataFrame of shape (n_rows, n_columns)
        Index ``0 .. n_rows-1``.
    label : str
        The client id (``client-label``, default the file name without its suffixes).

    Raises
    ------
    GatewayDataError
        One line naming the file and the problem (missing or unreadable file, no rows,
        a bad label column, a file that is not a table).
    """
    cfg = dict(node_config)
    if _is_partition(cfg):
        return _partition_table(cfg)
    path = str(cfg.get("data-path", ""))
    try:
        df = _load_gateway_table(cfg, path)
    except GatewayDataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GatewayDataError(f"gateway data: {one_line(exc)}") from exc
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise GatewayDataError(
            f"gateway data: {path}: no records ({df.shape[0]} rows, {df.shape[1]} columns)"
        )
    return df, _table_label(cfg, path)


def _load_gateway_table(cfg: dict, path: str):
    from fedep.data.readers import read_table

    if not Path(path).is_file():
        raise GatewayDataError(f"gateway data: {path}: no such file")
    kw = {k.replace("-", "_"): str(cfg[k]) for k in ("format", "delimiter", "infinity") if k in cfg}
    df = read_table(path, **kw)
    # A binary file read as text gives control characters in the header: not a table.
    bad = [c for c in map(str, df.columns) if any(ord(ch) < 32 for ch in c)]
    if bad:
        raise GatewayDataError(
            f"gateway data: {path}: not a flow table (control characters in column {bad[0]!r})"
        )
    col = cfg.get("label-column") or None
    if "normal-label" in cfg and col is None:
        raise GatewayDataError(f"gateway data: {path}: normal-label needs label-column")
    if col is not None:
        col = str(col)
        if col not in df.columns:
            raise GatewayDataError(
                f"gateway data: {path}: label-column {col!r} is not a column "
                f"(columns: {[str(c) for c in df.columns]})"
            )
        from fedep.cli.training import labels_of

        y = labels_of(df[col], cfg.get("normal-label"), path, col)
        df = df.loc[y == 0].drop(columns=[col]).reset_index(drop=True)
    return df


def _load_gateway_data(cfg: dict) -> tuple[np.ndarray, str, list[str] | None]:
    if "data-path" in cfg:
        from fedep.data import load_csv

        path = str(cfg["data-path"])
        if not Path(path).is_file():
            raise GatewayDataError(f"gateway data: {path}: no such file")
        tab = load_csv(
            path,
            label_column=cfg.get("label-column") or None,
            normal_label=cfg.get("normal-label") if "normal-label" in cfg else None,
        )
        X = tab.X if tab.y is None else tab.X[tab.y == 0]
        label = _table_label(cfg, path)
        return np.asarray(X, dtype=float), label, list(tab.feature_names)
    if "partition-id" not in cfg:
        raise GatewayDataError(
            "gateway data: node config needs data-path='file.csv' or partition-id=i "
            f"num-partitions=d (with dataset='nsl-kdd' or synthetic-seed=s); got {sorted(cfg)}"
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
    _partition_index(cfg)
    fs = _feature_set(cfg)
    if fs == "generic":
        raise GatewayDataError(
            f"gateway data: dataset {cfg.get('dataset', 'nsl-kdd')}: feature-set 'generic' "
            "is the raw table through the feature pipeline (run config features='auto', "
            "the default); feature-set 'rich' or 'paper' gives numeric features"
        )
    ds, rows = _partition_rows(cfg, fs)
    return ds.X_train[rows], label, list(ds.feature_names)


def _partition_rows(cfg: dict, feature_set: str):
    """The official dataset and the training rows of partition ``partition-id``: the
    normal rows, shuffled with ``seed``, cut to ``max-rows``, split into
    ``num-partitions`` contiguous parts (in file order within a part)."""
    from fedep.data import load_dataset

    pid, d = _partition_index(cfg)
    ds = load_dataset(
        str(cfg.get("dataset", "nsl-kdd")), cfg.get("data-dir") or None, feature_set=feature_set
    )
    normal = np.flatnonzero(ds.y_train == 0)
    order = np.random.default_rng(int(cfg.get("seed", 0))).permutation(normal.size)
    if "max-rows" in cfg:
        order = order[: int(cfg["max-rows"])]
    return ds, normal[np.sort(np.array_split(order, d)[pid])]


def _partition_index(cfg: dict) -> tuple[int, int]:
    """``(partition-id, num-partitions)``, checked."""
    if "num-partitions" not in cfg:
        raise GatewayDataError("gateway data: partition-id needs num-partitions")
    pid, d = int(cfg["partition-id"]), int(cfg["num-partitions"])
    if not 0 <= pid < d:
        raise GatewayDataError(f"gateway data: partition-id must be in [0, {d}); got {pid}")
    return pid, d


def _partition_table(cfg: dict):
    """The raw training table of an official dataset's partition (``feature-set``
    ``'generic'``): the same rows as :func:`_partition_rows`, every column but the labels,
    as the gateway's own file would hold them."""
    try:
        # the cheap paper matrix carries the labels and the row order of the raw table
        ds, rows = _partition_rows(cfg, "paper")
    except GatewayDataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GatewayDataError(f"gateway data: {one_line(exc)}") from exc
    df = ds.raw_inputs()[0].iloc[rows].reset_index(drop=True)
    return df, str(cfg.get("client-label", cfg["partition-id"]))


def sort_labels(labels: list[str]) -> list[str]:
    """Client order: numeric labels numerically, else as strings (like ``np.unique``)."""
    try:
        return sorted(labels, key=lambda s: float(s))
    except ValueError:
        return sorted(labels)
