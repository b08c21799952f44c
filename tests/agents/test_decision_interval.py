"""The learners at env.decision_interval k > 1: one transition per decision (k bars), the DQN's n-step
returns and PPO's GAE over decisions (γ per decision) against float64 loops over the same decisions."""

from __future__ import annotations

import numpy as np
import torch

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.targets import nstep_targets
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.trainer import PPOTrainer
from foxhunt.env import EnvParams
from tests.agents.dqn_helpers import small_market
from tests.agents.test_ppo_math import gae_reference

K = 4
ENV = EnvParams(episode_length=30, reward_scale=100.0, decision_interval=K)


def _assert_decisions(bar: torch.Tensor, next_bar: torch.Tensor, done: torch.Tensor) -> None:
    """[L, N] rows of consecutive decisions: each spans k bars (fewer only where its episode ended), and
    an env's next decision starts where its last one ended unless that one ended the episode."""
    span = next_bar - bar
    assert bool(((span == K) | (done & (span >= 1) & (span < K + 1))).all())
    assert bool((span < K).any() or done.any())  # an episode of 30 bars ends inside an interval of 4
    assert bool(((bar[1:] == next_bar[:-1]) | done[:-1]).all())


def test_dqn_transitions_are_decisions_and_nstep_targets_over_them_match_a_float64_loop():
    market = small_market()
    cfg = DQNConfig(n_envs=8, rollout_len=12, rounds_per_epoch=1, train_steps_per_round=0, batch_size=32,
                    buffer_capacity=8 * 12, warmup_transitions=8, hidden=(16,), head_hidden=8, n_step=3, gamma=0.8)
    tr = DQNTrainer(market, ENV, cfg, seed=1, plan=ExecutionPlan(device="cpu", graphs=False))
    tr._round()
    c = tr.collector
    _assert_decisions(c.r_bar, c.r_next_bar, c.r_done)
    st = tr.replay.storage
    n, steps = cfg.n_envs, cfg.rollout_len
    idx = torch.arange(n * steps)
    gamma_pow = torch.tensor([cfg.gamma ** (j + 1) for j in range(cfg.n_step)], dtype=torch.float32)
    ret, done, discount, last = nstep_targets(st.reward, st.done, st.bar, st.next_bar, st.pos_t, idx, n, cfg.gamma,
                                              cfg.n_step, gamma_pow)
    r = c.r_reward.double().numpy()
    term = c.r_terminal.numpy()
    bar, nxt = c.r_bar.numpy(), c.r_next_bar.numpy()
    for t in range(steps):
        for i in range(n):
            want, j = 0.0, 0
            while True:  # decisions t, t+1, … of env i, γ per decision, cut at a terminal, a new episode or the data
                want += cfg.gamma ** j * r[t + j, i]
                if term[t + j, i] or j + 1 == cfg.n_step or t + j + 1 == steps or bar[t + j + 1, i] != nxt[t + j, i]:
                    break
                j += 1
            row = t * n + i
            assert abs(float(ret[row]) - want) <= 1e-5 * max(1.0, abs(want)), (t, i)
            assert int(last[row]) == (t + j) * n + i
            assert bool(done[row]) == bool(term[t + j, i])
            assert abs(float(discount[row]) - cfg.gamma ** (j + 1)) < 1e-6


def test_ppo_rollouts_are_decisions_and_gae_over_them_matches_a_float64_loop():
    market = small_market()
    cfg = PPOConfig(n_envs=8, rollout_len=16, iterations_per_epoch=1, minibatches=2, update_epochs=1,
                    hidden=(16,), head_hidden=8, gamma=0.9, gae_lambda=0.8)
    tr = PPOTrainer(market, ENV, cfg, seed=2)
    tr.rollout.collect()
    b = tr.buffer
    _assert_decisions(b.bar, b.next_bar, b.done)
    ref = gae_reference(*(t.double().numpy() for t in (b.reward, b.value, b.next_value)), b.done.numpy(),
                        b.terminal.numpy(), cfg.gamma, cfg.gae_lambda)
    np.testing.assert_allclose(b.advantage.double().numpy(), ref, rtol=1e-5, atol=1e-5)
