"""Tiny universes for the pooled-training tests: three symbols on their own calendars, written as files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from foxhunt.config import build_config
from foxhunt.pipeline import PreparedUniverse, prepare_universe
from tests.data.universe_files import bars_frame, write

SPECS = {
    "AAA": (pd.date_range(end="2019-12-31", periods=1_000), 11),  # every day
    "BBB": (pd.bdate_range(end="2019-12-31", periods=800), 12),  # business days, a later start
    "CCC": (pd.date_range(end="2019-12-31", periods=900).delete(slice(500, 530)), 13),  # a 30-day gap
}
"""2,670 bars in all: each symbol has its warm-up (303 bars) and a few hundred training bars a fold."""

SMALL = {"data": {"min_train_bars": 100}, "folds": {"train": 200, "val": 60, "purge": 5, "max_folds": 2},
         "env": {"episode_length": 48}, "run": {"device": "cpu"}}
"""Two folds of 200 training and 60 validation calendar days; short episodes (the shortest training part holds one)."""


def universe_files(d: Path, poison: str | None = None) -> Path:
    """AAA.csv, BBB.parquet, CCC.csv in ``d``; ``poison``: that symbol's bar 600 has its prices × 1000 (a valid
    bar, an absurd jump: it must reach no other symbol)."""
    for i, (sym, (idx, seed)) in enumerate(SPECS.items()):
        df = bars_frame(idx, seed)
        if sym == poison:
            for col in ("open", "high", "low", "close"):
                df.loc[600, col] *= 1000.0
        write(d / f"{sym}.{'parquet' if i == 1 else 'csv'}", df)
    return d


def config(tmp_path: Path, source: Path, **sections: dict[str, Any]):
    """``SMALL`` over the bar files in ``source``, plus ``sections`` ({section: {key: value}})."""
    cfg: dict[str, dict[str, Any]] = {k: dict(v) for k, v in SMALL.items()}
    cfg["data"].update(source="file", path=str(source))
    cfg["features"] = {"cache_dir": str(tmp_path / "cache")}
    for k, v in sections.items():
        cfg[k] = {**cfg.get(k, {}), **v}
    return build_config(cfg)


def prepared_universe(tmp_path: Path, poison: str | None = None, **sections: dict[str, Any]) -> PreparedUniverse:
    """The three-symbol universe prepared on the CPU (``SMALL`` plus ``sections``)."""
    d = tmp_path / ("u" if poison is None else f"u_{poison}")
    if not d.exists():
        universe_files(d, poison)
    return prepare_universe(config(tmp_path, d, **sections))


TINY_DQN = {"n_envs": 16, "rollout_len": 4, "rounds_per_epoch": 4, "train_steps_per_round": 2, "batch_size": 32,
            "hidden": [16], "head_hidden": 8, "buffer_capacity": 2048, "warmup_transitions": 64}
TINY_PPO = {"n_envs": 16, "rollout_len": 8, "iterations_per_epoch": 2, "minibatches": 2, "update_epochs": 2, "hidden": [16],
            "head_hidden": 8, "target_kl": 0.05, "gamma": 0.5}
TINY_DIRECT = {"window": 32, "batch_windows": 16, "steps_per_epoch": 2, "hidden": [16, 16], "head_hidden": 8,
               "relaxation": "straight_through"}
TINY_FORECAST = {"hidden": [16, 16], "batch": 64, "steps_per_epoch": 4, "risk_aversion": 1.0}
"""The learners sized for seconds on a 2-core CPU (as tests/tiny.py and the learners' CLI tests)."""
