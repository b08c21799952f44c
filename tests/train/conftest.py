"""Tiny training configurations for the `foxhunt train` tests (seconds on a 2-core CPU)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Callable

import pytest

TINY_TOML = """\
[run]
device = "cpu"
out_dir = "{out}"
seed = {seed}
[data]
bars = 3000
[features]
cache_dir = "{cache}"
[folds]
train = 800
val = 300
max_folds = 2
[env]
episode_length = 64
action_mode = "exposure"
reward_scale = 100.0
[dqn]
n_envs = 16
rollout_len = 4
rounds_per_epoch = 4
train_steps_per_round = 2
batch_size = 32
hidden = [16]
head_hidden = 8
buffer_capacity = 2048
warmup_transitions = 64
[train]
epochs = {epochs}
checkpoint_every = {every}
tensorboard = {tb}
progress = false
report = {report}
select = "{select}"
"""

CLI = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())", "train"]
"""The `foxhunt` entry point in a subprocess (what the console script runs)."""


def tiny_config(directory: Path, *, seed: int = 0, epochs: int = 3, every: int = 1, tb: bool = False,
                report: bool = False, cache: Path | None = None, select: str = "last") -> Path:
    """Write a tiny run config into ``directory``; runs go to ``directory/runs``."""
    directory.mkdir(parents=True, exist_ok=True)
    text = TINY_TOML.format(out=directory / "runs", cache=cache or directory / "cache", seed=seed, epochs=epochs,
                            every=every, tb=str(tb).lower(), report=str(report).lower(), select=select)
    path = directory / "tiny.toml"
    path.write_text(text)
    return path


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root ('dir' for directories)."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def tiny() -> Callable[..., Path]:
    return tiny_config
