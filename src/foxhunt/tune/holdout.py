"""The hold-out: the last ``tune.holdout`` fraction of the bars, never seen by the search.

The search's walk-forward folds are laid out on the bars before the cut (``search_folds``), so
every validation window ends at or before it. After the search, the best configuration is trained
once more on the bars before the cut and evaluated once on ``[cut, n)`` (``holdout_fold``), through
the same walk-forward runner as ``foxhunt train`` (a one-fold run directory in the study directory).

On a universe of several symbols the cut is a date: the last round(holdout · U) dates of the union
calendar (U dates, ``foxhunt.universe_folds``) are held out for every symbol, and the search's folds
are laid out on the calendar before it (``universe_search``). The hold-out fold is ``holdout_fold`` on
the calendar, mapped to each symbol as any universe fold; it is trained once (one pooled agent) and
evaluated on every member symbol's bars from the cut date on, through the pooled universe runner. Its
result is the portfolio's (``tune.universe_weights``), as the search's fold scores are.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.config import Config
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldError, FoldRange, folds_from_config
from foxhunt.pipeline import Prepared


def cut_index(n_bars: int, holdout: float) -> int:
    """First hold-out bar: the last round(holdout · n) bars are held out (n when holdout = 0)."""
    return n_bars - int(round(holdout * n_bars))


def _checked_cut(n: int, holdout: float, unit: str) -> int:
    """``cut_index``; ConfigError if the hold-out is too short to backtest (fewer than 3 ``unit``)."""
    cut = cut_index(n, holdout)
    if holdout > 0 and n - cut < 3:
        raise ConfigError(f"tune.holdout = {holdout}: only {n - cut} hold-out {unit} of {n}; it needs >= 3")
    return cut


def search_folds(prepared: Prepared, holdout: float) -> tuple[list[FoldRange], int]:
    """(folds over the bars before the cut, cut). ConfigError if no fold fits or the hold-out is
    too short to backtest."""
    n = prepared.market.n_bars
    cut = _checked_cut(n, holdout, "bars")
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


def universe_search(cfg: Config, universe: Any) -> tuple[Any, int]:
    """(the pooled universe whose folds stop before the hold-out, cut): cut indexes the union calendar;
    ``foxhunt.train.universe_runner.PooledPrepared``. ConfigError as ``search_folds``."""
    from foxhunt.pipeline import prepare_universe
    from foxhunt.train.universe_runner import pooled_prepared
    from foxhunt.universe_folds import union_calendar

    holdout = cfg.tune.holdout
    cut = _checked_cut(int(union_calendar(universe).shape[0]), holdout, "calendar dates")
    try:
        prepared = prepare_universe(cfg, universe=universe, cut=cut)
    except FoldError as exc:
        raise ConfigError(f"tune.holdout = {holdout}: the search keeps {cut} calendar dates: {exc}") from None
    return pooled_prepared(cfg, prepared), cut


def holdout_fold(search: list[FoldRange], cut: int, n_bars: int, mode: str) -> FoldRange:
    """Train like the search's last fold, moved to end one purge gap before the cut; validate on
    [cut, n). Expanding folds keep their start; sliding folds keep their length."""
    last = search[-1]
    purge = last.val_start - last.train_end
    train_end = cut - purge
    train_start = last.train_start if mode == "expanding" else max(last.train_start, train_end - last.train_len)
    return FoldRange(0, train_start, train_end, cut, n_bars)


def _universe_holdout(cfg: Config, pooled: Any) -> tuple[Any, int]:
    """(the one-fold pooled universe of the hold-out, cut): ``holdout_fold`` on the union calendar after
    the search's folds (``pooled.universe_folds``), mapped to each symbol (``calendar_folds``)."""
    from foxhunt.features import spec
    from foxhunt.pipeline import PreparedUniverse
    from foxhunt.train.universe_runner import pooled_prepared
    from foxhunt.universe_folds import calendar_folds

    calendar = pooled.calendar
    cut = cut_index(int(calendar.shape[0]), cfg.tune.holdout)
    fold = holdout_fold([uf.calendar for uf in pooled.universe_folds], cut, int(calendar.shape[0]), cfg.folds.mode)
    try:
        folds = calendar_folds(cfg, pooled.universe, spec.WARMUP, [fold], calendar)
    except FoldError as exc:
        raise ConfigError(f"tune.holdout = {cfg.tune.holdout}: the hold-out {exc}") from None
    one = PreparedUniverse(cfg, pooled.universe, pooled.features, folds, calendar, pooled.market, pooled.timings,
                           pooled.fold_note)
    return pooled_prepared(cfg, one), cut


