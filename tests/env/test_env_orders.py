"""Hand-computed single steps for each order type (ENV_SPEC "One step", items 2–4).

Expected values are evaluated in float64 from the spec's formulas for explicit bars; the env runs in
float32, so money is compared at 1e-6 relative and rewards at 1e-4 relative.
"""

from __future__ import annotations

import math

import pytest

from tests.env.env_helpers import MED_RANGE, VOL, act, action, f, scenario_env, set_position

CAP = 1e6
COST = 2e-4  # cost_bps = 2
H0 = 0.5 * 10e-4 * 2.0  # half spread at bar 0: ½·spread·clamp(0.02 / 0.01) = 1e-3
SIGMA = VOL * math.sqrt(math.pi / 2)
ETA = 0.5
REL = 1e-6


def impact(size: float, volume: float, m: float = 1.0, cap: float = 0.05) -> float:
    return min(cap, ETA * m * SIGMA * math.sqrt(size / volume))


def approx(x: float, rel: float = REL):
    return pytest.approx(x, rel=rel, abs=1e-9)


# Trade returns are differences of float32 prices: ~1e-5 relative.


def test_market_buy_fills_at_next_open_with_half_spread_impact_and_cost():
    env = scenario_env()
    out = act(env, action(4, 0, 1))
    q = 0.95 * CAP / 100.0  # x·(1 − reserve)·E / C_t = 9500
    p = 101.0 * (1 + H0 + impact(q, 1e6))  # O_{t+1}, never bar t's prices
    cost = COST * q * p
    cash = CAP - q * p - cost
    eq = cash + q * 101.5
    s = env.state
    assert f(s.position) == approx(q) and f(s.target) == approx(q)
    assert f(s.cash) == approx(cash) and f(s.equity) == approx(eq)
    assert f(s.entry_price) == approx(p) and int(s.entry_bar) == 1 and int(s.bar) == 1
    assert f(s.cum_costs) == approx(cost) and f(s.open_costs) == approx(cost)
    assert int(out.fill_status) == 1 and not bool(out.trade_closed)
    assert f(out.reward) == approx((eq - CAP) / CAP, 1e-4)
    # the barrier is armed from the fill price (not checked on this step)
    assert bool(s.barrier_active) and f(s.barrier_side) == 1.0
    assert f(s.barrier_upper) == approx(p * 1.005) and f(s.barrier_lower) == approx(p * 0.995)
    assert int(s.barrier_expiry) == 1 + 60 and not bool(out.barrier_hit)


def test_urgency_scales_market_impact():
    env = scenario_env(n_envs=3)
    act(env, action(4, 0, 0), action(4, 0, 1), action(4, 0, 2))
    q = 9500.0
    for i, m in enumerate((0.5, 1.0, 2.0)):
        assert float(env.state.entry_price[i]) == approx(101.0 * (1 + H0 + impact(q, 1e6, m)))


def test_limit_buy_fills_at_the_limit_when_the_next_bar_trades_through():
    env = scenario_env(n_envs=2)
    act(env, action(4, 1, 0), action(4, 1, 1))  # patient quotes deeper: P = C·(1 − h/m)
    for i, m in enumerate((0.5, 1.0)):
        limit = 100.0 * (1 - H0 / m)  # 99.8 and 99.9; low of bar 1 is 99.5
        q = 9500.0
        assert float(env.state.position[i]) == approx(q)
        assert float(env.state.entry_price[i]) == approx(limit)  # min(P, O=101): no spread, no impact
        assert float(env.state.cash[i]) == approx(CAP - q * limit * (1 + COST))
    assert env.out.fill_status.tolist() == [1, 1]


def test_limit_buy_misses_when_the_next_low_stays_above_and_retries_next_step():
    rows = [(100, 101, 99, 100), (101, 102, 99.85, 101.5), (101.5, 103, 101, 102), (102, 102.5, 101.5, 102)]
    env = scenario_env(rows)
    out = act(env, action(4, 1, 0))  # P = 99.8 > low 99.85: missed
    assert int(out.fill_status) == 3 and f(env.state.position) == 0.0
    assert f(env.state.cash) == CAP and f(env.state.equity) == CAP and f(out.reward) == 0.0
    assert f(env.state.target) == approx(9500.0)  # the order stays: q* kept
    out = act(env, action(4, 1, 0))  # same level: no re-target, the remainder is retried
    rg1 = (102 - 99.85) / 101.5
    limit = 101.5 * (1 - 0.5 * 10e-4 * (rg1 / MED_RANGE) / 0.5)
    assert int(out.fill_status) == 1
    assert f(env.state.position) == approx(9500.0) and f(env.state.entry_price) == approx(limit)
    assert int(env.state.entry_bar) == 2


