"""`foxhunt tune` end to end on a tiny real configuration (training through the walk-forward runner):
two worker processes, then a resumed in-process session; the study directory's outputs; the
hold-out never inside a search fold; best.toml trains as is with `foxhunt train --config`."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from foxhunt.config import load_config
from tests.tiny import tiny_tune_config

CLI = [sys.executable, "-m", "foxhunt.cli"]
pytestmark = pytest.mark.slow


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_tune_runs_workers_resumes_and_writes_an_honest_study(tmp_path: Path) -> None:
    cfg = tiny_tune_config(tmp_path)
    # 100-bar validation windows on 1,800 bars (the tiny config's are 300 on 3,000): a trial's time is mostly its
    # folds' bar-by-bar validation and the hold-out's; the hold-out is the last 360 bars (20 %), fold 0 still
    # trains on more than its 800
    cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 1800\n", 1))
    assert "bars = 1800" in cfg.read_text()
    first = _run(["tune", "--config", str(cfg), "--workers", "2"], tmp_path)
    assert "(new)" in first.stdout
    d = tmp_path / "studies" / "tiny"
    s1 = json.loads((d / "summary.json").read_text())
    assert s1["counts"]["COMPLETE"] + s1["counts"]["PRUNED"] == 3 and s1["this_session"]["workers"] == 2
    # worker output went to files (never to pipes nobody reads while they run): the logs are kept
    assert {p.name for p in d.glob("worker-*")} == {"worker-0.log", "worker-1.log"}

    second = _run(["tune", "--config", str(cfg), "--trials", "4"], tmp_path)  # resume: one more trial
    assert "(resumed)" in second.stdout
    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["COMPLETE"] + s["counts"]["PRUNED"] == 4 and s["counts"]["RUNNING"] == 0
    assert s["this_session"]["trials"] == 1

    rows = list(csv.DictReader((d / "trials.csv").open()))
    assert [int(r["number"]) for r in rows] == [0, 1, 2, 3]
    assert {"param:dqn.lr", "param:dqn.hidden", "fold_0_sharpe", "fold_1_sharpe", "state", "duration_s"} <= set(rows[0])

    # the hold-out: after every search fold, evaluated once for the best trial
    ho = s["holdout"]
    folds = json.loads((Path(ho["run_dir"]) / "folds.json").read_text())
    assert ho["fold"]["val_start"] == ho["cut"] == 1440 and ho["fold"]["val_end"] == 1800
    assert folds[0]["val_start"] == ho["cut"]
    assert s["holdout_evaluations"] >= 1 and (Path(ho["run_dir"]) / "report.html").is_file()
    assert 0.0 <= s["overfitting"]["pbo"]["pbo"] <= 1.0 and 0.0 <= s["overfitting"]["deflated_sharpe"]["dsr"] <= 1.0

    html = (d / "report.html").read_text()
    for title in ("Optimisation history", "Parameter importances", "Parallel coordinates", "Slices", "Hold-out"):
        assert title in html
    assert html.count("data:image/png;base64") >= 3

    best = load_config(d / "best.toml")
    assert best.dqn.lr == pytest.approx(s["best"]["params"]["dqn.lr"])
    assert "[tune]" not in (d / "best.toml").read_text()
    out = _run(["train", "--config", str(d / "best.toml"), "--name", "from-best"], tmp_path)
    assert "validation windows" in out.stdout and (tmp_path / "runs" / "from-best" / "summary.json").is_file()


def test_search_folds_end_before_the_hold_out(tmp_path: Path) -> None:
    from foxhunt.pipeline import prepare_market
    from foxhunt.tune.holdout import holdout_fold, search_folds

    cfg = tiny_tune_config(tmp_path)
    prepared = prepare_market(load_config(cfg))
    folds, cut = search_folds(prepared, 0.2)
    assert cut == 2400 and all(f.val_end <= cut for f in folds)
    h = holdout_fold(folds, cut, prepared.market.n_bars, "expanding")
    assert (h.val_start, h.val_end) == (2400, 3000)
    assert h.train_end == cut - (folds[-1].val_start - folds[-1].train_end)  # the same purge gap
