"""PPO must learn: from a leaked next-bar return (two seeds), and from a weak planted signal (two
seeds), out of sample (CPU, ~8 s each).

The same setting as tests/agents/test_dqn_learning.py: the out-of-sample Sharpe is measured by the
backtester on the fold's validation range (never seen in training) with the greedy policy (argmax
of the logits through the packed network), against buy-and-hold and random policies, all in one
lockstep backtest.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.trainer import PPOTrainer
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ActionPolicy, GreedyPolicy
from foxhunt.data.synthetic import generate_bars
from foxhunt.env import EnvParams
from foxhunt.features.spec import build_features
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

ENV = EnvParams(episode_length=128, cost_bps=0.2, spread_bps=0.2, impact_eta=0.0, action_mode="exposure", reward_scale=100.0)
PPO = PPOConfig(n_envs=64, rollout_len=32, iterations_per_epoch=8, minibatches=4, update_epochs=4, hidden=(64, 64),
                head_hidden=32, gamma=0.5, lr=1e-3, ent_coef=0.01)


class _SideBySide:
    """One lockstep backtest of 7 windows over the same bars: window 0 the greedy PPO policy, window
    1 buy-and-hold (full long), windows 2-6 random actions (one run instead of three)."""

    def __init__(self, net, random_actions: torch.Tensor) -> None:
        self.greedy = GreedyPolicy(net)
        self.random = ActionPolicy(random_actions)

    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        out = self.random(obs, t).clone()  # [7]: rows 0 and 1 are overwritten
        out[0] = self.greedy(obs[:1], t)[0]
        out[1] = 4  # exposure +1 (five exposure actions: index 4)
        return out


def _train_and_score(fs, seed: int, epochs: int) -> dict[str, float]:
    m = MarketData(fs)
    fold = FoldRange(0, fs.warmup, 6_000, 6_060, len(fs) - 1)
    m.set_fold(fold)
    tr = PPOTrainer(m, ENV, PPO, seed=seed)
    tr.reset_for_fold(fold)
    for _ in range(epochs):
        tr.train_epoch()
    n = fold.val_end - fold.val_start - 1
    g = torch.Generator().manual_seed(seed)
    rand = torch.randint(0, 5, (7, n), generator=g)
    sharpe = [r["sharpe"] for r in Backtester(m, ENV).run([fold.val_start] * 7, [n] * 7, _SideBySide(tr.policy_net(), rand)).metrics]
    return {"ppo": sharpe[0], "buy_and_hold": sharpe[1], "random_best": float(np.max(sharpe[2:]))}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_exploits_a_leaked_next_bar_return_out_of_sample(seed):
    fs = build_features(generate_bars(8_000, seed=3))
    close, open_ = fs.ohlc[:, 3].double(), fs.ohlc[:, 0].double()
    leak = torch.zeros(len(fs))
    leak[:-1] = torch.log(close[1:] / open_[1:]).float()  # what a position opened now earns next bar
    fs = dataclasses.replace(fs, features=torch.cat([fs.features, leak[:, None]], 1), names=fs.names + ("leak",))
    s = _train_and_score(fs, seed, epochs=5)
    assert s["ppo"] > 50.0, s
    assert s["ppo"] > s["buy_and_hold"] + 50.0 and s["ppo"] > s["random_best"] + 50.0, s


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_beats_random_policies_on_a_weak_planted_signal(seed):
    fs = build_features(generate_bars(8_000, seed=5, signal=0.3))
    s = _train_and_score(fs, seed=seed, epochs=8)
    assert s["ppo"] > s["random_best"] + 20.0, s
    assert s["ppo"] > s["buy_and_hold"], s
