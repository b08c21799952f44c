"""The quant baseline: the simple causal rules a quant would try first, one chosen per fold on the
fold's training window only, then backtested on its validation window like every other policy.

Rules (``rule_set``), on the log returns ``r_t = log(C_t / C_{t-1})``:

* ``flat``;
* ``mom{L}`` / ``rev{L}``: momentum / reversal on an EMA of the log returns with lookback L bars
  (``ema_t = (1 - 1/L) ema_{t-1} + r_t / L``), ``LOOKBACKS`` without those longer than a quarter of
  the training window. The signal is ``z_t = ema_t / (vol_t sqrt(a / (2 - a)))`` with ``a = 1/L`` and
  ``vol_t`` the causal RMS of the returns (an EMA of r^2 with lookback ``max(L, VOL_LOOKBACK)``): the
  EMA in units of its own standard deviation under no edge. Exposure ``+-sign(z_t)``;
* ``mom{L}_band`` / ``rev{L}_band``: the same signal with a hysteresis band ``BAND``: enter long at
  z > BAND (short at z < -BAND), keep the position until the signal crosses to the other band;
  flat until the first entry.

Signals are computed over the whole series from past bars only (row t uses r_0..r_t), so a rule's
exposure at bar t never depends on a later bar. The choice, per fold, is the rule with the highest
annualised Sharpe of a float64 proxy P&L over the training window: exposure e_t decided at t earns
the next bar's simple return, ``e_t R_{t+1} - rate |e_t - e_{t-1}|`` for t+1 < train_end, ``rate``
the env's cost per unit of exposure traded (``cost_rate``: commission, half the spread and the
square-root impact of a full position, estimated on the training window). Ties go to the simpler
rule (the order of ``rule_set``: flat first), so a window where nothing earns chooses flat. The
validation bars never enter the choice. The chosen rule's exposures on the validation window are
then backtested through the same backtester and costs as the agent (``policies.score_exposures``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from foxhunt.features.extra import VOL_FLOOR_LOOKBACK, ema_zscore, log_returns_of
from foxhunt.folds import FoldRange

LOOKBACKS = (10, 30, 100, 300, 1_000, 3_000)
BAND = 1.0
VOL_LOOKBACK = VOL_FLOOR_LOOKBACK


@dataclass(frozen=True)
class Rule:
    """One quant rule. direction: +1 momentum, -1 reversal, 0 flat; band: 0 (none) or BAND."""

    name: str
    lookback: int = 0
    direction: int = 0
    band: float = 0.0


def rule_set(train_len: int) -> list[Rule]:
    """The rules in simplicity order (flat; no band before band; shorter lookbacks first; momentum
    before reversal), without lookbacks longer than a quarter of ``train_len`` bars."""
    out = [Rule("flat")]
    for band in (0.0, BAND):
        for lb in LOOKBACKS:
            if 4 * lb > train_len:
                continue
            for d, tag in ((1, "mom"), (-1, "rev")):
                out.append(Rule(f"{tag}{lb}" + ("_band" if band else ""), lb, d, band))
    return out


def signal(log_returns: np.ndarray, lookback: int) -> np.ndarray:
    """[T] causal z-score of the EMA of ``log_returns`` [T] (see the module docstring; the agents'
    ``ema_mom_{L}`` feature column is the same function): ``foxhunt.features.extra.ema_zscore``."""
    return ema_zscore(log_returns, lookback)


def hysteresis(z: np.ndarray, band: float) -> np.ndarray:
    """[T] +1 after z > band, -1 after z < -band, held in between (0 before the first crossing)."""
    ev = np.where(z > band, 1.0, np.where(z < -band, -1.0, np.nan))
    idx = np.where(np.isnan(ev), -1, np.arange(z.shape[0]))
    last = np.maximum.accumulate(idx)
    return np.where(last >= 0, ev[np.maximum(last, 0)], 0.0)


def exposures(rule: Rule, log_returns: np.ndarray, cache: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """[T] exposures in {-1, 0, 1} of ``rule`` decided at each bar (causal)."""
    n = log_returns.shape[0]
    if rule.direction == 0:
        return np.zeros(n)
    z = cache.get(rule.lookback) if cache is not None else None
    if z is None:
        z = signal(log_returns, rule.lookback)
        if cache is not None:
            cache[rule.lookback] = z
    pos = hysteresis(z, rule.band) if rule.band > 0 else np.sign(z)
    return rule.direction * pos


def cost_rate(env: Mapping[str, Any] | Any, sigma: float, size_over_volume: float) -> float:
    """Approximate cost of one unit of exposure traded at market, as a fraction of the notional:
    commission + half the quoted spread + the square-root impact ``eta sigma sqrt(size / V)`` of a
    full position (ENV_SPEC step 3, normal urgency), capped at ``max_impact``.

    env: EnvParams or a dict with cost_bps, spread_bps, impact_eta (max_impact optional).
    sigma: per-bar volatility of returns; size_over_volume: a full position's units / a bar's volume."""
    get = (lambda k, d=0.0: float(env.get(k, d))) if isinstance(env, Mapping) else (lambda k, d=0.0: float(getattr(env, k, d)))
    impact = min(get("max_impact", 0.05), get("impact_eta") * sigma * math.sqrt(max(size_over_volume, 0.0)))
    return (get("cost_bps") + 0.5 * get("spread_bps")) * 1e-4 + impact


def market_cost_rate(env: Any, close: np.ndarray, volume: np.ndarray, lo: int, hi: int) -> float:
    """``cost_rate`` with sigma and the position's share of volume measured on bars [lo, hi)."""
    c = np.asarray(close[max(lo - 1, 0) : hi], np.float64)
    lr = np.abs(np.diff(np.log(c)))
    sigma = float(np.mean(lr)) * math.sqrt(math.pi / 2.0) if lr.size else 0.0
    reserve = float(getattr(env, "reserve", 0.05)) if not isinstance(env, Mapping) else float(env.get("reserve", 0.05))
    capital = float(getattr(env, "capital", 1e6)) if not isinstance(env, Mapping) else float(env.get("capital", 1e6))
    v = np.maximum(np.asarray(volume[lo:hi], np.float64), 1.0)
    share = float(np.median((1.0 - reserve) * capital / (np.asarray(close[lo:hi], np.float64) * v))) if hi > lo else 0.0
    return cost_rate(env, sigma, share)


