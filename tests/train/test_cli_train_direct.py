"""`foxhunt train` with train.agent = "direct" in fresh processes: end to end, model files that
`foxhunt backtest` runs (--run on the torch path and the fused kernel, --model), a SIGKILL in fold 0
and --resume to the uninterrupted result, and the configuration rules as one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli_run import assert_refused
from tests.tiny import tiny_config

FOXHUNT = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())"]

DIRECT_TOML = """\
agent = "direct"
[direct]
window = 32
batch_windows = 16
steps_per_epoch = 2
hidden = [16, 16]
head_hidden = 8
relaxation = "straight_through"
"""
"""Appended to the tiny config's [train] section (its first line) and after it: the direct learner, tiny."""


def direct_config(directory: Path, *, extra: str = "", **kw) -> Path:
    """tests/tiny.py's configuration with the direct learner (factored actions: its market orders)."""
    path = tiny_config(directory, extra=DIRECT_TOML + extra, **kw)
    path.write_text(path.read_text().replace('action_mode = "exposure"', 'action_mode = "factored"'))
    return path


def _run(args: list[str], cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    p = subprocess.run(FOXHUNT + args, cwd=cwd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", **env})
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def _by_fold(path: Path) -> dict:
    return {(r["window"], r["label"]): r for r in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def direct_run(tmp_path_factory) -> tuple[Path, Path]:
    """(folder, config): the direct learner's run ``runs/ref`` in a fresh process, done once and shared by
    the end-to-end test and the kill-resume test (its uninterrupted reference). Two epochs a fold, a
    checkpoint each (the first inside fold 0), inner selection on a 10 % held-back window (half the
    default), 40-bar validation windows: the fused backtest runs in the Triton interpreter (~80 ms a bar)."""
    d = tmp_path_factory.mktemp("direct")
    cfg = direct_config(d, epochs=2, every=1, select="inner")  # no HTML report: no claim here reads it
    cfg.write_text(cfg.read_text().replace("val = 300", "val = 40")
                   .replace('select = "inner"\n', 'select = "inner"\ninner_fraction = 0.1\n', 1))
    _run(["train", "--config", str(cfg), "--name", "ref"])
    return d, cfg


@pytest.mark.slow
def test_foxhunt_train_runs_the_direct_learner_and_backtest_runs_its_models_in_torch_and_fused(direct_run, tmp_path):
    run = direct_run[0] / "runs" / "ref"
    assert 'agent = "direct"' in (run / "config.toml").read_text()
    plan = json.loads((run / "accel.json").read_text())
    assert plan["agent"] == "direct" and plan["env_step"] == plan["acting"] == plan["train_step"] == "torch"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(f, e) for f in (0, 1) for e in range(2)]
    assert {"objective", "turnover", "exposure_abs", "relax_gap", "inner_sharpe", "train_s"} <= set(rows[0])
    assert all(r["updates"] == 2 and r["transitions"] == 2 * 16 * 32 for r in rows)
    from foxhunt.agents.model_io import load_model

    _, _, meta = load_model(run / "folds" / "fold_1" / "model.safetensors")
    assert meta.extra["agent"] == "direct" and meta.n_actions == 45 and meta.env["action_mode"] == "factored"
    # --run: each fold's model on its validation window reproduces the run's fold metrics, torch and fused
    _run(["backtest", "--run", str(run), "--device", "cpu", "--set", "accel.eval=torch", "--out", str(tmp_path / "bt_torch")])
    fused = _run(["backtest", "--run", str(run), "--device", "cpu", "--set", "accel.eval=fused", "--out", str(tmp_path / "bt_fused")],
                 TRITON_INTERPRET="1")
    assert "eval=fused" in fused.stdout
    torch_rows, fused_rows = _by_fold(tmp_path / "bt_torch" / "metrics.json"), _by_fold(tmp_path / "bt_fused" / "metrics.json")
    for k in (0, 1):
        saved = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())["agent"]
        assert torch_rows[(k, "agent")]["total_return"] == pytest.approx(saved["total_return"], rel=1e-9, abs=1e-12)
        np.testing.assert_allclose(fused_rows[(k, "agent")]["total_return"], saved["total_return"], rtol=1e-4, atol=1e-7)
    # --model on a bar file
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.data.writer import write_bars

    bars = write_bars(generate_bars(500, seed=7), tmp_path / "bars.parquet")  # minute bars: 197 after the warm-up
    out = tmp_path / "bt_model"
    _run(["backtest", "--model", str(run / "folds" / "fold_1" / "model.safetensors"), "--data", str(bars), "--out", str(out),
          "--device", "cpu", "--cache-dir", str(tmp_path / "c")])
    assert json.loads((out / "metrics.json").read_text())[0]["label"] == "model"


@pytest.mark.slow
def test_a_killed_direct_run_resumes_to_the_uninterrupted_result(direct_run):
    from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted

    # two epochs a fold: the first checkpoint (epoch 1 of fold 0) is inside the fold, as with more; the
    # uninterrupted reference is the module's run of the same configuration
    d, cfg = direct_run
    killed_in_fold_0_then_resumed_equals_uninterrupted(cfg, d, reference=False)


@pytest.mark.parametrize("sets,line", [
    (['env.action_mode="exposure"'], "train.agent = 'direct' trades market orders of normal urgency, which env.action_mode = "
     "'exposure' would route by spread and volatility; set env.action_mode = \"factored\""),
    (["env.kelly=true"], "train.agent = 'direct' sizes positions by equity alone (its training P&L has no Kelly multiplier); "
     "set env.kelly = false"),
    (["direct.window=2100"], "direct.window = 2100 bars does not fit fold 0's 2000 training bars (must be <= 1998; set "
     "direct.window lower)"),
    (['direct.objective="dsr"', "direct.window=5000"], "tiny.toml + overrides: direct: objective = 'dsr' holds a window × "
     "window matrix of moving-moment weights: window 5000 must be <= 4096"),
], ids=["exposure-mode", "kelly", "window", "dsr-window"])
def test_the_direct_learners_rules_are_one_line_errors_that_write_nothing(tmp_path, sets, line):
    work = tmp_path / "w"  # the config and its runs/ inside, the feature cache (which may be written) outside
    cfg = direct_config(work, epochs=1, every=0, cache=tmp_path / "cache")
    args = ["train", "--config", str(cfg)] + [a for s in sets for a in ("--set", s)]
    if line.startswith("tiny.toml"):
        line = f"{cfg}{line.removeprefix('tiny.toml')}"
    assert_refused(work, args, line)
