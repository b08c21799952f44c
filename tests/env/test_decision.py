"""env.decision_interval: one decision = the action held for k bars (foxhunt.env.decision).

The float64 oracle comparison is tests/env/test_parity.py (``decision_interval``); here: k = 1 is the
per-bar step bit for bit, a k-bar decision is k per-bar steps with the action held, and the decision
step reads nothing on the host.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.env import EnvParams, VecTradingEnv, step
from foxhunt.env.state import StartSampler
from foxhunt.env.vec_env import StepOutput
from foxhunt.testing import forbid_host_reads
from tests.env.env_helpers import random_market


def _state_equal(a: VecTradingEnv, b: VecTradingEnv) -> None:
    for name, t in a.state.tensors().items():
        assert torch.equal(t, getattr(b.state, name)), name


def test_k1_decisions_are_the_per_bar_step_bit_for_bit():
    market = random_market(1_200, seed=1)
    params = EnvParams(episode_length=37, decision_interval=1)
    env = VecTradingEnv(market, 16, params, seed=3)
    ref = VecTradingEnv(market, 16, params, seed=3)
    out = StepOutput.allocate(16, "cpu")
    sampler = StartSampler(16, "cpu", 3)
    sampler.generator.set_state(ref.sampler.generator.get_state())
    rng = np.random.default_rng(0)
    for _ in range(120):
        a = torch.from_numpy(rng.integers(45, size=16))
        cur = torch.from_numpy(rng.uniform(0, 1e-3, 16).astype(np.float32))
        got = env.step(a, cur)
        want = step(ref.state, ref.params, market, a, cur, out, sampler=sampler)
        for name, t in got.tensors().items():
            assert torch.equal(t, getattr(want, name)), name
        _state_equal(env, ref)


@pytest.mark.parametrize("k,length", [(4, 10), (5, 25), (3, 7)])
def test_a_k_bar_decision_is_k_per_bar_steps_with_the_action_held(k, length):
    """Without auto-reset: the decision's reward is the bars' rewards summed in order, it ends where the
    episode ends inside the interval, and state, trades and flags are those of the held action."""
    market = random_market(1_200, seed=2)
    kw = dict(episode_length=length, profit_bps=30.0, stop_bps=30.0, max_holding=6, end_on_barrier=True)
    env = VecTradingEnv(market, 24, EnvParams(decision_interval=k, **kw), seed=0, auto_reset=False)
    bar = VecTradingEnv(market, 24, EnvParams(decision_interval=1, **kw), seed=0, auto_reset=False)
    starts = np.random.default_rng(1).integers(10, 900, size=24)
    env.reset(starts)
    bar.reset(starts)
    rng = np.random.default_rng(5)
    ends_inside = barriers = 0
    for _ in range(length // k + 2):
        a = torch.from_numpy(rng.integers(45, size=24))
        got = env.step(a)
        total = torch.full((24,), -0.0)
        done = torch.zeros(24, dtype=torch.bool)
        hit = torch.zeros(24, dtype=torch.bool)
        last_ret = torch.zeros(24)
        for _j in range(k):
            o = bar.step(a)
            total = torch.where(o.stepped, total + o.reward, total)
            done |= o.done
            hit |= o.barrier_hit
            last_ret = torch.where(o.trade_closed, o.trade_return, last_ret)
        total = torch.where(got.stepped, total, 0.0)
        assert torch.equal(got.reward, total)
        assert torch.equal(got.done, done) and torch.equal(got.barrier_hit, hit)
        assert torch.equal(got.trade_return, last_ret)
        assert torch.equal(got.next_bar, bar.out.next_bar)
        assert torch.equal(got.next_portfolio, bar.out.next_portfolio)
        _state_equal(env, bar)
        ends_inside += int((got.done & ((got.next_bar - env.state.episode_start) % k != 0)).sum())
        barriers += int(got.barrier_hit.sum())
    assert ends_inside > 0 and barriers > 0  # the cases that make a decision shorter than k were exercised


def test_training_decisions_restart_done_envs_once_per_decision_and_never_leave_the_fold():
    market = random_market(1_200, seed=4)
    env = VecTradingEnv(market, 32, EnvParams(episode_length=23, decision_interval=6), seed=1)
    rng = np.random.default_rng(2)
    fold = market.fold
    done_seen = 0
    for _ in range(40):
        start_draws = env.sampler.generator.get_state()
        out = env.step(torch.from_numpy(rng.integers(45, size=32)))
        # one uniform per env per decision: the generator moved by exactly one draw of N float64
        g = torch.Generator().manual_seed(0)
        g.set_state(start_draws)
        torch.rand(32, generator=g, dtype=torch.float64)
        assert torch.equal(g.get_state(), env.sampler.generator.get_state())
        assert not env.state.finished.any()
        assert bool((out.next_bar <= fold.train_end).all())
        assert bool((env.state.bar >= fold.train_start).all()) and bool((env.state.bar < fold.train_end).all())
        done_seen += int(out.done.sum())
        assert torch.equal(env.state.step[out.done], torch.zeros_like(env.state.step[out.done]))
    assert done_seen > 0


def test_a_decision_step_reads_nothing_on_the_host():
    market = random_market(600, seed=0, fold=None)
    env = VecTradingEnv(market, 8, EnvParams(episode_length=20, decision_interval=5), seed=0)
    a = torch.randint(0, 45, (8,))
    env.step(a)  # warm caches outside the block
    with forbid_host_reads():
        for _ in range(3):
            env.step(a)
