"""Lockstep runner for the fused-env-step tests: the torch step and the fused kernel side by side.

``Pair`` owns a VecTradingEnv (stepped by the torch ``step``) and a copy of its state, outputs and
start sampler (stepped by ``fused_step``), both from the same initial state and generator state.
After each step every state tensor, every StepOutput field and the sampler's uniforms / starts are
compared (``compare``), then the fused copy is re-synchronised to the torch state, so that each step
is tested from identical inputs (a last-bit difference cannot snowball into a different trajectory).

Tolerances: discrete fields (ints, bools, int8) must be equal; floats within rtol 1e-5 plus a small
absolute floor for values that cancel (cash, unrealised return, reward). On CUDA the kernel computes
the same IEEE operations as torch (libdevice's log2 / pow for torch's) and results are expected to be
bitwise equal but for the DSR reward's pow; on the CPU the torch
step's sqrt / log2 / pow (MKL / SLEEF) are not always correctly rounded, while the interpreter's
numpy ones are, so prices with impact (and the DSR reward) can differ in the last bit.

Ties: a last-bit price difference can flip three threshold tests within a step: bust
(E' ≤ bust level), a Kelly win (trade return > 0) and the ring entropy test. An env whose mismatch
coincides with such a near-tie in the torch values is counted in ``ties`` (and skipped for that
step); any other mismatch fails.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from foxhunt.env import EnvParams, StepOutput, VecTradingEnv
from foxhunt.env.execution import kelly_multiplier
from foxhunt.env.fused import fused_step
from foxhunt.env.state import StartSampler
from foxhunt.env.vec_env import step
from foxhunt.market import MarketData

ATOL = {"cash": 1.0, "equity": 1.0, "peak": 1.0, "cum_costs": 1e-3, "open_costs": 1e-3, "trade_costs": 1e-3,
        "position": 1e-3, "target": 1e-3, "trade_size": 1e-3, "trade_return": 1e-7, "next_portfolio": 1e-6,
        "kelly_win": 1e-7, "kelly_loss": 1e-7, "kelly_p": 1e-7, "dsr_a": 1e-9, "dsr_b": 1e-11}
"""Absolute floors (beside rtol 1e-5) for values that cancel: cash after a buy of ~capital, E' − E."""
RTOL = 1e-5


@dataclass
class Stats:
    steps: int = 0
    bitwise_steps: int = 0  # steps on which every compared tensor was bitwise equal
    max_rel: dict[str, float] = field(default_factory=dict)
    ties: list[str] = field(default_factory=list)
    cover: Counter = field(default_factory=Counter)