def test_limit_buy_gap_through_the_limit_fills_at_the_better_open():
    rows = [(100, 101, 99, 100), (99.0, 99.5, 98.5, 99.2)]
    env = scenario_env(rows)
    act(env, action(4, 1, 0))  # P = 99.8, opens at 99.0 below it
    assert f(env.state.entry_price) == approx(99.0)


def test_limit_sell_fills_at_max_of_limit_and_open_and_closes_the_round_trip():
    env = scenario_env()
    set_position(env, 9500.0, 100.0, level=4)
    out = act(env, action(2, 1, 1))  # to flat: sell limit P = 100·(1 + 1e-3) = 100.1; high 102 > P; open 101
    px = max(100.1, 101.0)
    assert f(env.state.position) == 0.0 and f(env.state.entry_price) == 0.0
    assert f(env.state.cash) == approx(CAP - 9500 * 100 + 9500 * px * (1 - COST))
    assert bool(out.trade_closed) and int(out.trade_side) == 1
    assert f(out.trade_return) == approx((px - 100.0) / 100.0, 1e-5)
    assert f(out.trade_size) == approx(9500.0) and f(out.trade_costs) == approx(COST * 9500 * px)
    assert int(out.trade_entry_bar) == 0 and int(out.trade_exit_bar) == 1
    assert not bool(env.state.barrier_active)  # flat: barrier off, without a hit
    assert not bool(out.barrier_hit)


def test_ioc_is_cut_at_participation_capacity_and_the_remainder_is_retried():
    env = scenario_env(volume=[1e6, 1e4, 1e6])
    out = act(env, action(4, 2, 1))  # capacity K = 0.1·1·10,000 = 1,000 units
    p1 = 101.0 * (1 + H0 + impact(1000.0, 1e4))
    assert int(out.fill_status) == 2
    assert f(env.state.position) == approx(1000.0) and f(env.state.entry_price) == approx(p1)
    assert f(env.state.cash) == approx(CAP - 1000 * p1 * (1 + COST))
    out = act(env, action(4, 2, 1))  # retry 8,500 at bar 2 (K = 100,000)
    rg1 = (102 - 99.5) / 101.5
    h1 = 0.5 * 10e-4 * min(4.0, max(0.25, rg1 / MED_RANGE))
    v1 = 0.94 * VOL + 0.06 * abs(math.log(101.5 / 100.0))
    p2 = 101.5 * (1 + h1 + min(0.05, ETA * v1 * math.sqrt(math.pi / 2) * math.sqrt(8500 / 1e6)))
    assert int(out.fill_status) == 1 and f(env.state.position) == approx(9500.0)
    assert f(env.state.entry_price) == approx((1000 * p1 + 8500 * p2) / 9500)  # adding: size-weighted


def test_aggressive_ioc_doubles_the_capacity():
    env = scenario_env(volume=[1e6, 1e4])
    act(env, action(4, 2, 2))
    assert f(env.state.position) == approx(2000.0)
    assert f(env.state.entry_price) == approx(101.0 * (1 + H0 + impact(2000.0, 1e4, 2.0)))


