"""A universe at the command line, as the user runs it (a fresh `python -m foxhunt.cli` each; issue 47):
`data validate DIR` (or a long table) prints a line per symbol and a total; a bad file among good
ones, mixed intervals and a symbol in two files are one exact red line, exit 2, nothing written;
`prepare --data DIR` prints the per-symbol fold table; `train --data DIR` refuses what pooled training
does not do (the forecast learner) in one line, and trains a one-symbol directory as its file, bit for bit
(pooled training itself: tests/universe)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file

from tests.cli_run import assert_refused, listing, run_cli, run_ok
from tests.data.universe_files import bars_frame, days, finrl_file, frames, universe_dir, write

SYMBOL_LINES = [
    "ok AAA: 520 bars every 1 day (daily), 2020-01-01 → 2021-06-03 ({AAA})",
    "ok BBB: 480 bars every 1 day (daily), 2020-02-03 → 2021-12-03 ({BBB})",
    "ok CCC: 430 bars every 1 day (daily), 2020-03-01 → 2021-06-03 ({CCC})",
    "ok 3 symbols: 1,430 bars every 1 day (daily), 2020-01-01 → 2021-12-03",
    "  read: dates without a UTC offset read as UTC midnight",
]
TRAIN_FAST = ["--folds", "1", "--epochs", "1", "--set", "dqn.rounds_per_epoch=2", "--set", "dqn.warmup_transitions=256",
              "--set", "train.tensorboard=false", "--set", "train.checkpoint_every=0", "--set", "run.device=cpu"]


def validated(cwd: Path, *args: str) -> list[str]:
    before = listing(cwd)
    res = run_cli(cwd, "data", "validate", *args)
    assert (res.returncode, res.stderr) == (0, ""), res.stdout + res.stderr
    assert listing(cwd) == before
    return res.stdout.splitlines()


def test_data_validate_prints_one_line_per_symbol_for_a_directory_and_a_long_table(tmp_path: Path) -> None:
    universe_dir(tmp_path / "u")
    finrl_file(tmp_path / "finrl.csv")
    files = {"AAA": "u/AAA.csv", "BBB": "u/BBB.parquet", "CCC": "u/CCC.csv.gz"}
    assert validated(tmp_path, "u") == [line.format(**files) for line in SYMBOL_LINES]
    assert validated(tmp_path, "finrl.csv") == [line.format(AAA="finrl.csv", BBB="finrl.csv", CCC="finrl.csv") for line in SYMBOL_LINES]


def test_a_bad_file_among_good_ones_is_one_line_naming_it_for_validate_and_train(tmp_path: Path) -> None:
    universe_dir(tmp_path / "u")
    bad = frames()["AAA"]
    bad.loc[41, "low"] = bad.loc[41, "open"] * 1.5
    write(tmp_path / "u" / "ABB.csv", bad)
    line = ("file u/ABB.csv, row 42, timestamp 2020-02-11, column 'high': rule 'high-below-low' broken: "
            f"high {float(bad.loc[41, 'high'])!r} < low {float(bad.loc[41, 'low'])!r}")
    assert_refused(tmp_path, ["data", "validate", "u"], line)
    assert_refused(tmp_path, ["train", "--data", str(tmp_path / "u"), "--set", "run.out_dir=runs"],
                   line.replace("file u/ABB.csv", f"file {tmp_path / 'u' / 'ABB.csv'}"))


def test_mixed_intervals_and_a_symbol_in_two_files_are_refused_in_one_line(tmp_path: Path) -> None:
    write(tmp_path / "mixed" / "DAY.csv", bars_frame(days("2020-01-01", 400), 1))
    write(tmp_path / "mixed" / "MIN.parquet", bars_frame(days("2020-01-01", 400, "min"), 2))
    assert_refused(tmp_path, ["data", "validate", "mixed"],
                   "file mixed/MIN.parquet: rule 'mixed-intervals' broken: symbol MIN has bars every 1 min here, symbol DAY "
                   "every 1 day in file mixed/DAY.csv; a universe has one bar interval (resample, or split the universe)")
    write(tmp_path / "AAA.parquet", frames()["AAA"])
    universe_dir(tmp_path / "u")
    assert_refused(tmp_path, ["data", "validate", "u", "AAA.parquet"],
                   "file u/AAA.csv: rule 'duplicate-symbol' broken: symbol 'AAA' is also in file AAA.parquet; one symbol a file")


def test_train_refuses_what_pooled_training_does_not_do_on_a_universe_of_several_symbols_in_one_line(tmp_path: Path) -> None:
    universe_dir(tmp_path / "u")
    assert_refused(tmp_path, ["train", "--data", "u/AAA.csv", "--data", "u/BBB.parquet", "--set", "run.out_dir=runs",
                              "--set", "train.agent=forecast", "--set", "forecast.policy=attention"],
                   "forecast.policy = attention reads bars before each training bar and could reach another symbol's rows: "
                   "not available on a universe (forecast.policy = mlp)")


def test_prepare_prints_the_per_symbol_fold_table(tmp_path: Path) -> None:
    universe_dir(tmp_path / "u")
    out = run_ok(tmp_path, "prepare", "--data", "u", "--set", "features.cache_dir=cache", "--set", "folds.train=60",
                 "--set", "folds.val=30", "--set", "folds.purge=5", "--set", "data.min_train_bars=40", "--set", "run.device=cpu").stdout
    rows = {line.split()[1]: line.split("│")[4:-1] for line in out.splitlines() if line.startswith("│ ") and line.split()[1] in
            ("AAA", "BBB", "CCC")}
    assert set(rows) == {"AAA", "BBB", "CCC"}
    # AAA (every day from 2020-01-01) is in fold 0 with 60 training and 30 validation bars; BBB (business
    # days from February) has no formed bars yet; each symbol's cells follow its own calendar.
    assert rows["AAA"][0].strip() == "60 / 30" and rows["BBB"][0].strip() == "–"
    assert "a symbol joins a fold with at least 40 training bars (data.min_train_bars) and 2 validation bars" in out
    assert "market data on cpu: 3 symbols, 1430 bars × 51 features (obs dim 54), warm-up 303 bars per symbol; cache: 3 built" in out


def test_a_one_symbol_directory_trains_bit_for_bit_as_its_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = write(tmp_path / "data" / "SPY.csv", bars_frame(days("2020-01-01", 700), 5))
    as_dir = run_ok(tmp_path / "a", "train", "--data", str(path.parent), "--name", "r", *TRAIN_FAST)
    as_file = run_ok(tmp_path / "b", "train", "--data", str(path), "--name", "r", *TRAIN_FAST)
    data_line = [line for line in as_dir.stdout.splitlines() if line.startswith("data: ")]
    assert data_line == [line for line in as_file.stdout.splitlines() if line.startswith("data: ")]
    assert data_line[0].startswith(f"data: {path}: 700 bars every 1 day (daily)")
    a, b = tmp_path / "a" / "runs" / "r", tmp_path / "b" / "runs" / "r"
    for name in ("config.toml", "folds.json", "data.json", "folds/fold_0/metrics.json", "folds/fold_0/trades.csv",
                 "folds/fold_0/curves.safetensors", "folds/fold_0/oos.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = load_file(a / "folds/fold_0/model.safetensors"), load_file(b / "folds/fold_0/model.safetensors")
    assert ma.keys() == mb.keys() and all(ma[k].numpy().tobytes() == mb[k].numpy().tobytes() for k in ma)
