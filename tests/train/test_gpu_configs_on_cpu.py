"""The GPU configurations' paths at CPU size (issue 27): `foxhunt train --config configs/h200*.toml
--data FILE` on a user's no-edge bar file, with the same config keys and only the sizes made tiny, in a
fresh process. Every fold must finish, flat folds included, with exit 0, summary.json and report.html.

The Triton kernels run in the interpreter (TRITON_INTERPRET=1, as CI sets it); the validation
backtests run on the torch path (``accel.eval = "torch"``: the interpreted backtest kernel steps a
window in minutes, and tests/kernels/test_backtest_fused*.py cover it against the torch path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = [  # sizes only: every other key is the configuration's own
    "folds.train=1500", "folds.val=100", "folds.max_folds=2", "folds.purge=30",  # 100-bar validation: stepped bar by bar
    "dqn.n_envs=16", "dqn.buffer_capacity=2048", "dqn.warmup_transitions=32", "dqn.batch_size=32",
    "dqn.rounds_per_epoch=2", "dqn.train_steps_per_round=1", "dqn.rollout_len=2",  # interpreted env steps: 2 a round
    "ppo.n_envs=16", "ppo.rollout_len=4", "ppo.iterations_per_epoch=2", "ppo.minibatches=2",
    "env.episode_length=64", "train.epochs=2", "train.ensemble=2", 'accel.eval="torch"',
]


@pytest.fixture(scope="module")
def noedge_file(tmp_path_factory) -> Path:
    """A user's bar file: the scorecard's no-edge minute market (GARCH-t martingale), 2,600 bars."""
    from foxhunt.data.writer import write_bars
    from foxhunt.scorecard.markets import no_edge

    path = tmp_path_factory.mktemp("data") / "noedge.parquet"
    write_bars(no_edge(2_600).bars, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("config", ["h200-fast.toml", "h200-ppo.toml", "h200.toml"])
def test_a_gpu_configuration_trains_a_users_no_edge_file_at_cpu_size_to_a_report(config, noedge_file, tmp_path):
    args = ["train", "--config", str(ROOT / "configs" / config), "--data", str(noedge_file), "--device", "cpu",
            "--name", "run", "--set", f'run.out_dir="{tmp_path / "runs"}"']
    for s in TINY:
        args += ["--set", s]
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "foxhunt.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "nan" not in res.stdout.lower()
    run = tmp_path / "runs" / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n_folds"] == 2 and len(summary["folds"]) == 2
    assert (run / "report.html").is_file() and not (run / "report_error.txt").exists()
    for k in range(2):
        assert (run / "folds" / f"fold_{k}" / "model.safetensors").is_file()
