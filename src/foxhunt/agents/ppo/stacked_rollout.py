"""One rollout of a fold's M PPO members as ONE batched program (issue 44; ``ppo.batched_rollouts``).

A member's rollout step is a dozen small kernels around its actor-critic pass (observe, the pass, the
Gumbel-max sample, ``explore_hold``, log-probability, buffer copies, the env step); M members stepped one
program each launch them M times a step. Here the members' envs are one env of M·N envs
(``env.stacked.stack_envs``: member m's rows m·N … (m+1)·N − 1), so observing, the env step (one fused
kernel), the sample's Gumbel-max, the log-probabilities and the buffer copies run once for all members.
What stays per member: its actor-critic pass (its own weights), its random draws (its own generator: the
exploration uniforms, then the hold uniforms, in its alone order; with ``ppo.counter_draws`` one launch each for
all members, each member's rows a hash of its seed, step counter and row) and its rollout's end
(``Rollout.finish``: the reached states' values, GAE, monitoring), then its update.

Layout after construction (M members, N envs, T = rollout_len, A = n_actions): the stack's env [M·N];
u [M·N, A], u_hold / prev / has_prev [M·N], logits [M·N, A], value [M·N], env_steps [M]; every
``RolloutBuffer`` array [M, T, N, ...]. Each member's own tensors (its env's, its rollout's ``_u``,
``_u_hold``, ``_prev``, ``_has_prev``, ``env_steps`` and its buffer's arrays) are VIEWS of its rows, so its
resets, checkpoints and ``finish`` work on it as before. Every batched op is elementwise over envs or a
reduction within an env's row, so each member's rollout is bit for bit its own
(tests/train/test_lockstep.py).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from foxhunt.agents.exec_choice import env_step_fn
from foxhunt.env.counter_draws import STREAM_U32_B, counter_draws
from foxhunt.env.stacked import concat_rows, stack_envs, stack_leading, unstackable, view_ptrs

BUFFER_FIELDS = ("bar", "portfolio", "action", "logp", "value", "reward", "done", "terminal", "next_bar",
                 "next_portfolio", "next_value", "trade_closed", "trade_return", "advantage", "ret", "decided")
"""``RolloutBuffer``'s [T, N, ...] arrays."""


def unsupported(trainers: Sequence[Any]) -> str | None:
    """Why these PPO trainers' rollouts cannot be one batched program (None when they can)."""
    if len(trainers) < 2:
        return "one member"
    t0 = trainers[0]
    for k, t in enumerate(trainers):
        if not hasattr(t, "rollout"):
            return f"member {k} is not a PPO trainer"
        if t.cfg.rollout_len != t0.cfg.rollout_len or t.cfg.explore_hold != t0.cfg.explore_hold:
            return f"member {k} differs in ppo.rollout_len or ppo.explore_hold"
        if t.choice.env_step != t0.choice.env_step:
            return f"member {k} differs in accel.env_step"
        if t.cfg.epoch_graph:
            return f"member {k} runs its epoch as one graph (ppo.epoch_graph)"
    return unstackable([t.env for t in trainers])


