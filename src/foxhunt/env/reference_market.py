"""Plain float64 inputs of the float64 oracle: market arrays, fold medians and env parameters.

Written from docs/ENV_SPEC.md only. ``ReferenceMarket`` holds numpy float64 copies of exactly what
the trading env reads from ``MarketData`` (the float32 device values converted to float64, so that
the oracle and the device env see the same prices), plus the current fold's medians and bounds.
``DEFAULT_PARAMS`` / ``resolve_params`` are the spec's parameter table for one env.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Union

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from foxhunt.market import MarketData

ParamValue = Union[float, int, bool, str]

DEFAULT_PARAMS: dict[str, ParamValue] = {
    "capital": 1e6,
    "max_position": 1.0,
    "reserve": 0.05,
    "cost_bps": 1.0,
    "spread_bps": 1.0,
    "impact_eta": 0.1,
    "max_impact": 0.05,
    "participation": 0.1,
    "vol_lambda": 0.94,
    "profit_bps": 50.0,
    "stop_bps": 50.0,
    "max_holding": 60,
    "barrier_profit_scale": 0.5,
    "barrier_stop_scale": -0.5,
    "end_on_barrier": False,
    "risk_threshold": 0.8,
    "risk_weight": 0.001,
    "diversity_window": 100,
    "diversity_threshold": 1.0,
    "diversity_penalty": 1e-4,
    "curiosity_weight": 1.0,
    "curiosity_max": 1e-4,
    "reward_mode": "return",
    "dsr_eta": 0.01,
    "dsr_clip": 10.0,
    "reward_scale": 1.0,
    "kelly": False,
    "kelly_fraction": 0.5,
    "kelly_min_mult": 0.1,
    "kelly_min_trades": 10,
    "kelly_alpha": 0.05,
    "episode_length": 256,
    "bust_fraction": 0.1,
    "action_mode": "factored",
    "decision_interval": 1,
}
"""The spec's parameter table (name → default). decision_interval is read by ``step_decision``'s
caller (it passes k); ``step`` itself is one bar."""

_INF = math.inf
# name → (low, low inclusive, high, high inclusive); the spec's "rule" column for numeric params.
_RULES: dict[str, tuple[float, bool, float, bool]] = {
    "capital": (0, False, _INF, False),
    "max_position": (0, False, 10, True),
    "reserve": (0, True, 1, False),
    "cost_bps": (0, True, _INF, False),
    "spread_bps": (0, True, _INF, False),
    "impact_eta": (0, True, _INF, False),
    "max_impact": (0, True, _INF, False),
    "participation": (0, False, 1, True),
    "vol_lambda": (0, False, 1, False),
    "profit_bps": (0, False, _INF, False),
    "stop_bps": (0, False, 10_000, False),
    "max_holding": (1, True, _INF, False),
    "barrier_profit_scale": (-1, True, _INF, False),
    "barrier_stop_scale": (-1, True, _INF, False),
    "risk_threshold": (0, True, 10, True),
    "risk_weight": (0, True, _INF, False),
    "diversity_threshold": (0, True, math.log2(3), True),
    "diversity_penalty": (0, True, _INF, False),
    "curiosity_weight": (0, True, _INF, False),
    "curiosity_max": (0, True, _INF, False),
    "dsr_eta": (0, False, 1, False),
    "dsr_clip": (0, False, _INF, False),
    "reward_scale": (0, False, _INF, False),
    "kelly_fraction": (0, False, 1, True),
    "kelly_min_mult": (0, False, 1, True),
    "kelly_min_trades": (1, True, _INF, False),
    "kelly_alpha": (0, False, 1, False),
    "episode_length": (1, True, _INF, False),
    "decision_interval": (1, True, 1024, True),
    "bust_fraction": (0, True, 1, False),
}
_CHOICES = {"reward_mode": ("return", "pnl", "dsr"), "action_mode": ("factored", "exposure")}


def resolve_params(params: Mapping[str, ParamValue] | None) -> dict[str, ParamValue]:
    """Defaults overlaid with ``params``; unknown names and broken rules raise ValueError."""
    out = dict(DEFAULT_PARAMS)
    for name, value in (params or {}).items():
        if name not in DEFAULT_PARAMS:
            raise ValueError(f"unknown env parameter {name!r}")
        out[name] = value
    for name, (lo, lo_inc, hi, hi_inc) in _RULES.items():
        v = float(out[name])  # type: ignore[arg-type]
        ok = (v >= lo if lo_inc else v > lo) and (v <= hi if hi_inc else v < hi)
        if not ok:
            rule = f"{'[' if lo_inc else '('}{lo}, {hi}{']' if hi_inc else ')'}"
            raise ValueError(f"env parameter {name}={v!r} breaks the rule: must lie in {rule}")
    for name, choices in _CHOICES.items():
        if out[name] not in choices:
            raise ValueError(f"env parameter {name}={out[name]!r} breaks the rule: one of {choices}")
    if int(out["diversity_window"]) != 100:
        raise ValueError(f"env parameter diversity_window={out['diversity_window']!r} is fixed at 100")
    return out


def _f64(x: object) -> np.ndarray:
    """A tensor or array as a contiguous float64 numpy array (float32 values converted exactly)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()  # type: ignore[union-attr]
    return np.ascontiguousarray(np.asarray(x, dtype=np.float64))


