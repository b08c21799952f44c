"""What the direct learner maximises over its windows' net returns: Sharpe, differential Sharpe or
mean − variance, with a turnover penalty and an optional volatility weighting.

Inputs are per-bar net returns r [B, T] from ``agents.direct.pnl`` (the env's costs inside) and the
exposure changes |Δx| [B, T]. Returns are first put in units of the fold's per-bar volatility
σ_bar = median |log return| · √(π/2) (so that every objective and ``direct.turnover_penalty`` mean
the same on minute and daily bars), less the penalty:

    z = (r − turnover_penalty · bps · |Δx|) · w / σ_bar,   w = σ_bar / σ_t with direct.vol_target, else 1

    sharpe:         mean(z) / sqrt(var(z) + 1e-12)                     (pooled over every bar of the batch)
    dsr:            mean_t D_t,  D_t = (B_{t−1}·ΔA_t − ½·A_{t−1}·ΔB_t) / (B_{t−1} − A_{t−1}²)^{3/2}
                    ΔA_t = z_t − A_{t−1}, ΔB_t = z_t² − B_{t−1}; A, B exponential moving moments (rate η)
                    started from the batch's pooled moments (Moody & Saffell's differential Sharpe ratio)
    mean_variance:  mean(z) − λ/2 · var(z)

All are per bar, not annualised (the epoch summary annualises). Pure tensor functions (any float
dtype), differentiable; tests/agents/test_direct_objective.py holds them to a float64 loop and
``torch.autograd.gradcheck``.
"""

from __future__ import annotations

import math

import torch

BPS = 1e-4
SHARPE_EPS = 1e-12  # variance floor in units of σ_bar² (a policy that never trades has var 0)


def scaled_returns(r: torch.Tensor, turnover: torch.Tensor, sigma_bar: torch.Tensor, *, penalty_bps: float = 0.0,
                   weight: torch.Tensor | None = None) -> torch.Tensor:
    """z [B, T] (module docstring): returns less the turnover penalty, × the volatility weight, / σ_bar."""
    z = r - (penalty_bps * BPS) * turnover if penalty_bps else r
    if weight is not None:
        z = z * weight
    return z / sigma_bar


def sharpe(z: torch.Tensor) -> torch.Tensor:
    """Pooled per-bar Sharpe ratio of z [B, T]: mean / sqrt(population variance + 1e-12)."""
    m = z.mean()
    return m / torch.sqrt((z - m).square().mean() + SHARPE_EPS)


def mean_variance(z: torch.Tensor, risk_aversion: float) -> torch.Tensor:
    m = z.mean()
    return m - 0.5 * risk_aversion * (z - m).square().mean()


def ema_weights(t: int, eta: float, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(W [T, T], decay [T]) so that the moving moment after bar t is (z @ W.T)[:, t] + decay[t]·start:
    W[t, s] = η(1 − η)^(t − s) for s ≤ t (0 above), decay[t] = (1 − η)^(t + 1). Host constants."""
    i = torch.arange(t, dtype=torch.float64)
    lag = i[:, None] - i[None, :]
    w = torch.where(lag >= 0, eta * (1.0 - eta) ** lag.clamp_min(0.0), torch.zeros(()))
    return w.to(dtype=dtype, device=device), ((1.0 - eta) ** (i + 1.0)).to(dtype=dtype, device=device)


def differential_sharpe(z: torch.Tensor, w: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """Mean over the batch's bars of Moody & Saffell's D_t (module docstring); w, decay: ``ema_weights``.

    The moving moments start at the batch's pooled first and second moments (each window's first bars
    would otherwise divide by a variance of nothing) and include bar t after it: D_t reads A_{t−1},
    B_{t−1}."""
    a0, b0 = z.mean(), z.square().mean()
    a = z @ w.T + decay * a0  # A_t after bar t, [B, T]
    b = z.square() @ w.T + decay * b0
    a_prev = torch.cat([a0.expand(z.shape[0], 1), a[:, :-1]], dim=1)
    b_prev = torch.cat([b0.expand(z.shape[0], 1), b[:, :-1]], dim=1)
    var = (b_prev - a_prev.square()).clamp_min(SHARPE_EPS)
    d = (b_prev * (z - a_prev) - 0.5 * a_prev * (z.square() - b_prev)) / var.pow(1.5)
    return d.mean()


def vol_weight(vol: torch.Tensor, sigma_bar: torch.Tensor) -> torch.Tensor:
    """σ̄ / σ_t [B, T]: the fold's per-bar volatility over the env's estimate at each decision bar
    (σ_t = v·√(π/2), v the env's EMA of |log return|)."""
    return sigma_bar / (vol * math.sqrt(math.pi / 2.0)).clamp_min(1e-12)


def objective(z: torch.Tensor, kind: str, *, risk_aversion: float = 0.1,
              ema: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The objective ``kind`` ("sharpe" | "dsr" | "mean_variance") of z [B, T]: a 0-d tensor to maximise."""
    if kind == "sharpe":
        return sharpe(z)
    if kind == "mean_variance":
        return mean_variance(z, risk_aversion)
    if kind == "dsr":
        if ema is None:
            raise ValueError("objective 'dsr' needs the EMA weights (ema_weights)")
        return differential_sharpe(z, *ema)
    raise ValueError(f"objective {kind!r}: expected sharpe, dsr or mean_variance")


__all__ = ["differential_sharpe", "ema_weights", "mean_variance", "objective", "scaled_returns", "sharpe", "vol_weight"]
