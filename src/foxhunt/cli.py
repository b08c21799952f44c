"""The `foxhunt` command line (typer + rich).

One error boundary, at the top-level command group (:class:`ErrorBoundary`), covers every
command: a user-facing failure (a ``FoxhuntError``: bad data, config, run directory, model file or
path; an ``OSError`` on a path the user gave) is one red line naming the path and the rule, and
exit code 2. Commands check their inputs and output paths before they compute or write anything,
so nothing is written when input is bad. Any other exception is a bug and shows a traceback.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from foxhunt.console import console, err_console, iso_time, one_line, show_path
from foxhunt.errors import FoxhuntError

F = TypeVar("F", bound=Callable[..., object])


def error_line(exc: BaseException) -> str | None:
    """The one-line message of a user-facing failure, or None when ``exc`` is a bug."""
    if isinstance(exc, FoxhuntError):
        return one_line(str(exc))
    if isinstance(exc, OSError) and exc.errno not in (None, errno.EPIPE):
        where = str(exc.filename) if exc.filename is not None else ""
        if exc.filename2 is not None:
            where += f" -> {exc.filename2}"
        rule = exc.strerror or str(exc)
        return one_line(f"{where}: {rule}" if where else rule)
    return None


class ErrorBoundary(TyperGroup):
    """The top-level group: every subcommand runs inside its ``invoke``, so this is the one place
    that turns user-facing failures into one line and exit code 2 (see the module docstring)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (FoxhuntError, OSError) as exc:
            line = error_line(exc)
            if line is None:
                raise
            err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
            raise typer.Exit(getattr(exc, "exit_code", 2)) from None


def user_errors(fn: F) -> F:
    """Kept for commands registered as ``app.command(...)(user_errors(fn))``: the boundary is now
    :class:`ErrorBoundary`, so this returns ``fn`` unchanged."""
    return fn


app = typer.Typer(cls=ErrorBoundary, add_completion=False, no_args_is_help=True,
                  help="GPU-resident RL trading agents: data, features, folds, training, backtests.")
data_app = typer.Typer(no_args_is_help=True, help="Load, validate and generate bar data.")
features_app = typer.Typer(no_args_is_help=True, help="Build the content-hashed feature cache.")
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")


OverrideOpt = typer.Option([], "--set", help="config override section.key=value (repeatable)")
ReadOpt = typer.Option([], "--set", help="how to read the file: data.KEY=VALUE (timestamp_format, dayfirst, timestamp_unit, "
                       "adjust, repair; repeatable)")


# --------------------------------------------------------------------------- data
@data_app.command("validate")
def data_validate(
    files: list[Path] = typer.Argument(..., metavar="FILE", help="CSV or Parquet bar file; several files, a directory of them, a glob pattern "
                                       "or a long table with a symbol column: a universe, one line per symbol"),
    repair: bool = typer.Option(False, help="sort rows and drop bad rows instead of failing (logged)"),
    overrides: list[str] = ReadOpt,
) -> None:
    """Check bar files against every rule; print what was read; exit 2 on bad data. Writes nothing."""
    from foxhunt.data.describe import data_summary
    from foxhunt.data.universe import is_universe, load_universe
    from foxhunt.universe_cli import print_universe

    data_cfg = _data_config(files[0], overrides, "foxhunt data validate")
    if repair:
        data_cfg = data_cfg.model_copy(update={"repair": True})
    sources = [str(f) for f in files]
    universe = load_universe(sources, data_cfg)
    if is_universe(sources, data_cfg) or universe.from_table[0]:
        print_universe(universe, console)
        return
    file, bars = files[0], universe.bars[0]  # one file without a symbol column: today's lines
    vol = "volume present" if bars.has_volume else "volume MISSING (volume features are constant)"
    first = iso_time(bars.timestamps[0])
    last = iso_time(bars.timestamps[-1])
    s = data_summary(bars)
    every = f" {s['interval']}" if len(bars) > 1 else ""
    console.print(f"[green]ok[/] {show_path(file)}: {len(bars)} bars{every}, {first} → {last}, {vol}", highlight=False, soft_wrap=True)
    for note in bars.notes:  # what was inferred to read the file (or ignored in it)
        console.print(f"  read: {escape(note)}", highlight=False, soft_wrap=True)


def _data_config(file: Path, overrides: list[str], command: str) -> Any:
    """The ``[data]`` section of ``--set data.KEY=VALUE`` texts over ``file`` (data.* keys only: a
    ConfigError names others)."""
    from foxhunt.config import load_config, parse_override
    from foxhunt.errors import ConfigError

    for text in overrides:
        if parse_override(text)[0][0] != "data":
            raise ConfigError(f"--set {text}: {command} takes data.* keys only")
    return load_config(None, overrides, values={"data": {"source": "file", "path": str(file)}}).data


def _read_options(file: Path, overrides: list[str], command: str) -> dict[str, object]:
    """``load_bars``' options from ``--set data.KEY=VALUE`` texts (data.* keys only: a ConfigError names others)."""
    from foxhunt.data import file_options

    return file_options(_data_config(file, overrides, command))


