"""The whole training env step (``foxhunt.env.vec_env.step``, ``active=None, auto_reset=True``) as
ONE Triton kernel: one lane per env, its state in registers, read state → write state.

Per env and step the kernel reads the state, the env's parameters, the action, the curiosity bonus
and a uniform, gathers its bars t and t+1, and does, in the torch step's order and float32
operation order: decode (factored, or exposure with routing), Kelly multiplier, target q*, the legs
and fills (market / limit-maker / IoC, reversals, half spread, square-root impact with the vol EMA,
costs), accounting, entry price / bar, round trip and Kelly statistics (``rules/env.py``, shared
with the fused backtest), the triple barrier, marking, vol EMA, the reward (``env_step/train.py``),
done / truncated, the StepOutput rows, the equity peak and costs, then the auto-reset of done envs
(fresh portfolio at a start drawn from the given uniform, as ``StartSampler.draw`` maps it). It also
writes the draw's starts for every env (``StartSampler.starts``), as the torch draw does.

Performance model (H200; leads for bench/bench_env_fused.py to check): per env and step ~150 bytes
of state are read and ~155 written, ~135 of parameters read, ~60 of outputs written, ~30 of inputs
(action, uniform, start, bonus), plus 8 bar values gathered from fold-sized tables (L2 hits):
~530 bytes, 35 MB at 64 K envs, ~10 µs at 3.5 TB/s, less where the state stays in the 50 MB L2
from one step to the next; ~400 float32 operations per env are noise beside that. The torch step
is ~450 launches (~1 ms graphed at 64 K envs). One lane per env, BLOCK = 128 envs per program,
4 warps; no lane talks to another (no shared memory, no barriers). Cross-compiled for sm_90
(tests/kernels/compile_env_step_sm90.py): ~160 registers per thread, no spills.

Bool tensors are passed as int8 views; int64 state stays int64. The launcher takes plain tensors by
field name (``STATE_FIELDS``, ``PARAM_FIELDS``, ``OUT_FIELDS``: the names of ``EnvState``,
``EnvTensors`` and ``StepOutput``). This module is part of the ``foxhunt.kernels`` leaf: it imports
nothing of ours outside it; the adapter from EnvState / EnvTensors / MarketData is
``foxhunt.env.fused``.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import torch
import triton
import triton.language as tl

from foxhunt.kernels._triton import is_interpreted

from foxhunt.kernels.rules.env import (
    book, decode, execute, kelly_multiplier, portfolio_features, target_position, update_kelly,
)
from foxhunt.kernels.env_step.train import (
    REWARD_MODES, barrier_multiplier, base_reward, curiosity_bonus, diversity, risk_penalty, start_from_uniform,
    update_barrier,
)

STATE_FIELDS = (
    "cash", "position", "equity", "entry_price", "entry_bar", "bar", "episode_start", "step", "level", "target",
    "barrier_active", "barrier_upper", "barrier_lower", "barrier_expiry", "barrier_side", "vol", "kelly_p",
    "kelly_win", "kelly_loss", "kelly_count", "dsr_a", "dsr_b", "ring", "ring_counts", "ring_fill", "ring_head",
    "peak", "cum_costs", "open_costs",
)
"""EnvState fields the kernel reads / writes, in kernel argument order (``finished`` is not touched
with auto-reset on)."""
PARAM_FIELDS = (
    "capital", "max_position", "reserve", "cost_rate", "half_spread", "impact_eta", "max_impact", "participation",
    "vol_lambda", "profit_frac", "stop_frac", "max_holding_f", "barrier_profit_scale", "barrier_stop_scale",
    "risk_threshold", "risk_weight", "diversity_threshold", "diversity_penalty", "curiosity_weight",
    "curiosity_max", "dsr_eta", "dsr_clip", "reward_scale", "kelly_fraction", "kelly_min_mult", "kelly_alpha",
    "bust_level", "max_holding", "kelly_min_trades", "episode_length", "end_on_barrier", "kelly",
)
"""EnvTensors [N] tensors, in kernel argument order."""
OUT_FIELDS = (
    "reward", "done", "truncated", "next_bar", "next_portfolio", "fill_status", "barrier_hit", "barrier_label",
    "trade_closed", "trade_return", "trade_side", "trade_size", "trade_costs", "trade_entry_bar", "trade_exit_bar",
    "stepped",
)
"""StepOutput fields, in kernel argument order."""


class EnvMarket(NamedTuple):
    """MarketData's device arrays the step reads: ohlc [T, 4] f32, volume / log_return / bar_range [T]
    f32, median_range / median_abs_return 0-d f32 (or [N]: each env's own), fold_bounds [4] int64 (all read on the device),
    has_volume and mirror_offset (the mirrored copy's first row, 0 without one) host facts."""

    ohlc: torch.Tensor
    volume: torch.Tensor
    log_return: torch.Tensor
    bar_range: torch.Tensor
    median_range: torch.Tensor
    median_abs_return: torch.Tensor
    fold_bounds: torch.Tensor
    has_volume: bool
    mirror_offset: int = 0


@triton.jit
def _env_step_kernel(
    cash_p, pos_p, eq_p, entry_p, ebar_p, bar_p, estart_p, step_p, level_p, target_p,
    bact_p, bup_p, blo_p, bexp_p, bside_p, vol_p, kp_p, kw_p, kl_p, kc_p, dsra_p, dsrb_p,
    ring_p, rcnt_p, rfill_p, rhead_p, peak_p, cumc_p, openc_p,
    capital_p, maxpos_p, reserve_p, cost_rate_p, half_spread_p, eta_p, max_imp_p, particip_p, lam_p,
    profit_frac_p, stop_frac_p, max_hold_f_p, pscale_p, sscale_p, risk_thr_p, risk_w_p, div_thr_p, div_pen_p,
    cur_w_p, cur_max_p, dsr_eta_p, dsr_clip_p, rscale_p, kfrac_p, kmin_p, kalpha_p, bust_p, max_hold_p,
    kmin_trades_p, ep_len_p, eob_p, kelly_p,
    ohlc_p, volume_p, logret_p, range_p, med_range_p, med_absret_p, fold_p,
    act_p, cur_p, unif_p, starts_p, kbars_p,
    o_reward, o_done, o_trunc, o_next_bar, o_port, o_fill, o_hit, o_label, o_closed, o_tret, o_tside,
    o_tsize, o_tcost, o_tentry, o_texit, o_stepped,
    n_envs, n_bars, mirror_off,
    K_BARS: tl.constexpr, WINDOW: tl.constexpr, MODE: tl.constexpr, EXPOSURE: tl.constexpr, HAS_VOLUME: tl.constexpr,
    HAS_CURIOSITY: tl.constexpr, RECIP_DIV: tl.constexpr, LIBDEVICE: tl.constexpr, BLOCK: tl.constexpr,
    MED_STRIDE: tl.constexpr = 0, GIVEN_STARTS: tl.constexpr = False, PER_ENV_K: tl.constexpr = False,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n_envs
    # Padding lanes read the last env (valid addresses, sane values) and store nothing.
    i = tl.minimum(offs, n_envs - 1).to(tl.int64)
    last = n_bars - 1

    # ---- state (registers for the whole decision)
    # The medians that route and price orders: one pair (MED_STRIDE 0), or each env's own (1: a pooled universe's
    # envs, each its episode's symbol's; an episode never leaves its symbol, so one pair serves the decision).
    med_range = tl.load(med_range_p + i * MED_STRIDE)
    med_absret = tl.load(med_absret_p + i * MED_STRIDE)
    bar = tl.load(bar_p + i)
    cash = tl.load(cash_p + i)
    q = tl.load(pos_p + i)
    equity = tl.load(eq_p + i)
    entry = tl.load(entry_p + i)
    entry_bar = tl.load(ebar_p + i)
    step = tl.load(step_p + i)
    level = tl.load(level_p + i)
    target = tl.load(target_p + i)
    b_active = tl.load(bact_p + i) != 0
    b_upper = tl.load(bup_p + i)
    b_lower = tl.load(blo_p + i)
    b_expiry = tl.load(bexp_p + i)
    b_side = tl.load(bside_p + i)
    vol = tl.load(vol_p + i)
    k_p = tl.load(kp_p + i)
    k_win = tl.load(kw_p + i)
    k_loss = tl.load(kl_p + i)
    k_count = tl.load(kc_p + i)
    if MODE == 2:
        dsr_a = tl.load(dsra_p + i)
        dsr_b = tl.load(dsrb_p + i)
    else:
        dsr_a = tl.zeros([BLOCK], tl.float32)
        dsr_b = tl.zeros([BLOCK], tl.float32)
    r_fill = tl.load(rfill_p + i)
    r_head = tl.load(rhead_p + i)
    rc0 = tl.load(rcnt_p + i * 3)
    rc1 = tl.load(rcnt_p + i * 3 + 1)
    rc2 = tl.load(rcnt_p + i * 3 + 2)
    peak = tl.load(peak_p + i)
    cum_costs = tl.load(cumc_p + i)
    open_costs = tl.load(openc_p + i)
    a = tl.load(act_p + i)
    capital = tl.load(capital_p + i)
    rscale = tl.load(rscale_p + i)

    # ---- what the decision reports (foxhunt.env.decision): sums, any-flags, the last trade
    acc = tl.full([BLOCK], -0.0, tl.float32)
    alive = valid | (valid == 0)  # all lanes step the first bar (training envs are never frozen)
    done_any = valid & (valid == 0)
    trunc_any = done_any
    hit_any = done_any
    closed_any = done_any
    fill_last = tl.zeros([BLOCK], tl.int32)
    label_last = tl.zeros([BLOCK], tl.int32)
    tret_last = tl.zeros([BLOCK], tl.float32)
    tside_last = tl.zeros([BLOCK], tl.float32)
    tsize_last = tl.zeros([BLOCK], tl.float32)
    tcost_last = tl.zeros([BLOCK], tl.float32)
    tentry_last = tl.zeros([BLOCK], tl.int64)
    texit_last = tl.zeros([BLOCK], tl.int64)

    if PER_ENV_K:  # each env's own bars a decision (a stack of members at different k; K_BARS: the largest)
        k_env = tl.load(kbars_p + i)
    for j in range(0, K_BARS):
        if PER_ENV_K:  # an env past its own k steps no more bars (as one past its episode's end)
            alive = alive & (j < k_env)
        # ---- bars t, t+1
        t1 = bar + 1
        tg = tl.minimum(tl.maximum(bar, 0), last)
        t1g = tl.minimum(tl.maximum(t1, 0), last)  # memory safety only, as the torch step
        close_t = tl.load(ohlc_p + tg * 4 + 3)
        range_t = tl.load(range_p + tg)
        open1 = tl.load(ohlc_p + t1g * 4)
        high1 = tl.load(ohlc_p + t1g * 4 + 1)
        low1 = tl.load(ohlc_p + t1g * 4 + 2)
        close1 = tl.load(ohlc_p + t1g * 4 + 3)
        volume1 = tl.load(volume_p + t1g)
        absret1 = tl.abs(tl.load(logret_p + t1g))
        slot = ring_p + i * WINDOW + r_head
        old = tl.load(slot).to(tl.int32)

        # ---- decode, target, fills, accounting, round trip, Kelly (the backtest kernel's functions)
        e, o, m = decode(a, range_t, med_range, vol, med_absret, EXPOSURE)
        kk = kelly_multiplier(k_p, k_win, k_loss, k_count, tl.load(kfrac_p + i), tl.load(kmin_p + i),
                              tl.load(kmin_trades_p + i), True)
        kk = tl.where(tl.load(kelly_p + i) != 0, kk, 1.0)
        level2, target2 = target_position(e, level, target, equity, close_t, kk, tl.load(maxpos_p + i),
                                          tl.load(reserve_p + i))
        d, rev, size1, size2, fill1, fill2, price1, price2, cost1, cost2, status = execute(
            q, target2, o, m, close_t, range_t, open1, high1, low1, volume1, vol, med_range,
            tl.load(half_spread_p + i), tl.load(particip_p + i), tl.load(eta_p + i), tl.load(max_imp_p + i),
            tl.load(cost_rate_p + i), HAS_VOLUME)
        q2, entry2, ebar2, oc2, closed, tr_ret, tr_side, tr_size, tr_costs, tr_entry, pnl = book(
            q, target2, entry, entry_bar, open_costs, t1, close_t, close1,
            d, rev, size1, size2, fill1, fill2, price1, price2, cost1, cost2)
        cash2 = cash - (d * fill1 * price1 + cost1) - (d * fill2 * price2 + cost2)
        opened = ((q == 0) & (fill1 > 0)) | (rev & (fill1 >= size1) & (fill2 > 0))
        k_p2, k_win2, k_loss2, k_count2 = update_kelly(k_p, k_win, k_loss, k_count, closed, tr_ret,
                                                       tl.load(kalpha_p + i), True)

        # ---- barrier, marking, vol EMA
        b_active2, b_upper2, b_lower2, b_expiry2, b_side2, hit, label = update_barrier(
            b_active, b_side, b_upper, b_lower, b_expiry, opened, q2, entry2, high1, low1, t1,
            tl.load(profit_frac_p + i), tl.load(stop_frac_p + i), tl.load(max_hold_p + i))
        equity1 = equity + pnl
        lam = tl.load(lam_p + i)
        vol1 = lam * vol + (1.0 - lam) * absret1

        # ---- reward
        if MODE == 2:
            base, dsr_a2, dsr_b2 = base_reward(pnl, equity, capital, dsr_a, dsr_b, tl.load(dsr_eta_p + i),
                                               tl.load(dsr_clip_p + i), MODE, LIBDEVICE)
        else:
            base, dsr_a2, dsr_b2 = base_reward(pnl, equity, capital, 0.0, 0.0, 0.0, 0.0, MODE, LIBDEVICE)
        reward = base * barrier_multiplier(hit, label, tl.load(pscale_p + i), tl.load(sscale_p + i))
        reward = reward - risk_penalty(q2, close1, equity1, capital, tl.load(bust_p + i), tl.load(risk_w_p + i), tl.load(risk_thr_p + i))
        cat = tl.where(e <= 1, 0, tl.where(e == 2, 1, 2))
        c0, c1, c2, r_fill2, r_head2, div_pen = diversity(
            cat, old, rc0, rc1, rc2, r_fill, r_head, tl.load(div_thr_p + i), tl.load(div_pen_p + i),
            WINDOW, RECIP_DIV, LIBDEVICE)
        if HAS_CURIOSITY:  # one bonus per decision, on its first bar
            bonus = tl.where(j == 0, curiosity_bonus(tl.load(cur_p + i), tl.load(cur_w_p + i),
                                                     tl.load(cur_max_p + i)), 0.0)
        else:
            bonus = 0.0
        reward = (reward - div_pen + bonus) * rscale

        # ---- done
        step1 = step + 1
        terminal = (hit & (tl.load(eob_p + i) != 0)) | (equity1 <= tl.load(bust_p + i))
        truncated = (step1 >= tl.load(ep_len_p + i)) & (terminal == 0)
        done = terminal | truncated

        # ---- the decision's outputs, from the bars the env stepped
        acc = tl.where(alive, acc + reward, acc)
        done_any = done_any | (alive & done)
        trunc_any = trunc_any | (alive & truncated)
        fill_last = tl.where(alive, status.to(tl.int32), fill_last)
        label_last = tl.where(alive & hit, label.to(tl.int32), label_last)
        hit_any = hit_any | (alive & hit)
        took = alive & closed
        tret_last = tl.where(took, tr_ret, tret_last)
        tside_last = tl.where(took, tr_side, tside_last)
        tsize_last = tl.where(took, tr_size, tsize_last)
        tcost_last = tl.where(took, tr_costs, tcost_last)
        tentry_last = tl.where(took, tr_entry, tentry_last)
        texit_last = tl.where(took, t1, texit_last)
        closed_any = closed_any | took

        # ---- commit the bar (lanes that stepped it)
        tl.store(slot, cat.to(tl.int8), mask=valid & alive)
        cash = tl.where(alive, cash2, cash)
        q = tl.where(alive, q2, q)
        equity = tl.where(alive, equity1, equity)
        entry = tl.where(alive, entry2, entry)
        entry_bar = tl.where(alive, ebar2, entry_bar)
        bar = tl.where(alive, t1, bar)
        step = tl.where(alive, step1, step)
        level = tl.where(alive, level2, level)
        target = tl.where(alive, target2, target)
        b_active = tl.where(alive, b_active2, b_active)
        b_upper = tl.where(alive, b_upper2, b_upper)
        b_lower = tl.where(alive, b_lower2, b_lower)
        b_expiry = tl.where(alive, b_expiry2, b_expiry)
        b_side = tl.where(alive, b_side2, b_side)
        vol = tl.where(alive, vol1, vol)
        k_p = tl.where(alive, k_p2, k_p)
        k_win = tl.where(alive, k_win2, k_win)
        k_loss = tl.where(alive, k_loss2, k_loss)
        k_count = tl.where(alive, k_count2, k_count)
        dsr_a = tl.where(alive, dsr_a2, dsr_a)
        dsr_b = tl.where(alive, dsr_b2, dsr_b)
        rc0 = tl.where(alive, c0, rc0)
        rc1 = tl.where(alive, c1, rc1)
        rc2 = tl.where(alive, c2, rc2)
        r_fill = tl.where(alive, r_fill2, r_fill)
        r_head = tl.where(alive, r_head2, r_head)
        peak = tl.where(alive, tl.maximum(peak, equity1), peak)
        cum_costs = tl.where(alive, cum_costs + (cost1 + cost2), cum_costs)
        open_costs = tl.where(alive, oc2, open_costs)
        alive = alive & (done == 0)

    # ---- outputs (the decision's transition, before the auto-reset)
    tl.store(o_reward + i, acc, mask=valid)
    tl.store(o_done + i, done_any.to(tl.int8), mask=valid)
    tl.store(o_trunc + i, trunc_any.to(tl.int8), mask=valid)
    tl.store(o_next_bar + i, bar, mask=valid)
    close_end = tl.load(ohlc_p + tl.minimum(tl.maximum(bar, 0), last) * 4 + 3)
    expo, unreal, held = portfolio_features(q, equity, entry, entry_bar, bar, close_end, capital,
                                            tl.load(max_hold_f_p + i))
    tl.store(o_port + i * 3, expo, mask=valid)
    tl.store(o_port + i * 3 + 1, unreal, mask=valid)
    tl.store(o_port + i * 3 + 2, held, mask=valid)
    tl.store(o_fill + i, fill_last.to(tl.int8), mask=valid)
    tl.store(o_hit + i, hit_any.to(tl.int8), mask=valid)
    tl.store(o_label + i, label_last.to(tl.int8), mask=valid)
    tl.store(o_closed + i, closed_any.to(tl.int8), mask=valid)
    tl.store(o_tret + i, tret_last, mask=valid)
    tl.store(o_tside + i, tside_last.to(tl.int8), mask=valid)
    tl.store(o_tsize + i, tsize_last, mask=valid)
    tl.store(o_tcost + i, tcost_last, mask=valid)
    tl.store(o_tentry + i, tentry_last, mask=valid)
    tl.store(o_texit + i, texit_last, mask=valid)
    tl.store(o_stepped + i, tl.full([BLOCK], 1, tl.int8), mask=valid)

    # ---- commit, with the auto-reset of done envs folded in (fresh portfolio at a drawn start)
    done = done_any
    if GIVEN_STARTS:  # mapped by the caller (a pooled universe: a symbol, then a start in its training rows)
        start = tl.load(starts_p + i)
    else:
        start = start_from_uniform(tl.load(unif_p + i), tl.load(fold_p), tl.load(fold_p + 1), tl.load(ep_len_p + i),
                                   mirror_off)
        tl.store(starts_p + i, start, mask=valid)
    tl.store(estart_p + i, start, mask=valid & done)
    tl.store(cash_p + i, tl.where(done, capital, cash), mask=valid)
    tl.store(pos_p + i, tl.where(done, 0.0, q), mask=valid)
    tl.store(eq_p + i, tl.where(done, capital, equity), mask=valid)
    tl.store(entry_p + i, tl.where(done, 0.0, entry), mask=valid)
    tl.store(ebar_p + i, tl.where(done, 0, entry_bar), mask=valid)
    tl.store(bar_p + i, tl.where(done, start, bar), mask=valid)
    tl.store(step_p + i, tl.where(done, 0, step), mask=valid)
    tl.store(level_p + i, tl.where(done, 2, level), mask=valid)
    tl.store(target_p + i, tl.where(done, 0.0, target), mask=valid)
    tl.store(bact_p + i, (b_active & (done == 0)).to(tl.int8), mask=valid)
    tl.store(bup_p + i, tl.where(done, 0.0, b_upper), mask=valid)
    tl.store(blo_p + i, tl.where(done, 0.0, b_lower), mask=valid)
    tl.store(bexp_p + i, tl.where(done, 0, b_expiry), mask=valid)
    tl.store(bside_p + i, tl.where(done, 0.0, b_side), mask=valid)
    tl.store(vol_p + i, vol, mask=valid)
    tl.store(kp_p + i, k_p, mask=valid)
    tl.store(kw_p + i, k_win, mask=valid)
    tl.store(kl_p + i, k_loss, mask=valid)
    tl.store(kc_p + i, k_count, mask=valid)
    if MODE == 2:
        tl.store(dsra_p + i, dsr_a, mask=valid)
        tl.store(dsrb_p + i, dsr_b, mask=valid)
    tl.store(rcnt_p + i * 3, rc0, mask=valid)
    tl.store(rcnt_p + i * 3 + 1, rc1, mask=valid)
    tl.store(rcnt_p + i * 3 + 2, rc2, mask=valid)
    tl.store(rfill_p + i, r_fill, mask=valid)
    tl.store(rhead_p + i, r_head, mask=valid)
    tl.store(peak_p + i, tl.where(done, capital, peak), mask=valid)
    tl.store(cumc_p + i, tl.where(done, 0.0, cum_costs), mask=valid)
    tl.store(openc_p + i, tl.where(done, 0.0, open_costs), mask=valid)


def _arg(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int8) if t.dtype == torch.bool else t


def env_step(
    state: Mapping[str, torch.Tensor], params: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor],
    market: EnvMarket, actions: torch.Tensor, curiosity: torch.Tensor | None, uniform: torch.Tensor,
    starts: torch.Tensor, *, reward_mode: str, exposure_mode: bool, decision_interval: int = 1,
    starts_given: bool = False, decision_bars: torch.Tensor | None = None, block: int = 128, num_warps: int = 4,
) -> None:
    """One training decision of every env (``decision_interval`` bars with its action held), in
    place, in one launch.

    state: the ``STATE_FIELDS`` tensors ([N]; ring [N, W] int8, ring_counts [N, 3] f32), contiguous;
    params: the ``PARAM_FIELDS`` [N] tensors; out: the ``OUT_FIELDS`` tensors (next_portfolio [N, 3]);
    actions [N] int64; curiosity [N] f32 or None (bonus 0); uniform [N] f64, the start draw's
    uniforms (drawn by the caller with the sampler's generator); starts [N] int64, written with the
    draw's starts, or (starts_given) read: the caller mapped the uniforms itself. market.median_range /
    median_abs_return: 0-d (one series) or [N] (each env's own: a pooled universe's). decision_bars: None (every
    env decides every ``decision_interval`` bars) or [N] int64, each env's own k (1 … ``decision_interval``, the
    largest: a stack of members at different k). Reads no tensor value on the host (CUDA-graph capturable).
    """
    n = int(actions.shape[0])
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"reward_mode {reward_mode!r}: expected one of {tuple(REWARD_MODES)}")
    ring = state["ring"]
    interp = is_interpreted()
    if interp:  # one program: the interpreter's cost is per program and per operation, not per lane
        block = max(16, triton.next_power_of_2(n))
    dev = actions.device
    cur = curiosity if curiosity is not None else uniform
    per_env = market.median_range.dim() == 1
    if per_env and (tuple(market.median_range.shape) != (n,) or tuple(market.median_abs_return.shape) != (n,)):
        raise ValueError(f"env_step: per-env medians must be [{n}], got {list(market.median_range.shape)} / "
                         f"{list(market.median_abs_return.shape)}")
    if decision_bars is not None and (decision_bars.dtype != torch.int64 or tuple(decision_bars.shape) != (n,)):
        raise ValueError(f"env_step: decision_bars must be [{n}] int64, got {list(decision_bars.shape)} {decision_bars.dtype}")
    grid = (triton.cdiv(n, block),)
    _env_step_kernel[grid](
        *(_arg(state[k]) for k in STATE_FIELDS), *(_arg(params[k]) for k in PARAM_FIELDS),
        market.ohlc, market.volume, market.log_return, market.bar_range, market.median_range,
        market.median_abs_return, market.fold_bounds, actions, cur, uniform, starts,
        decision_bars if decision_bars is not None else starts,
        *(_arg(out[k]) for k in OUT_FIELDS), n, int(market.ohlc.shape[0]), int(market.mirror_offset),
        K_BARS=int(decision_interval), WINDOW=int(ring.shape[1]), MODE=REWARD_MODES[reward_mode], EXPOSURE=bool(exposure_mode),
        HAS_VOLUME=bool(market.has_volume), HAS_CURIOSITY=curiosity is not None,
        RECIP_DIV=dev.type == "cuda", LIBDEVICE=dev.type == "cuda" and not interp, BLOCK=block,
        MED_STRIDE=1 if per_env else 0, GIVEN_STARTS=bool(starts_given),
        PER_ENV_K=decision_bars is not None, num_warps=num_warps, enable_fp_fusion=False,
    )


__all__ = ["EnvMarket", "OUT_FIELDS", "PARAM_FIELDS", "STATE_FIELDS", "env_step", "is_interpreted"]