class StackedRollout:
    """``collect()``: one rollout of every member of ``trainers`` (PPOTrainers; ``unsupported`` is None) as one
    program, then each member's ``finish``. See the module docstring."""

    def __init__(self, trainers: Sequence[Any]) -> None:
        reason = unsupported(trainers)
        if reason is not None:
            raise ValueError(f"batched rollouts: {reason}")
        t0 = trainers[0]
        self.trainers = list(trainers)
        self.rolls = [t.rollout for t in trainers]
        m, n = len(trainers), t0.cfg.n_envs
        self.m, self.n, self.steps = m, n, t0.cfg.rollout_len
        self.hold = float(t0.cfg.explore_hold)
        dev = t0.device
        self.n_actions, self.n_market = t0.env.n_actions, t0.market.n_features
        self.env = stack_envs([t.env for t in trainers])
        self._env_step = env_step_fn(self.env, t0.choice)

        rows = concat_rows(self.rolls, ("_u", "_u_hold", "_prev", "_has_prev"))  # [M·N, ...]: each member's rows
        self._u, self._u_hold, self._prev, self._has_prev = (rows[k] for k in ("_u", "_u_hold", "_prev", "_has_prev"))
        self.env_steps = stack_leading(self.rolls, ("env_steps",))["env_steps"]  # [M] from each 0-d counter
        # ppo.counter_draws on every member: their sampling and hold draws are one launch each (draw_seed [M])
        counted = all(r.draws.seed_t is not None for r in self.rolls)
        self.draw_seed = stack_leading([r.draws for r in self.rolls], ("seed_t",))["seed_t"] if counted else None
        self.logits = torch.zeros((m * n, self.n_actions), dtype=torch.float32, device=dev)
        self.value = torch.zeros(m * n, dtype=torch.float32, device=dev)
        self.buffers = stack_leading([t.buffer for t in trainers], BUFFER_FIELDS)  # [M, T, N, ...]
        self._views = self._view_ptrs()

    def _view_ptrs(self) -> list[int]:
        own = [p for t in self.trainers for p in (t.rollout._u.data_ptr(), t.rollout.env_steps.data_ptr(),
                                                   t.buffer.action.data_ptr())]
        return view_ptrs([t.env for t in self.trainers]) + own

    def _rows(self, x: torch.Tensor, c: int) -> torch.Tensor:
        return x[c * self.n:(c + 1) * self.n]

    @torch.no_grad()
    def step(self, k: int) -> None:
        """Step k of every member's rollout (``Rollout.step``'s arithmetic, the members batched)."""
        m, n, b = self.m, self.n, self.buffers
        mn = (m, n)
        obs = self.env.observe()
        for c, r in enumerate(self.rolls):  # each member's actor-critic pass on its rows
            logits, value = r.net(self._rows(obs, c))
            self._rows(self.logits, c).copy_(logits)
            self._rows(self.value, c).copy_(value)
        if self.draw_seed is not None:  # every member's Gumbel uniforms, one launch (each its alone draws)
            counter_draws(self.draw_seed, self.env_steps, n * self.n_actions, u32=self._u.view(-1))
        else:
            for r in self.rolls:  # its exploration uniforms, from its own generator (sample_actions' draw)
                r.draws.uniform(r._u, r.env_steps)
        gumbel = -torch.log(-torch.log(self._u.clamp_min(1e-20)))
        action = b["action"][:, k]
        action.copy_((self.logits + gumbel).argmax(dim=1).view(mn))
        if self.hold > 0.0:  # keep the previous action with probability explore_hold
            if self.draw_seed is not None:
                counter_draws(self.draw_seed, self.env_steps, n, u32=self._u_hold, u32_stream=STREAM_U32_B)
            else:
                for r in self.rolls:
                    r.draws.uniform(r._u_hold, r.env_steps, STREAM_U32_B)
            hold = (self._u_hold < self.hold) & self._has_prev
            action.copy_(torch.where(hold.view(mn), self._prev.view(mn), action))
            b["decided"][:, k].copy_((~hold).float().view(mn))
        flat_action = action.reshape(-1)  # [M·N] (a copy: the buffer's step-k slice is strided)
        b["logp"][:, k].copy_(torch.log_softmax(self.logits, dim=-1).gather(1, flat_action.unsqueeze(1)).view(mn))
        b["value"][:, k].copy_(self.value.view(mn))
        b["bar"][:, k].copy_(self.env.state.bar.view(mn))
        b["portfolio"][:, k].copy_(obs.view(m, n, -1)[:, :, self.n_market:])
        out = self._env_step(flat_action)
        torch.logical_and(out.done.view(mn), ~out.truncated.view(mn), out=b["terminal"][:, k])
        for name, src in (("reward", out.reward), ("done", out.done), ("next_bar", out.next_bar),
                          ("next_portfolio", out.next_portfolio), ("trade_closed", out.trade_closed),
                          ("trade_return", out.trade_return)):
            b[name][:, k].copy_(src.view(m, n, *src.shape[1:]))
        if self.hold > 0.0:
            self._prev.copy_(flat_action)
            torch.logical_not(out.done, out=self._has_prev)
        self.env_steps.add_(1)

    def collect(self) -> None:
        """Every member's rollout: ``rollout_len`` batched steps, then each member's ``finish``."""
        if self._view_ptrs() != self._views:  # host side: runs eagerly and at capture only
            raise RuntimeError("batched rollouts: a member's env or rollout tensors moved since the stack was built")
        for k in range(self.steps):
            self.step(k)
        for r in self.rolls:
            r.finish()


__all__ = ["BUFFER_FIELDS", "StackedRollout", "unsupported"]
