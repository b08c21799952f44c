"""Pure device functions of the DQN train step shared by the eager learner and the fused step.

``linear_schedule`` (ε, learning rate, PER β from a device counter) and ``nstep_targets`` (n-step
returns from consecutive replay rows). Both ``learner`` (the eager reference) and ``fused_step``
(the compiled program) import them from here, so neither imports the other.
"""

from __future__ import annotations

import torch


def linear_schedule(start: float, end: float, steps: int, t: torch.Tensor) -> torch.Tensor:
    """start → end linearly over ``steps`` of the device counter ``t`` (0-d), then flat at end."""
    frac = (t.to(torch.float32) / float(steps)).clamp(0.0, 1.0)
    return start + (end - start) * frac


def nstep_targets(reward: torch.Tensor, done: torch.Tensor, bar: torch.Tensor, next_bar: torch.Tensor,
                  pos_t: torch.Tensor, idx: torch.Tensor, n_env: int, gamma: float, n_step: int,
                  gamma_pow: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step returns of the rows ``idx`` ([B] int64) of a replay storage (see ``_nstep_batch``).

    reward [C] float32, done [C] bool, bar / next_bar [C] int64: the storage's arrays; pos_t: its
    0-d write head; gamma_pow: [n_step] float32, gamma^1..gamma^n. Returns (return [B], done [B],
    discount [B] = gamma^k of the cut, last [B] = the row whose next observation bootstraps).
    A pure function of its tensors, shared by the eager step and the fused (compiled) step.
    """
    cap = reward.shape[0]
    rows_after = torch.remainder(pos_t - idx - 1, cap) // n_env  # complete later rows of this env
    ret = torch.zeros_like(reward[:1].expand(idx.shape[0])).clone()
    alive = torch.ones_like(idx, dtype=torch.bool)
    last = idx.clone()
    steps = torch.zeros_like(idx)
    out_done = torch.zeros_like(alive)
    slot = idx
    for k in range(n_step):
        if k > 0:
            nxt = torch.remainder(slot + n_env, cap)
            cont = (bar.index_select(0, nxt) == next_bar.index_select(0, slot)) & (rows_after >= k)
            alive = alive & cont & ~out_done
            slot = nxt
        r = reward.index_select(0, slot)
        d = done.index_select(0, slot)
        disc = gamma ** k
        ret = ret + torch.where(alive, r * disc, torch.zeros_like(r))
        last = torch.where(alive, slot, last)
        steps = steps + alive.long()
        out_done = out_done | (alive & d)
    discount = gamma_pow.index_select(0, steps - 1)
    return ret, out_done, discount, last


__all__ = ["linear_schedule", "nstep_targets"]
