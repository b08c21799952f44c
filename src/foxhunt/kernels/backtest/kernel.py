"""The fused backtest: a greedy dueling-MLP policy and the env step, all bars in one Triton kernel.

Each program owns BLOCK_W windows (padded) and loops over every bar inside the kernel, keeping each
window's portfolio state in registers. Per bar it gathers and normalises the window's features
(per-window mean / inv_std), appends the 3 portfolio features, runs the dueling MLP
(``rules/dueling.py``: four ``tl.dot`` layers with weights streamed from L2), takes the argmax and
executes the env step with ENV_SPEC's semantics (``rules/env.py``: decode, target with reserve and
Kelly, market / limit-maker / IoC legs with reversals, half spread, square-root impact with the vol
EMA, costs, entry price, round trips, vol EMA update, marking, bust). It writes per-bar returns,
exposures, traded notional and round-trip return / closed flags [W, T] (``compute_metrics``' inputs), the final
equity [W], and optionally actions and fill statuses (checks) and the other trade fields.
It equals ``foxhunt.backtest.evaluator.Backtester`` with ``GreedyPolicy(DuelingQNet)``, shaping off.

Performance model (H200: 132 SMs at ~1.98 GHz; leads, to be checked by bench/bench_backtest.py)
----------------------------------------------------------------------------------------------
The recurrence (an action changes the state the next observation sees) makes every window a chain
of T dependent bars: time = T × (time of one bar in one program), whatever the number of SMs.
Per bar one program (BLOCK_W = 16 rows, 8 of them real for 8 windows) does
  * MMA work: 16 × (64·256 + 256·256 + 256·256 + 256·64) = 2.6 M FMA (padded 54 → 64, 46 → 64);
  * weight bytes: 164 K weights = 655 KB in fp32 (tf32 / ieee), 328 KB in bf16, streamed from L2
    (the whole net is 0.66 MB, L2 is 50+ MB: after the first bar it never leaves L2);
  * activation scratch: 4 layers × (store + load) of [16, ≤256] = ~100 KB fp32 / 50 KB bf16;
  * env step: ~250 scalar float32 operations per window, a gather of 51 features + 6 bar values.
The per-SM rates set the floor, not the chip's: an SM pulls about 64 B/clk from L2 at best
(~125 GB/s; 50 B/clk ≈ 100 GB/s taken as typical), and mma.sync (M = 16 does not fit wgmma's
64-row tiles) gives roughly 512 tf32 / 1024 bf16 FMA/clk per SM.
  * tf32:  760 KB / 100 GB/s = 7.6 µs of L2 streaming, 2.6 M / 512 = 2.6 µs of MMA (overlapped)
  * bf16:  380 KB / 100 GB/s = 3.8 µs, 1.3 µs of MMA
  * ieee (float32 FMA on the CUDA cores, 128 FMA/clk): 2.6 M / 128 = 10 µs, compute-bound
  * each layer's K-loop starts with one exposed L2 round trip (~0.5 µs): up to +2 µs per bar.
So 8 windows × 100 K bars ≈ 0.8-1.0 s in tf32, 0.5-0.6 s in bf16, ~1.2 s in ieee; the 1 s gate
is within reach, the 0.3 s goal is not with weights streamed from L2 every bar (it needs ≤ 3 µs per
bar: on-chip weights, which do not fit one SM's 227 KB of shared memory even in bf16, or weights
split across a CTA cluster with distributed shared memory, which Triton cannot express).
256 windows = 16 programs on 16 SMs, each streaming its own copy of the weights (16 × 100 GB/s,
well under the L2's ~5 TB/s): about the same time as 8 windows, 32× the throughput. More windows
per program (BLOCK_W = 32) halve the weight bytes per window but double the MMA rows; with few
windows there is no way to use more SMs for one window block (one per-layer grid barrier would
cost ~1 µs, the whole budget).
Measured (BENCHMARKS.md, bench/results/backtest_cuda.json), the tile path runs at 2-3× the
model: each layer's K-loop is a chain of exposed L2 round trips, scratch stores and CTA
barriers, not a stream. Hence the row path (BLOCK_W = 1, ``rules.dueling.greedy_action_row``):
one window per program, matrix-vector products in float32 FMA on the CUDA cores with layers 2-3
fused over column chunks (no scratch, no barriers between layers), about twice as fast per bar
(exact float32, so "tf32" there means float32); bf16 weights are slower there (the conversions
cost more than the bytes save). With W windows it uses W SMs (waves of programs over 132 SMs).
Greedy actions need only the advantage head (argmax Q = argmax A; ``greedy_action_row``'s ADV, with
an exact fallback at float32 near-ties), 416 instead of 576 KiB of weights per bar; the tile path
does the same per block of windows (timings per revision: BENCHMARKS.md).
Worth trying on the device (``bench/bench_backtest.py`` sweeps them): num_warps, BK, stages, BN.
Cross-compiled for sm_90 with Triton 3.9 on a CPU (tests/kernels/compile_backtest_sm90.py; the
device runs 3.6): mma.sync (MMA v2), each layer's K-loop pipelined 3 deep with cp.async, 68 KB of
shared memory, 255 registers per thread with 16-72 B of spill stack (none for bf16 with 8 warps),
the spill loads and stores between the layers, none inside the MMA loops; one program per SM.

This module is part of the ``foxhunt.kernels`` leaf: plain tensors and numbers in, nothing of ours
imported. The adapter from MarketData / EnvParams / DuelingQNet is ``foxhunt.backtest.fused``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from foxhunt.kernels._triton import is_interpreted
from foxhunt.kernels.backtest.host import (
    EnsembleWeights, ExecParams, FusedOutputs, MarketArrays, WindowNets, given_actions_net, layer1_features, value_bound,
)
from foxhunt.kernels.rules.dueling import greedy_action, greedy_action_row, member_weights
from foxhunt.kernels.rules.env import (
    book, decode, execute, kelly_multiplier, portfolio_features, target_position, update_barrier, update_kelly,
)
from foxhunt.kernels.rules.packing import DuelingWeights

PRECOMPUTE_MAX_BYTES = 1 << 30
"""The row path precomputes layer 1's feature part when [W, n_steps, H1] float32 fits this."""

