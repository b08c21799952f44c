"""Execution through the costs: the forecast → the exposure level, and the greedy network that runs it.

At a decision with forecast f (the next h bars' return in units of the fold's h-bar volatility
σ_h = σ·√h, ``agents.forecast.target``) and current exposure x (fraction of max_position), the
level taken is

    e* = argmax_e  f·L_e − c·|L_e − x| − r·L_e²,   L_e ∈ (−1, −½, 0, ½, 1) (the env's levels)

every term in units of max_position·(1 − reserve)·σ_h of equity (a common positive factor, which
leaves the argmax unchanged):

* f·L_e: the expected h-bar return of level L_e;
* c·|L_e − x|: the env's cost of moving the exposure there with a market order of normal urgency
  (``env.bar_step``, ENV_SPEC): commission on the filled notional plus the half spread at the
  fold's median bar range, c = (cost_rate + half_spread·(1 + cost_rate)) / σ_h (cost_rate =
  env.cost_bps·1e-4, half_spread = ½·env.spread_bps·1e-4, at the training env's costs, so
  ``train.train_cost_multiplier`` widens the band; a cost curriculum's ramp does not change it). Square-root impact is left out (it grows with
  the trade's size against the bar's volume: zero on a market without volume, small for the
  accounts the configs trade);
* r·L_e²: the risk term, r = λ·v with λ = ``forecast.risk_aversion`` and v the forecast's mean
  squared error (in h-bar variances) over the fold's held-back window with ``train.select =
  "inner"`` (out of sample; the bars whose target lies inside it), else over its training bars
  (``band``; ``evaluate.error_variance``).

A level is left only when the forecast's edge beats the switch: a no-trade band of width ~c around
each level. x is the observation's exposure feature q·C_t/E divided by max_position·(1 − reserve),
the exposure a level holds right after its fill (it drifts with the price between decisions).

``pack`` writes the rule as a ``DuelingQNet`` over the 45 factored actions (obs = features ++ the 3
portfolio features): the trunk is the forecast network's trunk with two more units per layer that
carry ±x through the LeakyReLUs (lrelu(x) − lrelu(−x) = (1 + s)·x); the advantage head's hidden
layer holds ±f and ±(L_e − x) (|y| = (lrelu(y) + lrelu(−y)) / (1 − s)); its output is each level's
score, every non-market order of the level ``MARGIN`` below it; the value head is zero. Its argmax is
e*'s market order of normal urgency, so model files, both backtesters (the fused kernel runs a
two-layer trunk: ``forecast.hidden`` of length 2), ensembles (the mean of the members' scores: the
rule on their mean forecast and mean risk), abstention, the scorecard and tune run it unchanged.
With ``forecast.policy = "attention"`` the greedy network is a ``SequenceQNet`` (the same packing plus
the lag attention, whose output rows for the two ±x units are zero), which the torch backtester runs
(it binds the market's bars to it); the fused kernels and ensembles do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from foxhunt.agents.forecast.config import PACKED_EXTRA, PACKED_HEAD
from foxhunt.agents.forecast.net import SLOPE, ForecastNet
from foxhunt.agents.networks import N_FACTORED_ACTIONS, DuelingQNet
from foxhunt.agents.sequence_net import SequenceQNet
from foxhunt.env.actions import EXPOSURE_FRACTIONS, MARKET, NORMAL, N_LEVELS

LEVELS = EXPOSURE_FRACTIONS
MARGIN = 100.0
"""How far below its level's market order every limit / IoC variant of that level sits in the greedy
network: the argmax is always a market order of normal urgency."""
MARKET_NORMAL = 3 * MARKET + NORMAL  # the order type × urgency offset inside a factored action (9·e + 3·o + u)


@dataclass(frozen=True)
class Band:
    """The execution's constants (module docstring): cost c and risk r per unit of σ_h-scaled exposure,
    and unit = max_position·(1 − reserve), the observation's exposure feature per unit of level."""

    cost: float
    risk: float
    unit: float


def band(cost_rate: float, half_spread: float, max_position: float, reserve: float, sigma_h: float,
         risk_aversion: float = 0.0, error_variance: float = 0.0) -> Band:
    """The ``Band`` of an env's cost parameters (cost_rate, half_spread: fractions of notional), the
    fold's h-bar volatility ``sigma_h`` (log-return units) and the risk term's λ and v."""
    return Band(cost=(cost_rate + half_spread * (1.0 + cost_rate)) / max(sigma_h, 1e-12),
                risk=risk_aversion * error_variance, unit=max(max_position * (1.0 - reserve), 1e-12))


