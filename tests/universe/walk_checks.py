"""What a universe training run and `foxhunt backtest --run` on it must both hold (fresh processes): the run's
summary.json has per-fold and stitched portfolio rows for every weighting rule and policy and per-symbol rows for
every member; report.html has the portfolio, heat-map, best/worst and per-symbol sections; the backtest's agent
rows and portfolio rows equal the run's, number for number (both on the CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tests.cli_run import run_ok

POLICIES = {"agent", "buy & hold", "quant rule"}
RULES = {"equal", "inverse_vol"}
TINY = ("--epochs", "1", "--set", "dqn.rounds_per_epoch=2", "--set", "dqn.warmup_transitions=256", "--set", "train.tensorboard=false",
        "--set", "run.device=cpu", "--set", "run.out_dir=runs", "--set", "features.cache_dir=cache")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b or (a is None and isinstance(b, float) and math.isnan(b))


def train_and_backtest_run(cwd: Path, data: str, name: str, *extra: str) -> tuple[Path, dict[str, Any], str]:
    """``foxhunt train --data DATA`` then ``foxhunt backtest --run``; returns (run dir, summary.json, train stdout)."""
    out = run_ok(cwd, "train", "--data", data, "--name", name, *TINY, *extra).stdout
    run = cwd / "runs" / name
    run_ok(cwd, "backtest", "--run", f"runs/{name}", "--device", "cpu")
    return run, json.loads((run / "summary.json").read_text()), out


def check_walk(run: Path, summary: dict[str, Any], symbols: list[str]) -> None:
    """The assertions of the module docstring."""
    folds = [f["fold"] for f in summary["folds"]]
    port = summary["portfolio"]
    assert {(r["fold"], r["weights"], r["label"]) for r in port} == {
        (f, w, p) for f in [*folds, "all"] for w in RULES for p in POLICIES}
    assert all(isinstance(r["sharpe"], float) and math.isfinite(r["sharpe"]) for r in port)
    per = summary["symbols"]
    members = {f: [s["symbol"] for s in json.loads((run / "folds" / f"fold_{f}" / "metrics.json").read_text())["symbols"]]
               for f in folds}
    assert {(r["fold"], r["symbol"], r["label"]) for r in per} == {
        (f, s, p) for f in folds for s in members[f] for p in POLICIES}
    assert {r["symbol"] for r in per} == set(symbols)
    for f in folds:  # the agent's per-symbol rows are the fold's metrics.json rows
        m = json.loads((run / "folds" / f"fold_{f}" / "metrics.json").read_text())["symbols"]
        got = {r["symbol"]: r for r in per if r["fold"] == f and r["label"] == "agent"}
        assert all(_same(got[s["symbol"]]["sharpe"], s["agent"]["sharpe"]) for s in m)
    html = (run / "report.html").read_text()
    for head in ("Portfolio, equal-weight", "Portfolio, inverse-volatility-weighted", "Sharpe per symbol and fold (agent)",
                 "Best ", "Per symbol: each symbol's folds joined", *(f"<h3>{s}</h3>" for s in symbols)):
        assert head in html, head
    # foxhunt backtest --run: the same rows, number for number
    bt = json.loads((run / "backtest" / "metrics.json").read_text())
    rows = bt["rows"] if isinstance(bt, dict) else bt
    bt_port = {(r["window"], r["weights"], r["label"]): r for r in rows if r["symbol"] == "portfolio"}
    for r in port:
        b = bt_port[(r["fold"], r["weights"], r["label"])]
        assert all(_same(r[k], b[k]) for k in ("sharpe", "total_return", "max_drawdown", "annual_volatility")), (r, b)
    bt_sym = {(r["window"], r["symbol"], r["label"]): r for r in rows if r["symbol"] != "portfolio"}
    for r in per:
        b = bt_sym[(r["fold"], r["symbol"], r["label"])]
        assert _same(r["sharpe"], b["sharpe"]) and _same(r["total_return"], b["total_return"]), (r, b)
    assert (run / "backtest" / "report.html").is_file()
