"""The direct learner's objective and its gradient, against a float64 reference written from
ENV_SPEC (plain Python floats, one window at a time) and against finite differences
(``torch.autograd.gradcheck``), for continuous exposures between the levels (the relaxations'
soft gate) with costs, impact, the turnover penalty and the volatility weighting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from foxhunt.agents.direct.objective import ema_weights, objective, scaled_returns, vol_weight
from foxhunt.agents.direct.pnl import Execution, gather_bars, step_terms, window_returns
from foxhunt.backtest.evaluator import execution_params
from foxhunt.env import EnvParams
from tests.agents.test_direct_pnl import _market

ENV = EnvParams(capital=1e7, cost_bps=1.5, spread_bps=2.0, impact_eta=0.3, max_position=1.5, reserve=0.1)
KINDS = ["sharpe", "dsr", "mean_variance"]


def _setup(b: int = 4, t: int = 24, seed: int = 0, dtype=torch.float64):
    m = _market()
    starts = torch.tensor([5, 140, 400, 777, 901, 66][:b])
    bars = gather_bars(m, starts[:, None] + torch.arange(t)).to(dtype)
    e = execution_params(ENV)  # the exact parameter values (EnvTensors holds float32 roundings of them)
    ex = Execution(*(torch.tensor([v], dtype=dtype) for v in (e.max_position, e.reserve, e.cost_bps * 1e-4, 0.5 * e.spread_bps * 1e-4,
                                                               e.impact_eta, e.max_impact, e.vol_lambda, e.capital)))
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand((b, t), generator=g, dtype=torch.float64) * 1.8 - 0.9).to(dtype)
    return m, bars, ex, x


# ------------------------------------------------------------------ the float64 reference (ENV_SPEC, plain floats)
def reference_returns(x: np.ndarray, bars, env: EnvParams, med_abs: float) -> np.ndarray:
    """Per-bar returns of exposures x [B, T], one window at a time: market orders of normal urgency,
    target q* = x·max_position·(1 − reserve)·E/C_t, re-targeted fully on a level change of >= ½ and by
    the fraction 2·|Δx| below it (the relaxation's gate), a reversal in two legs."""
    close, rel, open1, close1, scale, absret1 = (np.asarray(v, dtype=np.float64) for v in bars)
    out = np.zeros_like(x, dtype=np.float64)
    bps = 1e-4
    for i in range(x.shape[0]):
        cash, q, v, x_prev = env.capital, 0.0, med_abs, 0.0
        for j in range(x.shape[1]):
            eq = cash + q * close[i, j]
            xj = float(x[i, j])
            target = xj * env.max_position * (1 - env.reserve) * eq / close[i, j]
            q_star = q + min(1.0, 2 * abs(xj - x_prev)) * (target - q)
            dq = q_star - q
            d = math.copysign(1.0, dq) if dq != 0 else 0.0
            h = 0.5 * env.spread_bps * bps * rel[i, j]
            sigma = v * math.sqrt(math.pi / 2)
            for s in ([abs(q), abs(q_star)] if q * q_star < 0 else [abs(dq)]):  # a reversal: close, then open
                impact = min(env.impact_eta * sigma * math.sqrt(s) * scale[i, j], env.max_impact)
                price = open1[i, j] * (1 + d * (h + impact))
                cash -= d * s * price + env.cost_bps * bps * s * price
            q, x_prev = q_star, xj
            out[i, j] = (cash + q * close1[i, j] - eq) / eq
            v = env.vol_lambda * v + (1 - env.vol_lambda) * absret1[i, j]
    return out


def reference_objective(r: np.ndarray, turnover: np.ndarray, sigma_bar: float, kind: str, *, penalty: float, weight=None,
                        eta: float = 0.01, lam: float = 0.1) -> float:
    z = (r - penalty * 1e-4 * turnover) * (1.0 if weight is None else weight) / sigma_bar
    flat = z.reshape(-1)
    m = sum(flat) / len(flat)
    var = sum((v - m) ** 2 for v in flat) / len(flat)
    if kind == "sharpe":
        return m / math.sqrt(var + 1e-12)
    if kind == "mean_variance":
        return m - 0.5 * lam * var
    a0, b0 = m, sum(v * v for v in flat) / len(flat)
    total = 0.0
    for row in z:
        a, b = a0, b0
        for v in row:
            var_ab = max(b - a * a, 1e-12)
            total += (b * (v - a) - 0.5 * a * (v * v - b)) / var_ab ** 1.5
            a, b = a + eta * (v - a), b + eta * (v * v - b)
    return total / z.size


def _turnover(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[:, :1].abs(), (x[:, 1:] - x[:, :-1]).abs()], dim=1)


