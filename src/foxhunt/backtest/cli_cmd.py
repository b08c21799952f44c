"""`foxhunt backtest`: saved models (one, or an ensemble) over windows of a bar file or sample."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

console = Console()


def backtest(
    model: list[Path] = typer.Option([], "--model", help="model file(s) (.safetensors); several make an ensemble"),
    run: Optional[Path] = typer.Option(None, "--run", help="a `foxhunt train` run directory: each fold's model on its "
                                       "validation window of the run's own data (instead of --model)"),
    data: Optional[Path] = typer.Option(None, help="bar file (CSV/Parquet); default: --sample"),
    sample: str = typer.Option("sp500", help="built-in data when --data is absent: synthetic | sp500 | nasdaq"),
    windows: int = typer.Option(1, min=1, help="split the usable data into this many equal windows"),
    ensemble_mode: str = typer.Option("vote", help="ensemble: vote | mean"),
    policy: str = typer.Option("greedy", "--policy", help="one model: greedy (argmax) | sampled (softmax draws: a PPO "
                               "model's own stochastic policy; reproducible with --seed)"),
    seed: int = typer.Option(0, "--seed", min=0, help="seed of --policy sampled"),
    out: Optional[Path] = typer.Option(None, help="output directory [default: backtests/latest; RUN_DIR/backtest with --run]"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    cache_dir: Path = typer.Option(Path(".foxhunt-cache"), help="feature cache directory"),
) -> None:
    """Backtest saved models: metrics JSON/CSV and an HTML report with equity and drawdown curves."""
    import torch

    from foxhunt.agents.model_io import load_model
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import EnsemblePolicy, ExposurePolicy, GreedyPolicy
    from foxhunt.backtest.report import write_backtest_report, write_metrics
    from foxhunt.config import build_config
    from foxhunt.data import load_source
    from foxhunt.device import resolve_device
    from foxhunt.env import EnvParams
    from foxhunt.errors import ConfigError
    from foxhunt.features.cache import load_or_build
    from foxhunt.folds import FoldRange
    from foxhunt.market import MarketData, NormStats

    if ensemble_mode not in ("vote", "mean"):
        raise ConfigError(f"--ensemble-mode {ensemble_mode!r}: expected vote or mean")
    if policy not in ("greedy", "sampled") or (policy == "sampled" and len(model) != 1):
        raise ConfigError(f"--policy {policy!r}: expected greedy, or sampled with exactly one --model")
    if (run is None) == (not model):
        raise ConfigError("foxhunt backtest: pass --model FILE (one or more) or --run RUN_DIR, not both")
    if run is not None:
        _backtest_run(run, out or run / "backtest", device)
        return
    out = out or Path("backtests/latest")
    dev = resolve_device(device)
    loaded = [load_model(p, dev) for p in model]  # validates every file before anything is written
    src = {"source": "file", "path": str(data)} if data is not None else {"source": sample}
    cfg = build_config({"data": src}, source="options")
    bars = load_source(cfg.data)
    fs = load_or_build(bars, cache_dir, device=dev).features
    for p, (_, _, meta) in zip(model, loaded):
        if meta.feature_names != fs.names or meta.spec_version != fs.spec_version:
            raise ConfigError(f"model {p} was trained on feature spec {meta.spec_version} with {len(meta.feature_names)} "
                              f"features; this data has spec {fs.spec_version} with {fs.n_features}: rebuild or retrain")
    market = MarketData(fs, dev)
    t = len(fs)
    usable = t - 1 - fs.warmup
    if usable < windows * 2:
        raise ConfigError(f"{usable} usable bars cannot make {windows} windows")
    # The env needs fold medians (order routing, initial volatility): the model's training medians
    # when it recorded them, else those of the whole series (a pseudo-fold).
    market.set_fold(FoldRange(0, fs.warmup, t - 2, t - 2, t - 1))
    medians = loaded[0][2].extra.get("medians")
    if medians:
        market.median_abs_return.fill_(medians["abs_return"])
        market.median_range.fill_(medians["range"])
        market.median_volume.fill_(medians["volume"])
    edges = np.linspace(fs.warmup, t - 1, windows + 1).astype(np.int64)
    starts, lengths = edges[:-1], np.diff(edges)
    nets = [n for n, _, _ in loaded]
    env = EnvParams(**{k: v for k, v in loaded[0][2].env.items() if k in EnvParams.model_fields})
    bt = Backtester(market, env)
    f = market.n_features
    if len(nets) == 1 and policy == "sampled":
        from foxhunt.backtest.sampled import SampledPolicy

        pol, norms = SampledPolicy(nets[0], seed), [loaded[0][1]] * windows
    elif len(nets) == 1:
        pol, norms = GreedyPolicy(nets[0]), [loaded[0][1]] * windows
    else:
        pol = EnsemblePolicy(nets, mode=ensemble_mode, norms=[(nm.mean, nm.std) for _, nm, _ in loaded])
        ident = NormStats(torch.zeros(f, dtype=torch.float64, device=dev), torch.ones(f, dtype=torch.float64, device=dev))
        norms = [ident] * windows
    res = bt.run(starts, lengths, pol, norms=norms, keep_curves=True, keep_trades=True)
    n_act = nets[0].n_actions
    bh = bt.run(starts, lengths, ExposurePolicy(torch.ones(windows, int(lengths.max()), device=dev), n_act), keep_curves=True)
    ts = market.timestamps_host
    rows, curves, times = [], [], []
    for w in range(windows):
        label_model = "model" if len(nets) == 1 else f"ensemble ({ensemble_mode})"
        label_model += f" (sampled, seed {seed})" if policy == "sampled" else ""
        for label, r in ((label_model, res), ("buy & hold", bh)):
            row = {"window": w, "label": label, "start": _iso(ts[starts[w]]), "end": _iso(ts[starts[w] + lengths[w]]), **r.metrics[w]}
            rows.append(row)
        curves.append([("model", res.equity(w)), ("buy & hold", bh.equity(w))])
        times.append(ts[starts[w]: starts[w] + lengths[w] + 1])
    out.mkdir(parents=True, exist_ok=True)
    write_metrics(out, rows)
    (out / "trades.json").write_text(__import__("json").dumps(res.trades, indent=1))
    report = write_backtest_report(out / "report.html", "foxhunt backtest", rows, curves, times,
                                   notes=f"models: {', '.join(str(p) for p in model)}; data: {data or sample}")
    _print(rows, report)


def _backtest_run(run: Path, out: Path, device: str) -> None:
    """``--run``: every finished fold's model on its validation window (see ``backtest.run_dir``)."""
    import json

    from foxhunt.backtest.report import write_backtest_report, write_metrics
    from foxhunt.backtest.run_dir import backtest_run_dir

    folds, market = backtest_run_dir(run, device)
    ts = market.timestamps_host
    rows, curves, times = [], [], []
    for fb in folds:
        f, start, n = fb.fold, fb.fold.val_start, fb.fold.val_len - 1
        for label, r in (("agent", fb.agent), ("buy & hold", fb.buy_and_hold)):
            rows.append({"window": f.fold, "label": label, "start": _iso(ts[start]), "end": _iso(ts[start + n]), **r.metrics[0]})
        curves.append([("agent", fb.agent.equity(0)), ("buy & hold", fb.buy_and_hold.equity(0))])
        times.append(ts[start: start + n + 1])
    out.mkdir(parents=True, exist_ok=True)
    write_metrics(out, rows)
    trades = [{"fold": fb.fold.fold, **t} for fb in folds for t in (fb.agent.trades or [])]
    (out / "trades.json").write_text(json.dumps(trades, indent=1))
    report = write_backtest_report(out / "report.html", f"foxhunt backtest — run {run.name}", rows, curves, times,
                                   notes=f"run: {run}; each fold's model on its validation window (window = fold)")
    _print(rows, report)


def _print(rows: list[dict], report: Path) -> None:
    cols = ("window", "label", "sharpe", "total_return", "max_drawdown", "trade_count")
    table = Table(title="backtest")
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    console.print(table)
    console.print(f"report: {report}", highlight=False, soft_wrap=True)


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")).replace("T", " ")
