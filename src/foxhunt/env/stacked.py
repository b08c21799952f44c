"""M members' training envs as ONE env of M x N envs (issue 44: a fold's members in one program).

``stack_envs(envs)`` builds a ``VecTradingEnv`` of M·N envs on the members' shared market whose rows
m·N … (m+1)·N − 1 are member m's: every EnvState, StepOutput and EnvTensors field of member m's env, and
its start sampler's ``uniform`` / ``starts``, become VIEWS of those rows (values copied in), so a step of
the stack's env steps every member at once (one fused kernel launch), while resets, fold switches, cost
changes, epoch reset flags and checkpoints still work on each member's env in place. The stack's sampler
(``StackedSampler``) fills each member's rows from that member's own generator, or in one launch from every
member's counter-based draws, so every member's episode starts are those it draws alone. Every step op is
elementwise over envs (a gather within an env's row at
most), so each member's rows step bit for bit as its own env does (tests/train/test_lockstep_stacked.py and
tests/train/test_lockstep.py: members trained through it equal their own rounds bit for bit). Members at
different decision intervals (a decision grid) share it too: the stack's env steps up to the largest k bars a
decision and each env stops after its own member's k (``EnvTensors.decision_bars``, read by the torch decision
step and the fused kernel), which is that member's own decision bit for bit.

Build it before anything is captured or records the members' addresses (a graph would keep reading the
old tensors); ``view_ptrs`` is a host-side fingerprint to check they still hold.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any, Sequence

import torch

from foxhunt.env.counter_draws import counter_draws
from foxhunt.env.state import StartSampler, starts_from_uniform
from foxhunt.env.vec_env import VecTradingEnv

STRUCTURAL = ("reward_mode", "action_mode", "diversity_window")
"""Env settings the stack's one step needs equal (the kernel's compile-time constants, the torch step's branches).
Members at different decision intervals stack: the stack's env decides every largest-k bars and each env stops
after its member's own k (``EnvTensors.decision_bars``)."""


class StackedSampler:
    """The stack env's episode starts: each member's uniform draw into its rows (from its own generator, the same
    call it makes alone; or, when every member draws counter-based, ONE launch for all members, each member's rows
    from its seed and counter), then one map of all M·N uniforms to starts."""

    def __init__(self, members: Sequence[StartSampler], uniform: torch.Tensor, starts: torch.Tensor) -> None:
        self.members = list(members)
        self.uniform = uniform
        self.starts = starts
        self.counters: dict[str, torch.Tensor] | None = None  # seed_t / counter [M]: the members' own, as views
        if all(s.draws.seed_t is not None for s in self.members):
            self.counters = {**stack_leading([s.draws for s in self.members], ("seed_t",)),
                             **stack_leading(self.members, ("counter",))}

    def fill_uniform(self) -> None:
        if self.counters is not None:
            counter_draws(self.counters["seed_t"], self.counters["counter"], self.members[0].uniform.shape[0],
                          u64=self.uniform)
            self.counters["counter"].add_(1)
            return
        for s in self.members:
            s.fill_uniform()

    def draw(self, params: Any, market: Any) -> torch.Tensor:
        self.fill_uniform()
        return starts_from_uniform(self.uniform, params, market, out=self.starts)


def unstackable(envs: Sequence[VecTradingEnv]) -> str | None:
    """Why these members' envs cannot be one env (None when they can)."""
    e0 = envs[0]
    for k, e in enumerate(envs):
        if e.market is not e0.market:
            return f"member {k} has its own market"
        if e.n_envs != e0.n_envs:
            return f"member {k} has {e.n_envs} envs, member 0 {e0.n_envs}"
        if not e.auto_reset:
            return f"member {k}'s env does not auto-reset"
        for key in STRUCTURAL:
            if getattr(e.params.base, key) != getattr(e0.params.base, key):
                return f"member {k} differs in env.{key}"
    return None


def share_rows(whole_owner: Any, smalls: Sequence[Any], names: Sequence[str], rows: int) -> None:
    """Each small object's tensor ``name`` becomes rows m·rows … (m+1)·rows − 1 of ``whole_owner``'s (values copied)."""
    for name in names:
        whole = getattr(whole_owner, name)
        if whole.shape[0] != len(smalls) * rows:
            raise ValueError(f"stacking: {name} has {whole.shape[0]} rows, not {len(smalls)} x {rows}")
        for m, small in enumerate(smalls):
            part = whole[m * rows:(m + 1) * rows]
            part.copy_(getattr(small, name))
            object.__setattr__(small, name, part)


def concat_rows(smalls: Sequence[Any], names: Sequence[str]) -> dict[str, torch.Tensor]:
    """Each of ``names`` ([N, ...] on every small object) concatenated over the members: {name: [M·N, ...]}, each
    small object's own tensor becoming its rows m·N … (m+1)·N − 1 (a view, values copied)."""
    out = {}
    for name in names:
        parts = [getattr(s, name) for s in smalls]
        whole, rows = torch.cat(parts), parts[0].shape[0]
        for m, small in enumerate(smalls):
            object.__setattr__(small, name, whole[m * rows:(m + 1) * rows])
        out[name] = whole
    return out


def stack_leading(smalls: Sequence[Any], names: Sequence[str]) -> dict[str, torch.Tensor]:
    """Each of ``names`` (a tensor of the same shape on every small object) stacked on a new leading member axis:
    {name: [M, ...]}, each small object's own tensor becoming its row (a view; 0-d tensors a 0-d view)."""
    out = {}
    for name in names:
        whole = torch.stack([getattr(s, name) for s in smalls])
        for m, small in enumerate(smalls):
            object.__setattr__(small, name, whole[m])
        out[name] = whole
    return out


def _tensor_fields(obj: Any) -> list[str]:
    assert is_dataclass(obj)
    return [f.name for f in fields(obj) if isinstance(getattr(obj, f.name), torch.Tensor)]


def stack_envs(envs: Sequence[VecTradingEnv]) -> VecTradingEnv:
    """The members' envs as one env of M·N envs (module docstring); ValueError naming why they cannot be."""
    reason = unstackable(envs)
    if reason is not None:
        raise ValueError(f"stacking the members' envs: {reason}")
    e0, n = envs[0], envs[0].n_envs
    ks = [e.decision_interval for e in envs]
    base = e0.params.base.model_copy(update={"decision_interval": max(ks)})
    env = VecTradingEnv(e0.market, len(envs) * n, base, seed=0)  # its own values are overwritten below
    share_rows(env.state, [e.state for e in envs], _tensor_fields(env.state), n)
    share_rows(env.out, [e.out for e in envs], _tensor_fields(env.out), n)
    share_rows(env.params, [e.params for e in envs], env.params.tensor_names(), n)
    share_rows(env.sampler, [e.sampler for e in envs], ("uniform", "starts"), n)
    env.sampler = StackedSampler([e.sampler for e in envs], env.sampler.uniform, env.sampler.starts)  # type: ignore[assignment]
    if len(set(ks)) > 1:  # each member's rows decide every its own k bars
        env.params.decision_bars = torch.tensor(ks, dtype=torch.int64, device=env.device).repeat_interleave(n)
    return env


def view_ptrs(envs: Sequence[VecTradingEnv]) -> list[int]:
    """A host-side fingerprint of where the members' env tensors live (compare before a capture)."""
    return [p for e in envs for p in (e.state.bar.data_ptr(), e.out.reward.data_ptr(), e.sampler.uniform.data_ptr())]


__all__ = ["StackedSampler", "concat_rows", "share_rows", "stack_envs", "stack_leading", "unstackable", "view_ptrs"]
