"""Feature columns appended after the spec's 51: the optional long-horizon momentum
(``features.long_momentum``), the optional multi-scale EMA trend and volatility columns
(``features.ema_horizons``) and any named extra column (the scorecard's planted signals).

Why EMA horizons up to thousands of bars: an edge can live at any horizon (a drift that persists for
thousands of minute bars; docs/LEARNING.md), and a policy can only act on what its features show.
``ema_mom_{h}`` is the causal z-score of an EMA of log returns over h bars (``ema_zscore``: the EMA in
units of its own standard deviation under no edge, the quant baseline's signal); ``ema_vol_{h}`` is
the log RMS return over h bars (the per-fold normalisation makes it a level relative to the
training window's). Both form from the first bar (no hard warm-up), cost O(T) each, and are
recorded in the feature names, so ``foxhunt backtest --model`` rebuilds them (``extras_in``).

Why a long horizon: the spec's longest vol-adjusted momentum is 60 bars; trends that last hundreds of
bars (the scorecard's regime scenario: ~400) are inferred from ~100-250 bars of evidence, and the
120- and 250-bar columns raised DQN's and PPO's regime Sharpe by ~0.06-0.09 in paired CPU runs
(docs/LEARNING.md §8). They are not in the spec (no FEATURE_SPEC_VERSION bump, the cache keeps
the 51 columns): they are computed after the cache, in float64, and recorded in the feature names and
the spec version string (``"1+mom_vol_adj_120,mom_vol_adj_250"``) that model files carry, so
``foxhunt backtest --model`` rebuilds exactly the columns a model was trained on.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from foxhunt.data.synthetic import affine_scan
from foxhunt.features.featureset import FeatureSet

EMA_MOM_PREFIX, EMA_VOL_PREFIX = "ema_mom_", "ema_vol_"
"""Column names of the h-bar EMA trend z-score and log RMS return: ``ema_mom_{h}``, ``ema_vol_{h}``."""
VOL_FLOOR_LOOKBACK = 100
"""The RMS that scales an EMA z-score averages over at least this many bars (a 10-bar RMS is noisy)."""
LONG_MOMENTUM_PREFIX = "mom_vol_adj_"
"""Column name of the w-bar long momentum: ``mom_vol_adj_{w}`` (the spec's 20/60-bar ones share it)."""

_SPEC_HORIZONS = (20, 60)
"""Horizons the spec itself has (``features.spec``): not allowed as long-momentum extras."""


def vol_adjusted_momentum(close: np.ndarray, w: int) -> np.ndarray:
    """[T] float64: log(C[t] / C[t−w]) / (sample std of the w one-bar log returns ending at t × √w);
    0 for t < w (not formed) and where those returns do not vary. Causal: row t uses bars ≤ t."""
    c = np.asarray(close, dtype=np.float64)
    out = np.zeros(c.shape[0])
    if w < 2 or c.shape[0] <= w:
        return out
    lr = np.diff(np.log(c), prepend=np.nan)  # lr[t] = log(C[t] / C[t-1]); lr[0] undefined
    c1, c2 = np.nancumsum(lr), np.nancumsum(lr * lr)
    s1 = c1[w:] - c1[:-w]  # sum of lr[t-w+1 .. t], t >= w
    var = (c2[w:] - c2[:-w] - s1 * s1 / w) / (w - 1)
    sd = np.sqrt(np.maximum(var, 0.0) * w)
    out[w:] = np.divide(s1, sd, out=np.zeros_like(s1), where=sd > 1e-12)
    return out


def log_returns_of(close: np.ndarray) -> np.ndarray:
    """[T] float64 log(C_t / C_{t-1}), 0 at t = 0."""
    c = np.log(np.asarray(close, np.float64))
    return np.concatenate([[0.0], np.diff(c)]) if c.shape[0] else c


def ema(x: np.ndarray, lookback: float, x0: float = 0.0) -> np.ndarray:
    """[T] causal EMA ``e_t = (1 - 1/L) e_{t-1} + x_t / L`` from ``e_{-1} = x0`` (float64)."""
    a = 1.0 / float(lookback)
    return affine_scan(np.full(x.shape[0], 1.0 - a), a * np.asarray(x, np.float64), x0)


def ema_zscore(log_returns: np.ndarray, lookback: int) -> np.ndarray:
    """[T] causal z-score of the EMA of ``log_returns`` [T] over ``lookback`` bars: the EMA divided by
    its standard deviation under no edge, ``rms_t sqrt(a / (2 - a))`` with ``a = 1 / lookback`` and
    ``rms_t`` the causal RMS return over ``max(lookback, VOL_FLOOR_LOOKBACK)`` bars; 0 where that is 0.
    Row t uses returns 0..t only."""
    r = np.asarray(log_returns, np.float64)
    e = ema(r, lookback)
    var = ema(r * r, max(lookback, VOL_FLOOR_LOOKBACK), x0=float(r[0] ** 2) if r.shape[0] else 0.0)
    a = 1.0 / lookback
    scale = np.sqrt(np.maximum(var, 0.0) * a / (2.0 - a))
    return np.divide(e, scale, out=np.zeros_like(e), where=scale > 0)


def ema_log_vol(log_returns: np.ndarray, lookback: int) -> np.ndarray:
    """[T] causal log RMS return over ``lookback`` bars: 0.5 log(EMA of r^2), the EMA started at the
    first bar's r^2 (float64; a floor of 1e-30 keeps a constant series finite)."""
    r = np.asarray(log_returns, np.float64)
    var = ema(r * r, lookback, x0=float(r[0] ** 2) if r.shape[0] else 0.0)
    return 0.5 * np.log(np.maximum(var, 1e-30))


def append_columns(fs: FeatureSet, extra: dict[str, np.ndarray]) -> FeatureSet:
    """``fs`` with extra feature columns appended ([T] each, float32; rows before the warm-up set to 0).
    The names are added to ``fs.names`` and to the spec version string (model files compare both)."""
    if not extra:
        return fs
    clash = [n for n in extra if n in fs.names]
    if clash:
        raise ValueError(f"extra feature columns {clash} already exist")
    cols = []
    for col in extra.values():
        c = torch.as_tensor(np.asarray(col, dtype=np.float64)).to(torch.float32).clone()
        c[: fs.warmup] = 0.0
        cols.append(c[:, None])
    feats = torch.cat([fs.features, *cols], dim=1).contiguous()
    return FeatureSet(features=feats, targets=fs.targets, ohlc=fs.ohlc, volume=fs.volume, timestamps=fs.timestamps,
                      names=(*fs.names, *extra), warmup=fs.warmup, has_volume=fs.has_volume,
                      spec_version=fs.spec_version + "+" + ",".join(extra), source_sha256=fs.source_sha256)


def with_long_momentum(fs: FeatureSet, horizons: tuple[int, ...] | list[int]) -> FeatureSet:
    """``fs`` with one ``mom_vol_adj_{w}`` column per horizon (in the given order) from its close prices."""
    close = fs.ohlc[:, 3].numpy()
    return append_columns(fs, {f"{LONG_MOMENTUM_PREFIX}{w}": vol_adjusted_momentum(close, int(w)) for w in horizons})


def with_ema_horizons(fs: FeatureSet, horizons: tuple[int, ...] | list[int]) -> FeatureSet:
    """``fs`` with ``ema_mom_{h}`` then ``ema_vol_{h}`` columns, one pair per horizon (in order)."""
    if not horizons:
        return fs
    r = log_returns_of(fs.ohlc[:, 3].numpy())
    cols: dict[str, np.ndarray] = {}
    for h in horizons:
        cols[f"{EMA_MOM_PREFIX}{int(h)}"] = ema_zscore(r, int(h))
        cols[f"{EMA_VOL_PREFIX}{int(h)}"] = ema_log_vol(r, int(h))
    return append_columns(fs, cols)


def with_extras(fs: FeatureSet, long_momentum: tuple[int, ...] | list[int] = (),
                ema_horizons: tuple[int, ...] | list[int] = ()) -> FeatureSet:
    """The configured extra columns after the spec's: ``features.long_momentum``, then
    ``features.ema_horizons`` (the order ``extras_in`` reads back from a model file)."""
    return with_ema_horizons(with_long_momentum(fs, long_momentum), ema_horizons)


def extras_in(names: tuple[str, ...] | list[str], n_spec: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(long-momentum horizons, EMA horizons) of the columns after the spec's first ``n_spec`` (a
    model file's feature names), in order; stops at the first column that is neither."""
    mom: list[int] = []
    emas: list[int] = []
    for name in list(names)[n_spec:]:
        m = re.fullmatch(LONG_MOMENTUM_PREFIX + r"(\d+)", name)
        if m is not None and not emas:
            mom.append(int(m.group(1)))
            continue
        e = re.fullmatch(EMA_MOM_PREFIX + r"(\d+)", name)
        if e is not None:
            emas.append(int(e.group(1)))
            continue
        if re.fullmatch(EMA_VOL_PREFIX + r"(\d+)", name) is not None:
            continue
        break
    return tuple(mom), tuple(emas)


def long_momentum_in(names: tuple[str, ...] | list[str], n_spec: int) -> tuple[int, ...]:
    """The long-momentum horizons among the columns after the spec's first ``n_spec``."""
    return extras_in(names, n_spec)[0]


def check_ema_horizons(horizons: list[int]) -> list[int]:
    """Validate ``features.ema_horizons`` (ValueError naming the rule)."""
    for h in horizons:
        if not 2 <= h <= 1_000_000:
            raise ValueError(f"horizon {h}: must be within 2 … 1000000 bars")
    if len(set(horizons)) != len(horizons):
        raise ValueError(f"{horizons}: horizons must be distinct")
    return horizons


def check_horizons(horizons: list[int]) -> list[int]:
    """Validate ``features.long_momentum`` (ValueError naming the rule)."""
    for w in horizons:
        if not 2 <= w <= 100_000:
            raise ValueError(f"horizon {w}: must be within 2 … 100000 bars")
        if w in _SPEC_HORIZONS:
            raise ValueError(f"horizon {w}: the spec already has mom_vol_adj_{w}")
    if len(set(horizons)) != len(horizons):
        raise ValueError(f"{horizons}: horizons must be distinct")
    return horizons
