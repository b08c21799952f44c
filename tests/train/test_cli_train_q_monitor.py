"""`foxhunt train` and the Q monitor, in a fresh process: the max-Q statistics (and the curiosity
bonus's distribution) reach metrics.jsonl and TensorBoard, and a learner pushed to diverge is halted by the Q-divergence check (one line, exit 2)."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_run import run_cli
from tests.tiny import tiny_config

Q_FIELDS = ("maxq_mean", "maxq_std", "maxq_min", "maxq_max", "q_abs_max")
CURIOSITY_FIELDS = ("curiosity_mean", "curiosity_std", "curiosity_max")


def test_the_q_monitor_and_curiosity_statistics_are_in_metrics_jsonl_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = tiny_config(tmp_path, epochs=2, every=0, tb=True)
    res = run_cli(tmp_path, "train", "--config", str(cfg), "--name", "q", "--set", "dqn.curiosity=true",
                  "--set", "dqn.curiosity_every=1", "--set", "dqn.curiosity_batch=64")
    assert res.returncode == 0, res.stdout + res.stderr
    run = tmp_path / "runs" / "q"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for r in rows:
        assert r["maxq_count"] == r["updates"] * 32 > 0
        assert r["maxq_min"] <= r["maxq_mean"] <= r["maxq_max"] <= r["q_abs_max"] < 1e4 and r["maxq_std"] >= 0
        assert r["q_diverged"] == 0
        assert r["curiosity_count"] == r["transitions"] and 0 < r["curiosity_mean"] <= r["curiosity_max"]
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {f"train/{k}" for k in Q_FIELDS + CURIOSITY_FIELDS} <= tags
    points = acc.Scalars("train/maxq_mean")
    assert [p.step for p in points] == [0, 1, 2, 3]
    assert [p.value for p in points] == pytest.approx([r["maxq_mean"] for r in rows], rel=1e-6)  # float32 in TB
    points = acc.Scalars("train/curiosity_std")
    assert [p.value for p in points] == pytest.approx([r["curiosity_std"] for r in rows], rel=1e-6)


def test_a_diverging_learner_is_halted_by_the_q_divergence_check_in_one_line_exit_2(tmp_path):
    # A huge learning rate (Adam moves every weight by ~1 a step), a target network that follows the
    # online one at once and γ = 0.99 on the tiny market: Q runs past 1e4 while every loss and
    # gradient stays finite and below the loss clip, so only the Q-divergence check can stop it.
    cfg = tiny_config(tmp_path, epochs=4, every=0)
    res = run_cli(tmp_path, "train", "--config", str(cfg), "--name", "div", "--set", "dqn.lr=1.0",
                  "--set", "dqn.gamma=0.99", "--set", "dqn.target_tau=1.0")
    assert res.returncode == 2, res.stdout + res.stderr
    assert re.fullmatch(r"error: training halted by the guard in fold 0, epoch \d+: Q-value divergence \(max \|Q\| "
                        r"[0-9.]+e\+0[4-9] above dqn\.q_divergence=10000 in \d+ steps\)\n", res.stderr), res.stderr
    rows = [json.loads(line) for line in (tmp_path / "runs" / "div" / "metrics.jsonl").read_text().splitlines()]
    epoch = int(re.search(r"epoch (\d+)", res.stderr).group(1))
    assert len(rows) == epoch and all(r["q_abs_max"] <= 1e4 for r in rows)  # earlier epochs stayed below the limit
