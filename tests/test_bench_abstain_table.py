"""bench/abstain_table.py: what each abstention bar would have scored, from runs trained with
train.abstain_ablation (per fold: members' held-back Sharpes, the window's SE, and the validation
Sharpe of the top 1 … K members' ensemble)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.abstain_table import fold_score, run_table

ROOT = Path(__file__).resolve().parents[1]


def _record(inner: list[float | None], se: float, by: list[float]) -> dict:
    order = sorted(range(len(inner)), key=lambda k: -(inner[k] if inner[k] is not None else -1e300))
    return {"inner_sharpes": inner, "standard_error": se, "bar": 2 * se, "z": 2.0,
            "by_members": [{"members": order[:j + 1], "sharpe": s} for j, s in enumerate(by)]}


def _run(root: Path, records: list[dict]) -> Path:
    run = root / "runs" / "sc"
    for k, rec in enumerate(records):
        (run / "folds" / f"fold_{k}").mkdir(parents=True)
        (run / "folds" / f"fold_{k}" / "metrics.json").write_text(json.dumps({"selection": {"abstain": rec}}))
    (run / "metrics.jsonl").write_text("")
    return run


def test_a_bar_keeps_the_members_above_it_and_scores_the_matching_top_j_row():
    rec = _record([0.9, 0.2, 1.5, None], 0.25, [1.1, 1.0, 0.7, 0.6])
    assert fold_score(rec, 0.0) == (0.7, 3)  # 1.5, 0.9, 0.2 are above 0; None never votes
    assert fold_score(rec, 2.0) == (1.0, 2)  # bar 0.5: 1.5 and 0.9
    assert fold_score(rec, 4.0) == (1.1, 1)  # bar 1.0: only 1.5
    assert fold_score(rec, 8.0) == (0.0, 0)  # bar 2.0: nobody, the fold is flat


def test_the_table_averages_folds_per_bar_and_counts_flat_folds(tmp_path):
    run = _run(tmp_path, [_record([0.9, 0.2], 0.25, [1.0, 0.4]), _record([0.1, 0.3], 0.25, [-0.5, -0.2])])
    t = run_table(run, (0.0, 2.0))
    assert t is not None and t["folds"] == 2 and t["members"] == 2
    assert t["all_members"]["sharpe"] == pytest.approx((0.4 - 0.2) / 2)
    assert t["by_z"]["0"]["sharpe"] == pytest.approx((0.4 - 0.2) / 2) and t["by_z"]["0"]["flat_folds"] == 0
    assert t["by_z"]["2"] == {"sharpe": pytest.approx(0.5), "fold_sharpes": [1.0, 0.0], "flat_folds": 1, "mean_voters": 0.5}
    assert t["inner_z"] == [[3.6, 0.8], [0.4, 1.2]]


def test_the_command_reads_every_run_under_a_folder_and_skips_runs_without_ablation(tmp_path):
    _run(tmp_path / "a", [_record([0.9, 0.2], 0.25, [1.0, 0.4])])
    plain = tmp_path / "b" / "runs" / "x"
    (plain / "folds" / "fold_0").mkdir(parents=True)
    (plain / "folds" / "fold_0" / "metrics.json").write_text(json.dumps({"selection": {"epoch": 3}}))
    (plain / "metrics.jsonl").write_text("")
    out = subprocess.run([sys.executable, "-m", "bench.abstain_table", str(tmp_path), "--z", "0,2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    table = json.loads(out.stdout)
    assert list(table) == ["a/runs/sc"] and set(table["a/runs/sc"]["by_z"]) == {"0", "2"}
    assert "a/runs/sc: all +0.40" in out.stderr
