"""Reward terms (ENV_SPEC "One step", item 7): base (return / pnl / DSR), barrier scale, risk penalty,
diversity penalty over a ring of the last W action categories, curiosity bonus, final scale.

Elementwise over [N] tensors, branch-free; nothing here writes to the state.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from foxhunt.env.params import EnvTensors
from foxhunt.env.state import EnvState

DSR_VAR_FLOOR = 1e-12


class BaseReward(NamedTuple):
    base: torch.Tensor  # [N] float32
    dsr_a: torch.Tensor  # moments after the step (unchanged outside DSR mode)
    dsr_b: torch.Tensor


def base_reward(pnl: torch.Tensor, state: EnvState, params: EnvTensors) -> BaseReward:
    """R = ΔE/E (return), ΔE/capital (pnl), or the clamped differential Sharpe ratio of R = ΔE/E (dsr).

    pnl: ΔE [N] from the PnL decomposition; state.equity is E before the step.
    """
    mode = params.reward_mode
    if mode == "pnl":
        return BaseReward(pnl / params.capital, state.dsr_a, state.dsr_b)
    r = pnl / state.equity
    if mode == "return":
        return BaseReward(r, state.dsr_a, state.dsr_b)
    a, b = state.dsr_a, state.dsr_b
    da = r - a
    db = r * r - b
    var = b - a * a
    ok = var > DSR_VAR_FLOOR
    d = (b * da - 0.5 * a * db) / torch.where(ok, var, 1.0).pow(1.5)
    d = torch.where(ok, d, 0.0)
    d = torch.maximum(torch.minimum(d, params.dsr_clip), -params.dsr_clip)
    return BaseReward(d, a + params.dsr_eta * da, b + params.dsr_eta * db)


def barrier_multiplier(hit: torch.Tensor, label: torch.Tensor, params: EnvTensors) -> torch.Tensor:
    """1 + scale: profit / stop scale on a hit with that label, 1 otherwise (time hits included)."""
    scale = torch.where(hit & (label > 0), params.barrier_profit_scale, 0.0)
    scale = torch.where(hit & (label < 0), params.barrier_stop_scale, scale)
    return 1.0 + scale


def risk_penalty(position: torch.Tensor, close1: torch.Tensor, equity1: torch.Tensor, params: EnvTensors) -> torch.Tensor:
    """risk_weight · max(0, |q·C_{t+1}|/E' − threshold); E' floored at the bust level (and 1e-6·capital).

    Why the bust level: a step that busts the account (E' at or below it ends the episode) would otherwise
    divide by an equity near or below zero; a short through a doubling price made this one term
    -2,000 per unit of reward scale and halted PPO's loss guard. Above the bust level nothing changes."""
    eq = torch.maximum(equity1, torch.maximum(params.bust_level, params.capital * 1e-6))
    expo = (position * close1).abs() / eq
    return params.risk_weight * (expo - params.risk_threshold).clamp_min(0.0)


class Diversity(NamedTuple):
    write: torch.Tensor  # [N] int8, value to write at the ring head (the old value where inactive)
    counts: torch.Tensor  # [N, 3] float32
    fill: torch.Tensor  # [N] int64
    head: torch.Tensor  # [N] int64
    penalty: torch.Tensor  # [N] float32, the amount subtracted from the reward (0 or diversity_penalty)


def diversity(
    state: EnvState, params: EnvTensors, cat: torch.Tensor, active: torch.Tensor | None, arange3: torch.Tensor
) -> Diversity:
    """Push the category into the ring (evicting the oldest when full); penalise when the full ring's
    entropy H = −Σ p·log2 p is below the threshold. arange3: [3] int64 (0, 1, 2) on the device."""
    window = state.ring.shape[1]
    head = state.ring_head.unsqueeze(1)
    old = state.ring.gather(1, head).squeeze(1)  # int8
    full_before = state.ring_fill >= window
    onehot_new = (cat.unsqueeze(1) == arange3).to(torch.float32)
    onehot_old = (old.unsqueeze(1).to(torch.int64) == arange3) & full_before.unsqueeze(1)
    counts = state.ring_counts + onehot_new - onehot_old.to(torch.float32)
    fill = (state.ring_fill + 1).clamp_max(window)
    nhead = state.ring_head + 1
    nhead = torch.where(nhead >= window, 0, nhead)
    write = cat.to(torch.int8)
    if active is not None:
        write = torch.where(active, write, old)
    pr = counts / float(window)
    ent = -torch.where(pr > 0, pr * torch.log2(pr), 0.0).sum(1)
    low = (fill >= window) & (ent < params.diversity_threshold)
    return Diversity(write, counts, fill, nhead, torch.where(low, params.diversity_penalty, 0.0))


def curiosity_bonus(curiosity: torch.Tensor | None, params: EnvTensors) -> torch.Tensor | float:
    """curiosity_weight · clamp(bonus, 0, curiosity_max); 0 without a bonus input."""
    if curiosity is None:
        return 0.0
    return params.curiosity_weight * torch.minimum(curiosity.clamp_min(0.0), params.curiosity_max)
