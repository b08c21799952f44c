"""The DQN must learn: from a leaked future return, and from a weak planted signal (CPU, ~7 s each).

Out-of-sample Sharpe is measured by the backtester on the fold's validation range (never seen in
training) and compared with buy-and-hold and with random policies on the same window.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ActionPolicy, ExposurePolicy, GreedyPolicy
from foxhunt.data.synthetic import generate_bars
from foxhunt.env import EnvParams
from foxhunt.features.spec import build_features
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

ENV = EnvParams(episode_length=128, cost_bps=0.2, spread_bps=0.2, impact_eta=0.0, action_mode="exposure", reward_scale=100.0)
DQN = DQNConfig(n_envs=32, rollout_len=8, rounds_per_epoch=16, train_steps_per_round=8, batch_size=128,
                warmup_transitions=512, hidden=(64, 64), head_hidden=32, gamma=0.5, lr=1e-3, eps_decay_steps=200,
                sampler="uniform", buffer_capacity=50_000)


class _SideBySide:
    """One lockstep backtest of 6 windows over the same bars: window 0 the greedy DQN policy, windows
    1-5 random actions (one run instead of six; each window is its own env, so its Sharpe is the one
    a run of that window alone gives)."""

    def __init__(self, net, random_actions: torch.Tensor) -> None:
        self.greedy = GreedyPolicy(net)
        self.random = ActionPolicy(random_actions)

    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        out = self.random(obs, t).clone()  # [6]: row 0 is overwritten
        out[0] = self.greedy(obs[:1], t)[0]
        return out


def _train_and_score(fs, seed: int, epochs: int) -> dict[str, float]:
    m = MarketData(fs)
    t = len(fs)
    fold = FoldRange(0, fs.warmup, 6_000, 6_060, t - 1)
    m.set_fold(fold)
    tr = DQNTrainer(m, ENV, DQN, seed=seed)
    for _ in range(epochs):
        tr.train_epoch()
    bt = Backtester(m, ENV)
    n = fold.val_end - fold.val_start - 1
    g = torch.Generator().manual_seed(seed)
    rand = torch.cat([torch.randint(0, 5, (1, n), generator=g) for _ in range(5)])  # five random policies
    side = _SideBySide(tr.learner.online, torch.cat([torch.zeros(1, n, dtype=torch.int64), rand]))
    sharpe = [r["sharpe"] for r in bt.run([fold.val_start] * 6, [n] * 6, side).metrics]
    return {
        "dqn": sharpe[0],
        # buy-and-hold is a factored market order (ExposurePolicy): a run of its own
        "buy_and_hold": bt.run([fold.val_start], [n], ExposurePolicy(torch.ones(1, n), 5)).metrics[0]["sharpe"],
        "random_best": float(np.max(sharpe[1:])),
    }


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_dqn_exploits_a_leaked_next_bar_return_out_of_sample(seed):
    fs = build_features(generate_bars(8_000, seed=3))
    close, open_ = fs.ohlc[:, 3].double(), fs.ohlc[:, 0].double()
    leak = torch.zeros(len(fs))
    leak[:-1] = torch.log(close[1:] / open_[1:]).float()  # what a position opened now earns next bar
    fs = dataclasses.replace(fs, features=torch.cat([fs.features, leak[:, None]], 1), names=fs.names + ("leak",))
    s = _train_and_score(fs, seed, epochs=6)
    assert s["dqn"] > 50.0, s
    assert s["dqn"] > s["buy_and_hold"] + 50.0 and s["dqn"] > s["random_best"] + 50.0, s


@pytest.mark.slow
def test_dqn_beats_random_policies_on_a_weak_planted_signal():
    fs = build_features(generate_bars(8_000, seed=5, signal=0.3))
    s = _train_and_score(fs, seed=0, epochs=8)
    assert s["dqn"] > s["random_best"] + 20.0, s
    assert s["dqn"] > s["buy_and_hold"], s
