"""Baselines scored beside the agent: a supervised classifier and Stable-Baselines3 DQN and PPO.

* ``supervised``: scikit-learn's HistGradientBoostingClassifier predicts the sign of the next
  bar's log return (``targets[:, 0]``) from the same causal features the agent sees (raw; trees
  need no normalisation), fitted on the first 80 % of each fold's training slice (at most
  ``max_rows`` most recent rows). It trades ``+1`` when P(up) > 0.5 + m, ``-1`` when P(up) < 0.5 − m,
  else flat; the margin m is picked from ``MARGINS`` on the last 20 % of the training slice by a
  cost-aware float64 P&L proxy (position × next return − cost rate × |Δposition|). The chosen
  exposures are then backtested on the validation window through the same backtester as every
  other policy.
* ``sb3_dqn``: Stable-Baselines3's DQN through our Gymnasium wrapper (``TradingEnv``, the same
  reward and costs as the agent's training env), ``budget`` env steps per fold, then its greedy
  Q-network is backtested like the agent. Nothing is saved or loaded (SB3's zip files are pickles).
* ``sb3_ppo``: Stable-Baselines3's PPO the same way (one env, SB3's default [64, 64] actor and critic,
  rollouts of up to 2,048 steps), backtested with the greedy argmax of its actor's logits, as
  ``foxhunt backtest`` runs our PPO's actor.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from foxhunt.env.params import EnvParams
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

MARGINS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)  # 0.5: never trades (flat when nothing pays after costs)


def _cost_rate(env: EnvParams) -> float:
    """Approximate cost of one unit of exposure traded, as a fraction (commission + half spread)."""
    return (float(env.cost_bps) + 0.5 * float(env.spread_bps)) * 1e-4


def supervised_exposures(market: MarketData, folds: Sequence[FoldRange], env: EnvParams, seed: int = 0,
                         max_rows: int = 200_000) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """Per fold: [val_len - 1] exposures of the classifier rule (see the module docstring).

    Returns ({fold number: exposures}, info with the chosen margins and the fit seconds)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    feats = market.features.cpu().numpy()
    nxt = market.targets[:, 0].cpu().numpy().astype(np.float64)
    out: dict[int, np.ndarray] = {}
    margins, fit_s = [], 0.0
    rate = _cost_rate(env)
    for f in folds:
        t0 = time.perf_counter()
        lo = max(f.train_start, f.train_end - max_rows)
        rows = np.arange(lo, f.train_end - 1)  # the last train row's label looks past train_end
        rows = rows[np.isfinite(nxt[rows])]
        cut = rows[: int(0.8 * len(rows))], rows[int(0.8 * len(rows)):]
        clf = HistGradientBoostingClassifier(max_iter=100, learning_rate=0.05, max_leaf_nodes=15, random_state=seed)
        clf.fit(feats[cut[0]], (nxt[cut[0]] > 0).astype(np.int64))
        p_tune = clf.predict_proba(feats[cut[1]])[:, 1]
        best, best_pnl = 0.0, -np.inf
        for m in MARGINS:
            pos = np.where(p_tune > 0.5 + m, 1.0, np.where(p_tune < 0.5 - m, -1.0, 0.0))
            pnl = float(np.sum(pos * nxt[cut[1]]) - rate * np.abs(np.diff(np.concatenate([[0.0], pos]))).sum())
            if pnl > best_pnl:
                best, best_pnl = m, pnl
        n = f.val_len - 1
        p_val = clf.predict_proba(feats[f.val_start : f.val_start + n])[:, 1]
        out[f.fold] = np.where(p_val > 0.5 + best, 1.0, np.where(p_val < 0.5 - best, -1.0, 0.0))
        margins.append(best)
        fit_s += time.perf_counter() - t0
    return out, {"margins": margins, "fit_s": fit_s, "model": "HistGradientBoostingClassifier(max_iter=100)"}


class ActorLogits(nn.Module):
    """An SB3 actor-critic policy as obs [B, F] -> action logits [B, A] (argmax: its greedy action)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    @torch.no_grad()
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy.get_distribution(obs).distribution.logits


def silence_logger(model: Any) -> None:
    """Give an SB3 model a logger with no outputs: its default one makes an empty ``SB3-<time>``
    folder in the temp directory on every ``learn()`` (even with ``verbose=0``)."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))


def _sb3_model(algo: str, gym_env: Any, gamma: float, budget: int, seed: int, device: Any) -> tuple[Any, Any]:
    """An SB3 model of ``algo`` ("dqn" | "ppo") on ``gym_env`` and the module whose argmax is its greedy action."""
    if algo == "dqn":
        from stable_baselines3 import DQN

        model = DQN("MlpPolicy", gym_env, learning_rate=5e-4, buffer_size=max(budget, 1000), learning_starts=min(1000, budget // 4),
                    batch_size=64, gamma=gamma, train_freq=4, target_update_interval=500, exploration_fraction=0.3,
                    exploration_final_eps=0.05, policy_kwargs={"net_arch": [128, 128]}, seed=seed, device=device, verbose=0)
        return model, model.q_net
    if algo != "ppo":
        raise ValueError(f"unknown SB3 baseline {algo!r}")
    from stable_baselines3 import PPO

    # Rollouts a quarter of the budget (at least one minibatch of 64, at most SB3's default 2,048), so a
    # small budget still gets several updates; everything else SB3's defaults.
    n_steps = max(64, min(2048, budget // 4 // 64 * 64))
    model = PPO("MlpPolicy", gym_env, learning_rate=3e-4, n_steps=n_steps, batch_size=64, gamma=gamma, gae_lambda=0.95,
                ent_coef=0.01, seed=seed, device=device, verbose=0)

    return model, ActorLogits(model.policy)


def sb3_scores(algo: str, market: MarketData, folds: Sequence[FoldRange], env: EnvParams, gamma: float, budget: int,
               backtester: Any, seed: int = 0) -> tuple[list[tuple[dict[str, float], np.ndarray, np.ndarray, float]], dict[str, Any]]:
    """Train SB3 ``algo`` ("dqn" | "ppo") for ``budget`` env steps per fold on the fold's training slice,
    backtest its greedy policy on the validation window.

    Returns per fold (metrics, returns [n], positions [n], costs) and info (budget, seconds). The
    backtests run the torch path: SB3's networks are not ours, which the fused kernel needs."""
    from foxhunt.backtest.policies import GreedyPolicy
    from foxhunt.env.gym_wrapper import TradingEnv

    rows = []
    t0 = time.perf_counter()
    for f in folds:
        market.set_fold(f)
        gym_env = TradingEnv(market, env, seed=seed)
        model, greedy_net = _sb3_model(algo, gym_env, gamma, budget, seed, market.device)
        silence_logger(model)
        model.learn(total_timesteps=budget)
        model.policy.set_training_mode(False)
        n = f.val_len - 1
        res = backtester.run([f.val_start], [n], GreedyPolicy(greedy_net, env.decision_interval), keep_curves=True,
                             keep_trades=True)  # the gym env steps one decision of k bars: SB3 learnt at k
        costs = sum(float(t["costs"]) for t in res.trades or [])
        rows.append((res.metrics[0], res.returns[0, :n], res.positions[0, :n], costs))
    return rows, {"algo": algo, "budget_steps_per_fold": budget, "seconds": time.perf_counter() - t0}