@dataclass
class ReferenceMarket:
    """float64 copies of the market arrays an env reads, and one fold's medians and bounds.

    open/high/low/close/volume/log_return/bar_range: [T] float64 (exact copies of the float32
    device values); has_volume: False → no impact and uncapped IoC fills;
    med_absret / med_range / med_volume: the fold's training-slice medians;
    train_start, train_end, val_start, val_end: the fold bounds (ends exclusive);
    mirror_offset: the mirrored copy's first row (``MarketData.mirror_offset``; 0: none).
    """

    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    log_return: np.ndarray
    bar_range: np.ndarray
    has_volume: bool
    med_absret: float
    med_range: float
    med_volume: float
    train_start: int
    train_end: int
    val_start: int
    val_end: int
    mirror_offset: int = 0

    @property
    def n_bars(self) -> int:
        return int(self.close.shape[0])

    @classmethod
    def from_market(cls, market: "MarketData") -> "ReferenceMarket":
        """Read the arrays, medians and bounds of ``market`` (a fold must be set)."""
        if market.fold is None:
            raise ValueError("ReferenceMarket.from_market: call market.set_fold(...) first")
        ohlc = _f64(market.ohlc)
        bounds = [int(b) for b in market.fold_bounds.cpu().tolist()]
        return cls(
            open=ohlc[:, 0].copy(),
            high=ohlc[:, 1].copy(),
            low=ohlc[:, 2].copy(),
            close=ohlc[:, 3].copy(),
            volume=_f64(market.volume),
            log_return=_f64(market.log_return),
            bar_range=_f64(market.bar_range),
            has_volume=bool(market.has_volume),
            med_absret=float(market.median_abs_return),
            med_range=float(market.median_range),
            med_volume=float(market.median_volume),
            train_start=bounds[0],
            train_end=bounds[1],
            val_start=bounds[2],
            val_end=bounds[3],
            mirror_offset=int(market.mirror_offset),
        )

    @classmethod
    def from_ohlcv(
        cls,
        open: object,
        high: object,
        low: object,
        close: object,
        volume: object | None = None,
        *,
        train: tuple[int, int] | None = None,
        med_absret: float | None = None,
        med_range: float | None = None,
        med_volume: float | None = None,
    ) -> "ReferenceMarket":
        """A market from hand-written bars (for worked examples).

        log_return and bar_range follow the spec's definitions; medians default to the medians of
        the training slice (bars ``max(train_start, 1)`` onwards for |lr|); ``volume=None`` means
        no volume. ``train`` defaults to all bars; validation is the empty range at the end.
        """
        o, h, lo, c = _f64(open), _f64(high), _f64(low), _f64(close)
        n = c.shape[0]
        has_volume = volume is not None
        v = _f64(volume) if has_volume else np.ones(n)
        lr = np.zeros(n)
        lr[1:] = np.log(c[1:] / c[:-1])
        rg = (h - lo) / c
        ts, te = train if train is not None else (0, n)
        sl = slice(max(ts, 1), te)
        return cls(
            open=o, high=h, low=lo, close=c, volume=v, log_return=lr, bar_range=rg, has_volume=has_volume,
            med_absret=float(np.median(np.abs(lr[sl]))) if med_absret is None else float(med_absret),
            med_range=float(np.median(rg[ts:te])) if med_range is None else float(med_range),
            med_volume=float(np.median(v[ts:te])) if med_volume is None else float(med_volume),
            train_start=ts, train_end=te, val_start=te, val_end=n,
        )
