"""The `foxhunt` command line (typer + rich).

Every user-facing error (bad data, bad config, bad run directory) is one red line and exit code 2;
nothing is written when input is bad.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Callable, Optional, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from foxhunt.errors import FoxhuntError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="GPU-resident RL trading agents: data, features, folds, training, backtests.")
data_app = typer.Typer(no_args_is_help=True, help="Load, validate and generate bar data.")
features_app = typer.Typer(no_args_is_help=True, help="Build the content-hashed feature cache.")
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")

console = Console()
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., object])


def user_errors(fn: F) -> F:
    """Turn FoxhuntError into one clear line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return fn(*args, **kwargs)
        except FoxhuntError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


OverrideOpt = typer.Option([], "--set", help="config override section.key=value (repeatable)")


# --------------------------------------------------------------------------- data
@data_app.command("validate")
@user_errors
def data_validate(
    file: Path = typer.Argument(..., help="CSV or Parquet bar file"),
    repair: bool = typer.Option(False, help="sort rows and drop bad rows instead of failing (logged)"),
) -> None:
    """Check a bar file against every rule; print one line; exit 2 on bad data. Writes nothing."""
    from foxhunt.data.loader import load_bars

    bars = load_bars(file, repair=repair)
    vol = "volume present" if bars.has_volume else "volume MISSING (volume features are constant)"
    first = _iso(bars.timestamps[0])
    last = _iso(bars.timestamps[-1])
    console.print(f"[green]ok[/] {file}: {len(bars)} bars, {first} → {last}, {vol}", highlight=False, soft_wrap=True)


@data_app.command("sample")
@user_errors
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
    from foxhunt.data.writer import write_bars

    cfg = build_config({"data": {"source": source, "seed": seed, "bar_seconds": bar_seconds, **({"bars": bars} if bars else {})}}, source="options")
    b = load_source(cfg.data, limit_samples=bars is not None)
    write_bars(b, out)
    console.print(f"wrote {len(b)} {source} bars to {out}", highlight=False)


# --------------------------------------------------------------------------- features
@features_app.command("build")
@user_errors
def features_build(
    file: Path = typer.Argument(..., help="CSV or Parquet bar file"),
    cache_dir: Path = typer.Option(Path(".foxhunt-cache"), help="feature cache directory"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
) -> None:
    """Build (or reuse) the feature cache for a bar file and print where it is."""
    from foxhunt.data.loader import load_bars
    from foxhunt.device import resolve_device
    from foxhunt.features.cache import load_or_build

    bars = load_bars(file)
    res = load_or_build(bars, cache_dir, device=resolve_device(device))
    state = "reused" if not res.built else f"built in {res.seconds:.2f} s"
    fs = res.features
    console.print(
        f"{state}: {res.path} ({len(fs)} bars × {fs.n_features} features, warm-up {fs.warmup} bars)",
        highlight=False,
    )


# --------------------------------------------------------------------------- prepare
@app.command("prepare")
@user_errors
def prepare(
    data: Optional[Path] = typer.Option(None, help="bar file (CSV/Parquet); default: built-in sample"),
    sample: str = typer.Option("synthetic", help="built-in data when --data is absent: synthetic | sp500 | nasdaq"),
    config: Optional[Path] = typer.Option(None, help="TOML run configuration"),
    device: Optional[str] = typer.Option(None, help="auto | cpu | cuda"),
    overrides: list[str] = OverrideOpt,
) -> None:
    """Run data → features → folds → device-resident market data and print what was built."""
    from foxhunt.pipeline import prepare_market

    ov = list(overrides)
    if data is not None:
        ov += ["data.source=\"file\"", f"data.path=\"{data}\""]
    elif sample != "synthetic":
        ov += [f"data.source=\"{sample}\""]
    if device is not None:
        ov += [f"run.device=\"{device}\""]
    prepared = prepare_market(config, ov, console=console)
    _print_prepared(prepared)


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
            f"{_iso(ts[f.train_start])} → {_iso(ts[f.train_end - 1])}",
            str(f.val_len),
            f"{_iso(ts[f.val_start])} → {_iso(ts[f.val_end - 1])}",
        )
    console.print(table)
    console.print(
        f"market data on [bold]{m.device}[/]: {m.n_bars} bars × {m.n_features} features "
        f"(obs dim {m.obs_dim}), warm-up {m.warmup} bars; cache {p.cache_path}",
        highlight=False,
    )


def _iso(ns: int) -> str:
    import numpy as np

    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")).replace("T", " ")


from foxhunt.backtest.cli_cmd import backtest as _backtest  # noqa: E402

app.command("backtest")(user_errors(_backtest))


from foxhunt.train.cli_cmd import train as _train  # noqa: E402

app.command("train")(user_errors(_train))


from foxhunt.scorecard.cli_cmd import scorecard as _scorecard  # noqa: E402

app.command("scorecard")(user_errors(_scorecard))


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