ROW_MAX_WINDOWS = 265
"""Below this many windows the default is one window per program (``greedy_action_row``): faster
than 16-window tiles up to a few hundred windows (BENCHMARKS.md). A row program uses 187 registers × 128 threads (255 with both heads), so two fit an SM: 264 windows run in one wave on
132 SMs; beyond that each further wave adds about a window's whole time, while the tiles stay at
one wave up to 2,112 windows."""

PRECISIONS = ("ieee", "tf32", "tf32x3", "bf16")
"""Dot precision: float32 weights with Triton's ``input_precision`` ("ieee" = exact float32 FMA,
"tf32" = tensor cores with 10-bit mantissa inputs, "tf32x3" = three tf32 products, ~float32), or
bf16 weights and activations with float32 accumulation."""


@triton.jit
def _backtest_kernel(
    feat_ptr, ohlc_ptr, volume_ptr, logret_ptr, range_ptr, med_range_ptr, med_absret_ptr,
    start_ptr, len_ptr, mean_ptr, inv_ptr,
    w1, b1, w2, b2, w3, b3, w4, b4, vb_ptr, scratch_ptr,
    ret_ptr, pos_ptr, tret_ptr, tclosed_ptr, final_ptr, traded_ptr,
    act_ptr, status_ptr, tside_ptr, tsize_ptr, tcost_ptr, tentry_ptr, tbar_ptr, given_ptr, given_cols, pre_ptr,
    n_windows, n_bars, n_steps, n_feat, decide_every,
    capital, max_position, reserve, cost_rate, half_spread, impact_eta, max_impact, participation,
    vol_lambda, max_holding_f, kelly_fraction, kelly_min_mult, kelly_alpha, kelly_min_trades, bust_level, slope,
    profit_frac, stop_frac, max_holding_bars, ens_mean_ptr, ens_inv_ptr, ens_w_ptr, n_members, member_ptr,
    N_ACTIONS: tl.constexpr, D: tl.constexpr, H1: tl.constexpr, H2: tl.constexpr, H3: tl.constexpr,
    A: tl.constexpr, HMAX: tl.constexpr, BLOCK_W: tl.constexpr, BK1: tl.constexpr, BK: tl.constexpr, BKH: tl.constexpr,
    STAGES: tl.constexpr, PREC: tl.constexpr, F32_DOT: tl.constexpr, EXPOSURE: tl.constexpr,
    HAS_VOLUME: tl.constexpr, KELLY: tl.constexpr, STORE_DEBUG: tl.constexpr, STORE_TRADES: tl.constexpr,
    ROW: tl.constexpr, BN: tl.constexpr, ROUND: tl.constexpr, GIVEN: tl.constexpr, PRE: tl.constexpr,
    ADV: tl.constexpr, L1KEEP: tl.constexpr, BARRIERS: tl.constexpr, ENS: tl.constexpr, MEMBERS: tl.constexpr,
    WMED: tl.constexpr,
):
    pid = tl.program_id(0)
    if MEMBERS:  # row path: window pid acts with member member_ptr[pid]'s network (its block of the stacked weights)
        mw = tl.load(member_ptr + pid).to(tl.int64)
        w1, b1, w2, b2, w3, b3, w4, b4 = member_weights(w1, b1, w2, b2, w3, b3, w4, b4, mw, D, H1, H2, H3, A)
        vb_ptr += mw * 4
    rows = pid * BLOCK_W + tl.arange(0, BLOCK_W)
    valid = rows < n_windows
    rows64 = rows.to(tl.int64)
    start = tl.load(start_ptr + rows, mask=valid, other=0).to(tl.int64)
    length = tl.load(len_ptr + rows, mask=valid, other=0).to(tl.int64)
    cols = tl.arange(0, D)
    fmask = valid[:, None] & (cols[None, :] < n_feat)
    mean = tl.load(mean_ptr + rows64[:, None] * n_feat + cols[None, :], mask=fmask, other=0.0)
    inv = tl.load(inv_ptr + rows64[:, None] * n_feat + cols[None, :], mask=fmask, other=0.0)
    if WMED:  # [W] medians: each window's own symbol's (a pooled universe); else the fold's 0-d pair
        med_range = tl.load(med_range_ptr + rows, mask=valid, other=1.0)
        med_absret = tl.load(med_absret_ptr + rows, mask=valid, other=1.0)
    else:
        med_range = tl.load(med_range_ptr)
        med_absret = tl.load(med_absret_ptr)
    last = n_bars - 1
    buf0 = scratch_ptr + pid.to(tl.int64) * (2 * BLOCK_W * HMAX)
    buf1 = buf0 + BLOCK_W * HMAX
    # Fresh portfolio and persistent statistics (state.init_state_).
    zero = tl.zeros([BLOCK_W], dtype=tl.float32)
    q = zero
    equity = zero + capital
    entry = zero
    target = zero
    open_costs = zero
    entry_bar = tl.zeros([BLOCK_W], dtype=tl.int64)
    level = tl.full([BLOCK_W], 2, tl.int32)
    vol = zero + med_absret
    k_p = zero + 0.5
    k_win = zero
    k_loss = zero
    k_count = tl.zeros([BLOCK_W], dtype=tl.int32)
    live = valid
    if BARRIERS:  # triple-barrier state and the open trade's first label (2: none yet)
        b_active = zero != zero
        b_up = zero
        b_lo = zero
        b_exp = tl.zeros([BLOCK_W], dtype=tl.int64)
        b_side = zero
        b_label = tl.full([BLOCK_W], 2, tl.int32)
    t0 = tl.minimum(start, last)
    f_cur = tl.load(feat_ptr + t0[:, None] * n_feat + cols[None, :], mask=fmask, other=0.0)
    close_t = tl.load(ohlc_ptr + t0 * 4 + 3, mask=valid, other=1.0)
    hcols = tl.arange(0, H1)
    if PRE:  # layer 1 = precomputed feature part [W, n_steps, H1] + the portfolio inputs' rows of W1
        wp0 = tl.load(w1 + n_feat * H1 + hcols).to(tl.float32)
        wp1 = tl.load(w1 + (n_feat + 1) * H1 + hcols).to(tl.float32)
        wp2 = tl.load(w1 + (n_feat + 2) * H1 + hcols).to(tl.float32)
        pre_row = pre_ptr + pid.to(tl.int64) * n_steps * H1
        pre_cur = tl.load(pre_row + hcols)
    else:
        pre_cur = tl.zeros([H1], dtype=tl.float32)
    a_held = tl.full([BLOCK_W], 2, tl.int32)  # the held action (set on every decision bar, the first included)
    for i in range(0, n_steps):
        bar = start + i
        t1 = bar + 1
        t1c = tl.minimum(t1, last)
        stepping = live & (i < length)
        # Bar t+1 values and the next observation's features: issued now, used after the MLP.
        range_t = tl.load(range_ptr + tl.minimum(bar, last), mask=valid, other=0.0)
        open1 = tl.load(ohlc_ptr + t1c * 4, mask=valid, other=1.0)
        high1 = tl.load(ohlc_ptr + t1c * 4 + 1, mask=valid, other=1.0)
        low1 = tl.load(ohlc_ptr + t1c * 4 + 2, mask=valid, other=1.0)
        close1 = tl.load(ohlc_ptr + t1c * 4 + 3, mask=valid, other=1.0)
        volume1 = tl.load(volume_ptr + t1c, mask=valid, other=1.0)
        absret1 = tl.abs(tl.load(logret_ptr + t1c, mask=valid, other=0.0))
        f_next = tl.load(feat_ptr + t1c[:, None] * n_feat + cols[None, :], mask=fmask, other=0.0)
        if PRE:
            pre_next = tl.load(pre_row + tl.minimum(i + 1, n_steps - 1).to(tl.int64) * H1 + hcols)
        else:
            pre_next = pre_cur

        # Observation: normalised features ++ (exposure, unrealised return, bars in position).
        expo, unreal, held = portfolio_features(q, equity, entry, entry_bar, bar, close_t, capital, max_holding_f)
        x = (f_cur - mean) * inv
        x = tl.where(cols[None, :] == n_feat, expo[:, None], x)
        x = tl.where(cols[None, :] == n_feat + 1, unreal[:, None], x)
        x = tl.where(cols[None, :] == n_feat + 2, held[:, None], x)
        if GIVEN:  # a fixed action array [W, given_cols] (ActionPolicy): column min(i, last column)
            a_held = tl.load(given_ptr + rows64 * given_cols + tl.minimum(i, given_cols - 1), mask=valid, other=0).to(tl.int32)
        elif i % decide_every == 0:  # a decision every decide_every bars (env.decision_interval); held between
            if ENS:  # K members vote (row path): each member's greedy action on its own normalisation
                ca = tl.arange(0, A)
                votes = tl.zeros([A], dtype=tl.float32)
                for k in range(0, n_members):
                    mk = tl.load(ens_mean_ptr + k * n_feat + cols, mask=cols < n_feat, other=0.0)
                    ik = tl.load(ens_inv_ptr + k * n_feat + cols, mask=cols < n_feat, other=0.0)
                    xk = tl.where(cols[None, :] < n_feat, (x - mk[None, :]) * ik[None, :], x)
                    ak = greedy_action_row(xk, pre_cur, w1 + k * (D * H1), b1 + k * H1, w2 + k * (H1 * H2), b2 + k * H2,
                                           w3 + k * (H2 * H3), b3 + k * H3, w4 + k * (H3 * A), b4 + k * A, vb_ptr + k * 4,
                                           slope, N_ACTIONS, D, H1, H2, H3, A, BN, ROUND, False, ADV, L1KEEP)
                    votes += tl.where(ca == tl.sum(ak, axis=0), tl.load(ens_w_ptr + k), 0.0)
                a_held = tl.zeros([1], dtype=tl.int32) + tl.argmax(votes, axis=0, tie_break_left=True).to(tl.int32)
            elif ROW:  # one window per program: matrix-vector products on the CUDA cores
                h1_pre = pre_cur
                if PRE:
                    h1_pre = ((pre_cur + tl.sum(expo) * wp0) + tl.sum(unreal) * wp1) + tl.sum(held) * wp2
                a_held = greedy_action_row(x, h1_pre, w1, b1, w2, b2, w3, b3, w4, b4, vb_ptr, slope, N_ACTIONS, D, H1, H2,
                                      H3, A, BN, ROUND, PRE, ADV, L1KEEP)
            else:
                a_held = greedy_action(x, valid, buf0, buf1, w1, b1, w2, b2, w3, b3, w4, b4, vb_ptr, slope, N_ACTIONS,
                                  D, H1, H2, H3, A, HMAX, BLOCK_W, BK1, BK, BKH, STAGES, PREC, F32_DOT, ADV)
        a = a_held
        # The env step (vec_env.step with shaping off).
        e, o, m = decode(a, range_t, med_range, vol, med_absret, EXPOSURE)
        k = kelly_multiplier(k_p, k_win, k_loss, k_count, kelly_fraction, kelly_min_mult, kelly_min_trades, KELLY)
        level2, target2 = target_position(e, level, target, equity, close_t, k, max_position, reserve)
        d, rev, size1, size2, fill1, fill2, price1, price2, cost1, cost2, status = execute(
            q, target2, o, m, close_t, range_t, open1, high1, low1, volume1, vol, med_range,
            half_spread, participation, impact_eta, max_impact, cost_rate, HAS_VOLUME)
        q2, entry2, entry_bar2, open_costs2, closed, tr_ret, tr_side, tr_size, tr_costs, tr_entry, pnl = book(
            q, target2, entry, entry_bar, open_costs, t1, close_t, close1,
            d, rev, size1, size2, fill1, fill2, price1, price2, cost1, cost2)
        k_p2, k_win2, k_loss2, k_count2 = update_kelly(k_p, k_win, k_loss, k_count, closed, tr_ret, kelly_alpha, KELLY)
        if BARRIERS:
            b_active2, b_up2, b_lo2, b_exp2, b_side2, b_hit, b_lab = update_barrier(
                b_active, b_up, b_lo, b_exp, b_side, q, q2, rev, size1, fill1, fill2, entry2, t1, high1, low1,
                profit_frac, stop_frac, max_holding_bars)
        equity1 = equity + pnl
        vol1 = vol_lambda * vol + (1.0 - vol_lambda) * absret1
        ret = tl.div_rn(pnl, equity)
        expo1 = tl.div_rn(q2 * close1, tl.maximum(equity1, capital * 1e-6))
        done = (equity1 <= bust_level) | (i + 1 >= length)
        closed = closed & stepping

        off = rows64 * n_steps + i
        tl.store(ret_ptr + off, tl.where(stepping, ret, 0.0), mask=valid)
        tl.store(pos_ptr + off, tl.where(stepping, expo1, 0.0), mask=valid)
        # Traded notional / initial capital: |Δq| at the fill bar's open (the torch path's formula).
        tl.store(traded_ptr + off, tl.where(stepping, tl.div_rn(tl.abs(q2 - q) * open1, capital), 0.0), mask=valid)
        tl.store(tret_ptr + off, tl.where(closed, tr_ret, 0.0), mask=valid)
        tl.store(tclosed_ptr + off, closed.to(tl.int8), mask=valid)
        if STORE_DEBUG:
            tl.store(act_ptr + off, a, mask=valid)
            tl.store(status_ptr + off, tl.where(stepping, status, 0).to(tl.int8), mask=valid)
        if STORE_TRADES:
            tl.store(tside_ptr + off, tl.where(closed, tr_side, 0.0).to(tl.int8), mask=valid)
            tl.store(tsize_ptr + off, tl.where(closed, tr_size, 0.0), mask=valid)
            tl.store(tcost_ptr + off, tl.where(closed, tr_costs, 0.0), mask=valid)
            tl.store(tentry_ptr + off, tl.where(closed, tr_entry, 0), mask=valid)
            if BARRIERS:  # the closing step reports the label of the bars before it (no hit can occur on it)
                tl.store(tbar_ptr + off, tl.where(closed, b_label, 2).to(tl.int8), mask=valid)

        # Commit (windows that did not step keep their state: finished, or past their length).
        q = tl.where(stepping, q2, q)
        equity = tl.where(stepping, equity1, equity)
        entry = tl.where(stepping, entry2, entry)
        entry_bar = tl.where(stepping, entry_bar2, entry_bar)
        open_costs = tl.where(stepping, open_costs2, open_costs)
        level = tl.where(stepping, level2, level)
        target = tl.where(stepping, target2, target)
        vol = tl.where(stepping, vol1, vol)
        k_p = tl.where(stepping, k_p2, k_p)
        k_win = tl.where(stepping, k_win2, k_win)
        k_loss = tl.where(stepping, k_loss2, k_loss)
        k_count = tl.where(stepping, k_count2, k_count)
        if BARRIERS:
            b_label = tl.where(stepping & b_hit & (b_label == 2), b_lab, b_label)
            b_label = tl.where(closed, 2, b_label)
            b_active = tl.where(stepping, b_active2, b_active)
            b_up = tl.where(stepping, b_up2, b_up)
            b_lo = tl.where(stepping, b_lo2, b_lo)
            b_exp = tl.where(stepping, b_exp2, b_exp)
            b_side = tl.where(stepping, b_side2, b_side)
        live = live & ((stepping & done) == 0)
        f_cur = f_next
        pre_cur = pre_next
        close_t = close1
    tl.store(final_ptr + rows, equity, mask=valid)


