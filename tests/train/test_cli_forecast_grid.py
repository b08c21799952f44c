"""The forecast learner end to end with ``train.decision_grid = [1, 4]`` (select = inner, two members)
and its own evaluation where users look, in fresh processes: each fold records the interval chosen on
the held-back window and the risk term's held-back error; ``foxhunt backtest --run`` reproduces the
folds and prints each fold's IC and hit rate read back from its model (equal to the run's
``learner_eval``); ``foxhunt backtest --model`` prints them for its window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run_ok
from tests.train.test_cli_train_forecast import forecast_config


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory) -> tuple[Path, Path, str]:
    """(work folder, run directory, train's stdout) of a two-fold, two-epoch forecast run over k ∈ {1, 4}."""
    work = tmp_path_factory.mktemp("grid")
    cfg = forecast_config(work, epochs=2, every=0, select="inner")
    cfg.write_text(cfg.read_text().replace("[train]\n", "[train]\nensemble = 2\ndecision_grid = [1, 4]\n", 1))
    out = run_ok(work, "train", "--config", str(cfg), "--name", "g", "--set", "forecast.risk_aversion=0.5").stdout
    return work, work / "runs" / "g", out


def test_a_forecast_run_over_a_decision_grid_records_each_folds_interval_and_its_models_backtest(grid_run):
    from foxhunt.agents.model_io import load_model

    work, run, out = grid_run
    summary = json.loads((run / "summary.json").read_text())
    assert len(summary["folds"]) == 2
    for f in summary["folds"]:
        m = json.loads((run / "folds" / f"fold_{f['fold']}" / "metrics.json").read_text())
        sel, ev = m["selection"], m["learner_eval"]
        assert [(r["decision_interval"], r["members"]) for r in sel["gamma_groups"]] == [(1, [0]), (4, [1])]
        k = sel["decision_interval"]
        assert k in (1, 4) and f["decision_interval"] == k and f"k {k}" in out
        assert ev["horizon"] == k and ev["error_source"] == "held_back"  # the chosen member's horizon h = k
        _, _, meta = load_model(run / "folds" / f"fold_{f['fold']}" / "model.safetensors")
        assert meta.env["decision_interval"] == k and meta.extra["forecast_horizon"] == k
    res = run_ok(work, "backtest", "--run", str(run), "--set", "accel.eval=torch")
    rows = [r for r in json.loads((run / "backtest" / "metrics.json").read_text()) if r["label"] == "agent"]
    for r in rows:
        saved = json.loads((run / "folds" / f"fold_{r['window']}" / "metrics.json").read_text())["agent"]
        assert r["total_return"] == pytest.approx(saved["total_return"], rel=1e-9, abs=1e-12)
    # the IC and hit rate read back from each fold's model are the run's own (the same forecast, bars and returns)
    read = json.loads((run / "backtest" / "learner_eval.json").read_text())
    for rec in read:
        ev = json.loads((run / "folds" / f"fold_{rec['fold']}" / "metrics.json").read_text())["learner_eval"]
        assert (rec["horizon"], rec["n"]) == (ev["horizon"], ev["n"])
        assert rec["ic_spearman"] == pytest.approx(ev["ic_spearman"], abs=1e-3)
        assert rec["hit_rate"] == pytest.approx(ev["hit_rate"], abs=2.0 / ev["n"])
        assert f"fold {rec['fold']}: forecast IC {rec['ic_spearman']:+.3f} ({rec['horizon']}-bar" in res.stdout.replace(" (Spearman, ", " (")


def test_backtest_model_prints_the_forecast_ic_and_hit_rate_of_its_window(grid_run):
    work, run, _ = grid_run
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.data.writer import write_bars

    bars = write_bars(generate_bars(500, seed=7), work / "bars.parquet")  # synthetic minute bars: 197 after the warm-up
    out_dir = work / "bt_model"
    res = run_ok(work, "backtest", "--model", str(run / "folds" / "fold_1" / "model.safetensors"), "--data", str(bars),
                 "--out", str(out_dir), "--device", "cpu", "--cache-dir", str(work / "c2"))
    (rec,) = json.loads((out_dir / "learner_eval.json").read_text())
    window = json.loads((out_dir / "metrics.json").read_text())[0]
    assert rec["window"] == 0 and rec["kind"] == "forecast" and rec["n"] == window["bars"] + 1 - rec["horizon"]
    assert -1 <= rec["ic_spearman"] <= 1 and 0 <= rec["hit_rate"] <= 1
    assert f"window 0: forecast IC {rec['ic_spearman']:+.3f} (Spearman, {rec['horizon']}-bar) hit {rec['hit_rate']:.1%}" in res.stdout
