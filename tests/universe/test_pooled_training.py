"""Pooled training on a universe (issue 47): one agent a fold on the pooled training bars of the member
symbols, inner selection and abstention on every member's held-back window pooled, the validation per
symbol in one backtest, and the files: metrics.json's per-symbol and pooled rows, curves.safetensors [W, T]."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from foxhunt.errors import ConfigError
from foxhunt.train.run_dir import create_run_dir
from foxhunt.train.selection import pooled_sharpe
from foxhunt.train.universe_runner import UniverseRunner, pooled_prepared
from tests.universe.conftest import TINY_DIRECT, TINY_DQN, TINY_FORECAST, TINY_PPO, prepared_universe


def train(tmp_path: Path, **sections: dict[str, Any]) -> tuple[Path, list[dict[str, Any]], Any]:
    sections = {"dqn": TINY_DQN, **sections}
    sections["train"] = {"tensorboard": False, "progress": False, **sections.get("train", {})}
    sections["run"] = {"out_dir": str(tmp_path / "runs"), "device": "cpu"}
    p = prepared_universe(tmp_path, **sections)
    pp = pooled_prepared(p.config, p)
    runner = UniverseRunner(pp)
    run_dir, resolved = create_run_dir(pp.config, pp, "run")
    runner.use_config(resolved)
    return run_dir, runner.run(run_dir), pp


def test_pooled_dqn_selects_on_the_pooled_held_back_window_and_writes_per_symbol_rows_and_curves(tmp_path: Path) -> None:
    run, results, pp = train(tmp_path, train={"epochs": 2, "select": "inner", "abstain": True, "abstain_z": 0.0})
    summary = json.loads((run / "summary.json").read_text())
    assert [f["fold"] for f in summary["folds"]] == [0, 1]
    bpy = summary["bars_per_year"]
    for r, fold, windows in zip(results, pp.folds, pp.inner):
        mem = fold.members
        assert [s["symbol"] for s in r["symbols"]] == [pp.market.symbols[s] for s in mem] == ["AAA", "BBB", "CCC"]
        d = run / "folds" / f"fold_{fold.fold}"
        assert json.loads((d / "metrics.json").read_text()) == json.loads(json.dumps(r))
        curves = load_file(d / "curves.safetensors")
        lengths = fold.bounds[mem, 3] - fold.bounds[mem, 2] - 1
        assert curves["lengths"].tolist() == lengths.tolist() == [s["val_bars"] - 1 for s in r["symbols"]]
        assert curves["symbol_index"].tolist() == mem.tolist()
        assert curves["agent_returns"].shape == curves["bh_returns"].shape == (3, lengths.max())
        # The pooled row is the Sharpe of every symbol-bar return, its SE sqrt(bars_per_year / N).
        pooled = np.concatenate([curves["agent_returns"][w, :n] for w, n in enumerate(lengths)]).astype(np.float64)
        bh = np.concatenate([curves["bh_returns"][w, :n] for w, n in enumerate(lengths)]).astype(np.float64)
        assert r["pooled"] == r["agent"] and r["agent"]["bars"] == lengths.sum()
        assert r["agent"]["sharpe_se"] == pytest.approx(math.sqrt(bpy / lengths.sum()))
        want = pooled_sharpe(bh, bpy)
        assert r["buy_and_hold"]["sharpe"] == pytest.approx(want, rel=1e-5)
        if r["agent"]["sharpe"] is not None:
            assert r["agent"]["sharpe"] == pytest.approx(pooled_sharpe(pooled, bpy), rel=1e-5)
        for w, s in enumerate(r["symbols"]):  # each symbol's row is its own window's
            assert s["buy_and_hold"]["total_return"] == pytest.approx(float(np.prod(1 + bh[lengths[:w].sum():][:lengths[w]]) - 1),
                                                                      rel=1e-4, abs=1e-6)
        # Selection and abstention: every member's held-back window, pooled; the bar's SE from the pooled steps.
        steps = sum(n for _, n in windows)
        assert len(windows) == 3 and r["selection"]["inner_steps"] == steps
        assert r["selection"]["abstain"]["standard_error"] == pytest.approx(math.sqrt(bpy / steps))
        for (a, n), s in zip(windows, mem):  # held back: the tail of each symbol's training rows, after the purge
            assert a + n + 1 == pp.universe_folds[fold.fold].bounds[s, 1]
            assert pp.parts[fold.fold].bounds[s, 1] == a - 5


@pytest.mark.parametrize("agent,section", [("ppo", TINY_PPO), ("direct", TINY_DIRECT)])
def test_ppo_and_direct_train_a_pooled_ensemble_a_fold_with_pooled_selection(tmp_path: Path, agent: str,
                                                                            section: dict[str, Any]) -> None:
    run, results, pp = train(tmp_path, train={"agent": agent, "epochs": 1, "ensemble": 2, "select": "inner", "abstain": True},
                             folds={"max_folds": 1}, **{agent: section},
                             **({"env": {"action_mode": "factored"}} if agent == "direct" else {}))
    r = results[0]
    assert len(results) == 1 and len(r["symbols"]) == 3 and r["last_epoch"]["fold"] == 0
    assert [m["inner_steps"] for m in r["selection"]["members"]] == [sum(n for _, n in pp.inner[0])] * 2
    assert set(r["selection"]["abstain"]) >= {"flat", "standard_error", "bar"}
    if r["selection"]["abstain"]["flat"]:  # what the ensemble would have scored: a pooled row over the same windows
        assert r["selection"]["abstain"]["all_members"].keys() >= {"sharpe", "total_return", "trade_count"}
    assert (run / "folds" / "fold_0" / "model.safetensors").is_file()


def test_a_pooled_forecast_learner_draws_each_symbols_training_bars_and_reports_a_pooled_ic(tmp_path: Path) -> None:
    """train.agent = forecast on a universe: training bars drawn a symbol, then a bar of its training rows less the
    target's h (never a target across an offset); each target in its own symbol's volatility; the risk term on
    every member's held-back window; the fold's learner_eval over every member's validation bars, pooled."""
    from foxhunt.agents.forecast.config import ForecastConfig
    from foxhunt.agents.forecast.evaluate import validation_bars
    from foxhunt.agents.forecast.learner import ForecastLearner
    from foxhunt.agents.forecast.target import SQRT_HALF_PI, targets
    from foxhunt.agents.monitor import EpochMonitor

    run, results, pp = train(tmp_path, train={"agent": "forecast", "epochs": 1, "select": "inner", "abstain": False},
                             forecast=TINY_FORECAST, folds={"max_folds": 1})
    r, fold, m = results[0], pp.folds[0], pp.market
    h = r["learner_eval"]["horizon"]
    ev = r["learner_eval"]
    lengths = fold.bounds[fold.members, 3] - fold.bounds[fold.members, 2]
    assert ev["n"] == int((lengths - h).sum()) == validation_bars(m, fold, h).numel()
    assert ev["error_source"] == "held_back" and ev["error_bars"] == sum(n + 1 - h for _, n in pp.inner[0])
    assert -1.0 <= ev["ic_spearman"] <= 1.0 and len(r["symbols"]) == 3
    assert (run / "folds" / "fold_0" / "model.safetensors").is_file()
    # the learner's draws: every member symbol, each bar's target inside its symbol's training rows
    m.set_fold(pp.parts[0])
    learner = ForecastLearner(ForecastConfig(batch=4096, hidden=[8]), m, EpochMonitor(m.device), h=5, seed=3)
    bars = learner.bars().numpy()
    sym = np.searchsorted(m.offsets_host, bars, side="right") - 1
    b = pp.parts[0].bounds
    assert set(sym.tolist()) == set(pp.parts[0].members.tolist())
    assert ((bars >= b[sym, 0]) & (bars + 5 < b[sym, 1])).all()
    # each target is its symbol's: the next 5 log returns over that symbol's training volatility
    rows = torch.as_tensor(bars[:64])
    y = targets(m, rows, 5)
    lr = m.log_return.double()
    want = torch.stack([lr[int(t) + 1:int(t) + 6].sum() for t in rows]) / (
        m.sym_median_abs_return.double()[torch.as_tensor(sym[:64])] * SQRT_HALF_PI * 5 ** 0.5)
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-6)


