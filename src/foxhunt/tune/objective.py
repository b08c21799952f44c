"""A trial's score from its folds: fold-aggregated validation Sharpe, spread penalty, constraints.

score = aggregate(fold Sharpes) − spread_penalty × std(fold Sharpes)   (std with ddof 0)
aggregate: mean | median | worst (the minimum). A trial that breaks a constraint (mean round trips
per fold below ``min_trades``; any fold's max drawdown deeper than ``max_drawdown``, a positive
fraction, while the metrics give drawdowns as fractions <= 0) is *infeasible*: its
score is lowered by ``constraint_penalty`` and it is never chosen as the best trial while a feasible
one exists.

The pruner sees a *running* score after each fold: for the median pruner, the objective over the
folds finished so far (the quantity the trial is finally judged by); for the Wilcoxon pruner, the
fold's own Sharpe (it pairs fold k of this trial with fold k of the best trial).

Per-bar validation returns are kept as power sums (n, Σr, Σr², Σr³, Σr⁴) across folds, so the
deflated Sharpe ratio can use the selected trial's per-bar Sharpe, skewness and kurtosis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np


def aggregate(sharpes: Sequence[float], how: str, spread_penalty: float) -> float:
    """The fold-aggregated score of fold Sharpes [K] (float64). Non-finite Sharpes count as 0
    (a window with no variance, e.g. an agent that stays flat)."""
    s = np.asarray([v if v is not None and math.isfinite(v) else 0.0 for v in sharpes], dtype=np.float64)
    if s.size == 0:
        raise ValueError("aggregate: no folds")
    if how == "mean":
        base = float(s.mean())
    elif how == "median":
        base = float(np.median(s))
    elif how == "worst":
        base = float(s.min())
    else:
        raise ValueError(f"aggregate: unknown objective {how!r}")
    return base - spread_penalty * float(s.std())


@dataclass
class PowerSums:
    """Σ r^p for p = 0…4 over per-bar returns (float64), merged across folds."""

    sums: list[float] = field(default_factory=lambda: [0.0] * 5)

    def add(self, returns: np.ndarray) -> None:
        r = np.asarray(returns, dtype=np.float64)
        for p in range(5):
            self.sums[p] += float(np.sum(r**p))

    def moments(self) -> dict[str, float]:
        """Per-bar Sharpe (mean/std, ddof 0), skewness, kurtosis (non-excess; 3 for a normal)."""
        n, s1, s2, s3, s4 = self.sums
        if n < 2:
            return {"n": n, "sharpe": float("nan"), "skew": float("nan"), "kurtosis": float("nan")}
        mu = s1 / n
        m2 = s2 / n - mu**2
        m3 = s3 / n - 3 * mu * s2 / n + 2 * mu**3
        m4 = s4 / n - 4 * mu * s3 / n + 6 * mu**2 * s2 / n - 3 * mu**4
        if m2 <= 1e-30:
            return {"n": n, "sharpe": 0.0, "skew": 0.0, "kurtosis": 3.0}
        return {"n": n, "sharpe": mu / math.sqrt(m2), "skew": m3 / m2**1.5, "kurtosis": m4 / m2**2}


@dataclass
class FoldScores:
    """What a trial has measured so far, one entry per finished fold."""

    sharpe: list[float] = field(default_factory=list)
    trades: list[float] = field(default_factory=list)
    max_drawdown: list[float] = field(default_factory=list)
    total_return: list[float] = field(default_factory=list)
    returns: PowerSums = field(default_factory=PowerSums)

    def add(self, metrics: dict[str, float], returns: np.ndarray | None) -> None:
        self.sharpe.append(_finite(metrics.get("sharpe")))
        self.trades.append(_finite(metrics.get("trade_count")))
        self.max_drawdown.append(_finite(metrics.get("max_drawdown")))
        self.total_return.append(_finite(metrics.get("total_return")))
        if returns is not None:
            self.returns.add(returns)

    def to_attrs(self) -> dict[str, Any]:
        """JSON-safe user attributes stored with the Optuna trial."""
        return {"fold_sharpe": self.sharpe, "fold_trades": self.trades, "fold_max_drawdown": self.max_drawdown,
                "fold_total_return": self.total_return, "return_power_sums": self.returns.sums}


def _finite(v: Any) -> float:
    return float(v) if v is not None and math.isfinite(float(v)) else 0.0


def violations(scores: FoldScores, min_trades: float, max_drawdown: float) -> list[str]:
    """The constraints the trial breaks (empty: feasible)."""
    out = []
    if min_trades > 0 and float(np.mean(scores.trades)) < min_trades:
        out.append(f"mean trades per fold {np.mean(scores.trades):.1f} < {min_trades:g}")
    worst = max(abs(d) for d in scores.max_drawdown)  # the metrics give drawdowns as fractions <= 0
    if max_drawdown < 1.0 and worst > max_drawdown:
        out.append(f"max drawdown {worst:.1%} > {max_drawdown:.1%}")
    return out


def trial_score(scores: FoldScores, tcfg: Any) -> tuple[float, list[str]]:
    """(score, violated constraints) of a finished trial under the ``[tune]`` settings ``tcfg``."""
    score = aggregate(scores.sharpe, tcfg.objective, tcfg.spread_penalty)
    bad = violations(scores, tcfg.min_trades, tcfg.max_drawdown)
    return (score - tcfg.constraint_penalty if bad else score), bad


def running_value(scores: FoldScores, tcfg: Any) -> float:
    """What the trial reports to the pruner after its latest fold (see the module docstring)."""
    if tcfg.pruner == "wilcoxon":
        return scores.sharpe[-1]
    return aggregate(scores.sharpe, tcfg.objective, tcfg.spread_penalty)