class Pair:
    """A torch env and a fused copy of it, stepped in lockstep on ``market`` (see module doc)."""

    def __init__(self, market: MarketData, n: int, params: EnvParams, per_env: dict | None, seed: int) -> None:
        dev = market.device
        self.market = market
        self.env = VecTradingEnv(market, n, params, seed=seed, per_env=per_env)
        self.env.reset()
        self.state = self.env.state.clone()
        self.out = StepOutput.allocate(n, dev)
        self.sampler = StartSampler(n, dev, seed)
        self.sampler.generator.set_state(self.env.sampler.generator.get_state())
        self.stats = Stats()

    def step(self, actions: torch.Tensor, curiosity: torch.Tensor | None) -> None:
        env = self.env
        before = env.state.clone()
        env.step(actions, curiosity)  # one decision: vec_env.step itself when env.decision_interval = 1
        fused_step(self.state, env.params, self.market, actions, curiosity, self.out, self.sampler)
        self._cover(before, actions)
        self.compare(self._near_ties())
        self.state.copy_(env.state)
        self.stats.steps += 1

    def _near_ties(self) -> torch.Tensor:
        """[N] bool: envs whose step sat at a near-tie of a threshold that a last-bit difference flips."""
        env = self.env
        o, s, p = env.out, env.state, env.params
        # Bust: where the sides disagree on done, the side that did not reset holds E'.
        e_next = torch.where(o.done, self.state.equity, s.equity)
        bust = (o.done != self.out.done) & ((e_next - p.bust_level).abs() <= 1e-5 * p.bust_level)
        kelly = o.trade_closed & (o.trade_return.abs() <= 1e-6)
        pr = s.ring_counts.double() / s.ring.shape[1]
        ent = -torch.where(pr > 0, pr * torch.log2(torch.where(pr > 0, pr, 1.0)), 0.0).sum(1)
        entropy = (ent - p.diversity_threshold.double()).abs() <= 1e-6
        return bust | kelly | entropy

    def compare(self, maybe_tie: torch.Tensor) -> None:
        """Every state tensor, output field and the sampler draw: equal (discrete) or within tolerance."""
        env, st = self.env, self.stats
        pairs = [(k, v, getattr(self.state, k)) for k, v in env.state.tensors().items()]
        pairs += [(k, v, getattr(self.out, k)) for k, v in env.out.tensors().items()]
        pairs += [("uniform", env.sampler.uniform, self.sampler.uniform),
                  ("starts", env.sampler.starts, self.sampler.starts)]
        reward_atol = env.params.reward_scale.double() * (1e-4 if env.params.reward_mode == "dsr" else 1e-6)
        bad_env = torch.zeros_like(maybe_tie)
        bitwise = True
        for name, ref, got in pairs:
            if torch.equal(ref, got):
                continue
            bitwise = False
            if ref.dtype.is_floating_point:
                ref64, got64 = ref.double(), got.double()
                diff = (ref64 - got64).abs()
                atol = reward_atol if name == "reward" else ATOL.get(name, 0.0)
                over = diff > atol + RTOL * ref64.abs()
                rel = (diff / ref64.abs().clamp_min(1e-30)).max().item()
                st.max_rel[name] = max(st.max_rel.get(name, 0.0), rel)
            else:
                over = ref != got
            if over.dim() == 2:
                over = over.any(1)
            bad_env |= over
        if bitwise:
            st.bitwise_steps += 1
        if not bad_env.any():
            return
        ties = bad_env & maybe_tie
        wrong = bad_env & ~maybe_tie
        for i in torch.nonzero(ties).flatten().tolist():
            st.ties.append(f"step {st.steps} env {i}")
        if wrong.any():
            i = int(torch.nonzero(wrong)[0])
            what = []
            for name, ref, got in pairs:
                r, g = ref[i], got[i]
                if not torch.equal(r, g):
                    what.append(f"{name}: torch {r.tolist()} fused {g.tolist()}")
            raise AssertionError(f"step {st.steps} env {i}: fused step differs from the torch step: " + "; ".join(what))

    def _cover(self, before, actions: torch.Tensor) -> None:
        """Coverage counters from the torch step (what the comparison exercised)."""
        env, c = self.env, self.stats.cover
        o, s, p = env.out, env.state, env.params
        cpu = lambda t: t.cpu().numpy()  # noqa: E731
        for a in np.unique(cpu(actions)):
            c[f"action{a}"] += 1
        for f in np.unique(cpu(o.fill_status)):
            c[f"fill{f}"] += 1
        hit, lab, eob = cpu(o.barrier_hit), cpu(o.barrier_label), cpu(p.end_on_barrier)
        for h, lb, e in zip(hit, lab, eob):
            if h:
                c[f"label{lb}_end{int(e)}"] += 1
        done, trunc = cpu(o.done), cpu(o.truncated)
        c["done_length"] += int(trunc.sum())
        c["done_barrier"] += int((done & ~trunc & hit & eob).sum())
        c["done_bust"] += int((done & ~trunc & ~(hit & eob)).sum())
        c["trade_closed"] += int(cpu(o.trade_closed).sum())
        c["reversal"] += int((cpu(before.position) * cpu(o.next_portfolio[:, 0]) < 0).sum())
        k = cpu(kelly_multiplier(before, p))
        c["kelly_sized"] += int(((k < 1.0) & cpu(p.kelly)).sum())
        cnt = cpu(s.ring_counts).astype(np.float64) / s.ring.shape[1]
        ent = -np.where(cnt > 0, cnt * np.log2(np.where(cnt > 0, cnt, 1.0)), 0.0).sum(1)
        full = cpu(s.ring_fill) >= s.ring.shape[1]
        c["diversity_penalty"] += int((full & (ent < cpu(p.diversity_threshold))).sum())
        c["risk_penalty"] += int((np.abs(cpu(o.next_portfolio[:, 0])) > cpu(p.risk_threshold)).sum())