def test_data_symbols_restricts_the_pooled_universe(tmp_path: Path) -> None:
    p = prepared_universe(tmp_path, data={"symbols": ["AAA", "CCC"]})
    pp = pooled_prepared(p.config, p)
    assert pp.market.symbols == ("AAA", "CCC")
    assert all(f.member.tolist() == [True, True] for f in pp.folds)


@pytest.mark.parametrize("keys,message", [
    ({"train": {"pool": False}}, "train.pool = false trains one agent per symbol (foxhunt.train.per_symbol), not a pooled one"),
    ({"train": {"agent": "forecast"}, "forecast": {"policy": "attention"}},
     "forecast.policy = attention reads bars before each training bar and could reach another symbol's rows"),
    ({"env": {"episode_length": 400}}, "fold 0: symbol BBB trains on 398 bars; env.episode_length needs >= 401 (lower "
                                       "env.episode_length, or raise data.min_train_bars so that short symbols sit the fold out)"),
])
def test_what_pooled_training_does_not_do_is_refused_in_one_line_before_anything_is_built(tmp_path: Path, keys, message) -> None:
    p = prepared_universe(tmp_path, **keys)
    with pytest.raises(ConfigError) as exc:
        pooled_prepared(p.config, p)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_a_poisoned_symbol_changes_no_other_symbols_rows_medians_rewards_or_metrics(tmp_path: Path) -> None:
    """BBB's bar 600 × 1000 in one universe, clean in another: AAA's and CCC's normalisation statistics,
    normalised rows and medians are bitwise the same, a policy's per-bar returns and metrics on their windows
    too, and no episode drawn in one symbol reads another's rows."""
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import ExposurePolicy

    from foxhunt.env import EnvParams, VecTradingEnv
    from foxhunt.universe_market import PooledFold

    clean, poisoned = prepared_universe(tmp_path), prepared_universe(tmp_path, poison="BBB")
    for p in (clean, poisoned):
        p.market.set_fold(PooledFold.of(p.folds[1]))
    a, b = clean.market, poisoned.market
    assert not torch.equal(a.raw_features[a.offsets_host[1]:a.offsets_host[2]], b.raw_features[b.offsets_host[1]:b.offsets_host[2]])
    for s in (0, 2):
        rows = slice(int(a.offsets_host[s]), int(a.offsets_host[s + 1]))
        assert torch.equal(a.features[rows], b.features[rows])
        assert torch.equal(a.sym_mean[s], b.sym_mean[s]) and torch.equal(a.sym_inv_std[s], b.sym_inv_std[s])
        assert a.sym_median_range[s] == b.sym_median_range[s] and a.sym_median_abs_return[s] == b.sym_median_abs_return[s]
    assert a.sym_median_range[1] != b.sym_median_range[1] or a.sym_median_abs_return[1] != b.sym_median_abs_return[1]
    fold = clean.folds[1]  # a trading policy (random exposures) on AAA's and CCC's training and validation rows
    starts = [int(fold.bounds[0, 0]), int(fold.bounds[2, 0]), int(fold.bounds[0, 2]), int(fold.bounds[2, 2])]
    lengths = [300, 300, int(fold.val_len[0]) - 1, int(fold.val_len[2]) - 1]
    x = torch.randint(0, 5, (4, 300), generator=torch.Generator().manual_seed(1)).float() / 2 - 1
    runs = [Backtester(p.market, p.config.env, chunk=32).run(starts, lengths, ExposurePolicy(x), keep_curves=True)
            for p in (clean, poisoned)]
    assert np.array_equal(runs[0].returns, runs[1].returns) and json.dumps(runs[0].metrics) == json.dumps(runs[1].metrics)
    assert np.abs(runs[0].positions).sum() > 0
    env = VecTradingEnv(b, 2048, EnvParams(episode_length=48), seed=2)
    st = env.state.episode_start.numpy()
    sym = np.searchsorted(b.offsets_host, st, side="right") - 1
    assert (st + 48 < b.offsets_host[sym + 1]).all() and set(sym.tolist()) == {0, 1, 2}


