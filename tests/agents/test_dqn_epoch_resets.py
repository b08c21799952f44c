"""``dqn.reset_portfolio_each_epoch`` in the trainer: no env bar leaves the fold's training window.

Check mode (``accel.check``) counts every env bar t and t+1 the collector writes outside
``[train_start, train_end)`` (``chk_bar_range``) and raises CheckFailed at the epoch's readback.
An epoch (16 env steps here) shorter than the episode (37 steps) is the worst case: every epoch
start resets the step counter, so without a bound the envs would never truncate and would march
on through the purge gap and the validation window.
"""

from __future__ import annotations

import pytest

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.env import EnvParams
from foxhunt.folds import FoldRange
from tests.agents.dqn_helpers import small_market

FOLDS = [FoldRange(0, 0, 250, 260, 400), FoldRange(1, 100, 420, 430, 600), FoldRange(2, 300, 590, 590, 600)]


@pytest.mark.parametrize("reset", [False, True], ids=["reset-off", "reset-on"])
def test_training_bars_stay_in_every_folds_training_window(reset):
    market = small_market(600)
    market.set_fold(FOLDS[0])
    cfg = DQNConfig(n_envs=16, rollout_len=4, rounds_per_epoch=4, train_steps_per_round=1, batch_size=32,
                    buffer_capacity=1_024, warmup_transitions=64, hidden=(8,), head_hidden=8,
                    reset_portfolio_each_epoch=reset, reset_dsr_each_epoch=reset)
    tr = DQNTrainer(market, EnvParams(episode_length=37), cfg, seed=1, plan=ExecutionPlan(device="cpu", check=True))
    for fold in FOLDS:
        tr.reset_for_fold(fold)
        for _ in range(12):  # 192 steps: well past a window's end for a bar that is never pulled back
            tr.train_epoch()  # CheckFailed naming chk_bar_range if any bar left [train_start, train_end)
        bar = tr.env.state.bar
        assert int(bar.min()) >= fold.train_start and int(bar.max()) <= fold.train_end - 1
