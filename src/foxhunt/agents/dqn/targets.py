"""Pure device functions of the DQN train step shared by the eager learner and the fused step.

``linear_schedule`` (ε, learning rate, PER β from a device counter), ``nstep_targets`` (n-step
returns from consecutive replay rows) and ``q_record`` (the Q monitor's per-step statistics). Both ``learner`` (the eager reference) and ``fused_step``
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


Q_RECORD_FIELDS = ("maxq_mean", "maxq_m2", "maxq_min", "maxq_max", "q_abs_max")
"""The Q monitor's columns of a learner's per-step record (``q_record``), reduced into the epoch
summary by ``EpochMonitor.add_maxq_records``."""


def q_record(q: torch.Tensor) -> torch.Tensor:
    """The Q monitor's statistics of one train batch: q [B, A], the online network's Q-values of the
    batch's observations (every action). Returns [5] in ``Q_RECORD_FIELDS`` order: the mean of
    max_a Q over the B rows, their sum of squared deviations from that mean (M2: the epoch's std is
    combined from these exactly, without the cancellation of Σx² − n·mean²), min and max of max_a Q,
    and the largest |Q| of any action (the divergence check's statistic)."""
    maxq = q.amax(dim=1)
    mean = maxq.mean()
    return torch.stack([mean, (maxq - mean).square().sum(), maxq.min(), maxq.max(), q.abs().amax()])


__all__ = ["Q_RECORD_FIELDS", "linear_schedule", "nstep_targets", "q_record"]