def test_ioc_reversal_opens_leg_two_only_after_leg_one_filled_completely():
    # K = 12,000: close 9,500 then open 2,500 of the 9,500 short
    env = scenario_env(volume=[1e6, 1.2e5])
    set_position(env, 9500.0, 100.0, level=4)
    out = act(env, action(0, 2, 1))
    p1 = 101.0 * (1 - H0 - impact(9500.0, 1.2e5))
    p2 = 101.0 * (1 - H0 - impact(2500.0, 1.2e5))
    assert int(out.fill_status) == 2 and f(env.state.position) == approx(-2500.0)
    assert bool(out.trade_closed) and f(out.trade_return) == approx((p1 - 100) / 100, 1e-5)
    assert f(env.state.entry_price) == approx(p2) and int(env.state.entry_bar) == 1
    assert f(env.state.open_costs) == approx(COST * 2500 * p2)
    assert f(env.state.barrier_side) == -1.0 and f(env.state.barrier_lower) == approx(p2 * 0.995)
    # K = 5,000: leg 1 cut, no leg 2, no round trip, entry kept
    env = scenario_env(volume=[1e6, 5e4])
    set_position(env, 9500.0, 100.0, level=4)
    out = act(env, action(0, 2, 1))
    assert int(out.fill_status) == 2 and f(env.state.position) == approx(4500.0)
    assert not bool(out.trade_closed) and f(env.state.entry_price) == 100.0


def test_market_reversal_closes_then_opens_with_impact_per_leg():
    env = scenario_env()
    set_position(env, 5000.0, 100.0, level=3)
    s0_cash = f(env.state.cash)
    out = act(env, action(0, 0, 1))  # q* = −9,500: leg 1 sells 5,000, leg 2 sells 9,500
    p1 = 101.0 * (1 - H0 - impact(5000.0, 1e6))
    p2 = 101.0 * (1 - H0 - impact(9500.0, 1e6))
    cash = s0_cash + 5000 * p1 * (1 - COST) + 9500 * p2 * (1 - COST)
    assert int(out.fill_status) == 1
    assert f(env.state.position) == approx(-9500.0) and f(env.state.cash) == approx(cash)
    assert f(env.state.equity) == approx(cash - 9500 * 101.5)
    assert bool(out.trade_closed) and f(out.trade_size) == approx(5000.0)
    assert f(out.trade_costs) == approx(COST * 5000 * p1) and f(out.trade_return) == approx((p1 - 100) / 100, 1e-5)
    assert f(env.state.entry_price) == approx(p2) and f(env.state.cum_costs) == approx(COST * (5000 * p1 + 9500 * p2))


def test_reserve_and_max_position_scale_the_target_and_holding_a_level_never_trades():
    env = scenario_env(reserve=0.2, max_position=2.0)
    act(env, action(3, 0, 1))
    q = 0.5 * 2.0 * 0.8 * CAP / 100.0
    assert f(env.state.position) == approx(q)
    cash, eq = f(env.state.cash), f(env.state.equity)
    for a in (action(3, 0, 1), action(3, 1, 0), action(3, 2, 2)):  # same level, any order type
        out = act(env, a)
        assert int(out.fill_status) == 0 and f(env.state.position) == approx(q) and f(env.state.cash) == cash
    assert f(env.state.equity) != eq  # equity moved with the market, the position did not


def test_adding_averages_the_entry_and_reducing_keeps_it_without_a_round_trip():
    env = scenario_env()
    set_position(env, 4750.0, 100.0, level=3)
    upper = f(env.state.barrier_upper)
    out = act(env, action(4, 0, 1))  # add 4,750
    p = 101.0 * (1 + H0 + impact(4750.0, 1e6))
    assert f(env.state.entry_price) == approx((4750 * 100 + 4750 * p) / 9500)
    assert not bool(out.trade_closed) and f(env.state.barrier_upper) == upper  # not re-armed
    env = scenario_env()
    set_position(env, 9500.0, 100.0, level=4)
    out = act(env, action(3, 0, 1))  # reduce to 4,750
    assert f(env.state.position) == approx(4750.0) and f(env.state.entry_price) == 100.0
    assert not bool(out.trade_closed)


