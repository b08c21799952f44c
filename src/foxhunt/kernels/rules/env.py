"""Triton device functions: one env step of the backtest (ENV_SPEC "One step", shaping off).

Each function is the elementwise twin of a torch function in ``foxhunt.env`` (named in its
docstring) over [BLOCK_W] register vectors, one lane per window, with the same operation order so
that float32 results agree with the torch step to rounding (the kernel is launched with
``enable_fp_fusion=False`` and uses ``div_rn`` / ``sqrt_rn``, the IEEE operations torch uses).
DSR, diversity and curiosity do not change a backtest's returns or positions (shaping is off) and are
not computed here; barriers change none either (they never close a position or end a window) and
are computed only for the trade labels of triple-barrier evaluation (``update_barrier``).

This module is part of the ``foxhunt.kernels`` leaf: it imports nothing of ours.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

SQRT_HALF_PI = tl.constexpr(math.sqrt(math.pi / 2.0))
"""σ = v·sqrt(π/2) (execution.SQRT_HALF_PI)."""
TINY_VOLUME = tl.constexpr(1e-30)
"""Zero-volume guard of the impact formula (execution._TINY_VOLUME)."""
NEG_BIG = tl.constexpr(-3.0e38)
"""Stands for −inf in the Kelly fraction (only its clamp to kelly_min_mult matters)."""


@triton.jit
def sign(x):
    """torch.sign for float32 (0 at 0)."""
    return tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0))


@triton.jit
def portfolio_features(q, equity, entry, entry_bar, bar, close, capital, max_holding_f):
    """state.portfolio_features: (exposure, unrealised return, bars in position) at ``bar``."""
    flat = q == 0
    eq = tl.maximum(equity, capital * 1e-6)
    ent = tl.where(flat, 1.0, entry)
    expo = tl.div_rn(q * close, eq)
    unreal = tl.where(flat, 0.0, tl.div_rn(sign(q) * (close - ent), ent))
    held = tl.where(flat, 0.0, tl.div_rn((bar - entry_bar).to(tl.float32), max_holding_f))
    return expo, unreal, held


@triton.jit
def decode(a, range_t, med_range, vol, med_absret, EXPOSURE: tl.constexpr):
    """actions.decode: level e (int32), order type o (0 market, 1 limit, 2 IoC), urgency multiplier m."""
    if EXPOSURE:
        e = tl.minimum(tl.maximum(a, 0), 4)
        o = tl.where(range_t > 2.0 * med_range, 0, 2)
        o = tl.where(range_t < med_range, 1, o)
        o = tl.where(med_range <= 0, 0, o)
        u = tl.where(vol > 1.5 * med_absret, 2, 1)
        u = tl.where(vol < 0.5 * med_absret, 0, u)
        u = tl.where(med_absret <= 0, 1, u)
    else:
        c = tl.minimum(tl.maximum(a, 0), 44)
        e = c // 9
        o = (c // 3) % 3
        u = c % 3
    m = tl.where(u == 0, 0.5, tl.where(u == 1, 1.0, 2.0))
    return e, o, m


@triton.jit
def kelly_multiplier(p, win, loss, count, kelly_fraction, kelly_min_mult, kelly_min_trades, KELLY: tl.constexpr):
    """execution.kelly_multiplier: clamp(fraction·f, min_mult, 1) once enough trades closed, else 1."""
    if KELLY:
        f = p - tl.div_rn((1.0 - p) * loss, tl.where(win > 0, win, 1.0))
        f = tl.where(win > 0, f, NEG_BIG)
        f = tl.where(loss <= 0, p, f)
        k = tl.minimum(tl.maximum(kelly_fraction * f, kelly_min_mult), 1.0)
        k = tl.where(count >= kelly_min_trades, k, 1.0)
    else:
        k = tl.full(p.shape, 1.0, tl.float32)
    return k


@triton.jit
def target_position(e, level, target, equity, close_t, k, max_position, reserve):
    """execution.target_position: a new level re-targets q* = x_e·k·(1 − reserve)·E / C_t."""
    change = e != level
    x = (e.to(tl.float32) - 2.0) * 0.5 * max_position
    q_new = tl.div_rn(x * k * (1.0 - reserve) * equity, close_t)
    return tl.where(change, e, level), tl.where(change, q_new, target)


@triton.jit
def leg_price(open1, d, h, fill, coef, inv_v, max_impact, HAS_VOLUME: tl.constexpr):
    """Market / IoC fill price O_{t+1}·(1 + d·(h + I)), impact I on the filled size."""
    if HAS_VOLUME:
        imp = tl.minimum(coef * tl.sqrt_rn(fill * inv_v), max_impact)
        px = open1 * (1.0 + d * (h + imp))
    else:
        px = open1 * (1.0 + d * (h + 0.0))
    return px


@triton.jit
def execute(q, q_star, o, m, close_t, range_t, open1, high1, low1, volume1, vol, med_range,
            half_spread, participation, impact_eta, max_impact, cost_rate, HAS_VOLUME: tl.constexpr):
    """execution.execute: legs of Δq = q* − q filled on bar t+1 by order type.

    Returns (d, reversal, size1, size2, fill1, fill2, price1, price2, cost1, cost2, status), status
    int32 0 none, 1 filled, 2 partial, 3 missed.
    """
    dq = q_star - q
    d = sign(dq)
    rel = tl.where(med_range > 0, tl.minimum(tl.maximum(tl.div_rn(range_t, med_range), 0.25), 4.0), 1.0)
    h = half_spread * rel
    reversal = (q != 0) & (q_star != 0) & ((q > 0) != (q_star > 0))
    size1 = tl.where(reversal, tl.abs(q), tl.abs(dq))
    size2 = tl.where(reversal, tl.abs(q_star), 0.0)
    is_lim = o == 1
    is_ioc = o == 2
    # Limit-maker: one price for the whole order; all legs or nothing; no spread, no impact.
    limit_px = close_t * (1.0 - tl.div_rn(d * h, m))
    lim_hit = tl.where(d > 0, low1 < limit_px, high1 > limit_px)
    lim_px = tl.where(d > 0, tl.minimum(limit_px, open1), tl.maximum(limit_px, open1))
    lim_miss = is_lim & (lim_hit == 0)
    # IoC: capacity K units; leg 2 only after leg 1 filled completely.
    if HAS_VOLUME:
        cap = participation * m * volume1
        ioc1 = tl.minimum(size1, cap)
        ioc2 = tl.where(ioc1 >= size1, tl.minimum(size2, cap - ioc1), 0.0)
        coef = impact_eta * m * (vol * SQRT_HALF_PI)
        inv_v = tl.div_rn(1.0, tl.maximum(volume1, TINY_VOLUME))
    else:
        ioc1 = size1
        ioc2 = size2
        coef = 0.0
        inv_v = 0.0
    fill1 = tl.where(is_ioc, ioc1, tl.where(lim_miss, 0.0, size1))
    fill2 = tl.where(is_ioc, ioc2, tl.where(lim_miss, 0.0, size2))
    price1 = tl.where(is_lim, lim_px, leg_price(open1, d, h, fill1, coef, inv_v, max_impact, HAS_VOLUME))
    price2 = tl.where(is_lim, lim_px, leg_price(open1, d, h, fill2, coef, inv_v, max_impact, HAS_VOLUME))
    cost1 = cost_rate * fill1 * price1
    cost2 = cost_rate * fill2 * price2
    cut = is_ioc & ((fill1 < size1) | (fill2 < size2))
    status = tl.where(cut, 2, 1)
    status = tl.where(lim_miss, 3, status)
    status = tl.where(dq == 0, 0, status)
    return d, reversal, size1, size2, fill1, fill2, price1, price2, cost1, cost2, status


@triton.jit
def book(q, q_star, entry, entry_bar, open_costs, t1, close_t, close1,
         d, reversal, size1, size2, fill1, fill2, price1, price2, cost1, cost2):
    """execution.book: the portfolio after the legs, the round trip closed by leg 1, and ΔE.

    Returns (q2, entry2, entry_bar2, open_costs2, closed, trade_return, trade_side, trade_size,
    trade_costs, trade_entry_bar, pnl). Cash is not needed: equity moves by the PnL decomposition.
    """
    dq1 = d * fill1
    dq2 = d * fill2
    full1 = fill1 >= size1
    full2 = fill2 >= size2
    q1 = tl.where(full1, tl.where(reversal, 0.0, q_star), q + dq1)
    leg2 = reversal & full1
    q2 = tl.where(leg2, tl.where(full2, q_star, dq2), q1)
    has_q = q != 0
    filled1 = fill1 > 0
    side = sign(q)
    opens1 = (q == 0) & filled1
    adds1 = has_q & (d == side) & filled1
    closes1 = has_q & (q1 == 0)
    aq = tl.abs(q)
    avg = tl.div_rn(aq * entry + fill1 * price1, tl.where(adds1, aq + fill1, 1.0))
    e1 = tl.where(adds1, avg, entry)
    e1 = tl.where(opens1, price1, e1)
    b1 = tl.where(opens1, t1, entry_bar)
    oc1 = open_costs + cost1
    safe_entry = tl.where(entry > 0, entry, 1.0)
    tr_ret = tl.where(closes1, tl.div_rn(side * (price1 - entry), safe_entry), 0.0)
    tr_side = tl.where(closes1, side, 0.0)
    tr_size = tl.where(closes1, aq, 0.0)
    tr_costs = tl.where(closes1, oc1, 0.0)
    tr_entry = tl.where(closes1, entry_bar, 0)
    e1 = tl.where(closes1, 0.0, e1)
    b1 = tl.where(closes1, 0, b1)
    oc1 = tl.where(closes1, 0.0, oc1)
    opens2 = leg2 & (fill2 > 0)
    e2 = tl.where(opens2, price2, e1)
    b2 = tl.where(opens2, t1, b1)
    oc2 = oc1 + cost2
    pnl = q * (close1 - close_t) - (dq1 * (price1 - close1) + cost1) - (dq2 * (price2 - close1) + cost2)
    return q2, e2, b2, oc2, closes1, tr_ret, tr_side, tr_size, tr_costs, tr_entry, pnl


@triton.jit
def update_kelly(p, win, loss, count, closed, ret, kelly_alpha, KELLY: tl.constexpr):
    """execution.update_kelly: EMA trade statistics on each round trip (untouched without Kelly)."""
    if KELLY:
        won = ret > 0
        p2 = tl.where(closed, p + kelly_alpha * (won.to(tl.float32) - p), p)
        win2 = tl.where(closed & won, win + kelly_alpha * (ret - win), win)
        loss2 = tl.where(closed & (won == 0), loss + kelly_alpha * (-ret - loss), loss)
        count2 = count + closed.to(tl.int32)
    else:
        p2 = p
        win2 = win
        loss2 = loss
        count2 = count
    return p2, win2, loss2, count2


@triton.jit
def update_barrier(active, upper, lower, expiry, bside, q, q2, rev, size1, fill1, fill2, entry2, t1, high1, low1,
                   profit_frac, stop_frac, max_holding_bars):
    """execution.update_barrier: set on open (not checked this step), check an earlier barrier on bar
    t+1 (stop wins ties), expire at t+1 >= expiry, deactivate on a hit or on going flat.

    ``opened`` is recomputed as execution.book defines it (leg 1 from flat, or leg 2 of a complete
    reversal). Returns (active, upper, lower, expiry, side, hit, label) with label int32 −1 stop,
    0 time, +1 profit (0 when no hit).
    """
    opened = ((q == 0) & (fill1 > 0)) | (rev & (fill1 >= size1) & (fill2 > 0))
    flat = q2 == 0
    check = active & (opened == 0) & (flat == 0)
    is_long = bside > 0
    touch_up = high1 >= upper
    touch_lo = low1 <= lower
    stop = tl.where(is_long, touch_lo, touch_up)
    profit = (stop == 0) & tl.where(is_long, touch_up, touch_lo)
    timed = (stop == 0) & (profit == 0) & (t1 >= expiry)
    hit = check & (stop | profit | timed)
    label = tl.where(hit & stop, -1, tl.where(hit & profit, 1, 0))
    new_side = sign(q2)
    new_long = new_side > 0
    new_up = tl.where(new_long, entry2 * (1.0 + profit_frac), entry2 * (1.0 + stop_frac))
    new_lo = tl.where(new_long, entry2 * (1.0 - stop_frac), entry2 * (1.0 - profit_frac))
    active2 = tl.where(opened, 1, (active & (hit == 0) & (flat == 0)).to(tl.int32)) != 0
    return (active2, tl.where(opened, new_up, upper), tl.where(opened, new_lo, lower),
            tl.where(opened, t1 + max_holding_bars, expiry), tl.where(opened, new_side, bside), hit, label)
