"""One decision of every env: its action held for ``env.decision_interval`` = k bars.

The agent chooses an action every k bars and the env holds it in between: the same action goes into
k consecutive per-bar steps (``vec_env.step``), so orders, fills, costs, barriers, Kelly sizing, the
risk and diversity penalties stay per bar exactly as ENV_SPEC.md defines them. What a learner sees is
one transition per decision:

* reward: the k bars' rewards summed (float32, in bar order, starting from −0.0, the additive
  identity, so that k = 1 gives the bar's reward bit for bit);
* done / truncated: the episode ended on one of the k bars; the decision ends there (the later
  bars of the interval are not stepped) and ``next_bar`` / ``next_portfolio`` are where it ended,
  before any auto-reset;
* fill_status: the last stepped bar's; barrier_hit: any bar's, barrier_label: the last hit's;
  trade_*: the last round trip closed inside the interval (with a held level the position only
  crosses zero once, so at most one closes unless a bust or a missed order delays it);
* the curiosity bonus (one per decision) is added on the interval's first bar only;
* auto-reset (training): one start is drawn per decision with the sampler's generator (one uniform
  per env, as a per-bar step draws), and done envs restart there after the interval.

k = 1 calls ``vec_env.step`` itself: the per-bar behaviour bit for bit. Per-env intervals
(``params.decision_bars``: a stack of members at different k, ``env.stacked``): the loop runs to the largest
k and an env stops stepping after its own k bars (as after its episode's end), so each env's rows are those
of its own k's decision bit for bit (an env at k = 1 too: the loop's first bar is the plain step's arithmetic,
the reset the same draw and fresh portfolio). The fused env-step kernel
(``foxhunt.env.fused``) steps the k bars in one launch with the same rules and float32 order;
``foxhunt.env.reference.ReferenceEnv.step_decision`` is the float64 oracle.
"""

from __future__ import annotations

import torch

from foxhunt.env.params import EnvTensors
from foxhunt.env.state import EnvState, StartSampler, fresh_portfolio_
from foxhunt.env.bar_step import StepOutput, step
from foxhunt.market import MarketData

_LAST_TRADE = ("trade_return", "trade_side", "trade_size", "trade_costs", "trade_entry_bar", "trade_exit_bar")


class DecisionScratch:
    """Preallocated buffers of ``step_decision`` for N envs: the per-bar output, the alive mask and the mask of
    envs whose own k (``params.decision_bars``) reaches the current bar."""

    def __init__(self, n_envs: int, device: torch.device | str) -> None:
        self.sub = StepOutput.allocate(n_envs, device)
        self.alive = torch.zeros(n_envs, dtype=torch.bool, device=torch.device(device))
        self.was_finished = torch.zeros(n_envs, dtype=torch.bool, device=torch.device(device))
        self.within_k = torch.zeros(n_envs, dtype=torch.bool, device=torch.device(device))


def step_decision(
    state: EnvState,
    params: EnvTensors,
    market: MarketData,
    actions: torch.Tensor,
    curiosity: torch.Tensor | None,
    out: StepOutput,
    scratch: DecisionScratch,
    *,
    active: torch.Tensor | None = None,
    auto_reset: bool = True,
    sampler: StartSampler | None = None,
) -> StepOutput:
    """One decision (``params.decision_interval`` bars) of every env with ``actions`` [N] int64, in place.

    The contract of ``vec_env.step`` (active, auto_reset, sampler; ``out`` preallocated), with the
    transition spanning the k bars as the module docstring says. No host reads; fixed-shape work only
    (a captured CUDA graph replays it). With auto_reset off, envs that end inside the interval are
    marked ``state.finished`` (frozen) as the per-bar step marks them.
    """
    k, per_env = params.decision_interval, params.decision_bars
    if k == 1 and per_env is None:
        return step(state, params, market, actions, curiosity, out, active=active, auto_reset=auto_reset,
                    sampler=sampler)
    if auto_reset and sampler is None:
        raise ValueError("step_decision(auto_reset=True) needs a StartSampler")
    sub, alive = scratch.sub, scratch.alive
    if active is None:
        alive.fill_(True)
    else:
        alive.copy_(active)
    if auto_reset:  # the sub-steps mark done envs finished; a training env is unfrozen after its reset
        scratch.was_finished.copy_(state.finished)
    for j in range(k):
        if j > 0 and per_env is not None:  # envs whose own k is j stop here
            alive.logical_and_(torch.gt(per_env, j, out=scratch.within_k))
        step(state, params, market, actions, curiosity if j == 0 else None, sub, active=alive, auto_reset=False)
        if j == 0:
            out.reward.fill_(-0.0)
            for name in ("done", "truncated", "fill_status", "barrier_hit", "barrier_label", "trade_closed",
                         *_LAST_TRADE, "stepped"):
                getattr(out, name).copy_(getattr(sub, name))
        else:
            stepped, closed = sub.stepped, sub.trade_closed
            out.done.logical_or_(sub.done)
            out.truncated.logical_or_(sub.truncated)
            torch.where(stepped, sub.fill_status, out.fill_status, out=out.fill_status)
            torch.where(sub.barrier_hit, sub.barrier_label, out.barrier_label, out=out.barrier_label)
            out.barrier_hit.logical_or_(sub.barrier_hit)
            for name in _LAST_TRADE:
                dst = getattr(out, name)
                torch.where(closed, getattr(sub, name), dst, out=dst)
            out.trade_closed.logical_or_(closed)
        torch.where(sub.stepped, out.reward + sub.reward, out.reward, out=out.reward)
        alive.logical_and_(~sub.done)
    out.reward.masked_fill_(~out.stepped, 0.0)
    out.next_bar.copy_(sub.next_bar)
    out.next_portfolio.copy_(sub.next_portfolio)
    if auto_reset:
        assert sampler is not None
        starts = sampler.draw(params, market)
        fresh_portfolio_(state, params, out.done, starts)
        state.finished.copy_(scratch.was_finished)
    return out


__all__ = ["DecisionScratch", "step_decision"]
