"""fedep: personalised, robust, federated PCA for IoT anomaly detection."""

__version__ = "0.1.0"
