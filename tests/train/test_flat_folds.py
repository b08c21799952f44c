"""A flat fold is a normal result: every consumer of a fold's metrics row shows it as flat and the run
exits 0 (issue 27). Every case runs `foxhunt` in a fresh process, as a user does.

A tiny run's held-back window (a few hundred minute bars) can never clear the abstention bar, so with
``train.select = "inner"`` and ``train.abstain`` every fold is flat; a scripted held-back Sharpe
(``_SCRIPT``, patched into the fresh process before the CLI starts) makes fold 0 trade and fold 1
flat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import tiny_config

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "400"}  # wide: console lines are checked whole

# Patches applied in the fresh process before `foxhunt.cli.main()` runs.
_SOME_FLAT = """
from foxhunt.train import runner
def _window_sharpe(self, start, steps, policy):
    return 1000.0 if len(self._train_part) == 1 else 0.0  # fold 0's held-back window clears any bar
runner.WalkForwardRunner._window_sharpe = _window_sharpe
"""
_REPORT_FAILS = """
import foxhunt.train.report as report
def _boom(run_dir, title=None):
    raise RuntimeError("boom")
report.write_report = _boom
"""


def foxhunt(cwd: Path, *args: str, patch: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys\n{patch}\nfrom foxhunt.cli import main\nsys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=600)


def _short_val(cfg: Path) -> Path:
    """100-bar validation windows on 1,800 bars (the tiny config's are 300 on 3,000: each window is backtested
    bar by bar, a flat fold's twice; fold 0 still trains on more than its 800 bars); the held-back window,
    which makes the folds flat, is part of the training bars (shorter here: its noise bar is higher still)."""
    cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 1800\n", 1))
    assert "bars = 1800" in cfg.read_text()
    return cfg


def _train(tmp_path: Path, name: str, patch: str = "") -> tuple[subprocess.CompletedProcess[str], Path]:
    cfg = _short_val(tiny_config(tmp_path, epochs=1, every=0, select="inner", abstain=True, report=True))
    return foxhunt(tmp_path, "train", "--config", str(cfg), "--name", name, patch=patch), tmp_path / "runs" / name


def _fold_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("fold ") and ": agent " in line]


def _no_nan(text: str) -> None:
    assert "nan" not in text.lower().replace("nanosec", ""), text
    assert "Traceback" not in text, text


@pytest.fixture(scope="module")
def flat_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One tiny run whose every fold is flat (shared: training it is most of each test's time)."""
    return _train(tmp_path_factory.mktemp("flat"), "flat")


@pytest.mark.slow
def test_a_run_whose_every_fold_is_flat_exits_0_and_says_flat_in_console_summary_and_report(flat_run):
    res, run = flat_run
    tmp_path = run.parents[1]
    assert res.returncode == 0, res.stdout + res.stderr
    _no_nan(res.stdout + res.stderr)
    lines = _fold_lines(res.stdout)
    assert len(lines) == 2
    for k, line in enumerate(lines):
        assert line.startswith(f"fold {k}: agent flat (no position, Sharpe –) return +0.00% | buy&hold Sharpe "), line
        assert "| flat: the agent's held-back Sharpe " in line and "is within the noise bar" in line
        assert "; the agent would have scored " in line  # what the flat model replaced
    assert "2 of 2 folds flat (no position: Sharpe 0, nothing risked)" in res.stdout
    summary = json.loads((run / "summary.json").read_text())
    for row in summary["folds"]:
        assert row["agent_flat"] is True and row["agent_sharpe"] == 0.0 and row["abstained"] is True
        assert "ensemble_sharpe" in row
    page = (run / "report.html").read_text()
    assert "<td>flat</td>" in page and "flat (held-back" in page and "would have scored" in page
    assert not (run / "report_error.txt").exists()
    # --resume of the finished run rebuilds summary and report from the files (JSON nulls, not NaN floats)
    again = foxhunt(tmp_path, "train", "--resume", str(run))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already complete" in again.stdout and "2 of 2 folds flat" in again.stdout
    _no_nan(again.stdout + again.stderr)


@pytest.mark.slow
def test_a_run_where_some_folds_are_flat_shows_each_fold_as_it_is_and_a_failing_report_loses_no_result(tmp_path):
    """Fold 0 trades and fold 1 is flat (scripted held-back Sharpes), and writing report.html fails:
    exit 1 with one line that says what failed, every fold's files and summary.json are there, the
    console shows each fold as it is; --resume without the fault rebuilds the report."""
    res, run = _train(tmp_path, "some", patch=_SOME_FLAT + _REPORT_FAILS)
    assert res.returncode == 1, res.stdout + res.stderr
    _no_nan(res.stdout + res.stderr)
    first, second = _fold_lines(res.stdout)
    assert first.startswith("fold 0: agent Sharpe ") and "| flat:" not in first
    assert second.startswith("fold 1: agent flat (no position, Sharpe –) return +0.00%")
    assert "1 of 2 folds flat" in res.stdout and "validation windows" in res.stdout  # the results table is still printed
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "report.html: the report could not be written (RuntimeError: boom)" in err[0]
    assert "the run is complete" in err[0] and "report_error.txt" in err[0] and "--resume" in err[0]
    for k in (0, 1):
        assert (run / "folds" / f"fold_{k}" / "metrics.json").is_file()
        assert (run / "folds" / f"fold_{k}" / "model.safetensors").is_file()
    folds = json.loads((run / "summary.json").read_text())["folds"]
    assert [f["agent_flat"] for f in folds] == [False, True] and [f["abstained"] for f in folds] == [False, True]
    assert "RuntimeError: boom" in (run / "report_error.txt").read_text()
    assert not (run / "report.html").exists()
    fixed = foxhunt(tmp_path, "train", "--resume", str(run))  # without the fault: the report is rebuilt
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (run / "report.html").is_file() and not (run / "report_error.txt").exists()
    page = (run / "report.html").read_text()
    assert "trades (held-back" in page and "flat (held-back" in page


@pytest.mark.slow
def test_foxhunt_backtest_of_a_flat_run_and_of_its_flat_model_reads_flat(flat_run):
    res, run = flat_run
    tmp_path = run.parents[1]
    assert res.returncode == 0, res.stderr
    bt = foxhunt(tmp_path, "backtest", "--run", str(run))
    assert bt.returncode == 0, bt.stdout + bt.stderr
    _no_nan(bt.stdout + bt.stderr)
    assert bt.stdout.count("│ flat ") >= 2  # the agent rows of both folds
    assert "<td>flat</td>" in (run / "backtest" / "report.html").read_text()
    model = run / "folds" / "fold_0" / "model.safetensors"
    cfg = tmp_path / "tiny.toml"
    # 8 windows of the built-in sample (stepped in lockstep: a quarter of 2 windows' serial length)
    one = foxhunt(tmp_path, "backtest", "--model", str(model), "--config", str(cfg), "--windows", "8", "--out", str(tmp_path / "bt"))
    assert one.returncode == 0, one.stdout + one.stderr
    _no_nan(one.stdout + one.stderr)
    assert one.stdout.count("│ flat ") == 8  # every window's model row (the run's path says flat too)


@pytest.mark.slow
def test_a_tune_study_whose_every_fold_is_flat_scores_it_as_zero_and_writes_its_report(tmp_path):
    """Every trial's folds are flat (abstention on a tiny held-back window): the objective counts a
    flat fold as Sharpe 0 (no NaN score, no failed trial), the hold-out line reads flat, the study's
    report.html is written, exit 0."""
    from tests.tiny import tiny_tune_config

    cfg = _short_val(tiny_tune_config(tmp_path))
    cfg.write_text(cfg.read_text().replace("[train]\n", '[train]\nselect = "inner"\nabstain = true\n', 1))
    res = foxhunt(tmp_path, "tune", "--config", str(cfg), "--trials", "1")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    d = tmp_path / "studies" / "tiny"
    s = json.loads((d / "summary.json").read_text())
    assert s["counts"]["FAIL"] == 0 and s["best"]["value"] == 0.0
    assert "hold-out (once, " in res.stdout and "flat (no position, Sharpe –)" in res.stdout
    assert (d / "report.html").is_file() and "flat (no position" in (d / "report.html").read_text()


@pytest.mark.slow
def test_a_scorecard_whose_agent_is_flat_everywhere_scores_it_as_zero_and_writes_its_report(tmp_path):
    """The tiny scorecard with abstention (every fold flat, the leak scenario's too): the agent's row
    is Sharpe 0 with no trades, scorecard.json and report.html are written, exit 0. 200-bar validation
    windows (the tiny size's are 400: each is backtested bar by bar, by the agent and every reference)
    and a 5 % held-back window (short: its noise bar stays out of reach, the leak's agent too)."""
    cmd = ["scorecard", "--size", "tiny", "--scenarios", "leak", "--baselines", "quant", "--out", str(tmp_path / "sc"),
           "--set", 'train.select="inner"', "--set", "train.abstain=true", "--set", "train.epochs=1",
           "--set", "dqn.n_envs=32", "--set", "dqn.rounds_per_epoch=4", "--set", "dqn.warmup_transitions=256",
           "--set", "env.episode_length=128", "--set", "folds.val=200", "--set", "train.inner_fraction=0.05"]
    res = foxhunt(tmp_path, *cmd)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    _no_nan(res.stderr)
    card = json.loads((tmp_path / "sc" / "scorecard.json").read_text())
    for s in card["scenarios"]:
        assert s["agent"]["sharpe"] == 0.0 and s["agent"]["trades_per_1000"] == 0.0
        assert s["agent"]["abstain"]["flat_folds"] == [0, 1]
    assert (tmp_path / "sc" / "report.html").is_file()
