"""The net P&L of exposures over windows of the market, as the env books it, differentiable.

What the direct learner trains on must be what the backtester trades, so this is the env's own
execution (ENV_SPEC "One step") for the one fill path the direct policy uses: a market order of
normal urgency (``ExposurePolicy``'s), filled at the next bar's open with half the spread
(× the bar's range over the fold's median range, clamped to [¼, 4]), square-root impact per leg
(η·σ·√(size/volume), capped; σ the env's volatility EMA × √(π/2)), the commission on the filled
notional, a reversal as two legs, equity compounding and sizing by the current equity:

    level change:  q* = x · max_position · (1 − reserve) · E_t / C_t;   held level:  q* = q
    ΔE = q·(C_{t+1} − C_t) − Σ_legs [dq·(O_{t+1} − C_{t+1}) + size·O_{t+1}·(h + I)
                                      + cost_rate·size·O_{t+1}·(1 + d·(h + I))]
    r_t = ΔE / E_t

Exposures x are fractions of max_position in [−1, 1]. On the env's five levels this equals the
torch backtester's returns for the same levels to float32 rounding (tests/agents/test_direct_pnl.py).
Between levels (the learner's relaxations) the rule "a held level never trades" becomes a soft
gate: the position moves g = min(1, 2·|x − x_prev|) of the way to the new target, so an exposure
that changes by half a level or more re-targets fully (exact on the levels) and a small change
trades a small part; every piece is differentiable almost everywhere (the impact term is written
as min(η·σ·size^1.5/√V, cap·size), whose gradient at size 0 is 0, not 0·∞). ``hard_gate`` (the
straight-through relaxation) keeps the exact 0/1 gate in the forward pass and lets a held bar's
gradient flow as if its position followed x.

Not modelled (the direct learner's configuration excludes them: ``agents.direct.checks``): Kelly
sizing, limit and IoC orders; a bust ends a backtest window, not a training window. Shapes:
[B] per bar, [B, T] per window; dtype follows the inputs (float32 in training, float64 in tests).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from foxhunt.env.params import EnvTensors
from foxhunt.market import MarketData

SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
TINY_VOLUME = 1e-30  # the env's floor under a zero-volume bar (impact then at its cap)
LEVELS = (-1.0, -0.5, 0.0, 0.5, 1.0)
"""The env's five exposure levels, fractions of max_position (level index 0 … 4)."""


class Execution(NamedTuple):
    """The execution parameters the P&L reads: live views of the env's [N] parameter tensors (N = 1
    broadcasts over the windows), so that ``VecTradingEnv.set_params`` (a cost curriculum) changes
    them in place under a captured graph."""

    max_position: torch.Tensor
    reserve: torch.Tensor
    cost_rate: torch.Tensor
    half_spread: torch.Tensor
    impact_eta: torch.Tensor
    max_impact: torch.Tensor
    vol_lambda: torch.Tensor
    capital: torch.Tensor

    @classmethod
    def of(cls, params: EnvTensors) -> "Execution":
        return cls(*(getattr(params, name) for name in cls._fields))

    def to(self, dtype: torch.dtype) -> "Execution":
        return Execution(*(t.to(dtype) for t in self))


class WindowBars(NamedTuple):
    """Market values of B windows × T steps, [B, T] each: step j decides at bar s + j (its close) and
    fills at bar s + j + 1 (s the window's start)."""

    close: torch.Tensor  # C_t
    rel_range: torch.Tensor  # clamp(rg_t / median range, 0.25, 4); 1 when the median is not > 0
    open1: torch.Tensor  # O_{t+1}
    close1: torch.Tensor  # C_{t+1}
    impact_scale: torch.Tensor  # 1 / sqrt(max(V_{t+1}, 1e-30)); 0 for a market without volume (no impact)
    absret1: torch.Tensor  # |lr_{t+1}|: the volatility EMA's input

    def at(self, j: int) -> "WindowBars":
        """Step j's values, [B] each."""
        return WindowBars(*(t[:, j] for t in self))

    def to(self, dtype: torch.dtype) -> "WindowBars":
        return WindowBars(*(t.to(dtype) for t in self))


def gather_bars(market: MarketData, idx: torch.Tensor) -> WindowBars:
    """The bars of windows whose decision bars are ``idx`` ([B, T] int64 rows of the market, each
    < n_rows − 1), read from the device arrays (gathers, no host reads)."""
    flat = idx.reshape(-1)
    nxt = flat + 1
    shape = idx.shape
    ohlc = market.ohlc
    close = ohlc[:, 3].index_select(0, flat).view(shape)
    # the fold's median range; on a pooled universe each bar's own symbol's (foxhunt.universe_market)
    med = market.medians_at(flat)[0].view(shape) if market.pooled else market.median_range
    rg = market.bar_range.index_select(0, flat).view(shape)
    rel = torch.where(med > 0, (rg / torch.where(med > 0, med, 1.0)).clamp(0.25, 4.0), 1.0)
    open1 = ohlc[:, 0].index_select(0, nxt).view(shape)
    close1 = ohlc[:, 3].index_select(0, nxt).view(shape)
    if market.has_volume:
        scale = market.volume.index_select(0, nxt).view(shape).clamp_min(TINY_VOLUME).rsqrt()
    else:
        scale = torch.zeros_like(close)
    absret1 = market.log_return.index_select(0, nxt).view(shape).abs()
    return WindowBars(close, rel, open1, close1, scale, absret1)


