"""Data: dataset loaders, CSV/Parquet, flow-record readers, features, partitions, synthetic data."""

from fedep.data.client_splits import ClientSplit, make_client_split
from fedep.data.dataset_files import (
    FileRecord,
    format_verify_report,
    resolve_data_dir,
    verify_data_dir,
)
from fedep.data.datasets import DATASETS, NSL_KDD_ATTACK_CATEGORIES, Dataset, load_dataset
from fedep.data.errors import DataError, DatasetNotFoundError
from fedep.data.feature_sets import (
    DATASET_FEATURE_SETS,
    FEATURE_SETS,
    FEATURE_SPECS,
    FORBIDDEN_COLUMNS,
    TARGET_COLUMNS,
)
from fedep.data.partition import (
    format_partition_summary,
    partition_dirichlet,
    partition_iid,
    partition_sorted,
    partition_summary,
)
from fedep.data.readers import (
    ReadError,
    detect_format,
    gateway_files,
    gateway_id,
    read_many,
    read_table,
)
from fedep.data.synthetic import SyntheticFederation, make_federated_data
from fedep.data.tabular import TableData, load_csv, load_table

__all__ = [
    "DATASETS",
    "DATASET_FEATURE_SETS",
    "FEATURE_SETS",
    "FEATURE_SPECS",
    "FORBIDDEN_COLUMNS",
    "TARGET_COLUMNS",
    "NSL_KDD_ATTACK_CATEGORIES",
    "ClientSplit",
    "DataError",
    "Dataset",
    "DatasetNotFoundError",
    "FileRecord",
    "ReadError",
    "SyntheticFederation",
    "TableData",
    "detect_format",
    "format_partition_summary",
    "format_verify_report",
    "gateway_files",
    "gateway_id",
    "load_csv",
    "load_dataset",
    "load_table",
    "make_client_split",
    "make_federated_data",
    "partition_dirichlet",
    "partition_iid",
    "partition_sorted",
    "partition_summary",
    "read_many",
    "read_table",
    "resolve_data_dir",
    "verify_data_dir",
]
