"""FeatureSet: what the feature builder produces and the cache stores.

All arrays are host (CPU) tensors; ``MarketData`` uploads them once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TARGET_HORIZONS = (1, 5, 15, 60)
"""Forward-return horizons (bars) of the four targets. Labels only: never model inputs."""


@dataclass(frozen=True)
class FeatureSet:
    """Causal features, targets and the raw market arrays for one bar series.

    features:   [T, F] float32, causal (row t uses bars <= t only); rows < warmup are 0 (not yet formed).
    targets:    [T, 4] float32, forward log return over TARGET_HORIZONS bars: log(close[t+h]/close[t]);
                NaN where t+h >= T. Labels only.
    ohlc:       [T, 4] float64, open/high/low/close prices.
    volume:     [T] float64 (ones when the source had no volume; see has_volume).
    timestamps: [T] int64 UTC nanoseconds.
    names:      F feature names, in column order.
    warmup:     first row at which every feature is fully formed (the usable data starts here).
    spec_version: version string of the feature spec that built this set.
    source_sha256: sha256 of the source bars' content.
    """

    features: torch.Tensor
    targets: torch.Tensor
    ohlc: torch.Tensor
    volume: torch.Tensor
    timestamps: torch.Tensor
    names: tuple[str, ...]
    warmup: int
    has_volume: bool
    spec_version: str
    source_sha256: str

    def __len__(self) -> int:
        return int(self.timestamps.shape[0])

    @property
    def n_features(self) -> int:
        return len(self.names)
