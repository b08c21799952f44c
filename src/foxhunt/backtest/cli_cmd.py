"""`foxhunt backtest`: saved models (one, or an ensemble) over windows of a bar file or sample, or
of every symbol of a universe (``--data DIR``, several files, a pattern, a long table:
``foxhunt.backtest.universe``, with its portfolios and report).

How it runs follows ``[accel]`` like `foxhunt train` (``foxhunt.accel``): with ``--model`` the
section of ``--config FILE`` (else the defaults) plus ``--set accel.…`` overrides; with ``--run`` the
run's own ``config.toml`` plus those overrides. The resolved plan (its ``eval``: the fused kernel or
the torch path, settled against the models) is printed first and written to ``accel.json`` beside
the metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from foxhunt.console import console, iso_time


# Help strings are rich markup (typer): ``escape`` keeps "[default: …]" / "[accel]" from being read as
# style tags and dropped from --help (tests/test_cli_help.py).
def backtest(
    model: list[Path] = typer.Option([], "--model", help="model file(s) (.safetensors); several make an ensemble"),
    run: Optional[Path] = typer.Option(None, "--run", help="a `foxhunt train` run directory: each fold's model on its "
                                       "validation window of the run's own data (instead of --model)"),
    data: list[Path] = typer.Option([], "--data", help="bar file (CSV/Parquet); default: --sample. A directory, several "
                                    "--data, a glob pattern or a long table with a symbol column is a universe: every "
                                    "symbol backtested in one call, plus equal-weight and inverse-volatility portfolios"),
    sample: str = typer.Option("sp500", help="built-in data when --data is absent: synthetic | sp500 | nasdaq"),
    windows: int = typer.Option(1, min=1, help="split the usable data into this many equal windows"),
    ensemble_mode: str = typer.Option("vote", help="ensemble: vote | mean"),
    policy: str = typer.Option("greedy", "--policy", help="one model: greedy (argmax) | sampled (softmax draws: a PPO "
                               "model's own stochastic policy; reproducible with --seed)"),
    seed: int = typer.Option(0, "--seed", min=0, help="seed of --policy sampled"),
    out: Optional[Path] = typer.Option(None, help=escape("output directory [default: backtests/latest; RUN_DIR/backtest with --run]")),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    cache_dir: Path = typer.Option(Path(".foxhunt-cache"), help="feature cache directory"),
    bars_per_year: Optional[float] = typer.Option(None, "--bars-per-year", help=escape("annualisation factor [default: the run's "
                                                  "backtest.bars_per_year, else inferred from the bars present per year]")),
    barriers: Optional[bool] = typer.Option(None, "--barriers/--no-barriers", help=escape("triple-barrier evaluation: label each "
                                            "round trip +1 profit / -1 stop / 0 time [default: backtest.barriers, off]")),
    config: Optional[Path] = typer.Option(None, "--config", help=escape("--model: a TOML file whose [accel] and [backtest] "
                                          "sections apply (other sections are ignored) [default: the built-in defaults]")),
    overrides: list[str] = typer.Option([], "--set", help="override accel.KEY=VALUE or backtest.KEY=VALUE, or how to read --data: "
                                        "data.KEY=VALUE (timestamp_format, dayfirst, timestamp_unit, adjust, repair; repeatable), "
                                        "e.g. --set accel.eval=torch; with --run over the run's config.toml"),
    backend: Optional[str] = typer.Option(None, "--backend", hidden=True, help="removed: see --set accel.eval"),
) -> None:
    """Backtest saved models: metrics JSON/CSV and an HTML report with equity and drawdown curves."""
    from foxhunt.accel.backend import resolve
    from foxhunt.agents.model_io import load_model
    from foxhunt.backtest.report import write_backtest_report, write_metrics
    from foxhunt.backtest.standalone import run_models
    from foxhunt.config import build_config
    from foxhunt.data import load_source
    from foxhunt.device import resolve_device
    from foxhunt.errors import ConfigError
    from foxhunt.features.cache import load_or_build
    from foxhunt.features.extra import extras_in, with_extras

    if ensemble_mode not in ("vote", "mean"):
        raise ConfigError(f"--ensemble-mode {ensemble_mode!r}: expected vote or mean")
    if policy not in ("greedy", "sampled") or (policy == "sampled" and len(model) != 1):
        raise ConfigError(f"--policy {policy!r}: expected greedy, or sampled with exactly one --model")
    if (run is None) == (not model):
        raise ConfigError("foxhunt backtest: pass --model FILE (one or more) or --run RUN_DIR, not both")
    from foxhunt.paths import check_output_dir

    if bars_per_year is not None and not (0 < bars_per_year <= 1e9):
        raise ConfigError(f"--bars-per-year {bars_per_year!r}: must be a number in (0, 1e9]")
    if backend is not None:
        raise ConfigError("--backend was removed: foxhunt backtest follows [accel]; use --set accel.eval=fused|torch "
                          "(or accel.backend), or --config FILE")
    _check_overrides(overrides)
    # Output paths are checked before the backtest runs (a file as --out fails now, not after).
    if run is not None:
        if config is not None:
            raise ConfigError("--config applies to --model; --run uses the run's own config.toml (override it with --set)")
        if not run.is_dir():
            raise ConfigError(f"--run {run}: not a training run directory (not a directory)")
        from foxhunt.config import parse_override

        if any(parse_override(text)[0][0] == "data" for text in overrides):
            raise ConfigError("--set data.* applies to --data with --model; --run reads its data as the run's config.toml says")
        _backtest_run(run, check_output_dir(out or run / "backtest", "--out"), device, bars_per_year, barriers, overrides)
        return
    out = check_output_dir(out or Path("backtests/latest"), "--out")
    check_output_dir(cache_dir, "--cache-dir")
    from foxhunt.config import load_config, parse_override

    # data.symbols / data.symbol_column apply to --data's files only (the defaults' data.source is not a file)
    picks = {key[-1]: value for key, value in ((parse_override(o)) for o in overrides if _universe_key(o))}
    if picks and not data:
        raise ConfigError(f"--set data.{next(iter(picks))}: a universe key, for --data files (not --sample)")
    settings = load_config(config, [o for o in overrides if not _universe_key(o)])
    bars_per_year = bars_per_year if bars_per_year is not None else settings.backtest.bars_per_year
    barriers = barriers if barriers is not None else settings.backtest.barriers
    dev = resolve_device(device)
    plan = resolve(settings.accel, None, dev, parts=("eval",))  # a contradiction fails before any file is read
    _matmul_precision(plan)
    loaded = [load_model(p, dev) for p in model]  # validates every file before anything is written
    src = ({"source": "file", "path": str(data[0]), **({"paths": [str(d) for d in data[1:]]} if len(data) > 1 else {})}
           if data else {"source": sample})
    # --set data.*: how to read the files (and, for a universe, which symbols and symbol column)
    read = {k: v for k, v in settings.to_dict()["data"].items() if k in READ_KEYS}
    cfg = build_config({"data": {**read, **picks, **src}}, source="options")
    if data:
        from foxhunt.data.universe import config_sources, load_universe

        universe = load_universe(config_sources(cfg.data), cfg.data)  # every file's rules checked before anything is written
        if len(universe) > 1:
            _backtest_universe(universe, model, loaded, out, cache_dir, dev, plan, windows=windows, ensemble_mode=ensemble_mode,
                               bars_per_year=bars_per_year, barriers=bool(barriers),
                               sampled_seed=seed if policy == "sampled" else None, data=data)
            return
        bars = universe.bars[0]  # one symbol: that file's backtest (load_source's one_symbol, the file read once)
    else:
        bars = load_source(cfg.data)
    fs = load_or_build(bars, cache_dir, device=dev).features
    # Columns a model was trained with beyond the spec (features.long_momentum, features.ema_horizons) are rebuilt from its
    # feature names; the check below then compares names and spec version as for any model.
    fs = with_extras(fs, *extras_in(loaded[0][2].feature_names, fs.n_features))
    for p, (_, _, meta) in zip(model, loaded):
        if meta.feature_names != fs.names or meta.spec_version != fs.spec_version:
            raise ConfigError(f"model {p} was trained on feature spec {meta.spec_version} with {len(meta.feature_names)} "
                              f"features; this data has spec {fs.spec_version} with {fs.n_features}: rebuild or retrain")
    with _torch_progress() as progress:
        res = run_models(model, loaded, fs, dev, windows=windows, ensemble_mode=ensemble_mode, plan=plan,
                         bars_per_year=bars_per_year, barriers=bool(barriers), progress=progress,
                         say=lambda line: console.print(line, highlight=False, soft_wrap=True),
                         sampled_seed=seed if policy == "sampled" else None)
    out.mkdir(parents=True, exist_ok=True)
    write_metrics(out, res.rows)
    (out / "trades.json").write_text(__import__("json").dumps(res.trades, indent=1))
    (out / "accel.json").write_text(res.plan.to_json() + "\n")  # what ran (the plan, settled against the models)
    notes = "; ".join([f"models: {', '.join(str(p) for p in model)}; data: {data[0] if data else sample}", *res.notes])
    from foxhunt.backtest.annualisation import resolve_bars_per_year

    bpy = resolve_bars_per_year(bars.timestamps, bars_per_year).bars_per_year  # as the backtester resolved it
    per_window = [[{**t, "entry_bar": t["entry_bar"] - s, "exit_bar": t["exit_bar"] - s} for t in res.trades if t["window"] == w]
                  for w, s in enumerate(res.starts)]  # bars counted from each window's first
    report = write_backtest_report(out / "report.html", "foxhunt backtest", res.rows, res.curves, res.times, notes=notes,
                                   bars_per_year=bpy, trades=per_window)
    _print(res.rows, report)
    _learner_lines(out, [(w, ev) for w, ev in enumerate(res.learner_eval)], loaded[0][2].extra.get("agent"), "window")


READ_KEYS = ("timestamp_format", "dayfirst", "timestamp_unit", "adjust", "repair")
"""The [data] keys ``--set`` may give with ``--data``: how to read the file (foxhunt.data.file_options)."""
UNIVERSE_KEYS = ("symbols", "symbol_column")
"""The [data] keys of a universe ``--set`` may give with ``--data`` (foxhunt.data.universe)."""


def _backtest_universe(universe: Any, model: list[Path], loaded: list[Any], out: Path, cache_dir: Path, dev: Any, plan: Any, *,
                       windows: int, ensemble_mode: str, bars_per_year: float | None, barriers: bool,
                       sampled_seed: int | None, data: list[Path]) -> None:
    """``--data`` naming several symbols: every symbol in one backtest call per policy, the portfolios,
    and the universe report (``foxhunt.backtest.universe``, ``universe_report``)."""
    from foxhunt.backtest.universe import run_universe
    from foxhunt.errors import ConfigError
    from foxhunt.features.extra import extras_in
    from foxhunt.features.spec import feature_names
    from foxhunt.features.universe import universe_features

    names = loaded[0][2].feature_names
    long_momentum, ema_horizons = extras_in(names, len(feature_names()))
    uf = universe_features(universe, cache_dir, device=dev, long_momentum=long_momentum, ema_horizons=ema_horizons)
    fs = uf.features
    for p, (_, _, meta) in zip(model, loaded):
        if meta.feature_names != fs.names or meta.spec_version != fs.spec_version:
            raise ConfigError(f"model {p} was trained on feature spec {meta.spec_version} with {len(meta.feature_names)} "
                              f"features; this data has spec {fs.spec_version} with {fs.n_features}: rebuild or retrain")
    with _torch_progress() as progress:
        run = run_universe(model, loaded, uf, universe, dev, windows=windows, ensemble_mode=ensemble_mode, plan=plan,
                           bars_per_year=bars_per_year, barriers=barriers, progress=progress, sampled_seed=sampled_seed,
                           say=lambda line: console.print(line, highlight=False, soft_wrap=True))
    notes = "; ".join([f"models: {', '.join(str(p) for p in model)}; data: {', '.join(str(d) for d in data)} "
                       f"({len(universe)} symbols)", *run.notes])
    _write_universe(out, run, run.plan, "foxhunt backtest — universe", notes)


def _write_universe(out: Path, run: Any, plan: Any, title: str, notes: str, window: str = "window") -> None:
    """A universe backtest's files (metrics.json / .csv, trades.json, accel.json, report.html) and its table."""
    import json

    from foxhunt.backtest.report import write_metrics
    from foxhunt.backtest.universe_report import write_universe_report

    out.mkdir(parents=True, exist_ok=True)
    write_metrics(out, run.rows)
    (out / "trades.json").write_text(json.dumps(run.trades, indent=1))
    (out / "accel.json").write_text(plan.to_json() + "\n")
    cols = sorted({r["window"] for r in run.rows if r["symbol"] != "portfolio"}) if window == "fold" else None
    report = write_universe_report(out / "report.html", title, run, notes=notes, window=window, columns=cols)
    shown = [r for r in run.rows if r["symbol"] == "portfolio" and (window != "fold" or r["window"] == "all")
             or r["symbol"] != "portfolio" and r["label"] == run.label]
    _print(shown, report, ("symbol", "window", "weights", "label", "sharpe", "total_return", "max_drawdown", "trade_count"))


