"""Both learners trade a tiny intraday drift when they decide every k = 16 bars; PPO deciding every bar
stays flat (its greedy policy pinned by the costs of switching on every bar: docs/LEARNING.md).

The market (``scorecard.markets.intraday_drift``): 6,000 minute bars whose drift (0.15 σ a bar) keeps its
sign for ~250 bars; two walk-forward folds of 1,000 validation bars; the built-in CPU configurations,
smaller and shorter, with EMA trend columns, abstention off (a 1,000-bar window's noise bar would hide
what was learned). ``bench/probe_decision_interval.py`` ran the same settings on seeds 0-2: DQN at k = 16
(``decision_interval_cpu_ci4_dqn_betafix.json``) made 9.5-14.5 round trips a 1,000 bars on every seed, but
its Sharpe was +3.1, −18.0 and +7.1 (one SE of a fold's Sharpe is 22.9 here, so this market cannot tell
it from zero) and one fold of seed 0 held one position throughout; PPO at k = 16 traded every fold
(17-19 a 1,000 bars, ``decision_interval_cpu_ci4_ppo.json``), PPO at k = 1 never traded. So the claims
tested on seed 0: DQN at k = 16 trades (not pinned flat by the costs); PPO at k = 16 trades every fold,
and where it trades a fold at a profit, it does so by timing: the fold's timing Sharpe (its returns less
beta × buy-and-hold's on the same bars, ``foxhunt.backtest.timing``) is above 0 there (within ~1 SE of it).
The direct learner (k = 16, selection on the last epoch) likewise in its own test below.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from foxhunt.backtest.timing import annualised_sharpe, timing_returns
from foxhunt.scorecard.build import Size
from foxhunt.scorecard.markets import intraday_drift
from foxhunt.scorecard.run import run_scenario
from foxhunt.train.config import DEFAULT_TRAIN_TOML

ROOT = Path(__file__).resolve().parents[2]
SIZE = Size("ci-drift", bars=6_000, train=2_500, val=1_000, max_folds=2, real_train=0, real_val=0)
COMMON = ["train.abstain=false", "train.epochs=3", "features.ema_horizons=[30,100,300]", 'run.device="cpu"',
          "run.seed=0"]
LEARNER = {
    "dqn": ["dqn.n_envs=32", "dqn.rollout_len=8", "dqn.rounds_per_epoch=8", "dqn.warmup_transitions=512"],
    "ppo": ["ppo.n_envs=32", "ppo.rollout_len=16", "ppo.iterations_per_epoch=4"],
    "direct": ['train.select="last"', "direct.window=64"],
}
CONFIGS = {"ppo": "train-ppo.toml", "direct": "train-direct.toml"}


def _base(agent: str) -> dict:
    text = (ROOT / "configs" / CONFIGS[agent]).read_text() if agent in CONFIGS else DEFAULT_TRAIN_TOML
    return tomllib.loads(text)


def _timing_where_profitable(r) -> list[tuple[float, float]]:
    """(Sharpe, timing Sharpe) of each fold the agent traded at a profit (Sharpe > 0)."""
    bh = r.references["buy_and_hold"].folds
    return [(f.sharpe, annualised_sharpe(timing_returns(f.returns, m.returns), r.bars_per_year))
            for f, m in zip(r.agent.folds, bh) if f.sharpe > 0]


def _run(agent: str, k: int, tmp: Path):
    sc = intraday_drift(SIZE.bars, 17, drift=0.15, mean_bars=250)
    return run_scenario(sc, _base(agent), SIZE, [*COMMON, *LEARNER[agent], f"env.decision_interval={k}"], tmp,
                        "<test>", baselines=())


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "ppo"])
def test_deciding_every_16_bars_both_learners_trade_an_intraday_drift_and_ppo_trades_every_fold(agent, tmp_path):
    r = _run(agent, 16, tmp_path)
    assert len(r.agent.folds) == 2
    trades = [f.trades for f in r.agent.folds]
    if agent == "dqn":  # it trades; a fold may hold one side throughout (seed 0's second fold does)
        assert sum(trades) >= 10, f"dqn at k = 16 made {trades} round trips in two 1,000-bar folds"
        assert all(np.abs(f.positions).max() > 0 for f in r.agent.folds)
        return
    for f in r.agent.folds:
        assert f.trades >= 5, f"{agent} at k = 16 made {f.trades} round trips in a 1,000-bar fold"
        assert np.abs(f.positions).max() > 0
    profitable = _timing_where_profitable(r)
    assert profitable, f"{agent} at k = 16 traded no fold at a profit"
    assert all(t > 0 for _, t in profitable), f"{agent}: (Sharpe, timing Sharpe) of the profitable folds {profitable}"


@pytest.mark.slow
def test_deciding_every_16_bars_the_direct_learner_trades_the_drift_and_times_it_where_it_profits(tmp_path):
    r = _run("direct", 16, tmp_path)
    assert all(f.trades >= 5 for f in r.agent.folds), [f.trades for f in r.agent.folds]
    profitable = _timing_where_profitable(r)
    assert profitable and all(t > 0 for _, t in profitable), profitable


@pytest.mark.slow
def test_ppo_deciding_every_bar_stays_flat_on_the_same_drift(tmp_path):
    r = _run("ppo", 1, tmp_path)
    assert [f.trades for f in r.agent.folds] == [0, 0]
    assert all(np.abs(f.positions).max() == 0 for f in r.agent.folds)
