"""Small builders shared by tests: random bars and feature sets without the feature builder."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from foxhunt.features.featureset import FeatureSet

MINUTE_NS = 60 * 1_000_000_000


def random_feature_set(n_bars: int = 2_000, n_features: int = 8, seed: int = 0, warmup: int = 0) -> FeatureSet:
    """A random-walk OHLCV series with random features (not causal: for market/env plumbing tests)."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0, 1e-3, n_bars)))
    open_ = np.concatenate([[100.0], close[:-1]]) * np.exp(rng.normal(0, 2e-4, n_bars))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 5e-4, n_bars)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 5e-4, n_bars)))
    volume = rng.lognormal(8, 0.5, n_bars)
    feats = rng.normal(3.0, 2.0, (n_bars, n_features)).astype(np.float32)
    feats[:warmup] = 0.0
    targets = np.full((n_bars, 4), np.nan, dtype=np.float32)
    for j, h in enumerate((1, 5, 15, 60)):
        targets[: n_bars - h, j] = np.log(close[h:] / close[:-h])
    return FeatureSet(
        features=torch.from_numpy(feats),
        targets=torch.from_numpy(targets),
        ohlc=torch.from_numpy(np.stack([open_, high, low, close], 1)),
        volume=torch.from_numpy(volume),
        timestamps=torch.from_numpy(np.arange(n_bars, dtype=np.int64) * MINUTE_NS + 1_700_000_000 * 10**9),
        names=tuple(f"f{i}" for i in range(n_features)),
        warmup=warmup,
        has_volume=True,
        spec_version="test",
        source_sha256="0" * 64,
    )


@contextlib.contextmanager
def capture_guards(device):
    """Around a CUDA-graph capture: no host reads and no synchronising CUDA calls."""
    from foxhunt.testing import cuda_sync_errors, forbid_host_reads

    with cuda_sync_errors(device), forbid_host_reads():
        yield
