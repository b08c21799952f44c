"""`foxhunt backtest --run RUN_DIR` on a universe run with one agent per symbol (``train.pool = false``):
every symbol's run backtested as a run, then the symbols held together as the pooled run's backtest is.

The run's config.toml names the universe; its folds are laid out again (``per_symbol_prepared``, no
feature built) for the membership and the training rows of each fold. Each member symbol's run
(``symbols/<SYMBOL>/``, a single-file run directory) must be complete (a model for every fold it is a
member of, else a one-line ConfigError naming the symbol); it is backtested as ``foxhunt backtest --run``
backtests a run (``run_dir.backtest_run_dir``: its data checked, each fold's model on its validation
window with its normalisation and medians, buy-and-hold under the first fold's statistics), plus the
in-sample quant rule on the same windows (``foxhunt.train.oos.quant_backtest``, as the symbol's run
wrote it). The windows are then joined as the run's summary.json joined them
(``foxhunt.train.per_symbol_oos.universe_walk``): per-symbol rows, per-fold and stitched portfolios,
equal-weight and inverse-volatility-weighted with weights from the symbols' training rows; so on the CPU
the portfolio rows equal the run's summary.json's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["backtest_per_symbol_run"]


def backtest_per_symbol_run(run_dir: Path, cfg: Any, universe: Any, device: str, *, bars_per_year: float | None,
                            barriers: bool | None, overrides: Sequence[str] = (),
                            before: Callable[[Any], None] | None = None) -> tuple[Any, Any, list[str]]:
    """(the ``UniverseRun`` with window = fold, the first symbol's ``ExecutionPlan``, notes); module docstring."""
    from foxhunt.backtest.run_dir import backtest_run_dir, fold_models
    from foxhunt.backtest.timing import row_fields, window_timing
    from foxhunt.backtest.universe_walk import BENCHMARK, QUANT
    from foxhunt.errors import ConfigError
    from foxhunt.train.per_symbol import SYMBOLS_DIR, per_symbol_prepared, symbol_dir_name
    from foxhunt.train.per_symbol_oos import SymbolFold, universe_walk
    from foxhunt.train.universe_oos import AGENT

    p = per_symbol_prepared(cfg, universe)
    subs = []
    for s, sym in enumerate(universe.symbols):  # every symbol's run complete, before anything runs
        folds = p.symbol_folds(s)
        if not folds:
            continue
        sub = run_dir / SYMBOLS_DIR / symbol_dir_name(sym, s)
        have = {int(m.parent.name[5:]) for m in fold_models(sub)} if (sub / "config.toml").is_file() else set()
        missing = [f.fold for f in folds if f.fold not in have]
        if missing:
            raise ConfigError(f"--run {run_dir}: symbol {sym}'s run {SYMBOLS_DIR}/{sub.name} has no model for fold "
                              f"{', '.join(map(str, missing))} yet (finish it: foxhunt train --resume {run_dir})")
        subs.append((s, sym, sub))
    per: dict[tuple[int, int], SymbolFold] = {}
    plan = None
    # the portfolios' annualisation is the run's (its union calendar, or the override), as at train time
    bpy = float(bars_per_year) if bars_per_year is not None else float(p.annualisation.bars_per_year)
    for s, sym, sub in subs:
        # data.symbols names the symbol (a run made before symbol runs recorded it names the universe)
        res, market, sym_plan = backtest_run_dir(sub, device, bars_per_year=bars_per_year, barriers=barriers,
                                                 overrides=[*overrides, f"data.symbols={json.dumps([sym])}"], before=before,
                                                 quant=True)
        plan = plan or sym_plan
        ts = market.timestamps_host
        for fb in res:
            f, n = fb.fold, fb.fold.val_len - 1
            cut = lambda r: np.asarray(r.returns[0, :n], np.float32).astype(np.float64)  # noqa: E731  (as the run's files)
            trades = list(fb.agent.trades or [])  # bars of the symbol's own file
            per[(s, f.fold)] = SymbolFold(np.asarray(ts[f.val_start: f.val_start + n + 1], np.int64),
                                          {AGENT: cut(fb.agent), BENCHMARK: cut(fb.buy_and_hold), QUANT: cut(fb.quant)},
                                          {AGENT: fb.agent.metrics[0], BENCHMARK: fb.buy_and_hold.metrics[0], QUANT: fb.quant.metrics[0]},
                                          row_fields(window_timing(fb.agent, 0, fb.buy_and_hold, 0)), trades)
    assert plan is not None
    walk = universe_walk(universe, p.universe_folds, lambda s, k: per[(s, k)], bpy)
    notes = [plan.summary(), f"run: {run_dir}; {len(universe)} symbols, one agent per symbol (train.pool = false): each "
             f"symbol's run ({SYMBOLS_DIR}/<symbol>) backtested as a run, each fold's model on its validation window (window = fold)",
             "quant rule: per symbol and fold, the best causal rule on the symbol's training rows",
             "portfolios: equal-weight and inverse-volatility-weighted (each fold's weights from the symbols' training rows), "
             f"the folds joined in time order; annualisation: {bpy:,.1f} bars per year"]
    return walk, plan, notes
