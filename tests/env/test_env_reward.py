"""Reward terms (ENV_SPEC "One step", items 6–7): DSR, pnl mode, risk, diversity, curiosity, scale, v."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from foxhunt.env import EnvParams, VecTradingEnv
from tests.env.env_helpers import VOL, act, action, f, random_market, scenario_env, set_position

FLAT = action(2, 0, 1)
HOLD_LONG = action(4, 0, 1)


def long_env(**params):
    """9,500 units long at 100 on bar 0 (E = 1e6); bar 1 closes at 101.5: R = 9,500·1.5/1e6."""
    env = scenario_env(**params)
    set_position(env, 9500.0, 100.0, level=4)
    env.state.barrier_active.fill_(False)  # bar 1 would touch its stop: keep the barrier out of these tests
    return env


R_LONG = 9500 * 1.5 / 1e6


@pytest.mark.parametrize("a,b", [(1e-3, 2e-5), (-2e-3, 1e-4), (0.0, 1e-2)])
def test_dsr_reward_follows_the_formula_and_updates_the_moments(a, b):
    env = long_env(reward_mode="dsr", dsr_eta=0.01, dsr_clip=1e6)
    env.state.dsr_a.fill_(a)
    env.state.dsr_b.fill_(b)
    out = act(env, HOLD_LONG)
    r = R_LONG
    d = (b * (r - a) - 0.5 * a * (r * r - b)) / (b - a * a) ** 1.5
    assert f(out.reward) == pytest.approx(d, rel=1e-4)
    assert f(env.state.dsr_a) == pytest.approx(a + 0.01 * (r - a), rel=1e-5)
    assert f(env.state.dsr_b) == pytest.approx(b + 0.01 * (r * r - b), rel=1e-5)


def test_dsr_is_zero_without_variance_and_clamped_to_dsr_clip():
    env = long_env(reward_mode="dsr", dsr_eta=0.5)
    out = act(env, HOLD_LONG)  # A = B = 0: B − A² ≤ 1e-12
    assert f(out.reward) == 0.0
    assert f(env.state.dsr_a) == pytest.approx(0.5 * R_LONG, rel=1e-5)
    env = long_env(reward_mode="dsr", dsr_clip=10.0)
    env.state.dsr_b.fill_(1e-10)  # D = R / sqrt(B) ≈ 1,425 → 10
    assert f(act(env, HOLD_LONG).reward) == pytest.approx(10.0)
    env = long_env(reward_mode="dsr", dsr_clip=10.0)
    env.state.dsr_a.fill_(0.0)
    env.state.dsr_b.fill_(1e-13)  # below the 1e-12 floor: 0, not huge
    assert f(act(env, HOLD_LONG).reward) == 0.0


def test_dsr_moments_do_not_move_in_return_mode():
    env = long_env()
    act(env, HOLD_LONG)
    assert f(env.state.dsr_a) == 0.0 and f(env.state.dsr_b) == 0.0


def test_pnl_mode_divides_by_initial_capital_and_return_mode_by_current_equity():
    env = long_env(reward_mode="pnl")
    env.state.equity.fill_(5e5)  # E ≠ capital: pnl mode must not use it
    env.state.cash.sub_(5e5)
    assert f(act(env, HOLD_LONG).reward) == pytest.approx(R_LONG, rel=1e-5)
    env = long_env()
    env.state.equity.fill_(5e5)
    env.state.cash.sub_(5e5)
    assert f(act(env, HOLD_LONG).reward) == pytest.approx(9500 * 1.5 / 5e5, rel=1e-5)


def test_risk_penalty_applies_to_exposure_above_the_threshold():
    env = long_env(n_envs=2, per_env={"risk_weight": [0.0, 0.5]}, risk_threshold=0.8)
    out = act(env, HOLD_LONG, HOLD_LONG)
    eq1 = float(env.state.equity[0])
    expo = 9500 * 101.5 / eq1
    assert expo > 0.8
    assert float(out.reward[0] - out.reward[1]) == pytest.approx(0.5 * (expo - 0.8), rel=1e-5)
    env = long_env(n_envs=2, per_env={"risk_weight": [0.0, 0.5]}, risk_threshold=1.0)
    out = act(env, HOLD_LONG, HOLD_LONG)
    assert float(out.reward[0]) == float(out.reward[1])  # exposure ≈ 0.96 < 1: no penalty


def test_a_busting_step_measures_the_risk_penalty_against_the_bust_level():
    # 9,500 units short at 100 (E = 1e6) through a bar that triples the price: E' < 0, the episode ends.
    # Exposure is |q·C'| over E' floored at the bust level (0.1·capital), not at 1e-6·capital, so the
    # penalty stays the size of an exposure (28.5 here) instead of ~1e9.
    rows = [(100.0, 101.0, 99.0, 100.0), (101.0, 310.0, 100.0, 300.0)]
    env = scenario_env(rows, n_envs=2, per_env={"risk_weight": [0.0, 0.5]}, risk_threshold=0.8)
    set_position(env, -9500.0, 100.0, level=0)
    env.state.barrier_active.fill_(False)
    hold_short = action(0, 0, 1)
    out = act(env, hold_short, hold_short)
    assert float(env.state.equity[0]) < 0
    assert bool(out.done[0]) and bool(out.done[1])
    expo = 9500 * 300.0 / (0.1 * 1e6)
    assert float(out.reward[0] - out.reward[1]) == pytest.approx(0.5 * (expo - 0.8), rel=1e-5)


def test_diversity_penalty_when_the_full_ring_has_low_entropy():
    env = scenario_env(n_envs=4, diversity_penalty=1e-3, diversity_threshold=1.0)
    s = env.state
    s.ring.fill_(1)
    counts = torch.tensor([[0, 99, 0], [33, 34, 32], [0, 98, 0], [0, 100, 0]], dtype=torch.float32)
    s.ring_counts.copy_(counts)
    s.ring_fill.copy_(torch.tensor([99, 99, 98, 100]))
    s.ring_head.copy_(torch.tensor([99, 99, 98, 0]))
    out = act(env, FLAT, FLAT, FLAT, action(4, 1, 0))
    # env 0: ring becomes full of flats (H = 0) → penalty; env 1: H ≈ log2 3 → none; env 2: not full
    assert out.reward[:3].tolist() == pytest.approx([-1e-3, 0.0, 0.0], abs=1e-9)
    # env 3: full; the long evicts the oldest flat: counts (0, 99, 1), H ≈ 0.08 < 1 → penalty
    assert s.ring_counts[3].tolist() == [0.0, 99.0, 1.0] and int(s.ring_head[3]) == 1 and int(s.ring[3, 0]) == 2
    assert s.ring_fill.tolist() == [100, 100, 99, 100]
    base3 = (float(s.equity[3]) - 1e6) / 1e6
    assert float(out.reward[3]) == pytest.approx(base3 - 1e-3, abs=1e-7)


def test_an_entropy_of_exactly_one_bit_is_not_below_a_one_bit_threshold():
    env = scenario_env(n_envs=1, diversity_penalty=1e-3, diversity_threshold=1.0)
    s = env.state
    s.ring_counts.copy_(torch.tensor([[0.0, 49.0, 50.0]]))
    s.ring_fill.fill_(99)
    s.ring_head.fill_(99)
    out = act(env, FLAT)  # counts (0, 50, 50): H = 1 exactly
    assert f(out.reward) == 0.0


def test_ring_counts_track_the_last_100_categories_and_the_penalty_matches_their_entropy():
    m = random_market(600, seed=3)
    n = 6
    params = EnvParams(episode_length=300, diversity_penalty=1e-3, diversity_threshold=1.2)
    env = VecTradingEnv(m, 2 * n, params, per_env={"diversity_penalty": [1e-3] * n + [0.0] * n}, auto_reset=False)
    env.reset([20] * (2 * n))
    g = np.random.default_rng(0)
    history: list[np.ndarray] = []
    bias = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [1 / 3] * 3, [0.45, 0.1, 0.45], [0.05, 0.9, 0.05], [0.3, 0.3, 0.4]])
    for _ in range(160):
        cats = np.array([g.choice(3, p=bias[i]) for i in range(n)])
        level = np.where(cats == 0, g.integers(0, 2, n), np.where(cats == 1, 2, g.integers(3, 5, n)))
        a = torch.as_tensor(np.tile(level * 9 + g.integers(0, 9, n), 2))
        out = env.step(a)
        history.append(cats)
        h = np.stack(history[-100:])
        if len(history) >= 100:
            cnt = np.stack([(h == c).sum(0) for c in range(3)], 1)
            assert np.array_equal(env.state.ring_counts[:n].numpy(), cnt)
            p = cnt / 100.0
            ent = -np.where(p > 0, p * np.log2(np.where(p > 0, p, 1)), 0).sum(1)
            diff = (out.reward[n:] - out.reward[:n]).numpy()
            np.testing.assert_allclose(diff, np.where(ent < 1.2, 1e-3, 0.0), atol=1e-7)


def test_curiosity_bonus_is_clamped_to_zero_and_curiosity_max_then_weighted():
    env = scenario_env(n_envs=5, curiosity_weight=2.0, curiosity_max=1e-4)
    bonus = torch.tensor([-1.0, 0.0, 5e-5, 1e-4, 1.0])
    out = env.step(torch.full((5,), FLAT), bonus)
    assert out.reward.tolist() == pytest.approx([0.0, 0.0, 1e-4, 2e-4, 2e-4], abs=1e-10)


def test_reward_scale_multiplies_the_final_reward():
    env = long_env(n_envs=2, per_env={"reward_scale": [1.0, 3.0]}, risk_weight=0.01)
    out = act(env, HOLD_LONG, HOLD_LONG)
    assert float(out.reward[1]) == pytest.approx(3.0 * float(out.reward[0]), rel=1e-6)


def test_volatility_ema_updates_with_the_next_bar_absolute_log_return():
    env = scenario_env(vol_lambda=0.9)
    act(env, FLAT)
    assert f(env.state.vol) == pytest.approx(0.9 * VOL + 0.1 * abs(math.log(101.5 / 100.0)), rel=1e-5)


def test_equity_peak_and_costs_accumulate():
    env = scenario_env()
    act(env, action(4, 0, 1))
    e1 = f(env.state.equity)
    assert f(env.state.peak) == pytest.approx(max(1e6, e1))
    c1 = f(env.state.cum_costs)
    act(env, action(0, 0, 1))
    assert f(env.state.cum_costs) > c1 > 0
