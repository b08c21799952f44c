"""`foxhunt train` with dqn.head = "branching" in fresh processes: the factored run trains, saves model
files that record the head, and `foxhunt backtest --run` replays them to the run's own fold metrics;
the branching head on the 5 exposure actions is one line, exit 2, no run directory."""

from __future__ import annotations

import json

import pytest

from foxhunt.agents.model_io import load_model
from foxhunt.agents.networks import BranchingQNet
from tests.cli_run import run_cli
from tests.tiny import tiny_config


def test_a_branching_run_saves_branching_models_that_backtest_run_replays(tmp_path):
    cfg = tiny_config(tmp_path, epochs=2, every=0)
    res = run_cli(tmp_path, "train", "--config", str(cfg), "--name", "b", "--set", 'env.action_mode="factored"',
                  "--set", 'dqn.head="branching"')
    assert res.returncode == 0, res.stdout + res.stderr
    run = tmp_path / "runs" / "b"
    assert 'head = "branching"' in (run / "config.toml").read_text()
    net, _, meta = load_model(run / "folds" / "fold_1" / "model.safetensors")
    assert isinstance(net, BranchingQNet) and meta.head == "branching" and meta.n_actions == 45
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["updates"] > 0 and r["maxq_count"] > 0 for r in rows)
    res = run_cli(tmp_path, "backtest", "--run", str(run), "--device", "cpu")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "eval=torch" in res.stdout
    by_fold = {(r["window"], r["label"]): r for r in json.loads((run / "backtest" / "metrics.json").read_text())}
    for k in (0, 1):
        saved = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())["agent"]
        assert by_fold[(k, "agent")]["total_return"] == pytest.approx(saved["total_return"], rel=1e-9, abs=1e-12)


def test_the_branching_head_on_the_exposure_actions_is_one_line_exit_2_and_creates_no_run(tmp_path):
    cfg = tiny_config(tmp_path)  # env.action_mode = "exposure"
    res = run_cli(tmp_path, "train", "--config", str(cfg), "--name", "x", "--set", 'dqn.head="branching"')
    assert (res.returncode, res.stderr) == (2, "error: dqn.head = 'branching' needs the 45 factored actions "
                                               "(env.action_mode = 'factored'); this env has 5\n"), res.stdout + res.stderr
    assert not (tmp_path / "runs").exists()  # refused before the run directory (the feature cache may be built)
