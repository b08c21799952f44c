"""The tiny training configuration shared by the train, backtest and tune tests (seconds on a 2-core
CPU): 3,000 synthetic minute bars, two walk-forward folds of 800 + 300 bars, a 16-env DQN."""

from __future__ import annotations

from pathlib import Path

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
"""

TUNE_TOML = """\
[tune]
study = "tiny"
out_dir = "{studies}"
trials = 3
startup_trials = 2
holdout = 0.2
[tune.space]
dqn.lr = {{ low = 1e-4, high = 1e-2, log = true }}
dqn.hidden = [[16], [8, 8]]
"""
"""A three-trial study over the tiny configuration (appended to it by ``tiny_tune_config``)."""


def tiny_config(directory: Path, *, seed: int = 0, epochs: int = 3, every: int = 1, tb: bool = False,
                report: bool = False, cache: Path | None = None, extra: str = "", select: str = "last",
                abstain: bool = False) -> Path:
    """Write a tiny run config (plus the TOML text ``extra``) into ``directory/tiny.toml``; runs go
    to ``directory/runs``, the feature cache to ``directory/cache`` unless ``cache`` is given.
    select: ``train.select`` ("last" | "inner": epoch selection on a held-back window); abstain:
    ``train.abstain`` with inner selection (off by default here: a tiny run's held-back window is
    too short to beat its noise bar, so every fold would be flat; tests/train/test_abstain.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = TINY_TOML.format(out=directory / "runs", cache=cache or directory / "cache", seed=seed, epochs=epochs,
                            every=every, tb=str(tb).lower(), report=str(report).lower())
    if select != "last":
        text = text.replace("[train]\n", f'[train]\nselect = "{select}"\nabstain = {str(abstain).lower()}\n', 1)
    path = directory / "tiny.toml"
    path.write_text(text + extra)
    return path


def tiny_tune_config(directory: Path) -> Path:
    """The tiny configuration with the three-trial ``[tune]`` study (studies under
    ``directory/studies``): one epoch a fold, no in-fold checkpoints, report on (the defaults)."""
    return tiny_config(directory, epochs=1, every=0, report=True, extra=TUNE_TOML.format(studies=directory / "studies"))


def shorter(path: Path) -> Path:
    """The tiny config at ``path`` on 1,800 bars with 100-bar validation windows (its own are 3,000 and 300:
    each validation window is backtested bar by bar; fold 0 still trains on more than the 800 bars of
    ``folds.train``), for a test whose claim holds at any size (a killed run resumed, say)."""
    text = path.read_text()
    assert "bars = 3000\n" in text and "val = 300\n" in text
    path.write_text(text.replace("bars = 3000\n", "bars = 1800\n", 1).replace("val = 300\n", "val = 100\n", 1))
    return path
