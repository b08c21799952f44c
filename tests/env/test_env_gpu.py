"""GPU only: CUDA-graph replay equals eager stepping bitwise; a step never synchronises."""

from __future__ import annotations

import pytest
import torch

from foxhunt.env import EnvParams, StepGraph, VecTradingEnv
from foxhunt.testing import cuda_sync_errors
from tests.env.env_helpers import random_market

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "kw,auto_reset",
    [
        (dict(episode_length=17), True),
        (dict(episode_length=23, action_mode="exposure", reward_mode="dsr", kelly=True, kelly_min_trades=2), True),
        (dict(episode_length=60, end_on_barrier=True), False),
    ],
)
def test_100_steps_captured_in_a_cuda_graph_equal_100_eager_steps_bitwise(kw, auto_reset):
    market = random_market(2_000, seed=7, device="cuda")
    n, k = 1_000, 100
    env = VecTradingEnv(market, n, EnvParams(**kw), seed=5, auto_reset=auto_reset)
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(5):  # leave the fresh state first
        env.step(torch.randint(0, env.n_actions, (n,), device="cuda", generator=g))
    graph = StepGraph(env, k, with_curiosity=True)
    actions = torch.randint(0, env.n_actions, (k, n), device="cuda", generator=g)
    bonus = torch.rand((k, n), device="cuda", generator=g) * 2e-4
    snap = env.snapshot()

    rewards = torch.empty((k, n), device="cuda")
    for i in range(k):
        rewards[i] = env.step(actions[i], bonus[i]).reward
    eager = env.state.clone()

    env.restore(snap)
    graph.actions.copy_(actions)
    graph.curiosity.copy_(bonus)
    graph.replay()
    torch.cuda.synchronize()
    for name, t in env.state.tensors().items():
        assert torch.equal(t, getattr(eager, name)), name
    assert torch.equal(graph.rewards, rewards)
    if auto_reset:
        assert bool(graph.dones.any())  # auto-resets (device RNG draws) happened inside the graph

    # a second replay continues the same RNG stream as eager stepping would
    snap2 = env.snapshot()
    for i in range(k):
        env.step(actions[i], bonus[i])
    eager2 = env.state.clone()
    env.restore(snap2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(env.state.bar, eager2.bar) and torch.equal(env.state.equity, eager2.equity)


def test_step_observe_and_reset_flags_run_without_implicit_synchronisation():
    market = random_market(1_000, seed=1, device="cuda")
    env = VecTradingEnv(market, 256, EnvParams(episode_length=5))
    actions = torch.randint(0, 45, (12, 256), device="cuda")
    bonus = torch.zeros(256, device="cuda")
    torch.cuda.synchronize()
    with cuda_sync_errors("cuda"):
        for i in range(12):
            env.step(actions[i], bonus)
            env.observe()
        env.reset_flags.fill_(7)
        env.apply_reset_flags()
    torch.cuda.synchronize()
    assert bool(torch.isfinite(env.out.reward).all())
