"""A universe run of one agent per symbol (``train.pool = false``) has the pooled run's universe record
(fresh processes, the CPU): summary.json's per-fold and stitched portfolio rows and per-symbol rows, the
portfolio table on the console and the universe report; `foxhunt backtest --run` on it backtests every
symbol's run and gives the same rows, number for number; a symbol's run left unfinished is one line naming
the symbol; a run killed before its symbols' run directories were all made resumes them as they began."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from foxhunt.config import load_config
from tests.cli_run import assert_refused, run_ok
from tests.universe.conftest import TINY_DQN, config, universe_files
from tests.universe.walk_checks import TINY, check_walk


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A pool=false run on two symbols with their own calendars (AAA every day, CCC with a 30-day gap):
    (the folder it ran in, its console output)."""
    cwd = tmp_path_factory.mktemp("ps")
    universe_files(cwd / "u")
    (cwd / "u" / "BBB.parquet").unlink()
    out = run_ok(cwd, "train", "--data", "u", "--name", "ps", "--folds", "2", *TINY, "--set", "train.pool=false",
                 "--set", "dqn.warmup_transitions=64", "--set", "dqn.n_envs=16").stdout
    return cwd, out


def test_a_pool_false_run_prints_and_writes_the_portfolio_rows_and_the_universe_report(trained) -> None:
    cwd, out = trained
    run = cwd / "runs" / "ps"
    summary = json.loads((run / "summary.json").read_text())
    assert "one agent per symbol (train.pool = false)" in out and "report: runs/ps/report.html" in out
    table = out[out.index("portfolios, out of sample"):]
    stitched = [r for r in summary["portfolio"] if r["fold"] == "all"]
    assert len(stitched) == 6  # 2 weighting rules × agent, buy & hold, quant rule
    for r in stitched:  # the console's table is summary.json's stitched rows
        assert f"{r['sharpe']:+.2f}" in table and f"{r['total_return']:+.2%}" in table
    html = (run / "report.html").read_text()
    assert "one agent per symbol" in html and "Portfolio, equal-weight" in html
    for sym in ("AAA", "CCC"):  # each symbol's run names its symbol: its config.toml loads its bars alone
        assert load_config(run / "symbols" / sym / "config.toml").data.symbols == [sym]


def test_backtest_run_on_a_pool_false_run_backtests_every_symbol_run_and_gives_the_summary_rows(trained, tmp_path: Path) -> None:
    src, _ = trained
    shutil.copytree(src / "u", tmp_path / "u")
    shutil.copytree(src / "runs", tmp_path / "runs")
    shutil.copytree(src / "cache", tmp_path / "cache")  # the features, as built by the run
    out = run_ok(tmp_path, "backtest", "--run", "runs/ps", "--device", "cpu").stdout
    assert "one agent per symbol (train.pool = false): each symbol's run (symbols/<symbol>) backtested" in out
    run = tmp_path / "runs" / "ps"
    # per-fold and stitched portfolio rows and per-symbol rows; backtest --run's equal summary.json's, number for number
    check_walk(run, json.loads((run / "summary.json").read_text()), ["AAA", "CCC"])


def test_backtest_run_of_a_pool_false_run_with_an_unfinished_symbol_run_is_one_line_naming_the_symbol(trained, tmp_path: Path) -> None:
    src, _ = trained
    shutil.copytree(src / "u", tmp_path / "u")
    shutil.copytree(src / "runs", tmp_path / "runs")
    (tmp_path / "runs" / "ps" / "symbols" / "CCC" / "folds" / "fold_1" / "model.safetensors").unlink()
    assert_refused(tmp_path, ["backtest", "--run", "runs/ps", "--device", "cpu"],
                   "--run runs/ps: symbol CCC's run symbols/CCC has no model for fold 1 yet "
                   "(finish it: foxhunt train --resume runs/ps)")


def test_a_pool_false_run_killed_before_its_symbol_dirs_were_all_made_resumes_them_as_begun(tmp_path: Path) -> None:
    """The parent made through the library as `foxhunt train` makes it (config.toml, folds.json, symbols.json
    in one atomic step), then BBB's run directory taken away and a half-made one's temporary left, as a kill
    while making them leaves it: --resume makes BBB's directory as it began (its own env.reward_scale from
    symbols.json) and trains every symbol."""
    from foxhunt.data.universe import config_sources, load_universe
    from foxhunt.train.per_symbol import PLAN_FILE, PerSymbolRunner, per_symbol_prepared, plan_json
    from foxhunt.train.run_dir import create_run_dir

    d = universe_files(tmp_path / "u")
    cfg = config(tmp_path, d, dqn={**TINY_DQN, "rounds_per_epoch": 2}, folds={"max_folds": 1},
                 train={"epochs": 1, "pool": False, "tensorboard": False, "progress": False, "report": False},
                 run={"out_dir": str(tmp_path / "runs"), "device": "cpu"})
    universe = load_universe(config_sources(cfg.data), cfg.data)
    scales = {"AAA": 40.0, "BBB": 55.0, "CCC": 70.0}
    p = per_symbol_prepared(cfg, universe, reward_scales=scales)
    runner = PerSymbolRunner(p)
    run, resolved = create_run_dir(p.config, p, "k", files={PLAN_FILE: plan_json(p)})  # type: ignore[arg-type]
    runner.use_config(resolved)
    runner.create_symbol_dirs(run)
    began = load_config(run / "symbols" / "BBB" / "config.toml")
    shutil.rmtree(run / "symbols" / "BBB")
    (run / "symbols" / ".tmp-BBB-999999").mkdir()  # create_run_dir's temporary, as a kill leaves it
    out = run_ok(tmp_path, "train", "--resume", "runs/k").stdout
    assert "symbol BBB (2/3): 1 folds" in out and "portfolios, out of sample" in out
    now = load_config(run / "symbols" / "BBB" / "config.toml")
    same = lambda c: c.replace(run={"out_dir": "-"}).to_dict()  # noqa: E731  (the path as given to --resume)
    assert same(now) == same(began) and now.env.reward_scale == 55.0  # from symbols.json
    assert not (run / "symbols" / ".tmp-BBB-999999").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert {r["fold"] for r in summary["portfolio"]} == {0, "all"}
    assert {r["symbol"] for r in summary["symbols"]} == {"AAA", "BBB", "CCC"}
