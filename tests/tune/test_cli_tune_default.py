"""`foxhunt tune` with no study or config argument (the README's first tune command) in a fresh
process: the built-in study (configs/tune-default.toml) on built-in synthetic data, bounded to two
trials, writes its study directory under the working directory (runs/tune/default/): best.toml,
trials.csv, report.html, summary.json; and `foxhunt train --config best.toml` accepts and trains it.
``--set`` shrinks only the work (two search folds of one epoch, as the README's tune command, validated
on 200 bars (the study's are 800); a 5 % hold-out (600 bars): its retrain evaluates bar by bar) and leaves
the built-in study's space and data as they are.

About 20 s on a 2-core CPU (two trials, the hold-out retrain, a one-fold one-epoch train): slow."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from foxhunt.config import load_config
from tests.cli_run import run_ok

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_tune_without_arguments_runs_the_built_in_study_and_writes_its_outputs(tmp_path: Path) -> None:
    repo_runs_before = sorted((ROOT / "runs").rglob("*")) if (ROOT / "runs").exists() else None
    out = run_ok(tmp_path, "tune", "--trials", "2", "--set", "folds.max_folds=2", "--set", "train.epochs=1",
                 "--set", "tune.holdout=0.05", "--set", "folds.val=200").stdout
    assert "study default (new)" in out and "report:" in out
    d = tmp_path / "runs" / "tune" / "default"

    rows = list(csv.DictReader((d / "trials.csv").open()))
    assert [int(r["number"]) for r in rows] == [0, 1] and {r["state"] for r in rows} <= {"COMPLETE", "PRUNED"}
    assert {"param:dqn.lr", "param:dqn.gamma", "param:dqn.eps_decay_steps"} <= set(rows[0])

    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["COMPLETE"] + s["counts"]["PRUNED"] == 2 and s["counts"]["RUNNING"] == 0
    html = (d / "report.html").read_text()
    assert "Optimisation history" in html and "Hold-out" in html

    best = load_config(d / "best.toml")
    assert best.dqn.lr == pytest.approx(s["best"]["params"]["dqn.lr"])
    train = run_ok(tmp_path, "train", "--config", str(d / "best.toml"), "--folds", "1", "--epochs", "1", "--name", "from-best")
    assert "validation windows" in train.stdout and (tmp_path / "runs" / "from-best" / "summary.json").is_file()

    # everything went under the working directory, nothing into the repository
    assert (sorted((ROOT / "runs").rglob("*")) if (ROOT / "runs").exists() else None) == repo_runs_before
