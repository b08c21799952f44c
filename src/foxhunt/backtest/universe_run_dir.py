"""`foxhunt backtest --run RUN_DIR` on a pooled universe run: each fold's model on its member symbols'
validation windows, as the run's evaluation did, with the portfolios and report of a universe backtest.

The run's config.toml names the universe (its files, ``data.symbols``); the universe is loaded and its
folds laid out again (``prepare_universe``; a run whose folds.json records other folds on the same union
calendar, ``foxhunt tune``'s hold-out run, keeps those: ``_run_folds``), and every fold model is checked
against them: the data's
sha256, the feature names, the fold, and the per-symbol normalisation the model was trained under
(folds/fold_k/norm.safetensors: each symbol's mean and std and training rows, rebuilt from the data
and compared). Per fold, the market is set to the rows the model trained on (a ``PooledFold`` whose
training rows end where norm.safetensors says: before the held-back window with inner selection),
so every member symbol's features are normalised with its own training statistics and each symbol
routes orders with its own medians, as in training; the fold's windows (W = member symbols) run in
one backtest call. Buy-and-hold and the quant rule (chosen per symbol on its training rows of the
fold) run once for every fold's windows, under the first fold's statistics, as the run's own
(``foxhunt.train.universe_oos``); so on the CPU the agent's per-symbol metrics equal the run's
metrics.json and the portfolio rows its summary.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["universe_of_config", "backtest_universe_run"]


def universe_of_config(cfg: Any) -> Any:
    """The universe a run's config names when it holds several symbols, else None (a file run)."""
    from foxhunt.data.universe import config_sources, is_universe, load_universe

    if cfg.data.source != "file" or not is_universe(config_sources(cfg.data), cfg.data):
        return None
    universe = load_universe(config_sources(cfg.data), cfg.data)
    return universe if len(universe) > 1 else None


def backtest_universe_run(run_dir: Path, cfg: Any, universe: Any, models: list[Path], *, bars_per_year: float | None,
                          barriers: bool | None, before: Callable[[Any], None] | None = None) -> tuple[Any, Any, list[str]]:
    """(the ``UniverseRun`` with window = fold, the ``ExecutionPlan``, notes) of the run's fold models
    (module docstring). ConfigError (one line) for a model that does not match the data."""
    import torch
    from safetensors.numpy import load_file

    from foxhunt.accel.backend import resolve_config
    from foxhunt.agents import registry
    from foxhunt.agents.model_io import load_model
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
    from foxhunt.backtest.timing import row_fields, window_timing
    from foxhunt.backtest.universe_walk import BENCHMARK, QUANT, FoldWindows, fold_training_vols, quant_fold_exposures, walk_forward_run
    from foxhunt.errors import ConfigError
    from foxhunt.pipeline import prepare_universe
    from foxhunt.universe_market import PooledFold

    prepared = prepare_universe(cfg, universe=universe, mirror=False)  # a backtest never visits the mirror
    market, ufs = prepared.market, _run_folds(run_dir, cfg, prepared)
    loaded = []
    for p in models:
        net, _, meta = load_model(p, market.device)
        if meta.extra.get("data_sha256") not in (None, market.source_sha256):
            raise ConfigError(f"model {p}: trained on data with sha256 {meta.extra['data_sha256'][:12]}…, the run's data "
                              f"now gives {market.source_sha256[:12]}… (the data changed)")
        if tuple(meta.feature_names) != tuple(market.names) or meta.spec_version != market.spec_version:
            raise ConfigError(f"model {p}: trained on feature spec {meta.spec_version}; the cache now has {market.spec_version}: "
                              "rebuild the features or retrain")
        k = int(meta.extra["fold"]["fold"])
        uf = ufs.get(k)
        if uf is None or PooledFold.of(uf).to_dict() != meta.extra["fold"]:
            raise ConfigError(f"model {p}: its fold {meta.extra['fold']} is not the run's fold {k} on this data now "
                              "(the data or the fold layout changed)")
        norm = load_file(str(p.parent / "norm.safetensors"))
        tb = norm["train_bounds"].astype(np.int64)
        if tb.shape != (len(universe), 2) or not np.array_equal(tb[:, 0], uf.bounds[:, 0]):
            raise ConfigError(f"{p.parent / 'norm.safetensors'}: its training rows are not fold {k}'s on this data now")
        part = PooledFold.of(uf, cfg.train.symbol_weighting, train_end=tb[:, 1])
        stats = market.norm_stats_per_symbol(part)
        if not (np.allclose(stats.mean.cpu().numpy(), norm["mean"], rtol=1e-5, atol=1e-6)
                and np.allclose(stats.std.cpu().numpy(), norm["std"], rtol=1e-5, atol=1e-6)):
            raise ConfigError(f"{p.parent / 'norm.safetensors'}: the per-symbol normalisation differs from the data's now "
                              "(the data changed)")
        loaded.append((part, net, int(meta.env.get("decision_interval", 1))))
    bpy = bars_per_year if bars_per_year is not None else cfg.backtest.bars_per_year
    use_barriers = cfg.backtest.barriers if barriers is None else barriers
    plan = resolve_config(cfg, market.device, obs_dim=market.obs_dim, parts=("eval",), learner=registry.of(cfg).plan_learner(cfg))
    if before is not None:
        before(plan)
    bt = Backtester(market, cfg.env, chunk=cfg.train.eval_chunk, cuda_graphs=plan.graphs, bars_per_year=bpy)
    bpy_f = float(bt.bars_per_year)
    spans = []
    for part, _, _ in loaded:
        mem = part.members
        spans.append((mem, part.bounds[mem, 2], part.bounds[mem, 3] - part.bounds[mem, 2] - 1))
    starts = np.concatenate([s for _, s, _ in spans])
    steps = np.concatenate([n for _, _, n in spans])
    # buy-and-hold and the quant rule: every fold's windows in one run each, under the first fold's statistics
    market.set_fold(loaded[0][0])
    t_max = int(steps.max())
    bh = bt.run(starts, steps, ExposurePolicy(torch.ones((len(starts), t_max), device=market.device), cfg.env.n_actions),
                keep_curves=True, backend=plan.eval)
    windows = [(int(s), int(part.bounds[s, 0]), int(ufs[part.fold].bounds[s, 1]), int(a), int(n))
               for (part, _, _), (mem, st, ns) in zip(loaded, spans) for s, a, n in zip(mem, st, ns)]
    ex, rules = quant_fold_exposures(universe.bars, market.offsets_host, windows, cfg.env, bpy_f)
    qr = bt.run(starts, steps, ExposurePolicy(torch.as_tensor(ex, dtype=torch.float32, device=market.device), cfg.env.n_actions),
                keep_curves=True, backend=plan.eval)
    close = [b.close for b in universe.bars]
    ts = market.timestamps_host
    folds, trades, i = [], [], 0
    for (part, net, k), (mem, st, ns) in zip(loaded, spans):
        market.set_fold(part)  # the model's normalisation and medians, as in training
        res = bt.run(st, ns, GreedyPolicy(net, k), keep_curves=True, keep_trades=True, backend=plan.eval,
                     barriers=use_barriers)
        w = len(mem)
        cut = lambda r, j0: [r.returns[j0 + j, : int(n)].astype(np.float64) for j, n in enumerate(ns)]  # noqa: E731
        bh_w = _slice(bh, i, w)
        folds.append(FoldWindows(part.fold, mem, [ts[a: a + n + 1] for a, n in zip(st, ns)],
                                 {"agent": cut(res, 0), BENCHMARK: cut(bh, i), QUANT: cut(qr, i)},
                                 {"agent": res.metrics, BENCHMARK: bh.metrics[i: i + w], QUANT: qr.metrics[i: i + w]},
                                 fold_training_vols(close, market.offsets_host, ufs[part.fold].bounds, mem),
                                 [row_fields(window_timing(res, j, bh_w, j)) for j in range(w)]))
        trades += [{"fold": part.fold, "symbol": universe.symbols[mem[t["window"]]], **t, "window": part.fold}
                   for t in (res.trades or [])]
        i += w
    notes = [plan.summary(), f"run: {run_dir}; {len(universe)} symbols, {len(loaded)} fold model(s); each fold's model on its "
             "member symbols' validation windows (window = fold), features normalised per symbol with the model's training rows",
             f"quant rule: per symbol and fold, the best causal rule on the symbol's training rows ({', '.join(sorted(set(rules)))})",
             "portfolios: equal-weight and inverse-volatility-weighted (each fold's weights from the symbols' training rows), "
             f"the folds joined in time order; annualisation: {bpy_f:,.1f} bars per year"]
    return walk_forward_run(universe.symbols, folds, "agent", bpy_f, trades), plan, notes


