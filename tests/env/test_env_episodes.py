"""Episodes (ENV_SPEC items 8–9, "Reset flags"): bust, episode end, auto-reset into the fold's range,
freezing without auto-reset, the active mask, reset flags, observations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.env import (
    RESET_DIVERSITY,
    RESET_DSR,
    RESET_KELLY,
    RESET_PORTFOLIO,
    RESET_VOL,
    EnvParams,
    VecTradingEnv,
)
from tests.env.env_helpers import act, action, f, scenario_env, set_position


def random_actions(g: torch.Generator, n: int, device, n_actions: int = 45) -> torch.Tensor:
    return torch.randint(0, n_actions, (n,), generator=g).to(device)


def test_bust_ends_the_episode_as_a_termination():
    env = scenario_env([(100, 101, 99, 100), (60, 61, 39, 40)], bust_fraction=0.5)
    set_position(env, 9500.0, 100.0, level=4)
    out = act(env, action(4, 0, 1))
    assert f(env.state.equity) == pytest.approx(1e6 - 9500 * 60, rel=1e-6)  # 430,000 ≤ 500,000
    assert bool(out.done) and not bool(out.truncated) and bool(env.state.finished)


def test_episode_ends_after_episode_length_steps_as_a_truncation():
    env = scenario_env(episode_length=3)
    for k in range(3):
        out = act(env, action(2))
        assert bool(out.done) == (k == 2)
    assert bool(out.truncated) and int(out.next_bar) == 3


def test_finished_envs_stay_frozen_without_auto_reset(market, device):
    env = VecTradingEnv(market, 8, EnvParams(episode_length=5), auto_reset=False)
    env.reset(list(range(100, 108)))
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        env.step(random_actions(g, 8, device))
    assert bool(env.state.finished.all())
    before = env.state.clone()
    out = env.step(random_actions(g, 8, device))
    for name, t in env.state.tensors().items():
        assert torch.equal(t, getattr(before, name)), name
    assert not bool(out.stepped.any()) and not bool(out.done.any()) and float(out.reward.abs().sum()) == 0.0
    env.reset(list(range(100, 108)))
    assert not bool(env.state.finished.any())


def test_inactive_envs_never_change_with_the_active_mask(market, device):
    env = VecTradingEnv(market, 6, EnvParams(episode_length=50))
    env.reset([200] * 6)
    active = torch.tensor([True, False, True, False, True, False], device=device)
    before = env.state.clone()
    g = torch.Generator().manual_seed(2)
    for _ in range(20):
        out = env.step(random_actions(g, 6, device), active=active)
    idle = ~active
    for name, t in env.state.tensors().items():
        assert torch.equal(t[idle], getattr(before, name)[idle]), name
    assert bool((env.state.bar[active] == 220).all())
    assert torch.equal(out.stepped, active)


def test_auto_reset_reports_the_terminal_transition_then_restarts_inside_the_fold(market, device):
    n, length = 512, 20
    env = VecTradingEnv(market, n, EnvParams(episode_length=length), seed=3)
    g = torch.Generator().manual_seed(3)
    starts = env.state.bar.clone()
    lo, hi = market.fold.train_start, market.fold.train_end - length - 1
    assert int(starts.min()) >= lo and int(starts.max()) <= hi
    for _ in range(length):
        out = env.step(random_actions(g, n, device))
    assert bool(out.done.all()) and bool(out.truncated.all())
    assert torch.equal(out.next_bar, starts + length)
    assert bool((out.next_portfolio[:, 0] != 0).any())  # terminal features, before the reset
    s = env.state
    assert int(s.bar.min()) >= lo and int(s.bar.max()) <= hi and bool((s.step == 0).all())
    assert bool((s.position == 0).all()) and bool((s.cash == 1e6).all()) and bool((s.equity == 1e6).all())
    assert bool((s.level == 2).all()) and not bool(s.barrier_active.any()) and bool((s.cum_costs == 0).all())
    assert bool((s.ring_fill == length).all())  # persistent across episodes: ring and v kept
    assert bool((s.vol != market.median_abs_return).all())
    obs = env.observe()
    assert bool((obs[:, -3:] == 0).all())
    # uniform over the whole range: 512 · 20 draws cover both ends
    draws = []
    for _ in range(10):
        env.reset()
        draws.append(env.state.bar.cpu().numpy())
    d = np.concatenate(draws)
    assert d.min() == lo or d.min() < lo + 5
    assert d.max() > hi - 5 and d.max() <= hi


def test_a_new_fold_changes_the_start_range_without_new_buffers(market):
    from foxhunt.folds import FoldRange

    env = VecTradingEnv(market, 256, EnvParams(episode_length=10))
    bounds = market.fold_bounds
    env.set_fold(FoldRange(1, 500, 700, 710, 900))
    assert market.fold_bounds is bounds
    env.reset()
    assert int(env.state.bar.min()) >= 500 and int(env.state.bar.max()) <= 700 - 11


def test_reset_flags_reset_only_the_selected_state(market, device):
    env = VecTradingEnv(market, 16, EnvParams(episode_length=200, reward_mode="dsr"))
    g = torch.Generator().manual_seed(4)
    for _ in range(150):
        env.step(random_actions(g, 16, device))
    s = env.state
    assert bool((s.kelly_count > 0).all()) and bool((s.dsr_b > 0).all())
    snap = s.clone()
    env.reset_flags.fill_(RESET_PORTFOLIO | RESET_DSR)
    env.apply_reset_flags()
    assert int(env.reset_flags) == 0
    lo, hi = market.fold.train_start, market.fold.train_end - 200 - 1  # the random starts' range
    fits = snap.bar <= hi  # kept there; a later bar wraps back into [lo, hi] (tests/env/test_reset_flags_window.py)
    assert bool(fits.any()) and bool((~fits).any()) and torch.equal(s.bar[fits], snap.bar[fits])
    assert torch.equal(s.bar, torch.where(fits, snap.bar, lo + (snap.bar - lo) % (hi - lo + 1)))
    assert torch.equal(s.episode_start, s.bar)
    assert bool((s.position == 0).all()) and bool((s.equity == 1e6).all()) and bool((s.step == 0).all())
    assert bool((s.dsr_a == 0).all()) and bool((s.dsr_b == 0).all())
    assert torch.equal(s.vol, snap.vol) and torch.equal(s.kelly_count, snap.kelly_count)
    assert torch.equal(s.ring_counts, snap.ring_counts)
    env.reset_flags.fill_(RESET_VOL | RESET_KELLY | RESET_DIVERSITY)
    env.apply_reset_flags()
    assert bool((s.vol == market.median_abs_return).all())
    assert bool((s.kelly_count == 0).all()) and bool((s.kelly_p == 0.5).all()) and bool((s.kelly_win == 0).all())
    assert bool((s.ring_fill == 0).all()) and bool((s.ring_counts == 0).all())


def test_per_env_reset_flags_touch_only_flagged_envs(market, device):
    env = VecTradingEnv(market, 4, EnvParams(episode_length=100))
    g = torch.Generator().manual_seed(5)
    for _ in range(30):
        env.step(random_actions(g, 4, device))
    snap = env.state.clone()
    flags = torch.tensor([0, RESET_PORTFOLIO, RESET_VOL, 0], device=device)
    from foxhunt.env import apply_reset_flags_

    apply_reset_flags_(env.state, env.params, market, flags)
    s = env.state
    assert torch.equal(s.cash[[0, 2, 3]], snap.cash[[0, 2, 3]]) and float(s.cash[1]) == 1e6
    assert float(s.vol[2]) == float(market.median_abs_return) and torch.equal(s.vol[[0, 1, 3]], snap.vol[[0, 1, 3]])


def test_observation_is_normalised_features_and_portfolio_features(market, device):
    env = VecTradingEnv(market, 3, EnvParams(episode_length=50, max_holding=10), auto_reset=False)
    env.reset([300, 301, 302])
    for _ in range(4):
        env.step(torch.tensor([action(4), action(0), action(2)], device=device))
    obs = env.observe()
    s = env.state
    close = market.ohlc[s.bar, 3]
    feats = (market.features[s.bar] - market.norm_mean) * market.norm_inv_std
    torch.testing.assert_close(obs[:, :-3], feats)
    torch.testing.assert_close(obs[:, -3], s.position * close / s.equity)
    side = torch.sign(s.position)
    unreal = torch.where(s.position != 0, side * (close - s.entry_price) / s.entry_price.clamp_min(1e-9), 0.0)
    torch.testing.assert_close(obs[:, -2], unreal)
    held = torch.where(s.position != 0, (s.bar - s.entry_bar).float() / 10.0, 0.0)
    torch.testing.assert_close(obs[:, -1], held)
    assert float(obs[0, -3]) > 0 and float(obs[1, -3]) < 0 and obs[2, -3:].tolist() == [0.0, 0.0, 0.0]
    assert obs.data_ptr() == env.obs.data_ptr()


def test_explicit_starts_that_run_past_the_data_are_rejected(market):
    env = VecTradingEnv(market, 2, EnvParams(episode_length=50), auto_reset=False)
    with pytest.raises(ValueError, match=r"starts\[1\]"):
        env.reset([10, market.n_bars - 20])
