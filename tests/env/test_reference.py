"""Hand-worked examples of docs/ENV_SPEC.md against the float64 oracle (foxhunt.env.reference).

Every expected value below is written out from the spec's formulas on a few hand-made bars; no
expectation is computed by the oracle itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.env.reference import ReferenceEnv, ReferenceMarket, category, decode_factored
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set

CAP = 1e6
BPS = 1e-4
SQ = math.sqrt(math.pi / 2)


def act(e: int, o: int = 0, u: int = 1) -> int:
    """Factored action from (exposure level, order type, urgency)."""
    return 9 * e + 3 * o + u


def market(bars: list[tuple[float, float, float, float]], volume: float | list[float] | None = 1e6,
           med_absret: float = 0.01, med_range: float = 0.02) -> ReferenceMarket:
    """Bars given as (open, high, low, close); constant or per-bar volume (None: no volume)."""
    o, h, lo, c = (np.array(x, dtype=np.float64) for x in zip(*bars))
    vol = None if volume is None else np.broadcast_to(np.asarray(volume, dtype=np.float64), o.shape).copy()
    return ReferenceMarket.from_ohlcv(o, h, lo, c, vol, med_absret=med_absret, med_range=med_range)


FLAT_BARS = [(100.0, 101.0, 99.0, 100.0)] * 4  # rg = 0.02 = med_range → half spread h = ½·spread


def env(bars=FLAT_BARS, volume=1e6, med_absret=0.01, med_range=0.02, **params) -> ReferenceEnv:
    """An oracle on hand-made bars, reset at bar 0. Defaults: no costs, spread or impact."""
    base = {"cost_bps": 0.0, "spread_bps": 0.0, "impact_eta": 0.0, "risk_weight": 0.0, "diversity_penalty": 0.0}
    e = ReferenceEnv(market(bars, volume, med_absret, med_range), {**base, **params})
    e.reset(0)
    return e


# ---------------------------------------------------------------------------------------------- actions
def test_factored_actions_decode_as_nine_e_plus_three_o_plus_u():
    assert decode_factored(0) == (0, 0, 0)
    assert decode_factored(44) == (4, 2, 2)
    assert decode_factored(9 * 3 + 3 * 1 + 2) == (3, 1, 2)
    assert [category(e) for e in range(5)] == [0, 0, 1, 2, 2]
    with pytest.raises(ValueError):
        decode_factored(45)


def test_exposure_mode_routes_order_type_by_range_and_urgency_by_volatility():
    bars = [(100, 100.5, 99.5, 100), (100, 102, 98, 100), (100, 103, 97, 100), (100, 101, 99, 100)] * 2
    e = env(bars, med_range=0.02, med_absret=0.01, action_mode="exposure")
    assert e.decode(4) == (4, 1, 1)  # rg 0.01 < med → limit; v = med → normal
    e.bar = 1
    assert e.decode(4)[1] == 2  # rg 0.04 = 2·med → IoC (not above 2·med)
    e.bar = 2
    assert e.decode(4)[1] == 0  # rg 0.06 > 2·med → market
    e.vol_ema = 0.016
    assert e.decode(0)[2] == 2  # v > 1.5·med → aggressive
    e.vol_ema = 0.004
    assert e.decode(0)[2] == 0  # v < 0.5·med → patient


# ---------------------------------------------------------------------------------------------- market
def test_market_buy_fills_next_open_with_half_spread_impact_and_cost():
    bars = [(100, 101, 99, 100), (100.5, 102, 100, 101), (101, 102, 100, 101.5)]
    e = env(bars, spread_bps=2.0, cost_bps=1.0, impact_eta=0.1)
    reward, done, info = e.step(act(4, 0, 1))
    q = 0.95 * CAP / 100.0  # x=1, k=1, (1 - reserve), E / C_0
    impact = 0.1 * 1.0 * 0.01 * SQ * math.sqrt(q / 1e6)
    price = 100.5 * (1 + 1e-4 + impact)  # h = ½·2 bps·clamp(0.02/0.02) = 1e-4
    cost = 1.0 * BPS * q * price
    assert info["fill_status"] == 1 and info["next_bar"] == 1 and not done
    assert e.position == pytest.approx(q, rel=1e-15)
    assert e.cash == pytest.approx(CAP - q * price - cost, rel=1e-15)
    assert e.equity == pytest.approx(e.cash + q * 101.0, rel=1e-15)
    assert reward == pytest.approx((e.equity - CAP) / CAP, rel=1e-12)
    assert e.entry_price == pytest.approx(price) and e.entry_bar == 1 and e.cum_costs == pytest.approx(cost)
    assert e.vol_ema == pytest.approx(0.94 * 0.01 + 0.06 * math.log(101 / 100.5 * 100.5 / 100))


def test_market_sell_pays_spread_downwards_and_impact_is_capped_and_spread_clamped():
    bars = [(100, 110, 90, 100), (100, 101, 99, 100), (100, 101, 99, 100)]  # rg_0 = 0.2 → clamp 4
    e = env(bars, volume=10.0, spread_bps=1.0, impact_eta=0.5, max_impact=0.001)
    e.step(act(0, 0, 2))
    q = -0.95 * CAP / 100.0
    price = 100.0 * (1 - (0.5 * BPS * 4) - 0.001)  # impact η·2·σ·sqrt(9500/10) ≫ cap
    assert e.position == pytest.approx(q) and e.entry_price == pytest.approx(price)
    assert e.cash == pytest.approx(CAP - q * price)


def test_without_volume_there_is_no_impact_and_ioc_is_uncapped():
    e = env(volume=None, spread_bps=0.0, impact_eta=5.0)
    _, _, info = e.step(act(4, 2, 0))
    assert info["fill_status"] == 1 and e.entry_price == 100.0 and e.position == pytest.approx(9500.0)


# ---------------------------------------------------------------------------------------------- limit
def test_limit_buy_fills_at_the_limit_when_the_next_low_trades_through():
    bars = [(100, 101, 99, 100), (100.05, 100.5, 99.5, 100), (100, 101, 99, 100)]
    e = env(bars, spread_bps=4.0, cost_bps=2.0, impact_eta=1.0)
    _, _, info = e.step(act(4, 1, 0))  # patient: P = C_0·(1 − h/0.5), h = 2 bps
    limit = 100.0 * (1 - 2e-4 / 0.5)
    q = 9500.0
    assert info["fill_status"] == 1 and e.entry_price == pytest.approx(limit)  # O_1 > P: price P, no impact
    assert e.cash == pytest.approx(CAP - q * limit - 2 * BPS * q * limit)


def test_limit_buy_gap_below_the_limit_fills_at_the_open():
    bars = [(100, 101, 99, 100), (99.0, 99.5, 98.5, 99.2), (100, 101, 99, 100)]
    e = env(bars, spread_bps=4.0)
    _, _, info = e.step(act(4, 1, 1))
    assert info["fill_status"] == 1 and e.entry_price == 99.0


def test_limit_order_misses_when_the_next_bar_does_not_trade_through_and_is_retried():
    # Sell limit: P = C_0·(1 + h/2) with aggressive urgency; bar 1 high stays below it (gap down).
    bars = [(100, 101, 99, 100), (99.0, 99.9, 97.91, 99.5), (99.5, 101, 99, 100), (100, 101, 99, 100)]  # rg_1 = 0.02
    e = env(bars, spread_bps=4.0)
    r, _, info = e.step(act(0, 1, 2))
    assert info["fill_status"] == 3 and e.position == 0.0 and e.cash == CAP and r == 0.0
    target = e.target
    _, _, info = e.step(act(0, 1, 2))  # same level: q* unchanged, the order is retried
    assert e.target == target and info["fill_status"] == 1
    assert e.entry_price == pytest.approx(max(99.5 * (1 + 2e-4 / 2), 99.5))
    _, _, info = e.step(act(0, 1, 2))  # holding a level never trades
    assert info["fill_status"] == 0


def test_limit_is_strict_a_low_exactly_at_the_limit_does_not_fill():
    bars = [(100, 101, 99, 100), (100, 100.5, 100.0, 100.2), (100, 101, 99, 100)]
    e = env(bars, spread_bps=0.0)
    _, _, info = e.step(act(4, 1, 1))  # P = 100 exactly, L_1 = 100
    assert info["fill_status"] == 3


# ---------------------------------------------------------------------------------------------- IoC
def test_ioc_partial_fill_is_capped_by_participation_and_the_remainder_retried():
    bars = [(100, 101, 99, 100), (100, 101, 99, 100), (101, 102, 100, 101), (101, 102, 100, 101)]
    e = env(bars, volume=[1e5, 4e4, 6e4, 1e5], spread_bps=2.0, impact_eta=0.1, participation=0.1)
    _, _, info = e.step(act(4, 2, 1))  # K = 0.1·1·4e4 = 4000 < 9500
    p1 = 100.0 * (1 + 1e-4 + 0.1 * 0.01 * SQ * math.sqrt(4000 / 4e4))
    assert info["fill_status"] == 2 and e.position == pytest.approx(4000.0) and e.entry_price == pytest.approx(p1)
    assert e.barrier_active and e.barrier_upper == pytest.approx(p1 * 1.005)
    v = e.vol_ema
    _, _, info = e.step(act(4, 2, 1))  # remainder 5500 ≤ K = 6000: fills in full
    p2 = 101.0 * (1 + 1e-4 + 0.1 * v * SQ * math.sqrt(5500 / 6e4))
    assert info["fill_status"] == 1 and e.position == pytest.approx(9500.0)
    assert e.entry_price == pytest.approx((4000 * p1 + 5500 * p2) / 9500)  # size-weighted average
    assert e.barrier_upper == pytest.approx(p1 * 1.005)  # adding keeps the barrier


def test_ioc_reversal_fills_the_opening_leg_only_after_the_closing_leg_completes():
    bars = [(100, 101, 99, 100)] * 5
    e = env(bars, volume=[1e6, 1e6, 5e4, 1.2e5, 1e6], participation=0.1)
    e.step(act(4, 0, 1))  # long 9500
    q_star = -0.95 * e.equity / 100.0
    _, _, info = e.step(act(0, 2, 1))  # K = 5000 < 9500: leg 1 partial, no leg 2, no trade
    assert info["fill_status"] == 2 and e.position == pytest.approx(4500.0) and not info["trade_closed"]
    _, _, info = e.step(act(0, 2, 1))  # reversal again: leg 1 4500, leg 2 min(9500, 12000 − 4500)
    assert info["fill_status"] == 2 and info["trade_closed"] and info["trade_size"] == pytest.approx(4500.0)
    assert e.position == pytest.approx(-7500.0) and e.target == pytest.approx(q_star)
    assert e.entry_bar == 3 and e.barrier_side == -1


# ---------------------------------------------------------------------------------------------- reversal
def test_market_reversal_is_a_close_leg_then_an_open_leg_each_with_its_own_impact():
    bars = [(100, 101, 99, 100), (100, 101, 99, 100), (102, 103, 101, 102), (102, 103, 101, 102)]
    e = env(bars, volume=1e5, spread_bps=2.0, cost_bps=1.0, impact_eta=0.2)
    e.step(act(4, 0, 1))
    entry, cash, q, eq, v = e.entry_price, e.cash, e.position, e.equity, e.vol_ema
    q_star = -0.95 * eq / 100.0
    _, _, info = e.step(act(0, 0, 2))  # aggressive, m = 2
    imp = lambda size: 0.2 * 2.0 * v * SQ * math.sqrt(size / 1e5)  # noqa: E731
    p1, p2 = 102 * (1 - 1e-4 - imp(q)), 102 * (1 - 1e-4 - imp(-q_star))
    assert p1 != p2
    expected_cash = cash + q * p1 - BPS * q * p1 + (-q_star) * p2 - BPS * (-q_star) * p2
    assert e.cash == pytest.approx(expected_cash, rel=1e-14) and e.position == pytest.approx(q_star)
    assert info["trade_closed"] and info["trade_side"] == 1 and info["trade_size"] == pytest.approx(q)
    assert info["trade_return"] == pytest.approx((p1 - entry) / entry)
    assert info["trade_costs"] == pytest.approx(BPS * q * entry + BPS * q * p1)
    assert (info["trade_entry_bar"], info["trade_exit_bar"]) == (1, 2)
    assert e.entry_price == pytest.approx(p2) and e.entry_bar == 2
    assert e.open_trade_costs == pytest.approx(BPS * -q_star * p2)
    assert e.barrier_side == -1 and e.barrier_lower == pytest.approx(p2 * 0.995)


# ---------------------------------------------------------------------------------------------- sizing
def test_reserve_and_max_position_scale_the_target():
    e = env(reserve=0.25, max_position=2.0)
    e.step(act(1, 0, 1))  # −½ level
    assert e.position == pytest.approx(-0.5 * 2.0 * 0.75 * CAP / 100.0)


def test_kelly_multiplier_follows_the_win_rate_and_payoff_ratio():
    e = env(kelly=True, kelly_min_trades=3, kelly_fraction=0.5, kelly_min_mult=0.1)
    e.kelly_count, e.kelly_win_rate, e.kelly_mean_win, e.kelly_mean_loss = 2, 0.9, 0.02, 0.01
    assert e.kelly_multiplier() == 1.0  # fewer than kelly_min_trades
    e.kelly_count = 3
    assert e.kelly_multiplier() == pytest.approx(0.5 * (0.9 - 0.1 / 2.0))
    e.kelly_mean_loss = 0.0
    assert e.kelly_multiplier() == pytest.approx(0.45)  # Lo ≤ 0 → f = p
    e.kelly_mean_win, e.kelly_mean_loss = 0.0, 0.01
    assert e.kelly_multiplier() == 0.1  # W ≤ 0 < Lo → f = −∞ → floor
    e.kelly_win_rate, e.kelly_mean_win = 1.0, 1.0
    assert e.kelly_multiplier() == 0.5  # capped by kelly_fraction·1


def test_kelly_statistics_update_on_a_round_trip_and_size_the_next_position():
    bars = [(100, 101, 99, 100), (100, 101, 99, 100), (101, 102, 100, 101), (101, 102, 100, 101)]
    e = env(bars, kelly=True, kelly_min_trades=1, kelly_alpha=0.05)
    e.step(act(4))
    e.step(act(2))  # close at 101: win of +1 %
    assert e.kelly_count == 1 and e.kelly_win_rate == pytest.approx(0.525)
    assert e.kelly_mean_win == pytest.approx(0.05 * 0.01) and e.kelly_mean_loss == 0.0
    eq = e.equity
    e.step(act(4))
    assert e.target == pytest.approx(0.5 * 0.525 * 0.95 * eq / 101.0)


# ---------------------------------------------------------------------------------------------- barriers
def _barrier_env(next_bar: tuple[float, float, float, float], side: int = 1, **params) -> ReferenceEnv:
    """Open at O_1 = 100 (no costs) on bar 0 → 1; bar 1 is wide but not checked; bar 2 is ``next_bar``."""
    bars = [(100, 101, 99, 100), (100, 120, 80, 100), next_bar, (100, 101, 99, 100)]
    e = env(bars, profit_bps=100.0, stop_bps=50.0, **params)
    _, _, info = e.step(act(4 if side > 0 else 0))
    assert not info["barrier_hit"] and e.barrier_active  # a barrier is not checked on the step it is set
    return e


@pytest.mark.parametrize(
    "side, bar, label",
    [
        (1, (100, 101.0, 99.6, 100), 1),  # long: H ≥ 101 → profit
        (1, (100, 100.5, 99.5, 100), -1),  # long: L ≤ 99.5 → stop
        (1, (100, 101.5, 99.0, 100), -1),  # long: both touched → stop wins
        (-1, (100, 100.4, 99.0, 100), 1),  # short: L ≤ 99 → profit
        (-1, (100, 100.5, 99.5, 100), -1),  # short: H ≥ 100.5 → stop
        (-1, (100, 100.6, 98.0, 100), -1),  # short: both → stop wins
    ],
)
def test_barrier_profit_stop_and_both_touched_stop_wins(side, bar, label):
    e = _barrier_env(bar, side)
    base_eq = e.equity
    r, done, info = e.step(act(4 if side > 0 else 0))
    assert info["barrier_hit"] and info["barrier_label"] == label and not done
    assert not e.barrier_active and e.position != 0.0  # a barrier never closes the position
    scale = 0.5 if label == 1 else -0.5
    assert r == pytest.approx((e.equity - base_eq) / base_eq * (1 + scale) if e.equity != base_eq else 0.0)


def test_barrier_expiry_labels_zero_and_end_on_barrier_ends_the_episode():
    e = _barrier_env((100, 100.2, 99.8, 100), max_holding=1, end_on_barrier=True)
    _, done, info = e.step(act(4))  # t+1 = 2 ≥ entry bar 1 + 1
    assert info["barrier_hit"] and info["barrier_label"] == 0 and done


def test_closing_to_flat_deactivates_the_barrier_without_a_hit():
    e = _barrier_env((100, 105, 95, 100))
    _, _, info = e.step(act(2))
    assert not info["barrier_hit"] and not e.barrier_active and info["trade_closed"]


# ---------------------------------------------------------------------------------------------- trades
def test_round_trip_records_return_size_costs_and_bars_and_partial_reductions_are_not_trades():
    bars = [(100, 101, 99, 100), (100, 101, 99, 100), (104, 105, 103, 104), (98, 99, 97, 98), (98, 99, 97, 98)]
    e = env(bars, cost_bps=1.0)
    e.step(act(0))  # short 9500 at 100
    _, _, info = e.step(act(1))  # reduce to −½: not a trade
    assert not info["trade_closed"] and e.entry_price == 100.0
    q = e.position
    _, _, info = e.step(act(2))  # close at 98
    assert info["trade_closed"] and info["trade_side"] == -1 and info["trade_size"] == pytest.approx(-q)
    assert info["trade_return"] == pytest.approx(-(98 - 100) / 100)
    assert info["trade_costs"] == pytest.approx(e.cum_costs) and e.open_trade_costs == 0.0
    assert (info["trade_entry_bar"], info["trade_exit_bar"]) == (1, 3) and e.position == 0.0


# ---------------------------------------------------------------------------------------------- rewards
def test_dsr_reward_follows_the_differential_sharpe_recursion():
    bars = [(100, 101, 99, 100), (100, 101, 99, 101), (101, 102, 100, 99), (99, 100, 98, 100), (100, 101, 99, 100)]
    e = env(bars, reward_mode="dsr", dsr_eta=0.1, reserve=0.0, profit_bps=5000.0, stop_bps=5000.0)
    a = b = 0.0
    for _ in range(4):
        eq = e.equity
        r, _, _ = e.step(act(4))
        ret = (e.equity - eq) / eq
        da, db = ret - a, ret * ret - b
        expected = (b * da - 0.5 * a * db) / (b - a * a) ** 1.5 if b - a * a > 1e-12 else 0.0
        assert r == pytest.approx(max(min(expected, 10.0), -10.0), rel=1e-12, abs=1e-15)
        a, b = a + 0.1 * da, b + 0.1 * db
        assert (e.dsr_a, e.dsr_b) == pytest.approx((a, b), rel=1e-14)
    assert a != 0.0 and r != 0.0


def test_pnl_mode_divides_by_capital_and_reward_scale_multiplies():
    bars = [(100, 101, 99, 100), (100, 101, 99, 110), (110, 111, 109, 121), (121, 122, 120, 121)]
    e = env(bars, reward_mode="pnl", reward_scale=3.0, reserve=0.0, profit_bps=5000.0)
    e.step(act(4))
    eq = e.equity
    r, _, _ = e.step(act(4))
    assert r == pytest.approx(3.0 * (e.equity - eq) / CAP) and eq != CAP


def test_risk_penalty_applies_above_the_exposure_threshold():
    e = env(max_position=2.0, reserve=0.0, risk_weight=0.01, risk_threshold=0.8)
    r, _, info = e.step(act(4))
    assert info["next_portfolio"][0] == pytest.approx(2.0)
    assert r == pytest.approx(-0.01 * (2.0 - 0.8))  # flat prices: base return 0


def test_diversity_penalty_applies_once_the_ring_is_full_and_entropy_is_low():
    bars = [(100, 101, 99, 100)] * 205
    e = env(bars, diversity_penalty=1e-3, episode_length=204)
    rewards = [e.step(act(2))[0] for _ in range(100)]
    assert rewards[:99] == [0.0] * 99 and rewards[99] == -1e-3  # entropy 0 < 1 bit once full
    for i in range(50):  # 50 longs evict 50 flats → entropy exactly 1 bit: not below the threshold
        r = e.step(act(3 + i % 2))[0]
    assert e.diversity_counts == [0, 50, 50] and r != pytest.approx(-1e-3, rel=1e-3)
    e.reset(0)
    e.step(act(0))  # persistent across resets: 1 short → counts (1, 49, 50), entropy > 1
    assert e.diversity_counts == [1, 49, 50] and len(e.diversity_ring) == 100


@pytest.mark.parametrize("bonus, expected", [(1.0, 1e-4), (-1.0, 0.0), (5e-5, 5e-5)])
def test_curiosity_bonus_is_clamped_to_zero_and_curiosity_max(bonus, expected):
    e = env(curiosity_weight=2.0)
    r, _, _ = e.step(act(2), curiosity=bonus)
    assert r == pytest.approx(2.0 * expected)


def test_bust_ends_the_episode_when_equity_falls_to_the_bust_fraction():
    bars = [(100, 101, 99, 100), (100, 101, 99, 100), (100, 101, 60, 60), (60, 61, 59, 60)]
    e = env(bars, bust_fraction=0.7, reserve=0.0)
    assert not e.step(act(4))[1]
    _, done, _ = e.step(act(4))
    assert done and e.equity == pytest.approx(0.6 * CAP) and e.bar == 2  # no auto-reset


def test_episode_ends_after_episode_length_steps():
    e = env(episode_length=2)
    assert not e.step(act(2))[1]
    assert e.step(act(2))[1] and e.step_in_episode == 2


def test_reset_flags_reset_portfolio_dsr_and_volatility_separately():
    bars = [(100, 101, 99, 100), (100, 101, 99, 103), (103, 104, 102, 103)]
    e = env(bars, reward_mode="dsr", episode_length=1)  # a valid length for 3 bars: bar 1 is a valid start
    e.step(act(4))
    v, a = e.vol_ema, e.dsr_a
    e.apply_reset_flags(1)
    assert e.position == 0.0 and e.cash == CAP and e.bar == 1 and e.step_in_episode == 0
    assert (e.vol_ema, e.dsr_a) == (v, a)
    e.apply_reset_flags(2 | 4)
    assert (e.dsr_a, e.dsr_b, e.vol_ema) == (0.0, 0.0, 0.01)


def test_a_portfolio_reset_too_late_for_a_full_episode_wraps_back_into_the_start_range():
    e = env(FLAT_BARS, episode_length=2)  # 4 bars: starts 0, 1 (S = 2); a 2-step episode from bar 2 reads bar 4
    e.bar = 1
    e.apply_reset_flags(1)
    assert e.bar == e.episode_start == 1  # fits: kept
    e.bar = 2
    e.apply_reset_flags(1)
    assert e.bar == e.episode_start == 0 and e.step_in_episode == 0  # 0 + (2 − 0) mod 2
    e.bar = 3
    e.apply_reset_flags(1)
    assert e.bar == e.episode_start == 1


def test_portfolio_features_are_exposure_unrealised_return_and_bars_in_position():
    bars = [(100, 101, 99, 100), (100, 101, 99, 100), (100, 101, 99, 95), (95, 96, 94, 95)]
    e = env(bars, max_holding=4)
    e.step(act(0))
    e.step(act(0))
    exp, unreal, held = e.portfolio_features()
    assert exp == pytest.approx(-9500 * 95 / e.equity) and unreal == pytest.approx(0.05) and held == 0.25


def test_invalid_parameters_are_rejected_naming_the_parameter():
    with pytest.raises(ValueError, match="stop_bps"):
        ReferenceEnv(market(FLAT_BARS), {"stop_bps": 10_000})
    with pytest.raises(ValueError, match="reward_mode"):
        ReferenceEnv(market(FLAT_BARS), {"reward_mode": "sharpe"})
    with pytest.raises(ValueError, match="unknown"):
        ReferenceEnv(market(FLAT_BARS), {"nope": 1})


# ---------------------------------------------------------------------------------------------- invariant
@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_cash_plus_position_times_close_equals_equity_over_random_actions(mode):
    rng = np.random.default_rng(7)
    n = 600
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = np.r_[100.0, close[:-1]] * np.exp(rng.normal(0, 0.003, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.005, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.005, n)))
    m = ReferenceMarket.from_ohlcv(open_, high, low, close, rng.lognormal(10, 0.5, n))
    e = ReferenceEnv(m, {"action_mode": mode, "episode_length": 100, "max_position": 3.0, "kelly": True,
                         "kelly_min_trades": 2, "cost_bps": 5.0, "spread_bps": 5.0})
    e.reset(0)
    fills = set()
    for _ in range(n - 1):
        if e.step_in_episode == 100:
            e.reset(e.bar)
        _, _, info = e.step(int(rng.integers(45 if mode == "factored" else 5)))
        fills.add(info["fill_status"])
        assert e.cash + e.position * m.close[e.bar] == pytest.approx(e.equity, rel=1e-12)
        assert e.cum_costs >= e.open_trade_costs >= 0.0
    assert fills == {0, 1, 2, 3}


def test_reference_market_copies_the_float32_device_values_medians_and_fold_bounds():
    md = MarketData(random_feature_set(500, 3, seed=1))
    md.set_fold(FoldRange(0, 20, 300, 320, 480))
    rm = ReferenceMarket.from_market(md)
    assert rm.close.dtype == np.float64 and np.array_equal(rm.close, md.ohlc[:, 3].double().numpy())
    assert np.array_equal(rm.low, md.ohlc[:, 2].double().numpy())
    assert np.array_equal(rm.bar_range, md.bar_range.double().numpy())
    assert np.array_equal(rm.log_return, md.log_return.double().numpy())
    assert rm.med_range == float(md.median_range) and rm.med_absret == float(md.median_abs_return)
    assert (rm.train_start, rm.train_end, rm.val_start, rm.val_end) == (20, 300, 320, 480) and rm.has_volume
