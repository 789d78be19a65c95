"""Feature sets of the official datasets and their train-only transforms.

Two feature sets per dataset:

``paper``
    The numeric columns the paper uses, untransformed (float64):

    * NSL-KDD, 34 features: the 41 minus ``protocol_type, service, flag, land,
      logged_in, is_host_login, is_guest_login``.
    * UNSW-NB15, 39 features: the 45 columns minus ``id, proto, service, state,
      attack_cat, label``.
    * TON-IoT, 14 features: every column that is numeric in the file except the
      ports (``duration, src_bytes, dst_bytes, missed_bytes, src_pkts, src_ip_bytes,
      dst_pkts, dst_ip_bytes, dns_qclass, dns_qtype, dns_rcode,
      http_request_body_len, http_response_body_len, http_status_code``).

``rich``
    * heavy-tailed non-negative counts (bytes, packets, durations, rates, connection
      counters; fixed per-dataset lists in :data:`FEATURE_SPECS`) become
      ``log1p(x)`` (signed, ``sign(x) * log1p(|x|)``, so that a stray negative value
      cannot produce ``-inf``); the other numeric columns stay as they are;
    * binary 0/1 columns stay 0/1 (NSL-KDD ``land, logged_in, is_host_login,
      is_guest_login``);
    * ``T``/``F``/``-`` flags (TON-IoT ``dns_AA`` ...) become ``T`` -> 1, ``F`` and
      ``-`` -> 0, plus a ``<col>_missing`` indicator that is 1 for ``-``;
    * numeric columns with ``-`` for "absent" (TON-IoT ``http_trans_depth``) become the
      number (``-`` -> 0) plus a ``<col>_missing`` indicator;
    * low-cardinality categoricals are one-hot encoded as ``<col>=<value>``. The
      categories are fitted on the training rows only: the (at most
      ``max_categories``, default 32) most frequent training values, ties broken by
      value. A value outside them -- rare in training, or never seen (test-only) --
      encodes as all zeros. ``-`` (no service etc.) is an ordinary category there.

No identifier or target ever becomes a feature: :data:`FORBIDDEN_COLUMNS` lists them per
dataset (IP addresses and ports -- endpoint identifiers whose values do not transfer
across networks --, free text, the label, attack class and difficulty columns, row
ids), and the specs are checked against it at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fedep._names import DATASET_FEATURE_SETS, FEATURE_SETS
from fedep.data.errors import DataError

__all__ = [
    "FEATURE_SETS",
    "FEATURE_SPECS",
    "FORBIDDEN_COLUMNS",
    "TARGET_COLUMNS",
    "NSL_KDD_COLUMNS",
    "UNSW_NB15_COLUMNS",
    "TON_IOT_COLUMNS",
    "FeatureSpec",
    "FeatureTransformer",
    "DATASET_FEATURE_SETS",
]


NSL_KDD_COLUMNS: tuple[str, ...] = (
    "duration protocol_type service flag src_bytes dst_bytes land wrong_fragment urgent hot "
    "num_failed_logins logged_in num_compromised root_shell su_attempted num_root "
    "num_file_creations num_shells num_access_files num_outbound_cmds is_host_login "
    "is_guest_login count srv_count serror_rate srv_serror_rate rerror_rate srv_rerror_rate "
    "same_srv_rate diff_srv_rate srv_diff_host_rate dst_host_count dst_host_srv_count "
    "dst_host_same_srv_rate dst_host_diff_srv_rate dst_host_same_src_port_rate "
    "dst_host_srv_diff_host_rate dst_host_serror_rate dst_host_srv_serror_rate "
    "dst_host_rerror_rate dst_host_srv_rerror_rate attack_type difficulty_level"
).split()

UNSW_NB15_COLUMNS: tuple[str, ...] = (
    "id dur proto service state spkts dpkts sbytes dbytes rate sttl dttl sload dload sloss "
    "dloss sinpkt dinpkt sjit djit swin stcpb dtcpb dwin tcprtt synack ackdat smean dmean "
    "trans_depth response_body_len ct_srv_src ct_state_ttl ct_dst_ltm ct_src_dport_ltm "
    "ct_dst_sport_ltm ct_dst_src_ltm is_ftp_login ct_ftp_cmd ct_flw_http_mthd ct_src_ltm "
    "ct_srv_dst is_sm_ips_ports attack_cat label"
).split()

TON_IOT_COLUMNS: tuple[str, ...] = (
    "src_ip src_port dst_ip dst_port proto service duration src_bytes dst_bytes conn_state "
    "missed_bytes src_pkts src_ip_bytes dst_pkts dst_ip_bytes dns_query dns_qclass dns_qtype "
    "dns_rcode dns_AA dns_RD dns_RA dns_rejected ssl_version ssl_cipher ssl_resumed "
    "ssl_established ssl_subject ssl_issuer http_trans_depth http_method http_uri "
    "http_version http_request_body_len http_response_body_len http_status_code "
    "http_user_agent http_orig_mime_types http_resp_mime_types weird_name weird_addl "
    "weird_notice label type"
).split()

#: The label / attack-class columns of each dataset: what a detector must never see.
#: The generic path (the raw table as a user's file) drops only these and lets the
#: feature pipeline decide about every other column.
TARGET_COLUMNS: dict[str, frozenset[str]] = {
    "nsl-kdd": frozenset({"attack_type", "difficulty_level"}),
    "unsw-nb15": frozenset({"attack_cat", "label"}),
    "ton-iot": frozenset({"label", "type"}),
}

#: Columns that must never reach the features (identifiers, free text, targets).
FORBIDDEN_COLUMNS: dict[str, frozenset[str]] = {
    "nsl-kdd": frozenset({"attack_type", "difficulty_level"}),
    "unsw-nb15": frozenset({"id", "attack_cat", "label"}),
    "ton-iot": frozenset(
        {
            "src_ip",
            "dst_ip",
            "src_port",
            "dst_port",
            "dns_query",
            "ssl_subject",
            "ssl_issuer",
            "http_uri",
            "http_user_agent",
            "label",
            "type",
        }
    ),
}


@dataclass(frozen=True)
class FeatureSpec:
    """Which raw columns make a feature set, and how each is encoded.

    Attributes
    ----------
    numeric : tuple of str
        Numeric columns used as they are (or log1p-transformed, see ``log1p``).
    log1p : tuple of str
        Subset of ``numeric`` transformed with signed ``log1p``.
    flags : tuple of str
        ``T``/``F``/``-`` columns: value (T -> 1) and a ``_missing`` indicator.
    dash_numeric : tuple of str
        Numeric columns with ``-`` for absent: value (``-`` -> 0) and ``_missing``.
    categorical : tuple of str
        One-hot encoded columns (categories fitted on training rows).
    """

    numeric: tuple[str, ...]
    log1p: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    dash_numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """Every raw column the spec reads."""
        return self.numeric + self.flags + self.dash_numeric + self.categorical


_NSL_CAT = ("protocol_type", "service", "flag")
_NSL_BIN = ("land", "logged_in", "is_host_login", "is_guest_login")
_NSL_PAPER = tuple(c for c in NSL_KDD_COLUMNS[:41] if c not in _NSL_CAT + _NSL_BIN)
_NSL_LOG = (
    "duration src_bytes dst_bytes wrong_fragment urgent hot num_failed_logins "
    "num_compromised num_root num_file_creations num_shells num_access_files "
    "num_outbound_cmds count srv_count dst_host_count dst_host_srv_count"
).split()

_UNSW_CAT = ("proto", "service", "state")
_UNSW_PAPER = tuple(
    c
    for c in UNSW_NB15_COLUMNS
    if c not in {"id", "proto", "service", "state", "attack_cat", "label"}
)
_UNSW_LOG = (
    "dur spkts dpkts sbytes dbytes rate sload dload sloss dloss sinpkt dinpkt sjit djit "
    "stcpb dtcpb tcprtt synack ackdat smean dmean trans_depth response_body_len ct_srv_src "
    "ct_dst_ltm ct_src_dport_ltm ct_dst_sport_ltm ct_dst_src_ltm ct_ftp_cmd "
    "ct_flw_http_mthd ct_src_ltm ct_srv_dst"
).split()

_TON_PAPER = (
    "duration src_bytes dst_bytes missed_bytes src_pkts src_ip_bytes dst_pkts dst_ip_bytes "
    "dns_qclass dns_qtype dns_rcode http_request_body_len http_response_body_len "
    "http_status_code"
).split()
_TON_LOG = (
    "duration src_bytes dst_bytes missed_bytes src_pkts src_ip_bytes dst_pkts dst_ip_bytes "
    "http_request_body_len http_response_body_len"
).split()
_TON_CAT = (
    "proto service conn_state dns_qclass dns_qtype dns_rcode ssl_version ssl_cipher "
    "http_method http_version http_status_code http_orig_mime_types http_resp_mime_types "
    "weird_name weird_addl"
).split()
_TON_FLAGS = "dns_AA dns_RD dns_RA dns_rejected ssl_resumed ssl_established weird_notice".split()

#: ``FEATURE_SPECS[dataset][feature_set]``.
FEATURE_SPECS: dict[str, dict[str, FeatureSpec]] = {
    "nsl-kdd": {
        "paper": FeatureSpec(numeric=_NSL_PAPER),
        "rich": FeatureSpec(
            numeric=_NSL_PAPER + _NSL_BIN, log1p=tuple(_NSL_LOG), categorical=_NSL_CAT
        ),
    },
    "unsw-nb15": {
        "paper": FeatureSpec(numeric=_UNSW_PAPER),
        "rich": FeatureSpec(numeric=_UNSW_PAPER, log1p=tuple(_UNSW_LOG), categorical=_UNSW_CAT),
    },
    "ton-iot": {
        "paper": FeatureSpec(numeric=tuple(_TON_PAPER)),
        "rich": FeatureSpec(
            numeric=tuple(c for c in _TON_PAPER if c not in _TON_CAT),
            log1p=tuple(_TON_LOG),
            flags=tuple(_TON_FLAGS),
            dash_numeric=("http_trans_depth",),
            categorical=tuple(_TON_CAT),
        ),
    },
}


def _check_specs() -> None:
    for ds, sets in FEATURE_SPECS.items():
        for name, spec in sets.items():
            bad = set(spec.columns) & FORBIDDEN_COLUMNS[ds]
            if bad:  # pragma: no cover - guards edits to the tables above
                raise AssertionError(f"{ds}/{name} uses forbidden columns {sorted(bad)}")
            if not set(spec.log1p) <= set(spec.numeric):  # pragma: no cover
                raise AssertionError(f"{ds}/{name}: log1p columns must be numeric")


_check_specs()


def _signed_log1p(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


def _as_str(s: pd.Series) -> pd.Series:
    return s.astype(str).str.strip()


@dataclass
class FeatureTransformer:
    """Turns raw dataset rows into a float64 feature matrix (fit on train only).

    Parameters
    ----------
    spec : FeatureSpec
        Which columns and encodings.
    max_categories : int, default=32
        At most this many one-hot categories per categorical column.
    source : str, optional
        File name used in error messages.

    Attributes
    ----------
    categories_ : dict of str to list of str
        Fitted one-hot categories per categorical column.
    feature_names_ : list of str
    feature_sources_ : list of str
        The raw column each feature comes from.
    """

    spec: FeatureSpec
    max_categories: int = 32
    source: str | None = None
    categories_: dict[str, list[str]] = field(default_factory=dict)
    feature_names_: list[str] = field(default_factory=list)
    feature_sources_: list[str] = field(default_factory=list)

    def fit(self, raw: pd.DataFrame) -> FeatureTransformer:
        """Learn the one-hot categories from training rows and fix the feature names."""
        self._check_columns(raw)
        spec = self.spec
        self.categories_ = {}
        for c in spec.categorical:
            counts = _as_str(raw[c]).value_counts()
            order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            self.categories_[c] = sorted(k for k, _ in order[: self.max_categories])
        names: list[str] = []
        sources: list[str] = []
        logset = set(spec.log1p)
        for c in spec.numeric:
            names.append(f"log1p({c})" if c in logset else c)
            sources.append(c)
        for c in spec.flags + spec.dash_numeric:
            names += [c, f"{c}_missing"]
            sources += [c, c]
        for c in spec.categorical:
            names += [f"{c}={v}" for v in self.categories_[c]]
            sources += [c] * len(self.categories_[c])
        self.feature_names_ = names
        self.feature_sources_ = sources
        return self

    def _check_columns(self, raw: pd.DataFrame) -> None:
        missing = [c for c in self.spec.columns if c not in raw.columns]
        if missing:
            raise DataError(self.source, f"missing columns {missing}", column=missing[0])

    def _bad(self, raw: pd.DataFrame, mask: np.ndarray, col: str, what: str, line0: int):
        i = int(np.flatnonzero(mask)[0])
        label = raw.index[i]
        line = int(label) + line0 if isinstance(label, (int, np.integer)) else None
        value = raw[col].iloc[i]
        raise DataError(self.source, f"{what} ({value!r})", line=line, column=col)

    def transform(self, raw: pd.DataFrame, *, line_offset: int = 2) -> np.ndarray:
        """Encode rows.

        Parameters
        ----------
        raw : DataFrame
            Raw rows; its index is taken as the 0-based data-row number in the file
            for error messages.
        line_offset : int, default=2
            File line of data row 0 (2 with a header row, 1 without).

        Returns
        -------
        ndarray of shape (n_rows, n_features), float64
        """
        if not self.feature_names_:
            raise RuntimeError("FeatureTransformer.transform called before fit")
        self._check_columns(raw)
        spec = self.spec
        n = len(raw)
        X = np.empty((n, len(self.feature_names_)), dtype=np.float64)
        j = 0
        logset = set(spec.log1p)
        for c in spec.numeric:
            col = raw[c]
            if not pd.api.types.is_numeric_dtype(col.dtype):
                conv = pd.to_numeric(col, errors="coerce")
                bad = conv.isna().to_numpy() & col.notna().to_numpy()
                if bad.any():
                    self._bad(raw, bad, c, "non-numeric value", line_offset)
                col = conv
            v = col.to_numpy(dtype=np.float64, na_value=np.nan)
            fin = np.isfinite(v)
            if not fin.all():
                self._bad(raw, ~fin, c, "missing or non-finite value", line_offset)
            X[:, j] = _signed_log1p(v) if c in logset else v
            j += 1
        for c in spec.flags:
            s = _as_str(raw[c])
            bad = ~s.isin(["T", "F", "-"]).to_numpy()
            if bad.any():
                self._bad(raw, bad, c, "flag must be T, F or -", line_offset)
            X[:, j] = (s == "T").to_numpy(dtype=np.float64)
            X[:, j + 1] = (s == "-").to_numpy(dtype=np.float64)
            j += 2
        for c in spec.dash_numeric:
            s = _as_str(raw[c])
            missing = (s == "-").to_numpy()
            conv = pd.to_numeric(s.where(~missing, "0"), errors="coerce").to_numpy(
                dtype=np.float64, na_value=np.nan
            )
            bad = ~np.isfinite(conv)
            if bad.any():
                self._bad(raw, bad, c, "non-numeric value", line_offset)
            X[:, j] = conv
            X[:, j + 1] = missing
            j += 2
        for c in spec.categorical:
            cats = self.categories_[c]
            k = len(cats)
            codes = pd.Index(cats).get_indexer(_as_str(raw[c]))
            block = np.zeros((n, k), dtype=np.float64)
            hit = codes >= 0
            block[np.flatnonzero(hit), codes[hit]] = 1.0
            X[:, j : j + k] = block
            j += k
        return X

    def fit_transform(self, raw: pd.DataFrame, *, line_offset: int = 2) -> np.ndarray:
        """:meth:`fit` then :meth:`transform` on the same rows."""
        return self.fit(raw).transform(raw, line_offset=line_offset)
