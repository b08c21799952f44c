"""Builders for env tests: FeatureSets from explicit or random-walk OHLCV, markets with a fold set.

They build ``FeatureSet`` directly (no feature builder) and let tests pin the fold medians.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

MINUTE_NS = 60 * 1_000_000_000


def random_walk_ohlcv(n_bars: int, seed: int = 0, vol: float = 2e-3, volume_scale: float = 1e4) -> tuple[np.ndarray, np.ndarray]:
    """[T, 4] float64 OHLC (high ≥ max(open, close), low ≤ min) and [T] volume from a random walk."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, vol, n_bars)))
    open_ = np.concatenate([[100.0], close[:-1]]) * np.exp(rng.normal(0.0, vol / 4, n_bars))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, vol / 2, n_bars)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, vol / 2, n_bars)))
    volume = volume_scale * rng.lognormal(0.0, 0.5, n_bars)
    return np.stack([open_, high, low, close], 1), volume


def feature_set(
    ohlc: np.ndarray, volume: np.ndarray | None = None, n_features: int = 3, seed: int = 0
) -> FeatureSet:
    """A FeatureSet over explicit bars with ``n_features`` random features (None volume: has_volume False)."""
    ohlc = np.asarray(ohlc, dtype=np.float64)
    n = ohlc.shape[0]
    rng = np.random.default_rng(seed)
    feats = rng.normal(0.0, 1.0, (n, n_features)).astype(np.float32)
    close = ohlc[:, 3]
    targets = np.full((n, 4), np.nan, dtype=np.float32)
    for j, h in enumerate((1, 5, 15, 60)):
        if h < n:
            targets[: n - h, j] = np.log(close[h:] / close[:-h])
    has_volume = volume is not None
    vol = np.ones(n) if volume is None else np.asarray(volume, dtype=np.float64)
    return FeatureSet(
        features=torch.from_numpy(feats),
        targets=torch.from_numpy(targets),
        ohlc=torch.from_numpy(ohlc.copy()),
        volume=torch.from_numpy(vol.copy()),
        timestamps=torch.from_numpy(np.arange(n, dtype=np.int64) * MINUTE_NS + 1_700_000_000 * 10**9),
        names=tuple(f"f{i}" for i in range(n_features)),
        warmup=0,
        has_volume=has_volume,
        spec_version="test",
        source_sha256="0" * 64,
    )


def market_from_bars(
    ohlc: np.ndarray,
    volume: np.ndarray | None = None,
    fold: FoldRange | None = None,
    device: torch.device | str = "cpu",
    n_features: int = 3,
    seed: int = 0,
    median_range: float | None = None,
    median_abs_return: float | None = None,
) -> MarketData:
    """MarketData over explicit bars with a fold set (default: train on all but the last 2 bars);
    the routing medians can be pinned (they are device tensors, updated in place)."""
    n = np.asarray(ohlc).shape[0]
    m = MarketData(feature_set(ohlc, volume, n_features, seed), device)
    m.set_fold(fold or FoldRange(0, 0, n - 2, n - 1, n))
    if median_range is not None:
        m.median_range.fill_(median_range)
    if median_abs_return is not None:
        m.median_abs_return.fill_(median_abs_return)
    return m


def random_market(
    n_bars: int = 1_200,
    seed: int = 0,
    device: torch.device | str = "cpu",
    volume_scale: float = 1e4,
    with_volume: bool = True,
    fold: FoldRange | None = None,
) -> MarketData:
    ohlc, volume = random_walk_ohlcv(n_bars, seed, volume_scale=volume_scale)
    m = MarketData(feature_set(ohlc, volume if with_volume else None, 4, seed), device)
    m.set_fold(fold or FoldRange(0, 10, n_bars - 260, n_bars - 250, n_bars))
    return m


def single_env(market: MarketData, start: int, device: Any = "cpu", n_envs: int = 1, **overrides: Any) -> VecTradingEnv:
    """An env (no auto-reset) at ``start`` with EnvParams(**overrides)."""
    params = EnvParams(**{"episode_length": 5, **overrides})
    env = VecTradingEnv(market, n_envs, params, seed=0, auto_reset=False)
    env.reset([start] * n_envs)
    return env


def act(env: VecTradingEnv, *actions: int, curiosity: float | None = None):
    a = torch.tensor(actions, dtype=torch.int64, device=env.device)
    cur = None if curiosity is None else torch.full((env.n_envs,), curiosity, device=env.device)
    return env.step(a, cur)


