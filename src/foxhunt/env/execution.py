"""Order execution at bar t+1: target position, legs, fills, accounting, round trips, triple barrier.

ENV_SPEC "One step", items 2–5. Everything is elementwise over [N] float32 / int64 tensors and
branch-free; the functions return new tensors (fixed shapes) and never write to the state: the
step commits them (masked) in one place.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from foxhunt.env.actions import IOC, LIMIT, Decoded, exposure_fraction
from foxhunt.env.params import EnvTensors
from foxhunt.env.state import EnvState

SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
_TINY_VOLUME = 1e-30

STATUS_NONE, STATUS_FILLED, STATUS_PARTIAL, STATUS_MISSED = 0, 1, 2, 3


class Bars(NamedTuple):
    """Market values an env needs for one step (each [N] float32)."""

    close_t: torch.Tensor  # C_t
    range_t: torch.Tensor  # rg_t
    open1: torch.Tensor  # O_{t+1}
    high1: torch.Tensor
    low1: torch.Tensor
    close1: torch.Tensor
    volume1: torch.Tensor
    absret1: torch.Tensor  # |lr_{t+1}|


def kelly_multiplier(state: EnvState, params: EnvTensors) -> torch.Tensor:
    """k [N]: 1 unless Kelly sizing is on and enough trades closed; then clamp(fraction·f, min_mult, 1)
    with f = p − (1−p)/b, b = W/Lo (f = p when Lo ≤ 0, −∞ when W ≤ 0 < Lo)."""
    p, w, lo = state.kelly_p, state.kelly_win, state.kelly_loss
    f = p - (1.0 - p) * lo / torch.where(w > 0, w, 1.0)
    f = torch.where(w > 0, f, -math.inf)
    f = torch.where(lo <= 0, p, f)
    k = torch.maximum(params.kelly_fraction * f, params.kelly_min_mult).clamp_max(1.0)
    on = params.kelly & (state.kelly_count >= params.kelly_min_trades)
    return torch.where(on, k, 1.0)


class Target(NamedTuple):
    level: torch.Tensor  # int64 [N], requested level after the action
    target: torch.Tensor  # float32 [N], q*


def target_position(state: EnvState, params: EnvTensors, dec: Decoded, close_t: torch.Tensor) -> Target:
    """Step 2: a new level re-targets q* = x_e·k·(1 − reserve)·E / C_t; the same level keeps q*."""
    change = dec.level != state.level
    x = exposure_fraction(dec.level) * params.max_position
    k = kelly_multiplier(state, params)
    q_new = x * k * (1.0 - params.reserve) * state.equity / close_t
    return Target(torch.where(change, dec.level, state.level), torch.where(change, q_new, state.target))


class Fills(NamedTuple):
    """Legs of one order (leg 2 exists only for a reversal). Sizes are units ≥ 0, d is ±1 (0: no order)."""

    d: torch.Tensor
    reversal: torch.Tensor  # bool
    size1: torch.Tensor
    size2: torch.Tensor
    fill1: torch.Tensor
    fill2: torch.Tensor
    price1: torch.Tensor
    price2: torch.Tensor
    cost1: torch.Tensor
    cost2: torch.Tensor
    status: torch.Tensor  # int64: 0 none, 1 filled, 2 partial, 3 missed


def execute(
    q: torch.Tensor,
    q_star: torch.Tensor,
    dec: Decoded,
    bars: Bars,
    vol: torch.Tensor,
    params: EnvTensors,
    median_range: torch.Tensor,
    has_volume: bool,
) -> Fills:
    """Step 3: split Δq = q* − q into legs and fill them on bar t+1 by order type."""
    dq = q_star - q
    d = torch.sign(dq)
    rel = torch.where(median_range > 0, (bars.range_t / median_range).clamp(0.25, 4.0), 1.0)
    h = params.half_spread * rel
    reversal = (q != 0) & (q_star != 0) & ((q > 0) != (q_star > 0))
    size1 = torch.where(reversal, q.abs(), dq.abs())
    size2 = torch.where(reversal, q_star.abs(), 0.0)
    is_lim = dec.order == LIMIT
    is_ioc = dec.order == IOC
    m = dec.mult

    # Limit-maker: one price for the whole order; all legs or nothing; no spread, no impact.
    limit_px = bars.close_t * (1.0 - d * h / m)
    lim_hit = torch.where(d > 0, bars.low1 < limit_px, bars.high1 > limit_px)
    lim_fill_px = torch.where(d > 0, torch.minimum(limit_px, bars.open1), torch.maximum(limit_px, bars.open1))
    lim_miss = is_lim & ~lim_hit

    # IoC: capacity K units; leg 2 only after leg 1 filled completely.
    if has_volume:
        cap = params.participation * m * bars.volume1
        ioc1 = torch.minimum(size1, cap)
        ioc2 = torch.where(ioc1 >= size1, torch.minimum(size2, cap - ioc1), 0.0)
    else:
        ioc1, ioc2 = size1, size2
    fill1 = torch.where(is_ioc, ioc1, torch.where(lim_miss, 0.0, size1))
    fill2 = torch.where(is_ioc, ioc2, torch.where(lim_miss, 0.0, size2))

    # Market / IoC price: O_{t+1}·(1 + d·(h + I)), impact per leg on its filled size.
    if has_volume:
        coef = params.impact_eta * m * (vol * SQRT_HALF_PI)
        inv_v = 1.0 / bars.volume1.clamp_min(_TINY_VOLUME)
        imp1 = torch.minimum(coef * torch.sqrt(fill1 * inv_v), params.max_impact)
        imp2 = torch.minimum(coef * torch.sqrt(fill2 * inv_v), params.max_impact)
    else:
        imp1 = imp2 = torch.zeros_like(h)
    price1 = torch.where(is_lim, lim_fill_px, bars.open1 * (1.0 + d * (h + imp1)))
    price2 = torch.where(is_lim, lim_fill_px, bars.open1 * (1.0 + d * (h + imp2)))
    cost1 = params.cost_rate * fill1 * price1
    cost2 = params.cost_rate * fill2 * price2

    cut = is_ioc & ((fill1 < size1) | (fill2 < size2))
    status = torch.where(cut, STATUS_PARTIAL, STATUS_FILLED)
    status = torch.where(lim_miss, STATUS_MISSED, status)
    status = torch.where(dq == 0, STATUS_NONE, status)
    return Fills(d, reversal, size1, size2, fill1, fill2, price1, price2, cost1, cost2, status)


class Booked(NamedTuple):
    """Step 4: the portfolio after the fills, and the round trip closed by leg 1 (if any)."""

    cash: torch.Tensor
    position: torch.Tensor
    entry_price: torch.Tensor
    entry_bar: torch.Tensor
    open_costs: torch.Tensor
    step_costs: torch.Tensor  # cost1 + cost2
    opened: torch.Tensor  # bool: a position was opened (from flat, or leg 2 of a reversal)
    closed: torch.Tensor  # bool: a round trip closed (q reached 0 on leg 1)
    trade_return: torch.Tensor
    trade_side: torch.Tensor  # float32 ±1 (0 when no trade)
    trade_size: torch.Tensor
    trade_costs: torch.Tensor
    trade_entry_bar: torch.Tensor
    pnl: torch.Tensor  # ΔE = E' − E, from the decomposition (no difference of large equities)


def book(state: EnvState, q_star: torch.Tensor, f: Fills, bars: Bars, t1: torch.Tensor) -> Booked:
    """Accounting per filled leg, in order; entry price rules; round trip on reaching q = 0.

    A complete leg sets q exactly (to 0 for leg 1 of a reversal, else to q*), so that holding a level
    never leaves a float residue to re-trade.
    """
    q, cash, entry, ebar = state.position, state.cash, state.entry_price, state.entry_bar
    dq1 = f.d * f.fill1
    dq2 = f.d * f.fill2
    full1 = f.fill1 >= f.size1
    full2 = f.fill2 >= f.size2
    q1 = torch.where(full1, torch.where(f.reversal, 0.0, q_star), q + dq1)
    leg2 = f.reversal & full1
    q2 = torch.where(leg2, torch.where(full2, q_star, dq2), q1)
    cash2 = cash - (dq1 * f.price1 + f.cost1) - (dq2 * f.price2 + f.cost2)

    # Leg 1: open from flat, add (same direction), reduce (keep), or close to 0 (round trip).
    has_q = q != 0
    filled1 = f.fill1 > 0
    opens1 = ~has_q & filled1
    adds1 = has_q & (f.d == torch.sign(q)) & filled1
    closes1 = has_q & (q1 == 0)
    aq = q.abs()
    avg = (aq * entry + f.fill1 * f.price1) / torch.where(adds1, aq + f.fill1, 1.0)
    e1 = torch.where(adds1, avg, entry)
    e1 = torch.where(opens1, f.price1, e1)
    b1 = torch.where(opens1, t1, ebar)
    oc1 = state.open_costs + f.cost1
    side = torch.sign(q)
    safe_entry = torch.where(entry > 0, entry, 1.0)
    tr_ret = torch.where(closes1, side * (f.price1 - entry) / safe_entry, 0.0)
    tr_side = torch.where(closes1, side, 0.0)
    tr_size = torch.where(closes1, aq, 0.0)
    tr_costs = torch.where(closes1, oc1, 0.0)
    tr_entry = torch.where(closes1, ebar, 0)
    e1 = torch.where(closes1, 0.0, e1)
    b1 = torch.where(closes1, 0, b1)
    oc1 = torch.where(closes1, 0.0, oc1)

    # Leg 2 (reversal, after a complete close): opens the new position.
    opens2 = leg2 & (f.fill2 > 0)
    e2 = torch.where(opens2, f.price2, e1)
    b2 = torch.where(opens2, t1, b1)
    oc2 = oc1 + f.cost2
    # ΔE = Σ legs (−d·size·(price − C_{t+1}) − cost) + q·(C_{t+1} − C_t)
    pnl = (
        q * (bars.close1 - bars.close_t)
        - (dq1 * (f.price1 - bars.close1) + f.cost1)
        - (dq2 * (f.price2 - bars.close1) + f.cost2)
    )
    return Booked(
        cash=cash2,
        position=q2,
        entry_price=e2,
        entry_bar=b2,
        open_costs=oc2,
        step_costs=f.cost1 + f.cost2,
        opened=opens1 | opens2,
        closed=closes1,
        trade_return=tr_ret,
        trade_side=tr_side,
        trade_size=tr_size,
        trade_costs=tr_costs,
        trade_entry_bar=tr_entry,
        pnl=pnl,
    )


class KellyStats(NamedTuple):
    p: torch.Tensor
    win: torch.Tensor
    loss: torch.Tensor
    count: torch.Tensor


def update_kelly(state: EnvState, params: EnvTensors, closed: torch.Tensor, ret: torch.Tensor) -> KellyStats:
    """On each round trip: p ← p + α(win − p); W ← W + α(ret − W) on a win, else Lo ← Lo + α(−ret − Lo)."""
    a = params.kelly_alpha
    win = ret > 0
    p = torch.where(closed, state.kelly_p + a * (win.to(torch.float32) - state.kelly_p), state.kelly_p)
    w = torch.where(closed & win, state.kelly_win + a * (ret - state.kelly_win), state.kelly_win)
    lo = torch.where(closed & ~win, state.kelly_loss + a * (-ret - state.kelly_loss), state.kelly_loss)
    return KellyStats(p, w, lo, state.kelly_count + closed.to(torch.int64))


class Barrier(NamedTuple):
    active: torch.Tensor
    upper: torch.Tensor
    lower: torch.Tensor
    expiry: torch.Tensor
    side: torch.Tensor
    hit: torch.Tensor  # bool
    label: torch.Tensor  # int64: −1 stop, 0 time, +1 profit (0 when no hit)


def update_barrier(
    state: EnvState, params: EnvTensors, booked: Booked, bars: Bars, t1: torch.Tensor
) -> Barrier:
    """Step 5: set on open (not checked this step), check an earlier barrier on bar t+1 (stop wins
    ties), expire at t+1 ≥ expiry, deactivate on a hit or on going flat."""
    opened = booked.opened
    flat = booked.position == 0
    check = state.barrier_active & ~opened & ~flat
    s = state.barrier_side
    up, lo = state.barrier_upper, state.barrier_lower
    long = s > 0
    touch_up = bars.high1 >= up
    touch_lo = bars.low1 <= lo
    stop = torch.where(long, touch_lo, touch_up)
    profit = ~stop & torch.where(long, touch_up, touch_lo)
    timed = ~stop & ~profit & (t1 >= state.barrier_expiry)
    hit = check & (stop | profit | timed)
    label = torch.where(hit & stop, -1, torch.where(hit & profit, 1, 0))

    new_side = torch.sign(booked.position)
    entry = booked.entry_price
    new_long = new_side > 0
    pf, sf = params.profit_frac, params.stop_frac
    new_up = torch.where(new_long, entry * (1.0 + pf), entry * (1.0 + sf))
    new_lo = torch.where(new_long, entry * (1.0 - sf), entry * (1.0 - pf))
    active = torch.where(opened, True, state.barrier_active & ~hit & ~flat)
    return Barrier(
        active=active,
        upper=torch.where(opened, new_up, up),
        lower=torch.where(opened, new_lo, lo),
        expiry=torch.where(opened, t1 + params.max_holding, state.barrier_expiry),
        side=torch.where(opened, new_side, s),
        hit=hit,
        label=label,
    )
