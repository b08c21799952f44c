"""The shared front half of every job: config → bars → feature cache → folds → MarketData."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from foxhunt.config import Config, load_config
from foxhunt.data import Bars, load_source
from foxhunt.device import resolve_device
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange, folds_from_config
from foxhunt.market import MarketData


@dataclass
class Prepared:
    config: Config
    bars: Bars
    features: FeatureSet
    cache_path: Path
    cache_built: bool
    folds: list[FoldRange]
    market: MarketData
    timings: dict[str, float]


def prepare_market(
    config: str | Path | Config | None = None,
    overrides: Sequence[str] = (),
    console: Any = None,
) -> Prepared:
    """Load (or generate) bars, build or reuse the feature cache, lay out folds, upload once."""
    import time

    cfg = config if isinstance(config, Config) else load_config(config, overrides)
    device = resolve_device(cfg.run.device)
    t0 = time.perf_counter()
    bars = load_source(cfg.data, limit_samples=True)
    t1 = time.perf_counter()
    from foxhunt.features.cache import load_or_build

    res = load_or_build(bars, cfg.features.cache_dir, device=device)
    t2 = time.perf_counter()
    folds = folds_from_config(bars.timestamps, cfg.folds, origin=res.features.warmup)
    market = MarketData(res.features, device)
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    t3 = time.perf_counter()
    market.set_fold(folds[0])
    timings = {"load_s": t1 - t0, "features_s": t2 - t1, "upload_s": t3 - t2}
    return Prepared(cfg, bars, res.features, res.path, res.built, folds, market, timings)
