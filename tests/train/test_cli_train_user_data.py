"""`foxhunt train --data FILE` on a user's own file, no --config, in a fresh process (issue 38):
daily, hourly and minute files as their tools write them load, take the built-in settings of their
bar interval, lay their folds out by the data and end with exit 0 and a report; spans the user set
that do not fit are one line naming the --set that would; --config wins over the presets.

Test-sized: one epoch of two rounds, the last one or two folds (--folds, --set dqn.*); the fold
layout is the data's, as a user's first run has it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foxhunt.backtest.timing import NO_MARKET_NOTE
from foxhunt.config import load_config
from foxhunt.fold_layout import auto_spans
from foxhunt.train.interval_presets import PRESETS
from tests.cli_run import assert_refused, run_cli
from tests.train.conftest import tiny_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WARMUP = 303
FAST = ["--epochs", "1", "--set", "dqn.rounds_per_epoch=2", "--set", "dqn.warmup_transitions=256", "--set", "train.tensorboard=false",
        "--set", "train.checkpoint_every=0", "--set", "run.device=cpu"]


def ohlcv(n: int, freq: str, start: str, sigma: float, seed: int = 3) -> pd.DataFrame:
    idx = pd.date_range(start, periods=n, freq=freq).as_unit("ns")
    rng = np.random.default_rng(seed)
    c = 100 * np.exp(np.cumsum(rng.normal(0, sigma, n)))
    o = np.r_[c[0], c[:-1]] * np.exp(rng.normal(0, sigma / 5, n))
    h = np.maximum(o, c) * np.exp(np.abs(rng.normal(0, sigma / 2, n)))
    lo = np.minimum(o, c) * np.exp(-np.abs(rng.normal(0, sigma / 2, n)))
    return pd.DataFrame({"Open": o, "High": h, "Low": lo, "Close": c, "Volume": rng.integers(1_000, 100_000, n)}, index=idx)


def daily_file(d: Path) -> Path:
    """Yahoo Finance: Date, Open, High, Low, Close, Adj Close, Volume; 2,300 business days."""
    df = ohlcv(2_300, "B", "2009-01-02", 0.012)
    df.insert(4, "Adj Close", df.Close * 0.97)
    df.rename_axis("Date").to_csv(d / "SPY.csv")
    return d / "SPY.csv"


def hourly_file(d: Path) -> Path:
    """MetaTrader 5: tab-separated <DATE> <TIME> <OPEN> … <TICKVOL> <VOL> <SPREAD>; 5,000 hours."""
    df = ohlcv(5_000, "h", "2020-01-01", 0.002)
    mt = pd.DataFrame({"<DATE>": df.index.strftime("%Y.%m.%d"), "<TIME>": df.index.strftime("%H:%M:%S"), "<OPEN>": df.Open.to_numpy(),
                       "<HIGH>": df.High.to_numpy(), "<LOW>": df.Low.to_numpy(), "<CLOSE>": df.Close.to_numpy(),
                       "<TICKVOL>": df.Volume.to_numpy(), "<VOL>": 0, "<SPREAD>": 2})
    mt.to_csv(d / "EURUSD_H1.csv", sep="\t", index=False)
    return d / "EURUSD_H1.csv"


def minute_file(d: Path) -> Path:
    """Binance kline CSV without a header (epoch milliseconds); 10,000 minutes (a week: the intraday
    settings' 1,024-bar episodes fit the data's first fold four times over)."""
    df = ohlcv(10_000, "min", "2021-01-01", 0.0004)
    ms = df.index.asi8 // 10**6
    k = pd.DataFrame({"t": ms, "o": df.Open, "h": df.High, "l": df.Low, "c": df.Close, "v": df.Volume, "ct": ms + 59_999, "q": 1.0,
                      "n": 10, "tb": 0.5, "tq": 0.5, "i": 0})
    k.to_csv(d / "BTCUSDT-1m.csv", header=False, index=False)
    return d / "BTCUSDT-1m.csv"


def check_run(d: Path, make, n: int, interval: str, cls: str, extra: list[str]) -> str:
    path = make(d)
    res = run_cli(d, "train", "--data", path.name, "--name", "r", *FAST, *extra, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = " ".join(res.stdout.split())  # rich may wrap a long line
    train, val = auto_spans(n - WARMUP, 60)
    assert f"{path.name}: {n:,} bars every {interval} ({cls})" in out
    assert (f"folds laid out by the data (no fold span set for this file): 5 expanding folds over the later half, train from "
            f"{train:,} bars, val {val:,} each, purge 60 (folds.train = {train}, folds.val = {val})") in out
    assert f"settings: built-in for {cls} bars (every {interval}; foxhunt.train.interval_presets): " in out
    run = d / "runs" / "r"
    cfg = tomllib.loads((run / "config.toml").read_text())
    assert (cfg["folds"]["train"], cfg["folds"]["val"], cfg["env"]["episode_length"]) == (train, val, PRESETS[cls]["env.episode_length"])
    assert "report: runs/r/report.html" in out and (run / "report.html").is_file()
    load_config(run / "config.toml")  # the resolved config reads back (a rerun from it sees the same folds)
    return (run / "report.html").read_text()


def test_a_daily_yahoo_file_trains_with_the_daily_settings_and_data_folds(tmp_path: Path) -> None:
    html = check_run(tmp_path, daily_file, 2_300, "1 day", "daily", ["--folds", "2"])
    assert "Out of sample: 2 validation windows joined" in html and "Monthly returns" in html
    assert "&#x27;Adj Close&#x27; ignored (data.adjust = true scales" in html


def test_an_hourly_metatrader_file_trains_with_the_hourly_settings_and_data_folds(tmp_path: Path) -> None:
    html = check_run(tmp_path, hourly_file, 5_000, "1 h", "hourly", ["--folds", "2"])
    assert "columns &#x27;&lt;DATE&gt;&#x27; and &#x27;&lt;TIME&gt;&#x27; joined" in html and "Out of sample" in html


@pytest.mark.slow
def test_a_minute_binance_file_trains_with_the_intraday_settings_and_data_folds(tmp_path: Path) -> None:
    """~15 s on 2 cores: the data's folds validate on 969 minutes each and the CPU backtest steps
    them one by one (about 3 ms a bar), so buy-and-hold, the curves (the report's baselines) and
    abstention (a flat fold backtests its members once more for the report) are off here; the daily and
    hourly tests cover the report's out-of-sample section and abstention."""
    html = check_run(tmp_path, minute_file, 10_000, "1 min", "intraday",
                     ["--folds", "1", "--set", "train.eval_buy_and_hold=false", "--set", "train.save_curves=false",
                      "--set", "train.abstain=false"])
    assert "no header line: columns read as Binance kline columns" in html
    cfg = tomllib.loads((tmp_path / "runs" / "r" / "config.toml").read_text())  # the intraday row's decision grid
    assert (cfg["train"]["decision_grid"], cfg["train"]["ensemble"], cfg["train"]["select"]) == ([1, 16], 2, "inner")
    # without curves files and without buy-and-hold, the fold still records its exposure (no beta, said why)
    timing = json.loads(next((tmp_path / "runs" / "r" / "folds").glob("fold_*/metrics.json")).read_text())["timing"]
    assert timing["beta"] is None and timing["note"] == NO_MARKET_NOTE and 0.0 <= timing["time_in_market"] <= 1.0
    assert not list((tmp_path / "runs" / "r" / "folds").glob("fold_*/curves.safetensors"))


def test_spans_the_user_set_that_do_not_fit_name_the_set_that_would(tmp_path: Path) -> None:
    daily_file(tmp_path)
    assert_refused(tmp_path, ["train", "--data", "SPY.csv", "--set", "folds.train=3000", *FAST],
                   "no walk-forward fold fits in 1997 usable bars (train=3000, val=1000, purge=60); use shorter spans or more "
                   "data; e.g. --set folds.train=942 --set folds.val=199 fits (5 expanding folds over the later half of the data)")


def test_config_wins_over_the_interval_presets(tmp_path: Path) -> None:
    daily_file(tmp_path)
    cfg = tiny_config(tmp_path, epochs=1, every=0)
    res = run_cli(tmp_path, "train", "--data", "SPY.csv", "--config", str(cfg), "--name", "c", "--folds", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "settings:" not in res.stdout and "laid out by the data" not in res.stdout
    run = tomllib.loads((tmp_path / "runs" / "c" / "config.toml").read_text())
    assert (run["env"]["reward_scale"], run["env"]["episode_length"], run["folds"]["train"]) == (100.0, 64, 800)
