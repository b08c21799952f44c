"""``foxhunt train``: walk-forward DQN training on the built-in data or a bar file.

Registered in ``foxhunt.cli`` (``app.command("train")(train)``, inside its error boundary). Every input (data,
config, fold layout, run name, resume directory) is validated before the run directory is
created; a bad one is one red line and exit code 2 with nothing written into the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from foxhunt.console import console, show_path
from foxhunt.errors import ConfigError, ReportError


def train(
    data: Optional[list[Path]] = typer.Option(None, "--data", help="bar file (CSV/Parquet); default: the config's data (built-in "
                                              "synthetic). A directory, several --data or a pattern is a universe: one symbol "
                                              "trains as its file; several train one pooled agent a fold (train.pool)"),
    sample: Optional[str] = typer.Option(None, "--sample", help="built-in data instead of --data: synthetic | sp500 | nasdaq"),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML run configuration (default: the built-in train config, configs/train-default.toml)"),
    folds: Optional[int] = typer.Option(None, "--folds", help="train the last K walk-forward folds (folds.max_folds)"),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="epochs per fold (train.epochs)"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="continue RUN_DIR from its last committed checkpoint"),
    name: Optional[str] = typer.Option(None, "--name", help="run directory name under run.out_dir (default: a timestamp)"),
    overrides: list[str] = typer.Option([], "--set", help="config override section.key=value (repeatable)"),
    bars_per_year: Optional[float] = typer.Option(None, "--bars-per-year", help="annualisation factor (backtest.bars_per_year); default: inferred from the bars present per calendar year"),
) -> None:
    """Train DQN (or PPO: train.agent) agents walk-forward; evaluate each fold against buy-and-hold.

    One trainer is reused across folds; checkpoints are crash-safe (--resume continues a run);
    the run directory gets metrics.jsonl, TensorBoard events, per-fold metrics and report.html.
    """
    data = list(data) if data else None
    if resume is not None:
        given = [flag for flag, v in (("--data", data), ("--sample", sample), ("--config", config), ("--folds", folds),
                                      ("--epochs", epochs), ("--device", device), ("--name", name),
                                      ("--bars-per-year", bars_per_year)) if v is not None]
        if overrides:
            given.append("--set")
        if given:
            raise ConfigError(f"--resume continues a run with its saved config.toml; it cannot be combined with {', '.join(given)}")
    try:
        if resume is not None:
            run_dir, results = _resume(resume, console)
        else:
            ov = list(overrides) + ([f"backtest.bars_per_year={float(bars_per_year)!r}"] if bars_per_year is not None else [])
            run_dir, results = _start(data, sample, config, folds, epochs, device, name, ov, console)
    except ReportError as exc:  # the run is complete: show its results, then the report's one-line error
        if isinstance(exc.results, list) and exc.results:
            print_results(exc.results, console)
        raise
    print_results(results, console)
    if results and results[0]["fold"].get("universe"):  # a universe: its portfolio rows, then the files
        print_portfolio(run_dir, console)
        console.print(f"summary: [bold]{show_path(run_dir / 'summary.json')}[/]", highlight=False, soft_wrap=True)
    if (run_dir / "report.html").is_file() or not (results and results[0]["fold"].get("universe")):
        console.print(f"report: [bold]{show_path(run_dir / 'report.html')}[/]", highlight=False, soft_wrap=True)


def print_portfolio(run_dir: Path, console: Any) -> None:
    """A universe run's stitched out-of-sample portfolios (summary.json's ``portfolio`` rows of fold
    "all"): Sharpe, total return and max drawdown per weighting rule and policy."""
    import json

    from rich import box
    from rich.table import Table

    from foxhunt.backtest.display import cell

    path = run_dir / "summary.json"
    rows = [r for r in json.loads(path.read_text()).get("portfolio", []) if r.get("window") == "all"] if path.is_file() else []
    if not rows:
        return
    table = Table(title="portfolios, out of sample (every fold's validation window joined)", box=box.SIMPLE_HEAD)
    for col in ("weights", "policy", "Sharpe", "return", "max DD"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(r["weights"], r["label"], cell(r, "sharpe", "{:+.2f}"), cell(r, "total_return", "{:+.2%}"),
                      cell(r, "max_drawdown", "{:.2%}"))
    console.print(table)


def _start(data: list[Path] | None, sample: str | None, config: Path | None, folds: int | None, epochs: int | None,
           device: str | None, name: str | None, overrides: list[str], console: Any) -> tuple[Path, list[dict[str, Any]]]:
    from foxhunt.config import load_config
    from foxhunt.data.universe import config_sources, is_universe
    from foxhunt.fold_layout import spans_set
    from foxhunt.paths import check_output_dir
    from foxhunt.pipeline import prepare_market
    from foxhunt.train.config import default_train_config
    from foxhunt.train.run_dir import check_run_name, create_run_dir
    from foxhunt.train.runner import WalkForwardRunner

    if data is not None and sample is not None:
        raise ConfigError("give either --data FILE or --sample NAME, not both")
    # Options are set as values after the --set overrides (never pasted into TOML text: a path
    # may hold quotes, newlines or '#').
    values: dict[str, dict[str, Any]] = {}
    if data is not None:
        # One --data FILE is today's run; a directory, a pattern or several --data are a universe
        # (data.path + data.paths; foxhunt.data.universe).
        sources = [str(d.expanduser().resolve()) for d in data]
        values.setdefault("data", {}).update(source="file", path=sources[0], **({"paths": sources[1:]} if len(sources) > 1 else {}))
    elif sample is not None:
        values.setdefault("data", {})["source"] = sample
    if folds is not None:
        values.setdefault("folds", {})["max_folds"] = folds
    if epochs is not None:
        values.setdefault("train", {})["epochs"] = epochs
    if device is not None:
        values.setdefault("run", {})["device"] = device
    cfg = load_config(config, overrides, values) if config is not None else default_train_config(overrides, values)
    check_run_name(name or cfg.run.name)  # both before the data is prepared and the trainer built
    check_output_dir(cfg.run.out_dir, "run.out_dir")
    bars, settings, universe = None, None, None
    preset_run = config is None and data is not None  # the built-in settings follow the file's bar interval
    if cfg.data.source == "file" and (preset_run or is_universe(config_sources(cfg.data), cfg.data)):
        # Read and checked now, before anything is written: a universe of several symbols trains pooled
        # (foxhunt.train.universe_runner); one symbol trains as today's run on its file.
        bars, file_values, universe = _one_symbol(cfg.data)
        if file_values is not None:
            values["data"] = {**values.get("data", {}), **file_values}
            cfg = load_config(config, overrides, values) if config is not None else default_train_config(overrides, values)
    if preset_run:
        from foxhunt.train.interval_presets import interval_preset, universe_preset

        assert bars is not None
        preset = universe_preset(universe.bars) if universe is not None else interval_preset(bars)
        cfg = default_train_config(overrides, values, preset=preset.as_sections())
        settings = preset.line(overrides)
    # Unless the user set a fold span, folds are laid out by the data: a file's without --config, else
    # where the configured spans do not fit (foxhunt.fold_layout).
    layout = "config" if spans_set(config, overrides) else "data" if preset_run else "fit"
    if universe is not None and not cfg.train.pool:  # one agent per symbol (foxhunt.train.per_symbol)
        scales = _symbol_reward_scales(universe, overrides) if preset_run else None
        return _start_per_symbol(cfg, universe, layout, name, settings, scales, console)
    if universe is not None:
        return _start_universe(cfg, universe, layout, name, settings, console)
    # With --config the bars are loaded by prepare_market, as ever (its load time is the run's).
    prepared = prepare_market(cfg, console=console, fold_layout=layout, bars=bars if preset_run else None)
    runner = WalkForwardRunner(prepared, console)  # validates folds vs env, builds the trainer
    run_dir, resolved = create_run_dir(prepared.config, prepared, name)
    runner.use_config(resolved)
    _print_prepared(prepared, console)
    if settings is not None:
        console.print(settings, highlight=False, soft_wrap=True)
    console.print(f"run directory: {show_path(run_dir)}", highlight=False, soft_wrap=True)
    return run_dir, runner.run(run_dir)


def _one_symbol(data_cfg: Any) -> tuple[Any, dict[str, Any] | None, Any]:
    """(the first symbol's bars, data values, the universe when it holds several symbols, else None) of a
    file-backed ``[data]`` section. Where the data name one symbol held alone by one file through a
    directory, a pattern or several sources, the values are the ``data.path`` / ``data.paths`` that name
    that file instead: the run is then today's single-file run, its config.toml too."""
    from foxhunt.data.universe import config_sources, load_universe

    sources = config_sources(data_cfg)
    universe = load_universe(sources, data_cfg)
    if len(universe) > 1:
        return universe.bars[0], None, universe
    if universe.whole_file[0] and sources != [universe.files[0]]:
        return universe.bars[0], {"path": universe.files[0], "paths": None}, None
    return universe.bars[0], None, None


def _start_universe(cfg: Any, universe: Any, layout: str, name: str | None, settings: str | None,
                    console: Any) -> tuple[Path, list[dict[str, Any]]]:
    """Pooled training on a universe of several symbols: prepared and checked, then the run directory."""
    from foxhunt.pipeline import prepare_universe
    from foxhunt.train.run_dir import create_run_dir
    from foxhunt.train.universe_runner import UniverseRunner, check_universe, pooled_prepared

    check_universe(cfg)  # before the features are built
    prepared = pooled_prepared(cfg, prepare_universe(cfg, fold_layout=layout, universe=universe))
    runner = UniverseRunner(prepared, console)
    run_dir, resolved = create_run_dir(prepared.config, prepared, name)  # type: ignore[arg-type]
    runner.use_config(resolved)
    _print_universe(prepared, console)
    if settings is not None:
        console.print(settings, highlight=False, soft_wrap=True)
    console.print(f"run directory: {show_path(run_dir)}", highlight=False, soft_wrap=True)
    return run_dir, runner.run(run_dir)


def _symbol_reward_scales(universe: Any, overrides: list[str]) -> dict[str, float] | None:
    """{symbol: the interval preset's env.reward_scale of its own bars} (as ``--data FILE`` sets it), or None
    where ``--set`` gave env.reward_scale or a symbol's prices do not move."""
    from foxhunt.train.interval_presets import sets_reward_scale, symbol_reward_scales

    if sets_reward_scale(overrides):
        return None
    return symbol_reward_scales(universe.symbols, universe.bars)


def _start_per_symbol(cfg: Any, universe: Any, layout: str, name: str | None, settings: str | None,
                      scales: dict[str, float] | None, console: Any) -> tuple[Path, list[dict[str, Any]]]:
    """One agent per symbol on a universe (train.pool = false): checked, the run directory and every
    symbol's made, then each symbol trained (foxhunt.train.per_symbol)."""
    from foxhunt.train.per_symbol import PLAN_FILE, PerSymbolRunner, per_symbol_prepared, plan_json
    from foxhunt.train.run_dir import create_run_dir

    prepared = per_symbol_prepared(cfg, universe, layout, scales)
    runner = PerSymbolRunner(prepared, console)
    run_dir, resolved = create_run_dir(prepared.config, prepared, name, files={PLAN_FILE: plan_json(prepared)})  # type: ignore[arg-type]
    runner.use_config(resolved)
    runner.create_symbol_dirs(run_dir)
    members = ", ".join(str(int(f.member.sum())) for f in prepared.folds)
    note = f"; folds {prepared.fold_note}" if prepared.fold_note else ""
    console.print(f"universe: {len(universe)} symbols, {universe.n_bars} bars; {len(prepared.folds)} folds (member symbols: "
                  f"{members}){note}; one agent per symbol (train.pool = false), each on its own bars; "
                  f"{prepared.annualisation.describe()}", highlight=False, soft_wrap=True)
    if settings is not None:
        console.print(settings + ("; env.reward_scale per symbol from its own bars" if scales else ""), highlight=False,
                      soft_wrap=True)
    console.print(f"run directory: {show_path(run_dir)}", highlight=False, soft_wrap=True)
    return run_dir, runner.run(run_dir)


def _universe_of(cfg: Any) -> Any:
    """The universe a saved run's config names, when it has several symbols (else None: a file run)."""
    from foxhunt.data.universe import config_sources, is_universe, load_universe

    if cfg.data.source != "file" or not is_universe(config_sources(cfg.data), cfg.data):
        return None
    universe = load_universe(config_sources(cfg.data), cfg.data)
    return universe if len(universe) > 1 else None


def _print_universe(p: Any, console: Any) -> None:
    """The universe's line (symbols, bars, folds, members a fold) and the market's."""
    m, t = p.market, p.timings
    members = ", ".join(str(int(f.member.sum())) for f in p.folds)
    note = f"; folds {p.fold_note}" if p.fold_note else ""
    console.print(f"universe: {m.n_symbols} symbols, {m.n_bars} bars; {len(p.folds)} folds (member symbols: {members}){note}; "
                  f"pooled training, episodes drawn by {p.config.train.symbol_weighting} (train.symbol_weighting)"
                  + (", half of them in the drawn symbol's mirror (train.mirror)" if m.mirror_offset else ""),
                  highlight=False, soft_wrap=True)
    console.print(f"market: {m.n_bars} bars × {m.n_features} features on [bold]{m.device}[/]; load {t['load_s']:.2f} s, "
                  f"features {t['features_s']:.2f} s, upload {t['upload_s']:.3f} s", highlight=False)


def _resume(run_dir: Path, console: Any) -> tuple[Path, list[dict[str, Any]]]:
    from foxhunt.pipeline import prepare_market
    from foxhunt.train.run_dir import check_resume, is_complete, read_run_dir
    from foxhunt.train.runner import WalkForwardRunner

    cfg, point = read_run_dir(run_dir)  # verifies the last checkpoint's files (sha256)
    universe = _universe_of(cfg)
    if universe is not None and not cfg.train.pool:  # one agent per symbol: each symbol's run continues
        from foxhunt.train.per_symbol import PerSymbolRunner, per_symbol_prepared, read_reward_scales

        per = per_symbol_prepared(cfg, universe, reward_scales=read_reward_scales(run_dir))
        check_resume(run_dir, cfg, per, point)  # type: ignore[arg-type]
        console.print(f"resuming {show_path(run_dir)}: one agent per symbol; each symbol's run continues from its own "
                      "last checkpoint", highlight=False, soft_wrap=True)
        return run_dir, PerSymbolRunner(per, console).run(run_dir)
    if universe is not None:  # a pooled universe run (foxhunt.train.universe_runner)
        from foxhunt.pipeline import prepare_universe
        from foxhunt.train.universe_runner import UniverseRunner, pooled_prepared

        prepared: Any = pooled_prepared(cfg, prepare_universe(cfg, universe=universe))
        check_resume(run_dir, cfg, prepared, point)
        runner: Any = UniverseRunner(prepared, console)
    else:
        prepared = prepare_market(cfg, console=console)
        check_resume(run_dir, cfg, prepared, point)
        runner = WalkForwardRunner(prepared, console)
    if is_complete(point, len(prepared.folds)):
        console.print(f"run {show_path(run_dir)} is already complete; rebuilding its summary and report", highlight=False, soft_wrap=True)
        return run_dir, runner.finish(run_dir, None)
    if point.path is None:
        console.print(f"resuming {show_path(run_dir)}: no checkpoint yet, starting from fold 0", highlight=False, soft_wrap=True)
    else:
        m = point.manifest
        where = "end" if m["fold_done"] else f"epoch {m['epoch']}"
        console.print(f"resuming {show_path(run_dir)} from checkpoint {point.path.name} (fold {m['fold']}, {where})", highlight=False,
                      soft_wrap=True)
    return run_dir, runner.run(run_dir, point)


def _print_prepared(p: Any, console: Any) -> None:
    """The data line (file, bars, interval, span, what was inferred, the folds) and the market's."""
    from rich.markup import escape

    from foxhunt.data.describe import data_line, data_summary

    m, t = p.market, p.timings
    n, cap = len(p.folds), p.config.folds.max_folds
    folds = f"{n} fold{'s' if n != 1 else ''}" + (" (the last: folds.max_folds)" if cap is not None and n == cap else "")
    folds += f"; folds {p.fold_note}" if p.fold_note else ""
    console.print(f"data: {escape(data_line(data_summary(p.bars)))}; {folds}", highlight=False, soft_wrap=True)
    console.print(
        f"market: {m.n_bars} bars × {m.n_features} features on [bold]{m.device}[/]; "
        f"load {t['load_s']:.2f} s, features {t['features_s']:.2f} s "
        f"({'built' if p.cache_built else 'cached'}), upload {t['upload_s']:.3f} s",
        highlight=False,
    )


def print_results(results: list[dict[str, Any]], console: Any) -> None:
    """The per-fold validation table: greedy agent next to buy-and-hold (a flat fold reads "flat"), with
    the agent's beta on buy-and-hold, timing Sharpe and holding verdict (metrics.json's ``timing``)."""
    from rich import box
    from rich.table import Table

    from foxhunt.backtest.display import beats, cell, is_flat

    val = {r["fold"]["val_end"] - r["fold"]["val_start"] for r in results}
    span = f"{val.pop()} bars each" if len(val) == 1 else "bars vary"
    table = Table(title=f"validation windows ({span}): greedy agent vs buy & hold", box=box.SIMPLE_HEAD)
    for col in ("fold", "agent\nSharpe", "agent\nreturn", "agent\nmax DD", "agent\ntrades", "agent\nβ", "agent\ntiming",
                "agent\nverdict", "B&H\nSharpe", "B&H\nreturn", "B&H\nmax DD"):
        table.add_column(col, justify="right", no_wrap=True)
    wins = flats = 0
    for r in results:
        a, b, t = r.get("agent") or {}, r.get("buy_and_hold") or {}, r.get("timing") or {}
        wins += int(bool(b) and beats(a, b))  # a flat fold counts as Sharpe 0
        flats += int(is_flat(a))
        table.add_row(
            str(r["fold"]["fold"]),
            cell(a, "sharpe", "{:+.2f}"), cell(a, "total_return", "{:+.1%}"), cell(a, "max_drawdown", "{:.1%}"),
            cell(a, "trade_count", "{:.0f}"),
            cell(t, "beta", "{:+.2f}"), cell(t, "timing_sharpe", "{:+.2f}"), str(t.get("verdict") or "–"),
            cell(b, "sharpe", "{:+.2f}"), cell(b, "total_return", "{:+.1%}"), cell(b, "max_drawdown", "{:.1%}"),
        )
    console.print(table)
    if flats:
        console.print(f"{flats} of {len(results)} folds flat (no position: Sharpe 0, nothing risked)", highlight=False)
    if results and results[0].get("buy_and_hold"):
        console.print(f"agent Sharpe above buy & hold in {wins} of {len(results)} folds", highlight=False)
