"""From a scenario to what ``foxhunt train`` runs on: config, features (+ extra columns), folds, market.

The configuration under test (``--config`` or the built-in train settings) supplies the agent,
the reward and the training length; the scorecard size supplies the data length and folds; each
scenario supplies its market, bar spacing and costs. ``--set`` overrides come last and win.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from foxhunt.config import Config, apply_overrides, build_config
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import folds_from_config
from foxhunt.market import MarketData
from foxhunt.pipeline import Prepared
from foxhunt.scorecard.markets import DAY, MINUTE, Scenario


@dataclass(frozen=True)
class Size:
    """Data length and folds of one scorecard size. bars: synthetic bars per scenario."""

    name: str
    bars: int
    train: int
    val: int
    max_folds: int
    real_train: int
    real_val: int


SIZES = {
    # 2-core CPU, about 10 minutes for the whole suite with the built-in train settings.
    "cpu": Size("cpu", bars=6_400, train=3_000, val=1_000, max_folds=3, real_train=2_500, real_val=500),
    # the H200: the same scale as configs/h200*.toml (1 M bars, 400 K train, 100 K validation, 5 folds)
    "gpu": Size("gpu", bars=1_000_000, train=400_000, val=100_000, max_folds=5, real_train=2_500, real_val=500),
    # CI: a few seconds a scenario
    "tiny": Size("tiny", bars=2_200, train=1_000, val=400, max_folds=2, real_train=2_000, real_val=400),
}

# Realistic costs for a liquid index product: 1 bp commission, 1 bp quoted spread, square-root impact;
# an account of 10,000 against ~1,000 units of volume a bar (the impact of a full position is small).
SCENARIO_ENV: dict[str, Any] = {"capital": 10_000.0, "cost_bps": 1.0, "spread_bps": 1.0, "impact_eta": 0.1}


def scenario_config(base: dict[str, Any], scenario: Scenario, size: Size, overrides: Sequence[str] = ()) -> Config:
    """The configuration one scenario runs with: base TOML dict ← size and scenario ← --set."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    real = not scenario.synthetic
    bar_s = _bar_seconds(scenario)
    data.setdefault("data", {}).update(source=scenario.name if real else "synthetic", bars=len(scenario.bars),
                                       bar_seconds=bar_s, signal=0.0)
    data.setdefault("folds", {}).update(train=size.real_train if real else size.train, val=size.real_val if real else size.val,
                                        max_folds=size.max_folds, mode="expanding")
    data.setdefault("env", {}).update(SCENARIO_ENV)
    data.setdefault("train", {}).update(tensorboard=False, report=False, progress=False, checkpoint_every=0,
                                        save_curves=True, save_trades=True)
    apply_overrides(data, overrides)
    cfg = build_config(data, source=f"<scorecard {scenario.name}>")
    # An episode must fit in the training slice of the first fold.
    return cfg


def _bar_seconds(scenario: Scenario) -> int:
    ts = scenario.bars.timestamps
    sec = float(np.median(np.diff(ts))) / 1e9 if len(ts) > 1 else DAY
    return DAY if sec >= 20 * 3600 else MINUTE


def with_extra(fs: FeatureSet, extra: dict[str, np.ndarray]) -> FeatureSet:
    """``fs`` with extra feature columns appended ([T] each; rows before the warm-up set to 0)."""
    if not extra:
        return fs
    cols = []
    for name, col in extra.items():
        c = torch.as_tensor(np.asarray(col, dtype=np.float64)).to(torch.float32).clone()
        c[: fs.warmup] = 0.0
        cols.append(c[:, None])
    feats = torch.cat([fs.features, *cols], dim=1).contiguous()
    return FeatureSet(features=feats, targets=fs.targets, ohlc=fs.ohlc, volume=fs.volume, timestamps=fs.timestamps,
                      names=(*fs.names, *extra), warmup=fs.warmup, has_volume=fs.has_volume,
                      spec_version=fs.spec_version + "+" + ",".join(extra), source_sha256=fs.source_sha256)


def prepare_scenario(cfg: Config, scenario: Scenario) -> Prepared:
    """Features (cached by content like ``foxhunt train``) + extras, folds, and the uploaded market."""
    from foxhunt.device import resolve_device
    from foxhunt.features.cache import load_or_build

    device = resolve_device(cfg.run.device)
    t0 = time.perf_counter()
    res = load_or_build(scenario.bars, cfg.features.cache_dir, device=device)
    t1 = time.perf_counter()
    fs = with_extra(res.features, scenario.extra)
    folds = folds_from_config(scenario.bars.timestamps, cfg.folds, origin=fs.warmup)
    market = MarketData(fs, device)
    market.set_fold(folds[0])
    t2 = time.perf_counter()
    return Prepared(cfg, scenario.bars, fs, Path(res.path), res.built, folds, market,
                    {"load_s": 0.0, "features_s": t1 - t0, "upload_s": t2 - t1})
