"""`foxhunt train` with train.agent = "forecast" in fresh processes: end to end (the forecast's IC and
hit rate in each fold's metrics.json, its fold line and summary.json), model files that `foxhunt
backtest` runs (--run, --model), a SIGKILL in fold 0 and
--resume to the uninterrupted result, the configuration rules as one-line errors, and on the built-in
daily market (configs/train-forecast.toml, its planted next-bar edge) a model above buy-and-hold in
every fold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import assert_refused, run_ok
from tests.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[2]

FORECAST_TOML = """\
agent = "forecast"
[forecast]
batch = 64
steps_per_epoch = 2
hidden = [16, 16]
"""
"""Appended to the tiny config's [train] section (its first line) and after it: the forecast learner, tiny."""


def forecast_config(directory: Path, *, extra: str = "", **kw) -> Path:
    """tests/tiny.py's configuration with the forecast learner (factored actions: its market orders)."""
    path = tiny_config(directory, extra=FORECAST_TOML + extra, **kw)
    path.write_text(path.read_text().replace('action_mode = "exposure"', 'action_mode = "factored"'))
    return path


def _by_fold(path: Path) -> dict:
    return {(r["window"], r["label"]): r for r in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def forecast_run(tmp_path_factory) -> tuple[Path, Path, str]:
    """(folder, config, console output): the forecast learner's run ``runs/ref`` in a fresh process, done once
    and shared by the end-to-end test and the kill-resume test (its uninterrupted reference). Two epochs a
    fold, a checkpoint each (the first inside fold 0), decisions every 2 bars, inner selection on a 10 %
    held-back window (half the default): each epoch's selection scores half the bars."""
    d = tmp_path_factory.mktemp("forecast")
    # no HTML report: the IC is checked in the console and summary.json
    cfg = forecast_config(d, epochs=2, every=1, select="inner")
    cfg.write_text(cfg.read_text().replace("[env]\n", "[env]\ndecision_interval = 2\n", 1))
    cfg.write_text(cfg.read_text().replace('select = "inner"\n', 'select = "inner"\ninner_fraction = 0.1\n', 1))
    out = run_ok(d, "train", "--config", str(cfg), "--name", "ref").stdout
    return d, cfg, out


@pytest.mark.slow
def test_foxhunt_train_runs_the_forecast_learner_reports_its_ic_and_backtest_runs_its_models(forecast_run, tmp_path):
    d, _, out = forecast_run
    run = d / "runs" / "ref"
    assert 'agent = "forecast"' in (run / "config.toml").read_text()
    plan = json.loads((run / "accel.json").read_text())
    assert plan["agent"] == "forecast" and plan["env_step"] == plan["acting"] == plan["train_step"] == "torch"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(f, e) for f in (0, 1) for e in range(2)]
    assert {"forecast_mse", "target_ms", "train_r2", "inner_sharpe"} <= set(rows[0])
    assert all(r["updates"] == 2 and r["transitions"] == 2 * 64 for r in rows)
    summary = json.loads((run / "summary.json").read_text())
    for k in (0, 1):
        ev = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())["learner_eval"]
        assert ev["kind"] == "forecast" and ev["horizon"] == 2 and ev["n"] == 300 - 2  # the validation bars whose next 2 bars are in it
        assert -1 <= ev["ic_spearman"] <= 1 and -1 <= ev["ic_pearson"] <= 1 and 0 <= ev["hit_rate"] <= 1
        assert summary["folds"][k]["learner_eval"] == ev
        assert f"forecast IC {ev['ic_spearman']:+.3f} (Spearman, 2-bar) hit {ev['hit_rate']:.1%}" in out
    from foxhunt.agents.model_io import load_model

    _, _, meta = load_model(run / "folds" / "fold_1" / "model.safetensors")
    assert meta.extra["agent"] == "forecast" and meta.n_actions == 45 and meta.env["action_mode"] == "factored"
    # --run: each fold's model on its validation window reproduces the run's fold metrics (the fused kernel
    # runs the same network: tests/agents/test_forecast_execution.py, in the Triton interpreter)
    run_ok(tmp_path, "backtest", "--run", str(run), "--device", "cpu", "--set", "accel.eval=torch", "--out", str(tmp_path / "bt_torch"))
    torch_rows = _by_fold(tmp_path / "bt_torch" / "metrics.json")
    for k in (0, 1):
        saved = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())["agent"]
        assert torch_rows[(k, "agent")]["total_return"] == pytest.approx(saved["total_return"], rel=1e-9, abs=1e-12)
    # --model on a bar file
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.data.writer import write_bars

    bars = write_bars(generate_bars(500, seed=7), tmp_path / "bars.parquet")  # minute bars: 197 after the warm-up
    out_dir = tmp_path / "bt_model"
    run_ok(tmp_path, "backtest", "--model", str(run / "folds" / "fold_1" / "model.safetensors"), "--data", str(bars), "--out",
           str(out_dir), "--device", "cpu", "--cache-dir", str(tmp_path / "c"))
    assert json.loads((out_dir / "metrics.json").read_text())[0]["label"] == "model"


