"""From a scenario to what ``foxhunt train`` runs on: config, features (+ extra columns), folds, market.

The configuration under test (``--config`` or the built-in train settings) supplies the agent,
the reward and the training length; the scorecard size supplies the data length and folds; each
scenario supplies its market, bar spacing and costs. ``--set`` overrides come last and win.

Reward scale across bar spacings: a configuration's ``env.reward_scale`` is chosen for the bars it
was written for (``data.bar_seconds``: the built-in train settings for daily bars, the H200 files
for minute bars). A bar's return volatility scales with sqrt(bar length), so run unchanged on
another spacing the rewards would be ~45x too small or too large (daily vs minute). The scorecard
therefore keeps the configuration's *reward per unit of bar volatility*: it multiplies
``reward_scale`` by sqrt(bars per year of the scenario / bars per year of the configuration's data)
(252 a year for daily bars, 24/7 for intraday ones: 525,960 minute bars, 8,766 hourly bars).
A family draw (``scorecard.family``) brings its own costs (``Scenario.env``, over ``SCENARIO_ENV``)
and its own fold layout (``family.size_for``).
``--set env.reward_scale=X`` still sets it outright.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from foxhunt.config import Config, apply_overrides, build_config
from foxhunt.features.extra import append_columns, with_extras
from foxhunt.folds import folds_from_config
from foxhunt.market import MarketData
from foxhunt.pipeline import Prepared, mirrored_features
from foxhunt.scorecard.markets import DAY, Scenario


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
    epochs: int | None = None  # train.epochs for this size (None: the configuration's own)
    # daily synthetic scenarios (None: as minute ones). Daily timestamps end at pandas' year 2262,
    # so a daily series holds at most ~62 K bars from 2024.
    daily_bars: int | None = None
    daily_train: int | None = None
    daily_val: int | None = None

    def n_bars(self, bar_seconds: int) -> int:
        return self.daily_bars if bar_seconds >= DAY and self.daily_bars else self.bars


SIZES = {
    # 2-core CPU, about 10 minutes for the whole suite with the built-in train settings.
    "cpu": Size("cpu", bars=6_400, train=3_000, val=1_000, max_folds=3, real_train=2_500, real_val=500, epochs=6),
    # the H200: the same scale as configs/h200*.toml (1 M bars, 400 K train, 100 K validation, 5 folds)
    # (daily scenarios: 60 K bars, 25 K train, 5 K validation bars a fold)
    "gpu": Size("gpu", bars=1_000_000, train=400_000, val=100_000, max_folds=5, real_train=2_500, real_val=500,
                daily_bars=60_000, daily_train=25_000, daily_val=5_000),
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
    daily = bar_s >= DAY and size.daily_train is not None
    train = size.real_train if real else size.daily_train if daily else size.train
    val = size.real_val if real else size.daily_val if daily else size.val
    data.setdefault("folds", {}).update(train=train, val=val, max_folds=size.max_folds, mode="expanding")
    env = data.setdefault("env", {})
    env["reward_scale"] = float(env.get("reward_scale", 1.0)) * reward_rescale(base, bar_s)
    env.update(SCENARIO_ENV)
    env.update(scenario.env or {})  # a family draw's own costs
    if size.epochs is not None:
        data.setdefault("train", {})["epochs"] = size.epochs
    data.setdefault("train", {}).update(tensorboard=False, report=False, progress=False, checkpoint_every=0,
                                        save_curves=True, save_trades=True)
    apply_overrides(data, overrides)
    return build_config(data, source=f"<scorecard {scenario.name}>")


def _bars_per_year(bar_seconds: float) -> float:
    """Bars a year: 252 for daily bars, 24/7 otherwise (minute 525,960; hourly 8,766)."""
    return 252.0 if bar_seconds >= 20 * 3600 else 365.25 * DAY / bar_seconds


def reward_rescale(base: dict[str, Any], scenario_bar_seconds: int) -> float:
    """sqrt(bars per year of the scenario / bars per year of the configuration's own data)."""
    d = base.get("data", {})
    own = DAY if d.get("source") in ("sp500", "nasdaq") else float(d.get("bar_seconds", 60))
    return float(np.sqrt(_bars_per_year(scenario_bar_seconds) / _bars_per_year(own)))


def _bar_seconds(scenario: Scenario) -> int:
    """The scenario's bar spacing, seconds: DAY for daily bars (business days: median 1 day, gaps of
    3), else the median spacing (60 minute bars, 3,600 hourly bars)."""
    ts = scenario.bars.timestamps
    sec = float(np.median(np.diff(ts))) / 1e9 if len(ts) > 1 else DAY
    return DAY if sec >= 20 * 3600 else max(1, int(round(sec)))


def prepare_scenario(cfg: Config, scenario: Scenario) -> Prepared:
    """Features (cached by content like ``foxhunt train``) + extras, folds, and the uploaded market."""
    from foxhunt.device import resolve_device
    from foxhunt.features.cache import load_or_build

    device = resolve_device(cfg.run.device)
    t0 = time.perf_counter()
    res = load_or_build(scenario.bars, cfg.features.cache_dir, device=device)
    t1 = time.perf_counter()
    fs = append_columns(with_extras(res.features, cfg.features.long_momentum, cfg.features.ema_horizons), scenario.extra)
    folds = folds_from_config(scenario.bars.timestamps, cfg.folds, origin=fs.warmup)
    mirror = mirrored_features(cfg, scenario.bars, device, scenario.extra) if cfg.train.mirror else None
    market = MarketData(fs, device, mirror=mirror)
    market.set_fold(folds[0])
    t2 = time.perf_counter()
    return Prepared(cfg, scenario.bars, fs, Path(res.path), res.built, folds, market,
                    {"load_s": 0.0, "features_s": t1 - t0, "upload_s": t2 - t1})
