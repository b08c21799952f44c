"""Feature columns appended after the spec's 51: the optional long-horizon momentum
(``features.long_momentum``) and any named extra column (the scorecard's planted signals).

Why a long horizon: the spec's longest vol-adjusted momentum is 60 bars; trends that last hundreds of
bars (the scorecard's regime scenario: ~400) are inferred from ~100-250 bars of evidence, and the
120- and 250-bar columns raised DQN's and PPO's regime Sharpe by ~0.06-0.09 in paired CPU runs
(docs/LEARNING.md, stop 21). They are not in the spec (no FEATURE_SPEC_VERSION bump, the cache keeps
the 51 columns): they are computed after the cache, in float64, and recorded in the feature names and
the spec version string (``"1+mom_vol_adj_120,mom_vol_adj_250"``) that model files carry, so
``foxhunt backtest --model`` rebuilds exactly the columns a model was trained on.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from foxhunt.features.featureset import FeatureSet

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


def long_momentum_in(names: tuple[str, ...] | list[str], n_spec: int) -> tuple[int, ...]:
    """The long-momentum horizons among the columns after the spec's first ``n_spec`` (a model file's
    feature names), in order; stops at the first column that is not one."""
    out = []
    for name in list(names)[n_spec:]:
        m = re.fullmatch(LONG_MOMENTUM_PREFIX + r"(\d+)", name)
        if m is None:
            break
        out.append(int(m.group(1)))
    return tuple(out)


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