def _universe_key(text: str) -> bool:
    """Whether ``--set TEXT`` sets data.symbols or data.symbol_column."""
    from foxhunt.config import parse_override

    key = parse_override(text)[0]
    return key[0] == "data" and key[-1] in UNIVERSE_KEYS


def _check_overrides(overrides: list[str]) -> None:
    """``--set`` takes [accel], [backtest] and the [data] keys that say how to read a file only (the
    rest of a run is the model's or the run's)."""
    from foxhunt.config import parse_override
    from foxhunt.errors import ConfigError

    for text in overrides:
        section = parse_override(text)[0][0]
        if section not in ("accel", "backtest", "data"):
            raise ConfigError(f"--set {text}: foxhunt backtest takes accel.*, backtest.* and data.* keys only")
        if section == "data" and parse_override(text)[0][-1] not in READ_KEYS + UNIVERSE_KEYS:
            raise ConfigError(f"--set {text}: the data keys foxhunt backtest takes are {', '.join(READ_KEYS + UNIVERSE_KEYS)}")


def _matmul_precision(plan: Any) -> None:
    """The plan's float32 matmul precision for the torch path (as `foxhunt train`'s evaluation has it)."""
    from foxhunt.agents.exec_choice import apply_matmul_precision, exec_choice

    apply_matmul_precision(exec_choice(plan))


