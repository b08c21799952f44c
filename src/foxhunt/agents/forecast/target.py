"""The forecast's training target, causal by construction.

The target of bar t (a decision at its close) is the next h bars' log return in units of the fold's
h-bar volatility:

    y_t = (lr_{t+1} + … + lr_{t+h}) / (σ·√h),   σ = median |lr| over the training bars × √(π/2)

On a pooled universe (``foxhunt.universe_market``) σ is the bar's own symbol's (its training rows' median
|lr|, ``medians_at``), and training bars are drawn from each member symbol's training rows less their last h
(``foxhunt.env.pooled.pooled_starts`` with length h), so no target reads another symbol's bars.

It reads bars t+1 … t+h only. Training bars are drawn from [train_start, train_end − h), so the
target of every bar drawn stays inside the training slice: the last h training bars, whose targets
would read the held-back or validation bars after it, are never drawn (``valid_span``). σ is a
constant of the fold (the market's ``median_abs_return`` of its training slice), not a per-bar
estimate, so the greedy network can undo it exactly (``execution``): a forecast of f is an expected
h-bar return of f·σ·√h.
"""

from __future__ import annotations

import math

import torch

from foxhunt.market import MarketData

SQRT_HALF_PI = math.sqrt(math.pi / 2.0)


def sigma_h(market: MarketData, h: int) -> torch.Tensor:
    """0-d float32: the fold's h-bar volatility σ·√h (log-return units), floored above 0."""
    return (market.median_abs_return * (SQRT_HALF_PI * math.sqrt(h))).clamp_min(1e-12)


def sigma_rows(market: MarketData, bars: torch.Tensor, h: int) -> torch.Tensor:
    """σ·√h of each row of ``bars`` ([...] int64): the fold's 0-d ``sigma_h``, or on a pooled universe with a pooled
    fold current each row's own symbol's ([...] float32)."""
    if not market.pooled:
        return sigma_h(market, h)
    med = market.medians_at(bars.reshape(-1))[1]  # 0-d when no pooled fold is current (the pair its caller set)
    return ((med.view(bars.shape) if med.dim() else med) * (SQRT_HALF_PI * math.sqrt(h))).clamp_min(1e-12)


def valid_span(market: MarketData, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(first bar, count) of the training bars whose target lies inside the training slice, as 0-d int64
    device tensors read from ``market.fold_bounds`` (a new fold needs no new graph): bars
    train_start … train_end − h − 1; the count is at least 1."""
    lo = market.fold_bounds[0]
    return lo, (market.fold_bounds[1] - h - lo).clamp_min(1)


def targets(market: MarketData, bars: torch.Tensor, h: int, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """y of ``bars`` ([...] int64 rows, each ≤ n_rows − 1 − h): [...] float32 (module docstring).
    offsets: ``torch.arange(1, h + 1)`` on the device (pass it to avoid an allocation per call)."""
    if offsets is None:
        offsets = torch.arange(1, h + 1, dtype=torch.int64, device=bars.device)
    idx = bars.unsqueeze(-1) + offsets  # [..., h] bars t+1 … t+h
    ret = market.log_return.index_select(0, idx.reshape(-1)).view(idx.shape).sum(-1)
    return ret / sigma_rows(market, bars, h)


def realised(market: MarketData, bars: torch.Tensor, h: int) -> torch.Tensor:
    """The next h bars' log return of ``bars`` ([...] int64), float64 (the evaluation's realised value)."""
    offsets = torch.arange(1, h + 1, dtype=torch.int64, device=bars.device)
    idx = bars.unsqueeze(-1) + offsets
    return market.log_return.index_select(0, idx.reshape(-1)).view(idx.shape).double().sum(-1)


__all__ = ["realised", "sigma_h", "sigma_rows", "targets", "valid_span"]