def _objective(x, bars, ex, med, kind, penalty, vol_target):
    r = window_returns(x, bars, ex, med)
    sigma_bar = med.to(x.dtype) * math.sqrt(math.pi / 2)
    weight = vol_weight(step_terms(bars, ex, med).vol, sigma_bar) if vol_target else None
    z = scaled_returns(r, _turnover(x), sigma_bar, penalty_bps=penalty, weight=weight)
    return objective(z, kind, risk_aversion=0.1, ema=ema_weights(x.shape[1], 0.01, x.dtype, x.device))


def test_the_pnl_of_exposures_between_the_levels_equals_the_float64_reference():
    m, bars, ex, x = _setup()
    ours = window_returns(x, bars, ex, m.median_abs_return.double())
    ref = reference_returns(x.numpy(), bars, ENV, float(m.median_abs_return))
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-9, atol=1e-13)
    ours32 = window_returns(x.float(), bars.to(torch.float32), ex.to(torch.float32), m.median_abs_return)
    np.testing.assert_allclose(ours32.numpy(), ref, rtol=0, atol=1e-6)
    assert np.abs(ref).max() > 1e-4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("penalty,vol_target", [(0.0, False), (5.0, True)])
def test_each_objective_equals_the_float64_reference_in_float64_and_float32(kind, penalty, vol_target):
    m, bars, ex, x = _setup()
    med = m.median_abs_return.double()
    r = reference_returns(x.numpy(), bars, ENV, float(med))
    sigma_bar = float(med) * math.sqrt(math.pi / 2)
    weight = vol_weight(step_terms(bars, ex, med).vol, torch.tensor(sigma_bar, dtype=torch.float64)).numpy() if vol_target else None
    ref = reference_objective(r, _turnover(x).numpy(), sigma_bar, kind, penalty=penalty, weight=weight)
    ours = float(_objective(x, bars, ex, med, kind, penalty, vol_target))
    assert ours == pytest.approx(ref, rel=1e-8, abs=1e-12)
    ours32 = float(_objective(x.float(), bars.to(torch.float32), ex.to(torch.float32), m.median_abs_return, kind, penalty,
                              vol_target))
    assert ours32 == pytest.approx(ref, rel=2e-3, abs=1e-5)
    assert abs(ref) > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_the_objectives_gradient_passes_gradcheck_against_finite_differences(kind):
    m, bars, ex, x = _setup(b=3, t=12, seed=1)
    med = m.median_abs_return.double()
    x = x.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: _objective(v, bars, ex, med, kind, 5.0, True), (x,), eps=1e-7, atol=1e-6,
                                    rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_the_float32_gradient_follows_the_float64_one(kind):
    m, bars, ex, x = _setup(b=6, t=40, seed=2)
    grads = []
    for dtype in (torch.float64, torch.float32):
        v = x.to(dtype).clone().requires_grad_(True)
        _objective(v, bars.to(dtype), ex.to(dtype), m.median_abs_return.to(dtype), kind, 5.0, False).backward()
        grads.append(v.grad.double())
    g64, g32 = grads
    assert float((g32 - g64).norm() / g64.norm()) < 1e-3
    assert float(g64.abs().max()) > 0


def test_the_gradient_at_a_flat_portfolio_is_finite():
    """size^1.5 (not size·sqrt(size)) keeps the impact's gradient 0, not NaN, where nothing trades."""
    m, bars, ex, x = _setup(b=2, t=8)
    x = torch.zeros_like(x)
    x[:, 4:] = 0.5
    x.requires_grad_(True)
    _objective(x, bars, ex, m.median_abs_return.double(), "sharpe", 1.0, False).backward()
    assert torch.isfinite(x.grad).all() and float(x.grad.abs().sum()) > 0
