"""Hyperparameter-study suite for metric-learning losses (ArcFace versus AdaCos)."""

__version__ = "0.1.0"
