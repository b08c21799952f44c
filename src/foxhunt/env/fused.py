"""The fused env step: ``vec_env.step`` for training (``active=None, auto_reset=True``) in ONE kernel.

``fused_step(state, params, market, actions, curiosity, out, sampler)`` has the torch ``step``'s
contract for the training case: it updates ``state`` in place, fills the preallocated ``out`` and
advances ``sampler``'s generator exactly as ``StartSampler.draw`` does (one float64 uniform per env
per step, drawn here before the kernel with the same generator call; the kernel maps them to starts
as ``draw`` does and writes ``sampler.starts``). It reads no tensor value on the host and allocates
nothing, so a sequence of steps can be captured in a CUDA graph (register ``sampler.generator``).

``unsupported(params, market)`` says why the kernel cannot run (None when it can): Triton unusable
on the market's device (``foxhunt.accel.triton``), or a reward / action mode the kernel lacks.
``FusedEnvStep(env)`` is a drop-in for ``VecTradingEnv.step`` in training (``collector._env_step``).

Semantics: the same as the torch step to float32 rounding (the same operation order; see
``foxhunt.kernels.env_step.kernel``); tests/kernels/test_env_step_fused.py holds it to that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from foxhunt.accel.triton import unavailable
from foxhunt.env.params import EnvTensors
from foxhunt.env.state import EnvState, StartSampler
from foxhunt.market import MarketData

if TYPE_CHECKING:
    from foxhunt.env.vec_env import StepOutput, VecTradingEnv


def _kernels():
    from foxhunt.kernels.env_step import kernel

    return kernel


COVERED_REWARD_MODES = ("return", "pnl", "dsr")
COVERED_ACTION_MODES = ("factored", "exposure")


def unsupported(params: EnvTensors, market: MarketData) -> str | None:
    """Why ``fused_step`` cannot run for these parameters and market (None when it can)."""
    dev = market.device
    reason = unavailable(dev)
    if reason is not None:
        return reason
    if params.device != dev:
        return f"the parameters live on {params.device}, the market on {dev}"
    if params.reward_mode not in COVERED_REWARD_MODES or params.action_mode not in COVERED_ACTION_MODES:
        return f"reward_mode {params.reward_mode!r} / action_mode {params.action_mode!r} not covered"
    return None


def _market(market: MarketData, bars: torch.Tensor):
    """The kernel's view of ``market``; a pooled universe's medians are each env's own ([N], the symbol of its
    bar ``bars``: an episode never leaves its symbol, so the decision's start bar names it)."""
    k = _kernels()
    med_range, med_absret = market.medians_at(bars) if market.pooled else (market.median_range, market.median_abs_return)
    return k.EnvMarket(market.ohlc, market.volume, market.log_return, market.bar_range, med_range,
                       med_absret, market.fold_bounds, market.has_volume, market.mirror_offset)


def _check(state: EnvState, out: "StepOutput", actions: torch.Tensor, curiosity: torch.Tensor | None,
           sampler: StartSampler) -> None:
    """Metadata checks only (dtype, shape, layout): no host read of a value."""
    n = state.n_envs
    if actions.dtype != torch.int64 or tuple(actions.shape) != (n,):
        raise ValueError(f"fused_step: actions must be [{n}] int64, got {list(actions.shape)} {actions.dtype}")
    if curiosity is not None and (curiosity.dtype != torch.float32 or tuple(curiosity.shape) != (n,)):
        raise ValueError(f"fused_step: curiosity must be [{n}] float32, got {list(curiosity.shape)} {curiosity.dtype}")
    if sampler.uniform.dtype != torch.float64 or tuple(sampler.uniform.shape) != (n,):
        raise ValueError("fused_step: the sampler's uniform buffer must be [N] float64")
    for name, t in (*state.tensors().items(), *out.tensors().items(), ("actions", actions)):
        if not t.is_contiguous():
            raise ValueError(f"fused_step: {name} must be contiguous")


def fused_step(
    state: EnvState,
    params: EnvTensors,
    market: MarketData,
    actions: torch.Tensor,
    curiosity: torch.Tensor | None,
    out: "StepOutput",
    sampler: StartSampler,
    *,
    block: int = 128,
    num_warps: int = 4,
) -> "StepOutput":
    """``decision.step_decision(state, params, market, actions, curiosity, out, scratch, active=None,
    auto_reset=True, sampler=sampler)`` in one kernel launch (after the sampler's uniform draw): one
    decision of ``params.decision_interval`` bars (``vec_env.step`` when it is 1), or of each env's own
    ``params.decision_bars``. Returns ``out``."""
    _check(state, out, actions, curiosity, sampler)
    if market.pooled:  # a symbol, then a start in its training rows: StartSampler.draw's map, in torch
        sampler.draw(params, market)
    else:
        sampler.fill_uniform()
    _kernels().env_step(
        state.tensors(), {name: getattr(params, name) for name in params.tensor_names()}, out.tensors(),
        _market(market, state.bar), actions, curiosity, sampler.uniform, sampler.starts,
        reward_mode=params.reward_mode, exposure_mode=params.action_mode == "exposure",
        decision_interval=params.decision_interval, starts_given=market.pooled,
        decision_bars=params.decision_bars, block=block, num_warps=num_warps,
    )
    return out


class FusedEnvStep:
    """``env.step`` of a training VecTradingEnv (auto_reset on) through the fused kernel.

    Call as ``env.step``: ``(actions, curiosity=None) -> env.out``. Raises ValueError at construction
    when the kernel cannot run (``unsupported``) or the env freezes done envs (auto_reset off).
    """

    def __init__(self, env: "VecTradingEnv", *, block: int = 128, num_warps: int = 4) -> None:
        if not env.auto_reset:
            raise ValueError("the fused env step covers auto_reset=True (training) envs only")
        reason = unsupported(env.params, env.market)
        if reason is not None:
            raise ValueError(f"fused env step unavailable: {reason}")
        self.env = env
        self.block = block
        self.num_warps = num_warps

    def __call__(self, actions: torch.Tensor, curiosity: torch.Tensor | None = None) -> "StepOutput":
        env = self.env
        return fused_step(env.state, env.params, env.market, actions, curiosity, env.out, env.sampler,
                          block=self.block, num_warps=self.num_warps)


__all__ = ["COVERED_ACTION_MODES", "COVERED_REWARD_MODES", "FusedEnvStep", "fused_step", "unsupported"]
