"""Causal feature functions, the feature spec and the content-hashed feature cache."""

from foxhunt.features.featureset import TARGET_HORIZONS, FeatureSet

__all__ = ["FeatureSet", "TARGET_HORIZONS"]