def _slice(res: Any, i: int, w: int) -> Any:
    """Windows i … i + w - 1 of a BacktestResult kept with its curves (for the timing regression)."""
    from dataclasses import replace

    return replace(res, metrics=res.metrics[i: i + w], starts=res.starts[i: i + w], lengths=res.lengths[i: i + w],
                   returns=res.returns[i: i + w], positions=res.positions[i: i + w],
                   metrics_tensor=res.metrics_tensor[i: i + w] if res.metrics_tensor is not None else None)


def _run_folds(run_dir: Path, cfg: Any, prepared: Any) -> dict[int, Any]:
    """{fold: UniverseFold} of the run: as laid out again, or, where folds.json records other calendar ranges
    whose every boundary time is the data's union calendar's there (``foxhunt tune``'s hold-out run: one fold
    after the search's), those ranges mapped to each symbol (``calendar_folds``). Anything else: the folds
    laid out again (a model then fails its fold check)."""
    import json

    from foxhunt.features import spec
    from foxhunt.folds import FoldRange
    from foxhunt.universe_folds import calendar_folds

    laid = {f.fold: f for f in prepared.folds}
    path, cal = run_dir / "folds.json", prepared.calendar
    try:
        rows = json.loads(path.read_text())
        ranges = [FoldRange(*(int(r[k]) for k in ("fold", "train_start", "train_end", "val_start", "val_end"))) for r in rows]
    except (OSError, ValueError, TypeError, KeyError):
        return laid
    if not ranges or ranges == [f.calendar for f in prepared.folds]:
        return laid
    for r, f in zip(rows, ranges):
        for key in ("train_start", "train_end", "val_start", "val_end"):
            i = getattr(f, key)
            i = min(i, len(cal) - 1) if key.endswith("end") else i
            if not 0 <= i < len(cal) or r.get(f"{key}_time") != str(np.datetime64(int(cal[i]), "ns")) + "Z":
                return laid
    return {f.fold: f for f in calendar_folds(cfg, prepared.universe, spec.WARMUP, ranges, cal)}
