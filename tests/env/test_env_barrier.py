"""Triple barrier (ENV_SPEC "One step", item 5): profit, stop, both touched, expiry, arming rules."""

from __future__ import annotations

import pytest

from tests.env.env_helpers import SCENARIO_BARS, act, action, f, scenario_env

OPEN_BARS = SCENARIO_BARS[:2]  # a long opened on bar 1 has its barrier at ≈ 101.16 · (1 ± 0.5 %)


def opened_long(bar2, bar3=(101.2, 101.3, 101.1, 101.2), **params):
    env = scenario_env(OPEN_BARS + [bar2, bar3], **params)
    out = act(env, action(4, 0, 1))
    assert not bool(out.barrier_hit)  # bar 1 spans both levels, but a new barrier is not checked
    return env


def hold(env, level=4):
    eq0, q = f(env.state.equity), f(env.state.position)
    c1 = float(env.market.ohlc[int(env.state.bar[0]), 3])
    out = act(env, action(level, 0, 1))
    c2 = float(env.market.ohlc[int(env.state.bar[0]), 3])
    return out, q * (c2 - c1) / eq0  # base return of a step without trades


@pytest.mark.parametrize(
    "bar2,label,scale",
    [
        ((101.5, 103.0, 101.0, 102.0), 1, 1.5),  # high ≥ upper: profit
        ((101.5, 101.6, 100.0, 100.5), -1, 0.5),  # low ≤ lower: stop
        ((101.5, 103.0, 100.0, 102.0), -1, 0.5),  # both touched: the stop wins
    ],
)
def test_long_barrier_hit_labels_and_scales_the_reward(bar2, label, scale):
    env = opened_long(bar2)
    upper, lower = f(env.state.barrier_upper), f(env.state.barrier_lower)
    assert lower < 101.0 < upper
    out, base = hold(env)
    assert bool(out.barrier_hit) and int(out.barrier_label) == label
    assert f(out.reward) == pytest.approx(base * scale, rel=1e-4)
    assert not bool(env.state.barrier_active)
    assert f(env.state.position) == pytest.approx(9500.0)  # a barrier never closes the position
    assert not bool(out.done)  # end_on_barrier is off


@pytest.mark.parametrize(
    "bar2,label",
    [
        ((101.5, 103.0, 101.0, 102.0), -1),  # short: high ≥ upper is the stop
        ((100.0, 100.2, 99.0, 99.5), 1),  # short: low ≤ lower is the profit
        ((100.0, 103.0, 99.0, 99.5), -1),  # both: stop
    ],
)
def test_short_barrier_hit_labels(bar2, label):
    env = scenario_env(OPEN_BARS + [bar2])
    act(env, action(0, 0, 1))
    assert f(env.state.barrier_side) == -1.0
    entry = f(env.state.entry_price)
    assert f(env.state.barrier_lower) == pytest.approx(entry * 0.995) and f(env.state.barrier_upper) == pytest.approx(entry * 1.005)
    out, _ = hold(env, level=0)
    assert bool(out.barrier_hit) and int(out.barrier_label) == label


def test_barrier_expires_max_holding_bars_after_the_entry_bar_with_label_zero():
    inside = (101.2, 101.3, 101.1, 101.2)
    env = scenario_env(OPEN_BARS + [inside, inside, inside], max_holding=2)
    act(env, action(4, 0, 1))  # entry bar 1, expiry bar 3
    assert int(env.state.barrier_expiry) == 3
    out, _ = hold(env)  # bar 2 < 3
    assert not bool(out.barrier_hit)
    out, base = hold(env)  # bar 3 ≥ 3: time
    assert bool(out.barrier_hit) and int(out.barrier_label) == 0
    assert f(out.reward) == pytest.approx(base, rel=1e-4)  # no scale on a time hit


def test_barrier_hit_ends_the_episode_when_end_on_barrier():
    env = opened_long((101.5, 103.0, 101.0, 102.0), end_on_barrier=True)
    out, _ = hold(env)
    assert bool(out.done) and not bool(out.truncated) and bool(env.state.finished)


def test_going_flat_deactivates_the_barrier_without_a_hit():
    env = opened_long((101.5, 103.0, 100.0, 102.0))
    out = act(env, action(2, 0, 1))
    assert not bool(out.barrier_hit) and not bool(env.state.barrier_active) and bool(out.trade_closed)


def test_no_barrier_check_once_hit_until_a_new_position_is_opened():
    env = opened_long((101.5, 103.0, 101.0, 102.0), bar3=(102.0, 103.0, 100.0, 102.5))
    hold(env)
    out, _ = hold(env)  # bar 3 touches both old levels again
    assert not bool(out.barrier_hit)
