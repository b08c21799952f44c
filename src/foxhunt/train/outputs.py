"""What a walk-forward run writes: each fold's result files, the run's summary, the console line.

Per fold, in ``folds/fold_k/`` (the runner writes them in this order, after the fold's evaluation)::

    metrics.json          fold_result(): fold ranges, validation times, agent and buy-and-hold
                          metrics, the agent's exposure and timing against buy-and-hold
                          (``timing``: foxhunt.backtest.timing), the last epoch's summary row, the
                          epoch selection; no timings, so the same seed gives the same bytes
    model.safetensors     write_model(): the fold's greedy network + its training-slice normalisation
    curves.safetensors    write_curves(): float32 [T] per-bar returns / positions (train.save_curves)
    trades.csv            write_trades(): the agent's round trips (train.save_trades)

At the end (and again on a ``--resume`` of a finished run), ``write_summary`` reads the fold files
back into summary.json (+ report.html). T is the validation window's stepped bars, val_len - 1.
Every file is written to a temporary name and renamed, so a killed run never leaves a torn one.
Where and when the files go is the runner's (``foxhunt.train.runner``); the directory itself is
``foxhunt.train.run_dir``'s.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from foxhunt.agents import registry
from foxhunt.backtest.display import is_flat, number, sharpe_or_zero, sharpe_text, value
from foxhunt.backtest.timing import timing_block, timing_text
from foxhunt.config import Config
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.train.logs import clean_floats
from foxhunt.train.abstain import line as abstain_line


@dataclass
class BuyHold:
    """Buy-and-hold on one validation window: metrics, and [T] returns / positions per bar."""

    metrics: dict[str, float]
    returns: np.ndarray
    positions: np.ndarray


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temporary name, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(clean_floats(obj) if isinstance(obj, dict) else obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def fold_result(fold: FoldRange, timestamps: np.ndarray, agent: Any, bh: BuyHold | None, last: dict[str, Any] | None,
                selection: dict[str, Any] | None, *, epochs: int, seed: int) -> dict[str, Any]:
    """The content of folds/fold_k/metrics.json. timestamps: the market's [N] int64 ns bar times
    (the validation window's first and last bar are written as ISO times); agent: the greedy
    policy's one-window BacktestResult (with its curves: ``timing`` is computed from them, None
    without); last: the fold's last summary row (None: no epoch ran)."""
    result = {
        "fold": fold.to_dict(),
        "val_first_time": str(np.datetime64(int(timestamps[fold.val_start]), "ns")) + "Z",
        "val_last_time": str(np.datetime64(int(timestamps[fold.val_end - 1]), "ns")) + "Z",
        "epochs": epochs,
        "seed": seed,
        "agent": agent.metrics[0],
        "buy_and_hold": bh.metrics if bh is not None else None,
        "timing": fold_timing(agent, bh),
        "last_epoch": last,
    }
    if selection is not None:
        result["selection"] = selection
    return result


def fold_timing(agent: Any, bh: BuyHold | None) -> dict[str, Any] | None:
    """metrics.json's ``timing``: the agent's beta on buy-and-hold's returns over the validation bars,
    its timing returns' Sharpe and total, time in the market, long and short shares, trades and the
    holding verdict (``foxhunt.backtest.timing.timing_block``; float64 on the host, once a fold).
    None when the agent's curves were not kept."""
    if agent.returns is None or agent.positions is None:
        return None
    n = int(agent.lengths[0])
    trades = value(agent.metrics[0], "trade_count")
    return timing_block(agent.returns[0, :n], agent.positions[0, :n], bh.returns[:n] if bh is not None else None,
                        float(agent.bars_per_year), trades if math.isfinite(trades) else None)