class _torch_progress:
    """A rich progress bar fed by ``Backtester.run(progress=…)`` (torch path; steps of the longest window)."""

    def __enter__(self) -> "Any":
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("backtest (torch path)"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True)
        self.bar.__enter__()
        self.task: Any = None
        self.last = 0

        def update(done: int, total: int) -> None:
            if self.task is None or done < self.last:  # a new backtest call starts from 0
                self.task = self.bar.add_task("steps", total=total)
            self.last = done
            self.bar.update(self.task, completed=done, total=total)

        return update

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)  # type: ignore[arg-type]


def _backtest_run(run: Path, out: Path, device: str, bars_per_year: float | None = None,
                  barriers: bool | None = None, overrides: list[str] | None = None) -> None:
    """``--run``: every finished fold's model on its validation window (see ``backtest.run_dir``); a
    pooled universe run per symbol and as portfolios (``backtest.universe_run_dir``); a universe run of
    one agent per symbol (train.pool = false) through its symbols' runs (``backtest.per_symbol_run_dir``)."""
    import json

    from foxhunt.backtest.report import write_backtest_report, write_metrics
    from foxhunt.backtest.run_dir import backtest_run_dir, read_config, read_run
    from foxhunt.backtest.timing import row_fields, window_timing
    from foxhunt.backtest.universe_run_dir import backtest_universe_run, universe_of_config

    run_cfg = read_config(run, device, overrides or [])
    universe = universe_of_config(run_cfg)
    if universe is not None and not run_cfg.train.pool:  # one agent per symbol: its symbols' runs
        from foxhunt.backtest.per_symbol_run_dir import backtest_per_symbol_run

        urun, uplan, unotes = backtest_per_symbol_run(run, run_cfg, universe, device,
                                                      bars_per_year=bars_per_year, barriers=barriers, overrides=overrides or [],
                                                      before=_matmul_precision)
        for line in unotes:
            console.print(line, highlight=False, soft_wrap=True)
        _write_universe(out, urun, uplan, f"foxhunt backtest — universe run {run.name} (one agent per symbol)",
                        "; ".join(unotes), window="fold")
        return
    cfg, models = read_run(run, device, overrides or [])
    if universe is not None:
        urun, uplan, unotes = backtest_universe_run(run, cfg, universe, models, bars_per_year=bars_per_year, barriers=barriers,
                                                    before=_matmul_precision)
        for line in unotes:
            console.print(line, highlight=False, soft_wrap=True)
        _write_universe(out, urun, uplan, f"foxhunt backtest — universe run {run.name}", "; ".join(unotes), window="fold")
        return

    folds, market, plan = backtest_run_dir(run, device, bars_per_year=bars_per_year, barriers=barriers,
                                           overrides=overrides or [], before=_matmul_precision)
    console.print(plan.summary(), highlight=False, soft_wrap=True)
    ts = market.timestamps_host
    rows, curves, times = [], [], []
    for fb in folds:
        f, start, n = fb.fold, fb.fold.val_start, fb.fold.val_len - 1
        for label, r in (("agent", fb.agent), ("buy & hold", fb.buy_and_hold)):
            timing = row_fields(window_timing(fb.agent, 0, fb.buy_and_hold, 0)) if r is fb.agent else {}  # beta, timing
            rows.append({"window": f.fold, "label": label, "start": iso_time(ts[start]), "end": iso_time(ts[start + n]),
                         **r.metrics[0], **timing})
        curves.append([("agent", fb.agent.equity(0)), ("buy & hold", fb.buy_and_hold.equity(0))])
        times.append(ts[start: start + n + 1])
    out.mkdir(parents=True, exist_ok=True)
    write_metrics(out, rows)
    trades = [{"fold": fb.fold.fold, **t} for fb in folds for t in (fb.agent.trades or [])]
    (out / "trades.json").write_text(json.dumps(trades, indent=1))
    (out / "accel.json").write_text(plan.to_json() + "\n")
    report = write_backtest_report(out / "report.html", f"foxhunt backtest — run {run.name}", rows, curves, times,
                                   bars_per_year=folds[0].agent.bars_per_year,
                                   trades=[[{**t, "entry_bar": t["entry_bar"] - fb.fold.val_start, "exit_bar": t["exit_bar"] - fb.fold.val_start}
                                            for t in fb.agent.trades or []] for fb in folds],
                                   notes=f"{plan.summary()}; run: {run}; each fold's model on its validation window (window = fold); "
                                         f"annualisation: {folds[0].agent.bars_per_year:,.1f} bars per year; episode "
                                         f"rules: {'triple-barrier labels' if folds[0].barriers else 'plain windows, no barriers'}")
    _print(rows, report)
    _learner_lines(out, [(fb.fold.fold, fb.learner_eval) for fb in folds], cfg.train.agent, "fold")


