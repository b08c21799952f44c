"""Scoring a policy on the validation windows: per-fold backtests → one row of scorecard figures.

A *policy score* pools a policy's validation folds: the mean of the fold Sharpe ratios, the
compounded total return over all folds, the worst fold's max drawdown, round trips per 1,000
bars, the costs paid (closed round trips' costs, % of the starting capital, summed over folds) and
turnover (mean |Δexposure| per bar). A window whose returns are all zero (flat) has Sharpe 0.
``timing_of`` pools its beta and timing Sharpe against buy-and-hold's score the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ExposurePolicy
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData


@dataclass
class FoldScore:
    """One policy on one validation window. returns / positions: [n] per bar."""

    sharpe: float
    total_return: float
    max_drawdown: float
    trades: int
    costs: float  # currency units, closed round trips
    turnover: float
    returns: np.ndarray
    positions: np.ndarray


@dataclass
class PolicyScore:
    """A policy pooled over folds (see the module docstring)."""

    name: str
    folds: list[FoldScore] = field(default_factory=list)
    capital: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def bars(self) -> int:
        return int(sum(len(f.returns) for f in self.folds))

    def summary(self) -> dict[str, Any]:
        f = self.folds
        bars = max(self.bars, 1)
        total = float(np.prod([1.0 + x.total_return for x in f]) - 1.0) if f else math.nan
        return {
            "sharpe": float(np.mean([x.sharpe for x in f])) if f else math.nan,
            "fold_sharpes": [x.sharpe for x in f],
            "total_return": total,
            "max_drawdown": float(min(x.max_drawdown for x in f)) if f else math.nan,
            "trades_per_1000": 1000.0 * sum(x.trades for x in f) / bars,
            "costs_pct": 100.0 * sum(x.costs for x in f) / self.capital,
            "turnover": float(sum(x.turnover * len(x.returns) for x in f) / bars),
            **self.extra,
        }

    def curve(self) -> np.ndarray:
        """Equity over the concatenated validation windows, starting at 1 ([bars + 1])."""
        r = np.concatenate([x.returns for x in self.folds]) if self.folds else np.zeros(0)
        return np.concatenate([[1.0], np.cumprod(1.0 + r.astype(np.float64))])


def timing_of(policy: PolicyScore, market: PolicyScore | None, bars_per_year: float) -> dict[str, float | None]:
    """The policy's exposure and timing against ``market`` (buy-and-hold's score on the same validation
    windows), pooled over folds as the Sharpe is: ``beta``, the mean of the fold betas, and
    ``timing_sharpe``, the mean of the fold timing Sharpes (``foxhunt.backtest.timing``: the returns
    less beta × buy-and-hold's, annualised; a flat fold's is 0). Both None without a market, with
    folds of other lengths, or where a fold's value is not finite (fewer than 2 bars)."""
    from foxhunt.backtest.timing import annualised_sharpe, beta

    none: dict[str, float | None] = {"beta": None, "timing_sharpe": None}
    if market is None or not policy.folds or len(market.folds) != len(policy.folds):
        return none
    betas, sharpes = [], []
    for f, m in zip(policy.folds, market.folds):
        if len(f.returns) != len(m.returns):
            return none
        r, mr = f.returns.astype(np.float64), m.returns.astype(np.float64)
        b, _ = beta(r, mr)
        betas.append(b)
        sharpes.append(annualised_sharpe(r - b * mr, bars_per_year))
    if not all(math.isfinite(x) for x in sharpes):
        return none
    return {"beta": float(np.mean(betas)), "timing_sharpe": float(np.mean(sharpes))}


def _num(m: dict[str, float | None], key: str) -> float:
    """A metric as a float; run directories store NaN as null."""
    v = m.get(key)
    return math.nan if v is None else float(v)


def _sharpe(m: dict[str, float | None], returns: np.ndarray) -> float:
    s = _num(m, "sharpe")
    if not math.isfinite(s) and not np.any(returns):
        return 0.0  # flat: no risk taken, no return
    return s


def fold_score(metrics: dict[str, float | None], returns: np.ndarray, positions: np.ndarray, costs: float) -> FoldScore:
    pos = np.asarray(positions, dtype=np.float64)
    turnover = float(np.abs(np.diff(np.concatenate([[0.0], pos]))).mean()) if len(pos) else 0.0
    trades = _num(metrics, "trade_count")
    return FoldScore(sharpe=_sharpe(metrics, returns), total_return=_num(metrics, "total_return"),
                     max_drawdown=_num(metrics, "max_drawdown"), trades=int(trades) if math.isfinite(trades) else 0,
                     costs=float(costs), turnover=turnover, returns=np.asarray(returns, np.float32),
                     positions=np.asarray(positions, np.float32))


def flat_score(folds: Sequence[FoldRange], capital: float) -> PolicyScore:
    """Flat: no position, no trade, zero return (exact; no backtest needed)."""
    ps = PolicyScore("flat", capital=capital)
    for f in folds:
        z = np.zeros(f.val_len - 1, np.float32)
        ps.folds.append(FoldScore(0.0, 0.0, 0.0, 0, 0.0, 0.0, z, z))
    return ps


def score_exposures(market: MarketData, backtester: Backtester, folds: Sequence[FoldRange],
                    rules: dict[str, Any], n_actions: int, capital: float, backend: str = "torch") -> dict[str, PolicyScore]:
    """Backtest fixed exposure rules on each fold's validation window (bars val_start+1 … val_end-1).

    rules: name → [T] exposure array over the whole market (decided at bar t), or a callable
    fold → [val_len - 1] exposures for that window. All rules of a fold step in one lockstep run, under
    that fold's statistics (order routing reads the fold's medians), like the agent's evaluation.
    backend: ``Backtester.run``'s ("torch" | "fused": the run plan's ``eval``; exposure rules are
    fixed actions, which the fused kernel always covers). Leaves the market on the last fold.
    """
    out = {name: PolicyScore(name, capital=capital) for name in rules}
    names = list(rules)
    for f in folds:
        market.set_fold(f)
        n = f.val_len - 1
        rows = []
        for name in names:
            r = rules[name]
            ex = r(f) if callable(r) else np.asarray(r)[f.val_start : f.val_start + n]
            rows.append(np.clip(np.asarray(ex, np.float64), -1.0, 1.0))
        ex_t = torch.as_tensor(np.stack(rows), dtype=torch.float32, device=market.device)
        res = backtester.run([f.val_start] * len(names), [n] * len(names), ExposurePolicy(ex_t, n_actions),
                             keep_curves=True, keep_trades=True, backend=backend)
        assert res.returns is not None and res.positions is not None and res.trades is not None
        costs = np.zeros(len(names))
        for t in res.trades:
            costs[int(t["window"])] += float(t["costs"])
        for i, name in enumerate(names):
            out[name].folds.append(fold_score(res.metrics[i], res.returns[i, :n], res.positions[i, :n], costs[i]))
    return out