def write_model(path: Path, net: Any, market: MarketData, part: FoldRange, fold: FoldRange, cfg: Config,
                data_hash: str, decision_interval: int | None = None) -> None:
    """The fold's greedy network (DQN: the Q-network; PPO: the actor packed as a DuelingQNet whose
    argmax and softmax are the policy's) + its training-slice normalisation, for ``foxhunt
    backtest --model``. part: the bars the network was trained on (its normalisation's slice).
    decision_interval: the model's k (``train.decision_grid``'s choice; default env.decision_interval),
    recorded in its env metadata, which the backtests read."""
    from foxhunt.agents.model_io import save_model

    m = market
    env = cfg.env if decision_interval is None else cfg.env.model_copy(update={"decision_interval": int(decision_interval)})
    extra = {
        "medians": {"abs_return": m.median_abs_return.item(), "range": m.median_range.item(), "volume": m.median_volume.item()},
        "data_sha256": data_hash, "fold": fold.to_dict(), "trained_on": part.to_dict(), "run": cfg.run.name,
        "agent": cfg.train.agent,
    }
    more = registry.of(cfg).model_extra
    if more is not None:  # what the learner's own evaluation of the model needs (the forecast's horizon)
        extra.update(more(cfg, env.decision_interval))
    save_model(path, net, m.norm_stats(part.train_start, part.train_end),
               feature_names=tuple(m.names), spec_version=m.spec_version,
               env=env.model_dump(mode="json"), extra=extra)


