"""bench/abstain_table.py: what each abstention bar would have scored, from finished run folders
(per fold: the members' mean held-back Sharpe and SE, and the ensemble's validation Sharpe, read from
the agent's metrics where the fold traded and from ``all_members`` where it was flat)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.abstain_table import fold_row, run_table

ROOT = Path(__file__).resolve().parents[1]


def _fold(mean_inner: float, se: float, ensemble: float | None, flat: bool) -> dict:
    rec = {"z": 2.0, "standard_error": se, "bar": 2 * se, "inner_sharpes": [mean_inner], "mean_inner_sharpe": mean_inner,
           "flat": flat}
    if flat:
        rec["all_members"] = {"sharpe": ensemble}
    return {"agent": {"sharpe": 0.0 if flat else ensemble}, "selection": {"abstain": rec}}


def _run(root: Path, folds: list[dict]) -> Path:
    run = root / "runs" / "sc"
    for k, fold in enumerate(folds):
        (run / "folds" / f"fold_{k}").mkdir(parents=True)
        (run / "folds" / f"fold_{k}" / "metrics.json").write_text(json.dumps(fold))
    (run / "metrics.jsonl").write_text("")
    return run


def test_a_fold_reads_the_ensemble_score_from_the_agent_or_from_what_abstention_replaced():
    assert fold_row(_fold(1.0, 0.25, 0.8, flat=False)) == (4.0, 0.8)
    assert fold_row(_fold(0.2, 0.25, -0.6, flat=True)) == (0.8, -0.6)
    assert fold_row(_fold(0.2, 0.25, None, flat=True)) == (0.8, 0.0)  # never traded: flat, as the scorecard counts it


def test_the_table_makes_a_fold_flat_where_its_mean_is_at_or_below_the_bar(tmp_path):
    run = _run(tmp_path, [_fold(1.0, 0.25, 0.8, False), _fold(0.2, 0.25, -0.6, True), _fold(0.5, 0.25, 0.3, False)])
    t = run_table(run, (0.0, 2.0, 4.0))
    assert t is not None and t["folds"] == 3 and t["mean_inner_z"] == [4.0, 0.8, 2.0]
    assert t["without"]["sharpe"] == pytest.approx((0.8 - 0.6 + 0.3) / 3)
    assert t["by_z"]["0"] == {"sharpe": pytest.approx((0.8 - 0.6 + 0.3) / 3), "fold_sharpes": [0.8, -0.6, 0.3], "flat_folds": 0}
    assert t["by_z"]["2"] == {"sharpe": pytest.approx(0.8 / 3), "fold_sharpes": [0.8, 0.0, 0.0], "flat_folds": 2}
    assert t["by_z"]["4"]["flat_folds"] == 3 and t["by_z"]["4"]["sharpe"] == 0.0


def test_the_command_reads_every_run_under_a_folder_and_skips_runs_without_abstention(tmp_path):
    _run(tmp_path / "a", [_fold(1.0, 0.25, 0.4, False)])
    plain = tmp_path / "b" / "runs" / "x"
    (plain / "folds" / "fold_0").mkdir(parents=True)
    (plain / "folds" / "fold_0" / "metrics.json").write_text(json.dumps({"agent": {"sharpe": 1.0}, "selection": {"epoch": 3}}))
    (plain / "metrics.jsonl").write_text("")
    out = subprocess.run([sys.executable, "-m", "bench.abstain_table", str(tmp_path), "--z", "0,2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    table = json.loads(out.stdout)
    assert list(table) == ["a/runs/sc"] and set(table["a/runs/sc"]["by_z"]) == {"0", "2"}
    assert "a/runs/sc: without +0.40" in out.stderr