def bars(*rows: tuple[float, float, float, float]) -> np.ndarray:
    return np.asarray(rows, dtype=np.float64)


# ---------------------------------------------------------------------------- hand-built scenarios
SCENARIO_BARS = [
    (100.0, 101.0, 99.0, 100.0),  # bar 0: decision bar, range 0.02
    (101.0, 102.0, 99.5, 101.5),  # bar 1: first fill bar
    (101.5, 103.0, 101.0, 102.0),
    (102.0, 102.5, 101.5, 102.0),
]
SCENARIO_PARAMS = dict(cost_bps=2.0, spread_bps=10.0, impact_eta=0.5, risk_weight=0.0, diversity_penalty=0.0)
MED_RANGE = 0.01  # bar 0's range is 2× this: half spread = ½·10 bps·2 = 1e-3
VOL = 0.01  # volatility EMA v at the start


def scenario_env(
    rows: list[tuple[float, float, float, float]] | None = None,
    volume: float | list[float] | None = 1e6,
    n_envs: int = 1,
    vol: float = VOL,
    med_range: float = MED_RANGE,
    per_env: dict | None = None,
    start: int = 0,
    **params: Any,
) -> VecTradingEnv:
    """A no-auto-reset env at bar ``start`` over explicit bars (padded with the last row to 12 bars),
    the fold's median range pinned, v set; EnvParams = SCENARIO_PARAMS + ``params``."""
    rows = list(rows or SCENARIO_BARS)
    rows += [rows[-1]] * max(0, 12 - len(rows))
    ohlc = np.asarray(rows, dtype=np.float64)
    vols = None
    if volume is not None:
        vols = np.full(len(rows), float(volume)) if np.isscalar(volume) else np.asarray(list(volume) + [1e6] * (len(rows) - len(volume)), dtype=np.float64)
    m = market_from_bars(ohlc, vols, median_range=med_range, median_abs_return=vol)
    env = VecTradingEnv(m, n_envs, EnvParams(**{"episode_length": 5, **SCENARIO_PARAMS, **params}), auto_reset=False, per_env=per_env)
    env.reset([start] * n_envs)
    env.state.vol.fill_(vol)
    return env


def set_position(env: VecTradingEnv, q: float, entry: float, level: int, entry_bar: int = 0) -> None:
    """Put every env in a position of q units bought at ``entry`` (E stays = capital; barrier armed)."""
    s, p = env.state, env.params
    c = float(env.market.ohlc[int(s.bar[0]), 3])
    capital = float(p.capital[0])
    s.position.fill_(q)
    s.target.fill_(q)
    s.level.fill_(level)
    s.entry_price.fill_(entry)
    s.entry_bar.fill_(entry_bar)
    s.cash.fill_(capital - q * c)
    s.equity.fill_(capital)
    side = 1.0 if q > 0 else -1.0
    pf, sf = float(p.profit_frac[0]), float(p.stop_frac[0])
    s.barrier_active.fill_(True)
    s.barrier_side.fill_(side)
    s.barrier_upper.fill_(entry * (1 + pf) if side > 0 else entry * (1 + sf))
    s.barrier_lower.fill_(entry * (1 - sf) if side > 0 else entry * (1 - pf))
    s.barrier_expiry.fill_(entry_bar + int(p.max_holding[0]))


def action(e: int, o: int = 0, u: int = 1) -> int:
    """Factored action index of (level e, order type o, urgency u)."""
    return 9 * e + 3 * o + u


def f(t) -> float:  # noqa: D103 - a 1-element tensor as a Python float
    return float(t.reshape(-1)[0])


def mirrored_feature_set(fs: FeatureSet) -> FeatureSet:
    """``fs`` with its prices reflected as ``foxhunt.data.mirror.mirror_bars`` reflects bars (c0² / p,
    high and low swapped) and its features negated: what an env reads of a mirrored market."""
    import dataclasses

    o = fs.ohlc.to(torch.float64)
    k = float(o[0, 3]) ** 2
    ohlc = torch.stack([k / o[:, 0], k / o[:, 2], k / o[:, 1], k / o[:, 3]], dim=1).to(fs.ohlc.dtype)
    return dataclasses.replace(fs, ohlc=ohlc, features=-fs.features, targets=-fs.targets)


def mirrored_market(fs: FeatureSet, fold: FoldRange, device: torch.device | str = "cpu") -> MarketData:
    """MarketData of ``fs`` with its mirror appended (``train.mirror``), ``fold`` set."""
    m = MarketData(fs, device, mirror=mirrored_feature_set(fs))
    m.set_fold(fold)
    return m
