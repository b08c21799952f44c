"""env.stacked: members' envs as one env of members x envs, each member's rows stepping as its own env does.

Members at different decision intervals (a decision grid) share the one env: it steps up to the largest k bars a
decision and each env stops after its own member's k (``EnvTensors.decision_bars``); every member's state, outputs
and start draws equal those of its env stepped alone, bit for bit (k = 1 members included, whose own step is the
plain per-bar step)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.env.stacked import stack_envs, unstackable
from tests.env.env_helpers import random_market


def _members(market, ks, n, seeds):
    return [VecTradingEnv(market, n, EnvParams(episode_length=37, decision_interval=k, reward_mode="dsr"), seed=s)
            for k, s in zip(ks, seeds)]


@pytest.mark.parametrize("ks", [(1, 3, 5), (2, 2), (4, 1)], ids=["grid-1-3-5", "same-k", "4-then-1"])
def test_each_members_rows_of_the_stacked_env_step_as_its_own_env_bit_for_bit(ks) -> None:
    market = random_market(1_200, seed=2)
    # 16 envs a member: each member's rows start on a CPU vector boundary, as its own env's do (torch's CPU
    # kernels round a vector body's pow / sqrt and a scalar tail's differently in the last bit)
    n, seeds = 16, [7 + i for i in range(len(ks))]
    alone = _members(market, ks, n, seeds)
    inside = _members(market, ks, n, seeds)
    env = stack_envs(inside)
    assert env.decision_interval == max(ks) and env.n_envs == n * len(ks)
    if len(set(ks)) > 1:
        assert env.params.decision_bars.tolist() == [k for k in ks for _ in range(n)]
    else:
        assert env.params.decision_bars is None
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        acts = [torch.from_numpy(rng.integers(env.n_actions, size=n)) for _ in ks]
        cur = [torch.from_numpy(rng.uniform(0, 1e-3, n).astype(np.float32)) for _ in ks]
        for e, a, c in zip(alone, acts, cur):
            e.step(a, c)
        env.step(torch.cat(acts), torch.cat(cur))
        for a, b in zip(alone, inside):  # b's tensors are views of its rows of the stacked env
            for name, t in a.state.tensors().items():
                assert torch.equal(t, getattr(b.state, name)), name
            for name, t in a.out.tensors().items():
                assert torch.equal(t, getattr(b.out, name)), name
            assert torch.equal(a.sampler.starts, b.sampler.starts)
        ended += int(env.out.done.sum())
    assert ended > 0  # the run crossed episode ends and their restarts


def test_members_that_differ_in_a_structural_setting_or_their_market_do_not_stack() -> None:
    market = random_market(1_200, seed=2)
    a = VecTradingEnv(market, 4, EnvParams(episode_length=37), seed=0)
    b = VecTradingEnv(market, 4, EnvParams(episode_length=37, reward_mode="dsr"), seed=1)
    assert unstackable([a, b]) == "member 1 differs in env.reward_mode"
    c = VecTradingEnv(random_market(1_200, seed=3), 4, EnvParams(episode_length=37), seed=1)
    assert unstackable([a, c]) == "member 1 has its own market"
    d = VecTradingEnv(market, 4, EnvParams(episode_length=37, decision_interval=8), seed=1)
    assert unstackable([a, d]) is None
    with pytest.raises(ValueError, match="stacking the members' envs: member 1 has 5 envs, member 0 4"):
        stack_envs([a, VecTradingEnv(market, 5, EnvParams(episode_length=37), seed=1)])
