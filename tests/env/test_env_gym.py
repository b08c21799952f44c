"""Gymnasium wrappers: the single env passes check_env; the vector env follows the vector API with
same-step autoreset."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from foxhunt.env import EnvParams
from foxhunt.env.gym_wrapper import TradingEnv, TradingVectorEnv, make_gym_env


@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_single_env_passes_gymnasium_check_env(cpu_market, mode):
    env = TradingEnv(cpu_market, EnvParams(episode_length=20, action_mode=mode))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Box observation space (minimum|maximum) value.*")
        check_env(env, skip_render_check=True)
    assert env.action_space == gym.spaces.Discrete(45 if mode == "factored" else 5)
    assert env.observation_space.shape == (cpu_market.obs_dim,) and env.observation_space.dtype == np.float32


def test_single_env_episode_truncates_at_episode_length_and_needs_a_reset(cpu_market):
    env = make_gym_env(cpu_market, EnvParams(episode_length=5))
    obs, info = env.reset(seed=1)
    fold = cpu_market.fold
    assert fold.train_start <= info["bar"] <= fold.train_end - 6
    for k in range(5):
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        assert isinstance(r, float) and obs.dtype == np.float32 and obs.shape == (cpu_market.obs_dim,)
    assert trunc and not term
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    with pytest.raises(ValueError, match="outside"):
        env.reset()
        env.step(45)


def test_single_env_seeded_resets_repeat_the_episode(cpu_market):
    env = TradingEnv(cpu_market, EnvParams(episode_length=30))
    runs = []
    for _ in range(2):
        obs, _ = env.reset(seed=7)
        rng = np.random.default_rng(0)
        traj = [obs]
        for _ in range(30):
            o, r, *_ = env.step(int(rng.integers(45)))
            traj.append(np.append(o, r))
        runs.append(traj)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def _vec(market, n=8, **kw):
    return TradingVectorEnv(market, n, EnvParams(**{"episode_length": 6, **kw}), seed=0)


def test_vector_env_spaces_shapes_dtypes_and_metadata(cpu_market):
    env = _vec(cpu_market)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.num_envs == 8 and env.single_action_space == gym.spaces.Discrete(45)
    assert env.action_space == gym.spaces.MultiDiscrete([45] * 8)
    assert env.observation_space.shape == (8, cpu_market.obs_dim)
    obs, info = env.reset(seed=3)
    assert obs.shape == (8, cpu_market.obs_dim) and obs.dtype == np.float32 and obs in env.observation_space
    assert info == {}
    obs2, rew, term, trunc, info = env.step(env.action_space.sample())
    assert obs2 in env.observation_space and obs2 is not obs
    assert rew.shape == (8,) and rew.dtype == np.float64
    assert term.shape == trunc.shape == (8,) and term.dtype == trunc.dtype == np.bool_
    assert set(info) >= {"fill_status", "trade_closed", "trade_return"}
    with pytest.raises(ValueError):
        env.step(np.zeros(7, dtype=np.int64))
    with pytest.raises(ValueError):
        env.step(np.full(8, 45))


def test_vector_env_seeded_reset_is_deterministic(cpu_market):
    env = _vec(cpu_market)
    runs = []
    for _ in range(2):
        obs, _ = env.reset(seed=11)
        env.action_space.seed(5)
        seq = [obs]
        for _ in range(15):  # crosses two auto-resets
            o, r, te, tr, info = env.step(env.action_space.sample())
            seq += [o, r, te, tr]
        runs.append(seq)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    o1, _ = env.reset(seed=12)
    assert not np.array_equal(o1, runs[0][0])


def test_vector_env_same_step_autoreset_returns_new_obs_and_final_obs(cpu_market):
    env = _vec(cpu_market, n=4)
    env.reset(seed=0)
    for k in range(6):
        obs, rew, term, trunc, info = env.step(np.full(4, 9 * 4 + 1))  # long, market
    assert trunc.all() and not term.any()
    assert info["_final_obs"].all() and info["final_obs"].shape == (4,)
    final = np.stack(info["final_obs"])
    assert (final[:, -3] > 0).all()  # the terminal observation holds the long position
    assert (obs[:, -3:] == 0).all()  # the returned observation starts the new episode (flat)
    assert info["_final_info"].all() and "trade_closed" in info["final_info"]


def test_vector_env_matches_sync_vector_env_of_single_envs_over_an_episode(cpu_market):
    n, length = 3, 8
    params = EnvParams(episode_length=length)
    ours = TradingVectorEnv(cpu_market, n, params)
    ref = gym.vector.SyncVectorEnv(
        [lambda: TradingEnv(cpu_market, params) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    starts = [100, 200, 300]
    o1, _ = ours.reset(seed=0, options={"starts": starts})
    o2 = np.stack([e.reset(seed=0, options={"start": s})[0] for e, s in zip(ref.envs, starts)])
    ref._observations = o2.copy()  # SyncVectorEnv.reset cannot pass per-env options
    ref._autoreset_envs = np.zeros(n, dtype=bool)
    np.testing.assert_allclose(o1, o2, rtol=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(length):
        a = rng.integers(0, 45, n)
        r1 = ours.step(a)
        r2 = ref.step(a)
        np.testing.assert_allclose(r1[1], r2[1], rtol=1e-6, atol=1e-12)
        np.testing.assert_array_equal(r1[2], r2[2])
        np.testing.assert_array_equal(r1[3], r2[3])
    np.testing.assert_allclose(np.stack(r1[4]["final_obs"]), np.stack(r2[4]["final_obs"]), rtol=1e-6)


def test_gymnasium_record_episode_statistics_wrapper_accepts_the_vector_env(cpu_market):
    env = gym.wrappers.vector.RecordEpisodeStatistics(_vec(cpu_market, n=4, episode_length=5))
    env.reset(seed=0)
    for _ in range(5):
        *_, info = env.step(env.action_space.sample())
    assert info["_episode"].all() and (info["episode"]["l"] == 5).all()


def test_a_gym_step_is_one_decision_of_k_bars_whose_reward_is_the_bars_rewards_summed(cpu_market):
    """env.decision_interval = 4: a Gymnasium step holds the action 4 bars (what SB3 learns at k)."""
    at_k = make_gym_env(cpu_market, EnvParams(episode_length=10, decision_interval=4))
    per_bar = make_gym_env(cpu_market, EnvParams(episode_length=10))
    _, info = at_k.reset(seed=3)
    per_bar.reset(seed=3, options={"start": info["bar"]})
    for action, bars in ((44, 4), (0, 4), (22, 2)):  # the third decision ends the 10-bar episode after 2 bars
        _, r, term, trunc, info_k = at_k.step(action)
        total = np.float32(-0.0)
        for _ in range(bars):
            _, rb, term_b, trunc_b, info_b = per_bar.step(action)
            total = np.float32(total + np.float32(rb))
        assert r == float(total) and info_k["bar"] == info_b["bar"] and (term, trunc) == (term_b, trunc_b)
    assert trunc