class Terms(NamedTuple):
    """The data-only part of every step, [B, T] each (from ``WindowBars`` and the execution parameters;
    no gradient flows through them): what ``bar_step`` multiplies the policy's positions by."""

    unit: torch.Tensor  # max_position·(1 − reserve) / C_t: units per unit of exposure and of equity
    d_close: torch.Tensor  # C_{t+1} − C_t
    open_gap: torch.Tensor  # O_{t+1} − C_{t+1}
    open1: torch.Tensor  # O_{t+1}
    close1: torch.Tensor  # C_{t+1}
    half_spread: torch.Tensor  # h = half spread × relative range
    impact: torch.Tensor  # η·σ_t / sqrt(V_{t+1}), σ_t = v_t·√(π/2) (0 without volume)
    vol: torch.Tensor  # v_t: the env's EMA of |log return| at the decision bar (from the fold's median at the start)

    def at(self, j: int) -> "Terms":
        return Terms(*(t[:, j] for t in self))


def step_terms(bars: WindowBars, ex: Execution, median_abs_return: torch.Tensor) -> Terms:
    """``Terms`` of windows starting from a fresh portfolio (v = the fold's median |log return|: 0-d, or
    [B] one a window on a pooled universe).
    The volatility EMA does not depend on the positions, so it runs here, without autograd."""
    with torch.no_grad():
        b, t = bars.close.shape
        lam = ex.vol_lambda.to(bars.close.dtype)
        v = torch.zeros(b, dtype=bars.close.dtype, device=bars.close.device) + median_abs_return.to(bars.close.dtype)
        vols = []
        for j in range(t):
            vols.append(v)
            v = lam * v + (1.0 - lam) * bars.absret1[:, j]
        vol = torch.stack(vols, dim=1)
    return Terms(ex.max_position * (1.0 - ex.reserve) / bars.close, bars.close1 - bars.close, bars.open1 - bars.close1,
                 bars.open1, bars.close1, ex.half_spread * bars.rel_range,
                 ex.impact_eta * SQRT_HALF_PI * vol * bars.impact_scale, vol)


class Book(NamedTuple):
    """A window's portfolio between bars, [B] each: position q (units), equity E, and the exposure last
    decided (the gate's reference; 0, the flat level, at a window's start)."""

    q: torch.Tensor
    equity: torch.Tensor
    x_prev: torch.Tensor


def fresh_book(n: int, ex: Execution, dtype: torch.dtype = torch.float32) -> Book:
    """B flat portfolios at the initial capital (as a backtest window starts)."""
    zero = torch.zeros(n, dtype=dtype, device=ex.capital.device)
    return Book(zero, zero + ex.capital.to(dtype), zero)


class BarResult(NamedTuple):
    book: Book  # after the fill and the mark at C_{t+1}
    ret: torch.Tensor  # [B] ΔE / E_t
    exposure: torch.Tensor  # [B] q·C_{t+1} / E_{t+1}: the observation's exposure feature at the next bar
    traded: torch.Tensor  # [B] Σ leg sizes · O_{t+1} / E_t: notional traded, fraction of equity


def bar_step(book: Book, x: torch.Tensor, terms: Terms, ex: Execution, hard_gate: bool = False) -> BarResult:
    """One bar of every window with exposure ``x`` ([B], fractions of max_position) decided at its
    close (``terms``: that step's [B] values, ``Terms.at``). Branch-free device ops."""
    q, equity, x_prev = book
    unit = terms.unit * equity  # units per unit of exposure
    dx = x - x_prev
    if hard_gate:  # the exact rule in the forward pass; a held bar's gradient as if q followed x
        q_star = torch.where(dx.detach() != 0, x * unit, q + (x - x.detach()) * unit)
    else:
        q_star = q + (2.0 * dx.abs()).clamp(max=1.0) * (x * unit - q)
    dq = q_star - q
    rev = (q * q_star) < 0  # both non-zero, opposite sides: close, then open
    legs = torch.stack([torch.where(rev, q, dq), torch.where(rev, q_star, torch.zeros_like(q))]).abs()  # [2, B] sizes
    imp = torch.minimum(terms.impact * legs.pow(1.5), ex.max_impact * legs).sum(0)  # Σ size·I
    size = legs.sum(0)
    slip = terms.half_spread * size + imp  # Σ size·(h + I), per unit of O_{t+1}
    pnl = q * terms.d_close - dq * terms.open_gap - terms.open1 * (slip + ex.cost_rate * (size + torch.sign(dq) * slip))
    equity1 = equity + pnl
    exposure = q_star * terms.close1 / torch.maximum(equity1, ex.capital * 1e-6)
    return BarResult(Book(q_star, equity1, x), pnl / equity, exposure, size * terms.open1 / equity)


def window_returns(x: torch.Tensor, bars: WindowBars, ex: Execution, median_abs_return: torch.Tensor,
                   hard_gate: bool = False) -> torch.Tensor:
    """Per-bar net returns [B, T] of fixed exposures ``x`` ([B, T]; x[:, j] decided at step j's bar)
    from flat portfolios: what the backtester computes for the same levels (ENV_SPEC)."""
    b, t = x.shape
    terms = step_terms(bars, ex, median_abs_return)
    book = fresh_book(b, ex, x.dtype)
    out = []
    for j in range(t):
        res = bar_step(book, x[:, j], terms.at(j), ex, hard_gate)
        book = res.book
        out.append(res.ret)
    return torch.stack(out, dim=1)


__all__ = ["LEVELS", "BarResult", "Book", "Execution", "Terms", "WindowBars", "bar_step", "fresh_book", "gather_bars", "step_terms",
           "window_returns"]