UNIVERSE_RUN_TRAIN = {"save_curves": True, "eval_buy_and_hold": True}
"""[train] keys a universe's hold-out run needs: its summary's portfolio rows are built from the curves
and buy-and-hold (``UniverseRunner.finish``)."""


def run_holdout(cfg: Config, prepared: Any, study_dir: Path, name: str, console: Any = None) -> dict[str, Any]:
    """Retrain ``cfg`` on the bars before the cut and evaluate it once on the hold-out.

    prepared: the search's (a file's ``Prepared``, or a universe's ``PooledPrepared``). Writes the
    one-fold run directory ``study_dir/name`` (config.toml, report.html …) and returns its fold result
    (the content of folds/fold_0/metrics.json) plus the hold-out bounds (``cut``, ``cut_time``). On a
    universe, ``agent`` and ``buy_and_hold`` are the portfolios' rows of tune.universe_weights (the
    pooled rows stay in ``pooled``), ``portfolio`` every portfolio row of the run's summary."""
    from foxhunt.train.run_dir import create_run_dir
    from foxhunt.train.runner import WalkForwardRunner
    from foxhunt.train.universe_runner import UniverseRunner

    universe = hasattr(prepared, "parts")
    if universe:
        one, cut = _universe_holdout(cfg, prepared)
        times = prepared.calendar
    else:
        search, cut = search_folds(prepared, cfg.tune.holdout)
        fold = holdout_fold(search, cut, prepared.market.n_bars, cfg.folds.mode)
        prepared.market.set_fold(fold)
        one = dataclasses.replace(prepared, config=cfg, folds=[fold])
        times = prepared.market.timestamps_host
    train = {"progress": False, "tensorboard": False, **(UNIVERSE_RUN_TRAIN if universe else {})}
    run_cfg = cfg.replace(run={"out_dir": str(study_dir), "name": name}, train=train)
    one = dataclasses.replace(one, config=run_cfg)
    runner = UniverseRunner(one, None) if universe else WalkForwardRunner(one, None)
    run_dir, resolved = create_run_dir(run_cfg, one, name)
    runner.use_config(resolved)
    results = runner.run(run_dir)
    res = {"run_dir": str(run_dir), "cut": cut, "cut_time": _iso(times, cut), "fold": one.folds[0].to_dict(), **results[0]}
    return _portfolio(res, run_dir, cfg.tune.universe_weights) if universe else res


def _iso(times: Any, i: int) -> str | None:
    return str(np.datetime64(int(times[i]), "ns")) + "Z" if i < len(times) else None


def _portfolio(res: dict[str, Any], run_dir: Path, weights: str) -> dict[str, Any]:
    """The universe's hold-out result: the portfolio rows (``weights``) of the run's summary.json as
    ``agent`` and ``buy_and_hold``; the members' round trips summed as the agent's trade_count."""
    import json

    from foxhunt.backtest.universe import BENCHMARK
    from foxhunt.train.universe_oos import AGENT

    rows = json.loads((run_dir / "summary.json").read_text()).get("portfolio", [])
    mine = [r for r in rows if r["fold"] == 0]
    pick = {r["label"]: r for r in mine if r["weights"] == weights}
    agent = {**pick[AGENT], "trade_count": res["pooled"].get("trade_count")}
    return {**res, "weights": weights, "agent": agent, "buy_and_hold": pick.get(BENCHMARK), "portfolio": mine}
