"""env.decision_interval and train.decision_grid through the walk-forward runner and the CLI, as users
run them: a model trained at k records k and is backtested at k (``foxhunt backtest --run`` and
``--model`` reproduce the run's validation), a grid keeps each fold's best interval group, and a run
at k killed in its first fold and resumed in a new process ends as the uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run_cli
from tests.tiny import shorter
from tests.train.conftest import tiny_config
from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted


def _with(path: Path, section: str, lines: str) -> Path:
    text = path.read_text()
    assert f"[{section}]\n" in text
    path.write_text(text.replace(f"[{section}]\n", f"[{section}]\n{lines}\n", 1))
    return path


@pytest.fixture(scope="module")
def run_at_k(tmp_path_factory) -> tuple[Path, Path]:
    """(folder, config): a run at k = 4 (``runs/ref``, a fresh process), done once and shared by the
    backtest test and the kill-resume test (its uninterrupted reference): two epochs a fold, a
    checkpoint each (the first inside fold 0)."""
    d = tmp_path_factory.mktemp("k4")
    cfg = _with(shorter(tiny_config(d, epochs=2, every=1)), "env", "decision_interval = 4")  # 1,800 bars, 100-bar validation
    res = run_cli(d, "train", "--config", str(cfg), "--name", "ref")
    assert res.returncode == 0, res.stdout + res.stderr
    return d, cfg


def test_a_run_at_k_saves_models_that_record_k_and_backtest_run_and_model_reproduce_its_validation(run_at_k, tmp_path):
    run = run_at_k[0] / "runs" / "ref"
    from foxhunt.agents.model_io import load_model

    for k in (0, 1):
        _, _, meta = load_model(run / "folds" / f"fold_{k}" / "model.safetensors")
        assert meta.env["decision_interval"] == 4
    res = run_cli(tmp_path, "backtest", "--run", str(run))
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads((run / "backtest" / "metrics.json").read_text())
    agents = [r for r in rows if r["label"] == "agent"]
    assert len(agents) == 2
    for r in agents:
        saved = json.loads((run / "folds" / f"fold_{r['window']}" / "metrics.json").read_text())["agent"]
        for key in ("sharpe", "total_return", "trade_count", "turnover", "bars"):
            assert r[key] == saved[key], (r["window"], key)
    # the same model backtested at k = 1 (its network acting every bar) trades differently: k is used
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import GreedyPolicy
    from foxhunt.config import load_config
    from foxhunt.pipeline import prepare_market

    market = prepare_market(load_config(run / "config.toml")).market
    net, norm, meta = load_model(run / "folds" / "fold_1" / "model.safetensors")
    fold = meta.extra["fold"]
    bt = Backtester(market, load_config(run / "config.toml").env, cuda_graphs=False)
    from foxhunt.folds import FoldRange

    market.set_fold(FoldRange(**meta.extra["trained_on"]))
    n = fold["val_end"] - fold["val_start"] - 1
    at_k = bt.run([fold["val_start"]], [n], GreedyPolicy(net, 4)).metrics[0]
    assert at_k["sharpe"] == pytest.approx(agents[1]["sharpe"], rel=1e-6, abs=1e-9)


def test_a_decision_grid_keeps_each_folds_best_interval_group_and_its_model_records_that_k(tmp_path):
    from foxhunt.agents.model_io import load_model

    cfg = _with(shorter(tiny_config(tmp_path, epochs=2, every=0, select="inner")), "train", "ensemble = 2\ndecision_grid = [1, 4]")
    res = run_cli(tmp_path, "train", "--config", str(cfg), "--name", "grid")
    assert res.returncode == 0, res.stdout + res.stderr
    run = tmp_path / "runs" / "grid"
    summary = json.loads((run / "summary.json").read_text())
    assert len(summary["folds"]) == 2
    for f in summary["folds"]:
        sel = json.loads((run / "folds" / f"fold_{f['fold']}" / "metrics.json").read_text())["selection"]
        rows = sel["gamma_groups"]
        assert [(r["decision_interval"], r["members"]) for r in rows] == [(1, [0]), (4, [1])]
        best = max(rows, key=lambda r: (r["mean_inner_sharpe"], -r["members"][0]))
        assert sel["decision_interval"] == best["decision_interval"] == f["decision_interval"]
        assert f"k {sel['decision_interval']}" in res.stdout
        _, _, meta = load_model(run / "folds" / f"fold_{f['fold']}" / "model.safetensors")
        assert meta.env["decision_interval"] == sel["decision_interval"]


def test_decision_grid_settings_are_checked_with_one_line_each():
    from foxhunt.train.config import TrainConfig

    with pytest.raises(ValueError, match="decision_grid needs select"):
        TrainConfig(decision_grid=[1, 4], ensemble=2)
    with pytest.raises(ValueError, match=r"decision_grid has 2 intervals × 2 discounts but ensemble = 3"):
        TrainConfig(decision_grid=[1, 4], gamma_grid=[0.5, 0.9], ensemble=3, select="inner")
    with pytest.raises(ValueError, match="the intervals must differ"):
        TrainConfig(decision_grid=[4, 4], ensemble=2, select="inner")


@pytest.mark.slow
def test_a_run_at_k_killed_in_its_first_fold_and_resumed_gives_the_uninterrupted_result(run_at_k):
    # the uninterrupted reference is the module's run at k = 4 (two epochs a fold: the first checkpoint,
    # epoch 1 of fold 0, is inside the fold, as with more)
    d, cfg = run_at_k
    killed_in_fold_0_then_resumed_equals_uninterrupted(cfg, d, reference=False)