@pytest.mark.parametrize(
    "kelly,count,p,w,lo,k",
    [
        (True, 10, 0.6, 0.02, 0.01, 0.2),  # f = 0.6 − 0.4/2 = 0.4 → ½·0.4
        (True, 9, 0.6, 0.02, 0.01, 1.0),  # not enough trades yet
        (True, 10, 0.6, 0.0, 0.01, 0.1),  # W ≤ 0 < Lo: f = −∞ → floor
        (True, 10, 0.6, 0.02, 0.0, 0.3),  # Lo ≤ 0: f = p
        (True, 10, 0.9, 0.05, 0.01, 0.44),  # f = 0.9 − 0.1/5 = 0.88
        (True, 10, 0.99, 0.5, 0.01, 0.4949),  # f = 0.99 − 0.01·0.01/0.5
        (False, 50, 0.6, 0.02, 0.01, 1.0),  # sizing off
    ],
)
def test_kelly_multiplier_scales_the_target_once_enough_trades(kelly, count, p, w, lo, k):
    env = scenario_env(kelly=kelly, kelly_min_trades=10)
    s = env.state
    s.kelly_count.fill_(count)
    s.kelly_p.fill_(p)
    s.kelly_win.fill_(w)
    s.kelly_loss.fill_(lo)
    act(env, action(4, 0, 1))
    assert f(s.target) == approx(k * 9500.0, 1e-5)


def test_kelly_statistics_update_on_each_round_trip():
    env = scenario_env(n_envs=2, kelly_alpha=0.05)
    set_position(env, 9500.0, 100.0, level=4)
    env.state.entry_price[1] = 102.0  # env 1 closes at a loss
    s = env.state
    s.kelly_p.fill_(0.5)
    s.kelly_win.fill_(0.01)
    s.kelly_loss.fill_(0.02)
    s.kelly_count.fill_(3)
    act(env, action(2, 0, 1), action(2, 0, 1))
    px = 101.0 * (1 - H0 - impact(9500.0, 1e6))
    win, loss = (px - 100) / 100, (px - 102) / 102
    assert float(env.out.trade_return[0]) == approx(win, 1e-5) and float(env.out.trade_return[1]) == approx(loss, 1e-5)
    assert float(s.kelly_p[0]) == approx(0.5 + 0.05 * 0.5) and float(s.kelly_p[1]) == approx(0.5 - 0.05 * 0.5)
    assert float(s.kelly_win[0]) == approx(0.01 + 0.05 * (win - 0.01), 1e-5) and float(s.kelly_win[1]) == approx(0.01)
    assert float(s.kelly_loss[0]) == approx(0.02) and float(s.kelly_loss[1]) == approx(0.02 + 0.05 * (-loss - 0.02), 1e-5)
    assert s.kelly_count.tolist() == [4, 4]


def test_without_volume_there_is_no_impact_and_ioc_is_uncapped():
    env = scenario_env(volume=None)
    assert not env.market.has_volume
    act(env, action(4, 2, 1))
    assert f(env.state.position) == approx(9500.0)
    assert f(env.state.entry_price) == approx(101.0 * (1 + H0))
    assert int(env.out.fill_status) == 1


def test_half_spread_factor_is_clamped_and_taken_as_one_without_a_median_range():
    for med, factor in ((0.001, 4.0), (0.5, 0.25), (0.0, 1.0)):
        env = scenario_env(med_range=med, impact_eta=0.0)
        act(env, action(4, 0, 1))
        assert f(env.state.entry_price) == approx(101.0 * (1 + 0.5 * 10e-4 * factor))


def test_short_round_trip_record_has_side_minus_one_and_the_short_return():
    env = scenario_env()
    act(env, action(0, 0, 1))  # open short 9,500 on bar 1
    p_in = f(env.state.entry_price)
    c_in = f(env.state.open_costs)
    out = act(env, action(2, 0, 1))  # buy back on bar 2
    rg1 = (102 - 99.5) / 101.5
    h1 = 0.5 * 10e-4 * min(4.0, max(0.25, rg1 / MED_RANGE))
    v1 = 0.94 * VOL + 0.06 * abs(math.log(101.5 / 100.0))
    p_out = 101.5 * (1 + h1 + min(0.05, ETA * v1 * math.sqrt(math.pi / 2) * math.sqrt(9500 / 1e6)))
    assert bool(out.trade_closed) and int(out.trade_side) == -1
    assert f(out.trade_return) == approx(-(p_out - p_in) / p_in, 1e-5)
    assert f(out.trade_size) == approx(9500.0)
    assert f(out.trade_costs) == approx(c_in + COST * 9500 * p_out)
    assert (int(out.trade_entry_bar), int(out.trade_exit_bar)) == (1, 2)
    assert f(env.state.open_costs) == 0.0 and f(env.state.position) == 0.0