def fused_backtest(
    market: MarketArrays, starts: torch.Tensor, lengths: torch.Tensor, norm_mean: torch.Tensor,
    norm_inv_std: torch.Tensor, net: DuelingWeights | None, params: ExecParams, *, n_steps: int,
    exposure_mode: bool, kelly: bool, precision: str = "tf32", block_w: int | None = None, bk: int | None = None,
    stages: int = 3, num_warps: int | None = None, store_debug: bool = False, store_trades: bool = False,
    bn: int = 64, actions: torch.Tensor | None = None, precompute: bool | None = None,
    adv_only: bool = True, l1_keep: bool = True, barriers: bool = False, ensemble: EnsembleWeights | None = None,
    decision_interval: int = 1, window_nets: WindowNets | None = None,
) -> FusedOutputs:
    """Backtest W windows (bars starts[w] … starts[w] + lengths[w]) with the greedy action of ``net``.

    starts, lengths: [W] int64 device tensors (trusted: starts + lengths ≤ n_bars − 1, lengths ≥ 1;
    the caller checks on the host). n_steps: max(lengths) (a host fact; the bar loop's trip count).
    norm_mean, norm_inv_std: [W, F] float32. net: ``pack_dueling`` output on the same device, with
    float32 weights for "ieee" / "tf32" / "tf32x3" and bf16 weights for "bf16".
    block_w: windows per program. 1 = one window per program, the MLP as matrix-vector products
    on the CUDA cores in float32 FMA (``greedy_action_row``; "tf32" / "tf32x3" then compute exact
    float32, "bf16" keeps bf16 weights and layer inputs); a power of two >= 16 = tl.dot tiles of
    that many rows. None picks 1 for fewer than ROW_MAX_WINDOWS windows, else 16.
    bn: column chunk of the fused layers 2-3 in the row path. num_warps: None = 4 (measured best for both paths on the H200).
    actions: instead of a network (net = None), a fixed int64 action array [W, C] on the device:
    step i takes column min(i, C − 1) (``ActionPolicy``'s rule); trusted to be valid actions.
    precompute: (row path, float32 weights) compute layer 1's feature part for every bar of every
    window before the loop, as one float64 GEMM ([W, n_steps, H1] float32 in device memory), so the
    bar loop skips the first layer's weights; None = when that array fits PRECOMPUTE_MAX_BYTES.
    adv_only: evaluate the advantage head alone and add the value head only on the rare bars where
    float32 rounding could make the dueling argmax differ (``greedy_action_row``; the tile path
    does it per block of windows): the same actions, fewer weight bytes per bar. l1_keep: (row path) stream W2 through L2 only and
    keep the head weights in L1 across bars (cache hints). Both defaults are the configuration
    measured fastest (BENCHMARKS.md, bench/results/backtest_cuda.json).
    barriers: (with store_trades) track the env's triple barriers and write each round trip's label
    into ``trade_barrier`` (+1 profit, -1 stop, 0 time, 2 closed before any barrier).
    ensemble: K members voting instead of ``net`` (``EnsembleWeights``; row path only, no
    precompute): per bar each member's greedy action on its own normalisation of the window's raw
    features (pass identity norm_mean / norm_inv), the weighted vote's argmax (first on ties).
    decision_interval: k, the network (or ensemble) decides on bars 0, k, 2k, … of each window and
    its action is held in between (``env.decision_interval``; a fixed action array is read every bar).
    window_nets: instead of ``net``, window w acts with network ``window_nets.index[w]`` of
    ``window_nets.members`` (same shape and dtype; row path only, no precompute): several members'
    held-back windows in one launch, each window's arithmetic that of its member's network alone
    (without the layer-1 precompute a lone network may use: within float32 rounding of it).
    """
    if ensemble is not None and window_nets is not None:
        raise ValueError("fused_backtest: pass an ensemble or per-window networks, not both")
    if ensemble is not None:
        net = ensemble.members[0]
    if window_nets is not None:
        net = window_nets.members[0]
        if int(window_nets.index.shape[0]) != int(starts.shape[0]):
            raise ValueError(f"fused_backtest: {int(window_nets.index.shape[0])} window networks for "
                             f"{int(starts.shape[0])} windows")
    if actions is not None:
        net = given_actions_net(market.features.shape[1], precision, market.features.device)
    elif net is None:
        raise ValueError("fused_backtest: pass a network or an action array")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {PRECISIONS}")
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    if net.w1.dtype != want:
        raise ValueError(f"precision {precision!r} needs {want} weights, got {net.w1.dtype}")
    dev = market.features.device
    n_bars, n_feat = market.features.shape
    w = int(starts.shape[0])
    if block_w is None:
        block_w = 1 if w < ROW_MAX_WINDOWS else 16
    if block_w != 1 and (block_w < 16 or block_w & (block_w - 1)):
        raise ValueError(f"block_w = {block_w}: must be 1 or a power of two >= 16 (tl.dot's smallest M)")
    row = block_w == 1
    num_warps = num_warps or 4
    if net.obs_dim != n_feat + 3:
        raise ValueError(f"net expects {net.obs_dim} inputs, the market gives {n_feat} features + 3")
    D, H1, H2, H3, A = net.dims
    hmax = max(D, H1, H2, H3)
    bk = bk or (64 if want == torch.bfloat16 else 32)
    bk_hidden = min(bk, H1, H2, H3)
    tile_bytes = bk_hidden * max(H1, H2, H3, A) * net.w1.element_size()
    stages = max(1, min(stages, (160 * 1024) // tile_bytes))
    interp = is_interpreted()
    f32_dot = want == torch.float32 or interp
    prec = "ieee" if precision == "bf16" else precision

    fits = w * n_steps * H1 * 4 <= PRECOMPUTE_MAX_BYTES
    if (ensemble is not None or window_nets is not None) and not row:
        raise ValueError("fused_backtest: an ensemble or per-window networks need the row path (block_w = 1)")
    pre_ok = row and actions is None and want == torch.float32 and ensemble is None and window_nets is None
    if precompute and not pre_ok:
        raise ValueError("precompute needs the row path (block_w = 1), a network and float32 weights")
    use_pre = pre_ok and (fits if precompute is None else bool(precompute))
    pre = layer1_features(market, starts, norm_mean, norm_inv_std, net, n_steps) if use_pre else None

    # The tile path's head layers are tl.dot tiles: each head half must be >= 16 wide.
    use_adv = bool(adv_only) and actions is None and (row or H3 // 2 >= 16)
    vb = value_bound(net) if use_adv else torch.zeros(4, dtype=torch.float32, device=dev)
    weights = {k: getattr(net, k) for k in ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")}
    stacked_of = ensemble if ensemble is not None else window_nets
    if stacked_of is not None:
        weights = stacked_of.stacked()
        vb = torch.cat([value_bound(m) if use_adv else torch.zeros(4, dtype=torch.float32, device=dev)
                        for m in stacked_of.members])

    grid = triton.cdiv(w, block_w)
    scratch = torch.empty(1 if row else grid * 2 * block_w * hmax, dtype=want, device=dev)
    f32 = dict(dtype=torch.float32, device=dev)
    out = FusedOutputs(
        returns=torch.empty(w, n_steps, **f32), positions=torch.empty(w, n_steps, **f32),
        trade_return=torch.empty(w, n_steps, **f32),
        trade_closed=torch.empty(w, n_steps, dtype=torch.int8, device=dev),
        final_equity=torch.empty(w, **f32), traded=torch.empty(w, n_steps, **f32),
    )
    dummy = out.returns
    if store_debug:
        out.actions = torch.empty(w, n_steps, dtype=torch.int32, device=dev)
        out.fill_status = torch.empty(w, n_steps, dtype=torch.int8, device=dev)
    if store_trades:
        out.trade_side = torch.empty(w, n_steps, dtype=torch.int8, device=dev)
        out.trade_size = torch.empty(w, n_steps, **f32)
        out.trade_costs = torch.empty(w, n_steps, **f32)
        out.trade_entry_bar = torch.empty(w, n_steps, dtype=torch.int64, device=dev)
    barriers = bool(barriers) and store_trades
    if barriers:
        out.trade_barrier = torch.empty(w, n_steps, dtype=torch.int8, device=dev)
    p = params
    _backtest_kernel[(grid,)](
        market.features, market.ohlc, market.volume, market.log_return, market.bar_range,
        market.median_range, market.median_abs_return,
        starts, lengths, norm_mean.contiguous(), norm_inv_std.contiguous(),
        *(weights[k] for k in ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")), vb, scratch,
        out.returns, out.positions, out.trade_return, out.trade_closed, out.final_equity, out.traded,
        out.actions if store_debug else dummy, out.fill_status if store_debug else dummy,
        out.trade_side if store_trades else dummy, out.trade_size if store_trades else dummy,
        out.trade_costs if store_trades else dummy, out.trade_entry_bar if store_trades else dummy,
        out.trade_barrier if barriers else dummy,
        actions.contiguous() if actions is not None else dummy, int(actions.shape[1]) if actions is not None else 1,
        pre if pre is not None else dummy,
        w, n_bars, n_steps, n_feat, max(1, int(decision_interval)),
        p.capital, p.max_position, p.reserve, p.cost_rate, p.half_spread, p.impact_eta, p.max_impact,
        p.participation, p.vol_lambda, p.max_holding, p.kelly_fraction, p.kelly_min_mult, p.kelly_alpha,
        int(p.kelly_min_trades), p.bust_level, net.slope, p.profit_frac, p.stop_frac, int(p.max_holding_bars),
        *((ensemble.norm_mean.contiguous(), ensemble.norm_inv.contiguous(), ensemble.weights.contiguous(),
           len(ensemble.members)) if ensemble is not None else (dummy, dummy, dummy, 1)),
        window_nets.index if window_nets is not None else dummy,
        N_ACTIONS=net.n_actions, D=D, H1=H1, H2=H2, H3=H3, A=A, HMAX=hmax, BLOCK_W=block_w,
        BK1=min(bk, D), BK=bk_hidden, BKH=min(bk_hidden, max(16, H3 // 2)), STAGES=stages, PREC=prec, F32_DOT=f32_dot,
        EXPOSURE=exposure_mode, HAS_VOLUME=market.has_volume, KELLY=kelly,
        STORE_DEBUG=store_debug, STORE_TRADES=store_trades,
        ROW=row, BN=min(bn, H2), ROUND=want == torch.bfloat16, GIVEN=actions is not None,
        PRE=pre is not None, ADV=use_adv, L1KEEP=bool(l1_keep), BARRIERS=barriers, ENS=ensemble is not None,
        MEMBERS=window_nets is not None, WMED=market.median_range.dim() == 1, num_warps=num_warps, enable_fp_fusion=False,
    )
    out.trade_closed = out.trade_closed.view(torch.bool)
    return out


__all__ = ["PRECISIONS", "PRECOMPUTE_MAX_BYTES", "ROW_MAX_WINDOWS", "DuelingWeights", "EnsembleWeights", "ExecParams",
           "FusedOutputs",
           "MarketArrays", "WindowNets", "fused_backtest", "is_interpreted"]
