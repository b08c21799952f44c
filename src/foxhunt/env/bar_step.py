"""One bar of the vectorised trading env: pure step / reset / observe over explicit state.

``step`` is branch-free and writes in place into preallocated tensors (state, outputs); it reads no
tensor value on the host and allocates only fixed-shape temporaries, so a sequence of steps can be
captured in a CUDA graph (``foxhunt.env.graph.StepGraph``). Python ``if``s here test static facts only (reward mode,
whether a mask or bonus is given, whether the market has volume).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from foxhunt.env.actions import category, decode
from foxhunt.env.execution import Bars, book, execute, target_position, update_barrier, update_kelly
from foxhunt.env.params import EnvTensors
from foxhunt.env.reward import barrier_multiplier, base_reward, curiosity_bonus, diversity, risk_penalty
from foxhunt.env.state import (
    EnvState,
    StartSampler,
    fresh_portfolio_,
    init_state_,
    portfolio_features,
    put,
)
from foxhunt.market import N_PORTFOLIO_FEATURES, MarketData


@dataclass
class StepOutput:
    """What one step reports, preallocated [N] tensors (ENV_SPEC "Codes").

    Rows of envs that did not step (``stepped`` False: inactive or finished) hold reward 0, done False,
    no fill / hit / trade, next_bar = the unchanged bar and its portfolio features.
    """

    reward: torch.Tensor  # float32
    done: torch.Tensor  # bool
    truncated: torch.Tensor  # bool, done only because step = episode_length (no bust, no barrier end)
    next_bar: torch.Tensor  # int64, t+1 before any auto-reset
    next_portfolio: torch.Tensor  # [N, 3] float32, portfolio features at t+1 before any auto-reset
    fill_status: torch.Tensor  # int8: 0 none, 1 filled, 2 partial, 3 missed
    barrier_hit: torch.Tensor  # bool
    barrier_label: torch.Tensor  # int8: −1 stop, 0 time, +1 profit (0 when no hit)
    trade_closed: torch.Tensor  # bool
    trade_return: torch.Tensor  # float32
    trade_side: torch.Tensor  # int8, +1 / −1 (0 when no trade)
    trade_size: torch.Tensor  # float32, units
    trade_costs: torch.Tensor  # float32, currency
    trade_entry_bar: torch.Tensor  # int64
    trade_exit_bar: torch.Tensor  # int64
    stepped: torch.Tensor  # bool, the env took this step

    @classmethod
    def allocate(cls, n_envs: int, device: torch.device | str) -> "StepOutput":
        dev = torch.device(device)
        z = lambda dt: torch.zeros(n_envs, dtype=dt, device=dev)  # noqa: E731
        return cls(
            reward=z(torch.float32),
            done=z(torch.bool),
            truncated=z(torch.bool),
            next_bar=z(torch.int64),
            next_portfolio=torch.zeros((n_envs, N_PORTFOLIO_FEATURES), dtype=torch.float32, device=dev),
            fill_status=z(torch.int8),
            barrier_hit=z(torch.bool),
            barrier_label=z(torch.int8),
            trade_closed=z(torch.bool),
            trade_return=z(torch.float32),
            trade_side=z(torch.int8),
            trade_size=z(torch.float32),
            trade_costs=z(torch.float32),
            trade_entry_bar=z(torch.int64),
            trade_exit_bar=z(torch.int64),
            stepped=z(torch.bool),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _emit(dst: torch.Tensor, value: torch.Tensor, active: torch.Tensor | None, idle: float | int | bool) -> None:
    """Output row ← value for envs that stepped, ``idle`` for the others (dtype converted on copy)."""
    dst.copy_(value if active is None else torch.where(active, value, idle))


def step(
    state: EnvState,
    params: EnvTensors,
    market: MarketData,
    actions: torch.Tensor,
    curiosity: torch.Tensor | None,
    out: StepOutput,
    *,
    active: torch.Tensor | None = None,
    auto_reset: bool = True,
    sampler: StartSampler | None = None,
) -> StepOutput:
    """One step of every env at its bar t with ``actions`` ([N] int64), in place.

    curiosity: [N] float32 bonus (None: 0). active: [N] bool, envs that step (None: all); the others do
    not change at all. auto_reset: done envs get a fresh portfolio at a start drawn by ``sampler``
    (required then); otherwise done envs are marked ``state.finished`` (the caller freezes them by
    passing ``active = ~finished``, which VecTradingEnv does).
    """
    if auto_reset and sampler is None:
        raise ValueError("step(auto_reset=True) needs a StartSampler")
    last = market.n_rows - 1  # the mirrored rows too (training envs visit them)
    t = state.bar
    t1 = t + 1
    tg = t.clamp(0, last)
    t1g = t1.clamp(0, last)  # memory safety only: a valid episode never steps past the data
    row1 = market.ohlc.index_select(0, t1g)
    bars = Bars(
        close_t=market.ohlc[:, 3].index_select(0, tg),
        range_t=market.bar_range.index_select(0, tg),
        open1=row1[:, 0],
        high1=row1[:, 1],
        low1=row1[:, 2],
        close1=row1[:, 3],
        volume1=market.volume.index_select(0, t1g),
        absret1=market.log_return.index_select(0, t1g).abs(),
    )
    med_range, med_absret = market.medians_at(tg)  # the fold's scalars; a pooled universe's per bar's symbol
    dec = decode(actions, params.action_mode, bars.range_t, med_range, state.vol, med_absret)
    tgt = target_position(state, params, dec, bars.close_t)
    fills = execute(state.position, tgt.target, dec, bars, state.vol, params, med_range, market.has_volume)
    booked = book(state, tgt.target, fills, bars, t1)
    kelly = update_kelly(state, params, booked.closed, booked.trade_return)
    barrier = update_barrier(state, params, booked, bars, t1)

    equity1 = state.equity + booked.pnl
    vol1 = params.vol_lambda * state.vol + (1.0 - params.vol_lambda) * bars.absret1
    base = base_reward(booked.pnl, state, params)
    reward = base.base * barrier_multiplier(barrier.hit, barrier.label, params)
    reward = reward - risk_penalty(booked.position, bars.close1, equity1, params)
    div = diversity(state, params, category(dec.level), active, _arange3(state))
    reward = (reward - div.penalty + curiosity_bonus(curiosity, params)) * params.reward_scale
    step1 = state.step + 1
    terminal = (barrier.hit & params.end_on_barrier) | (equity1 <= params.bust_level)
    truncated = (step1 >= params.episode_length) & ~terminal
    done = terminal | truncated
    if active is not None:
        done = done & active
        truncated = truncated & active

    # ---- outputs that depend on pre-commit values
    _emit(out.reward, reward, active, 0.0)
    out.done.copy_(done)
    out.truncated.copy_(truncated)
    _emit(out.fill_status, fills.status, active, 0)
    _emit(out.barrier_hit, barrier.hit, active, False)
    _emit(out.barrier_label, barrier.label, active, 0)
    closed = booked.closed if active is None else booked.closed & active
    out.trade_closed.copy_(closed)
    out.trade_return.copy_(torch.where(closed, booked.trade_return, 0.0))
    out.trade_side.copy_(torch.where(closed, booked.trade_side, 0.0))
    out.trade_size.copy_(torch.where(closed, booked.trade_size, 0.0))
    out.trade_costs.copy_(torch.where(closed, booked.trade_costs, 0.0))
    out.trade_entry_bar.copy_(torch.where(closed, booked.trade_entry_bar, 0))
    out.trade_exit_bar.copy_(torch.where(closed, t1, 0))
    if active is None:
        out.stepped.fill_(True)
    else:
        out.stepped.copy_(active)

    # ---- commit (masked by active)
    m = active
    put(state.cash, booked.cash, m)
    put(state.position, booked.position, m)
    put(state.equity, equity1, m)
    put(state.entry_price, booked.entry_price, m)
    put(state.entry_bar, booked.entry_bar, m)
    put(state.bar, t1, m)
    put(state.step, step1, m)
    put(state.level, tgt.level, m)
    put(state.target, tgt.target, m)
    put(state.barrier_active, barrier.active, m)
    put(state.barrier_upper, barrier.upper, m)
    put(state.barrier_lower, barrier.lower, m)
    put(state.barrier_expiry, barrier.expiry, m)
    put(state.barrier_side, barrier.side, m)
    put(state.vol, vol1, m)
    put(state.kelly_p, kelly.p, m)
    put(state.kelly_win, kelly.win, m)
    put(state.kelly_loss, kelly.loss, m)
    put(state.kelly_count, kelly.count, m)
    if params.reward_mode == "dsr":
        put(state.dsr_a, base.dsr_a, m)
        put(state.dsr_b, base.dsr_b, m)
    state.ring.scatter_(1, state.ring_head.unsqueeze(1), div.write.unsqueeze(1))
    put(state.ring_counts, div.counts, None if m is None else m.unsqueeze(1))
    put(state.ring_fill, div.fill, m)
    put(state.ring_head, div.head, m)
    put(state.peak, torch.maximum(state.peak, equity1), m)
    put(state.cum_costs, state.cum_costs + booked.step_costs, m)
    put(state.open_costs, booked.open_costs, m)

    # ---- terminal transition, then auto-reset (or freeze)
    out.next_bar.copy_(state.bar)
    portfolio_features(state, params, market, out.next_portfolio)
    if auto_reset:
        assert sampler is not None
        starts = sampler.draw(params, market)
        fresh_portfolio_(state, params, done, starts)
    else:
        torch.logical_or(state.finished, done, out=state.finished)
    return out


_ARANGE3: dict[torch.device, torch.Tensor] = {}


def _arange3(state: EnvState) -> torch.Tensor:
    # A cached device constant (created outside any graph by VecTradingEnv.__init__ / first eager call).
    dev = state.cash.device
    t = _ARANGE3.get(dev)
    if t is None:
        t = _ARANGE3[dev] = torch.arange(3, dtype=torch.int64, device=dev)
    return t


def reset(
    state: EnvState,
    params: EnvTensors,
    market: MarketData,
    starts: torch.Tensor,
    mask: torch.Tensor | None = None,
    persistent: bool = False,
) -> None:
    """Fresh portfolios at ``starts`` ([N] int64) for envs in ``mask`` (all if None), unfinished.

    persistent=True also re-initialises v, Kelly statistics, DSR moments and the diversity ring
    (only with mask None).
    """
    if persistent:
        if mask is not None:
            raise ValueError("reset(persistent=True) applies to every env (mask must be None)")
        init_state_(state, params, market, starts)
        return
    fresh_portfolio_(state, params, mask, starts)
    put(state.finished, False, mask)


def observe(state: EnvState, params: EnvTensors, market: MarketData, portfolio: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Observation [N, F + 3] of every env at its bar into ``out`` (portfolio: [N, 3] scratch)."""
    portfolio_features(state, params, market, portfolio)
    bar = state.bar.clamp(0, market.n_rows - 1)
    return market.observe(bar, portfolio, out)
