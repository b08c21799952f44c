"""`foxhunt backtest --run RUN_DIR`: a training run's per-fold models on their validation windows.

The run directory holds the resolved configuration (``config.toml``: the data, features, env and
evaluation settings) and one model file per finished fold (``folds/fold_k/model.safetensors``,
which records its fold's index ranges, normalisation and the data's sha256). This rebuilds the
market from the run's own configuration, checks that the data is the one the run trained on, and
backtests each fold's greedy policy on that fold's validation window exactly as the runner's
evaluation does (the fold's normalisation and medians; buy-and-hold once for every window under the
first fold's statistics), so on the CPU the agent metrics equal the run's ``metrics.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np


@dataclass
class FoldBacktest:
    """One fold's backtest: the fold, its agent and buy-and-hold results (BacktestResult); ``quant``
    the in-sample quant rule's (``backtest_run_dir(quant=True)``), else None."""

    fold: Any
    agent: Any
    buy_and_hold: Any
    barriers: bool = False  # the agent's round trips carry triple-barrier labels
    learner_eval: dict[str, Any] | None = None  # the learner's own evaluation of the model on the window (registry: window_report)
    quant: Any = None


def read_run(run_dir: Path, device: str = "auto", overrides: Sequence[str] = ()) -> tuple[Any, list[Path]]:
    """(the run's config with ``overrides`` and the device, its fold model files in fold order).
    ConfigError (one line) for a directory that is not a run or has no fold model yet. A run on a
    universe of several symbols (``universe_run_dir.universe_of_config``) goes to
    ``universe_run_dir.backtest_universe_run``; any other to ``backtest_run_dir``."""
    from foxhunt.errors import ConfigError

    cfg = read_config(run_dir, device, overrides)
    models = fold_models(run_dir)
    if not models:
        raise ConfigError(f"--run {run_dir}: no folds/fold_k/model.safetensors yet (no fold has finished)")
    return cfg, models


def read_config(run_dir: Path, device: str = "auto", overrides: Sequence[str] = ()) -> Any:
    """The run's config.toml with ``overrides`` and the device; ConfigError when there is none."""
    from foxhunt.config import load_config
    from foxhunt.errors import ConfigError

    cfg_path = run_dir / "config.toml"
    if not cfg_path.is_file():
        raise ConfigError(f"--run {run_dir}: not a training run directory (no config.toml)")
    return load_config(cfg_path, list(overrides), values=None if device == "auto" else {"run": {"device": device}})


def fold_models(run_dir: Path) -> list[Path]:
    """The run's fold model files (folds/fold_k/model.safetensors) in fold order."""
    return sorted((run_dir / "folds").glob("fold_*/model.safetensors"), key=lambda p: int(p.parent.name[5:]))