@data_app.command("sample")
def data_sample(
    out: Path = typer.Option(..., "--out", help="output file (.csv or .parquet)"),
    source: str = typer.Option("synthetic", help="synthetic | sp500 | nasdaq"),
    bars: Optional[int] = typer.Option(None, help="number of bars (synthetic: generated; samples: the last N)"),
    seed: int = typer.Option(7, help="generator seed (synthetic)"),
    bar_seconds: int = typer.Option(60, help="bar spacing in seconds (synthetic)"),
) -> None:
    """Write built-in data to a file: the synthetic market or a real daily index series."""
    from foxhunt.config import build_config
    from foxhunt.data import load_source
    from foxhunt.data.loader import file_format
    from foxhunt.data.writer import write_bars
    from foxhunt.paths import check_output_file

    check_output_file(out, "--out")  # before generating: a directory or unwritable place fails now
    file_format(out)
    cfg = build_config({"data": {"source": source, "seed": seed, "bar_seconds": bar_seconds, **({"bars": bars} if bars else {})}}, source="options")
    b = load_source(cfg.data, limit_samples=bars is not None)
    write_bars(b, out)
    console.print(f"wrote {len(b)} {source} bars to {show_path(out)}", highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------- features
@features_app.command("build")
def features_build(
    file: Path = typer.Argument(..., help="CSV or Parquet bar file"),
    cache_dir: Path = typer.Option(Path(".foxhunt-cache"), help="feature cache directory"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    overrides: list[str] = ReadOpt,
) -> None:
    """Build (or reuse) the feature cache for a bar file and print where it is."""
    from foxhunt.paths import check_output_dir

    check_output_dir(cache_dir, "--cache-dir")  # first: before the (torch) imports and any work
    options = _read_options(file, overrides, "foxhunt features build")
    from foxhunt.data.loader import load_bars
    from foxhunt.device import resolve_device
    from foxhunt.features.cache import load_or_build, require_formed_rows

    dev = resolve_device(device)
    bars = load_bars(file, **options)
    require_formed_rows(bars)
    res = load_or_build(bars, cache_dir, device=dev)
    state = "reused" if not res.built else f"built in {res.seconds:.2f} s"
    fs = res.features
    console.print(
        f"{state}: {show_path(res.path)} ({len(fs)} bars × {fs.n_features} features, warm-up {fs.warmup} bars)",
        highlight=False, soft_wrap=True,
    )


# --------------------------------------------------------------------------- prepare
@app.command("prepare")
def prepare(
    data: Optional[list[Path]] = typer.Option(None, help="bar file (CSV/Parquet); default: built-in sample. A directory, several "
                                              "--data, a pattern or a long table is a universe: a fold table per symbol"),
    sample: str = typer.Option("synthetic", help="built-in data when --data is absent: synthetic | sp500 | nasdaq"),
    config: Optional[Path] = typer.Option(None, help="TOML run configuration"),
    device: Optional[str] = typer.Option(None, help="auto | cpu | cuda"),
    overrides: list[str] = OverrideOpt,
) -> None:
    """Run data → features → folds → device-resident market data and print what was built."""
    from foxhunt.config import load_config
    from foxhunt.pipeline import prepare_market, prepare_universe

    # Options are set as values (never pasted into TOML text: a path may hold any character).
    values: dict[str, dict[str, object]] = {}
    if data:
        values["data"] = {"source": "file", "path": str(data[0]), **({"paths": [str(d) for d in data[1:]]} if len(data) > 1 else {})}
    elif sample != "synthetic":
        values["data"] = {"source": sample}
    if device is not None:
        values["run"] = {"device": device}
    from foxhunt.fold_layout import spans_set

    layout = "config" if spans_set(config, overrides) else "fit"  # foxhunt.fold_layout
    cfg = load_config(config, list(overrides), values=values)
    bars = None
    if cfg.data.source == "file":
        from foxhunt.data.universe import config_sources, is_universe, load_universe
        from foxhunt.universe_cli import print_prepared_universe

        sources = config_sources(cfg.data)
        universe = load_universe(sources, cfg.data)
        if is_universe(sources, cfg.data) or universe.from_table[0]:
            print_prepared_universe(prepare_universe(cfg, fold_layout=layout, universe=universe), console)
            return
        bars = universe.bars[0]  # one file without a symbol column: today's prepare, the file read once
    _print_prepared(prepare_market(cfg, console=console, fold_layout=layout, bars=bars))


def _print_prepared(p: "object") -> None:
    m = p.market
    table = Table(title=f"walk-forward folds ({p.config.folds.mode})")
    for col in ("fold", "train bars", "train", "val bars", "val"):
        table.add_column(col)
    ts = m.timestamps_host
    for f in p.folds:
        table.add_row(
            str(f.fold),
            str(f.train_len),
            f"{iso_time(ts[f.train_start])} → {iso_time(ts[f.train_end - 1])}",
            str(f.val_len),
            f"{iso_time(ts[f.val_start])} → {iso_time(ts[f.val_end - 1])}",
        )
    console.print(table)
    if p.fold_note:
        console.print(f"folds {escape(p.fold_note)}", highlight=False, soft_wrap=True)
    console.print(
        f"market data on [bold]{m.device}[/]: {m.n_bars} bars × {m.n_features} features "
        f"(obs dim {m.obs_dim}), warm-up {m.warmup} bars; cache {show_path(p.cache_path)}",
        highlight=False, soft_wrap=True,
    )


from foxhunt.backtest.cli_cmd import backtest as _backtest  # noqa: E402

app.command("backtest")(_backtest)


from foxhunt.train.cli_cmd import train as _train  # noqa: E402

app.command("train")(_train)


from foxhunt.tune.cli_cmd import tune as _tune  # noqa: E402

app.command("tune")(user_errors(_tune))


from foxhunt.scorecard.cli_cmd import scorecard as _scorecard  # noqa: E402

app.command("scorecard")(user_errors(_scorecard))


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