def _learner_lines(out: Path, records: list[tuple[int, Any]], agent: Any, window: str) -> None:
    """The model's own evaluation per window (the forecast's out-of-sample IC and hit rate, read back from
    the model: ``registry.Learner.window_report``), printed one line a window and written to
    ``learner_eval.json``; nothing for a learner without one."""
    import json

    from foxhunt.agents.registry import LEARNERS

    entry = LEARNERS.get(str(agent))
    if entry is None or entry.fold_phrase is None or not any(ev is not None for _, ev in records):
        return
    (out / "learner_eval.json").write_text(json.dumps([{window: w, **(ev or {})} for w, ev in records], indent=1) + "\n")
    for w, ev in records:
        words = entry.fold_phrase(ev) if ev is not None else "no forecast read back (the model records no horizon, or reads the last bars)"
        console.print(f"{window} {w}: {words}", highlight=False, soft_wrap=True, markup=False)


def _print(rows: list[dict], report: Path,
           cols: tuple[str, ...] = ("window", "label", "sharpe", "total_return", "max_drawdown", "trade_count")) -> None:
    from foxhunt.backtest.display import cell

    table = Table(title="backtest")
    for c in cols:
        table.add_column(c)
    for r in rows:  # a flat window's Sharpe reads "flat", an undefined value "–" (foxhunt.backtest.display)
        table.add_row(*(cell(r, c, "{:.3f}") if isinstance(r.get(c), float) or r.get(c) is None and c in r
                        else escape(str(r.get(c, ""))) for c in cols))
    console.print(table)
    console.print(f"report: {escape(str(report))}", highlight=False, soft_wrap=True)  # a path is not markup
