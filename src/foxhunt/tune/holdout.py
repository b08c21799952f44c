"""The hold-out: the last ``tune.holdout`` fraction of the bars, never seen by the search.

The search's walk-forward folds are laid out on the bars before the cut (``search_folds``), so
every validation window ends at or before it. After the search, the best configuration is trained
once more on the bars before the cut and evaluated once on ``[cut, n)`` (``holdout_fold``), through
the same walk-forward runner as ``foxhunt train`` (a one-fold run directory in the study directory).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from foxhunt.config import Config
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldError, FoldRange, folds_from_config
from foxhunt.pipeline import Prepared


def cut_index(n_bars: int, holdout: float) -> int:
    """First hold-out bar: the last round(holdout · n) bars are held out (n when holdout = 0)."""
    return n_bars - int(round(holdout * n_bars))


def search_folds(prepared: Prepared, holdout: float) -> tuple[list[FoldRange], int]:
    """(folds over the bars before the cut, cut). ConfigError if no fold fits or the hold-out is
    too short to backtest."""
    n = prepared.market.n_bars
    cut = cut_index(n, holdout)
    if holdout > 0 and n - cut < 3:
        raise ConfigError(f"tune.holdout = {holdout}: only {n - cut} hold-out bars of {n}; it needs >= 3")
    try:
        folds = folds_from_config(prepared.bars.timestamps[:cut], prepared.config.folds, origin=prepared.features.warmup)
    except FoldError as exc:
        raise ConfigError(f"tune.holdout = {holdout}: the search keeps {cut} bars: {exc}") from None
    return folds, cut


def with_search_folds(prepared: Prepared, holdout: float) -> tuple[Prepared, int]:
    """A Prepared whose folds stop before the hold-out (market set to its first fold)."""
    folds, cut = search_folds(prepared, holdout)
    prepared.market.set_fold(folds[0])
    return dataclasses.replace(prepared, folds=folds), cut


def holdout_fold(search: list[FoldRange], cut: int, n_bars: int, mode: str) -> FoldRange:
    """Train like the search's last fold, moved to end one purge gap before the cut; validate on
    [cut, n). Expanding folds keep their start; sliding folds keep their length."""
    last = search[-1]
    purge = last.val_start - last.train_end
    train_end = cut - purge
    train_start = last.train_start if mode == "expanding" else max(last.train_start, train_end - last.train_len)
    return FoldRange(0, train_start, train_end, cut, n_bars)


def run_holdout(cfg: Config, prepared: Prepared, study_dir: Path, name: str, console: Any = None) -> dict[str, Any]:
    """Retrain ``cfg`` on the bars before the cut and evaluate it once on the hold-out.

    Writes the one-fold run directory ``study_dir/name`` (config.toml, report.html …) and returns
    its fold result (the content of folds/fold_0/metrics.json) plus the hold-out bounds."""
    from foxhunt.train.run_dir import create_run_dir
    from foxhunt.train.runner import WalkForwardRunner

    search, cut = search_folds(prepared, cfg.tune.holdout)
    fold = holdout_fold(search, cut, prepared.market.n_bars, cfg.folds.mode)
    prepared.market.set_fold(fold)
    one = dataclasses.replace(prepared, config=cfg, folds=[fold])
    run_cfg = cfg.replace(run={"out_dir": str(study_dir), "name": name}, train={"progress": False, "tensorboard": False})
    one = dataclasses.replace(one, config=run_cfg)
    runner = WalkForwardRunner(one, None)
    run_dir, resolved = create_run_dir(run_cfg, one, name)
    runner.use_config(resolved)
    results = runner.run(run_dir)
    return {"run_dir": str(run_dir), "cut": cut, "fold": fold.to_dict(), **results[0]}