def test_a_pooled_universe_collects_through_the_fused_env_step_and_trains(tmp_path: Path) -> None:
    """accel.env_step = "fused" on a pooled universe: the plan keeps it (each env's symbol's medians and starts,
    tests/kernels/test_env_step_fused.py), the collector steps through the kernel, every fold trains and scores."""
    from foxhunt.env.fused import FusedEnvStep

    sections = {"dqn": {**TINY_DQN, "rounds_per_epoch": 2}, "accel": {"env_step": "fused"},
                "train": {"tensorboard": False, "progress": False, "epochs": 1},
                "run": {"out_dir": str(tmp_path / "runs"), "device": "cpu"}}
    p = prepared_universe(tmp_path, **sections)
    runner = UniverseRunner(pooled_prepared(p.config, p))
    assert runner.plan.env_step == "fused" and isinstance(runner.members[0].collector._env_step, FusedEnvStep)
    agents = runner.score_folds()
    assert len(agents) == len(runner.folds) and all(math.isfinite(a.metrics[0]["sharpe"]) for a in agents)
    assert int(runner.members[0].collector.env_steps) > 0


def test_stacked_members_on_a_pooled_universe_collect_as_one_env_bit_for_bit_as_their_own_rounds(tmp_path: Path) -> None:
    """dqn.stack_members on a pooled universe: the members' envs one env of members x envs, whose restarts draw a
    symbol and a start per member from each member's own generator (env/stacked.StackedSampler over the pooled
    map), train exactly what the members' own rounds train."""
    def run(joint: bool) -> tuple[Any, list[Any]]:
        sections = {"dqn": {**TINY_DQN, "hidden": [16, 16], "rounds_per_epoch": 3, "stack_members": True,
                            "joint_rounds": joint},
                    "accel": {"train_step": "fused"}, "env": {"episode_length": 5},  # restarts every few steps
                    "train": {"tensorboard": False, "progress": False, "epochs": 1, "ensemble": 2},
                    "run": {"out_dir": str(tmp_path / f"runs_{joint}"), "device": "cpu"}}
        p = prepared_universe(tmp_path, **sections)
        runner = UniverseRunner(pooled_prepared(p.config, p))
        return runner, runner.score_folds()

    joint, agents_joint = run(True)
    own, agents_own = run(False)
    rounds = joint.lockstep.stacks[0].rounds
    assert getattr(rounds, "__wrapped__", rounds).collection is not None and own.lockstep.stacks[0].rounds is None
    assert int(joint.members[0].collector.env_steps) > 5  # past an episode's end: pooled restarts were drawn
    for a, b in zip(own.members, joint.members):
        sa, sb = a.learner.online.state_dict(), b.learner.online.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
        assert torch.equal(a.env.state.bar, b.env.state.bar)
    assert json.dumps([x.metrics for x in agents_own]) == json.dumps([x.metrics for x in agents_joint])  # NaN included