def backtest_run_dir(run_dir: Path, device: str = "auto", *, bars_per_year: float | None = None,
                     barriers: bool | None = None, overrides: Sequence[str] = (),
                     before: Callable[[Any], None] | None = None, quant: bool = False) -> tuple[list[FoldBacktest], Any, Any]:
    """Backtest every saved fold model of ``run_dir``; returns (per-fold results, the market, the
    ``ExecutionPlan``: the run's ``[accel]`` for its agent's network, eval only).

    device: "auto" keeps the run's device setting, else "cpu" / "cuda" overrides it.
    bars_per_year, barriers: override the run's ``[backtest]`` settings (None: keep them).
    overrides: ``section.key=value`` over the run's config.toml (``--set accel.eval=torch``).
    before: called with the plan before the first backtest (the CLI sets the matmul precision).
    quant: also the in-sample quant rule on every window (``foxhunt.train.oos.quant_backtest``, as the
    run wrote it into folds/fold_k/oos.safetensors), in ``FoldBacktest.quant``.
    Raises ConfigError (one line) for a directory that is not a run, has no fold model yet, or whose
    data no longer matches the run's.
    """
    import torch

    from foxhunt.accel.backend import resolve_config
    from foxhunt.agents import registry
    from foxhunt.agents.model_io import load_model
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
    from foxhunt.errors import ConfigError
    from foxhunt.folds import FoldRange
    from foxhunt.pipeline import prepare_market

    cfg, models = read_run(run_dir, device, overrides)
    prepared = prepare_market(cfg)
    market = prepared.market
    loaded, extras = [], []
    for p in models:
        net, _, meta = load_model(p, market.device)
        if meta.extra.get("data_sha256") not in (None, market.source_sha256):
            raise ConfigError(f"model {p}: trained on data with sha256 {meta.extra['data_sha256'][:12]}…, "
                              f"the run's data source now gives {market.source_sha256[:12]}… (the data changed)")
        if tuple(meta.feature_names) != tuple(market.names) or meta.spec_version != market.spec_version:
            raise ConfigError(f"model {p}: trained on feature spec {meta.spec_version}; the cache now has "
                              f"{market.spec_version}: rebuild the features or retrain")
        # the slice the network was trained on (train.select = "inner": before its held-back window) gives
        # its normalisation and medians, as in training; older files record only the fold
        loaded.append((FoldRange(**meta.extra["fold"]), FoldRange(**meta.extra.get("trained_on") or meta.extra["fold"]),
                       (net, int(meta.env.get("decision_interval", 1)))))  # the model's k (train.decision_grid's choice)
        extras.append(dict(meta.extra))
    bpy = bars_per_year if bars_per_year is not None else cfg.backtest.bars_per_year
    use_barriers = cfg.backtest.barriers if barriers is None else barriers
    # The run's own backend, for the run's agent's network: evaluate as training did.
    plan = resolve_config(cfg, market.device, obs_dim=market.obs_dim, parts=("eval",), learner=registry.of(cfg).plan_learner(cfg))
    if before is not None:
        before(plan)
    bt = Backtester(market, cfg.env, chunk=cfg.train.eval_chunk, cuda_graphs=plan.graphs, bars_per_year=bpy)
    # Buy-and-hold: one lockstep run of every window under the first fold's statistics (the runner's rule).
    market.set_fold(loaded[0][0])
    starts = [f.val_start for f, _, _ in loaded]
    lengths = [f.val_len - 1 for f, _, _ in loaded]
    ones = torch.ones((len(loaded), max(lengths)), dtype=torch.float32, device=market.device)
    bh = bt.run(starts, lengths, ExposurePolicy(ones, cfg.env.n_actions), keep_curves=True, backend=plan.eval)
    qr = None
    if quant:
        from foxhunt.train.oos import quant_backtest

        qr = quant_backtest(prepared.bars, [f for f, _, _ in loaded], loaded[0][0], cfg.env, float(bt.bars_per_year), bt,
                            plan.eval)[0]
    out = []
    for i, (fold, trained_on, (net, k)) in enumerate(loaded):
        market.set_fold(trained_on)  # the network's normalisation and medians, as in training
        agent = bt.run([fold.val_start], [fold.val_len - 1], GreedyPolicy(net, k), keep_curves=True, keep_trades=True,
                       backend=plan.eval, barriers=use_barriers)
        report = registry.of(cfg).window_report  # the forecast's IC and hit rate, read back from the model
        ev = report(net, market, fold.val_start, fold.val_end, extras[i]) if report is not None else None
        out.append(FoldBacktest(fold, agent, _window(bh, i), use_barriers, ev, _window(qr, i) if qr is not None else None))
    return out, market, plan


def _window(res: Any, i: int) -> Any:
    """Window i of a multi-window BacktestResult as a one-window result (metrics, curves)."""
    from dataclasses import replace

    n = int(res.lengths[i])
    cut = lambda a: a[i : i + 1, :n] if a is not None else None  # noqa: E731
    return replace(res, metrics=[res.metrics[i]], starts=res.starts[i : i + 1], lengths=res.lengths[i : i + 1],
                   returns=cut(res.returns), positions=cut(res.positions),
                   metrics_tensor=res.metrics_tensor[i : i + 1] if res.metrics_tensor is not None else None)
