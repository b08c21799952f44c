"""A pooled universe run's out-of-sample record: the quant rule beside the agent, the portfolios, the report.

Written when the run finishes (``UniverseRunner.finish``, with ``train.save_curves``), read back from the
run directory alone, so that ``foxhunt train --resume`` of a finished run rebuilds it:

    folds/fold_k/universe_oos.safetensors
        times [W, T + 1] int64 UTC ns: each member symbol's validation bars val_start … val_end - 1
            (row w's first ``lengths[w] + 1`` entries; curves.safetensors' returns are realised at
            times[w, 1:]); quant_returns, quant_positions [W, T] float32: the quant rule chosen on the
            symbol's training rows of the fold (``foxhunt.backtest.quant_rules``), backtested on its
            validation window as buy-and-hold is (every fold's members in one lockstep run, under the
            first fold's statistics); training_vol [W] float64: the symbol's training volatility (the
            standard deviation of its close-to-close returns over its training rows of the fold: the
            inverse-volatility portfolio's weights); metadata "quant": JSON of the rules and their
            metrics per member.

``read_walk_forward`` turns the fold files into the ``UniverseRun`` of ``foxhunt.backtest.universe_walk``
(per-symbol rows, per-fold and stitched portfolios of the agent, buy-and-hold and the quant rule);
``summary_rows`` are its rows for summary.json; ``write_universe_run_report`` its report.html
(``foxhunt.backtest.universe_report``, window = fold).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.backtest.universe_walk import BENCHMARK, QUANT, FoldWindows, fold_training_vols, quant_fold_exposures

__all__ = ["OOS_FILE", "AGENT", "write_universe_oos", "read_walk_forward", "summary_rows", "write_universe_run_report"]

OOS_FILE = "universe_oos.safetensors"
AGENT = "agent"


def write_universe_oos(run_dir: Path, runner: Any) -> None:
    """Every finished fold's universe_oos.safetensors (module docstring)."""
    import torch
    from safetensors.numpy import save

    from foxhunt.backtest.policies import ExposurePolicy

    folds = [f for f in runner.folds if (run_dir / "folds" / f"fold_{f.fold}" / "metrics.json").is_file()]
    if not folds or not runner.tcfg.save_curves:
        return
    market, universe, bpy = runner.market, runner.prepared.universe, float(runner.bars_per_year)
    offsets, ts = market.offsets_host, market.timestamps_host
    spans = [runner._windows(f) for f in folds]
    windows = [(int(s), int(f.bounds[s, 0]), int(f.bounds[s, 1]), int(a), int(n))
               for f, (mem, st, steps) in zip(folds, spans) for s, a, n in zip(mem, st, steps)]
    ex, rules = quant_fold_exposures(universe.bars, offsets, windows, runner.cfg.env, bpy)
    market.set_fold(runner._parts[folds[0].fold])  # as buy-and-hold: one run under the first fold's statistics
    starts = [w[3] for w in windows]
    lengths = [w[4] for w in windows]
    res = runner.backtester.run(starts, lengths, ExposurePolicy(torch.as_tensor(ex, dtype=torch.float32, device=market.device),
                                                                runner.trainer.env.n_actions),
                                keep_curves=True, backend=runner.plan.eval)
    assert res.returns is not None and res.positions is not None
    close = [b.close for b in universe.bars]
    i = 0
    for f, (mem, st, steps) in zip(folds, spans):
        w = len(mem)
        t = int(steps.max())
        times = np.zeros((w, t + 1), np.int64)
        for j, (a, n) in enumerate(zip(st, steps)):
            times[j, : n + 1] = ts[a : a + n + 1]
        meta = {"rules": rules[i : i + w], "metrics": res.metrics[i : i + w]}
        arrays = {"times": times, "quant_returns": np.ascontiguousarray(res.returns[i : i + w, :t], dtype=np.float32),
                  "quant_positions": np.ascontiguousarray(res.positions[i : i + w, :t], dtype=np.float32),
                  "training_vol": fold_training_vols(close, offsets, f.bounds, mem)}
        path = run_dir / "folds" / f"fold_{f.fold}" / OOS_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(save(arrays, metadata={"quant": json.dumps(meta, default=float)}))
        os.replace(tmp, path)
        i += w