def write_curves(path: Path, agent: Any, bh: BuyHold | None) -> None:
    """The agent's (and buy-and-hold's) per-bar returns and positions, float32 safetensors."""
    from safetensors.numpy import save

    arrays = {"agent_returns": agent.returns[0], "agent_positions": agent.positions[0]}
    if bh is not None:
        arrays.update(bh_returns=bh.returns, bh_positions=bh.positions)
    data = save({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_trades(path: Path, trades: list[dict[str, Any]], barriers: bool) -> None:
    """The agent's round trips, one CSV row each (+ their triple-barrier label with backtest.barriers)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        cols = ["window", "entry_bar", "exit_bar", "side", "size", "return", "costs"]
        cols += ["barrier"] if barriers else []
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(trades)
    os.replace(tmp, path)


def write_summary(run_dir: Path, wall_s: float | None, folds: Sequence[FoldRange], *, market: MarketData, cfg: Config,
                  epochs: int, bars_per_year: float, annualisation: str, prepare_timings: dict[str, float],
                  buy_and_hold_s: float, data_hash: str, report: bool, extra: dict[str, Any] | None = None,
                  write_report: Callable[[Path], Any] | None = None) -> list[dict[str, Any]]:
    """summary.json and (``report``) report.html from the run directory's files; returns the fold
    results. Built from the files, not from memory, so a resumed or re-finished run summarises every
    fold, including those an earlier process trained.

    wall_s: this session's run time (None: keep the recorded one, e.g. re-finishing a run);
    annualisation: the backtester's ``Annualisation.describe()``; extra: ``{key: value}``
    added to summary.json (a universe's portfolio and per-symbol rows); write_report: what writes
    report.html (default ``foxhunt.train.report.write_report``)."""
    from foxhunt.train.report import load_fold_results

    results = load_fold_results(run_dir)
    if wall_s is None:
        old = run_dir / "summary.json"
        wall_s = float(json.loads(old.read_text()).get("wall_s", 0.0)) if old.is_file() else 0.0
    fold_t = [json.loads((run_dir / "folds" / f"fold_{f.fold}" / "timings.json").read_text())
              for f in folds if (run_dir / "folds" / f"fold_{f.fold}" / "timings.json").is_file()]
    summary = {
        "device": str(market.device),
        "data": f"{cfg.data.source} ({market.n_bars} bars, sha256 {data_hash[:12]}…)",
        "n_folds": len(folds),
        "epochs": epochs,
        "bars_per_year": bars_per_year,
        "annualisation": annualisation,
        "episode_rules": "validation: triple-barrier labels on the round trips (backtest.barriers)"
                         if cfg.backtest.barriers else "validation: plain windows, no barriers",
        "wall_s": wall_s,
        "prepare_timings": prepare_timings,
        "buy_and_hold_s": buy_and_hold_s,
        "transition_ms": [t["transition_s"] * 1e3 for t in fold_t],
        "folds": [summary_fold(r) for r in results],
    }
    if extra:
        summary.update(extra)
    write_json(run_dir / "summary.json", summary)
    if report:
        guarded_report(run_dir, results, write_report)
    return results


def guarded_report(run_dir: Path, results: list[dict[str, Any]], write: Callable[[Path], Any] | None = None) -> None:
    """report.html, which must never be what loses a run: it is written last, after every fold's
    files and summary.json are committed, and if it fails the traceback goes to
    ``report_error.txt`` and a ``ReportError`` (carrying ``results``) says what failed."""
    import traceback

    from foxhunt.errors import ReportError
    from foxhunt.train.report import write_report

    try:
        (write or write_report)(run_dir)
    except Exception as exc:  # noqa: BLE001 - any failure of the report; the run itself is complete
        where = run_dir / "report_error.txt"
        tmp = where.with_name(where.name + ".tmp")
        tmp.write_text("".join(traceback.format_exception(exc)))
        os.replace(tmp, where)
        (run_dir / "report.html").unlink(missing_ok=True)  # an older report would show other results
        raise ReportError(f"{run_dir / 'report.html'}: the report could not be written ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}); the run is complete (fold results, models and "
                          f"summary.json are written); traceback in {where}; `foxhunt train --resume {run_dir}` rebuilds "
                          "the report", results=results) from exc
    stale = run_dir / "report_error.txt"
    if stale.is_file():  # a rebuilt report replaces an earlier failure's note
        stale.unlink()


def summary_fold(r: dict[str, Any]) -> dict[str, Any]:
    """summary.json's row for one fold (r: its metrics.json content). ``agent_sharpe`` is the Sharpe a
    ranking uses (0 for a flat window: no position, no return; None where it is undefined);
    ``agent_flat`` says the fold held no position; ``agent_beta``, ``agent_timing_sharpe``,
    ``agent_time_in_market``, ``agent_long_share``, ``agent_short_share``, ``agent_trades`` and
    ``agent_verdict`` are metrics.json's ``timing`` block (None where the fold has none); an abstained
    fold adds what its ensemble would have scored (``ensemble_sharpe``)."""
    a, b = r.get("agent") or {}, r.get("buy_and_hold")
    row: dict[str, Any] = {"fold": r["fold"]["fold"], "agent_sharpe": sharpe_or_zero(a), "agent_flat": is_flat(a),
                           "agent_total_return": a.get("total_return"),
                           "buy_and_hold_sharpe": sharpe_or_zero(b) if b else None}
    timing = r.get("timing") or {}
    for key in ("beta", "timing_sharpe", "time_in_market", "long_share", "short_share", "trades", "verdict"):
        row[f"agent_{key}"] = timing.get(key)
    selection = r.get("selection") or {}
    if selection.get("gamma") is not None:
        row["gamma"] = selection["gamma"]
    if selection.get("decision_interval") is not None:  # train.decision_grid: the fold's chosen interval
        row["decision_interval"] = selection["decision_interval"]
    if r.get("learner_eval") is not None:  # a learner's own evaluation (registry: fold_report), as recorded
        row["learner_eval"] = r["learner_eval"]
    record = selection.get("abstain")
    if record is not None:
        row["abstained"] = bool(record.get("flat"))
        if record.get("all_members"):
            row["ensemble_sharpe"] = sharpe_or_zero(record["all_members"])
    return row


def fold_line(r: dict[str, Any]) -> str:
    """One console line for a finished fold (r: its metrics.json content): agent vs buy-and-hold."""
    a, b = r.get("agent") or {}, r.get("buy_and_hold")
    s = f"agent {sharpe_text(a)} return {number(a.get('total_return'), '{:+.2%}')}"
    if b:
        s += f" | buy&hold {sharpe_text(b)} return {number(b.get('total_return'), '{:+.2%}')}"
    timing = timing_text(r.get("timing"))
    if timing:  # the agent's exposure and what is left (foxhunt.backtest.timing)
        s += f" | {timing}"
    selection = r.get("selection") or {}
    if selection.get("gamma") is not None:  # train.gamma_grid: the fold's chosen discount
        s += f" | γ {selection['gamma']:g}"
    if selection.get("decision_interval") is not None:  # train.decision_grid: the fold's chosen interval
        s += f" | k {selection['decision_interval']}"
    ev = r.get("learner_eval")
    if ev is not None:  # a learner's own evaluation: its entry's words (the forecast's IC and hit rate)
        entry = registry.LEARNERS.get(str(ev.get("kind")))
        if entry is not None and entry.fold_phrase is not None:
            s += f" | {entry.fold_phrase(ev)}"
    record = selection.get("abstain")
    phrase = abstain_line(record) if record else ""
    return f"{s} | {phrase}" if phrase else s