def scores(forecast: torch.Tensor, exposure: torch.Tensor, b: Band) -> torch.Tensor:
    """[..., 5] level scores f·L_e − c·|L_e − x| − r·L_e² of forecasts and exposures x ([...] each,
    x in levels: the observation's exposure / ``b.unit``)."""
    lv = torch.tensor(LEVELS, dtype=forecast.dtype, device=forecast.device)
    f, x = forecast.unsqueeze(-1), exposure.unsqueeze(-1)
    return f * lv - b.cost * (lv - x).abs() - b.risk * lv * lv


@torch.no_grad()
def pack(net: ForecastNet, b: Band, output: int = 0) -> DuelingQNet:
    """The rule on ``net``'s forecast ``output`` as a detached float32 DuelingQNet (module docstring):
    obs [..., F + 3] → Q [..., 45], argmax = 9·e* + MARKET_NORMAL."""
    f_dim, s = net.n_features, SLOPE
    lins = net.linears()
    widths = [w + PACKED_EXTRA for w in net.hidden]
    dev = lins[0].weight.device
    enc = net.encoder
    if enc is None:
        q = DuelingQNet(f_dim + 3, N_FACTORED_ACTIONS, widths, PACKED_HEAD, s).to(dev)
    else:  # the first layer also adds the lag attention over the last L bars (torch backtester only)
        q = SequenceQNet(f_dim + 3, N_FACTORED_ACTIONS, widths, PACKED_HEAD, s, n_features=f_dim, length=enc.length,
                         width=enc.width, heads=enc.heads).to(dev)
    for p in q.parameters():
        p.zero_()
    if enc is not None:  # the encoder's output feeds the forecast's first units; the two ±x units get none
        state = {k: v.clone() for k, v in enc.state_dict().items()}
        state["out.weight"] = torch.cat([state["out.weight"], state["out.weight"].new_zeros(PACKED_EXTRA, enc.width)])
        q.encoder.load_state_dict(state)
    qlins = [m for m in q.trunk if isinstance(m, torch.nn.Linear)]
    up = 1.0 / (1.0 + s)  # (lrelu(x) − lrelu(−x)) · up = x
    for i, (src, dst) in enumerate(zip(lins, qlins)):
        h = src.out_features
        dst.bias[:h] = src.bias
        if i == 0:
            dst.weight[:h, :f_dim] = src.weight
            dst.weight[h, f_dim], dst.weight[h + 1, f_dim] = 1.0 / b.unit, -1.0 / b.unit  # ±x from the exposure column
        else:
            hp = src.in_features
            dst.weight[:h, :hp] = src.weight
            dst.weight[h, hp], dst.weight[h, hp + 1] = up, -up
            dst.weight[h + 1, hp], dst.weight[h + 1, hp + 1] = -up, up
    hk = net.hidden[-1]
    hid, out = q.advantage[0], q.advantage[2]
    w_o, b_o = net.out.weight[output], net.out.bias[output]
    hid.weight[0, :hk], hid.bias[0] = w_o, b_o  # +f
    hid.weight[1, :hk], hid.bias[1] = -w_o, -b_o  # −f
    for e, level in enumerate(LEVELS):  # ±(L_e − x), x = (unit hk − unit hk+1)·up
        r = 2 + 2 * e
        hid.weight[r, hk], hid.weight[r, hk + 1], hid.bias[r] = -up, up, level
        hid.weight[r + 1, hk], hid.weight[r + 1, hk + 1], hid.bias[r + 1] = up, -up, -level
    down = 1.0 / (1.0 - s)  # (lrelu(y) + lrelu(−y)) · down = |y|
    for a in range(N_FACTORED_ACTIONS):
        e = a // 9
        level = LEVELS[e]
        out.weight[a, 0], out.weight[a, 1] = level * up, -level * up
        out.weight[a, 2 + 2 * e] = out.weight[a, 3 + 2 * e] = -b.cost * down
        out.bias[a] = -b.risk * level * level - (0.0 if a % 9 == MARKET_NORMAL else MARGIN)
    return q.eval()


def level_of_action(action: torch.Tensor) -> torch.Tensor:
    """The exposure level index (0 … 4) of factored actions [...]."""
    return action // (N_FACTORED_ACTIONS // N_LEVELS)


__all__ = ["LEVELS", "MARGIN", "Band", "band", "level_of_action", "pack", "scores"]
