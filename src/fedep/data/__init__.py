"""Data: official dataset loaders, generic CSV/Parquet, features, partitions, synthetic data."""

from fedep.data.synthetic import SyntheticFederation, make_federated_data

__all__ = ["SyntheticFederation", "make_federated_data"]
