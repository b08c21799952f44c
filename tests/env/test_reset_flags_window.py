"""The portfolio reset flag (``dqn.reset_portfolio_each_epoch``) never lets an env read past its
fold's training window.

Every bar an env reads (its bar t and, on a step, t+1) must lie in ``[train_start, train_end)``
(``train_end`` exclusive: bar ``train_end − 1`` is the training window's last bar). Random starts
keep ``start + episode_length ≤ train_end − 1``; a reset flag that started a full new episode at
the env's *current* bar used to run up to ``episode_length − 1`` bars further: into the purge gap
and the validation window (a leak), or past the array on the last fold.
"""

from __future__ import annotations

import pytest
import torch

from foxhunt.env import RESET_DSR, RESET_PORTFOLIO, RESET_VOL, EnvParams, VecTradingEnv, apply_reset_flags_
from foxhunt.folds import FoldRange
from tests.env.env_helpers import random_market

# Window lengths 290, 603, 530 (the last with no purge: validation starts at train_end); episode lengths
# that divide none of them, and an epoch (23 steps) that divides neither.
FOLDS = [FoldRange(0, 10, 300, 310, 400), FoldRange(1, 10, 613, 620, 700), FoldRange(2, 660, 1_190, 1_190, 1_200)]
STEPS_PER_EPOCH = 23


def _run_epochs(env: VecTradingEnv, flags: int, epochs: int, g: torch.Generator) -> tuple[int, int]:
    """(lowest, highest) bar seen over ``epochs`` epochs, flags applied at each epoch start after the
    first (as DQNTrainer.run_epoch does); next_bar is the bar read before any auto-reset."""
    lo, hi = 1 << 62, -1
    for epoch in range(epochs):
        if flags and epoch > 0:
            env.reset_flags.fill_(flags)
            env.apply_reset_flags()
        lo, hi = min(lo, int(env.state.bar.min())), max(hi, int(env.state.bar.max()))
        for _ in range(STEPS_PER_EPOCH):
            out = env.step(torch.randint(0, env.n_actions, (env.n_envs,), generator=g).to(env.device))
            hi = max(hi, int(out.next_bar.max()))
            lo, hi = min(lo, int(env.state.bar.min())), max(hi, int(env.state.bar.max()))
    return lo, hi


# off, and the three flags [dqn] can set (reset_portfolio / reset_dsr / reset_vol_each_epoch)
@pytest.mark.parametrize("flags", [0, RESET_PORTFOLIO | RESET_DSR | RESET_VOL], ids=["off", "on"])
@pytest.mark.parametrize("episode_length", [37, 289])
def test_envs_never_read_outside_the_folds_training_window(flags, episode_length):
    market = random_market(1_200, seed=0, fold=FOLDS[0])
    env = VecTradingEnv(market, 16, EnvParams(episode_length=episode_length), seed=3)
    g = torch.Generator().manual_seed(7)
    for fold in FOLDS:
        env.set_fold(fold)
        env.reset(persistent=True)
        lo, hi = _run_epochs(env, flags, 16, g)
        assert lo >= fold.train_start, f"fold {fold.fold}: bar {lo} before train_start {fold.train_start}"
        assert hi <= fold.train_end - 1, (
            f"fold {fold.fold}: bar {hi} read past the training window's last bar {fold.train_end - 1} "
            f"(episode_length {episode_length}, flags {flags})"
        )


def test_portfolio_reset_keeps_the_bar_where_a_full_episode_fits():
    """Bit 0 starts the new episode at the current bar whenever ``bar + episode_length`` stays in the
    window (ENV_SPEC "Reset flags"); only a bar too late for a full episode moves back."""
    market = random_market(1_200, seed=0, fold=FOLDS[0])
    n, length = 8, 40
    env = VecTradingEnv(market, n, EnvParams(episode_length=length), auto_reset=False)
    last_start = FOLDS[0].train_end - length - 1  # 259: the sampler's highest start
    bars = [10, 100, last_start, last_start + 1, last_start + 2, last_start + 20, FOLDS[0].train_end - 1, 11]
    env.state.bar.copy_(torch.tensor(bars))
    flags = torch.tensor([RESET_PORTFOLIO] * (n - 1) + [0])
    apply_reset_flags_(env.state, env.params, market, flags)
    got = env.state.bar.tolist()
    assert got[:3] == bars[:3] and got[-1] == bars[-1]  # fits (or not flagged): same bar
    span = last_start - FOLDS[0].train_start + 1
    assert got[3:7] == [FOLDS[0].train_start + (b - FOLDS[0].train_start) % span for b in bars[3:7]]
    assert torch.equal(env.state.episode_start[:-1], env.state.bar[:-1])
    assert all(FOLDS[0].train_start <= b <= last_start for b in got[:-1])
