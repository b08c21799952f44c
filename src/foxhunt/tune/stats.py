"""Overfitting statistics of a search, in float64: the deflated Sharpe ratio and the PBO.

* Deflated Sharpe ratio (Bailey and López de Prado, "The Deflated Sharpe Ratio: Correcting for
  Selection Bias, Backtest Overfitting and Non-Normality", J. Portfolio Management 40(5), 2014):
  the probability that the selected strategy's true Sharpe exceeds the Sharpe the best of N
  worthless trials would show by luck,

      SR0 = sqrt(V[SR_n]) · ((1 − γ) Φ⁻¹(1 − 1/N) + γ Φ⁻¹(1 − 1/(N e)))        (γ: Euler–Mascheroni)
      DSR = Φ( (SR − SR0) √(T − 1) / √(1 − γ3 SR + (γ4 − 1)/4 · SR²) )

  with SR, V[SR_n] per bar (not annualised), T the number of returns, γ3 the skewness and γ4 the
  (non-excess) kurtosis of the selected strategy's returns.
* Probability of backtest overfitting (Bailey, Borwein, López de Prado and Zhu, "The Probability
  of Backtest Overfitting", J. Computational Finance 20(4), 2017), by combinatorially symmetric
  cross-validation over a performance matrix M [S blocks × N trials]: for every way of choosing
  S/2 blocks as in-sample (the rest out-of-sample), pick the trial with the best in-sample mean,
  take its out-of-sample relative rank ω = rank/(N + 1) (rank 1 = worst, ties averaged) and its
  logit λ = ln(ω / (1 − ω)); PBO is the fraction of splits with λ ≤ 0 (the in-sample winner at
  or below the out-of-sample median). Here the blocks are the walk-forward folds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

EULER_GAMMA = 0.5772156649015329
_N = NormalDist()


def expected_max_sharpe(n_trials: int, sharpe_variance: float) -> float:
    """SR0: the expected maximum Sharpe of ``n_trials`` independent zero-skill trials whose Sharpe
    estimates have variance ``sharpe_variance`` (False Strategy theorem; per-bar units in, out)."""
    if n_trials < 1:
        raise ValueError("expected_max_sharpe: n_trials must be >= 1")
    if n_trials == 1 or sharpe_variance <= 0:
        return 0.0
    z1 = _N.inv_cdf(1.0 - 1.0 / n_trials)
    z2 = _N.inv_cdf(1.0 - 1.0 / (n_trials * math.e))
    return math.sqrt(sharpe_variance) * ((1.0 - EULER_GAMMA) * z1 + EULER_GAMMA * z2)


def probabilistic_sharpe(sharpe: float, benchmark: float, n_obs: int, skew: float = 0.0, kurtosis: float = 3.0) -> float:
    """PSR: P(true Sharpe > benchmark) given the estimate from ``n_obs`` returns (per-bar units)."""
    if n_obs < 2:
        raise ValueError("probabilistic_sharpe: needs at least 2 observations")
    denom = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe**2
    if denom <= 0:
        return float("nan")
    return _N.cdf((sharpe - benchmark) * math.sqrt(n_obs - 1) / math.sqrt(denom))


def deflated_sharpe(sharpe: float, n_obs: int, n_trials: int, sharpe_variance: float, skew: float = 0.0,
                    kurtosis: float = 3.0) -> tuple[float, float]:
    """(DSR, SR0): the PSR of ``sharpe`` against the expected maximum of ``n_trials`` lucky trials."""
    sr0 = expected_max_sharpe(n_trials, sharpe_variance)
    return probabilistic_sharpe(sharpe, sr0, n_obs, skew, kurtosis), sr0


@dataclass(frozen=True)
class PBOResult:
    pbo: float
    logits: np.ndarray  # [C] λ per split
    n_splits: int
    blocks: int  # S (even) blocks used


def _rank_avg(x: np.ndarray) -> np.ndarray:
    """Ascending ranks 1…N with ties averaged (float64)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def pbo_cscv(perf: Sequence[Sequence[float]] | np.ndarray) -> PBOResult:
    """PBO of a performance matrix ``perf`` [S blocks × N trials] (higher is better).

    S must be >= 2; an odd S drops the first (oldest) block so the halves are equal. N >= 2.
    """
    m = np.asarray(perf, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] < 2 or m.shape[0] < 2:
        raise ValueError(f"pbo_cscv: need a [blocks >= 2, trials >= 2] matrix, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError("pbo_cscv: the performance matrix has non-finite entries")
    if m.shape[0] % 2:
        m = m[1:]
    s, n = m.shape
    logits = []
    for is_rows in itertools.combinations(range(s), s // 2):
        oos_rows = [r for r in range(s) if r not in is_rows]
        best = int(np.argmax(m[list(is_rows)].mean(axis=0)))  # first of tied in-sample winners
        ranks = _rank_avg(m[oos_rows].mean(axis=0))
        w = ranks[best] / (n + 1.0)
        logits.append(math.log(w / (1.0 - w)))
    lam = np.asarray(logits, dtype=np.float64)
    return PBOResult(float(np.mean(lam <= 0.0)), lam, len(lam), s)