def _fold_windows(run_dir: Path, r: dict[str, Any], bpy: float) -> FoldWindows | None:
    """One fold's FoldWindows from its files; None when its curves, buy-and-hold or oos file are missing."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    from foxhunt.backtest.timing import row_fields, timing_block

    d = run_dir / "folds" / f"fold_{r['fold']['fold']}"
    if not (d / "curves.safetensors").is_file() or not (d / OOS_FILE).is_file():
        return None
    c, o = load_file(str(d / "curves.safetensors")), load_file(str(d / OOS_FILE))
    if "bh_returns" not in c:
        return None  # train.eval_buy_and_hold = false: no benchmark to hold the agent against
    with safe_open(str(d / OOS_FILE), "np") as fh:
        quant = json.loads(fh.metadata()["quant"])
    lengths = c["lengths"].astype(np.int64)
    cut = lambda a: [a[w, : int(n)].astype(np.float64) for w, n in enumerate(lengths)]  # noqa: E731
    rows = r["symbols"]
    ret = {AGENT: cut(c["agent_returns"]), BENCHMARK: cut(c["bh_returns"]), QUANT: cut(o["quant_returns"])}
    pos = cut(c["agent_positions"])
    timing = []
    for w, row in enumerate(rows):
        trades = row["agent"].get("trade_count")
        timing.append(row_fields(timing_block(ret[AGENT][w], pos[w], ret[BENCHMARK][w], bpy,
                                              float(trades) if trades is not None and math.isfinite(trades) else None)))
    return FoldWindows(int(r["fold"]["fold"]), c["symbol_index"].astype(np.int64),
                       [o["times"][w, : int(n) + 1] for w, n in enumerate(lengths)], ret,
                       {AGENT: [x["agent"] for x in rows], BENCHMARK: [x["buy_and_hold"] for x in rows], QUANT: quant["metrics"]},
                       o["training_vol"], timing)


def read_walk_forward(run_dir: Path, results: list[dict[str, Any]], symbols: list[str], bpy: float) -> Any:
    """The run's ``UniverseRun`` (window = fold), or None when a fold lacks its curves or oos file."""
    from foxhunt.backtest.universe_walk import walk_forward_run

    folds = [_fold_windows(run_dir, r, bpy) for r in results]
    if not folds or any(f is None for f in folds):
        return None
    return walk_forward_run(symbols, folds, AGENT, bpy)  # type: ignore[arg-type]


def summary_rows(run: Any) -> dict[str, Any]:
    """summary.json's universe keys: ``portfolio`` (per fold and stitched "all", per weighting rule and
    policy; ``fold`` is the fold's number or "all") and ``symbols`` (per symbol, fold and policy)."""
    clean = lambda r: {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}  # noqa: E731
    return {"portfolio": [clean({**r, "fold": r["window"]}) for r in run.rows if r["symbol"] == "portfolio"],
            "symbols": [clean({**r, "fold": r["window"]}) for r in run.rows if r["symbol"] != "portfolio"]}


def write_universe_run_report(run_dir: Path, run: Any, title: str, notes: str) -> Path:
    """report.html of the run: the portfolio's stitched out-of-sample equity and drawdown against
    buy-and-hold and the quant rule, the symbol × fold Sharpe heat map, best and worst symbols, a
    section per symbol (``universe_report.write_universe_report``)."""
    from foxhunt.backtest.universe_report import write_universe_report

    cols = sorted({r["window"] for r in run.rows if r["symbol"] != "portfolio"})
    return write_universe_report(run_dir / "report.html", title, run, notes=notes, window="fold", columns=cols)