@pytest.mark.slow
def test_a_killed_forecast_run_resumes_to_the_uninterrupted_result(forecast_run):
    from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted

    # two epochs a fold: the first checkpoint (epoch 1 of fold 0) is inside the fold, as with more; the
    # uninterrupted reference is the module's run of the same configuration
    d, cfg, _ = forecast_run
    killed_in_fold_0_then_resumed_equals_uninterrupted(cfg, d, reference=False)


@pytest.mark.parametrize("sets,line", [
    (['env.action_mode="exposure"'], "train.agent = 'forecast' trades market orders of normal urgency, which env.action_mode = "
     "'exposure' would route by spread and volatility; set env.action_mode = \"factored\""),
    (["forecast.horizon=1999"], "forecast.horizon = 1999 bars (0: env.decision_interval) leaves no training bar with a target "
     "inside fold 0's 2000 training bars (must be <= 1998)"),
], ids=["exposure-mode", "horizon"])
def test_the_forecast_learners_rules_are_one_line_errors_that_write_nothing(tmp_path, sets, line):
    work = tmp_path / "w"  # the config and its runs/ inside, the feature cache (which may be written) outside
    cfg = forecast_config(work, epochs=1, every=0, cache=tmp_path / "cache")
    args = ["train", "--config", str(cfg)] + [a for s in sets for a in ("--set", s)]
    assert_refused(work, args, line)


@pytest.mark.parametrize("sets,line", [
    (["env.kelly=true"], "train.agent = 'forecast' sizes positions by equity alone (its cost band prices a level, not a Kelly "
     "multiple of it); set env.kelly = false"),
    (["train.gamma_grid=[0.5, 0.9]", 'train.select="inner"', "train.ensemble=2"], "train.gamma_grid spreads a discount, and train.agent = 'forecast' has none; leave "
     "train.gamma_grid empty"),
    (['forecast.loss="quantile"', "forecast.quantiles=[0.1, 0.9]"], "tiny.toml + overrides: forecast: loss = 'quantile' trades "
     "the median: quantiles = [0.1, 0.9] must contain 0.5"),
    (["forecast.quantiles=[0.5, 0.3]"], "tiny.toml + overrides: forecast: quantiles = [0.5, 0.3] must be strictly increasing "
     "inside (0, 1)"),
], ids=["kelly", "gamma-grid", "quantile-median", "quantile-order"])
def test_the_forecast_learners_other_rules_are_one_line_config_errors(tmp_path, sets, line):
    """The same rules in this process: the configuration's loader and the learner's checks (the runner calls
    them before anything is allocated, as the fresh-process cases above show)."""
    from foxhunt.agents import registry
    from foxhunt.config import load_config
    from foxhunt.errors import ConfigError
    from foxhunt.folds import FoldRange

    cfg_path = forecast_config(tmp_path, epochs=1, every=0)
    line = line.replace("tiny.toml", str(cfg_path))
    with pytest.raises(ConfigError) as err:
        cfg = load_config(cfg_path, overrides=sets)
        registry.of(cfg).check(cfg, [FoldRange(0, 0, 2_000, 2_010, 2_300)])
    assert str(err.value) == line


@pytest.mark.slow
def test_on_the_built_in_daily_market_the_forecast_learner_beats_buy_and_hold_in_every_fold(tmp_path):
    """configs/train-forecast.toml (the built-in synthetic daily bars with their planted next-bar edge),
    shrunk to its last two folds and three epochs: the traded forecast's validation Sharpe is above
    buy-and-hold's in both, and the forecast's IC is positive."""
    sets = ["folds.max_folds=2", "train.epochs=3", "train.report=false", 'train.select="last"', "train.checkpoint_every=0",
            f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}", f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}"]
    run_ok(tmp_path, "train", "--config", str(ROOT / "configs" / "train-forecast.toml"), "--name", "d",
           *[a for s in sets for a in ("--set", s)])
    folds = json.loads((tmp_path / "runs" / "d" / "summary.json").read_text())["folds"]
    assert len(folds) == 2
    for f in folds:
        assert f["agent_sharpe"] > f["buy_and_hold_sharpe"] and f["agent_sharpe"] > 0.5, folds
        assert f["learner_eval"]["ic_spearman"] > 0.05, folds
