"""What a run's report needs beyond each fold's files, written when the run finishes, read back by
the report (so that ``--resume`` of a finished run rebuilds it from the directory alone).

``write_oos(run_dir, runner)`` (``WalkForwardRunner.finish``, with ``train.report``; the
oos.safetensors files with ``train.save_curves`` too) writes::

    data.json                     the data line: source, bars, interval, first / last bar, what the
                                  loader inferred (foxhunt.data.describe.data_summary) and how the
                                  folds were laid out (foxhunt.fold_layout)
    folds/fold_k/oos.safetensors  times [T + 1] int64 UTC ns: the validation window's bars val_start …
                                  val_end - 1 (the equity points; curves.safetensors' returns are
                                  realised at times[1:]); quant_returns, quant_positions [T] float32:
                                  the quant rule chosen on the fold's training window
                                  (foxhunt.backtest.quant_rules) backtested on its validation window
                                  as buy-and-hold is (every fold in one lockstep run, under the first
                                  fold's statistics); metadata "quant": JSON
                                  of the rule, its training-window Sharpe, cost rate and metrics

``read_oos(run_dir, results)`` returns the per-fold curves (agent, buy-and-hold, quant rule) with
their times, the trades per fold and the data line, for ``foxhunt.train.report``.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

OOS_FILE = "oos.safetensors"
DATA_FILE = "data.json"


def write_oos(run_dir: Path, runner: Any) -> None:
    """data.json and every finished fold's oos.safetensors (see the module docstring)."""
    from safetensors.numpy import save

    from foxhunt.data.describe import data_summary

    prepared, market = runner.prepared, runner.market
    _write_text(run_dir / DATA_FILE, json.dumps({"data": data_summary(prepared.bars), "folds": prepared.fold_note}, indent=2) + "\n")
    folds = [f for f in runner.folds if (run_dir / "folds" / f"fold_{f.fold}" / "metrics.json").is_file()]
    if not folds or not runner.tcfg.save_curves:
        return
    res, info = quant_backtest(prepared.bars, folds, runner.folds[0], runner.cfg.env, float(runner.bars_per_year),
                               runner.backtester, runner.plan.eval)
    ts = market.timestamps_host
    for i, f in enumerate(folds):
        n = f.val_len - 1
        meta = {"rule": info["rules"][i], "train_sharpe": info["train_sharpe"][i], "cost_rate_bps": info["cost_rate_bps"][i],
                "metrics": res.metrics[i]}
        arrays = {"times": np.ascontiguousarray(ts[f.val_start : f.val_end], dtype=np.int64),
                  "quant_returns": np.ascontiguousarray(res.returns[i, :n], dtype=np.float32),
                  "quant_positions": np.ascontiguousarray(res.positions[i, :n], dtype=np.float32)}
        path = run_dir / "folds" / f"fold_{f.fold}" / OOS_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(save(arrays, metadata={"quant": json.dumps(meta, default=float)}))
        os.replace(tmp, path)


def quant_backtest(bars: Any, folds: list[Any], first: Any, env: Any, bars_per_year: float, backtester: Any,
                   backend: str) -> tuple[Any, dict[str, Any]]:
    """The in-sample quant rule of every fold in ``folds`` (chosen on the fold's training rows,
    ``quant_rules.quant_exposures``) backtested on its validation window: (the W-window
    ``BacktestResult`` with curves, fold i's ``val_len - 1`` steps; the rules' info). Every window runs
    in one lockstep call under the statistics of ``first`` (the run's first fold), as buy-and-hold's
    (runner.buy_and_hold): the same numbers however the run was resumed, and in ``foxhunt backtest --run``."""
    import torch

    from foxhunt.backtest.policies import ExposurePolicy
    from foxhunt.backtest.quant_rules import quant_exposures

    exposures, info = quant_exposures(bars.close, bars.volume, folds, env, bars_per_year)
    lengths = [f.val_len - 1 for f in folds]
    ex = np.zeros((len(folds), max(lengths)))
    for i, f in enumerate(folds):
        ex[i, : lengths[i]] = np.clip(exposures[f.fold][: lengths[i]], -1.0, 1.0)
    market = backtester.market
    market.set_fold(first)
    res = backtester.run([f.val_start for f in folds], lengths, ExposurePolicy(torch.as_tensor(ex, dtype=torch.float32,
                         device=market.device)), keep_curves=True, backend=backend)
    assert res.returns is not None and res.positions is not None
    return res, info


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_data(run_dir: Path) -> dict[str, Any] | None:
    p = run_dir / DATA_FILE
    return json.loads(p.read_text()) if p.is_file() else None


def read_fold(run_dir: Path, fold: int) -> dict[str, Any]:
    """A fold's curves: {"times" [T + 1], "agent" / "bh" / "quant": [T] float64 returns, "quant_info",
    "positions": {"agent" / "bh" / "quant": [T] float64 exposures}}; keys missing where the run did not
    write them (older runs, save_curves off)."""
    from safetensors import safe_open
    from safetensors.numpy import load

    d = run_dir / "folds" / f"fold_{fold}"
    out: dict[str, Any] = {}
    positions: dict[str, np.ndarray] = {}
    if (d / "curves.safetensors").is_file():
        c = load((d / "curves.safetensors").read_bytes())
        for key, name in (("agent_returns", "agent"), ("bh_returns", "bh")):
            if key in c:
                out[name] = c[key].astype(np.float64)
        for key, name in (("agent_positions", "agent"), ("bh_positions", "bh")):
            if key in c:
                positions[name] = c[key].astype(np.float64)
    if (d / OOS_FILE).is_file():
        with safe_open(str(d / OOS_FILE), framework="numpy") as fh:
            meta = fh.metadata() or {}
            out["times"] = fh.get_tensor("times").astype(np.int64)
            out["quant"] = fh.get_tensor("quant_returns").astype(np.float64)
            positions["quant"] = fh.get_tensor("quant_positions").astype(np.float64)
        out["quant_info"] = json.loads(meta["quant"]) if "quant" in meta else {}
    if positions:
        out["positions"] = positions
    return out


def read_trades(run_dir: Path, fold: int) -> list[tuple[int, int]] | None:
    """(entry bar, exit bar) of each of the fold's round trips (trades.csv), None without the file."""
    p = run_dir / "folds" / f"fold_{fold}" / "trades.csv"
    if not p.is_file():
        return None
    with open(p, newline="") as fh:
        return [(int(r["entry_bar"]), int(r["exit_bar"])) for r in csv.DictReader(fh)]