def proxy_sharpe(ex: np.ndarray, simple_returns: np.ndarray, lo: int, hi: int, rate: float, bars_per_year: float) -> float:
    """Annualised Sharpe of ``ex[t] * R[t+1] - rate |ex[t] - ex[t-1]|`` for t in [lo, hi - 1) (float64;
    0 when the P&L does not vary, e.g. flat)."""
    e = ex[lo : hi - 1]
    prev = ex[lo - 1] if lo > 0 else 0.0
    pnl = e * simple_returns[lo + 1 : hi] - rate * np.abs(np.diff(np.concatenate([[prev], e])))
    sd = float(np.std(pnl))
    return float(np.mean(pnl) / sd * math.sqrt(bars_per_year)) if sd > 1e-15 and pnl.size > 1 else 0.0


def choose(rules: Sequence[Rule], log_returns: np.ndarray, lo: int, hi: int, rate: float,
           bars_per_year: float) -> tuple[Rule, dict[str, float]]:
    """The rule with the best proxy Sharpe on bars [lo, hi) (ties: the earlier, simpler rule), and
    every rule's score. Reads log_returns[: hi] only."""
    r = np.asarray(log_returns[:hi], np.float64)
    simple = np.expm1(r)
    cache: dict[int, np.ndarray] = {}  # one signal per lookback, over r[:hi]
    scores: dict[str, float] = {}
    best, best_s = rules[0], -math.inf
    for rule in rules:
        s = proxy_sharpe(exposures(rule, r, cache), simple, lo, hi, rate, bars_per_year)
        scores[rule.name] = s
        if s > best_s + 1e-12:
            best, best_s = rule, s
    return best, scores


def quant_exposures(close: np.ndarray, volume: np.ndarray, folds: Sequence[FoldRange], env: Any,
                    bars_per_year: float) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """Per fold: the chosen rule's [val_len - 1] validation exposures (decided at val_start ...
    val_end - 2, as ``score_exposures`` backtests them), chosen on [train_start, train_end) only.

    Returns ({fold: exposures}, info: the chosen rule per fold, its training Sharpe, the cost rate)."""
    r = log_returns_of(close)
    out: dict[int, np.ndarray] = {}
    info: dict[str, Any] = {"rules": [], "train_sharpe": [], "cost_rate_bps": [], "candidates": 0}
    for f in folds:
        rate = market_cost_rate(env, close, volume, f.train_start, f.train_end)
        rules = rule_set(f.train_len)
        rule, scores = choose(rules, r, f.train_start, f.train_end, rate, bars_per_year)
        n = f.val_len - 1
        out[f.fold] = exposures(rule, r)[f.val_start : f.val_start + n]
        info["rules"].append(rule.name)
        info["train_sharpe"].append(scores[rule.name])
        info["cost_rate_bps"].append(rate * 1e4)
        info["candidates"] = max(info["candidates"], len(rules))
    return out, info
